"""Names: the entities a text may name (`Name`, `names_of`), a text's word n-grams and kinship phrases (`Grams`),
its content words, and whether it speaks in the first person; the readings the other guards share.

Under the guard contract (docs/write-pipeline.md, "The guard contract") nothing here drops or decides anything: a
guard reads with these whether the message names what a fact names. Reading a label as its registry form ("minha
mãe" said by Rafael is "rafael s mom") is resolution, not a change; a word list here never moves a fact to another
person, merges entities or registers an alias.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from memory_sdk.lexicons import ALL_FUNCTION_WORDS, LANGUAGES, lexicon_for
from memory_sdk.llm.schemas import ExtractedEntity
from memory_sdk.pipeline.relatives import canonical_name, relative_of, relative_term
from memory_sdk.text import MAX_ALIAS_WORDS, message_words, normalise_alias

# The function words of every lexicon (memory_sdk/lexicons): grounding and topics count content words only, and a
# function word of another language is no evidence either. Leaving out a word can only make a fact look less
# grounded, never invent a match.
_STOPWORDS = ALL_FUNCTION_WORDS


# Words by which a speaker names themselves, in every lexicon: a relation's end that is the speaker is named in a
# message that speaks in the first person (`relation_named_in`).
_FIRST_PERSON = frozenset().union(*(lexicon_for(code).first_person for code in LANGUAGES))


@dataclass(frozen=True)
class Name:
    """An entity a text may name: its name as the extraction has it, and the registry forms that name it (its
    name and aliases, relationship terms as "{speaker}'s {term}")."""

    name: str
    forms: frozenset[str]
    person: bool


def names_of(entities: Iterable[ExtractedEntity], speaker: str, people: Iterable[str] = ()) -> list[Name]:
    """The speaker and every entity, each with the forms that name it. An entity is a person when the model typed
    it so, when it is a relative, or when it is one of `people` (the write's participants: whatever type a model
    gives "Melanie", the person whose chat lines the recent messages hold is a person)."""
    names = [Name(speaker, frozenset({_form(speaker, speaker)}), person=True)]
    known_people = {_form(person, speaker) for person in people}
    for entity in entities:
        forms = frozenset(_form(name, speaker) for name in (entity.name, *entity.aliases)) - {""}
        person = (
            entity.type.strip().lower() == "person"
            or relative_of(entity.name, speaker) is not None
            or bool(forms & known_people)
        )
        names.append(Name(entity.name, forms, person))
    return names


@functools.lru_cache(maxsize=4096)
def _form(name: str, speaker: str) -> str:
    """The registry form of a name (a relative's as "{owner}'s {term}"). Cached: a write asks it of the same
    names and of every leading n-gram of every fact, each a kinship parse."""
    return normalise_alias(canonical_name(name, speaker))


@dataclass(frozen=True)
class Grams:
    """The word n-grams of a text (runs of 1..MAX_ALIAS_WORDS consecutive folded words, as text.message_ngrams
    builds them) and its kinship phrases in registry form ("minha mae" -> "rafael s mom"), asked by membership.

    The n-grams are not built: a phrase is one when it is found, space-bounded, in the text's single-spaced words
    (words hold no space, so a match is a run of whole words). A known memory of thousands of words has tens of
    thousands of n-grams, new in every write, and building them was the largest CPU cost of post_extraction.
    `spaced` holds each text's words as " w1 w2 ... wn ", texts apart by a newline (no phrase spans
    two texts).
    """

    spaced: str
    kin: frozenset[str]

    def __contains__(self, phrase: object) -> bool:
        if not isinstance(phrase, str) or not phrase:
            return False
        if phrase in self.kin:
            return True
        return phrase.count(" ") < MAX_ALIAS_WORDS and "\n" not in phrase and f" {phrase} " in self.spaced

    def any_of(self, phrases: Iterable[str]) -> bool:
        """Whether one of `phrases` is an n-gram or kinship form of the text (a set intersection, by membership)."""
        return any(phrase in self for phrase in phrases)

    @classmethod
    def of_words(cls, words: Sequence[str], speaker: str) -> Grams:
        """The n-grams of `words`. Every relationship phrase holds a word that is a relationship term by itself
        (_has_relation_word): the distinct words are checked once, and only the n-grams around one are parsed."""
        terms = {word for word in set(words) if _is_relation_word(word)}
        around = {
            " ".join(words[start:end])
            for at, word in enumerate(words)
            if word in terms
            for start in range(max(0, at - MAX_ALIAS_WORDS + 1), at + 1)
            for end in range(at + 1, min(start + MAX_ALIAS_WORDS, len(words)) + 1)
        }
        forms = (_relative_form(gram, speaker) for gram in around)
        return cls(f" {' '.join(words)} ", frozenset(form for form in forms if form is not None))

    @classmethod
    def apart(cls, grams: Iterable[Grams]) -> Grams:
        """The n-grams of several texts read apart: a phrase of one of them (none that runs from one into the next)."""
        parts = list(grams)
        return cls("\n".join(part.spaced for part in parts), frozenset().union(*(part.kin for part in parts)))


@functools.lru_cache(maxsize=64)
def _grams(text: str, speaker: str) -> Grams:
    """The text's word n-grams, relationship terms also as "{owner}'s {term}" ("minha mae" names the speaker's
    mom, "irma da ana" Ana's sister). Cached: every fact of a write is checked against the same message, recent
    messages and known memory."""
    return Grams.of_words(_text_words(text), speaker)


@functools.lru_cache(maxsize=64)
def _text_words(text: str) -> tuple[str, ...]:
    """The folded words of a text (text.message_words). Cached: `_grams` and `_joined_grams` read the same
    message, recent messages and known memory in one write."""
    return tuple(message_words(text))


@functools.lru_cache(maxsize=16)
def _joined_grams(parts: tuple[str, ...], speaker: str) -> Grams:
    """`_grams` of the parts joined by newlines, from each part's cached words: the recent messages and the known
    memory are read apart by `ground_entities` and together by every fact's `_overlap`, and folding them into
    words twice cost ~1 ms a write. A newline is no word, so the joined text's words are the parts'
    words in order."""
    return Grams.of_words([word for part in parts for word in _text_words(part)], speaker)


@functools.lru_cache(maxsize=16)
def _joined_content_words(parts: tuple[str, ...]) -> frozenset[str]:
    """`_content_words` of the parts joined by newlines, from each part's cached words (see `_joined_grams`). A text
    with no word at all is read by its symbols (text.normalise_alias), so that case is left to `_content_words`.
    Cached: every fact of a write asks it of the same parts."""
    if not any(_text_words(part) for part in parts):
        return _content_words("\n".join(parts))
    return frozenset(word for part in parts for word in _text_words(part) if len(word) >= 3 and word not in _STOPWORDS)


@functools.lru_cache(maxsize=4096)
def _relative_form(gram: str, speaker: str) -> str | None:
    """The registry form of a kinship n-gram ("minha mae" -> "rafael s mom"), None when it names no relative.
    Cached: the known memory of one speaker repeats its kinship phrases from write to write."""
    return _form(gram, speaker) if relative_of(gram, speaker) is not None else None


def _has_relation_word(gram: str) -> bool:
    """Every relationship phrase holds a word that is a relationship term by itself ("best friend", "minha mae",
    "irma da ana"): a cheap filter before relative_of, which folds and parses its whole input."""
    return any(_is_relation_word(word) for word in gram.split(" "))


@functools.lru_cache(maxsize=16384)
def _is_relation_word(word: str) -> bool:
    """Cached per word, not per n-gram: the known memory's thousands of n-grams are new in every write, their
    words are not (each word is in up to six n-grams of one text, and in the next write's text too). Per n-gram,
    the filter parsed every word of every n-gram again: 40-125 ms of a write at 100,000 facts."""
    return relative_term(word, "") is not None


def names_subject(text: str, subject: str, names: Sequence[Name], speaker: str) -> bool:
    """Whether `text` names `subject`: a registry form of it or of its entity (name, alias, "minha mãe" as the
    speaker's mom), or one word of 2+ letters of one ("Jon" of "Jon Smith", "Melanie" of "Melanie's mom")."""
    own = _form(subject, speaker)
    forms = {own}.union(*(name.forms for name in names if own in name.forms or name.name == subject))
    if _grams(text, speaker).any_of(forms):
        return True
    return not {word for form in forms for word in form.split() if len(word) >= 2}.isdisjoint(_text_words(text))


def _named(text_grams: Grams, names: Sequence[Name]) -> list[Name]:
    return [name for name in names if text_grams.any_of(name.forms)]


@functools.lru_cache(maxsize=64)
def _content_words(text: str) -> frozenset[str]:
    """Cached: every fact of a write is compared with the same message and known memory (thousands of words)."""
    return frozenset(word for word in normalise_alias(text).split() if len(word) >= 3 and word not in _STOPWORDS)


# --- first person ---------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=256)
def _first_person(text: str, speaker: str, first_person: frozenset[str] = _FIRST_PERSON) -> bool:
    """Whether `text` speaks in the first person; "minha mãe" names the speaker's mom, not the speaker. Cached:
    one write asks it of the same message and sentences for each of its facts, and each ask parses every
    two- and three-word phrase of the text holding a kinship word (_has_relation_word) as a kinship phrase."""
    words = normalise_alias(text).split()
    if first_person.isdisjoint(words):
        return False
    kin = [_is_relation_word(word) for word in words]
    relative = {
        index
        for start in range(len(words))
        for size in (2, 3)
        if any(kin[start : start + size]) and relative_term(" ".join(words[start : start + size]), speaker) is not None
        for index in range(start, start + size)
    }
    return any(word in first_person for index, word in enumerate(words) if index not in relative)
