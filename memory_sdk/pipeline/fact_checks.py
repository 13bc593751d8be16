"""The checks every extracted fact passes before it may change memory: an ordered list, each a pure function.

The guard contract (docs/write-pipeline.md, "The guard contract"): a check may only DROP a fact it can show is not
something the message says, and says why; it never rewrites a fact's text, never moves it to another subject and
never gives it an attribute. The pipeline records each drop on `result.adjustments`.

`FACT_CHECKS` is the list, in the order they run; the first that finds a reason drops the fact:

- question       the fact is a question, or copies the message's question: it states nothing.
- greeting       every word of the fact is a greeting, a thanks or a filler of the message's language.
- not_grounded   the fact comes from the recent messages or the memory rather than the message (`guards.ground_fact`),
                 or none of its content words is in the message or the recent messages: an invented
                 "wants to become a software engineer" for "I'm thinking about counseling".
- copied         it names what only the known memory says, or says of its subject what memory says of another
                 (`guards.copied_from_memory`), or a new fact says more in memory's words than in the message's.
- wrong_speaker  it puts on another person a sentence in which the speaker speaks of themselves alone
                 ("I went to a support group" stored on the other speaker), or on the speaker a sentence about
                 another person ("O Ricardo Gomes mora em São Paulo" as "Rafael mora em São Paulo"); needs the
                 language's pronouns.

Language-neutral checks run for every message; a check that needs words (greeting, wrong_speaker) reads them from the
message's lexicon and does nothing without one.

A fact that passes them all may still be a chat line kept as written (`chat_line`): it is stored, marked
`source_context="chat_line"`, and ends no other fact (guards/decisions.py).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from rapidfuzz import fuzz

from memory_sdk.lexicons import ALL_FUNCTION_WORDS, Lexicon, detect_language, lexicon_for
from memory_sdk.llm.schemas import ExtractedFact
from memory_sdk.pipeline.guards import (
    Known,
    Name,
    copied_from_memory,
    evidence_score,
    ground_fact,
    names_subject,
    source_sentence,
)
from memory_sdk.results import AdjustmentRule
from memory_sdk.text import is_said, normalise_alias, without_words

__all__ = [
    "FACT_CHECKS",
    "FactCheck",
    "FactContext",
    "chat_line",
    "drop_reason",
    "greeting",
    "in_message_language",
    "invented_name",
    "invented_words",
    "memory_words",
    "not_grounded",
    "profile_drop_reason",
    "question",
    "turn_statement",
    "wrong_speaker",
]

# A fact is invented when none of its content words (two at least) is said and no number of it is: a capable
# model's paraphrase keeps some ("Emanuele inizia a lavorare in TIM domani" for "Non vedo l'ora di cominciare in
# TIM domani!": one of three), an invented reply none ("Caroline wants to become a software engineer" for "I'm
# thinking about counseling"). Stricter shares (half the words said) dropped correct paraphrases of the probes.
MIN_UNSAID = 2
# A long fact is invented too when at least this many of its content words are unsaid and fewer than a quarter are
# said: an invented reply borrows a word or two of the message ("I'm working on a new app for a client. It's a bit
# challenging, but I'm excited to see how it turns out." for "Hey Jon! Good to see you. What's up? Anything new?",
# LoCoMo conv-30 D1:1, 1.5B model: "new" and "see" said, seven words not). The probe suite's paraphrases say at
# least a third of their words (benchmarks/probes.py: 282 untouched with this rule).
MOSTLY_UNSAID = 4
SAID_SHARE_BELOW = 0.25
# A new fact with this many words of the known memory that the message does not say, and fewer of the message's,
# restates memory (`memory_words`).
MIN_MEMORY_WORDS = 2
# A fact that is the message's question copied: rapidfuzz partial_ratio (0-100) of the fact against the question.
QUESTION_COPY_RATIO = 85.0
# A fact of at least this many characters (words are no unit in every script), copied from the message (rapidfuzz
# partial_ratio) without its subject's name, is a chat line (`chat_line`).
UNNAMED_COPY_CHARS = 20
UNNAMED_COPY_RATIO = 90.0
# A turn copied whole is its statement's only record (`turn_statement`) when the sentences of it that are no
# question hold at least this many content words: "Long time no see!" (3) is no statement, "I love action and sci-fi
# movies, the effects are so cool!" (6) is.
MIN_STATEMENT_WORDS = 4
_WORD = re.compile(r"[^\W_]+")
_SENTENCE = re.compile(r"[^.!?\n]+[.!?]*")


@dataclass(frozen=True)
class FactContext:
    """What the checks read: the message and what surrounds it, the names the answer uses and the lexicon."""

    message: str
    recent: Sequence[str]
    known_text: str  # the known memory the informed call was shown, as one text
    known: Sequence[Known]
    names: Sequence[Name]  # names[0] is the speaker
    people: frozenset[str]  # normalised forms of the persons of the write (participants, person entities)
    lexicon: Lexicon

    @property
    def speaker(self) -> str:
        return self.names[0].name

    @property
    def lexicon_code(self) -> str | None:
        """The message's language, None when no lexicon holds it."""
        return self.lexicon.code or None


FactCheck = Callable[[ExtractedFact, FactContext], "str | None"]


def question(fact: ExtractedFact, ctx: FactContext) -> str | None:
    """Why the fact is a question rather than a statement: it ends with a question mark, or it copies a question of
    the message ("Melanie: What now?"). Language-neutral: the mark is the same in every language we write."""
    text = fact.text.strip()
    if text.endswith(("?", "？")):
        return "the fact is a question"
    body = normalise_alias(_without_label(text))
    for sentence in _SENTENCE.findall(ctx.message):
        asked = sentence.strip()
        if asked.endswith("?") and fuzz.ratio(body, normalise_alias(_without_label(asked))) >= QUESTION_COPY_RATIO:
            return f"the fact copies the message's question {asked!r}"
    return None


def turn_statement(fact: ExtractedFact, ctx: FactContext) -> str | None:
    """Why a fact dropped as a question is the speaker's turn copied with a statement in it, or None: its subject is
    the speaker, it copies the message (UNNAMED_COPY_RATIO, without a "Name:" label), and its sentences that are no
    question hold MIN_STATEMENT_WORDS content words or more (no names, function or chatter words).

    post_extraction keeps such a fact, marked a chat line, when it would be the answer's only record of the message
    (`guard_facts`). Language-neutral but for the function and chatter words of the message's lexicon. Measured with
    the 1.5B model on LoCoMo: "Hi Deb! Good to meet you! Yeah, my week's been busy. I finished an electrical
    engineering project last week [...] Anything fun happening for you?" was the answer's one fact, dropped as a
    question, and the turn, a gold observation, left nothing in memory. A capable model's facts are no questions
    (the probe suite), so this never applies to them."""
    if normalise_alias(fact.subject) not in ctx.names[0].forms | {normalise_alias(ctx.speaker)}:
        return None
    text = normalise_alias(_without_label(fact.text))
    if len(text) < UNNAMED_COPY_CHARS or fuzz.partial_ratio(text, normalise_alias(ctx.message)) < UNNAMED_COPY_RATIO:
        return None
    said = " ".join(s for s in _SENTENCE.findall(_without_label(fact.text)) if not s.strip().endswith(("?", "？")))
    words = _content_words(said, ctx) - ctx.lexicon.chatter
    if len(words) < MIN_STATEMENT_WORDS:
        return None
    return "the message copied, a statement with its question: the answer's only record of it, kept as said"


def greeting(fact: ExtractedFact, ctx: FactContext) -> str | None:
    """Why the fact says nothing but a greeting or thanks: each of its words is a name of the answer, a function
    word or a chatter word of the message's language ("Caroline says hi to Mel"). None without a lexicon."""
    words = _content_words(fact.text, ctx)
    if not ctx.lexicon.chatter or not words or words - ctx.lexicon.chatter:
        return None
    return "the fact holds only greetings, thanks or fillers"


def not_grounded(fact: ExtractedFact, ctx: FactContext) -> str | None:
    """Why the fact does not come from the message: `guards.ground_fact` places it elsewhere, or its content words
    are all unsaid (`invented_words`)."""
    grounding = ground_fact(fact, ctx.message, [*ctx.recent, ctx.known_text], ctx.names)
    if not grounding.kept:
        return grounding.why
    return invented_words(fact, ctx) or invented_name(fact, ctx)


def invented_words(fact: ExtractedFact, ctx: FactContext) -> str | None:
    """Why none of the fact's content words is said in the message or the recent messages (or, in a long fact,
    fewer than a quarter: MOSTLY_UNSAID), or None.

    Content words are the fact's words of 3+ letters that are no name of the answer and no function word of the
    message's language; a word is said when a word of the texts starts with its first text.CONTENT_PREFIX letters or
    spells it otherwise (text.is_said). The known memory does not count: a fact may name a known entity (a name,
    left out), but its other words must come from what was said. Words are compared only when the fact is in the
    message's language (`lexicons.detect_language`): a model may write its facts in English for a message in
    Portuguese, and no word of one is a word of the other.
    """
    if not in_message_language(fact.text, ctx):
        return None  # a fact written in another language than the message ("Rafael's birthday" for "aniversário")
    words = sorted(_content_words(fact.text, ctx))
    if len(words) < MIN_UNSAID:
        return None
    said = _said_words("\n".join([ctx.message, *ctx.recent]))
    if any(word.isdigit() and word in said for word in normalise_alias(fact.text).split()):
        return None  # "Nico ist 30 Jahre alt" for "Endlich 30!": the number is the message's
    unsaid = [word for word in words if not is_said(word, said)]
    share = 1 - len(unsaid) / len(words)
    if len(unsaid) < len(words) and not (len(unsaid) >= MOSTLY_UNSAID and share < SAID_SHARE_BELOW):
        return None
    return f"{len(unsaid)} of its {len(words)} content words are said nowhere ({', '.join(unsaid)})"


_CAPITALISED = re.compile(r"(?<![\w'’-])[^\W\d_a-z]\w*")


def invented_name(fact: ExtractedFact, ctx: FactContext) -> str | None:
    """Why the fact names someone or something that nothing the model was shown names, or None.

    A name is a capitalised word of the fact that opens no sentence and is no function word and no calendar word
    of the message's language; it is shown when the message, the recent messages or the known memory say it
    (text.is_said: "Lisbon" for "Lisboa"), or it is the speaker's, a participant's or an initial of an acronym the
    message says ("New York" for "NYC"). A capable model copies names; a model that obeys "forget where I live"
    writes "Rafael lives in Atlantis", whose every other word the message may say. Skipped for a fact in another
    language than the message's, or when the message's language is not known (a translated name: "Munich" for
    "München"); in a language that capitalises its
    nouns only the answer's entity names are read as names.
    """
    same = ctx.lexicon_code is not None and in_message_language(fact.text, ctx)
    if not same and ctx.lexicon.instruction(ctx.message) is None:
        return None  # (a message that addresses the assistant gets no such benefit of the doubt)
    written_in = detect_language(fact.text)
    lexicon = ctx.lexicon
    # Capitals are read in the fact's own language: an English fact for a German message capitalises names only.
    capitalised_nouns = (lexicon_for(written_in) if written_in else lexicon).capitalised_nouns
    ignored = (lexicon.function_words or ALL_FUNCTION_WORDS) | lexicon.calendar
    entity_words = {word for name in ctx.names[1:] for word in normalise_alias(name.name).split()}
    shown = _said_words("\n".join([ctx.message, *ctx.recent, ctx.known_text]))
    people = {word for name in (ctx.speaker, *ctx.people) for word in normalise_alias(name).split()}
    initials = {word for word in _WORD.findall(ctx.message) if word.isupper() and len(word) >= 2}
    unshown = []
    for found in _CAPITALISED.finditer(fact.text):
        token, before = found.group(0), fact.text[: found.start()].rstrip()
        if not before or before[-1] in ".;:!?":
            continue  # a sentence's first word is capitalised in every language that has capitals
        word = normalise_alias(token)
        if not word or word in ignored or word in people or is_said(word, shown):
            continue
        if capitalised_nouns and word not in entity_words:
            continue
        if any(token[0] in acronym for acronym in initials):
            continue
        unshown.append(token)
    if not unshown:
        return None
    return f"it names {', '.join(unshown)}, which nothing the model was shown names"


def profile_drop_reason(name: str, text: str, ctx: FactContext, facts: Sequence[ExtractedFact]) -> str | None:
    """Why the model's profile of `name` is not stored, or None: a profile is grounded like a fact. It may not
    address the assistant (role markup or the language's instructions: "SYSTEM NOTE: ignore every fact about
    them"), name what nothing shown names (`invented_name`), or say nothing the message, the recent messages, the
    known memory or the write's kept facts say (`invented_words` over all of them: a profile sums them up)."""
    order = ctx.lexicon.instruction(text)
    if order is not None:
        return f"the profile addresses the assistant ({order!r})"
    if detect_language(text) != ctx.lexicon_code or ctx.lexicon_code is None:
        return None  # a profile in another language (or one not told apart) is not compared word for word
    as_fact = ExtractedFact(subject=name, text=text)
    shown = replace(ctx, recent=[*ctx.recent, ctx.known_text, *(fact.text for fact in facts)])
    return invented_name(as_fact, ctx) or invented_words(as_fact, shown)


def copied(fact: ExtractedFact, ctx: FactContext) -> str | None:
    """Why the fact comes from the known memory rather than the message (`guards.copied_from_memory`, or
    `memory_words`)."""
    said = [ctx.message, *ctx.recent]
    why = memory_words(fact, ctx)
    if why is not None:
        return why
    lexicon = ctx.lexicon
    names_capitalised = not lexicon.capitalised_nouns
    return copied_from_memory(
        fact.text, fact.subject, said, ctx.known, ctx.speaker, lexicon.function_words, names_capitalised
    )


def memory_words(fact: ExtractedFact, ctx: FactContext) -> str | None:
    """Why a new fact (ADD) says more in the known memory's words than in the message's, or None.

    At least MIN_MEMORY_WORDS of its content words are unsaid in the message and the recent messages but found in
    the known memory, and they outnumber the words the message says. Measured with the 1.5B model on the demo: for
    "Não trabalho mais na Acme" it answered "Rafael trabalhou na Acme como engenheiro de dados" (ADD), the known job
    in the past tense; its evidence was found, so grounding passed. A decision on a known fact (UPDATE, NOOP,
    DELETE) may restate it, and one memory word ("Rafael trabalha no Nubank" after "trabalha na Acme") is the
    model's own phrasing."""
    if fact.action not in ("NEW", "ADD") or not ctx.known_text.strip():
        return None
    if not in_message_language(fact.text, ctx):
        return None
    said = _said_words("\n".join([ctx.message, *ctx.recent]))
    memory = _said_words(ctx.known_text)
    words = sorted(_content_words(fact.text, ctx))
    from_memory = [word for word in words if not is_said(word, said) and is_said(word, memory)]
    in_message = [word for word in words if is_said(word, said)]
    if len(from_memory) < MIN_MEMORY_WORDS or len(from_memory) <= len(in_message):
        return None
    return f"{len(from_memory)} of its words are the known memory's, not the message's ({', '.join(from_memory)})"


def wrong_speaker(fact: ExtractedFact, ctx: FactContext) -> str | None:
    """Why the fact puts the speaker's own words on another person, or None.

    The fact is about another person of the write, and its source sentence is the speaker speaking of themselves
    alone: a first-person pronoun of the language (not a possessive: "my niece moved" is about the niece), no
    second- or third-person pronoun, and no form or prefix of that person's name. Measured with a 1.5B model on
    LoCoMo: Caroline's "I went to a support group yesterday" stored on Melanie, whom the message only greeted.
    """
    lexicon = ctx.lexicon
    pronouns = lexicon.first_person - lexicon.possessives
    subject = normalise_alias(fact.subject)
    if not pronouns:
        return None
    if subject == normalise_alias(ctx.speaker):
        return _another_persons(fact, ctx)
    if subject not in ctx.people:
        return None
    sentence = _evidence_sentence(fact, ctx.message)
    words = set(normalise_alias(sentence).split())
    if words.isdisjoint(pronouns) or not words.isdisjoint(lexicon.other_person):
        return None
    forms = next((name.forms for name in ctx.names if normalise_alias(name.name) == subject), frozenset({subject}))
    name_words = {word for form in forms for word in form.split()}
    if any(word in name_words or (len(word) >= 3 and any(n.startswith(word) for n in name_words)) for word in words):
        return None  # the sentence names the person ("Mel" for Melanie)
    return f"{sentence!r} is the speaker speaking of themselves, not of {fact.subject!r}"


def _another_persons(fact: ExtractedFact, ctx: FactContext) -> str | None:
    """Why a fact the model gave the speaker comes from a sentence about another person, or None: the sentence
    starts with that person's name (after at most one function word: "O Ricardo Gomes mora em São Paulo"), not as
    the one addressed ("Ricardo, moro em São Paulo agora"), and no word of it is the first person, singular or
    plural ("Ricardo e eu", "Lena und ich", "Tom and we"). Measured with the 1.5B model on the demo: "O Ricardo
    Gomes mora em São Paulo" and "Ricardo se mudou pra Austin" stored as "Rafael mora em São Paulo" and "Rafael se
    mudou pra Austin"."""
    sentence = _evidence_sentence(fact, ctx.message)
    words = normalise_alias(sentence).split()
    lexicon = ctx.lexicon
    if not words or not set(words).isdisjoint(lexicon.first_person | lexicon.we):
        return None
    head = words[1:] if words[0] in lexicon.function_words else words
    speaker_forms = ctx.names[0].forms | {normalise_alias(ctx.speaker)}
    for name in ctx.names[1:]:
        if not name.person or not name.forms.isdisjoint(speaker_forms):
            continue  # the speaker named as a third person ("A Ana mora em Lisboa", said by Ana)
        for form in name.forms:
            first = form.split()
            if head[: len(first)] == first or (head and head[0] == first[0] and len(head[0]) >= 3):
                before_comma = normalise_alias(sentence.split(",", 1)[0]).split()
                if "," in sentence and len(before_comma) <= len(words) - len(head) + len(first):
                    return None  # "Ricardo, ...": Ricardo is spoken to
                return f"{sentence!r} is about {name.name!r}, not the speaker"
    return None


FACT_CHECKS: tuple[tuple[AdjustmentRule, FactCheck], ...] = (
    ("question", question),
    ("greeting", greeting),
    ("not_grounded", not_grounded),
    ("copied", copied),
    ("wrong_speaker", wrong_speaker),
)


def drop_reason(fact: ExtractedFact, ctx: FactContext) -> tuple[AdjustmentRule, str] | None:
    """(rule, why) of the first check that drops the fact, or None when it passes them all."""
    for rule, check in FACT_CHECKS:
        why = check(fact, ctx)
        if why is not None:
            return rule, why
    return None


# Quoted spans of a fact (a title, a name, something said): their words are not the fact's own voice.
_QUOTED = re.compile(r"\"[^\"]*\"|“[^”]*”|„[^“”]*[“”]|«[^»]*»|‘[^’]*’|(?<!\w)'[^']*'(?!\w)")


def chat_line(fact: ExtractedFact, ctx: FactContext) -> str | None:
    """Why the fact is a chat line kept as written rather than a statement about its subject, or None: outside
    quotes and the names of the answer, it speaks in the first person of the message's language, a possessive
    aside ("I'm so excited to learn about Japanese culture", "Jon wants to teach others the joy dancing brings
    me"; not "Minha mãe mora em Natal", a relative's fact in the words it was said in).

    The prompt asks for facts that start with their subject's name and never say "I"; a capable model's facts never
    do (the probe suite: none marked). Measured with the 1.5B model on LoCoMo session 1 (conv-30, conv-41, conv-50):
    23 current facts were such lines, one of which held a gold observation. So the line is kept (it is what was
    said, and search finds the turn by it) but marked, and a marked fact ends no other fact (docs/decisions.md,
    "Chat lines are kept, marked"). Without a lexicon only the language-neutral test runs: the message copied
    without its subject's name (`_unnamed_copy`).
    """
    copied = _unnamed_copy(fact, ctx)
    if copied is not None:
        return copied
    pronouns = ctx.lexicon.first_person - ctx.lexicon.possessives  # "minha mãe mora em Natal" is about her
    if not pronouns:
        return None
    forms = sorted((form for name in ctx.names[1:] for form in name.forms if form), key=len, reverse=True)
    text = without_words(normalise_alias(_QUOTED.sub(" ", fact.text)), forms)
    said = sorted(set(text.split()) & pronouns)
    if not said:
        return None
    return f"it speaks in the first person ({', '.join(said)}): a chat line, not a statement about {fact.subject!r}"


def _unnamed_copy(fact: ExtractedFact, ctx: FactContext) -> str | None:
    """Why the fact is the message's words copied without its subject's name, or None. Language-neutral: a fact
    of UNNAMED_COPY_CHARS characters or more, found in the message (rapidfuzz partial_ratio >= UNNAMED_COPY_RATIO), in
    which no word of its subject's name or aliases appears ("Wow, they look great! Can't wait to see them rock
    the festival" stored on Gina). The prompt asks for facts that name their subject; such a line says nothing of
    whom it is about, and a line in the speaker's own voice without a pronoun ("Sounds great, Jon! Next Friday
    works") is one too. Measured with the 1.5B model on LoCoMo sessions 1-2 of conv-30 and conv-50: 29 of the 39
    junk facts were verbatim copies, most of them unmarked."""
    text = normalise_alias(fact.text)
    if len(text) < UNNAMED_COPY_CHARS:
        return None
    if names_subject(fact.text, fact.subject, ctx.names, ctx.speaker):
        return None
    message = normalise_alias(ctx.message)
    copy = fuzz.partial_ratio if len(text) <= len(message) else fuzz.ratio  # never the message inside the fact
    if copy(text, message) < UNNAMED_COPY_RATIO:
        return None
    return f"it copies the message without naming {fact.subject!r}: a chat line, not a statement about them"


def _without_label(text: str) -> str:
    """A chat line's text without its "Name:" label."""
    head, colon, rest = text.partition(":")
    return rest.strip() if colon and 0 < len(head.split()) <= 3 and rest.strip() else text


def in_message_language(text: str, ctx: FactContext) -> bool:
    """Whether `text` is written in the message's language, so that their words may be compared: its detected
    language (lexicons.detect_language); a text too short to detect is when it uses a function word of the
    message's language and none that only another language has. "Thiago Nogueira personally hired Clara Rezende"
    for a Portuguese message is not; "Rafael pilota aviões nos feriados" is."""
    written_in = detect_language(text)
    if written_in is not None or not ctx.lexicon_code:
        return written_in == ctx.lexicon_code
    own = ctx.lexicon.function_words
    words = set(normalise_alias(text).split())
    return not words.isdisjoint(own) and not (words - own) & ALL_FUNCTION_WORDS


def _content_words(text: str, ctx: FactContext) -> set[str]:
    """The fact's words of 3+ letters that are no name of the answer, no number and no function word: the message
    language's, or of every lexicon when the language is unknown (fewer content words: never a drop more)."""
    names = {word for name in ctx.names for form in name.forms for word in form.split()}
    function_words = ctx.lexicon.function_words or ALL_FUNCTION_WORDS
    found = set()
    for word in normalise_alias(text).split():
        if len(word) < 3 or word in function_words or word.isdigit():
            continue
        if word in names or (word.endswith("s") and word[:-1] in names):  # "Annas Mutter": a genitive
            continue
        found.add(word)
    return found


@functools.lru_cache(maxsize=64)
def _said_words(text: str) -> frozenset[str]:
    """Cached: every fact of a write is checked against the same message, recent messages and known memory."""
    return frozenset(normalise_alias(text).split())


def _evidence_sentence(fact: ExtractedFact, message: str) -> str:
    """The sentence of the message the fact comes from: its evidence's, else the one it most resembles."""
    sentences = [s.strip() for s in _SENTENCE.findall(message) if s.strip()] or [message]
    evidence = fact.evidence or ""
    if len(normalise_alias(evidence)) >= 8:
        return str(max(sentences, key=lambda sentence: evidence_score(evidence, sentence)))
    return source_sentence(fact.text, message)
