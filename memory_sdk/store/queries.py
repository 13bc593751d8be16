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
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID, uuid4

from pgvector import Vector
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from memory_sdk.errors import RunTakenOver
from memory_sdk.results import Fact, Relationship
from memory_sdk.store import indexing
from memory_sdk.store import tables as t
from memory_sdk.store.database import LOCK_IDS_SQL, Connection
from memory_sdk.store.rows import fact_from_record, relationship_from_record

__all__ = [
    "FACT_COLUMNS",
    "Claim",
    "FactRow",
    "StoredEvent",
    "advisory_lock_id",
    "advisory_lock_ids",
    "claim_event",
    "close_fact",
    "confirm_fact",
    "count_rows",
    "erase_agent",
    "finish_run",
    "heartbeat",
    "insert_event_and_run",
    "insert_facts",
    "lock_fact",
    "lock_names",
    "lock_timeline",
    "set_event_emotion",
    "stored_events",
    "unfinished_events",
    "upsert_relationship",
    "vector_param",
]

# Every fact column but the vector: statements that hand a fact back never ship 6 KB nobody reads.
FACT_COLUMNS = tuple(column for column in t.facts.c if column.name != "embedding")
_FACT_SQL = ", ".join(column.name for column in FACT_COLUMNS)
_RELATIONSHIP_SQL = ", ".join(column.name for column in t.relationships.c)


def _jsonb(value: Any) -> str:
    """JSON for a jsonb column, which cannot hold U+0000: an extracted NUL is stored as U+FFFD."""
    return json.dumps(value).replace("\\u0000", "\\ufffd")


def vector_param(embedding: Sequence[float] | None) -> Vector | None:
    """A vector as a statement parameter (pgvector's binary codec sends it)."""
    if embedding is None:
        return None
    try:
        return _PackedVector(embedding)
    except (OverflowError, struct.error):  # a float past float32 or no number: Vector's own handling, as before
        return Vector(list(embedding))


class _PackedVector(Vector):
    """A pgvector Vector whose binary form (what the codec sends) is packed once, straight from the floats.

    Vector converts a list to array('f'), then copies and byte-swaps it on every send: twice the CPU of one
    struct.pack, and a write sends a dozen 1536-float vectors. The bytes are the same (both round
    each float to float32 the same way); the other Vector methods read `_value`, unpacked only if asked for.
    """

    def __init__(self, embedding: Sequence[float]) -> None:
        self._binary = struct.pack(f">HH{len(embedding)}f", len(embedding), 0, *embedding)

    def to_binary(self) -> bytes:
        return self._binary

    def __getattr__(self, name: str) -> Any:
        if name != "_value":
            raise AttributeError(name)
        self._value = Vector.from_binary(self._binary)._value
        return self._value


# --- events and pipeline runs --------------------------------------------------------------------------------


async def insert_event_and_run(
    conn: Connection,
    *,
    agent_id: str,
    speaker: str,
    content: str,
    occurred_at: datetime,
    embedding: list[float] | None,
    message_id: str | None,
) -> tuple[UUID, UUID] | None:
    """Log the message as an event and open its pipeline run, in one statement; return (event id, run id).

    None when the agent already has an event with this `message_id` (a concurrent insert of the same id waits for
    the first to commit, then finds it): the caller looks that event up instead (`claim_event`).
    """
    event_id, run_id = uuid4(), uuid4()
    inserted = await conn.fetchval(
        """
        WITH event AS (
            INSERT INTO memory_events (id, agent_id, speaker, content, occurred_at, embedding, message_id)
            VALUES ($1, $2, $3, $4, $5, $6, $8)
            ON CONFLICT (agent_id, message_id) WHERE message_id IS NOT NULL DO NOTHING
            RETURNING id, agent_id
        )
        INSERT INTO memory_pipeline_runs (id, agent_id, event_id, status, heartbeat_at)
        SELECT $7, agent_id, id, 'running', clock_timestamp() FROM event
        RETURNING id
        """,
        event_id,
        agent_id,
        speaker,
        content,
        occurred_at,
        vector_param(embedding),
        run_id,
        message_id,
    )
    return None if inserted is None else (event_id, run_id)


@dataclass(frozen=True)
class StoredEvent:
    """An event as reprocessing needs it."""

    id: UUID
    speaker: str
    content: str
    occurred_at: datetime
    message_id: str | None

    @classmethod
    def from_record(cls, row: Any) -> StoredEvent:
        """From a row with the columns of _STORED_EVENT_SQL."""
        return cls(row["id"], row["speaker"], row["content"], row["occurred_at"], row["message_id"])


_STORED_EVENT_SQL = "id, speaker, content, occurred_at, message_id"


@dataclass(frozen=True)
class Claim:
    """What `claim_event` found. `run_id` is the new run when the event was taken over; otherwise `done` holds
    the stored outcome of a finished run, or `busy` is True because a live write is still working on it."""

    event: StoredEvent
    run_id: UUID | None = None
    done: dict[str, Any] | None = None
    busy: bool = False
    attempts: int = 0


async def claim_event(
    conn: Connection,
    *,
    agent_id: str,
    event_id: UUID | None = None,
    message_id: str | None = None,
    stale_after_sec: float,
    max_attempts: int | None = None,
) -> Claim | None:
    """Take an event over for another pipeline run, unless a run already finished it or a live one holds it.

    The event row is locked first, so concurrent claims of one event queue and the second sees the first's run.
    Runs still `running` whose heartbeat is older than `stale_after_sec` belong to dead processes: they become
    `abandoned`. Succeeded runs make the event done (its stored outcome is returned). With `max_attempts`, an
    event with that many runs already is not claimed (`run_id` None, neither done nor busy). None: no such event.
    """
    row = await conn.fetchrow(
        f"""
        SELECT {_STORED_EVENT_SQL} FROM memory_events
        WHERE agent_id = $1 AND (id = $2 OR ($2::uuid IS NULL AND message_id = $3))
        FOR UPDATE
        """,  # noqa: S608 - the column list is this module's constant
        agent_id,
        event_id,
        message_id,
    )
    if row is None:
        return None
    event = StoredEvent.from_record(row)
    runs = await conn.fetch(
        """
        SELECT id, status, result,
               coalesce(heartbeat_at, started_at) < clock_timestamp() - make_interval(secs => $3) AS stale
        FROM memory_pipeline_runs WHERE agent_id = $1 AND event_id = $2
        ORDER BY started_at DESC
        """,
        agent_id,
        event.id,
        stale_after_sec,
    )
    done = next((r for r in runs if r["status"] == "succeeded"), None)
    if done is not None:
        return Claim(event, done=dict(done["result"] or {}), attempts=len(runs))  # jsonb arrives decoded
    if any(r["status"] == "running" and not r["stale"] for r in runs):
        return Claim(event, busy=True, attempts=len(runs))
    if max_attempts is not None and len(runs) >= max_attempts:
        return Claim(event, attempts=len(runs))
    run_id = uuid4()
    await conn.execute(
        """
        WITH abandoned AS (
            UPDATE memory_pipeline_runs
            SET status = 'abandoned', finished_at = clock_timestamp(),
                error = concat_ws('; ', error, 'abandoned: no heartbeat, its process is gone; taken over by run '
                                  || $3::uuid::text)
            WHERE agent_id = $1 AND event_id = $2 AND status = 'running'
        )
        INSERT INTO memory_pipeline_runs (id, agent_id, event_id, status, heartbeat_at)
        VALUES ($3::uuid, $1, $2, 'running', clock_timestamp())
        """,
        agent_id,
        event.id,
        run_id,
    )
    return Claim(event, run_id=run_id, attempts=len(runs))


async def unfinished_events(conn: Connection, *, agent_id: str, stale_after_sec: float, limit: int) -> list[UUID]:
    """Events whose latest run failed, was cancelled, or is `running` without a heartbeat for `stale_after_sec`:
    the writes `reprocess` finishes, oldest message first."""
    rows = await conn.fetch(
        """
        SELECT r.event_id FROM memory_pipeline_runs r JOIN memory_events e ON e.id = r.event_id
        WHERE r.agent_id = $1 AND e.agent_id = $1
          AND r.status IN ('running', 'failed', 'cancelled')
          AND (r.status <> 'running'
               OR coalesce(r.heartbeat_at, r.started_at) < clock_timestamp() - make_interval(secs => $2))
          AND NOT EXISTS (
              SELECT 1 FROM memory_pipeline_runs later
              WHERE later.agent_id = $1 AND later.event_id = r.event_id
                AND (later.started_at, later.id) > (r.started_at, r.id))
        ORDER BY e.occurred_at, e.recorded_at
        LIMIT $3
        """,
        agent_id,
        stale_after_sec,
        limit,
    )
    return [row["event_id"] for row in rows]


async def stored_events(conn: Connection, *, agent_id: str, event_ids: Sequence[UUID]) -> list[StoredEvent]:
    """The events with these ids, in message order."""
    rows = await conn.fetch(
        f"""
        SELECT {_STORED_EVENT_SQL} FROM memory_events
        WHERE agent_id = $1 AND id = ANY($2::uuid[])
        ORDER BY occurred_at, recorded_at
        """,  # noqa: S608 - the column list is this module's constant
        agent_id,
        list(event_ids),
    )
    return [StoredEvent.from_record(row) for row in rows]


# Child tables first: every foreign key points from a row deleted earlier to one deleted later.
_ERASE_ORDER = (
    "memory_relationships",
    "memory_fact_entities",
    "memory_facts",
    "memory_entity_aliases",
    "memory_entities",
    "memory_pipeline_runs",
    "memory_events",
    "memory_agent_embedders",
)


async def erase_agent(conn: Connection, agent_id: str) -> dict[str, int]:
    """Delete every row of the agent, events included (the one sanctioned erase path: the event trigger lets
    deletes through only in a transaction that sets memory_sdk.allow_event_erase); rows deleted per table."""
    await conn.execute("SELECT set_config('memory_sdk.allow_event_erase', 'on', true)")
    counts: dict[str, int] = {}
    for table in _ERASE_ORDER:
        status = await conn.execute(f"DELETE FROM {table} WHERE agent_id = $1", agent_id)  # noqa: S608 - constant
        counts[table.removeprefix("memory_")] = int(status.split()[-1])
    return counts


async def heartbeat(conn: Connection, *, agent_id: str, run_id: UUID) -> None:
    """Renew a running run's lease: it is alive, nobody may take its event over."""
    await conn.execute(
        "UPDATE memory_pipeline_runs SET heartbeat_at = clock_timestamp() "
        "WHERE agent_id = $1 AND id = $2 AND status = 'running'",
        agent_id,
        run_id,
    )


async def finish_run(conn: Connection, *, agent_id: str, run_id: UUID, values: dict[str, Any]) -> None:
    """Close a pipeline run: status, path, LLM calls, tokens, error, the trace and the outcome (JSON).

    Only a run still `running` is closed. Raises RunTakenOver when another run took its event over (its heartbeat
    had stopped): the caller's transaction must then roll back, so the event's writes are applied once.
    """
    closed = await conn.fetchval(
        """
        UPDATE memory_pipeline_runs
        SET status = $3, extraction_path = $4, llm_calls = $5, input_tokens = $6, output_tokens = $7,
            error = $8, trace = $9::jsonb, result = $10::jsonb, finished_at = clock_timestamp()
        WHERE agent_id = $1 AND id = $2 AND status = 'running'
        RETURNING id
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
        _jsonb(values.get("result")),
    )
    if closed is None:
        raise RunTakenOver(f"pipeline run {run_id} is no longer running: another run took its event over")


async def set_event_emotion(conn: Connection, *, agent_id: str, event_id: UUID, emotion: dict[str, Any]) -> None:
    await conn.execute(
        "UPDATE memory_events SET emotion = $3::jsonb WHERE agent_id = $1 AND id = $2",
        agent_id,
        event_id,
        _jsonb(emotion),
    )


# --- facts ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FactRow:
    """A fact version to insert: every column the write path sets (the others take their defaults). `id` is chosen
    by the caller, so that the version's fact-entity links go in the same statement."""

    id: UUID
    entity_key: str
    fact_text: str
    attribute: str | None
    single_valued: bool
    confidence: float
    importance: float
    importance_category: str
    speaker: str | None
    source_event_id: UUID | None
    source_context: str
    valid_from: datetime
    valid_to: datetime | None  # a delayed message's version is stored closed (closed_at is set with it)
    supersedes_fact_id: UUID | None
    embedding: Sequence[float] | None
    schema_version: int
    prompt_version: str | None
    identity_key: str | None


# Each column of FactRow but id, with its type in the unnest of insert_facts.
_FACT_ROW_TYPES = (
    ("entity_key", "text"),
    ("fact_text", "text"),
    ("attribute", "text"),
    ("single_valued", "boolean"),
    ("confidence", "double precision"),
    ("importance", "double precision"),
    ("importance_category", "text"),
    ("speaker", "text"),
    ("source_event_id", "uuid"),
    ("source_context", "text"),
    ("valid_from", "timestamptz"),
    ("valid_to", "timestamptz"),
    ("supersedes_fact_id", "uuid"),
    ("embedding", "vector"),
    ("schema_version", "integer"),
    ("prompt_version", "text"),
    ("identity_key", "text"),
)
_FACT_ROW_NAMES = ", ".join(name for name, _type in _FACT_ROW_TYPES)
_FACT_ROW_ARRAYS = ", ".join(f"${n}::{kind}[]" for n, (_name, kind) in enumerate(_FACT_ROW_TYPES, start=3))
_LINKS_AT = len(_FACT_ROW_TYPES) + 3
# The versions in the given order (recorded_at defaults to clock_timestamp(), so they are recorded in that order,
# as one statement each recorded them), then their fact-entity links, whose foreign key is checked at the end of
# the statement, when the facts exist.
_INSERT_FACTS_SQL = f"""
    WITH new_facts AS (
        INSERT INTO memory_facts (id, agent_id, {_FACT_ROW_NAMES}, closed_at, indexed)
        SELECT v.id, $1, {", ".join(f"v.{name}" for name, _type in _FACT_ROW_TYPES)},
               CASE WHEN v.valid_to IS NULL THEN NULL ELSE clock_timestamp() END, false
        FROM unnest($2::uuid[], {_FACT_ROW_ARRAYS}) WITH ORDINALITY AS v(id, {_FACT_ROW_NAMES}, ord)
        ORDER BY v.ord
        RETURNING {_FACT_SQL}
    ), new_links AS (
        INSERT INTO memory_fact_entities (fact_id, agent_id, entity_key, is_primary)
        SELECT l.fact_id, $1, l.key, l.is_primary
        FROM unnest(${_LINKS_AT}::uuid[], ${_LINKS_AT + 1}::text[], ${_LINKS_AT + 2}::boolean[])
            AS l(fact_id, key, is_primary)
        ON CONFLICT DO NOTHING
    )
    SELECT * FROM new_facts
    """  # noqa: S608 - assembled from this module's constants only


async def insert_facts(
    conn: Connection, agent_id: str, rows: Sequence[FactRow], links: Sequence[tuple[UUID, str, bool]] = ()
) -> list[Fact]:
    """Insert fact versions, in order, and their fact-entity links ((fact id, entity key, is_primary) rows), in one
    statement; return the versions as stored, in the same order. The versions are outside the HNSW index until
    the indexer adds them after the transaction commits (store/indexing.py)."""
    if not rows:
        return []
    columns = [
        [vector_param(row.embedding) if name == "embedding" else getattr(row, name) for row in rows]
        for name, _type in _FACT_ROW_TYPES
    ]
    stored = await conn.fetch(
        _INSERT_FACTS_SQL,
        agent_id,
        [row.id for row in rows],
        *columns,
        [fact_id for fact_id, _key, _primary in links],
        [key for _fact_id, key, _primary in links],
        [primary for _fact_id, _key, primary in links],
    )
    if any(row.valid_to is None for row in rows):
        indexing.mark(conn, agent_id)  # into the HNSW index once the transaction commits
    by_id = {record["id"]: fact_from_record(record) for record in stored}
    return [by_id[row.id] for row in rows]


async def lock_fact(conn: Connection, agent_id: str, fact_id: UUID) -> Fact | None:
    """The fact, its row locked until the transaction ends (None if the agent has no such fact)."""
    row = await conn.fetchrow(
        f"SELECT {_FACT_SQL} FROM memory_facts WHERE agent_id = $1 AND id = $2 FOR UPDATE",  # noqa: S608
        agent_id,
        fact_id,
    )
    return None if row is None else fact_from_record(row)


async def lock_timeline(
    conn: Connection, agent_id: str, entity_key: str, attribute: str, starting: datetime, target_id: UUID | None
) -> list[tuple[UUID, datetime, datetime | None]]:
    """The versions of a subject's attribute that bear on a new one `starting` then (temporal.bears_on: open, or
    ending after it), and the version `target_id` when it is one of the attribute's, as (id, valid_from, valid_to),
    locked until the transaction ends. The two ranges are scans of ix_memory_facts_attribute (migration 0013): a
    message about now reads the open version alone, whatever the attribute's history.

    The listed versions and the target (which the caller has locked already, fact_writes) are then read and locked
    by id alone, and the target kept only if it is one of the attribute's. With the subject and attribute repeated
    beside the ids, a plan may serve them by that prefix of the index and scan the attribute's whole history to find
    the ids: the generic plan the apply transaction once kept did (16 ms at 6,363 versions of `lives_in`, where the
    plan for the values took 0.1 ms), and so did the plan for the values in a
    database of 301 agents (2,003 rows read for one; tests/test_timeline_index.py).
    """
    rows = await conn.fetch(
        """
        SELECT id, valid_from, valid_to, entity_key, attribute FROM memory_facts
        WHERE agent_id = $1 AND id = ANY (array_append(ARRAY(
            SELECT v.id FROM memory_facts v
            WHERE v.agent_id = $1 AND v.entity_key = $2 AND v.attribute = $3 AND v.valid_to IS NULL
            UNION ALL
            SELECT v.id FROM memory_facts v
            WHERE v.agent_id = $1 AND v.entity_key = $2 AND v.attribute = $3 AND v.valid_to > $4
        ), $5::uuid))
        FOR UPDATE
        """,
        agent_id,
        entity_key,
        attribute,
        starting,
        target_id,
    )
    return [
        (row["id"], row["valid_from"], row["valid_to"])
        for row in rows
        if (row["entity_key"], row["attribute"]) == (entity_key, attribute)
    ]


async def close_fact(
    conn: Connection, agent_id: str, fact_id: UUID, at: datetime, *, invalidate: bool
) -> tuple[Fact, list[UUID]]:
    """End a fact's validity at `at` (valid time); `invalidate` also marks it retracted (transaction time). In the
    same statement, the invalidation cascade: every current edge whose evidence the fact is ends at `at`. Returns
    the closed fact and the ids of the edges that ended."""
    row = await conn.fetchrow(
        f"""
        WITH closed AS (
            UPDATE memory_facts
            SET valid_to = $3, closed_at = clock_timestamp(),
                invalidated_at = CASE WHEN $4 THEN clock_timestamp() ELSE invalidated_at END
            WHERE agent_id = $1 AND id = $2
            RETURNING {_FACT_SQL}
        ), ended AS (
            UPDATE memory_relationships
            SET valid_to = greatest($3::timestamptz, coalesce(valid_from, $3::timestamptz)),
                invalidated_at = clock_timestamp(), updated_at = clock_timestamp()
            WHERE agent_id = $1 AND evidence_fact_id = $2 AND invalidated_at IS NULL
            RETURNING id
        )
        SELECT closed.*, ARRAY(SELECT id FROM ended) AS ended_edges FROM closed
        """,  # noqa: S608 - the column list is this module's constant
        agent_id,
        fact_id,
        at,
        invalidate,
    )
    return fact_from_record(row), list(row["ended_edges"])


async def confirm_fact(conn: Connection, agent_id: str, fact_id: UUID) -> Fact | None:
    """NOOP: the fact was said again; move last_confirmed_at, the row locked until the transaction ends. None if
    it is no longer current or was merged into another fact (the caller then follows the merge)."""
    row = await conn.fetchrow(
        f"""
        UPDATE memory_facts SET last_confirmed_at = clock_timestamp()
        WHERE agent_id = $1 AND id = $2 AND valid_to IS NULL AND invalidated_at IS NULL
          AND merged_into_fact_id IS NULL
        RETURNING {_FACT_SQL}
        """,  # noqa: S608 - the column list is this module's constant
        agent_id,
        fact_id,
    )
    return None if row is None else fact_from_record(row)


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
    event_id: UUID | None,
) -> Relationship:
    """Create the current edge, or reinforce it towards 1.0 and refresh its evidence.

    One event reinforces an edge once: a reprocessed or retried write (same event) leaves its strength alone.
    """
    row = await conn.fetchrow(
        f"""
        INSERT INTO memory_relationships AS r
            (id, agent_id, source_key, target_key, rel_type, strength, evidence_fact_id, valid_from, last_event_id)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $10)
        ON CONFLICT (agent_id, source_key, target_key, rel_type) WHERE invalidated_at IS NULL DO UPDATE
        SET strength = CASE WHEN r.last_event_id = $10 THEN r.strength ELSE least(1.0, r.strength + $9) END,
            mention_count = r.mention_count + CASE WHEN r.last_event_id = $10 THEN 0 ELSE 1 END,
            evidence_fact_id = coalesce(excluded.evidence_fact_id, r.evidence_fact_id),
            last_event_id = excluded.last_event_id,
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
        event_id,
    )
    return relationship_from_record(row)


# --- locks ---------------------------------------------------------------------------------------------------


async def lock_names(conn: Connection, agent_id: str, names: Sequence[str]) -> int:
    """Take this transaction's advisory lock on each (agent, name), in one global order; return how many.
    (The write path passes advisory_lock_ids to Database.tenant instead: the same locks, no statement of their own.)
    """
    ids = advisory_lock_ids(agent_id, names)
    if ids:
        await conn.execute(LOCK_IDS_SQL, ids)
    return len(ids)


def advisory_lock_ids(agent_id: str, names: Sequence[str]) -> list[int]:
    """The lock ids of (agent, name) for each name, in the one global order every transaction takes them in.

    Writes that touch the same entity of the same agent queue on them for the length of their apply transaction;
    the ids are sorted, so two writes locking overlapping sets never deadlock, and other agents never wait.
    """
    return sorted({advisory_lock_id(agent_id, name) for name in names})


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
