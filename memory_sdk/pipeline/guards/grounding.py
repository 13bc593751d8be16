"""Grounding (post-extraction): whether a fact, an entity or a mirror fact comes from the current message.

Under the guard contract (docs/write-pipeline.md, "The guard contract") these guards may only drop what the message
does not say: a fact whose evidence and content words are the recent messages' or the memory's (`ground_fact`), an
entity that nothing the model was shown names (`ground_entities`), a mirror fact whose relation the message does
not name at both ends (`relation_named_in`) or that joins ends of types the relation cannot join
(`mirror_allowed`). They never rewrite a fact's text or move it to another subject.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from rapidfuzz import fuzz

from memory_sdk.llm.schemas import ExtractedEntity, ExtractedFact, ExtractedRelation
from memory_sdk.pipeline.guards.names import (
    Grams,
    Name,
    _content_words,
    _first_person,
    _form,
    _grams,
    _joined_content_words,
    _joined_grams,
    _named,
)
from memory_sdk.pipeline.relatives import relative_of, relative_words
from memory_sdk.pipeline.state import Extraction
from memory_sdk.text import fold, normalise_alias

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


_WORD = re.compile(r"\w")
_SENTENCE_BREAK = re.compile(r"(?<=[.!?;])\s+|\n+")


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
# Types that say nothing about what an entity is: never an end of a mirror fact, never the value of an attribute
# (post_extraction.refused_attribute).
VAGUE_TYPES = frozenset({"concept", "thing", "entity", "other", "unknown", "activity", "emotion", ""})


def mirror_allowed(rel_type: str, source_type: str, target_type: str) -> bool:
    """Whether a relation between entities of these types may become a mirror fact.

    A 1.5B model (issue 13) related people to concepts ("Melanie spouse_of adoption"); a mirror fact makes such a
    relation a fact. Person-to-person relations need two persons, lives_in a place, works_at an organization,
    and any other relation two ends of a definite type (not "concept") and a type that reads as a relation
    (`_reads_as_relation`).
    """
    if rel_type in _PERSON_RELATIONS:
        return source_type in _PERSONS and target_type in _PERSONS
    kinds = _TARGET_KINDS.get(rel_type)
    if kinds is not None:
        return target_type in kinds and source_type not in VAGUE_TYPES
    if not _reads_as_relation(rel_type):
        return False
    return source_type not in VAGUE_TYPES and target_type not in VAGUE_TYPES


# The relation types of the schema are snake_case English identifiers (prompts: works_at, friend_of, ...), whatever
# the message's language: a type outside the known ones reads as a relation when it ends in one of these.
_RELATION_ENDINGS = frozenset({"of", "at", "in", "to", "with", "from", "for", "on", "by", "about"})
_BARE_RELATIONS = frozenset({"hired", "dating", "knows", "owns", "likes", "loves", "met", "mentors", "manages"})


def _reads_as_relation(rel_type: str) -> bool:
    """Whether "{source} {type in words} {target}" reads as a statement: a known type ("hired", "owns") or one that
    ends like a relation ("volunteers_at", "engaged_to"). A 1.5B model on LoCoMo related the two speakers by
    "conversation", and its mirror fact "Gina conversation Jon" was stored and then reconciled against real facts;
    only the mirror fact is not made."""
    words = rel_type.split("_")
    return rel_type in _BARE_RELATIONS or (len(words) >= 2 and words[-1] in _RELATION_ENDINGS)
