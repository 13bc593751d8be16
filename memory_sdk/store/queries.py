"""Queries. Each takes an AsyncSession and only flushes: the pipeline owns commits and savepoints.

Every query filters on agent_id: it is the tenant boundary.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID, uuid4

from sqlalchemy import Text, and_, func, insert, literal, or_, select, text, union_all, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncSession

from memory_sdk.results import Fact, Relationship
from memory_sdk.store import tables as t
from memory_sdk.store.rows import fact_from_row, relationship_from_row

# Every fact column but the vector: statements that hand a fact back never ship 6 KB nobody reads.
FACT_COLUMNS = tuple(column for column in t.facts.c if column.name != "embedding")

__all__ = [
    "FACT_COLUMNS",
    "EntityMatches",
    "EntityRow",
    "EntityWrite",
    "advisory_lock_id",
    "count_rows",
    "find_entities",
    "finish_run",
    "insert_event_and_run",
    "insert_fact",
    "insert_fact_links",
    "lock_names",
    "register_aliases",
    "seed_profile",
    "upsert_entities",
    "upsert_relationship",
]


async def insert_event_and_run(
    session: AsyncSession,
    *,
    agent_id: str,
    speaker: str,
    content: str,
    occurred_at: datetime,
    embedding: list[float] | None,
) -> tuple[UUID, UUID]:
    """Log the message as an event and open its pipeline run, in one statement; return (event id, run id)."""
    event_id, run_id = uuid4(), uuid4()
    event = (
        insert(t.events)
        .values(
            id=event_id,
            agent_id=agent_id,
            speaker=speaker,
            content=content,
            occurred_at=occurred_at,
            embedding=embedding,
        )
        .returning(t.events.c.id, t.events.c.agent_id)
        .cte("event")
    )
    run = insert(t.pipeline_runs).from_select(
        ["id", "agent_id", "event_id", "status"],
        select(literal(run_id), event.c.agent_id, event.c.id, literal("running")),
    )
    await session.execute(run)
    return event_id, run_id


async def finish_run(session: AsyncSession, *, agent_id: str, run_id: UUID, values: dict[str, Any]) -> None:
    await session.execute(
        update(t.pipeline_runs)
        .where(t.pipeline_runs.c.agent_id == agent_id, t.pipeline_runs.c.id == run_id)
        .values(finished_at=func.clock_timestamp(), **values)
    )


async def set_event_emotion(session: AsyncSession, *, agent_id: str, event_id: UUID, emotion: dict[str, Any]) -> None:
    await session.execute(
        update(t.events).where(t.events.c.agent_id == agent_id, t.events.c.id == event_id).values(emotion=emotion)
    )


@dataclass(frozen=True)
class EntityRow:
    """A stored entity as the pipeline reads it."""

    key: str
    name: str
    type: str
    profile_text: str | None


@dataclass
class EntityMatches:
    """What find_entities found: alias (normalised) -> entity key, and the entities themselves by key."""

    by_alias: dict[str, str] = field(default_factory=dict)
    entities: dict[str, EntityRow] = field(default_factory=dict)


async def find_entities(
    session: AsyncSession, agent_id: str, *, aliases: Sequence[str] = (), keys: Sequence[str] = ()
) -> EntityMatches:
    """The entities registered under any of `aliases` (normalised) or stored under any of `keys`, in one
    statement of index probes (alias primary key, entity key)."""
    found = EntityMatches()
    if not aliases and not keys:
        return found
    e, a = t.entities.c, t.aliases.c
    columns = (e.entity_key, e.display_name, e.entity_type, e.profile_text)
    by_alias = (
        select(a.alias_norm, *columns)
        .join(t.entities, and_(e.agent_id == a.agent_id, e.entity_key == a.entity_key))
        .where(a.agent_id == agent_id, a.alias_norm.in_(list(dict.fromkeys(aliases))))
    )
    by_key = select(literal(None, type_=Text).label("alias_norm"), *columns).where(
        e.agent_id == agent_id, e.entity_key.in_(list(dict.fromkeys(keys)))
    )
    for row in (await session.execute(union_all(by_alias, by_key))).all():
        found.entities[row.entity_key] = EntityRow(row.entity_key, row.display_name, row.entity_type, row.profile_text)
        if row.alias_norm is not None:
            found.by_alias[row.alias_norm] = row.entity_key
    return found


async def person_alias_prefixes(session: AsyncSession, agent_id: str, word: str, min_chars: int) -> list[Any]:
    """(alias_norm, entity_key) of people whose alias starts with `word`, or whose first word is a prefix of it.

    Index range scans only (text_pattern_ops), so the cost does not grow with the agent's registry.
    """
    patterns = [f"{_escape_like(word)}%"]
    for size in range(min_chars, len(word)):
        prefix = _escape_like(word[:size])
        patterns += [prefix, f"{prefix} %"]
    query = (
        select(t.aliases.c.alias_norm, t.aliases.c.entity_key)
        .join(
            t.entities,
            and_(t.entities.c.agent_id == t.aliases.c.agent_id, t.entities.c.entity_key == t.aliases.c.entity_key),
        )
        .where(
            t.aliases.c.agent_id == agent_id,
            t.entities.c.entity_type == "person",
            or_(*(t.aliases.c.alias_norm.like(pattern) for pattern in patterns)),
        )
        .limit(50)
    )
    return [(row.alias_norm, row.entity_key) for row in (await session.execute(query)).all()]


def _escape_like(text_: str) -> str:
    return text_.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


async def nearest_entities(session: AsyncSession, agent_id: str, embedding: list[float], limit: int) -> list[Any]:
    """The agent's entities whose name embedding is nearest, through the HNSW index: rows with a cosine score."""
    # pgvector >= 0.8: keep scanning the index until `limit` rows pass the agent filter (a no-op setting before).
    await session.execute(text("SET LOCAL hnsw.iterative_scan = 'relaxed_order'"))
    distance = t.entities.c.name_embedding.cosine_distance(embedding)
    query = (
        select(
            t.entities.c.entity_key, t.entities.c.display_name, t.entities.c.entity_type, (1 - distance).label("score")
        )
        .where(t.entities.c.agent_id == agent_id, t.entities.c.name_embedding.is_not(None))
        .order_by(distance)
        .limit(limit)
    )
    return [row for row in (await session.execute(query)).all()]


async def entity_names(session: AsyncSession, agent_id: str) -> list[Any]:
    """Every entity of the agent (key, display name, type): the string-similarity fallback's candidates."""
    query = select(t.entities.c.entity_key, t.entities.c.display_name, t.entities.c.entity_type).where(
        t.entities.c.agent_id == agent_id
    )
    return [row for row in (await session.execute(query)).all()]


def current_fact_clause(agent_id: str) -> Any:
    return and_(t.facts.c.agent_id == agent_id, t.facts.c.valid_to.is_(None), t.facts.c.invalidated_at.is_(None))


@dataclass(frozen=True)
class EntityWrite:
    """An entity to insert, or to count one more mention of."""

    key: str
    name: str
    type: str
    name_embedding: list[float] | None


async def upsert_entities(session: AsyncSession, agent_id: str, entities: Sequence[EntityWrite]) -> set[str]:
    """Insert each entity or count one more mention, in one statement (rows in key order, so concurrent writers
    take row locks in the same order); return the keys that were created."""
    if not entities:
        return set()
    values = pg_insert(t.entities).values(
        [
            {
                "id": uuid4(),
                "agent_id": agent_id,
                "entity_key": entity.key,
                "display_name": entity.name,
                "entity_type": entity.type,
                "name_embedding": entity.name_embedding,
            }
            for entity in sorted(entities, key=lambda entity: entity.key)
        ]
    )
    statement = values.on_conflict_do_update(
        index_elements=[t.entities.c.agent_id, t.entities.c.entity_key],
        set_={
            "mention_count": t.entities.c.mention_count + 1,
            "updated_at": func.clock_timestamp(),
            "name_embedding": func.coalesce(t.entities.c.name_embedding, values.excluded.name_embedding),
        },
    ).returning(t.entities.c.entity_key, t.entities.c.mention_count)
    return {row.entity_key for row in (await session.execute(statement)).all() if row.mention_count == 1}


async def register_aliases(
    session: AsyncSession, agent_id: str, aliases: Sequence[tuple[str, str, str]], *, source: str
) -> dict[str, list[str]]:
    """Register (normalised alias, alias, entity key) rows, first write wins, in one statement; return the
    normalised aliases that were new, by entity key."""
    if not aliases:
        return {}
    statement = (
        pg_insert(t.aliases)
        .values(
            [
                {"agent_id": agent_id, "alias_norm": norm, "alias": alias, "entity_key": key, "source": source}
                for norm, alias, key in sorted(aliases)
            ]
        )
        .on_conflict_do_nothing(index_elements=[t.aliases.c.agent_id, t.aliases.c.alias_norm])
        .returning(t.aliases.c.alias_norm, t.aliases.c.entity_key)
    )
    registered: dict[str, list[str]] = {}
    for row in (await session.execute(statement)).all():
        registered.setdefault(row.entity_key, []).append(row.alias_norm)
    return registered


async def seed_profile(session: AsyncSession, *, agent_id: str, entity_key: str, profile_text: str) -> bool:
    """Set profile_text only where it is NULL; True when it was seeded."""
    result = await session.execute(
        update(t.entities)
        .where(
            t.entities.c.agent_id == agent_id,
            t.entities.c.entity_key == entity_key,
            t.entities.c.profile_text.is_(None),
        )
        .values(profile_text=profile_text, updated_at=func.clock_timestamp())
        .returning(t.entities.c.id)
    )
    return result.first() is not None


async def insert_fact(session: AsyncSession, values: dict[str, Any]) -> Fact:
    """Insert one fact version; return it as stored."""
    statement = insert(t.facts).values(id=uuid4(), **values).returning(*FACT_COLUMNS)
    return fact_from_row((await session.execute(statement)).one())


async def lock_fact(session: AsyncSession, agent_id: str, fact_id: UUID) -> Fact | None:
    """The fact, its row locked until the transaction ends (None if the agent has no such fact)."""
    query = select(*FACT_COLUMNS).where(t.facts.c.agent_id == agent_id, t.facts.c.id == fact_id).with_for_update()
    row = (await session.execute(query)).first()
    return None if row is None else fact_from_row(row)


async def lock_timeline(
    session: AsyncSession, agent_id: str, entity_key: str, attribute: str
) -> list[tuple[UUID, datetime, datetime | None]]:
    """Every version of a subject's attribute as (id, valid_from, valid_to), locked until the transaction ends."""
    query = (
        select(t.facts.c.id, t.facts.c.valid_from, t.facts.c.valid_to)
        .where(t.facts.c.agent_id == agent_id, t.facts.c.entity_key == entity_key, t.facts.c.attribute == attribute)
        .with_for_update()
    )
    return [(row.id, row.valid_from, row.valid_to) for row in (await session.execute(query)).all()]


async def close_fact(session: AsyncSession, agent_id: str, fact_id: UUID, at: datetime, *, invalidate: bool) -> Fact:
    """End a fact's validity at `at` (valid time); `invalidate` also marks it retracted (transaction time)."""
    values: dict[str, Any] = {"valid_to": at, "closed_at": func.clock_timestamp()}
    if invalidate:
        values["invalidated_at"] = func.clock_timestamp()
    statement = (
        update(t.facts)
        .where(t.facts.c.agent_id == agent_id, t.facts.c.id == fact_id)
        .values(**values)
        .returning(*FACT_COLUMNS)
    )
    return fact_from_row((await session.execute(statement)).one())


async def invalidate_relationships_evidenced_by(
    session: AsyncSession, agent_id: str, fact_id: UUID, at: datetime
) -> list[UUID]:
    """The invalidation cascade: every current edge whose evidence is `fact_id` ends at `at`."""
    statement = (
        update(t.relationships)
        .where(
            t.relationships.c.agent_id == agent_id,
            t.relationships.c.evidence_fact_id == fact_id,
            t.relationships.c.invalidated_at.is_(None),
        )
        .values(
            valid_to=func.greatest(at, func.coalesce(t.relationships.c.valid_from, at)),
            invalidated_at=func.clock_timestamp(),
            updated_at=func.clock_timestamp(),
        )
        .returning(t.relationships.c.id)
    )
    return list((await session.execute(statement)).scalars().all())


async def confirm_fact(session: AsyncSession, agent_id: str, fact_id: UUID) -> Fact | None:
    """NOOP: the fact was said again; move last_confirmed_at (None if it is no longer current)."""
    statement = (
        update(t.facts)
        .where(current_fact_clause(agent_id), t.facts.c.id == fact_id)
        .values(last_confirmed_at=func.clock_timestamp())
        .returning(*FACT_COLUMNS)
    )
    row = (await session.execute(statement)).first()
    return None if row is None else fact_from_row(row)


async def insert_fact_links(session: AsyncSession, agent_id: str, links: Sequence[tuple[UUID, str, bool]]) -> None:
    """Link facts to entity keys: (fact id, entity key, is_primary) rows, in one statement."""
    if not links:
        return
    statement = pg_insert(t.fact_entities).values(
        [
            {"fact_id": fact_id, "agent_id": agent_id, "entity_key": key, "is_primary": primary}
            for fact_id, key, primary in links
        ]
    )
    await session.execute(statement.on_conflict_do_nothing())


async def upsert_relationship(
    session: AsyncSession,
    *,
    agent_id: str,
    source_key: str,
    target_key: str,
    rel_type: str,
    evidence_fact_id: UUID | None,
    valid_from: datetime,
    initial_strength: float,
    reinforcement: float,
) -> Relationship:
    """Create the current edge, or reinforce it towards 1.0 and refresh its evidence."""
    values = pg_insert(t.relationships).values(
        id=uuid4(),
        agent_id=agent_id,
        source_key=source_key,
        target_key=target_key,
        rel_type=rel_type,
        strength=initial_strength,
        evidence_fact_id=evidence_fact_id,
        valid_from=valid_from,
    )
    statement = values.on_conflict_do_update(
        index_elements=[
            t.relationships.c.agent_id,
            t.relationships.c.source_key,
            t.relationships.c.target_key,
            t.relationships.c.rel_type,
        ],
        index_where=t.relationships.c.invalidated_at.is_(None),
        set_={
            "strength": func.least(1.0, t.relationships.c.strength + reinforcement),
            "mention_count": t.relationships.c.mention_count + 1,
            "evidence_fact_id": func.coalesce(values.excluded.evidence_fact_id, t.relationships.c.evidence_fact_id),
            "updated_at": func.clock_timestamp(),
        },
    ).returning(*t.relationships.c)
    return relationship_from_row((await session.execute(statement)).one())


async def lock_names(session: AsyncSession, agent_id: str, names: Sequence[str]) -> int:
    """Take this transaction's advisory lock on each (agent, name), in one global order; return how many.

    Writes that touch the same entity of the same agent queue here for the length of their apply transaction;
    the ids are sorted, so two writes locking overlapping sets never deadlock, and other agents never wait.
    """
    ids = sorted({advisory_lock_id(agent_id, name) for name in names})
    if ids:
        await session.execute(
            text("SELECT pg_advisory_xact_lock(id) FROM unnest(CAST(:ids AS bigint[])) AS id"), {"ids": ids}
        )
    return len(ids)


def advisory_lock_id(agent_id: str, name: str) -> int:
    """A stable signed 64-bit lock id for (agent, name), the same in every process."""
    digest = hashlib.blake2b(f"{agent_id}\x00{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


async def count_rows(session: AsyncSession, agent_id: str | None = None) -> dict[str, int]:
    """Row counts of every memory table (all agents when agent_id is None): for dry-run checks and stats."""
    counts: dict[str, int] = {}
    for table in (
        t.events,
        t.pipeline_runs,
        t.entities,
        t.aliases,
        t.facts,
        t.fact_entities,
        t.relationships,
    ):
        query = select(func.count()).select_from(table)
        if agent_id is not None:
            query = query.where(table.c.agent_id == agent_id)
        counts[table.name] = (await session.execute(query)).scalar_one()
    return counts
