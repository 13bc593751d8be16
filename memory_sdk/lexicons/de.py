"""German words for the rules that need them (memory_sdk/lexicons/__init__.py)."""

from memory_sdk.lexicons import Lexicon, kinship, negation, words

LEXICON = Lexicon(
    code="de",
    capitalised_nouns=True,
    function_words=words(
        "der die das den dem des ein eine einen einem einer eines und oder aber in im an am auf aus "
        "bei mit nach von "
        "vom zu zum zur fur uber unter vor seit bis ist sind war waren bin bist hat habe hast haben "
        "hatte wird werden "
        "ich mich mir mein meine meinen meinem meiner wir uns unser unsere du dich dir dein er sie es "
        "ihr ihm ihn sein "
        "seine auch noch schon sehr nicht kein keine nur so wie wo wann was wer dass als"
    ),
    markers=words(
        "wohne wohnt arbeite arbeitet umgezogen gestern heute woche letzte nachste jetzt freund "
        "freundin familie mag habe"
    ),
    first_person=words("ich mich mir mein meine meinen meinem meiner meines"),
    speaker_labels=words("ich"),
    we=words("wir uns unser unsere unserem unseren unserer"),
    other_person=words("du dich dir dein deine er ihn ihm sein seine sie ihr ihre"),
    possessives=words("mein meine meinen meinem meiner meines unser unsere unseren unserem unserer"),
    # "nicht", "nicht mehr", "kein ... mehr"; "nie" alone is a habit ("ich verpasse nie meinen Lauf").
    negation=negation(r" (?:nicht|kein|keine|keinen|keinem|keiner|nie mehr|nicht mehr) "),
    # Addressed to the assistant's memory or instructions (Lexicon.instructions).
    instructions=negation(
        r" (?:ignoriere|ignorier|ignorieren|missachte|vergiss|vergesst|vergessen) (?:alle |alles |die |deine"
        r" |ihre |meine |bisherigen |vorherigen"
        r" |)(?:anweisungen|regeln|erinnerungen|speicher|fakten|alles|wo|dass|was|wer) |"
        r" (?:losche|losch|loschen|entferne) (?:alle |alles |die |deine |ihre |meine"
        r" |)(?:erinnerungen|speicher|fakten|daten|alles) |"
        r" neue anweisungen "
    ),
    chatter=words(
        "sagt sagte grusst begrusst dankt hallo hi servus moin guten morgen tag abend danke "
        "dankeschon bitte tschuss ok okay gut super ja"
    ),
    answers=words("ja nein genau stimmt klar"),
    # Only the words of the shared kinship table that are German too (pipeline/relatives.py).
    kinship=kinship(mom="mama", dad="papa"),
)
