"""Memory copies: facts the informed extraction took from the known memory it was shown instead of the message.

Under the guard contract (docs/write-pipeline.md, "The guard contract") these guards may only drop what the message
does not say: a known fact repeated word for word that the message does not say (`memory_copy`), or a fact that
names what only the memory says (`copied_from_memory`). When every fact of an answer is such a copy
(`all_from_memory`), the extraction asks once more without the memory. They never rewrite a fact.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rapidfuzz import fuzz

from memory_sdk.lexicons import NEUTRAL, Lexicon
from memory_sdk.llm.schemas import ExtractedFact
from memory_sdk.pipeline.guards.decisions import _TOPIC_PREFIX
from memory_sdk.pipeline.guards.grounding import _overlap, source_sentence
from memory_sdk.pipeline.guards.names import _STOPWORDS, Name, _content_words, _form
from memory_sdk.pipeline.state import KnownEntity
from memory_sdk.text import is_said, normalise_alias


@dataclass(frozen=True)
class Known:
    """What the informed call was shown about one known entity: the forms that name it, and its profile and fact
    texts as one text."""

    name: Name
    text: str
    # The text's folded words, read by every capitalised word of every fact of the write: folded once here.
    words: frozenset[str]

    @classmethod
    def of(cls, name: str, aliases: Iterable[str], text: str, speaker: str) -> Known:
        forms = frozenset(_form(form, speaker) for form in (name, *aliases)) - {""}
        return cls(Name(name, forms, person=False), text, _known_words(text))

    @classmethod
    def shown(cls, entities: Iterable[KnownEntity], speaker: str) -> list[Known]:
        """What the informed call was shown (pre_retrieval fits a part of it to the budget): each known entity's
        profile and nearest facts."""
        return [
            cls.of(e.name, [e.matched_alias], "\n".join([e.profile_text or "", *(t for t, _ in e.facts)]), speaker)
            for e in entities
        ]


@functools.lru_cache(maxsize=256)
def _known_words(text: str) -> frozenset[str]:
    """The folded words of a known entity's shown text. Cached: the extraction and post-extraction guards read the
    same known memory in one write, and an entity's profile and facts recur from write to write."""
    return frozenset(normalise_alias(text).split())


_CAPITALISED = re.compile(r"\w+")


def copied_from_memory(
    text: str,
    subject: str,
    said: Sequence[str],
    known: Sequence[Known],
    speaker: str,
    function_words: frozenset[str] = frozenset(),
    names_capitalised: bool = True,
) -> str | None:
    """Why the fact `text` about `subject` was copied from the known memory, or None.

    A name in the fact (a capitalised word: "Acme", "Curitiba") that the message and the recent messages (`said`)
    do not say, that is not the subject's, the speaker's or a known entity's name, and that the shown memory
    holds, came from that memory. Measured with the 1.5B model: "O Ricardo Gomes mora em São Paulo" was stored as
    "Ricardo Gomes mora em Curitiba", and Clara got Rafael's job at Acme (the demo re-recorded with prompt v8); the
    subject's name was in the message, so grounding passed. The subject's own memory is no exception: from "Two
    weeks ago I joined Initech" the model restated Ana's known "Ana não está trabalhando na Globex" without its
    negation, "Ana está trabalhando na Globex", and the ended job came back. What such a rule costs: "Ainda
    trabalho lá" restating "Rafael trabalha na Acme" is dropped too, where it would only have confirmed (NOOP) it.
    In a language that capitalises its nouns (`names_capitalised=False`: German) a capital marks no name, so only
    the second check runs: "Meine Nichte ist 18 Jahre alt" names "Jahre" because German writes it so.
    """
    if not names_capitalised:
        return _given_to_another(text, subject, said[0] if said else "", known, speaker)
    said_words = set().union(*(normalise_alias(part).split() for part in said))
    allowed = said_words | set(_form(subject, speaker).split()) | set(_form(speaker, speaker).split())
    allowed |= {word for k in known for form in k.name.forms for word in form.split()}
    for raw in _CAPITALISED.findall(text):
        if not raw[:1].isupper():
            continue
        word = normalise_alias(raw)
        if len(word) < 3 or word in _STOPWORDS or word in function_words or word in allowed:
            continue  # "Die", "Der": a capitalised function word is no name
        if _spelt_otherwise(word, said_words):
            continue
        owner = next((k for k in known if word in k.words), None)
        if owner is not None:
            unsaid = f"names {raw!r}, said in neither the message nor the recent messages"
            return f"{unsaid}: from the known memory of {owner.name.name!r}"
    return _given_to_another(text, subject, said[0] if said else "", known, speaker)


# rapidfuzz ratio (0-100) at which what a fact says of its subject is what a known fact says of another entity.
_SAME_PREDICATE_RATIO = 85.0
_MIN_PREDICATE_CHARS = 12


def _given_to_another(text: str, subject: str, message: str, known: Sequence[Known], speaker: str) -> str | None:
    """Why the fact says of `subject` what a known fact says of another entity, words the message does not say
    (fewer than half of them in it), or None. Measured with the 1.5B model: after "Semana passada comecei a fazer
    aulas de violão", "Meu irmão Pedro mora em Belo Horizonte" also gave "Pedro começou a fazer aulas de violão"; it
    names no capitalised word, so the check above misses it."""
    subject_form = _form(subject, speaker)
    predicate = _after(normalise_alias(text), {subject_form})
    if predicate is None or len(predicate) < _MIN_PREDICATE_CHARS:
        return None
    words = {word[:_TOPIC_PREFIX] for word in _content_words(predicate)}
    said = {word[:_TOPIC_PREFIX] for word in _content_words(message)}
    if not words or len(words & said) * 2 >= len(words):
        return None
    for k in known:
        if subject_form in k.name.forms:
            continue
        for line in k.text.splitlines():
            theirs = _after(normalise_alias(line), k.name.forms)
            if theirs is not None and fuzz.ratio(predicate, theirs) >= _SAME_PREDICATE_RATIO:
                return f"says of {subject!r} what the known memory says of {k.name.name!r} ({line.strip()!r})"
    return None


def _after(folded: str, forms: Iterable[str]) -> str | None:
    """What a folded fact says after the name it starts with (one of `forms`), or None."""
    for form in sorted(forms, key=len, reverse=True):
        if form and folded.startswith(form + " "):
            return folded[len(form) + 1 :]
    return None


# rapidfuzz ratio (0-100) at which a name is the same name spelt otherwise: "Lisbon" for the message's "Lisboa"
# (83), "Sao Paulo" for "São Paulo" (folded alike anyway); "Acme" and "Curitiba" match no word of the messages of
# the measured copies.
_SAME_NAME_RATIO = 80.0


def _spelt_otherwise(word: str, said_words: set[str]) -> bool:
    """Whether a word of the messages is `word` in another spelling or language (a model translates names)."""
    return len(word) >= 4 and any(
        len(other) >= 4 and fuzz.ratio(word, other) >= _SAME_NAME_RATIO for other in said_words
    )


def memory_copy(
    fact: ExtractedFact, said: Sequence[str], known: Sequence[Known], speaker: str, lexicon: Lexicon = NEUTRAL
) -> str | None:
    """Why `fact` repeats the known memory instead of saying something of the message (`said[0]`), or None: its
    text is a known fact's and the message does not say it (more of its units are only in memory than in the
    message, or its sentence says the opposite: "Não trabalho mais na Acme" does not say "Rafael trabalha na Acme";
    "Ana works at Acme" said again is no copy; nor is a NOOP whose message says one of its words, "Still at
    Deloitte" for "Lily works at Deloitte"), or it names what only the memory says (`copied_from_memory`)."""
    folded = normalise_alias(fact.text)
    lines = [line for k in known for line in k.text.splitlines() if line.strip()]
    if any(folded == normalise_alias(line) for line in lines):
        sentence = source_sentence(fact.text, said[0])
        opposite = lexicon.is_negated(fact.text) != lexicon.is_negated(sentence)
        if fact.action == "NOOP" and not opposite and _restates(fact.text, said[0], fact.subject, speaker):
            return None  # "Wie gesagt, ich wohne ja in Dortmund": the model confirms what it knows
        names = [Name(speaker, frozenset({_form(speaker, speaker)}), person=True), *(k.name for k in known)]
        here, there = _overlap(fact.text, said[0], ["\n".join([*said[1:], *lines])], names)
        if here <= there or opposite:
            return f"{fact.text!r} is a known fact, word for word, that the message does not say"
    capitalised = not lexicon.capitalised_nouns
    return copied_from_memory(fact.text, fact.subject, said, known, speaker, lexicon.function_words, capitalised)


def _restates(text: str, message: str, subject: str, speaker: str) -> bool:
    """Whether the message says one of the fact's content words beyond its subject's name, in any inflection
    (`text.is_said`): "Still at Deloitte" restates "Lily works at Deloitte"."""
    said = frozenset(normalise_alias(message).split())
    name = set(_form(subject, speaker).split())
    return any(is_said(word, said) for word in _content_words(text) - name)


def all_from_memory(
    facts: Sequence[ExtractedFact],
    said: Sequence[str],
    known: Sequence[Known],
    speaker: str,
    lexicon: Lexicon = NEUTRAL,
) -> str | None:
    """Why an informed answer holds nothing but the known memory, or None when one of its facts may be new.

    The 1.5B model did this in 3 of the 9 writes of the re-recorded demo: for "Não trabalho mais na Acme" it
    answered Rafael's three known facts, word for word, and the retraction was lost. The guards drop such facts;
    the extraction stage then asks once more without the memory (pipeline/extraction.py).
    """
    if not facts:
        return None
    whys = [memory_copy(fact, said, known, speaker, lexicon) for fact in facts]
    if any(why is None for why in whys):
        return None
    return f"all {len(facts)} facts repeat the known memory, e.g. {whys[0]}"
