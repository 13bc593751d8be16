"""Stage: apply the decisions in one transaction, each unit of work in its own savepoint.

Order: entities (upserted, every resolved one), aliases (first write wins), profiles (seeded only where NULL),
facts (ADD / UPDATE / NOOP / DELETE, with fact-entity links), relationships (linked to their evidence fact),
the message's emotion. A failing unit rolls back alone and is reported; the others land. In a dry run nothing
is written: the stage reports what would be.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from sqlalchemy import Row
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession

from memory_sdk.pipeline.fact_writes import AppliedDecision, apply_decision
from memory_sdk.pipeline.post_extraction import mentions
from memory_sdk.pipeline.state import Deps, FactDecision, PreparedFact, WriteState
from memory_sdk.results import Fact, Relationship, ResolvedEntity
from memory_sdk.store import queries
from memory_sdk.store.database import error_reason
from memory_sdk.store.rows import relationship_from_row
from memory_sdk.text import normalise_alias

__all__ = ["INITIAL_STRENGTH", "REINFORCEMENT", "choose_evidence", "run"]

# seeds/002, "Reforço de strength": a first sighting is 0.8, repeats reinforce it towards 1.0.
INITIAL_STRENGTH = 0.8
REINFORCEMENT = 0.05


async def run(state: WriteState, deps: Deps) -> None:
    entities = _unique_entities(state)
    if state.request.dry_run:
        _report_dry_run(state, entities)
        return
    data = state.step.data
    async with deps.db.transaction(state.request.agent_id) as session:
        failed_keys = await _upsert_entities(state, session, entities)
        data["entities_written"] = len(entities) - len(failed_keys)
        await _register_aliases(state, session, failed_keys)
        await _seed_profiles(state, session)
        written: list[tuple[PreparedFact, UUID]] = []
        for decision in state.decisions:
            if decision.fact.entity_key in failed_keys:
                state.fail(f"upsert: fact {decision.fact.text!r} skipped: its entity could not be stored")
                continue
            fact_id = await _apply(state, session, decision, entities)
            if fact_id is not None:
                written.append((decision.fact, fact_id))
        await _upsert_relationships(state, session, written)
        if state.extraction.emotion is not None and state.event_id is not None:
            await queries.set_event_emotion(
                session,
                agent_id=state.request.agent_id,
                event_id=state.event_id,
                emotion=state.extraction.emotion.model_dump(),
            )


def _unique_entities(state: WriteState) -> dict[str, ResolvedEntity]:
    """One entry per key, in key order: concurrent writes lock entity rows in the same order and never deadlock."""
    by_key = {entity.key: entity for entity in state.resolved.values()}
    return {key: by_key[key] for key in sorted(by_key)}


async def _savepoint(state: WriteState, session: AsyncSession, what: str, work: Any) -> Any:
    """Run `work()` in a savepoint; on a database error roll back just it, record why, return None."""
    try:
        async with session.begin_nested():
            return await work()
    except SQLAlchemyError as exc:
        reason = error_reason(exc)
        state.fail(f"upsert: {what} failed and was rolled back alone: {reason}")
        return None


async def _upsert_entities(state: WriteState, session: AsyncSession, entities: dict[str, ResolvedEntity]) -> set[str]:
    failed: set[str] = set()
    for entity in entities.values():

        async def work(entity: ResolvedEntity = entity) -> bool:
            return await queries.upsert_entity(
                session,
                agent_id=state.request.agent_id,
                entity_key=entity.key,
                display_name=entity.display_name,
                entity_type=entity.type,
                name_embedding=state.name_embeddings.get(normalise_alias(entity.display_name)),
            )

        if await _savepoint(state, session, f"entity {entity.key}", work) is None:
            failed.add(entity.key)
    return failed


async def _register_aliases(state: WriteState, session: AsyncSession, failed_keys: set[str]) -> None:
    registered: dict[str, list[str]] = {}
    for key, names in sorted(state.aliases_to_register.items()):
        if key in failed_keys:
            continue
        by_norm = {normalise_alias(name): name for name in sorted(names)}

        async def work(key: str = key, by_norm: dict[str, str] = by_norm) -> list[str]:
            return await queries.register_aliases(
                session, agent_id=state.request.agent_id, entity_key=key, aliases=by_norm, source="extraction"
            )

        new = await _savepoint(state, session, f"aliases of {key}", work)
        if new:
            registered[key] = new
    state.step.data["aliases_registered"] = registered


async def _seed_profiles(state: WriteState, session: AsyncSession) -> None:
    seeded: list[str] = []
    for name, profile in state.extraction.updated_profiles.items():
        entity = state.resolve_name(name)
        if entity is None:
            continue

        async def work(key: str = entity.key, profile: str = profile) -> bool:
            return await queries.seed_profile(
                session, agent_id=state.request.agent_id, entity_key=key, profile_text=profile
            )

        if await _savepoint(state, session, f"profile of {entity.key}", work):
            seeded.append(entity.key)
    state.step.data["profiles_seeded"] = seeded


async def _apply(
    state: WriteState, session: AsyncSession, decision: FactDecision, entities: dict[str, ResolvedEntity]
) -> UUID | None:
    """Apply one decision in its own savepoint, then link the fact to the entities it mentions."""
    fact = decision.fact

    async def work() -> AppliedDecision:
        return await apply_decision(state, session, decision)

    applied: AppliedDecision | None = await _savepoint(state, session, f"fact {fact.text!r}", work)
    if applied is None:
        return None
    _report(state, decision, applied)
    if applied.fact_id is None or applied.action == "NOOP":
        return applied.fact_id
    fact_id = applied.fact_id
    links = {key: key == fact.entity_key for key, e in entities.items() if mentions(fact.text, e.display_name)}
    links[fact.entity_key] = True

    async def link() -> None:
        await queries.insert_fact_links(session, agent_id=state.request.agent_id, fact_id=fact_id, links=links)

    await _savepoint(state, session, f"links of fact {fact.text!r}", link)
    return fact_id


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
    if applied.note:
        entry["note"] = applied.note
    if applied.invalidated_relationships:
        entry["cascade_invalidated_relationships"] = [str(i) for i in applied.invalidated_relationships]
    state.step.data.setdefault("facts", []).append(entry)


def choose_evidence(source_name: str, target_name: str, facts: list[tuple[PreparedFact, UUID]]) -> UUID | None:
    """The highest-confidence fact of this write whose text mentions both names (None if none does)."""
    best: tuple[float, UUID] | None = None
    for fact, fact_id in facts:
        supports = mentions(fact.text, source_name) and mentions(fact.text, target_name)
        if supports and (best is None or fact.confidence > best[0]):
            best = (fact.confidence, fact_id)
    return best[1] if best else None


async def _upsert_relationships(
    state: WriteState, session: AsyncSession, written: list[tuple[PreparedFact, UUID]]
) -> None:
    for relation in state.extraction.relations:
        source, target = state.resolve_name(relation.source), state.resolve_name(relation.target)
        if source is None or target is None or source.key == target.key:
            continue
        evidence = choose_evidence(source.display_name, target.display_name, written) or choose_evidence(
            relation.source, relation.target, written
        )

        async def work(
            source_key: str = source.key,
            target_key: str = target.key,
            rel_type: str = relation.type,
            evidence: UUID | None = evidence,
        ) -> Row[Any]:
            return await queries.upsert_relationship(
                session,
                agent_id=state.request.agent_id,
                source_key=source_key,
                target_key=target_key,
                rel_type=rel_type,
                evidence_fact_id=evidence,
                valid_from=state.request.occurred_at,
                initial_strength=INITIAL_STRENGTH,
                reinforcement=REINFORCEMENT,
            )

        row = await _savepoint(state, session, f"relationship {source.key} {relation.type} {target.key}", work)
        if row is not None:
            state.relationships.append(relationship_from_row(row))


def _report_dry_run(state: WriteState, entities: dict[str, ResolvedEntity]) -> None:
    request = state.request
    for decision in state.decisions:
        fact = decision.fact
        would = Fact(
            agent_id=request.agent_id,
            entity_key=fact.entity_key,
            text=fact.text,
            attribute=fact.attribute,
            confidence=fact.confidence,
            importance=fact.importance,
            importance_category=fact.importance_category,
            speaker=request.speaker_name,
            source_context=fact.source_context,
            valid_from=fact.valid_from,
            prompt_version=fact.prompt_version,
            supersedes_fact_id=decision.target_id if decision.action == "UPDATE" else None,
        )
        {
            "ADD": state.facts_added,
            "UPDATE": state.facts_updated,
            "NOOP": state.facts_unchanged,
            "DELETE": state.facts_deleted,
        }[decision.action].append(would)
    for relation in state.extraction.relations:
        source, target = state.resolve_name(relation.source), state.resolve_name(relation.target)
        if source is not None and target is not None and source.key != target.key:
            state.relationships.append(
                Relationship(
                    agent_id=request.agent_id,
                    source_key=source.key,
                    target_key=target.key,
                    rel_type=relation.type,
                    strength=INITIAL_STRENGTH,
                    valid_from=request.occurred_at,
                )
            )
    state.step.data.update(persisted=False, entities_would_write=sorted(entities))
