"""The write path's statements. Each takes the asyncpg connection of a tenant transaction (`Database.tenant`) and
never commits: the pipeline owns commits and savepoints.

They are fixed SQL: measured here, a statement built with SQLAlchemy Core and run through a session costs about
620 µs of client CPU, the same statement as raw SQL on asyncpg 90 µs, and a write runs a couple of dozen.
asyncpg prepares each text once per connection; plans are custom (Database sets plan_cache_mode). Every statement
filters on agent_id: it is the tenant boundary (row-level security is the second wall). The public reads
(store/reads.py) stay on SQLAlchemy Core, where composing filters matters more than microseconds.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID, uuid4

from pgvector import Vector
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from memory_sdk.results import Fact, Relationship
from memory_sdk.store import tables as t
from memory_sdk.store.database import Connection
from memory_sdk.store.rows import fact_from_record, relationship_from_record

__all__ = [
    "FACT_COLUMNS",
    "EntityMatches",
    "EntityRow",
    "EntityWrite",
    "NameMatch",
    "advisory_lock_id",
    "close_fact",
    "confirm_fact",
    "count_rows",
    "entity_names",
    "find_entities",
    "finish_run",
    "insert_event_and_run",
    "insert_fact",
    "insert_fact_links",
    "invalidate_relationships_evidenced_by",
    "lock_fact",
    "lock_names",
    "lock_timeline",
    "nearest_entities",
    "person_alias_prefixes",
    "register_aliases",
    "seed_profile",
    "set_event_emotion",
    "upsert_entities",
    "upsert_relationship",
]

# Every fact column but the vector: statements that hand a fact back never ship 6 KB nobody reads.
FACT_COLUMNS = tuple(column for column in t.facts.c if column.name != "embedding")
_FACT_SQL = ", ".join(column.name for column in FACT_COLUMNS)
_RELATIONSHIP_SQL = ", ".join(column.name for column in t.relationships.c)


def _jsonb(value: Any) -> str:
    """JSON for a jsonb column, which cannot hold U+0000: an extracted NUL is stored as U+FFFD."""
    return json.dumps(value).replace("\\u0000", "\\ufffd")


def _vector(embedding: Sequence[float] | None) -> Vector | None:
    return None if embedding is None else Vector(list(embedding))


# --- events and pipeline runs --------------------------------------------------------------------------------


async def insert_event_and_run(
    conn: Connection,
    *,
    agent_id: str,
    speaker: str,
    content: str,
    occurred_at: datetime,
    embedding: list[float] | None,
) -> tuple[UUID, UUID]:
    """Log the message as an event and open its pipeline run, in one statement; return (event id, run id)."""
    event_id, run_id = uuid4(), uuid4()
    await conn.execute(
        """
        WITH event AS (
            INSERT INTO memory_events (id, agent_id, speaker, content, occurred_at, embedding)
            VALUES ($1, $2, $3, $4, $5, $6) RETURNING id, agent_id
        )
        INSERT INTO memory_pipeline_runs (id, agent_id, event_id, status)
        SELECT $7, agent_id, id, 'running' FROM event
        """,
        event_id,
        agent_id,
        speaker,
        content,
        occurred_at,
        _vector(embedding),
        run_id,
    )
    return event_id, run_id


async def finish_run(conn: Connection, *, agent_id: str, run_id: UUID, values: dict[str, Any]) -> None:
    """Close a pipeline run: status, path, LLM calls, tokens, error and the trace (JSON)."""
    await conn.execute(
        """
        UPDATE memory_pipeline_runs
        SET status = $3, extraction_path = $4, llm_calls = $5, input_tokens = $6, output_tokens = $7,
            error = $8, trace = $9::jsonb, finished_at = clock_timestamp()
        WHERE agent_id = $1 AND id = $2
        """,
        agent_id,
        run_id,
        values["status"],
        values["extraction_path"],
        values["llm_calls"],
        values["input_tokens"],
        values["output_tokens"],
        values["error"],
        _jsonb(values["trace"]),
    )


async def set_event_emotion(conn: Connection, *, agent_id: str, event_id: UUID, emotion: dict[str, Any]) -> None:
    await conn.execute(
        "UPDATE memory_events SET emotion = $3::jsonb WHERE agent_id = $1 AND id = $2",
        agent_id,
        event_id,
        _jsonb(emotion),
    )


# --- entities and aliases ------------------------------------------------------------------------------------


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
    conn: Connection, agent_id: str, *, aliases: Sequence[str] = (), keys: Sequence[str] = ()
) -> EntityMatches:
    """The entities registered under any of `aliases` (normalised) or stored under any of `keys`, in one
    statement of index probes (alias primary key, entity key)."""
    found = EntityMatches()
    if not aliases and not keys:
        return found
    rows = await conn.fetch(
        """
        SELECT a.alias_norm, e.entity_key, e.display_name, e.entity_type, e.profile_text
        FROM memory_entity_aliases a
        JOIN memory_entities e ON e.agent_id = a.agent_id AND e.entity_key = a.entity_key
        WHERE a.agent_id = $1 AND a.alias_norm = ANY($2::text[])
        UNION ALL
        SELECT NULL, e.entity_key, e.display_name, e.entity_type, e.profile_text
        FROM memory_entities e
        WHERE e.agent_id = $1 AND e.entity_key = ANY($3::text[])
        """,
        agent_id,
        list(dict.fromkeys(aliases)),
        list(dict.fromkeys(keys)),
    )
    for row in rows:
        key = row["entity_key"]
        found.entities[key] = EntityRow(key, row["display_name"], row["entity_type"], row["profile_text"])
        if row["alias_norm"] is not None:
            found.by_alias[row["alias_norm"]] = key
    return found


async def person_alias_prefixes(conn: Connection, agent_id: str, word: str, min_chars: int) -> list[tuple[str, str]]:
    """(alias_norm, entity_key) of people whose alias starts with `word`, or whose first word is a prefix of it
    (of at least `min_chars` letters).

    Two index probes, OR-ed in a bitmap: a range scan of the text_pattern_ops alias index for `word%`, and the
    first-word expression index (migration 0003) for the prefixes; the cost does not grow with the registry.
    """
    prefixes = [word[:size] for size in range(min_chars, len(word))]
    rows = await conn.fetch(
        """
        SELECT a.alias_norm, a.entity_key
        FROM memory_entity_aliases a
        JOIN memory_entities e ON e.agent_id = a.agent_id AND e.entity_key = a.entity_key
        WHERE a.agent_id = $1 AND e.entity_type = 'person'
          AND (a.alias_norm LIKE $2 OR split_part(a.alias_norm, ' ', 1) = ANY($3::text[]))
        LIMIT 50
        """,
        agent_id,
        _escape_like(word) + "%",
        prefixes,
    )
    return [(row["alias_norm"], row["entity_key"]) for row in rows]


def _escape_like(text_: str) -> str:
    return text_.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


@dataclass(frozen=True)
class NameMatch:
    """An entity whose name is near a searched name, with the cosine (or string) similarity."""

    key: str
    name: str
    type: str
    score: float


async def nearest_entities(conn: Connection, agent_id: str, embedding: list[float], limit: int) -> list[NameMatch]:
    """The agent's entities whose name embedding is nearest, through the HNSW index."""
    # The pooled connection's hnsw.iterative_scan keeps the scan going until `limit` rows pass the agent filter.
    rows = await conn.fetch(
        """
        SELECT entity_key, display_name, entity_type, 1 - (name_embedding <=> $2) AS score
        FROM memory_entities
        WHERE agent_id = $1 AND name_embedding IS NOT NULL
        ORDER BY name_embedding <=> $2
        LIMIT $3
        """,
        agent_id,
        _vector(embedding),
        limit,
    )
    return [NameMatch(r["entity_key"], r["display_name"], r["entity_type"], float(r["score"])) for r in rows]


async def entity_names(conn: Connection, agent_id: str) -> list[EntityRow]:
    """Every entity of the agent: the string-similarity fallback's candidates (only when embeddings failed)."""
    rows = await conn.fetch(
        "SELECT entity_key, display_name, entity_type FROM memory_entities WHERE agent_id = $1", agent_id
    )
    return [EntityRow(r["entity_key"], r["display_name"], r["entity_type"], None) for r in rows]


@dataclass(frozen=True)
class EntityWrite:
    """An entity to insert, or to count one more mention of."""

    key: str
    name: str
    type: str
    name_embedding: list[float] | None


async def upsert_entities(conn: Connection, agent_id: str, entities: Sequence[EntityWrite]) -> set[str]:
    """Insert each entity or count one more mention, in one statement (rows in key order, so concurrent writers
    take row locks in the same order); return the keys that were created."""
    if not entities:
        return set()
    ordered = sorted(entities, key=lambda entity: entity.key)
    rows = await conn.fetch(
        """
        INSERT INTO memory_entities AS e (id, agent_id, entity_key, display_name, entity_type, name_embedding)
        SELECT id, $1, key, name, type, vec
        FROM unnest($2::uuid[], $3::text[], $4::text[], $5::text[], $6::vector[]) AS w(id, key, name, type, vec)
        ON CONFLICT (agent_id, entity_key) DO UPDATE
        SET mention_count = e.mention_count + 1,
            updated_at = clock_timestamp(),
            name_embedding = coalesce(e.name_embedding, excluded.name_embedding)
        RETURNING entity_key, mention_count
        """,
        agent_id,
        [uuid4() for _ in ordered],
        [entity.key for entity in ordered],
        [entity.name for entity in ordered],
        [entity.type for entity in ordered],
        [_vector(entity.name_embedding) for entity in ordered],
    )
    return {row["entity_key"] for row in rows if row["mention_count"] == 1}


async def register_aliases(
    conn: Connection, agent_id: str, aliases: Sequence[tuple[str, str, str]], *, source: str
) -> dict[str, list[str]]:
    """Register (normalised alias, alias, entity key) rows, first write wins, in one statement; return the
    normalised aliases that were new, by entity key."""
    if not aliases:
        return {}
    ordered = sorted(aliases)
    rows = await conn.fetch(
        """
        INSERT INTO memory_entity_aliases (agent_id, alias_norm, alias, entity_key, source)
        SELECT $1, norm, alias, key, $5 FROM unnest($2::text[], $3::text[], $4::text[]) AS a(norm, alias, key)
        ON CONFLICT (agent_id, alias_norm) DO NOTHING
        RETURNING alias_norm, entity_key
        """,
        agent_id,
        [norm for norm, _alias, _key in ordered],
        [alias for _norm, alias, _key in ordered],
        [key for _norm, _alias, key in ordered],
        source,
    )
    registered: dict[str, list[str]] = {}
    for row in rows:
        registered.setdefault(row["entity_key"], []).append(row["alias_norm"])
    return registered


async def seed_profile(conn: Connection, *, agent_id: str, entity_key: str, profile_text: str) -> bool:
    """Set profile_text only where it is NULL; True when it was seeded."""
    seeded = await conn.fetchval(
        """
        UPDATE memory_entities SET profile_text = $3, updated_at = clock_timestamp()
        WHERE agent_id = $1 AND entity_key = $2 AND profile_text IS NULL
        RETURNING id
        """,
        agent_id,
        entity_key,
        profile_text,
    )
    return seeded is not None


# --- facts ---------------------------------------------------------------------------------------------------


async def insert_fact(conn: Connection, values: dict[str, Any]) -> Fact:
    """Insert one fact version (closed_at is set with valid_to); return it as stored."""
    row = await conn.fetchrow(
        f"""
        INSERT INTO memory_facts (
            id, agent_id, entity_key, fact_text, attribute, single_valued, confidence, importance,
            importance_category, speaker, source_event_id, source_context, valid_from, valid_to, closed_at,
            supersedes_fact_id, embedding, schema_version, prompt_version, identity_key)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14,
                CASE WHEN $14::timestamptz IS NULL THEN NULL ELSE clock_timestamp() END,
                $15, $16, $17, $18, $19)
        RETURNING {_FACT_SQL}
        """,  # noqa: S608 - the column list is this module's constant
        uuid4(),
        values["agent_id"],
        values["entity_key"],
        values["fact_text"],
        values.get("attribute"),
        values.get("single_valued", False),
        values["confidence"],
        values["importance"],
        values["importance_category"],
        values.get("speaker"),
        values.get("source_event_id"),
        values.get("source_context", "extracted"),
        values["valid_from"],
        values.get("valid_to"),
        values.get("supersedes_fact_id"),
        _vector(values.get("embedding")),
        values["schema_version"],
        values.get("prompt_version"),
        values.get("identity_key"),
    )
    return fact_from_record(row)


async def lock_fact(conn: Connection, agent_id: str, fact_id: UUID) -> Fact | None:
    """The fact, its row locked until the transaction ends (None if the agent has no such fact)."""
    row = await conn.fetchrow(
        f"SELECT {_FACT_SQL} FROM memory_facts WHERE agent_id = $1 AND id = $2 FOR UPDATE",  # noqa: S608
        agent_id,
        fact_id,
    )
    return None if row is None else fact_from_record(row)


async def lock_timeline(
    conn: Connection, agent_id: str, entity_key: str, attribute: str
) -> list[tuple[UUID, datetime, datetime | None]]:
    """Every version of a subject's attribute as (id, valid_from, valid_to), locked until the transaction ends."""
    rows = await conn.fetch(
        """
        SELECT id, valid_from, valid_to FROM memory_facts
        WHERE agent_id = $1 AND entity_key = $2 AND attribute = $3
        FOR UPDATE
        """,
        agent_id,
        entity_key,
        attribute,
    )
    return [(row["id"], row["valid_from"], row["valid_to"]) for row in rows]


async def close_fact(conn: Connection, agent_id: str, fact_id: UUID, at: datetime, *, invalidate: bool) -> Fact:
    """End a fact's validity at `at` (valid time); `invalidate` also marks it retracted (transaction time)."""
    row = await conn.fetchrow(
        f"""
        UPDATE memory_facts
        SET valid_to = $3, closed_at = clock_timestamp(),
            invalidated_at = CASE WHEN $4 THEN clock_timestamp() ELSE invalidated_at END
        WHERE agent_id = $1 AND id = $2
        RETURNING {_FACT_SQL}
        """,  # noqa: S608 - the column list is this module's constant
        agent_id,
        fact_id,
        at,
        invalidate,
    )
    return fact_from_record(row)


async def invalidate_relationships_evidenced_by(
    conn: Connection, agent_id: str, fact_id: UUID, at: datetime
) -> list[UUID]:
    """The invalidation cascade: every current edge whose evidence is `fact_id` ends at `at`."""
    rows = await conn.fetch(
        """
        UPDATE memory_relationships
        SET valid_to = greatest($3::timestamptz, coalesce(valid_from, $3::timestamptz)),
            invalidated_at = clock_timestamp(), updated_at = clock_timestamp()
        WHERE agent_id = $1 AND evidence_fact_id = $2 AND invalidated_at IS NULL
        RETURNING id
        """,
        agent_id,
        fact_id,
        at,
    )
    return [row["id"] for row in rows]


async def confirm_fact(conn: Connection, agent_id: str, fact_id: UUID) -> Fact | None:
    """NOOP: the fact was said again; move last_confirmed_at (None if it is no longer current)."""
    row = await conn.fetchrow(
        f"""
        UPDATE memory_facts SET last_confirmed_at = clock_timestamp()
        WHERE agent_id = $1 AND id = $2 AND valid_to IS NULL AND invalidated_at IS NULL
        RETURNING {_FACT_SQL}
        """,  # noqa: S608 - the column list is this module's constant
        agent_id,
        fact_id,
    )
    return None if row is None else fact_from_record(row)


async def insert_fact_links(conn: Connection, agent_id: str, links: Sequence[tuple[UUID, str, bool]]) -> None:
    """Link facts to entity keys: (fact id, entity key, is_primary) rows, in one statement."""
    if not links:
        return
    await conn.execute(
        """
        INSERT INTO memory_fact_entities (fact_id, agent_id, entity_key, is_primary)
        SELECT fact_id, $1, key, is_primary
        FROM unnest($2::uuid[], $3::text[], $4::boolean[]) AS l(fact_id, key, is_primary)
        ON CONFLICT DO NOTHING
        """,
        agent_id,
        [fact_id for fact_id, _key, _primary in links],
        [key for _fact_id, key, _primary in links],
        [primary for _fact_id, _key, primary in links],
    )


# --- relationships -------------------------------------------------------------------------------------------


async def upsert_relationship(
    conn: Connection,
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
    row = await conn.fetchrow(
        f"""
        INSERT INTO memory_relationships AS r
            (id, agent_id, source_key, target_key, rel_type, strength, evidence_fact_id, valid_from)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
        ON CONFLICT (agent_id, source_key, target_key, rel_type) WHERE invalidated_at IS NULL DO UPDATE
        SET strength = least(1.0, r.strength + $9),
            mention_count = r.mention_count + 1,
            evidence_fact_id = coalesce(excluded.evidence_fact_id, r.evidence_fact_id),
            updated_at = clock_timestamp()
        RETURNING {_RELATIONSHIP_SQL}
        """,  # noqa: S608 - the column list is this module's constant
        uuid4(),
        agent_id,
        source_key,
        target_key,
        rel_type,
        initial_strength,
        evidence_fact_id,
        valid_from,
        reinforcement,
    )
    return relationship_from_record(row)


# --- locks ---------------------------------------------------------------------------------------------------


async def lock_names(conn: Connection, agent_id: str, names: Sequence[str]) -> int:
    """Take this transaction's advisory lock on each (agent, name), in one global order; return how many.

    Writes that touch the same entity of the same agent queue here for the length of their apply transaction;
    the ids are sorted, so two writes locking overlapping sets never deadlock, and other agents never wait.
    """
    ids = sorted({advisory_lock_id(agent_id, name) for name in names})
    if ids:
        await conn.execute(
            "SELECT pg_advisory_xact_lock(id) FROM unnest($1::bigint[]) WITH ORDINALITY AS l(id, n) ORDER BY n", ids
        )
    return len(ids)


def advisory_lock_id(agent_id: str, name: str) -> int:
    """A stable signed 64-bit lock id for (agent, name), the same in every process."""
    digest = hashlib.blake2b(f"{agent_id}\x00{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


# --- operator statistics ---------------------------------------------------------------------------------------


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
