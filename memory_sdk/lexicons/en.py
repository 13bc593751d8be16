"""English words for the rules that need them (memory_sdk/lexicons/__init__.py)."""

from memory_sdk.lexicons import Lexicon, kinship, negation, phrase, words

LEXICON = Lexicon(
    code="en",
    function_words=words(
        "the a an and or but if of to in on at by for with from into onto about over after before because while "
        "until than then there here this that these those is are was were be been being am has have "
        "had do does did "
        "will would can could should shall may might must not no i me my mine myself we us our ours you your yours "
        "he him his she her hers it its they them their theirs who whom which what when where why how "
        "also very just "
        "so too all any some one out up down off s t ll ve re d m"
    ),
    markers=words(
        "live lives lived work works worked moved move love like likes got went going get really "
        "think know want started start new last next week yesterday today just my family friend "
        "friends"
    ),
    first_person=words("i me my mine myself im"),
    speaker_labels=words("i me my myself mine"),
    we=words("we us our ours ourselves"),
    other_person=words("you your yours he him his she her hers they them their theirs"),
    possessives=words("my our"),
    # "isn't", "no longer", "not anymore", "doesn't ... any more"; never "never" (a habit: "I never miss my run").
    negation=negation(r" (?:not|isn t|aren t|wasn t|weren t|don t|doesn t|didn t|won t|no longer|n t) "),
    # Addressed to the assistant's memory or instructions (Lexicon.instructions).
    instructions=negation(
        r" (?:ignore|disregard|override|forget) (?:all |any |every |the |your |my |of |previous |prior |above"
        r" |earlier |former"
        r" )*(?:instructions?|prompts?|rules?|memor(?:y|ies)|facts?|everything|what|where|that|who|about|it all) |"
        r" (?:delete|erase|wipe|remove|clear) (?:all |every |the |your |my |of |this |these |stored |saved"
        r" )*(?:memor(?:y|ies)|facts?|records?|data|everything) |"
        r" new instructions "
    ),
    calendar=words(
        "january february march april may june july august september october november december "
        "jan feb mar apr jun jul aug sep sept oct nov dec "
        "monday tuesday wednesday thursday friday saturday sunday christmas easter"
    ),
    chatter=words(
        "say says said greets greeted thanks thanked asks asked hi hello hey hiya yo good morning "
        "afternoon evening night thanks thank you thx ty welcome bye see ya later "
        "lol btw cool nice great sure np alright fine ok okay everyone everybody guys folks all how are have has "
        "been long time no it s its ages whats what up doing going"
    ),
    answers=words("yes no yeah yep yup nope exactly true right totally"),
    greetings=words("hey hi hello thanks bye"),
    kinship=kinship(
        mom="mom, mother, mum, mommy",
        dad="dad, father, daddy",
        wife="wife",
        husband="husband",
        girlfriend="girlfriend",
        boyfriend="boyfriend",
        partner="partner",
        brother="brother",
        sister="sister",
        son="son",
        daughter="daughter",
        children="kids, children",
        grandmother="grandma, grandmother",
        grandfather="grandpa, grandfather",
        uncle="uncle",
        aunt="aunt",
        cousin="cousin",
        friend="friend, best friend",
        boss="boss",
        coworker="coworker, colleague",
    ),
    articles=words("the"),
    owner_links=words("of"),
    speaker_owners=words("mine me"),
    attribute_phrases=(
        ("lives_in", phrase(r"\b(?:lives?|resides)\s+in\s+(?:(?:the|a|an)\s+)?(?P<object>\w+)")),
        ("lives_in", phrase(r"\b(?:moved|relocated)(?:\s+back)?\s+to\s+(?:(?:the|a|an)\s+)?(?P<object>\w+)")),
        ("employer", phrase(r"\b(?:works?|working)\s+(?:at|for)\s+(?:(?:the|a|an)\s+)?(?P<object>\w+)")),
        ("employer", phrase(r"\bjoined\s+(?:(?:the|a|an)\s+)?(?P<object>\w+)")),
        (
            "employer",
            phrase(
                r"\bstarted\s+(?:(?:a\s+)?(?:new\s+)?(?:job|position|role)\s+)?(?:at|with)\s+"
                r"(?:(?:the|a|an)\s+)?(?P<object>\w+)"
            ),
        ),
        ("employer", phrase(r"\bjob\s+(?:at|with)\s+(?:(?:the|a|an)\s+)?(?P<object>\w+)")),
    ),
    past_habit=phrase(r"\bused\s+to\b"),
    title=phrase(r"\bas\s+an?\s+\w+"),
    # "isn't" folds to "isn t", hence the lone "t"; "anymore" only strengthens a negation already there.
    denials=words("not never nor neither nobody nothing t"),
    denial_pairs=frozenset({("no", "longer"), ("no", "more"), ("no", "one")}),
)
