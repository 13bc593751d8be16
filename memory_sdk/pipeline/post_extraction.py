"""Stage: make one message's extraction coherent before resolution, with no LLM.

Aliases are grouped into one canonical entity per message; facts and relations are rewritten to canonical names;
facts that do not come from the current message are dropped and every fact is given the subject it names
(guards.py); identity and self relations are dropped; exact duplicates and near-duplicates (embedding cosine above
`semantic_dedup_threshold`, keep the first) are removed; relations no fact supports get a mirror fact when the
message names both of their ends. The decisions are pure functions; the stage only adds one batched embedding call.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import TypeAlias, cast

import numpy as np
import numpy.typing as npt

from memory_sdk.errors import ProviderError
from memory_sdk.llm.schemas import ExtractedEntity, ExtractedFact, ExtractedRelation
from memory_sdk.pipeline.guards import (
    Known,
    check_subject,
    copied_from_memory,
    defined_from_knowledge,
    ground_entities,
    ground_fact,
    inferred_attribute,
    mirror_allowed,
    names_of,
    relation_named_in,
)
from memory_sdk.pipeline.llm_calls import embed_texts
from memory_sdk.pipeline.participants import participants_of, vocative_nicknames
from memory_sdk.pipeline.relatives import canonical_name, kin_relation, possessed_thing, relative_of
from memory_sdk.pipeline.state import CandidateFact, Deps, Extraction, WriteState
from memory_sdk.text import fold, message_ngrams, normalise_alias
from memory_sdk.vectors import cosine

__all__ = [
    "MIRROR_CONFIDENCE",
    "SPEAKER_PRONOUNS",
    "alias_nicknames",
    "canonicalise",
    "cosine",
    "drop_near_duplicates",
    "drop_possessed",
    "drop_unsaid_aliases",
    "fact_identity_text",
    "guard_facts",
    "name_subjects",
    "normalise_rel_type",
    "plan_mirror_facts",
    "run",
]

# Words that name the speaker, in English and Portuguese (DESIGN.md, entity resolution special cases).
SPEAKER_PRONOUNS = frozenset(
    {"i", "me", "my", "myself", "mine", "eu", "mim", "meu", "minha", "comigo", "user", "the user", "speaker"}
)
# A relation that only says two names are the same entity: never an edge.
_IDENTITY_RELATIONS = frozenset({"same_as", "alias_of", "also_known_as", "is_same_as", "identical_to", "is"})
# seeds/002, "Fatos-espelho": weak inference, so mirror facts rank below stated facts.
MIRROR_CONFIDENCE = 0.60
MIRROR_CONTEXT = "inferred_from_relation"
# Small models list job titles, dates and amounts as entities; they belong in facts. Such an "entity" is kept
# only when a fact is about it or a relation points at it.
_NON_ENTITY_TYPES = frozenset(
    {
        "job_title",
        "job",
        "role",
        "occupation",
        "position",
        "title",
        "date",
        "time",
        "duration",
        "number",
        "amount",
        "quantity",
        "money",
        "price",
        "attribute",
    }
)
_PARENTHESIS = re.compile(r"\s*\(([^)]*)\)\s*$")
# The near-duplicate check compares a fact with at most this many facts kept before it, so it costs O(n x window)
# dot products. With the parse caps (30 facts, 20 relations so at most 20 mirror facts) a write has at most 50
# candidates and the window never bites; it bounds the check for any input (500 facts used to take 43 s).
NEAR_DUPLICATE_WINDOW = 64


async def run(state: WriteState, deps: Deps) -> None:
    data = state.step.data
    said = drop_unsaid_aliases(state.extraction, [state.request.message, *state.request.recent_messages])
    data["aliases_dropped"] = sum(
        len(a.aliases) - len(b.aliases) for a, b in zip(state.extraction.entities, said.entities, strict=True)
    )
    speaker = state.request.speaker_name
    owned, data["possessions_dropped"] = drop_possessed(said, speaker)
    grounded, data["entities_dropped"] = ground_entities(canonicalise(owned, speaker), _grounding_texts(state), speaker)
    people = participants_of(state.request.recent_messages, state.request.participants, speaker)
    data["nicknames_aliased"] = nicknames = vocative_nicknames(state.request.message, people, speaker)
    grounded = alias_nicknames(grounded, nicknames)
    extraction = guard_facts(state, grounded, people)
    before = len(state.extraction.facts)
    named = name_subjects(extraction, state.request.speaker_name)
    data["subjects_prefixed"] = sum(a.text != b.text for a, b in zip(extraction.facts, named, strict=True))
    facts = _drop_exact_duplicates(named)
    data["exact_duplicates_dropped"] = len(extraction.facts) - len(facts)
    data["relations_dropped"] = len(state.extraction.relations) - len(extraction.relations)
    entity_names = names_of(extraction.entities, state.request.speaker_name)
    # A person addressed ("That's great, Mel!") is spoken to, not spoken of: the relation needs her named elsewhere.
    spoken_of = _without_words(state.request.message, nicknames)
    named_in_message = [r for r in extraction.relations if relation_named_in(r, spoken_of, entity_names)]
    data["relations_not_in_message"] = [
        f"{r.source} {r.type} {r.target}" for r in extraction.relations if r not in named_in_message
    ]
    types = {entity.name: entity.type for entity in extraction.entities}
    typed = [r for r in named_in_message if mirror_allowed(r.type, types.get(r.source, ""), types.get(r.target, ""))]
    data["mirror_facts_refused"] = [
        f"{r.source} ({types.get(r.source)}) {r.type} {r.target} ({types.get(r.target)})"
        for r in named_in_message
        if r not in typed
    ]
    mirrors = plan_mirror_facts(facts, [r for r in typed if not _is_kin(r, speaker)])
    data["mirror_facts"] = [fact.text for fact in mirrors]
    candidates = [(fact, "extracted") for fact in facts] + [(fact, MIRROR_CONTEXT) for fact in mirrors]
    names = [entity.name for entity in extraction.entities]
    embeddings: Sequence[list[float] | None] = [None] * (len(candidates) + len(names))
    if candidates or names:
        try:
            embeddings = await embed_texts(state, deps.embedder, [fact.text for fact, _ in candidates] + names)
        except ProviderError as exc:
            state.fail(f"post_extraction: embedding failed, near-duplicate check skipped: {exc}")
    fact_vectors, name_vectors = list(embeddings[: len(candidates)]), embeddings[len(candidates) :]
    kept = drop_near_duplicates(fact_vectors, state.config.semantic_dedup_threshold)
    data["near_duplicates_dropped"] = [candidates[i][0].text for i in range(len(candidates)) if i not in kept]
    state.candidate_facts = [
        CandidateFact(fact=candidates[i][0], source_context=candidates[i][1], embedding=fact_vectors[i])
        for i in range(len(candidates))
        if i in kept
    ]
    state.name_embeddings = {
        normalise_alias(name): vector for name, vector in zip(names, name_vectors, strict=True) if vector
    }
    state.extraction = extraction
    data.update(
        entities=[entity.name for entity in extraction.entities],
        facts_in=before,
        facts_out=len(state.candidate_facts),
    )


def _without_words(message: str, words: Iterable[str]) -> str:
    """`message` with each of `words` blanked where it stands as a word."""
    for word in words:
        message = re.sub(rf"(?<!\w){re.escape(word)}(?!\w)", " ", message)
    return message


def alias_nicknames(extraction: Extraction, nicknames: dict[str, str]) -> Extraction:
    """Each nickname the message calls a participant by becomes an alias of that participant's entity (added, with
    no facts, when the answer does not list them); a nickname the answer lists as an entity of its own is left to
    resolution, which maps it to the participant (pipeline/resolution.py)."""
    entities = list(extraction.entities)
    listed = {normalise_alias(name) for e in entities for name in (e.name, *e.aliases)}
    for nickname, person in nicknames.items():
        if normalise_alias(nickname) in listed:
            continue
        at = next((i for i, e in enumerate(entities) if normalise_alias(e.name) == normalise_alias(person)), None)
        if at is None:
            entities.append(ExtractedEntity(name=person, type="person", aliases=[nickname]))
        else:
            entities[at] = entities[at].model_copy(update={"aliases": [*entities[at].aliases, nickname]})
    return replace(extraction, entities=entities)


def _is_kin(relation: ExtractedRelation, speaker: str) -> bool:
    """A relation that only says what a relative's name says ("Ana's mom" parent_of Ana): it needs no mirror fact."""
    kin = kin_relation(relation.source, speaker)
    return kin is not None and kin[0] == relation.type and normalise_alias(kin[1]) == normalise_alias(relation.target)


def _grounding_texts(state: WriteState) -> list[str]:
    """Where an entity's name may come from: the message, the recent messages and the known memory."""
    known = [f"{k.name} {k.matched_alias}" for k in state.known_entities.values()]
    return [state.request.message, *state.request.recent_messages, state.existing_context, *known]


def drop_possessed(extraction: Extraction, speaker: str) -> tuple[Extraction, list[str]]:
    """Things the speaker owns ("my violin", "minha bicicleta") are not entities: the entity and its relations
    are dropped and a fact about it becomes a fact about the speaker; relatives ("my kids") stay.

    Measured with a 1.5B model (issue 13): "my violin" and "my kids" became entities, and "Melanie hired my
    violin" a mirror fact. Returns the extraction and the names dropped.
    """
    dropped = [e.name for e in extraction.entities if possessed_thing(e.name)]
    entities = [
        e.model_copy(update={"aliases": [a for a in e.aliases if not possessed_thing(a)]})
        for e in extraction.entities
        if not possessed_thing(e.name)
    ]
    facts = [f.model_copy(update={"subject": speaker}) if possessed_thing(f.subject) else f for f in extraction.facts]
    relations = [r for r in extraction.relations if not (possessed_thing(r.source) or possessed_thing(r.target))]
    return replace(extraction, entities=entities, facts=facts, relations=relations), dropped


def guard_facts(state: WriteState, extraction: Extraction, people: Sequence[str]) -> Extraction:
    """The facts that come from this message (guards.ground_fact), each about the entity it names
    (guards.check_subject; `people` are the write's participants, persons whatever type the model gave them), none
    copied from another entity's known memory (guards.copied_from_memory), none defining a place or thing from what
    the model knows rather than from the message (guards.defined_from_knowledge), with the attribute its text shows
    when the model left it out (guards.inferred_attribute).

    A dropped or re-subjected fact is listed in the trace (`facts_dropped`, `subjects_changed`) but does not
    fail the write: it is the guard doing its job on a model's routine mistake, not something lost (docs/decisions.md).
    """
    request = state.request
    known = [
        ExtractedEntity(name=k.name, type=k.type, aliases=[k.matched_alias]) for k in state.known_entities.values()
    ]
    everyone = names_of([*extraction.entities, *known], request.speaker_name)
    named = names_of(extraction.entities, request.speaker_name, people)
    persons = {normalise_alias(form) for name in named if name.person for form in (name.name, *name.forms)}
    elsewhere = [*request.recent_messages, state.existing_context]
    said = [request.message, *request.recent_messages]
    shown = Known.shown(state.known_entities.values(), request.speaker_name)
    facts: list[ExtractedFact] = []
    dropped: list[dict[str, str]] = []
    changed: list[dict[str, str]] = []
    attributes: list[dict[str, str | None]] = []
    for fact in extraction.facts:
        grounding = ground_fact(fact, request.message, elsewhere, everyone)
        if not grounding.kept:
            dropped.append({"text": fact.text, "why": grounding.why})
            continue
        check = check_subject(fact, grounding.span, named)
        if check.subject is None:
            dropped.append({"text": fact.text, "why": check.why})
            continue
        if check.why:
            changed.append({"text": fact.text, "from": fact.subject, "to": check.subject, "why": check.why})
            fact = fact.model_copy(update={"subject": check.subject, "text": check.text})
        copied = copied_from_memory(fact.text, fact.subject, said, shown, request.speaker_name)
        if copied is None and normalise_alias(fact.subject) not in persons:
            copied = defined_from_knowledge(fact.text, fact.subject, request.message)
        if copied is not None:
            dropped.append({"text": fact.text, "why": copied})
            continue
        inferred = inferred_attribute(fact.text, fact.attribute)
        if inferred is not None:
            attributes.append({"text": fact.text, "from": fact.attribute, "to": inferred[0], "why": inferred[1]})
            fact = fact.model_copy(update={"attribute": inferred[0]})
        facts.append(fact)
    # The model's profile of an entity all of whose facts a guard dropped or moved says what they said.
    lost = {normalise_alias(f.subject) for f in extraction.facts} - {normalise_alias(f.subject) for f in facts}
    profiles = {name: text for name, text in extraction.updated_profiles.items() if normalise_alias(name) not in lost}
    state.step.data.update(
        facts_dropped=dropped,
        subjects_changed=changed,
        attributes_inferred=attributes,
        profiles_dropped=[name for name in extraction.updated_profiles if name not in profiles],
    )
    entities = extraction.entities
    speaker = request.speaker_name
    if any(fact.subject == speaker for fact in facts) and all(entity.name != speaker for entity in entities):
        entities = [*entities, ExtractedEntity(name=speaker, type="person")]
    return replace(extraction, entities=entities, facts=facts, updated_profiles=profiles)


def _strip_hint(entity: ExtractedEntity) -> ExtractedEntity:
    """'Carol (namorada do Rafael)' -> 'Carol', type person: the hint describes a person, it is not a name."""
    match = _PARENTHESIS.search(entity.name)
    if not match or not entity.name[: match.start()].strip():
        return entity
    return ExtractedEntity(name=entity.name[: match.start()].strip(), type="person", aliases=entity.aliases)


def _entity_names(entity: ExtractedEntity, speaker: str) -> list[str]:
    """The entity's names in canonical form: "my mom" -> "Rafael's mom"; a named relative ("Ana's sister Julia")
    is the named person, with the relative form as an alias."""
    names: list[str] = []
    for name in (entity.name, *entity.aliases):
        found = relative_of(name, speaker)
        if found is not None and found.own_name:
            names += [found.own_name, f"{found.owner}'s {found.term}"]
        else:
            names.append(canonical_name(name, speaker))
    return names


def canonicalise(extraction: Extraction, speaker: str) -> Extraction:
    """Group aliases into one canonical entity, rewrite facts and relations to canonical names.

    The speaker's pronouns map to the speaker's name; entity types are lowercased; a subject or relation end
    that no entity names becomes an entity of its own (the speaker is a person, anything else a concept).
    """
    canonical: dict[str, str] = {norm: speaker for norm in SPEAKER_PRONOUNS}
    canonical[normalise_alias(speaker)] = speaker
    merged: dict[str, ExtractedEntity] = {}
    for raw in extraction.entities:
        entity = _strip_hint(raw)
        names = _entity_names(entity, speaker)
        owner = next((canonical[n] for n in map(normalise_alias, names) if n in canonical), names[0])
        is_person = owner == speaker or any(relative_of(name, speaker) is not None for name in names)
        kind = "person" if is_person else entity.type.strip().lower() or "concept"
        current = merged.get(owner)
        aliases = [] if current is None else list(current.aliases)
        for name in names:
            norm = normalise_alias(name)
            if not norm:
                continue
            canonical.setdefault(norm, owner)
            if name != owner and norm not in SPEAKER_PRONOUNS and name not in aliases:
                aliases.append(name)
        merged[owner] = ExtractedEntity(name=owner, type=current.type if current else kind, aliases=aliases)

    def name_of(raw: str) -> str:
        stripped = canonical_name(_PARENTHESIS.sub("", raw).strip() or raw.strip(), speaker)
        owner = canonical.get(normalise_alias(stripped))
        if owner is None:
            owner = stripped
            canonical[normalise_alias(stripped)] = owner
        if owner not in merged:
            person = owner == speaker or relative_of(owner, speaker) is not None
            merged[owner] = ExtractedEntity(name=owner, type="person" if person else "concept")
        return owner

    def kin_of(entity: ExtractedEntity) -> list[ExtractedRelation]:
        """The relation each relative form of the entity states ("Ana's mom" parent_of Ana)."""
        edges = []
        for name in (entity.name, *entity.aliases):
            kin = kin_relation(name, speaker)
            if kin is not None and normalise_alias(kin[1]) != normalise_alias(entity.name):
                target = name_of(kin[1])
                merged[target] = merged[target].model_copy(update={"type": "person"})
                edges.append(ExtractedRelation(source=entity.name, target=target, type=kin[0]))
        return edges

    facts = [fact.model_copy(update={"subject": name_of(fact.subject)}) for fact in extraction.facts]
    relations: list[ExtractedRelation] = []
    kin = [edge for entity in list(merged.values()) for edge in kin_of(entity)]
    for relation in [*extraction.relations, *kin]:
        rel_type = normalise_rel_type(relation.type)
        if rel_type in _IDENTITY_RELATIONS:
            continue
        source, target = name_of(relation.source), name_of(relation.target)
        if source == target:
            continue
        edge = ExtractedRelation(source=source, target=target, type=rel_type)
        if edge not in relations:  # the same edge twice would reinforce itself within one message
            relations.append(edge)
    profiles = {name_of(name): text for name, text in extraction.updated_profiles.items() if text.strip()}
    used = {fact.subject for fact in facts} | {r.source for r in relations} | {r.target for r in relations}
    return Extraction(
        entities=[e for e in merged.values() if e.name in used or e.type not in _NON_ENTITY_TYPES],
        facts=facts,
        relations=relations,
        updated_profiles=profiles,
        emotion=extraction.emotion,
        prompt_version=extraction.prompt_version,
    )


# Relation types that mean the same edge are stored under one name (docs/decisions.md, "Relationship types").
REL_TYPE_SYNONYMS: dict[str, str] = {
    "resides_in": "lives_in",
    "lives_at": "lives_in",
    "mora_em": "lives_in",
    "mora_na": "lives_in",
    "mora_no": "lives_in",
    "works_for": "works_at",
    "employed_by": "works_at",
    "employed_at": "works_at",
    "trabalha_em": "works_at",
    "trabalha_na": "works_at",
    "trabalha_no": "works_at",
    "married_to": "spouse_of",
    "wife_of": "spouse_of",
    "husband_of": "spouse_of",
    "esposa_de": "spouse_of",
    "marido_de": "spouse_of",
    "friends_with": "friend_of",
    "amigo_de": "friend_of",
    "amiga_de": "friend_of",
    "mother_of": "parent_of",
    "father_of": "parent_of",
    "worked_at": "former_employee_of",
}


def normalise_rel_type(rel_type: str) -> str:
    """snake_case, folded, with synonyms mapped to one name: "Works For" -> "works_at"."""
    snake = "_".join(normalise_alias(rel_type).split())
    return REL_TYPE_SYNONYMS.get(snake, snake)


def drop_unsaid_aliases(extraction: Extraction, texts: list[str]) -> Extraction:
    """Keep only the aliases the message (or a recent message) actually uses.

    Aliases are registered for good, so an invented one ("Guilherme M. M.", "Curitiba, PR": a 1.5B model's
    additions in our benchmark) would make later resolution match names nobody used. Relationship terms
    ("my mom") count as used when their words are.
    """
    said = {gram for text in texts for gram in message_ngrams(text)}
    entities = [
        entity.model_copy(update={"aliases": [a for a in entity.aliases if normalise_alias(a) in said]})
        for entity in extraction.entities
    ]
    return Extraction(
        entities=entities,
        facts=extraction.facts,
        relations=extraction.relations,
        updated_profiles=extraction.updated_profiles,
        emotion=extraction.emotion,
        prompt_version=extraction.prompt_version,
    )


def name_subjects(extraction: Extraction, speaker: str) -> list[ExtractedFact]:
    """Facts must name their subject: "Moro em Curitiba" about Rafael becomes "Rafael: Moro em Curitiba".

    The prompt asks for it; this is the guard for models that keep the speaker's own words. A fact mentioning its
    subject by any word of its name or aliases ("Ricardo" for Ricardo Gomes; the speaker for "Rafael's mom") is
    left as it is.
    """
    names: dict[str, list[str]] = {e.name: [e.name, *e.aliases] for e in extraction.entities}
    named: list[ExtractedFact] = []
    for fact in extraction.facts:
        forms = names.get(fact.subject, [fact.subject])
        relative = relative_of(fact.subject, speaker)
        if relative is not None and relative.own_name is None:
            forms = [*forms, relative.owner]
        words = set(normalise_alias(fact.text).split())
        named_words = {w for form in forms for w in normalise_alias(form).split() if len(w) >= 3}
        if words & named_words or not named_words:
            named.append(fact)
        else:
            named.append(fact.model_copy(update={"text": f"{fact.subject}: {fact.text.strip()}"}))
    return named


def fact_identity_text(text: str) -> str:
    """A fact text with case, accents and punctuation ignored: equal texts say exactly the same."""
    return normalise_alias(text)


def _fact_identity(fact: ExtractedFact) -> tuple[str, str]:
    return normalise_alias(fact.subject), fact_identity_text(fact.text)


def _drop_exact_duplicates(facts: list[ExtractedFact]) -> list[ExtractedFact]:
    seen: set[tuple[str, str]] = set()
    kept: list[ExtractedFact] = []
    for fact in facts:
        identity = _fact_identity(fact)
        if identity not in seen:
            seen.add(identity)
            kept.append(fact)
    return kept


def mentions(text: str, name: str) -> bool:
    """Whether `text` mentions `name` (case- and accent-insensitive substring; names under 3 chars never)."""
    folded_name = fold(name).strip()
    return len(folded_name) >= 3 and folded_name in fold(text)


def plan_mirror_facts(facts: list[ExtractedFact], relations: list[ExtractedRelation]) -> list[ExtractedFact]:
    """A synthetic fact "{source} {type in words} {target}" for each relation no extracted fact supports."""
    mirrors: list[ExtractedFact] = []
    for relation in relations:
        supported = any(
            mentions(fact.text, relation.source) and mentions(fact.text, relation.target) for fact in [*facts, *mirrors]
        )
        if not supported:
            mirrors.append(
                ExtractedFact(
                    subject=relation.source,
                    text=f"{relation.source} {relation.type.replace('_', ' ')} {relation.target}",
                    importance_category="relationship_change",
                    confidence=MIRROR_CONFIDENCE,
                )
            )
    return mirrors


def drop_near_duplicates(vectors: Sequence[list[float] | None], threshold: float) -> set[int]:
    """Indices to keep: each vector is dropped when its cosine to one of the NEAR_DUPLICATE_WINDOW kept vectors
    before it exceeds `threshold`. Vectors are normalised once, so each comparison is one dot product; with fewer
    than two vectors there is nothing to compare (most writes: one fact)."""
    present = [index for index, vector in enumerate(vectors) if vector is not None]
    if len(present) < 2:
        return set(range(len(vectors)))
    keep = set(range(len(vectors))).difference(present)
    kept: list[_Vector] = []
    for index in present:
        unit = _unit(cast("list[float]", vectors[index]))
        if all(_dot(unit, other) <= threshold for other in kept[-NEAR_DUPLICATE_WINDOW:]):
            kept.append(unit)
            keep.add(index)
    return keep


_Vector: TypeAlias = "npt.NDArray[np.float64]"


def _unit(vector: list[float]) -> _Vector:
    array = np.asarray(vector, dtype=np.float64)
    norm = math.sqrt(_dot(array, array))
    # numpy divides element by element, each quotient the IEEE one Python's / gives.
    return array / norm if norm else array


def _dot(a: _Vector, b: _Vector) -> float:
    """The dot product as Python's sum() over the products gives it, bit for bit: the products left to right
    (np.add.accumulate adds in order; np.dot and np.sum do not), and + 0.0 because sum() starts from 0 and so
    never returns -0.0. A cosine at the threshold therefore decides as it did before numpy (session 21)."""
    if not a.size:
        return 0.0
    with np.errstate(over="ignore", invalid="ignore"):  # Python's floats overflow to inf and NaN without a word
        return float(np.add.accumulate(a * b)[-1]) + 0.0
