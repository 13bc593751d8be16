"""Portuguese words for the rules that need them (memory_sdk/lexicons/__init__.py)."""

from memory_sdk.lexicons import Lexicon, kinship, negation, phrase, words

LEXICON = Lexicon(
    code="pt",
    function_words=words(
        "o a os as um uma uns umas e ou mas de do da dos das em no na nos nas num numa por pelo pela pelos pelas "
        "para pra pro com sem sobre ate entre que se eu me mim meu minha meus minhas comigo nos nosso "
        "nossa voce vc "
        "voces ele ela eles elas dele dela seu sua seus suas isso isto este esta esse essa aquele aquela muito "
        "muita tem foi ser sao estao era ter nao sim como quando onde tambem tb bem ainda ja mais menos"
    ),
    markers=words(
        "moro mora morava trabalho trabalha mudei mudou gosto gosta fui vou estou esta ontem semana "
        "passada hoje agora amigo amiga familia comecei"
    ),
    first_person=words("eu me mim meu minha meus minhas comigo"),
    speaker_labels=words("eu mim meu minha comigo"),
    we=words("nos nosso nossa nossos nossas conosco"),
    other_person=words("voce voces vc tu te ti ela ele elas eles dela dele delas deles"),
    possessives=words("meu minha meus minhas nosso nossa nossos nossas"),
    # "não ... (mais)", "já não", "nunca mais"; "nunca" alone is a habit ("nunca perco minha corrida").
    negation=negation(r" (?:nao|ja nao|nunca mais|nem) "),
    # Addressed to the assistant's memory or instructions (Lexicon.instructions).
    instructions=negation(
        r" (?:ignore|ignora|ignorem|desconsidere|desconsidera|esqueca|esquece|esquecam) (?:todas |todos |as"
        r" |os |a |o |suas |seus |tuas |teus |minhas |meus"
        r" |)(?:instrucoes|regras|memorias?|fatos|tudo|onde|que|quem|sobre) |"
        r" (?:apague|apaga|delete|deleta|remova|remove|limpe|limpa) (?:todas |todos |as |os |a |o |sua |seu"
        r" |minha |meu |)(?:memorias?|fatos|registros|dados|tudo) |"
        r" novas instrucoes "
    ),
    chatter=words(
        "diz disse cumprimenta cumprimentou agradece agradeceu oi ola opa eai e ai bom boa bons boas "
        "dia dias tarde tardes noite noites tudo bem beleza blz suave "
        "tranquilo valeu vlw obrigado obrigada obg brigado brigada de nada tchau ate logo mais ok certo claro show "
        "gente pessoal galera todos como vai voce vc voces que"
    ),
    answers=words("sim nao verdade exato exatamente isso claro"),
    greetings=words("oi ola valeu obrigado obrigada tchau"),
    kinship=kinship(
        mom="mae, mamae, mama",
        dad="pai, papai, papa",
        wife="esposa",
        husband="marido, esposo",
        girlfriend="namorada",
        boyfriend="namorado",
        partner="parceiro, parceira, companheiro, companheira",
        brother="irmao",
        sister="irma",
        son="filho",
        daughter="filha",
        children="filhos",
        grandmother="avo, vovo",
        uncle="tio",
        aunt="tia",
        cousin="primo, prima",
        friend="amigo, amiga, melhor amigo, melhor amiga",
        boss="chefe",
        coworker="colega",
    ),
    articles=words("o a os as"),
    owner_links=words("do da dos das de"),
    speaker_owners=words("mim meu minha"),
    attribute_phrases=(
        (
            "lives_in",
            phrase(
                r"\b(?:mora|moro|moram|moramos|vive|vivo|vivem|reside|resido|residem)\s+(?:em|no|na|nos|nas)\s+"
                r"(?:(?:o|a|os|as)\s+)?(?P<object>\w+)"
            ),
        ),
        (
            "lives_in",
            phrase(
                r"\b(?:voltou|voltei|voltaram|foi|fui|foram|passou|passei|veio|vim)\s+(?:a\s+)?morar\s+"
                r"(?:em|no|na|nos|nas)\s+(?:(?:o|a|os|as)\s+)?(?P<object>\w+)"
            ),
        ),
        (
            "lives_in",
            phrase(
                r"\b(?:mudou|mudei|mudeu|mudaram|mudamos|mudo)(?:\s+de\s+volta)?\s+(?:pra|para|pro|a|em)\s+"
                r"(?:(?:o|a|os|as)\s+)?(?P<object>\w+)"
            ),
        ),
        (
            "employer",
            phrase(
                r"\b(?:trabalha|trabalho|trabalham|trabalhamos|trabalhando)\s+(?:na|no|em|pela|pelo|para)\s+"
                r"(?:(?:o|a|os|as)\s+)?(?P<object>\w+)"
            ),
        ),
        (
            "employer",
            phrase(
                r"\b(?:comecei|comecou|entrei|entrou)\s+(?:(?:um\s+)?(?:emprego|trabalho)\s+(?:novo\s+)?)?"
                r"(?:na|no|em)\s+(?:(?:o|a|os|as)\s+)?(?P<object>\w+)"
            ),
        ),
        ("employer", phrase(r"\bemprego\s+(?:novo\s+)?(?:na|no)\s+(?:(?:o|a|os|as)\s+)?(?P<object>\w+)")),
    ),
    past_habit=phrase(r"\b(?:costumava|costumavam)\b"),
    title=phrase(r"\bcomo\s+\w+"),
    # Not "no" ("mora no Rio"), "nada" ("Ana nada bem": she swims) nor "mais", which only strengthens.
    denials=words("nao nunca nem jamais nenhum nenhuma ninguem"),
)
