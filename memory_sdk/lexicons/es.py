"""Spanish words for the rules that need them (memory_sdk/lexicons/__init__.py)."""

from memory_sdk.lexicons import Lexicon, kinship, negation, phrase, words

LEXICON = Lexicon(
    code="es",
    function_words=words(
        "el la los las un una unos unas y o pero de del en al por para con sin sobre hasta entre que "
        "se yo me mi mis "
        "conmigo nosotros nosotras nuestro nuestra tu tus usted ustedes el ella ellos ellas su sus le "
        "les lo eso esto "
        "este esta ese esa muy mas menos tiene fue ser son estan era tener no si como cuando donde tambien bien "
        "todavia ya hay"
    ),
    markers=words(
        "vivo vive vivia trabajo trabaja mude mudo gusta fui voy estoy esta ayer semana pasada hoy "
        "ahora amigo amiga familia empece nos casamos"
    ),
    first_person=words("yo me mi mis conmigo"),
    speaker_labels=words("yo"),
    we=words("nosotros nosotras nos nuestro nuestra nuestros nuestras"),
    other_person=words("tu te ti usted ustedes el ella ellos ellas le les"),
    possessives=words("mi mis nuestro nuestra nuestros nuestras"),
    # "no", "ya no", "nunca más"; "nunca" alone is a habit.
    negation=negation(r" (?:no|ya no|nunca mas|ni) "),
    # Addressed to the assistant's memory or instructions (Lexicon.instructions).
    instructions=negation(
        r" (?:ignora|ignore|ignoren|olvida|olvide|olviden) (?:todas |todos |las |los |la |el |tus |sus |mis"
        r" |)(?:instrucciones|reglas|memorias?|hechos|todo|donde|que|quien|sobre) |"
        r" (?:borra|borre|elimina|elimine|limpia|limpie) (?:todas |todos |las |los |la |el |tu |su |mi"
        r" |)(?:memorias?|hechos|registros|datos|todo) |"
        r" nuevas instrucciones "
    ),
    chatter=words(
        "dice dijo saluda saludo agradece agradecio hola buenos buenas dias tardes noches gracias "
        "vale adios hasta luego muy ok bien que tal como estas todos"
    ),
    answers=words("si no vale claro exacto verdad"),
    kinship=kinship(
        mom="madre, mama",
        dad="padre, papa",
        wife="esposa",
        husband="marido, esposo",
        girlfriend="novia",
        boyfriend="novio",
        brother="hermano",
        sister="hermana",
        son="hijo",
        daughter="hija",
        children="hijos",
        grandmother="abuela",
        grandfather="abuelo",
        uncle="tio",
        aunt="tia",
        cousin="primo, prima",
        friend="amigo, amiga",
        boss="jefe",
        coworker="colega",
    ),
    articles=words("el la los las"),
    owner_links=words("de del"),
    speaker_owners=words("mio mia"),
    attribute_phrases=(
        ("lives_in", phrase(r"\b(?:vive|vivo|viven|reside|resido)\s+en\s+(?:(?:el|la)\s+)?(?P<object>\w+)")),
        ("lives_in", phrase(r"\b(?:mudo|mudaron|mudamos)\s+(?:a|al)\s+(?:(?:el|la)\s+)?(?P<object>\w+)")),
        (
            "employer",
            phrase(r"\b(?:trabaja|trabajo|trabajan|trabajando)\s+(?:en|para)\s+(?:(?:el|la)\s+)?(?P<object>\w+)"),
        ),
        ("employer", phrase(r"\b(?:empece|empezo)\s+en\s+(?:(?:el|la)\s+)?(?P<object>\w+)")),
    ),
    past_habit=phrase(r"\b(?:solia|solian)\b"),
    title=phrase(r"\bcomo\s+\w+"),
    # "no" alone ("No trabaja") is missed on purpose: it is a common Portuguese word (`Lexicon.denials`).
    denials=words("jamas tampoco nadie ningun ninguna"),
    denial_pairs=frozenset({("ya", "no")}),
)
