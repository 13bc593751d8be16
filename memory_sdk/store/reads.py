"""The public reads: facts (current, as of a valid time, as believed at a transaction time, or all versions),
entities, relationships, events and pipeline runs. Each filters on agent_id."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from sqlalchemy import Select, and_, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from memory_sdk.results import Entity, Event, Fact, PipelineTrace, Relationship
from memory_sdk.store import tables as t
from memory_sdk.store.queries import FACT_COLUMNS
from memory_sdk.store.rows import fact_from_row, relationship_from_row
from memory_sdk.text import normalise_alias

__all__ = [
    "about_entity",
    "agent_ids",
    "entity_names",
    "find_entity_key",
    "read_entity",
    "read_events",
    "read_facts",
    "read_relationships",
    "read_trace",
    "validity",
]


async def find_entity_key(session: AsyncSession, agent_id: str, entity: str, *also: str) -> str | None:
    """An entity key from a key, an alias or a display name, trying `entity` then each of `also` (other names for
    it, such as its canonical relative form); None when the agent knows no such entity."""
    by_key = select(t.entities.c.entity_key).where(t.entities.c.agent_id == agent_id, t.entities.c.entity_key == entity)
    found: str | None = (await session.execute(by_key)).scalar_one_or_none()
    if found is not None:
        return found
    for name in dict.fromkeys((entity, *also)):
        by_alias = select(t.aliases.c.entity_key).where(
            t.aliases.c.agent_id == agent_id, t.aliases.c.alias_norm == normalise_alias(name)
        )
        alias_key: str | None = (await session.execute(by_alias)).scalar_one_or_none()
        if alias_key is not None:
            return alias_key
    return None


async def read_facts(
    session: AsyncSession,
    agent_id: str,
    *,
    entity_key: str | None,
    as_of: datetime | None,
    known_at: datetime | None,
    include_history: bool,
    min_confidence: float,
) -> list[Fact]:
    f = t.facts.c
    query = select(*FACT_COLUMNS).where(f.agent_id == agent_id, f.confidence >= min_confidence)
    if entity_key is not None:
        query = query.where(about_entity(agent_id, [entity_key]))
    if not include_history:
        query = query.where(*validity(as_of, known_at))
    query = query.order_by(f.entity_key, f.valid_from, f.recorded_at)
    return [fact_from_row(row) for row in (await session.execute(query)).all()]


def about_entity(agent_id: str, entity_keys: Sequence[str]) -> Any:
    """Facts about any of the entities: their subject, or linked to them (a fact naming them)."""
    f = t.facts.c
    linked = select(t.fact_entities.c.fact_id).where(
        t.fact_entities.c.agent_id == agent_id, t.fact_entities.c.entity_key.in_(entity_keys)
    )
    return or_(f.entity_key.in_(entity_keys), f.id.in_(linked))


def validity(as_of: datetime | None, known_at: datetime | None) -> list[Any]:
    """Valid time: true at `as_of`. Transaction time: what the memory held at `known_at`.

    With neither, the current view: open and never retracted. A version's end (valid_to) is only known from
    closed_at on, so "believed at K" treats a version closed after K as still open.
    """
    f = t.facts.c
    if as_of is None and known_at is None:
        return [f.valid_to.is_(None), f.invalidated_at.is_(None)]
    clauses: list[Any] = []
    if known_at is not None:
        clauses += [f.recorded_at <= known_at, or_(f.invalidated_at.is_(None), f.invalidated_at > known_at)]
    open_then = f.valid_to.is_(None) if known_at is None else or_(f.valid_to.is_(None), f.closed_at > known_at)
    if as_of is not None:
        clauses += [f.valid_from <= as_of, or_(open_then, f.valid_to > as_of)]
    else:
        clauses.append(open_then)
    return clauses


async def read_entity(session: AsyncSession, agent_id: str, entity: str, *also: str) -> Entity | None:
    key = await find_entity_key(session, agent_id, entity, *also)
    if key is None:
        return None
    row = (
        await session.execute(
            select(t.entities).where(t.entities.c.agent_id == agent_id, t.entities.c.entity_key == key)
        )
    ).one()
    names = (
        await session.execute(
            select(t.aliases.c.alias)
            .where(t.aliases.c.agent_id == agent_id, t.aliases.c.entity_key == key)
            .order_by(t.aliases.c.created_at, t.aliases.c.alias)
        )
    ).scalars()
    return Entity(
        key=row.entity_key,
        name=row.display_name,
        type=row.entity_type,
        aliases=tuple(name for name in names if name != row.display_name),
        profile_text=row.profile_text,
    )


async def read_relationships(
    session: AsyncSession,
    agent_id: str,
    *,
    entity_key: str | None,
    as_of: datetime | None,
    include_invalidated: bool,
    known_at: datetime | None = None,
) -> list[Relationship]:
    r = t.relationships.c
    query: Select[Any] = select(t.relationships).where(r.agent_id == agent_id)
    if entity_key is not None:
        query = query.where(or_(r.source_key == entity_key, r.target_key == entity_key))
    if as_of is not None or known_at is not None:
        query = query.where(*_edge_validity(as_of, known_at))
    elif not include_invalidated:
        query = query.where(and_(r.invalidated_at.is_(None), r.valid_to.is_(None)))
    query = query.order_by(r.source_key, r.rel_type, r.target_key, r.created_at)
    return [relationship_from_row(row) for row in (await session.execute(query)).all()]


def _edge_validity(as_of: datetime | None, known_at: datetime | None) -> list[Any]:
    """Edges true at `as_of` and/or held at `known_at`. An edge ends only by invalidation (its valid_to and
    invalidated_at are set together), so invalidated_at is also when its end became known."""
    r = t.relationships.c
    clauses: list[Any] = []
    open_then: Any = r.valid_to.is_(None)
    if known_at is not None:
        clauses += [r.created_at <= known_at]
        open_then = or_(r.invalidated_at.is_(None), r.invalidated_at > known_at)
    if as_of is not None:
        clauses += [or_(r.valid_from.is_(None), r.valid_from <= as_of), or_(open_then, r.valid_to > as_of)]
    else:
        clauses.append(open_then)
    return clauses


async def agent_ids(session: AsyncSession, *, limit: int) -> list[str]:
    """Agents with at least one event, in name order: the CLI's hint when a command names an unknown agent.

    Run outside a tenant transaction: a connection that row-level security binds sees no agent, and the hint is
    then only that the agent has no memory."""
    query = select(t.events.c.agent_id).distinct().order_by(t.events.c.agent_id).limit(limit)
    return list((await session.execute(query)).scalars())


async def entity_names(session: AsyncSession, agent_id: str) -> list[str]:
    """Every display name and alias of the agent's entities: what "did you mean" suggestions are drawn from."""
    names = select(t.entities.c.display_name).where(t.entities.c.agent_id == agent_id)
    aliases = select(t.aliases.c.alias).where(t.aliases.c.agent_id == agent_id)
    return sorted({*(await session.execute(names)).scalars(), *(await session.execute(aliases)).scalars()})


async def read_events(session: AsyncSession, agent_id: str, limit: int | None, *, newest: bool = False) -> list[Event]:
    """The event log oldest first: its first `limit` events, or with `newest` its last `limit`."""
    e = t.events.c
    query = select(e.id, e.agent_id, e.speaker, e.content, e.occurred_at, e.recorded_at, e.message_id).where(
        e.agent_id == agent_id
    )
    order = (e.occurred_at, e.recorded_at)
    query = query.order_by(*(column.desc() for column in order) if newest else order).limit(limit)
    events = [Event.model_validate(row._mapping) for row in (await session.execute(query)).all()]
    return events[::-1] if newest else events


async def read_trace(session: AsyncSession, agent_id: str, event_id: UUID) -> PipelineTrace | None:
    """The stored trace of the latest pipeline run for an event."""
    p = t.pipeline_runs.c
    trace = (
        await session.execute(
            select(p.trace).where(p.agent_id == agent_id, p.event_id == event_id).order_by(p.started_at.desc()).limit(1)
        )
    ).scalar_one_or_none()
    return PipelineTrace.model_validate(trace) if trace is not None else None
