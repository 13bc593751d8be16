"""Guards between what a model answered and what the SDK stores: pure functions, plain values in and out.

Small models make the same few mistakes (measured with a 1.5B model, issues 10 and 13): facts taken from the
recent messages or the known memory instead of the current message, one person's words given to another, and
reconciliation verdicts that close a true fact about something else. The pipeline asks for the right answer in
its prompts; these checks make a wrong one harmless, and say why in the trace.

- Grounded entities (post-extraction): an entity is kept only when the message, the recent messages or the known
  memory name it (`ground_entities`); a mirror fact only joins entities of fitting types (`mirror_allowed`).
- Grounding (post-extraction): a fact is kept only when it comes from the current message (`ground_fact`); a
  mirror fact only when both ends of its relation are named in it (`relation_named_in`).
- Subjects (post-extraction): a fact is about the entity its text or its source sentence names as subject
  (`check_subject`).
- Decisions (reconciliation): an UPDATE, DELETE or NOOP only touches a fact about the same thing, and an inferred
  fact never supersedes a stated one (`guard_decision`); the informed extraction's target names a fact it was
  shown, of the fact's own subject, among the fact's candidates (`informed_target`).
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from uuid import UUID

from rapidfuzz import fuzz

from memory_sdk.lexicons import ALL_FUNCTION_WORDS, LANGUAGES, NEUTRAL, Lexicon, lexicon_for
from memory_sdk.llm.schemas import ExtractedEntity, ExtractedFact, ExtractedRelation
from memory_sdk.pipeline.relatives import canonical_name, relative_of, relative_term, relative_words
from memory_sdk.pipeline.state import Extraction, FactDecision, KnownEntity, PreparedFact, ShownFact
from memory_sdk.text import (
    MAX_ALIAS_WORDS,
    fold,
    is_negated,
    is_said,
    message_words,
    normalise_alias,
    short_text_cache,
)

__all__ = [
    "ENTITY_FUZZY_MIN_CHARS",
    "ENTITY_MIN_SCORE",
    "EVIDENCE_MIN_CHARS",
    "EVIDENCE_MIN_SCORE",
    "STATED_CONFIDENCE",
    "Candidate",
    "Grounding",
    "Known",
    "Name",
    "all_from_memory",
    "copied_from_memory",
    "evidence_score",
    "ground_entities",
    "ground_fact",
    "guard_decision",
    "inferred_attribute",
    "informed_target",
    "memory_copy",
    "mirror_allowed",
    "names_of",
    "relation_named_in",
    "says_the_opposite",
    "shares_a_topic",
    "source_sentence",
]

# rapidfuzz partial_ratio (0-100) of the folded evidence against the folded message. 85 tolerates what small
# models do when they copy a span (a dropped article, "pra" -> "para", a changed accent or ending) and refuses a
# span of another message, which shares a few words at most.
EVIDENCE_MIN_SCORE = 85.0
# rapidfuzz partial_ratio (0-100) of a folded entity name against a folded text: the evidence threshold, for the
# same reason (a changed letter or ending passes, another name does not). Names shorter than ENTITY_FUZZY_MIN_CHARS
# must be found as words: partial_ratio finds a 3-letter name, give or take a letter, in almost any text.
ENTITY_MIN_SCORE = 85.0
ENTITY_FUZZY_MIN_CHARS = 5
# Folded evidence shorter than this places nothing (partial_ratio finds "eu" or a name in almost any message):
# the fact is then grounded by its words, as if it had no evidence.
EVIDENCE_MIN_CHARS = 8
# A fact at or above this confidence is stated (the prompts: 0.95 stated, 0.8 strongly implied); below it, or
# built by the SDK from a relation, it is inferred.
STATED_CONFIDENCE = 0.9
_EXTRACTED = "extracted"

# The function words of every lexicon (memory_sdk/lexicons): grounding and topics count content words only, and a
# function word of another language is no evidence either. Leaving out a word can only make a fact look less
# grounded, never invent a match.
_STOPWORDS = ALL_FUNCTION_WORDS
# Two words are the same topic when their first letters agree: "guitar" and "guitarra", "namorando" and "namoro".
_TOPIC_PREFIX = 4
# Words by which a speaker names themselves, in every lexicon: a relation's end that is the speaker is named in a
# message that speaks in the first person (`relation_named_in`).
_FIRST_PERSON = frozenset().union(*(lexicon_for(code).first_person for code in LANGUAGES))
_WORD = re.compile(r"\w")
_SENTENCE_BREAK = re.compile(r"(?<=[.!?;])\s+|\n+")


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
    thousands of n-grams, new in every write, and building them was the largest CPU cost of post_extraction
    (session 19). `spaced` holds each text's words as " w1 w2 ... wn ", texts apart by a newline (no phrase spans
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
    words twice cost ~1 ms a write (session 19). A newline is no word, so the joined text's words are the parts'
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


def _named(text_grams: Grams, names: Sequence[Name]) -> list[Name]:
    return [name for name in names if text_grams.any_of(name.forms)]


# --- grounding -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Grounding:
    """Whether a fact comes from the current message; `span` is the part of the message it comes from."""

    kept: bool
    span: str
    why: str


def evidence_score(evidence: str, message: str) -> float:
    """How well `evidence` is found in `message` (0-100), case, accents and punctuation ignored.

    partial_ratio aligns the shorter text with its best window in the longer one, so evidence longer than the
    message (the message plus a recent one) is scored as a whole instead, and cannot pass by containing it.
    """
    needle, haystack = normalise_alias(evidence), normalise_alias(message)
    scorer = fuzz.partial_ratio if len(needle) <= len(haystack) else fuzz.ratio
    return float(scorer(needle, haystack))


def ground_fact(fact: ExtractedFact, message: str, elsewhere: Sequence[str], names: Sequence[Name]) -> Grounding:
    """Keep a fact only when it comes from `message`, not from `elsewhere` (recent messages, known memory).

    With evidence found in the message (`evidence_score` >= EVIDENCE_MIN_SCORE) the fact stays. Without evidence,
    or with evidence that is not found (often translated by the model), the fact's content units must be found in
    the message more often than only elsewhere: a unit is an entity the fact names (found through any of its
    forms; the speaker is in every message of theirs) or a content word (3+ letters, not a function word). A fact
    restated from memory shares its words with the message too, and stays.
    """
    evidence = fact.evidence or ""
    missed = ""
    if len(normalise_alias(evidence)) >= EVIDENCE_MIN_CHARS:
        score = evidence_score(evidence, message)
        if score >= EVIDENCE_MIN_SCORE:
            return Grounding(True, _sentence_of(evidence, message), f"evidence found (score {score:.0f})")
        # Small models translate their evidence along with the fact ("trabalho na Globex" for "I work at
        # Globex"): a missed evidence is not proof, the fact's names and words decide as if it had none.
        missed = f"evidence {evidence!r} not in the message (score {score:.0f} < {EVIDENCE_MIN_SCORE:.0f}); "
    here, there = _overlap(fact.text, message, elsewhere, names)
    why = f"{missed}{here} of its words in the message, {there} only in recent messages or known memory"
    if here > there:
        return Grounding(True, source_sentence(fact.text, message), why)
    return Grounding(False, "", why)


def _sentence_of(evidence: str, message: str) -> str:
    """The sentence of `message` the evidence comes from (the evidence itself when it spans more than one).

    The subject guards read who speaks in the span, and a model's evidence may be a word: the 1.5B model gave
    "Yesterday" as the evidence of "Melanie went to an LGBTQ support group yesterday", from Caroline's "I went to an
    LGBTQ support group yesterday"; the sentence says it is Caroline's.
    """
    sentences = [part.strip() for part in _SENTENCE_BREAK.split(message) if part.strip()]
    best = max(sentences, key=lambda sentence: evidence_score(evidence, sentence), default=message)
    return best if len(normalise_alias(evidence)) <= len(normalise_alias(best)) else evidence


def _overlap(text: str, message: str, elsewhere: Sequence[str], names: Sequence[Name]) -> tuple[int, int]:
    """(units of `text` in the message, units found only elsewhere)."""
    speaker = names[0].name
    named = _named(_grams(text, speaker), names)
    name_words = {word for name in named for form in name.forms for word in form.split()}
    words = _content_words(text) - name_words
    message_grams, other_grams = _grams(message, speaker), _joined_grams(tuple(elsewhere), speaker)
    named_here = [name for name in named if name is names[0] or message_grams.any_of(name.forms)]
    named_there = [name for name in named if name not in named_here and other_grams.any_of(name.forms)]
    message_words = _content_words(message)
    words_there = (words & _joined_content_words(tuple(elsewhere))) - message_words
    return len(named_here) + len(words & message_words), len(named_there) + len(words_there)


@functools.lru_cache(maxsize=64)
def _content_words(text: str) -> frozenset[str]:
    """Cached: every fact of a write is compared with the same message and known memory (thousands of words)."""
    return frozenset(word for word in normalise_alias(text).split() if len(word) >= 3 and word not in _STOPWORDS)


def source_sentence(text: str, message: str) -> str:
    """The sentence of `message` that `text` most resembles (the first on a tie)."""
    sentences = [part.strip() for part in _SENTENCE_BREAK.split(message) if part.strip()] or [message]
    folded = normalise_alias(text)
    return max(sentences, key=lambda sentence: fuzz.token_set_ratio(folded, normalise_alias(sentence)))


def relation_named_in(
    relation: ExtractedRelation, message: str, names: Sequence[Name], first_person: frozenset[str] = frozenset()
) -> bool:
    """Whether the message names both ends of a relation: the grounding of the mirror fact the SDK builds for it.

    The speaker is named by speaking in the first person: "O Ricardo Gomes mora em São Paulo" names Ricardo, and a
    relation that puts the speaker in São Paulo is not grounded by it.
    """
    speaker = names[0].name
    grams = _grams(message, speaker)
    speaks = _first_person(message, speaker, first_person)

    def named(end: str) -> bool:
        form = _form(end, speaker)
        if form in names[0].forms:
            return speaks or grams.any_of(names[0].forms)
        forms = next((name.forms for name in names if form in name.forms), frozenset({form}))
        return grams.any_of(forms)

    return named(relation.source) and named(relation.target)


def ground_entities(
    extraction: Extraction, texts: Sequence[str], speaker: str
) -> tuple[Extraction, list[dict[str, str]]]:
    """Keep the entities named in `texts` (the message, the recent messages, the known memory); drop the others
    with the facts about them and the relations that touch them.

    A 1.5B model (issue 13) listed "Ana Souza", the answer-format example of a prompt, as a person of a chat
    that never named her. A name is found when one of its forms, or one of its content words ("Ricardo" of
    "Ricardo Gomes"), is a word n-gram of the texts (case, accents and punctuation ignored; a relative by its owner
    and kinship term), or, from ENTITY_FUZZY_MIN_CHARS letters, when `fuzz.partial_ratio` finds it at
    ENTITY_MIN_SCORE or more (a misspelt "Melany" is Melanie). The speaker is always grounded. Returns the
    extraction and the dropped names with why.
    """
    grams = Grams.apart(_grams(text, speaker) for text in texts)

    @functools.cache
    def folded() -> list[str]:  # only a name no n-gram finds is searched for in the folded texts
        return [normalise_alias(text) for text in texts]

    kept, dropped = [], []
    for entity in extraction.entities:
        if _entity_found(entity, grams, texts, folded, speaker):
            kept.append(entity)
        else:
            dropped.append({"name": entity.name, "why": "named in neither the message, the recent messages nor memory"})
    gone = {entry["name"] for entry in dropped}
    grounded = replace(
        extraction,
        entities=kept,
        facts=[fact for fact in extraction.facts if fact.subject not in gone],
        relations=[r for r in extraction.relations if r.source not in gone and r.target not in gone],
    )
    return grounded, dropped


def _entity_found(
    entity: ExtractedEntity, grams: Grams, texts: Sequence[str], folded: Callable[[], list[str]], speaker: str
) -> bool:
    for name in (entity.name, *entity.aliases):
        form = _form(name, speaker)
        if form == _form(speaker, speaker) or form in grams or grams.any_of(_content_words(form) - _owner_words(form)):
            return True
        if not _WORD.search(form):  # "😀": symbols are no words, the texts are searched as they are
            return any(form in fold(text) for text in texts)
        relative = relative_of(name, speaker)
        if relative is not None and relative.own_name is None:
            owner = _form(relative.owner, speaker)
            if (owner == _form(speaker, speaker) or owner in grams) and grams.any_of(relative_words(relative.term)):
                return True
        elif len(form) >= ENTITY_FUZZY_MIN_CHARS and any(
            fuzz.partial_ratio(form, text) >= ENTITY_MIN_SCORE for text in folded()
        ):
            return True
    return False


def _owner_words(form: str) -> set[str]:
    """The owner's words of a possessive name ("melanie s niece" -> {"melanie", "s"}): they do not ground it.
    Measured with the 1.5B model: from "My mom came to stay with us last week" (Melanie speaking) it listed 17
    relatives, "Melanie's niece" to "Melanie's great-great-great-grandchild"; each was found by "melanie", ten
    cost an entity-resolution call, nine became aliases of Melanie and four new entities."""
    owner, possessive, _ = form.partition(" s ")
    return set(owner.split()) | {"s"} if possessive else set()


# --- known memory ----------------------------------------------------------------------------------------------


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


# --- attributes ------------------------------------------------------------------------------------------------

# Where someone lives now, and who employs them now, said with a present or just-finished verb and a proper noun
# ("mora em Curitiba", "moved to Denver", "se mudó a Lima"; "trabalha na Acme", "joined Initech", "started a new
# job at Hope Counseling", "comecei na Orion Tech"). Past habits ("morava", "worked", "used to live") and plans
# ("vou me mudar") are not matched: they are no current value. Run on the text with accents stripped, case kept.
_ARTICLE = r"(?:(?:the|a|an|o|a|os|as|el|la)\s+)?"
_ATTRIBUTE_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "lives_in",
        re.compile(
            r"\b(?:mora|moro|moram|moramos|vive|vivo|vivem|viven|reside|resido|residem|lives?|resides)\s+"
            rf"(?:em|no|na|nos|nas|in|en)\s+{_ARTICLE}(?P<object>\w+)",
            re.IGNORECASE,
        ),
    ),
    (
        "lives_in",
        re.compile(
            r"\b(?:voltou|voltei|voltaram|foi|fui|foram|passou|passei|veio|vim)\s+(?:a\s+)?morar\s+"
            rf"(?:em|no|na|nos|nas)\s+{_ARTICLE}(?P<object>\w+)",
            re.IGNORECASE,
        ),
    ),
    (
        "lives_in",
        re.compile(
            r"\b(?:mudou|mudei|mudeu|mudaram|mudamos|mudo|moved|relocated)(?:\s+(?:back|de\s+volta))?\s+"
            rf"(?:pra|para|pro|to|a|al|em)\s+{_ARTICLE}(?P<object>\w+)",
            re.IGNORECASE,
        ),
    ),
    (
        "employer",
        re.compile(
            r"\b(?:trabalha|trabalho|trabalham|trabalhamos|trabalhando|works?|working|trabaja|trabajo|trabajan"
            r"|trabajando)\s+"
            rf"(?:na|no|em|at|for|en|pela|pelo|para)\s+{_ARTICLE}(?P<object>\w+)",
            re.IGNORECASE,
        ),
    ),
    ("employer", re.compile(rf"\bjoined\s+{_ARTICLE}(?P<object>\w+)", re.IGNORECASE)),
    (
        "employer",
        re.compile(
            r"\b(?:started|comecei|comecou|entrei|entrou|empece|empezo)\s+"
            r"(?:(?:a\s+|um\s+)?(?:new\s+)?(?:job|position|role|emprego|trabalho)\s+(?:novo\s+)?)?"
            rf"(?:na|no|em|at|with|en)\s+{_ARTICLE}(?P<object>\w+)",
            re.IGNORECASE,
        ),
    ),
    (
        "employer",
        re.compile(rf"\b(?:job|emprego)\s+(?:novo\s+)?(?:at|na|no|en|with)\s+{_ARTICLE}(?P<object>\w+)", re.IGNORECASE),
    ),
)
_PAST_HABIT = re.compile(r"\b(?:used\s+to|costumava|costumavam|solia|solian)\b", re.IGNORECASE)
# "Ana trabalha na Globex como designer": a title beside the employer is still the employer's fact.
_TITLE = re.compile(r"\b(?:as\s+an?|como)\s+\w+", re.IGNORECASE)


def inferred_attribute(text: str, given: str | None) -> tuple[str, str] | None:
    """The attribute a fact's text shows (`lives_in`, `employer`) when the model gave none, or gave `job_title`
    to a fact that names an employer and no title; with why. None: keep what the model gave.

    Measured with the 1.5B model (truth benchmark, prompt v8): "Tom moved to Denver yesterday" and "Rafael mudeu
    pra São Paulo ontem" came with no attribute, so the single-valued rule left the old home current beside the
    new one (5 stale facts of 25); "Caroline started a new job at Hope Counseling" came as `job_title`. A negated
    fact ("não trabalha mais na Acme") is a retraction, never a value.
    """
    if given not in (None, "job_title"):
        return None
    reading = _attribute_reading(text)
    if reading is None:
        return None
    shown, titled = reading
    for attribute, words in shown:
        if attribute == given:
            continue
        if given == "job_title" and (attribute != "employer" or titled):
            return None
        return attribute, f"{words!r} says {attribute}" + (f" (the model said {given})" if given else "")
    return None


@short_text_cache(maxsize=4096)
def _attribute_reading(text: str) -> tuple[tuple[tuple[str, str], ...], bool] | None:
    """What `inferred_attribute` reads in a text, whatever attribute the model gave: each (attribute, matched words)
    of _ATTRIBUTE_PATTERNS whose object is a proper noun, in pattern order, and whether a title stands beside it;
    None for a negated fact or a past habit. Memoised: reconciliation reads each fact and each of its candidates
    (52 readings a write at 100 facts, session 19), and the candidates recur from write to write."""
    if is_negated(text) or _PAST_HABIT.search(text):
        return None
    plain = _strip_accents(text)
    shown = []
    for attribute, pattern in _ATTRIBUTE_PATTERNS:
        match = pattern.search(plain)
        if match is not None and match.group("object")[:1].isupper():
            shown.append((attribute, match.group(0)))
    return tuple(shown), _TITLE.search(plain) is not None


def _strip_accents(text: str) -> str:
    if text.isascii():  # NFKD leaves ASCII as it is
        return text
    return "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))


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


# --- mirror facts ----------------------------------------------------------------------------------------------

_PLACES = frozenset({"place", "city", "country", "location", "state", "region", "neighborhood", "neighbourhood"})
_ORGANIZATIONS = frozenset(
    {"organization", "organisation", "company", "school", "university", "team", "institution", "employer"}
)
_PERSONS = frozenset({"person"})
# Relations that only hold between two people.
_PERSON_RELATIONS = frozenset(
    {
        "spouse_of",
        "partner_of",
        "friend_of",
        "parent_of",
        "child_of",
        "sibling_of",
        "grandparent_of",
        "uncle_of",
        "aunt_of",
        "cousin_of",
        "boss_of",
        "coworker_of",
        "hired",
        "dating",
        "knows",
    }
)
# Relations whose target must be of one kind.
_TARGET_KINDS: dict[str, frozenset[str]] = {
    "lives_in": _PLACES,
    "moved_to": _PLACES,
    "born_in": _PLACES,
    "works_at": _ORGANIZATIONS,
    "former_employee_of": _ORGANIZATIONS,
    "studies_at": _ORGANIZATIONS,
    "member_of": _ORGANIZATIONS,
}
# Types that say nothing about what an entity is: never an end of a mirror fact.
_VAGUE_TYPES = frozenset({"concept", "thing", "entity", "other", "unknown", "activity", "emotion", ""})


def mirror_allowed(rel_type: str, source_type: str, target_type: str) -> bool:
    """Whether a relation between entities of these types may become a mirror fact.

    A 1.5B model (issue 13) related people to concepts ("Melanie spouse_of adoption"); a mirror fact makes such a
    relation a fact. Person-to-person relations need two persons, lives_in a place, works_at an organization,
    and any other relation two ends of a definite type (not "concept").
    """
    if rel_type in _PERSON_RELATIONS:
        return source_type in _PERSONS and target_type in _PERSONS
    kinds = _TARGET_KINDS.get(rel_type)
    if kinds is not None:
        return target_type in kinds and source_type not in _VAGUE_TYPES
    return source_type not in _VAGUE_TYPES and target_type not in _VAGUE_TYPES


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


# --- decisions -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    """A current fact of the subject that a new fact may relate to."""

    id: UUID
    text: str
    similarity: float
    attribute: str | None
    valid_from: datetime
    source_context: str = _EXTRACTED
    confidence: float = 0.95


def guard_decision(
    decision: FactDecision,
    candidates: Sequence[Candidate],
    *,
    min_similarity: float,
    same_above: float,
    negated: Callable[[str], bool] = lambda _text: False,
) -> FactDecision:
    """The decision, or what it must become so that it cannot corrupt memory; the reason says which guard.

    - UPDATE, DELETE and NOOP touch only a fact about the same thing: the same text, the same attribute when
      both carry one, else a similarity of at least `min_similarity`; otherwise the fact is ADDed. (Candidates are
      the subject's own facts by construction, so the subject is always the same);
    - an inferred fact (a mirror fact, or one below STATED_CONFIDENCE) never ends a stated fact of higher
      confidence: it confirms it (NOOP) when it says the same (similarity above `same_above`, or the same
      single-valued attribute, which an ADD would end too), else it is ADDed beside it;
    - a NOOP whose fact says the opposite of its target (`negated`: the message language's negation, lexicons) is
      ADDed: "Rafael não trabalha mais na Acme" confirms nothing of "Rafael trabalha na Acme".

    Every rule makes a decision safer (it touches less) and never the reverse: no rule turns an ADD into an UPDATE,
    or an UPDATE into a DELETE (docs/write-pipeline.md, "The guard contract").
    """
    decision = _same_thing(decision, candidates, min_similarity, negated)
    return _weaker_keeps_out(decision, candidates, same_above)


def _target(decision: FactDecision, candidates: Sequence[Candidate]) -> Candidate | None:
    return next((c for c in candidates if c.id == decision.target_id), None)


# rapidfuzz token_set_ratio (0-100) at which two texts say the same words but for a negation.
OPPOSITE_RATIO = 85.0


def says_the_opposite(text: str, other: str, negated: Callable[[str], bool]) -> bool:
    """True when one text is the other negated: the same words (OPPOSITE_RATIO) but one reads as negated, "Rafael
    não trabalha mais na Acme" against "Rafael trabalha na Acme". Such a pair is never the same fact (measured with
    the 1.5B model: the informed call answered NOOP for exactly this pair and left the ended job current). Texts in
    other words are the model's to judge: "Ilaria non rinuncia mai alla nuotata" restates "Ilaria nuota ogni
    mattina" (a NOOP a negation count would refuse). `negated` is the message language's rule
    (lexicons.Lexicon.is_negated); without a lexicon nothing reads as negated."""
    if negated(text) == negated(other):
        return False
    return fuzz.token_set_ratio(normalise_alias(text), normalise_alias(other)) >= OPPOSITE_RATIO


def _same_thing(
    decision: FactDecision, candidates: Sequence[Candidate], floor: float, negated: Callable[[str], bool]
) -> FactDecision:
    target = _target(decision, candidates)
    if decision.action == "ADD" or target is None:
        return decision
    fact = decision.fact
    if decision.action == "NOOP" and says_the_opposite(fact.text, target.text, negated):
        opposite = f"{fact.text!r} says the opposite of {target.text!r}"
        return replace(decision, action="ADD", target_id=None, reason=f"guard: NOOP refused, {opposite}; ADD")
    why = untouchable(fact, target, floor)
    if why is None:
        return decision
    return replace(decision, action="ADD", target_id=None, reason=f"guard: {decision.action} refused, {why}; ADD")


def untouchable(fact: PreparedFact, target: Candidate, floor: float) -> str | None:
    """Why no UPDATE, DELETE or NOOP of `fact` may touch `target` (then `guard_decision` makes it an ADD), or None
    when one may: the same text, the same attribute when both carry one, else a similarity of at least `floor` and
    a shared topic (`shares_a_topic`).

    Reconciliation asks no LLM about a fact whose every similar candidate is untouchable: whatever the answer, the
    fact would be ADDed (measured with the 1.5B model: a mirror fact's only similar candidates were facts it could
    not touch, and the call it cost was one of melanie_caroline's 1.3 calls per write).
    """
    if normalise_alias(fact.text) == normalise_alias(target.text):
        return None
    if fact.attribute and target.attribute:
        if fact.attribute == target.attribute:
            return None
        return f"target {target.text!r} is about {target.attribute}, the fact about {fact.attribute}"
    if target.similarity < floor:
        return f"target {target.text!r} is not about the same thing (similarity {target.similarity:.2f} < {floor:.2f})"
    if not shares_a_topic(fact.text, target.text, fact.subject_name):
        return f"target {target.text!r} shares no word with the fact beyond its subject"
    return None


def shares_a_topic(text: str, other: str, subject: str) -> bool:
    """Whether two facts of one subject share a word beyond the subject's name (3+ letters, not a function word,
    compared by their first 4 letters: "PhD" in "started a PhD in Lisbon" and "Julia's PhD is in Porto", "guitar"
    and "guitarra", "namorando" and "namoro"), or say the same attribute in words (`inferred_attribute`: "moved to
    Austin", "lives in São Paulo").

    Similarity alone does not say two facts are about the same thing: facts of one subject embed close because they
    share its name. The 1.5B model's reconciliation UPDATEd "Melanie's mom came to stay with us last week" into
    "Melanie's mom is a painter" (similarity 0.61 with the local embedder), and the visit was closed.
    """
    said, said_other = inferred_attribute(text, None), inferred_attribute(other, None)
    if said is not None and said_other is not None and said[0] == said_other[0]:
        return True  # "moved to Austin" and "lives in São Paulo": both say where the subject lives
    name = _name_topics(subject)
    return not (_topics(text) - name).isdisjoint(_topics(other) - name)


@short_text_cache(maxsize=4096)
def _topics(text: str) -> frozenset[str]:
    """The first _TOPIC_PREFIX letters of each content word of `text` (3+ letters, not a function word). Memoised:
    reconciliation compares each fact with each of its candidates, and the candidates recur from write to write."""
    return frozenset(
        word[:_TOPIC_PREFIX] for word in normalise_alias(text).split() if len(word) >= 3 and word not in _STOPWORDS
    )


@short_text_cache(maxsize=1024)
def _name_topics(subject: str) -> frozenset[str]:
    """The topics a subject's own name gives every fact about it (and "s" of "Melanie's"): they say nothing."""
    return frozenset(word[:_TOPIC_PREFIX] for word in {*normalise_alias(subject).split(), "s"})


def _weaker_keeps_out(decision: FactDecision, candidates: Sequence[Candidate], same_above: float) -> FactDecision:
    fact = decision.fact
    if decision.action == "NOOP" or (fact.source_context == _EXTRACTED and fact.confidence >= STATED_CONFIDENCE):
        return decision
    open_value = next((c for c in candidates if fact.single_valued and c.attribute == fact.attribute), None)
    target = _target(decision, candidates) if decision.action in ("UPDATE", "DELETE") else None
    stronger = [c for c in (target, open_value) if c is not None and _stated(c) and c.confidence > fact.confidence]
    if not stronger:
        return decision
    kept = stronger[0]
    why = (
        f"guard: {decision.action} refused, an inferred fact ({fact.source_context}, confidence "
        f"{fact.confidence:.2f}) never ends the stated {kept.text!r} ({kept.confidence:.2f})"
    )
    if kept is open_value or kept.similarity > same_above:
        return replace(decision, action="NOOP", target_id=kept.id, similarity=kept.similarity, reason=f"{why}; NOOP")
    return replace(decision, action="ADD", target_id=None, reason=f"{why}; ADD")


def _stated(candidate: Candidate) -> bool:
    return candidate.source_context == _EXTRACTED and candidate.confidence >= STATED_CONFIDENCE


def informed_target(
    target: str | None, entity_key: str, shown: Mapping[str, ShownFact], candidates: Sequence[Candidate]
) -> Candidate | str:
    """The candidate an informed decision's short id names, or why it names none the fact may touch.

    The informed call sees the known facts of every entity a message names, so its id may be one it was never
    shown, or a fact about someone else (a 1.5B model puts one speaker's words on another: issue 13); and a fact it
    saw may be none of the new fact's candidates (not among its nearest), which `guard_decision` could not judge.
    """
    short = (target or "").strip().lstrip("[#").rstrip("]")
    seen = shown.get(short)
    if seen is None:
        return f"target {target!r} is not an id the informed call was shown"
    if seen.entity_key != entity_key:
        return f"target {short} {seen.text!r} is about {seen.entity_key}, the fact about {entity_key}"
    found = next((c for c in candidates if c.id == seen.id), None)
    if found is None:
        return f"target {short} {seen.text!r} is not among the fact's candidates"
    return found
