"""Stage: apply the decisions in one transaction, under the locks that keep them true.

The transaction first takes an advisory lock per entity of the write (its key and its normalised name, sorted, so
overlapping writes queue instead of deadlocking; other agents never wait) and then re-checks, under those locks,
what the decisions assumed when they were made without them:
- a new entity whose name a concurrent write has registered meanwhile is that entity (whatever type each write
  guessed), and the write's facts and edges move to it;
- a fact identical to one that became current meanwhile is a NOOP on it (identity key, migration 0003);
- a target that was closed meanwhile makes its decision an ADD (fact_writes), fitted into the attribute timeline.
Then, in order: entities (upserted, every resolved one), aliases (first write wins), facts (ADD / UPDATE / NOOP /
DELETE, with fact-entity links), profiles (seeded only where NULL; after the facts, so the seeded profile is stamped
with the facts version that includes this write's own facts, migration 0006), relationships (each linked to a
current evidence fact of this write; none opened from a fact stored as history), the message's emotion.

The first attempt runs without savepoints (one statement per unit, no SAVEPOINT / RELEASE pairs). If any unit
fails, that attempt is rolled back whole and the same code runs again with each unit in its own savepoint, so a
failing unit is reported and rolled back alone and the others land. A dry run runs all of it in its rolled-back
transaction (store/database.py RolledBack).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Literal, TypeVar
from uuid import UUID

from memory_sdk.errors import StorageError
from memory_sdk.pipeline.fact_writes import AppliedDecision, apply_decisions
from memory_sdk.pipeline.post_extraction import mentions
from memory_sdk.pipeline.state import Deps, FactDecision, PreparedFact, WriteState
from memory_sdk.results import Fact, Relationship, ResolvedEntity
from memory_sdk.store import queries, registry
from memory_sdk.store.candidates import current_facts_with_identity
from memory_sdk.store.database import Connection, Database
from memory_sdk.text import fact_identity_key, normalise_alias

__all__ = [
    "INITIAL_STRENGTH",
    "REINFORCEMENT",
    "choose_evidence",
    "current_evidence",
    "entity_lock_names",
    "lock_names_of",
    "run",
]

# seeds/002, "Reforço de strength": a first sighting is 0.8, repeats reinforce it towards 1.0.
INITIAL_STRENGTH = 0.8
REINFORCEMENT = 0.05

T = TypeVar("T")


async def run(state: WriteState, deps: Deps) -> None:
    started = time.perf_counter()
    checkpoint = _Checkpoint.take(state)
    try:
        async with _locked(state, deps) as conn:
            recorded = await _apply_all(state, conn, started, isolate=False)
        state.run_recorded = recorded
        return
    except StorageError as exc:
        checkpoint.restore(state)
        state.step.data["isolated_retry"] = str(exc)
    async with _locked(state, deps) as conn:
        recorded = await _apply_all(state, conn, started, isolate=True)
    state.run_recorded = recorded


def _locked(state: WriteState, deps: Deps) -> AbstractAsyncContextManager[Connection]:
    """The apply transaction, holding the advisory locks of every entity the write resolved from its first
    statement on (taken with the tenant setting: no statement of their own)."""
    ids = queries.advisory_lock_ids(state.request.agent_id, lock_names_of(state))
    state.step.data["locks"] = len(ids)
    return deps.db.tenant(state.request.agent_id, ids)


@dataclass
class _Checkpoint:
    """What an apply attempt adds to the state, so a rolled-back attempt leaves no trace but its reason."""

    sizes: dict[str, int]
    data: dict[str, Any]
    status: Literal["ok", "partial", "failed", "skipped"]

    _LISTS = (
        "facts_added",
        "facts_updated",
        "facts_superseded",
        "facts_unchanged",
        "facts_deleted",
        "relationships",
        "errors",
    )

    @classmethod
    def take(cls, state: WriteState) -> _Checkpoint:
        sizes = {name: len(getattr(state, name)) for name in cls._LISTS}
        return cls(sizes, dict(state.step.data), state.step.status)

    def restore(self, state: WriteState) -> None:
        for name, size in self.sizes.items():
            del getattr(state, name)[size:]
        state.step.data.clear()
        state.step.data.update(self.data)
        state.step.status = self.status


async def _apply_all(state: WriteState, conn: Connection, started: float, *, isolate: bool) -> bool:
    """Every write of the decisions, then the pipeline-run row (this is the write's last stage, so the run is
    finished in the same transaction: one commit fewer); True when the run row was written."""
    data = state.step.data
    await _adopt_concurrent_entities(state, conn)
    await _recheck_identical_facts(state, conn)
    entities = _unique_entities(state)
    failed_keys = await _upsert_entities(state, conn, entities, isolate)
    data["entities_written"] = len(entities) - len(failed_keys)
    written = await _apply_decisions(state, conn, entities, failed_keys, isolate)
    await _seed_profiles(state, conn, isolate)
    await _upsert_relationships(state, conn, written, isolate)
    if state.extraction.emotion is not None and state.event_id is not None:
        await queries.set_event_emotion(
            conn,
            agent_id=state.request.agent_id,
            event_id=state.event_id,
            emotion=state.extraction.emotion.model_dump(),
        )
    return await _finish_run(state, conn, started, isolate)


async def _finish_run(state: WriteState, conn: Connection, started: float, isolate: bool) -> bool:
    run_id = state.run_id
    if run_id is None:
        return False
    state.step.duration_ms = round((time.perf_counter() - started) * 1000, 2)  # so far; the runner sets the final

    async def work() -> bool:
        await queries.finish_run(conn, agent_id=state.request.agent_id, run_id=run_id, values=state.run_record())
        return True

    return bool(await _unit(state, conn, isolate, "pipeline run record", work))


def lock_names_of(state: WriteState) -> list[str]:
    """What the apply transaction locks: every resolved entity's key and normalised name.

    The key serialises writes about one entity (its facts' timelines, its edges); the name serialises writes
    that would create one name under two keys ("city:sao_paulo" and "place:sao_paulo").
    """
    names: set[str] = set()
    for entity in state.resolved.values():
        names.update(entity_lock_names(entity.key, entity.display_name))
    return sorted(names)


def entity_lock_names(key: str, display_name: str) -> list[str]:
    """The advisory lock names of one entity: anything that changes its facts or edges takes them (consolidation
    too), so it queues behind, never interleaves with, a write about the entity."""
    return [f"key:{key}", f"name:{normalise_alias(display_name)}"]


async def _adopt_concurrent_entities(state: WriteState, conn: Connection) -> None:
    """A name this write would create that another write registered meanwhile is that entity."""
    agent_id = state.request.agent_id
    created = {normalise_alias(e.display_name): e for e in _unique_entities(state).values() if e.created}
    created.pop("", None)
    if not created:
        return
    found = await registry.find_entities(conn, agent_id, aliases=list(created))
    moved = {created[norm].key: key for norm, key in found.by_alias.items() if key != created[norm].key}
    for old_key, new_key in moved.items():
        row = found.entities[new_key]
        for name, entity in list(state.resolved.items()):
            if entity.key == old_key:
                state.resolved[name] = entity.model_copy(
                    update={
                        "key": new_key,
                        "display_name": row.name,
                        "type": row.type,
                        "phase": "alias",
                        "created": False,
                    }
                )
        for decision in state.decisions:
            if decision.fact.entity_key == old_key:
                decision.fact.entity_key = new_key
                decision.fact.subject_name = row.name
        state.aliases_to_register.setdefault(new_key, set()).update(state.aliases_to_register.pop(old_key, set()))
        state.step.data.setdefault("entities_adopted", {})[old_key] = new_key


async def _recheck_identical_facts(state: WriteState, conn: Connection) -> None:
    """A fact that became current while this write was deciding (a concurrent identical write) is confirmed,
    not written twice. NOOPs are re-checked too: one whose target was closed meanwhile would otherwise become an
    ADD (fact_writes) beside an identical fact that another write made current in between."""
    keys = {id(d): (d.fact.entity_key, fact_identity_key(d.fact.text)) for d in state.decisions}
    found = await current_facts_with_identity(conn, state.request.agent_id, list(keys.values()))
    if not found:
        return
    rechecked: list[FactDecision] = []
    for decision in state.decisions:
        existing = found.get(keys.get(id(decision), ("", "")))
        if existing is not None and existing != decision.target_id:
            decision = FactDecision(
                decision.fact, "NOOP", existing, decision.similarity, "identical fact became current meanwhile"
            )
            state.step.data.setdefault("rechecked", []).append(decision.fact.text)
        rechecked.append(decision)
    state.decisions = rechecked


def _unique_entities(state: WriteState) -> dict[str, ResolvedEntity]:
    """One entry per key, in key order: concurrent writes lock entity rows in the same order and never deadlock."""
    by_key = {entity.key: entity for entity in state.resolved.values()}
    return {key: by_key[key] for key in sorted(by_key)}


async def _unit(
    state: WriteState, conn: Connection, isolate: bool, what: str, work: Callable[[], Awaitable[T]]
) -> T | None:
    """Run one unit of work. Isolated: in a savepoint that, on a database error, rolls back just it, records
    why and returns None. Not isolated: errors abort the attempt (run() then retries isolated)."""
    if not isolate:
        return await work()
    try:
        async with Database.savepoint(conn):
            return await work()
    except StorageError as exc:
        state.fail(f"upsert: {what} failed and was rolled back alone: {exc}")
        return None


def _units(items: list[T], isolate: bool) -> list[list[T]]:
    """One batch (one statement) for the first attempt; one unit per item when each needs its own savepoint."""
    if not items:
        return []
    return [[item] for item in items] if isolate else [items]


async def _upsert_entities(
    state: WriteState, conn: Connection, entities: dict[str, ResolvedEntity], isolate: bool
) -> set[str]:
    """Entities, then their aliases (first write wins): one statement for all, or, isolated, one unit per entity
    and then one per entity's aliases (an entity that failed registers none); return the keys that failed."""
    writes = [
        registry.EntityWrite(e.key, e.display_name, e.type, state.name_embeddings.get(normalise_alias(e.display_name)))
        for e in entities.values()
    ]
    aliases = {
        key: [(normalise_alias(name), name, key) for name in sorted(names)]
        for key, names in sorted(state.aliases_to_register.items())
        if names
    }
    agent_id = state.request.agent_id
    registered: dict[str, list[str]] = {}
    failed: set[str] = set()
    for batch, rows in _entity_units(writes, aliases, isolate):
        if not batch and rows[0][2] in failed:
            continue

        async def work(
            batch: list[registry.EntityWrite] = batch, rows: list[tuple[str, str, str]] = rows
        ) -> registry.EntitiesWritten:
            return await registry.upsert_entities(conn, agent_id, batch, rows, source="extraction")

        what = f"entity {batch[0].key}" if len(batch) == 1 else "entities" if batch else f"aliases of {rows[0][2]}"
        written = await _unit(state, conn, isolate, what, work)
        if written is None:
            failed.update(entity.key for entity in batch)
        else:
            registered.update(written.registered)
    state.step.data["aliases_registered"] = registered
    return failed


def _entity_units(
    writes: list[registry.EntityWrite], aliases: dict[str, list[tuple[str, str, str]]], isolate: bool
) -> list[tuple[list[registry.EntityWrite], list[tuple[str, str, str]]]]:
    """(entities, aliases) per unit: all in one, or, isolated, one per entity and then one per entity's aliases."""
    if isolate:
        return [([write], []) for write in writes] + [([], rows) for rows in aliases.values()]
    rows = [row for entity_rows in aliases.values() for row in entity_rows]
    return [(writes, rows)] if writes or rows else []


async def _seed_profiles(state: WriteState, conn: Connection, isolate: bool) -> None:
    seeded: list[str] = []
    for name, profile in state.extraction.updated_profiles.items():
        entity = state.resolve_name(name)
        if entity is None:
            continue

        async def work(key: str = entity.key, profile: str = profile) -> bool:
            return await registry.seed_profile(
                conn, agent_id=state.request.agent_id, entity_key=key, profile_text=profile
            )

        if await _unit(state, conn, isolate, f"profile of {entity.key}", work):
            seeded.append(entity.key)
    state.step.data["profiles_seeded"] = seeded


async def _apply_decisions(
    state: WriteState, conn: Connection, entities: dict[str, ResolvedEntity], failed_keys: set[str], isolate: bool
) -> list[tuple[PreparedFact, Fact]]:
    """Apply the decisions, all as one unit (their new versions in one statement: fact_writes) or, isolated, each
    as its own; return the facts they stand on or closed, for evidence."""
    decisions: list[FactDecision] = []
    for decision in state.decisions:
        if decision.fact.entity_key in failed_keys:
            state.fail(f"upsert: fact {decision.fact.text!r} skipped: its entity could not be stored")
        else:
            decisions.append(decision)
    written: list[tuple[PreparedFact, Fact]] = []
    for batch in _units(decisions, isolate):

        async def work(batch: list[FactDecision] = batch) -> list[AppliedDecision]:
            return await apply_decisions(state, conn, batch, entities)

        what = f"fact {batch[0].fact.text!r}" if len(batch) == 1 else "facts"
        applied_batch = await _unit(state, conn, isolate, what, work)
        if applied_batch is None:
            continue  # rolled back alone, and reported
        for decision, applied in zip(batch, applied_batch, strict=True):
            _report(state, decision, applied)
            written.extend(_touched(decision, applied))
    return written


def _touched(decision: FactDecision, applied: AppliedDecision) -> list[tuple[PreparedFact, Fact]]:
    """The facts a decision stands on (the new or confirmed version) and those it closed, for evidence.

    A retraction stands on nothing an edge could rest on: "Rafael não trabalha mais na Acme" names both ends of
    the works_at edge it denies, and as evidence it would open that edge again (issue 10).
    """
    fact = decision.fact
    closed = [(fact, version) for version in (*applied.superseded, applied.deleted) if version]
    if decision.action == "DELETE":
        return closed
    stored = [(fact, version) for version in (applied.added, applied.updated, applied.unchanged) if version]
    return stored + closed


def _report(state: WriteState, decision: FactDecision, applied: AppliedDecision) -> None:
    for fact, bucket in (
        (applied.added, state.facts_added),
        (applied.updated, state.facts_updated),
        (applied.unchanged, state.facts_unchanged),
        (applied.deleted, state.facts_deleted),
    ):
        if fact is not None:
            bucket.append(fact)
    state.facts_superseded.extend(applied.superseded)
    entry: dict[str, Any] = {"text": decision.fact.text, "decided": decision.action, "applied": applied.action}
    if decision.reason:
        entry["why"] = decision.reason
    if applied.note:
        entry["note"] = applied.note
    if applied.invalidated_relationships:
        entry["cascade_invalidated_relationships"] = [str(i) for i in applied.invalidated_relationships]
    state.step.data.setdefault("facts", []).append(entry)


def current_evidence(touched: list[tuple[PreparedFact, Fact]]) -> list[tuple[PreparedFact, UUID]]:
    """The facts of this write that are current once every decision is applied: the only possible evidence.

    A fact stored already closed (a delayed message's history), or closed by a later fact of the same write,
    must never open an edge: the edge would outlive what it rests on.
    """
    closed = {stored.id for _fact, stored in touched if stored.valid_to is not None or stored.invalidated_at}
    return [(fact, stored.id) for fact, stored in touched if stored.id is not None and stored.id not in closed]


def choose_evidence(source_name: str, target_name: str, facts: list[tuple[PreparedFact, UUID]]) -> UUID | None:
    """The highest-confidence fact of this write whose text mentions both names (None if none does)."""
    best: tuple[float, UUID] | None = None
    for fact, fact_id in facts:
        supports = mentions(fact.text, source_name) and mentions(fact.text, target_name)
        if supports and (best is None or fact.confidence > best[0]):
            best = (fact.confidence, fact_id)
    return best[1] if best else None


async def _upsert_relationships(
    state: WriteState, conn: Connection, touched: list[tuple[PreparedFact, Fact]], isolate: bool
) -> None:
    evidence_pool = current_evidence(touched)
    for relation in state.extraction.relations:
        source, target = state.resolve_name(relation.source), state.resolve_name(relation.target)
        if source is None or target is None or source.key == target.key:
            continue
        evidence = choose_evidence(source.display_name, target.display_name, evidence_pool) or choose_evidence(
            relation.source, relation.target, evidence_pool
        )
        edge = f"{source.key} {relation.type} {target.key}"
        if evidence is None:
            # No current fact of this write says it (its fact is history, or failed): no open edge.
            state.step.data.setdefault("edges_not_opened", []).append(edge)
            continue

        async def work(
            source_key: str = source.key,
            target_key: str = target.key,
            rel_type: str = relation.type,
            evidence: UUID = evidence,
        ) -> Relationship:
            return await queries.upsert_relationship(
                conn,
                agent_id=state.request.agent_id,
                source_key=source_key,
                target_key=target_key,
                rel_type=rel_type,
                evidence_fact_id=evidence,
                valid_from=state.request.occurred_at,
                initial_strength=INITIAL_STRENGTH,
                reinforcement=REINFORCEMENT,
                event_id=state.event_id,
            )

        stored = await _unit(state, conn, isolate, f"relationship {edge}", work)
        if stored is not None:
            state.relationships.append(stored)
