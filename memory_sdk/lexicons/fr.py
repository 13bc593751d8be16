"""French words for the rules that need them (memory_sdk/lexicons/__init__.py)."""

from memory_sdk.lexicons import Lexicon, kinship, negation, words

LEXICON = Lexicon(
    code="fr",
    function_words=words(
        "le la les l un une des du de d et ou mais en dans au aux a par pour avec sans sur sous chez "
        "entre que qu qui "
        "je j me m moi mon ma mes nous notre nos tu te toi ton ta tes vous votre vos il elle ils "
        "elles lui leur leurs "
        "son sa ses ce cet cette ces est sont etait ai as avons avez ont suis es sommes etes ne pas "
        "plus tres aussi "
        "bien deja encore on y"
    ),
    markers=words(
        "habite habitait travaille demenage aime suis vais hier aujourd hui semaine derniere "
        "prochaine maintenant ami amie famille commence"
    ),
    first_person=words("je j me m moi mon ma mes"),
    speaker_labels=words("je moi"),
    we=words("nous notre nos"),
    other_person=words("tu te toi ton ta tes vous votre vos il elle ils elles lui leur leurs"),
    possessives=words("mon ma mes notre nos"),
    # "ne ... pas", "ne ... plus", "n'... plus"; "ne ... jamais" is a habit ("je ne rate jamais mon footing").
    negation=negation(r" (?:ne|n) (?:\w+ ){1,3}?(?:pas|plus|aucun|aucune)( |$)| (?:pas|plus) (?:de|d) "),
    # Addressed to the assistant's memory or instructions (Lexicon.instructions).
    instructions=negation(
        r" (?:ignore|ignorez|oublie|oubliez) (?:toutes |tous |tout |les |la |le |tes |vos |mes |instructions"
        r" |)(?:instructions|regles|memoires?|faits|tout|ou|que|qui|ce) |"
        r" (?:efface|effacez|supprime|supprimez) (?:toutes |tous |les |la |le |ta |votre |ma"
        r" |)(?:memoires?|faits|donnees|tout) |"
        r" nouvelles instructions "
    ),
    chatter=words(
        "dit salue remercie salut bonjour bonsoir coucou merci beaucoup ok d accord super cool a plus "
        "tard bientot bonne nuit"
    ),
    answers=words("oui non ouais exactement vrai carrement"),
    # Only the words of the shared kinship table that are French too (pipeline/relatives.py).
    kinship=kinship(dad="papa"),
)
