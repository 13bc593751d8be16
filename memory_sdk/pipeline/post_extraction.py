"""Stage: make one message's extraction coherent before resolution, with no LLM.

Aliases are grouped into one canonical entity per message; facts and relations are rewritten to canonical names;
facts that do not come from the current message are dropped and every fact is given the subject it names
(guards.py); identity and self relations are dropped; exact duplicates and near-duplicates (embedding cosine above
`semantic_dedup_threshold`, keep the first) are removed; relations no fact supports get a mirror fact when the
message names both of their ends. The decisions are pure functions; the stage only adds one batched embedding call.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import TypeAlias, cast

import numpy as np
import numpy.typing as npt

from memory_sdk.errors import ProviderError
from memory_sdk.lexicons import LANGUAGES, Lexicon, lexicon_for
from memory_sdk.llm.schemas import ExtractedEntity, ExtractedFact, ExtractedRelation
from memory_sdk.pipeline.fact_checks import FactContext, chat_line, drop_reason, profile_drop_reason, turn_statement
from memory_sdk.pipeline.guards import (
    VAGUE_TYPES,
    VALUE_CHECKED,
    Known,
    ground_entities,
    mirror_allowed,
    names_of,
    relation_named_in,
)
from memory_sdk.pipeline.llm_calls import embed_texts
from memory_sdk.pipeline.participants import participants_of, vocative_nicknames
from memory_sdk.pipeline.relatives import EVERY_LANGUAGE, canonical_name, kin_relation, possessed_thing, relative_of
from memory_sdk.pipeline.state import CHAT_LINE_CONTEXT, MIRROR_CONTEXT, CandidateFact, Deps, Extraction, WriteState
from memory_sdk.results import AdjustmentRule
from memory_sdk.text import fold, is_said, message_ngrams, normalise_alias, without_words
from memory_sdk.vectors import cosine

__all__ = [
    "MIRROR_CONFIDENCE",
    "SPEAKER_LABELS",
    "alias_nicknames",
    "canonicalise",
    "cosine",
    "drop_near_duplicates",
    "drop_possessed",
    "drop_unsaid_aliases",
    "fact_context",
    "fact_identity_text",
    "guard_facts",
    "normalise_rel_type",
    "plan_mirror_facts",
    "run",
]

# Subject labels the schema itself calls the speaker by, whatever the message's language.
SPEAKER_LABELS = frozenset({"user", "the user", "speaker"})


@functools.cache
def speaker_pronouns() -> frozenset[str]:
    """Subject labels that name the speaker (DESIGN.md, entity resolution special cases: "I", "me", "eu", "meu"...):
    every lexicon's `speaker_labels` ("ich", "je", "yo", "io" too) and SPEAKER_LABELS. In every language, not the
    message's only: the prompt is English, and a model may answer "I" for a message in any language. A label is
    resolution, not a move: the model named the speaker in its own words."""
    return SPEAKER_LABELS.union(*(lexicon_for(code).speaker_labels for code in LANGUAGES))


# A relation that only says two names are the same entity: never an edge.
_IDENTITY_RELATIONS = frozenset({"same_as", "alias_of", "also_known_as", "is_same_as", "identical_to", "is"})
# seeds/002, "Fatos-espelho": weak inference, so mirror facts rank below stated facts.
MIRROR_CONFIDENCE = 0.60
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
    """Reads the extraction, the request, the known entities and the lexicon; writes `candidate_facts`,
    `name_embeddings` and the coherent `extraction`. Every item of the answer it drops is an adjustment."""
    data = state.step.data
    speaker = state.request.speaker_name
    said = drop_unsaid_aliases(state.extraction, [state.request.message, *state.request.recent_messages])
    for given, kept in zip(state.extraction.entities, said.entities, strict=True):
        for alias in sorted(set(given.aliases) - set(kept.aliases)):
            why = f"no alias of {given.name!r}: neither the message nor a recent one says it"
            state.adjust("alias_not_said", alias, why)
    language = state.lexicon.code
    owned, possessions = drop_possessed(said, speaker, language)
    for name in possessions:
        why = "a thing the speaker owns is no entity: its facts are the speaker's"
        state.adjust("possession", name, why, before=name, after=speaker)
    named = name_relatives(owned, speaker, state.lexicon)
    canonical = canonicalise(named, speaker, language)
    grounded, dropped_entities = ground_entities(canonical, _grounding_texts(state), speaker)
    for entry in dropped_entities:
        state.adjust("entity_not_named", entry["name"], entry["why"])
    people = participants_of(state.request.recent_messages, state.request.participants, speaker)
    data["nicknames_aliased"] = nicknames = vocative_nicknames(state.request.message, people, speaker, state.lexicon)
    for nickname, person in nicknames.items():
        state.adjust("alias_added", nickname, f"the message calls the participant {person!r} so", after=person)
    grounded = alias_nicknames(grounded, nicknames)
    extraction, chat_lines = guard_facts(state, grounded, people)
    before = len(state.extraction.facts)
    facts = _drop_exact_duplicates(extraction.facts)
    for fact in extraction.facts:
        if fact not in facts:
            state.adjust("duplicate", fact.text, "the same fact twice in one answer")
    entity_names = names_of(extraction.entities, state.request.speaker_name)
    # A person addressed ("That's great, Mel!") is spoken to, not spoken of: the relation needs her named elsewhere.
    spoken_of = without_words(state.request.message, nicknames)
    first_person = state.lexicon.first_person
    named_in_message = [r for r in extraction.relations if relation_named_in(r, spoken_of, entity_names, first_person)]
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
    mirrors = plan_mirror_facts(facts, [r for r in typed if not _is_kin(r, speaker, language)])
    data["mirror_facts"] = [fact.text for fact in mirrors]
    candidates = [(fact, CHAT_LINE_CONTEXT if fact.text in chat_lines else "extracted") for fact in facts]
    candidates += [(fact, MIRROR_CONTEXT) for fact in mirrors]
    names = [entity.name for entity in extraction.entities]
    embeddings: Sequence[list[float] | None] = [None] * (len(candidates) + len(names))
    if candidates or names:
        try:
            embeddings = await embed_texts(state, deps.embedder, [fact.text for fact, _ in candidates] + names)
        except ProviderError as exc:
            state.fail(f"post_extraction: embedding failed, near-duplicate check skipped: {exc}")
    fact_vectors, name_vectors = list(embeddings[: len(candidates)]), embeddings[len(candidates) :]
    subjects = [fact.subject for fact, _ in candidates]
    message = state.request.message
    kept_at = drop_near_duplicates(
        fact_vectors,
        state.config.semantic_dedup_threshold,
        subjects,
        distinct=lambda i, j: two_facts(candidates[i][0], candidates[j][0], message),
    )
    for i in range(len(candidates)):
        if i not in kept_at and candidates[i][1] != MIRROR_CONTEXT:  # the mirror facts are the SDK's own
            threshold = state.config.semantic_dedup_threshold
            why = f"a near-duplicate of another fact of the answer about the same subject (cosine > {threshold})"
            state.adjust("duplicate", candidates[i][0].text, why)
    data["near_duplicates_dropped"] = [candidates[i][0].text for i in range(len(candidates)) if i not in kept_at]
    state.candidate_facts = [
        CandidateFact(fact=candidates[i][0], source_context=candidates[i][1], embedding=fact_vectors[i])
        for i in range(len(candidates))
        if i in kept_at
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


def _is_kin(relation: ExtractedRelation, speaker: str, language: str) -> bool:
    """A relation that only says what a relative's name says ("Ana's mom" parent_of Ana): it needs no mirror fact."""
    kin = kin_relation(relation.source, speaker, language)
    return kin is not None and kin[0] == relation.type and normalise_alias(kin[1]) == normalise_alias(relation.target)


def _grounding_texts(state: WriteState) -> list[str]:
    """Where an entity's name may come from: the message, the recent messages and the known memory."""
    known = [f"{k.name} {k.matched_alias}" for k in state.known_entities.values()]
    return [state.request.message, *state.request.recent_messages, state.existing_context, *known]


def drop_possessed(
    extraction: Extraction, speaker: str, language: str = EVERY_LANGUAGE
) -> tuple[Extraction, list[str]]:
    """Things the speaker owns ("my violin", "minha bicicleta") are not entities: the entity and its relations
    are dropped and a fact about it becomes a fact about the speaker; relatives ("my kids") stay. The possessives
    and kinship words are those of `language` (a lexicon code): with no lexicon nothing is dropped.

    Measured with a 1.5B model (issue 13): "my violin" and "my kids" became entities, and "Melanie hired my
    violin" a mirror fact. Returns the extraction and the names dropped.
    """
    persons = {normalise_alias(e.name) for e in extraction.entities if e.type.strip().lower() == "person"}

    def owned(name: str) -> bool:  # a person the model named ("my niece") is never a thing, known term or not
        return normalise_alias(name) not in persons and possessed_thing(name, language)

    dropped = [e.name for e in extraction.entities if owned(e.name)]
    entities = [
        e.model_copy(update={"aliases": [a for a in e.aliases if not owned(a)]})
        for e in extraction.entities
        if not owned(e.name)
    ]
    facts = [f.model_copy(update={"subject": speaker}) if owned(f.subject) else f for f in extraction.facts]
    relations = [r for r in extraction.relations if not (owned(r.source) or owned(r.target))]
    return replace(extraction, entities=entities, facts=facts, relations=relations), dropped


def name_relatives(extraction: Extraction, speaker: str, lexicon: Lexicon) -> Extraction:
    """A person the model names by a first-person possessive of the message's language ("meine Mutter", "mia
    suocera") that the kinship table does not know is the speaker's: "Anna's Mutter". Two speakers' "meine Mutter"
    are two people, not one entity `person:meine_mutter`. Resolution of the model's label, as "my mom" ->
    "Rafael's mom" is (seed 002): the fact's text is not touched. Without a lexicon nothing is renamed."""
    possessives = lexicon.possessives
    if not possessives:
        return extraction
    renamed: dict[str, str] = {}
    for entity in extraction.entities:
        first, _, rest = entity.name.strip().partition(" ")
        if entity.type.strip().lower() != "person" or not rest or normalise_alias(first) not in possessives:
            continue
        if relative_of(entity.name, speaker, lexicon.code) is None:
            renamed[entity.name] = f"{speaker}'s {rest.strip()}"
    if not renamed:
        return extraction

    def name(raw: str) -> str:
        return renamed.get(raw, raw)

    return replace(
        extraction,
        entities=[e.model_copy(update={"name": name(e.name)}) for e in extraction.entities],
        facts=[f.model_copy(update={"subject": name(f.subject)}) for f in extraction.facts],
        relations=[
            r.model_copy(update={"source": name(r.source), "target": name(r.target)}) for r in extraction.relations
        ],
        updated_profiles={name(k): v for k, v in extraction.updated_profiles.items()},
    )


def fact_context(state: WriteState, entities: Sequence[ExtractedEntity], people: Sequence[str]) -> FactContext:
    """What the fact checks read for this write: its message, recent messages and known memory, the names of
    `entities` and of the known entities, and the persons among them and `people` (the participants)."""
    request = state.request
    known = [
        ExtractedEntity(name=k.name, type=k.type, aliases=[k.matched_alias]) for k in state.known_entities.values()
    ]
    everyone = names_of([*entities, *known], request.speaker_name)
    named = names_of(entities, request.speaker_name, people)
    persons = frozenset(normalise_alias(form) for name in named[1:] if name.person for form in (name.name, *name.forms))
    return FactContext(
        message=request.message,
        recent=request.recent_messages,
        known_text=state.existing_context,
        known=Known.shown(state.known_entities.values(), request.speaker_name),
        names=everyone,
        people=persons,
        lexicon=state.lexicon,
    )


def _only_record(
    checked: Sequence[tuple[ExtractedFact, tuple[AdjustmentRule, str] | None]], context: FactContext
) -> tuple[ExtractedFact, str] | None:
    """The fact to keep as said, and why, when every fact of the answer is dropped: the first dropped as a question
    that is the speaker's turn copied with a statement in it (`fact_checks.turn_statement`), else None. Kept, it is
    marked a chat line and ends nothing; dropped, the message would leave nothing in memory."""
    if not checked or any(dropped is None for _fact, dropped in checked):
        return None
    for fact, dropped in checked:
        why = turn_statement(fact, context) if dropped is not None and dropped[0] == "question" else None
        if why is not None:
            return fact, why
    return None


def guard_facts(state: WriteState, extraction: Extraction, people: Sequence[str]) -> tuple[Extraction, frozenset[str]]:
    """The facts that pass every check of `fact_checks.FACT_CHECKS`, each dropped one an adjustment; a
    single-valued attribute that names no value is refused (`attribute_refused`). Nothing is rewritten or moved.
    Also the texts of the kept facts that are chat lines (`fact_checks.chat_line`), each marked an adjustment.

    `people` are the write's participants: persons whatever type the model gave them. A dropped fact does not fail
    the write: it is a guard doing its job on a model's routine mistake, reported, not something lost.
    """
    context = fact_context(state, extraction.entities, people)
    entity_types = {normalise_alias(e.name): e.type for e in extraction.entities}
    facts: list[ExtractedFact] = []
    chat_lines: set[str] = set()
    checked = [(fact, drop_reason(fact, context)) for fact in extraction.facts]
    said_fact, said_why = _only_record(checked, context) or (None, "")
    for fact, dropped in checked:
        as_said = fact is said_fact
        if dropped is not None and not as_said:
            state.adjust(dropped[0], fact.text, dropped[1])
            continue
        refused = refused_attribute(fact, extraction.entities, entity_types, state.config.single_valued_attributes)
        if refused is not None:
            state.adjust("attribute_refused", fact.text, refused, before=fact.attribute, after=None)
            fact = fact.model_copy(update={"attribute": None})
        line = said_why if as_said else chat_line(fact, context)
        if line is not None:
            state.adjust("chat_line", fact.text, line, before="extracted", after=CHAT_LINE_CONTEXT)
            chat_lines.add(fact.text)
        facts.append(fact)
    # The model's profile of an entity all of whose facts a guard dropped says what they said.
    lost = {normalise_alias(f.subject) for f in extraction.facts} - {normalise_alias(f.subject) for f in facts}
    profiles = {}
    for name, text in extraction.updated_profiles.items():
        why = "every fact about the entity was dropped" if normalise_alias(name) in lost else None
        why = why or profile_drop_reason(name, text, context, facts)
        if why is None:
            profiles[name] = text
        else:
            state.adjust("not_grounded", f"profile of {name}", why, before=text, after=None)
    entities = extraction.entities
    speaker = state.request.speaker_name
    if any(fact.subject == speaker for fact in facts) and all(entity.name != speaker for entity in entities):
        entities = [*entities, ExtractedEntity(name=speaker, type="person")]
    return replace(extraction, entities=entities, facts=facts, updated_profiles=profiles), frozenset(chat_lines)


def refused_attribute(
    fact: ExtractedFact,
    entities: Sequence[ExtractedEntity],
    types: dict[str, str],
    single_valued: Iterable[str],
) -> str | None:
    """Why the fact's single-valued attribute cannot be what it is about, or None: a `lives_in` or `employer` whose
    text names no entity of the answer but its subject ("I'm off to go swimming with the kids" as `lives_in`, a
    1.5B model's answer on LoCoMo), or only people and things of no definite kind (VAGUE_TYPES: "Jon has been into
    dancing since he was a kid" as `lives_in` beside an entity "Dancing" of type concept, LoCoMo conv-30 again).
    Such an attribute would let the new fact close the subject's real home or job; without it the fact is ADDed
    beside them. A language-neutral check: names and types are the answer's own."""
    attribute = (fact.attribute or "").strip().lower()
    if attribute not in VALUE_CHECKED or attribute not in set(single_valued):
        return None
    words = frozenset(normalise_alias(fact.text).split())
    subject = normalise_alias(fact.subject)
    for entity in entities:
        kind = types.get(normalise_alias(entity.name), "")
        if kind == "person" or kind in VAGUE_TYPES:
            continue  # no value of a home or an employer
        for name in (entity.name, *entity.aliases):
            form = normalise_alias(name)
            if form and form != subject and all(is_said(word, words) for word in form.split()):
                return None  # "bei der Deutschen Bahn" names "Deutsche Bahn"
    return f"a {attribute} fact that names no place or organisation of the answer (of a definite type)"


def _strip_hint(entity: ExtractedEntity) -> ExtractedEntity:
    """'Carol (namorada do Rafael)' -> 'Carol', type person: the hint describes a person, it is not a name."""
    match = _PARENTHESIS.search(entity.name)
    if not match or not entity.name[: match.start()].strip():
        return entity
    return ExtractedEntity(name=entity.name[: match.start()].strip(), type="person", aliases=entity.aliases)


def _entity_names(entity: ExtractedEntity, speaker: str, language: str) -> list[str]:
    """The entity's names in canonical form: "my mom" -> "Rafael's mom"; a named relative ("Ana's sister Julia")
    is the named person, with the relative form as an alias."""
    names: list[str] = []
    for name in (entity.name, *entity.aliases):
        found = relative_of(name, speaker, language)
        if found is not None and found.own_name:
            names += [found.own_name, f"{found.owner}'s {found.term}"]
        else:
            names.append(canonical_name(name, speaker, language))
    return names


def canonicalise(extraction: Extraction, speaker: str, language: str = EVERY_LANGUAGE) -> Extraction:
    """Group aliases into one canonical entity, rewrite facts and relations to canonical names; relatives are
    read in the kinship words of `language` (a lexicon code, pipeline/relatives.py).

    The speaker's pronouns map to the speaker's name; entity types are lowercased; a subject or relation end
    that no entity names becomes an entity of its own (the speaker is a person, anything else a concept).
    """
    pronouns = speaker_pronouns()
    canonical: dict[str, str] = {norm: speaker for norm in pronouns}
    canonical[normalise_alias(speaker)] = speaker
    merged: dict[str, ExtractedEntity] = {}
    for raw in extraction.entities:
        entity = _strip_hint(raw)
        names = _entity_names(entity, speaker, language)
        owner = next((canonical[n] for n in map(normalise_alias, names) if n in canonical), names[0])
        is_person = owner == speaker or any(relative_of(name, speaker, language) is not None for name in names)
        kind = "person" if is_person else entity.type.strip().lower() or "concept"
        current = merged.get(owner)
        aliases = [] if current is None else list(current.aliases)
        for name in names:
            norm = normalise_alias(name)
            if not norm:
                continue
            canonical.setdefault(norm, owner)
            if name != owner and norm not in pronouns and name not in aliases:
                aliases.append(name)
        merged[owner] = ExtractedEntity(name=owner, type=current.type if current else kind, aliases=aliases)

    def name_of(raw: str) -> str:
        stripped = canonical_name(_PARENTHESIS.sub("", raw).strip() or raw.strip(), speaker, language)
        owner = canonical.get(normalise_alias(stripped))
        if owner is None:
            owner = stripped
            canonical[normalise_alias(stripped)] = owner
        if owner not in merged:
            person = owner == speaker or relative_of(owner, speaker, language) is not None
            merged[owner] = ExtractedEntity(name=owner, type="person" if person else "concept")
        return owner

    def kin_of(entity: ExtractedEntity) -> list[ExtractedRelation]:
        """The relation each relative form of the entity states ("Ana's mom" parent_of Ana)."""
        edges = []
        for name in (entity.name, *entity.aliases):
            kin = kin_relation(name, speaker, language)
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


def drop_near_duplicates(
    vectors: Sequence[list[float] | None],
    threshold: float,
    subjects: Sequence[str] | None = None,
    distinct: Callable[[int, int], bool] | None = None,
) -> set[int]:
    """Indices to keep: each vector is dropped when its cosine to one of the NEAR_DUPLICATE_WINDOW kept vectors
    before it of the same subject exceeds `threshold` ("Tom moved to Leeds with Ana" and "Ana moved to Leeds with
    Tom" are two people's facts, however alike), unless `distinct(index, kept index)` says they are two facts all
    the same (the write passes `two_facts`). Vectors are normalised once, so each comparison is one dot product;
    with fewer than two vectors there is nothing to compare (most writes: one fact)."""
    present = [index for index, vector in enumerate(vectors) if vector is not None]
    if len(present) < 2:
        return set(range(len(vectors)))
    keep = set(range(len(vectors))).difference(present)
    kept: dict[str, list[tuple[int, _Vector]]] = {}
    for index in present:
        unit = _unit(cast("list[float]", vectors[index]))
        group = kept.setdefault(normalise_alias(subjects[index]) if subjects is not None else "", [])
        if all(
            _dot(unit, other) <= threshold or (distinct is not None and distinct(index, at))
            for at, other in group[-NEAR_DUPLICATE_WINDOW:]
        ):
            group.append((index, unit))
            keep.add(index)
    return keep


def two_facts(fact: ExtractedFact, other: ExtractedFact, message: str) -> bool:
    """Whether two facts of one answer whose vectors are close are two facts all the same: each comes from its own
    words of the message (evidences of which neither holds the other: "Toco violão nos fins de semana" and "meu
    aniversário é dia 14 de março", whose facts a capable model wrote in English and no word of the message is in
    either), or the first holds a word of the message the other lacks (`says_more`)."""
    evidence, theirs = normalise_alias(fact.evidence or ""), normalise_alias(other.evidence or "")
    if evidence and theirs and evidence not in theirs and theirs not in evidence:
        return True
    return says_more(fact.text, other.text, message)


def says_more(text: str, other: str, message: str) -> bool:
    """Whether the fact `text` holds a word of the message (3+ letters) that the fact `other` lacks (text.is_said):
    then the two are two facts of the message, however close their vectors. With LocalEmbedder "Benoît est
    allergique aux arachides" and "... aux fruits de mer" score above semantic_dedup_threshold, and a capable
    model's second allergy was dropped (probe fr-allergies); a weak model's restatement in other words ("Jon lost
    his banking job" after "Jon lost his job as a banker yesterday") brings no word of the message and still goes.
    Language-neutral: a negation word the other fact lacks ("not") keeps an opposite fact too."""
    said = frozenset(normalise_alias(message).split())
    theirs = frozenset(normalise_alias(other).split())
    return any(
        (len(word) >= 3 or word.isdigit()) and word in said and not is_said(word, theirs)
        for word in normalise_alias(text).split()
    )


_Vector: TypeAlias = "npt.NDArray[np.float64]"


def _unit(vector: list[float]) -> _Vector:
    array = np.asarray(vector, dtype=np.float64)
    norm = math.sqrt(_dot(array, array))
    # numpy divides element by element, each quotient the IEEE one Python's / gives.
    return array / norm if norm else array


def _dot(a: _Vector, b: _Vector) -> float:
    """The dot product as Python's sum() over the products gives it, bit for bit: the products left to right
    (np.add.accumulate adds in order; np.dot and np.sum do not), and + 0.0 because sum() starts from 0 and so
    never returns -0.0. A cosine at the threshold therefore decides as it did before numpy."""
    if not a.size:
        return 0.0
    with np.errstate(over="ignore", invalid="ignore"):  # Python's floats overflow to inf and NaN without a word
        return float(np.add.accumulate(a * b)[-1]) + 0.0
