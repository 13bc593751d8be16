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
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rapidfuzz import fuzz

from memory_sdk.lexicons import ALL_FUNCTION_WORDS, Lexicon, detect_language
from memory_sdk.llm.schemas import ExtractedFact
from memory_sdk.pipeline.guards import Known, Name, copied_from_memory, evidence_score, ground_fact, source_sentence
from memory_sdk.results import AdjustmentRule
from memory_sdk.text import is_said, normalise_alias

__all__ = [
    "FACT_CHECKS",
    "FactCheck",
    "FactContext",
    "drop_reason",
    "greeting",
    "invented_words",
    "memory_words",
    "not_grounded",
    "question",
    "wrong_speaker",
]

# A fact is invented when none of its content words (two at least) is said and no number of it is: a capable
# model's paraphrase keeps some ("Emanuele inizia a lavorare in TIM domani" for "Non vedo l'ora di cominciare in
# TIM domani!": one of three), an invented reply none ("Caroline wants to become a software engineer" for "I'm
# thinking about counseling"). Stricter shares (half the words said) dropped correct paraphrases of the probes.
MIN_UNSAID = 2
# A new fact with this many words of the known memory that the message does not say, and fewer of the message's,
# restates memory (`memory_words`).
MIN_MEMORY_WORDS = 2
# A fact that is the message's question copied: rapidfuzz partial_ratio (0-100) of the fact against the question.
QUESTION_COPY_RATIO = 85.0
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
    return invented_words(fact, ctx)


def invented_words(fact: ExtractedFact, ctx: FactContext) -> str | None:
    """Why none of the fact's content words is said in the message or the recent messages, or None.

    Content words are the fact's words of 3+ letters that are no name of the answer and no function word of the
    message's language; a word is said when a word of the texts starts with its first text.CONTENT_PREFIX letters or
    spells it otherwise (text.is_said). The known memory does not count: a fact may name a known entity (a name,
    left out), but its other words must come from what was said. Words are compared only when the fact is in the
    message's language (`lexicons.detect_language`): a model may write its facts in English for a message in
    Portuguese, and no word of one is a word of the other.
    """
    written_in = detect_language(fact.text)
    if written_in is not None and written_in != ctx.lexicon_code:
        return None  # a fact written in another language than the message ("Rafael's birthday" for "aniversário")
    words = sorted(_content_words(fact.text, ctx))
    if len(words) < MIN_UNSAID:
        return None
    said = _said_words("\n".join([ctx.message, *ctx.recent]))
    if any(word.isdigit() and word in said for word in normalise_alias(fact.text).split()):
        return None  # "Nico ist 30 Jahre alt" for "Endlich 30!": the number is the message's
    unsaid = [word for word in words if not is_said(word, said)]
    if len(unsaid) < len(words):
        return None
    return f"{len(unsaid)} of its {len(words)} content words are said nowhere ({', '.join(unsaid)})"


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
    written_in = detect_language(fact.text)
    if written_in is not None and written_in != ctx.lexicon_code:
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
    for name in ctx.names[1:]:
        if not name.person:
            continue
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


def _without_label(text: str) -> str:
    """A chat line's text without its "Name:" label."""
    head, colon, rest = text.partition(":")
    return rest.strip() if colon and 0 < len(head.split()) <= 3 and rest.strip() else text


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


def _said_words(text: str) -> frozenset[str]:
    return frozenset(normalise_alias(text).split())


def _evidence_sentence(fact: ExtractedFact, message: str) -> str:
    """The sentence of the message the fact comes from: its evidence's, else the one it most resembles."""
    sentences = [s.strip() for s in _SENTENCE.findall(message) if s.strip()] or [message]
    evidence = fact.evidence or ""
    if len(normalise_alias(evidence)) >= 8:
        return str(max(sentences, key=lambda sentence: evidence_score(evidence, sentence)))
    return source_sentence(fact.text, message)
