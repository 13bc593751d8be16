"""Italian words for the rules that need them (memory_sdk/lexicons/__init__.py)."""

from memory_sdk.lexicons import Lexicon, kinship, negation, words

LEXICON = Lexicon(
    code="it",
    function_words=words(
        "il lo la l i gli le un uno una dell dall nell sull all coll e o ma di del della dei degli delle in nel "
        "nella a al alla da "
        "dal dalla con su "
        "sul per tra fra che se io mi me mio mia miei mie noi ci nostro nostra tu ti tuo tua voi lui "
        "lei loro suo sua "
        "questo questa quello quella molto piu meno ha ho hanno abbiamo e sono era essere non si come quando dove "
        "anche gia ancora"
    ),
    markers=words(
        "abito abita lavoro lavora trasferito trasferita piace sono vado ieri oggi settimana scorsa "
        "prossima adesso amico amica famiglia iniziato"
    ),
    first_person=words("io mi me mio mia miei mie"),
    speaker_labels=words("io"),
    we=words("noi ci nostro nostra nostri nostre"),
    other_person=words("tu ti te tuo tua voi lui lei loro gli suo sua"),
    possessives=words("mio mia miei mie nostro nostra nostri nostre"),
    # "non", "non ... più"; "mai" alone is a habit ("non salto mai la corsa" is caught by "non", on purpose:
    # Italian needs "non" for "never", so such a habit reads as negated: the rules only use this to refuse a NOOP).
    negation=negation(r" (?:non|piu non|nessun|nessuna) "),
    # Addressed to the assistant's memory or instructions (Lexicon.instructions).
    instructions=negation(
        r" (?:ignora|ignorate|ignori|dimentica|dimenticate|dimentichi) (?:tutte |tutti |tutto |le |i |la |il"
        r" |tue |sue |mie |)(?:istruzioni|regole|memorie?|fatti|tutto|dove|che|chi) |"
        r" (?:cancella|cancellate|elimina|eliminate) (?:tutte |tutti |le |i |la |il |tua |sua |mia"
        r" |)(?:memorie?|fatti|dati|tutto) |"
        r" nuove istruzioni "
    ),
    chatter=words(
        "dice saluta ringrazia ciao buongiorno buonasera salve grazie mille prego ok va bene perfetto "
        "arrivederci a presto"
    ),
    answers=words("si no certo esatto vero"),
    # Only the words of the shared kinship table that are Italian too (pipeline/relatives.py).
    kinship=kinship(mom="madre", dad="padre, papa"),
)
