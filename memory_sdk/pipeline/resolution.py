"""Stage: resolve each extracted entity to an entity key of the agent's memory, in three phases.

Phase 1, exact (no LLM): the speaker and their pronouns; speaker-relative terms ("my mom"); the alias registry
(display names are aliases too); the typed key; a person's prefix or diminutive ("Carol" -> "Carolina", never
under 3 letters). Phase 2, fuzzy: cosine of name embeddings through pgvector's index (rapidfuzz string
similarity when there is no embedding) against entities of a compatible type: at or above `fuzzy_threshold`
resolves, from AMBIGUOUS_FLOOR up sends the top candidates to phase 3, below creates a new entity. Phase 3, LLM:
one call per ambiguous name, run concurrently, outside any transaction. A failed call or an answer that is not one
of the candidates shown makes a new entity (a duplicate can be merged later, a wrong merge corrupts memory) and
fails the write's success flag, since the new entity may be a duplicate.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from rapidfuzz import fuzz, process

from memory_sdk.errors import ProviderError
from memory_sdk.llm.prompts import EntityResolutionContext, load_prompt
from memory_sdk.llm.schemas import EntityResolutionResponse, ExtractedEntity
from memory_sdk.pipeline import reconciliation
from memory_sdk.pipeline.llm_calls import call_llm, shown_index
from memory_sdk.pipeline.participants import MIN_NICKNAME_CHARS, is_nickname, nickname_of, participants_of
from memory_sdk.pipeline.relatives import relative_key, relative_of
from memory_sdk.pipeline.state import Deps, WriteState
from memory_sdk.results import ResolutionPhase, ResolvedEntity
from memory_sdk.store import registry
from memory_sdk.store.candidates import CandidateProbe, Shortlists, while_running
from memory_sdk.store.database import Connection
from memory_sdk.store.registry import EntityRow, NameMatch
from memory_sdk.text import entity_key, fold, normalise_alias

__all__ = [
    "AMBIGUOUS_FLOOR",
    "MatchCandidate",
    "compatible_types",
    "fuzzy_verdict",
    "prefix_match",
    "run",
]

# seeds/002, "Fase 2": below 0.50 a name is new; from 0.50 to fuzzy_threshold the LLM decides.
AMBIGUOUS_FLOOR = 0.50
# seeds/002, "Fase 3": the LLM sees the top 3 candidates.
LLM_CANDIDATES = 3
# seeds/002, "Fase 1": prefix/diminutive matching needs at least 3 letters ("Jo" is not "João").
MIN_PREFIX_CHARS = 3
# A prefix must also cover at least half of the matched first name, so "Ana" is not "Anastasia" by prefix.
MIN_PREFIX_COVERAGE = 0.5
# Types that say little about what an entity is: they may match any type.
_VAGUE_TYPES = frozenset({"concept", "thing", "entity", "other", "unknown", ""})


# A stored entity near an extracted name, with its similarity: what phases 2 and 3 weigh.
MatchCandidate = NameMatch


@dataclass
class _Pending:
    """One extracted entity on its way through the phases."""

    entity: ExtractedEntity
    names: list[str]
    typed_key: str
    resolved: ResolvedEntity | None = None
    candidates: list[MatchCandidate] = field(default_factory=list)
    note: str = ""
    # Whether a fact or relation of the write is about it: an entity only named is not worth an LLM call.
    used: bool = True


def compatible_types(a: str, b: str) -> bool:
    return a == b or a in _VAGUE_TYPES or b in _VAGUE_TYPES


def fuzzy_verdict(
    candidates: Sequence[MatchCandidate], threshold: float
) -> tuple[Literal["fuzzy", "llm", "new"], list[MatchCandidate]]:
    """Phase 2 as a pure function: resolve, ask the LLM about the top candidates, or create."""
    ranked = sorted(candidates, key=lambda c: c.score, reverse=True)
    if ranked and ranked[0].score >= threshold:
        return "fuzzy", ranked[:1]
    ambiguous = [c for c in ranked if c.score >= AMBIGUOUS_FLOOR][:LLM_CANDIDATES]
    return ("llm", ambiguous) if ambiguous else ("new", [])


def prefix_match(name: str, known: Sequence[tuple[str, str]]) -> str | None:
    """The one person key whose name extends (or is extended by) `name`, word by word; None if none or several.

    `known` holds (normalised alias, key) of the agent's people. Whole names are compared: the first words by
    prefix (at least MIN_PREFIX_CHARS letters covering MIN_PREFIX_COVERAGE of the longer), every later word the
    shorter name has by prefix too ("Carol Souza" is "Carolina Souza", not "Carolina Lima"). A possessive is never
    a name: "Caroline's mom" is no Caroline (issue 13).
    """
    words = normalise_alias(name).split(" ")
    if len(words[0]) < MIN_PREFIX_CHARS or "s" in words[1:]:
        return None
    keys = {key for alias, key in known if _extends(words, alias.split(" "))}
    return keys.pop() if len(keys) == 1 else None


def _extends(words: list[str], other: list[str]) -> bool:
    """Whether two names agree word by word, each pair by prefix; the first pair under the length rules."""
    if "s" in other[1:]:
        return False
    shorter, longer = sorted((words[0], other[0]), key=len)
    covers = len(shorter) / len(longer) >= MIN_PREFIX_COVERAGE
    if len(shorter) < MIN_PREFIX_CHARS or not longer.startswith(shorter) or not covers:
        return False
    return all(a.startswith(b) or b.startswith(a) for a, b in zip(words[1:], other[1:], strict=False))


async def run(state: WriteState, deps: Deps) -> None:
    request = state.request
    speaker = request.speaker_name
    people = participants_of(request.recent_messages, request.participants, speaker)
    # Relatives last, so that their owner is resolved first ("Melanie's mom" is keyed under Melanie's key).
    used = {fact.subject for fact in state.extraction.facts}
    used |= {end for relation in state.extraction.relations for end in (relation.source, relation.target)}
    pending = sorted(
        (_pending(entity, entity.name in used) for entity in state.extraction.entities),
        key=lambda item: relative_of(item.entity.name, speaker, state.lexicon.code) is not None,
    )
    lookup = _Lookup(
        aliases=sorted({normalise_alias(name) for p in pending for name in p.names}),
        keys=sorted({*(p.typed_key for p in pending), *(entity_key("person", person) for person in people)}),
        prefixes=[*_nickname_probes(people), *filter(None, map(_prefix_probe, pending))],
    )
    ambiguous: list[tuple[_Pending, list[MatchCandidate]]] = []
    async with deps.db.tenant(request.agent_id) as conn:
        # Reconciliation's shortlists of large subjects are picked while the server looks the names up.
        shortlists = Shortlists()
        found = await while_running(
            lookup.find(conn, request.agent_id),
            lambda: shortlists.pick(conn, request.agent_id, _likely_probes(state), reconciliation.MAX_CANDIDATES),
        )
        merges = _nickname_merges(people, found)
        if not merges:
            await _resolve(conn, state, pending, _Known(people, found, {}), ambiguous, shortlists)
    if merges:
        # Rare: a stored person named only by a participant's nickname. Merge, then read again.
        await _merge_nicknames(state, deps, merges)
        async with deps.db.tenant(request.agent_id) as conn:
            found = await lookup.find(conn, request.agent_id)
            await _resolve(conn, state, pending, _Known(people, found, {}), ambiguous)
    if ambiguous:
        await asyncio.gather(*(_ask(state, deps, item, shown) for item, shown in ambiguous))
        _record(state, pending)


def _likely_probes(state: WriteState) -> list[CandidateProbe]:
    """Reconciliation's probes as resolution most likely keys them: each fact's subject under the type the
    extraction gave that name (a person's when it gave none). A wrong guess costs a shortlist picked for nothing:
    the read picks its own for a subject it was not picked for."""
    types = {entity.name: entity.type for entity in state.extraction.entities}
    probes: list[CandidateProbe] = []
    for candidate in state.candidate_facts:
        subject = candidate.fact.subject
        if candidate.embedding is not None:
            probes.append(CandidateProbe(entity_key(types.get(subject, "person"), subject), candidate.embedding))
    return probes


@dataclass(frozen=True)
class _Lookup:
    """What resolution reads in one statement (registry.find_entities): the names' aliases, the typed keys and
    the participants' keys, the participants' nicknames and the people's prefixes."""

    aliases: list[str]
    keys: list[str]
    prefixes: list[registry.PrefixProbe]

    async def find(self, conn: Connection, agent_id: str) -> registry.EntityMatches:
        return await registry.find_entities(
            conn, agent_id, aliases=self.aliases, keys=self.keys, prefixes=self.prefixes
        )


async def _resolve(
    conn: Connection,
    state: WriteState,
    pending: list[_Pending],
    known: _Known,
    ambiguous: list[tuple[_Pending, list[MatchCandidate]]],
    shortlists: Shortlists | None = None,
) -> None:
    """Phases 1 and 2 for each entity in order; names resolved earlier in this write (known.this_write) resolve
    later entities of the same write in phase 1.

    When they leave no name to an LLM call, every subject of the write is resolved now, and reconciliation's read
    (the subjects' current facts) rides in this transaction: the next stage's transaction would follow with nothing
    in between (docs/write-pipeline.md, "Reads that ride along")."""
    for item in pending:
        _phase_one(state, item, known)
        if item.resolved is None:
            await _phases_two(conn, state, item, known.found, ambiguous)
        if item.resolved is not None:
            known.this_write.update((normalise_alias(name), item.resolved) for name in item.names)
    if not ambiguous:
        _record(state, pending)
        state.candidate_read = await reconciliation.read_candidates(conn, state, "entity_resolution", shortlists)


async def _phases_two(
    conn: Connection,
    state: WriteState,
    item: _Pending,
    found: registry.EntityMatches,
    ambiguous: list[tuple[_Pending, list[MatchCandidate]]],
) -> None:
    """Person prefix, then fuzzy; names in the ambiguous band are queued for the LLM (or made new)."""
    probe = _prefix_probe(item)
    key = None if probe is None else prefix_match(item.entity.name, found.by_prefix[probe])
    if key is not None:
        item.resolved = _found(item, found.prefixed[key], "prefix")
        return
    item.candidates = await _fuzzy_candidates(conn, state, item)
    verdict, shown = fuzzy_verdict(item.candidates, state.config.fuzzy_threshold)
    if verdict == "fuzzy":
        item.resolved = _matched(item, shown[0], "fuzzy")
    elif verdict == "llm" and not item.used:
        item.note = "named without a fact or relation, and only an LLM call could resolve it: not registered"
    elif verdict == "llm" and state.config.enable_llm_resolution:
        ambiguous.append((item, shown))
    else:
        item.note = "LLM resolution disabled" if verdict == "llm" else ""
        item.resolved = _new(item)


def _pending(entity: ExtractedEntity, used: bool) -> _Pending:
    names = [entity.name, *entity.aliases]
    return _Pending(entity=entity, names=names, typed_key=entity_key(entity.type, entity.name), used=used)


@dataclass(frozen=True)
class _Known:
    """What phase 1 resolves against: the conversation's people, the registry's answers, this write's names."""

    people: list[str]
    found: registry.EntityMatches
    this_write: dict[str, ResolvedEntity]

    @property
    def alias_hits(self) -> dict[str, str]:
        return self.found.by_alias

    @property
    def existing(self) -> dict[str, EntityRow]:
        return self.found.entities


def _phase_one(state: WriteState, item: _Pending, known: _Known) -> None:
    speaker = state.request.speaker_name
    name = item.entity.name
    for alias in item.names:
        earlier = known.this_write.get(normalise_alias(alias))
        if earlier is not None:
            item.resolved = earlier.model_copy(update={"name": name, "phase": "alias", "created": False})
            return
    person = nickname_of(name, known.people) if compatible_types(item.entity.type, "person") else None
    if person is not None:
        phase: ResolutionPhase = "speaker" if person == known.people[0] else "participant"
        item.resolved = _person(item, person, known.existing, phase)
        return
    for alias in item.names:
        hit = known.alias_hits.get(normalise_alias(alias))
        if hit is not None and hit in known.existing:
            item.resolved = _found(item, known.existing[hit], "alias")
            return
    relative = relative_of(name, speaker, state.lexicon.code)
    if relative is not None and relative.own_name is None:
        owner = known.this_write.get(normalise_alias(relative.owner))
        key = relative_key(relative.term, owner.key if owner else entity_key("person", relative.owner))
        item.resolved = (
            _found(item, known.existing[key], "exact")
            if key in known.existing
            else ResolvedEntity(name=name, key=key, display_name=name, type="person", phase="new", created=True)
        )
        return
    if item.typed_key in known.existing:
        item.resolved = _found(item, known.existing[item.typed_key], "exact")
    elif _owned_name(name) and compatible_types(item.entity.type, "person"):
        # "Anna's Mutter": a relative of someone is known by that name or is new, never a fuzzy match of the owner.
        display = name
        item.resolved = ResolvedEntity(
            name=name, key=item.typed_key, display_name=display, type="person", phase="new", created=True
        )


def _owned_name(name: str) -> bool:
    """Whether `name` is "{owner}'s {something}", the form post-extraction gives a speaker's relative."""
    owner, sep, rest = name.partition("'s ")
    return bool(sep and owner.strip() and rest.strip())


def _person(item: _Pending, person: str, existing: dict[str, EntityRow], phase: ResolutionPhase) -> ResolvedEntity:
    """A participant of the conversation (the speaker first), stored or to create."""
    key = entity_key("person", person)
    if key in existing:
        return _found(item, existing[key], phase)
    return ResolvedEntity(name=item.entity.name, key=key, display_name=person, type="person", phase=phase, created=True)


def _nickname_probes(people: list[str]) -> list[registry.PrefixProbe]:
    """The prefix probe of each participant whose first name is longer than a nickname can be."""
    words = (normalise_alias(person).split(" ")[0] for person in people)
    return [registry.PrefixProbe(word, MIN_NICKNAME_CHARS) for word in words if len(word) > MIN_NICKNAME_CHARS]


def _nickname_merges(people: list[str], found: registry.EntityMatches) -> list[tuple[str, str, str]]:
    """(from key, into key, participant) for each stored person named only by a nickname of a participant ("Mel",
    once Melanie speaks): both are one person, and the full name proves it."""
    merges: list[tuple[str, str, str]] = []
    for person, probe in zip(people, map(_nickname_probe, people), strict=True):
        if probe is None:
            continue
        into = entity_key("person", person)
        for alias, key in found.by_prefix[probe]:
            nickname = key == entity_key("person", alias) and is_nickname(alias, person)
            if nickname and key != into and nickname_of(alias, people) == person:
                merges.append((key, into, person))
    return list(dict.fromkeys(merges))


def _nickname_probe(person: str) -> registry.PrefixProbe | None:
    probes = _nickname_probes([person])
    return probes[0] if probes else None


async def _merge_nicknames(state: WriteState, deps: Deps, merges: list[tuple[str, str, str]]) -> None:
    """Merge into a participant each stored person named only by a nickname of theirs. Each merge is its own
    short transaction under both entities' locks."""
    agent_id = state.request.agent_id
    done: list[dict[str, Any]] = []
    for from_key, into_key, person in merges:
        entry: dict[str, Any] = {"from": from_key, "into": into_key, "why": f"a nickname of participant {person!r}"}
        async with deps.db.tenant(agent_id) as conn:
            if not (await registry.find_entities(conn, agent_id, keys=[into_key])).entities:
                await registry.upsert_entities(conn, agent_id, [registry.EntityWrite(into_key, person, "person", None)])
            entry["moved"] = await registry.merge_entities(conn, agent_id, from_key, into_key)
        done.append(entry)
    state.step.data["merged"] = done


def _found(item: _Pending, row: EntityRow, phase: ResolutionPhase) -> ResolvedEntity:
    return ResolvedEntity(name=item.entity.name, key=row.key, display_name=row.name, type=row.type, phase=phase)


def _matched(item: _Pending, candidate: MatchCandidate, phase: ResolutionPhase) -> ResolvedEntity:
    return ResolvedEntity(
        name=item.entity.name,
        key=candidate.key,
        display_name=candidate.name,
        type=candidate.type,
        phase=phase,
        score=round(candidate.score, 4),
    )


def _new(item: _Pending) -> ResolvedEntity:
    return ResolvedEntity(
        name=item.entity.name,
        key=item.typed_key,
        display_name=item.entity.name,
        type=item.entity.type,
        phase="new",
        created=True,
    )


def _prefix_probe(item: _Pending) -> registry.PrefixProbe | None:
    """Phase 2's prefix probe of a person's first name (None: not a person, or a name too short to match)."""
    if item.entity.type != "person":
        return None
    word = normalise_alias(item.entity.name).split(" ")[0]
    return registry.PrefixProbe(word, MIN_PREFIX_CHARS) if len(word) >= MIN_PREFIX_CHARS else None


async def _fuzzy_candidates(conn: Connection, state: WriteState, item: _Pending) -> list[MatchCandidate]:
    embedding = state.name_embeddings.get(normalise_alias(item.entity.name))
    agent_id = state.request.agent_id
    if embedding is not None:
        near = await registry.nearest_entities(conn, agent_id, embedding, LLM_CANDIDATES * 2)
        return [match for match in near if compatible_types(match.type, item.entity.type)][:LLM_CANDIDATES]
    # No embedding (embedder down): string similarity over the agent's entities of a compatible type.
    rows = await registry.entity_names(conn, agent_id)
    choices = {row.key: row for row in rows if compatible_types(row.type, item.entity.type)}
    best = process.extract(
        fold(item.entity.name),
        {key: fold(row.name) for key, row in choices.items()},
        scorer=fuzz.WRatio,
        limit=LLM_CANDIDATES,
    )
    return [MatchCandidate(key, choices[key].name, choices[key].type, score / 100) for _choice, score, key in best]


async def _ask(state: WriteState, deps: Deps, item: _Pending, shown: list[MatchCandidate]) -> None:
    prompt = load_prompt("entity_resolution")
    listed = "\n".join(f"{n}. {c.name} ({c.type})" for n, c in enumerate(shown, start=1))
    messages = prompt.render(
        EntityResolutionContext(
            speaker=state.request.speaker_name,
            message=state.request.message,
            name=item.entity.name,
            entity_type=item.entity.type,
            candidates=listed,
        )
    )
    try:
        answer = await call_llm(state, deps.resolution_llm, "entity_resolution", messages, EntityResolutionResponse)
    except ProviderError as exc:
        _fallback(state, item, f"LLM resolution failed, new entity: {exc}")
        return
    if answer.match is None:
        item.note = "LLM: no match"
        item.resolved = _new(item)
        return
    index = shown_index(answer.match, len(shown))
    if index is None:
        _fallback(state, item, f"LLM answered {answer.match!r}, not one of the {len(shown)} shown: new entity")
        return
    item.resolved = _matched(item, shown[index], "llm")


def _fallback(state: WriteState, item: _Pending, note: str) -> None:
    """A new entity because the LLM could not decide: noted on the name and failed in the write."""
    item.note = note
    item.resolved = _new(item)
    state.fail(f"entity_resolution: {item.entity.name!r}: {note}")


def _record(state: WriteState, pending: list[_Pending]) -> None:
    trace: list[dict[str, Any]] = []
    for item in pending:
        resolved = item.resolved
        if resolved is None:  # named only, and ambiguous: left out of this write (`_phases_two`)
            trace.append({"name": item.entity.name, "key": None, "phase": "skipped", "note": item.note})
            continue
        for name in item.names:
            state.resolved[normalise_alias(name)] = resolved
        state.aliases_to_register.setdefault(resolved.key, set()).update(
            n for n in (resolved.display_name, *item.names) if normalise_alias(n)
        )
        entry: dict[str, Any] = {
            "name": item.entity.name,
            "key": resolved.key,
            "phase": resolved.phase,
            "created": resolved.created,
        }
        if resolved.score is not None:
            entry["score"] = resolved.score
        if item.candidates:
            entry["candidates"] = [{"key": c.key, "score": round(c.score, 4)} for c in item.candidates]
        if item.note:
            entry["note"] = item.note
        trace.append(entry)
    state.step.data["entities"] = trace
