"""English words for the rules that need them (memory_sdk/lexicons/__init__.py)."""

from memory_sdk.lexicons import Lexicon, negation, words

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
    we=words("we us our ours ourselves"),
    other_person=words("you your yours he him his she her hers they them their theirs"),
    possessives=words("my our"),
    # "isn't", "no longer", "not anymore", "doesn't ... any more"; never "never" (a habit: "I never miss my run").
    negation=negation(r" (?:not|isn t|aren t|wasn t|weren t|don t|doesn t|didn t|won t|no longer|n t) "),
    chatter=words(
        "say says said greets greeted thanks thanked asks asked hi hello hey hiya yo good morning "
        "afternoon evening night thanks thank you thx ty welcome bye see ya later "
        "lol btw cool nice great sure np alright fine ok okay everyone everybody guys folks all how are have has "
        "been long time no it s its ages whats what up doing going"
    ),
    answers=words("yes no yeah yep yup nope exactly true right totally"),
)
