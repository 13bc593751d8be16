"""The integrity check of one agent's memory: `MemoryClient.check(agent_id)` and `memory-sdk check AGENT`.

Damage reads as an emptier memory, not as an error: a table file cut short reads as 0 rows, a lost index returns
nothing, rows deleted behind the foreign keys' back leave facts that name nothing. The check looks for each kind,
in the order of CHECKS:

- `edges`: every current relationship stands on a current evidence fact (the pipeline never stores one without);
- `open_values`: a single-valued attribute of a subject has at most one open value;
- `fact_events`: every fact's source event is in the event log;
- `run_events`: every pipeline run's event is in the event log;
- `counts`: the agent's rows of each table counted by a sequential scan and through an index agree (a truncated
  table file reads as empty while its indexes still list the rows; a truncated index fails to read);
- `vector_index`: the facts' HNSW index finds the agent's indexed current facts (search walks it; an emptied
  index would leave search to its exact fallback without a word);
- `amcheck`: PostgreSQL's own structural check of the SDK's btree indexes (`bt_index_check`), where the server has
  the extension; the embedded server ships without PostgreSQL's contrib modules, so there it is a note, not a check.

It only reads: the first six run in one REPEATABLE READ, READ ONLY transaction (one snapshot: a write committing
meanwhile cannot make two counts differ), each in a savepoint rolled back after it (its planner settings go with
it); amcheck runs in a transaction that is always rolled back, so enabling the extension leaves nothing behind. A
check that the database fails with an error (damage often shows as "could not read block") reports that error as
its problem; a database that cannot be reached raises DatabaseUnavailable as every read does.

Cost: `counts` reads each table once whole (all agents' rows: a sequential scan cannot read one agent's alone) and
amcheck each btree index once; the rest reads the agent's rows through indexes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, computed_field
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession

from memory_sdk.store import tables as t
from memory_sdk.store.database import Database, error_reason, is_unavailable
from memory_sdk.store.search import hnsw_order

__all__ = ["CHECKS", "IntegrityProblem", "IntegrityReport", "check_integrity"]

# Offending rows described one by one per check; past this, one more problem says how many others there are.
SHOWN_PER_CHECK = 20
# The HNSW probe asks for up to this many of the agent's facts (an approximate index owes no exact number back:
# finding none of them is the damage, finding fewer is not).
_VECTOR_PROBE_ROWS = 40
# Tables holding the agent's rows, each counted both ways by `counts`.
_AGENT_TABLES = tuple(
    table.name
    for table in (t.events, t.pipeline_runs, t.entities, t.aliases, t.facts, t.fact_entities, t.relationships)
)
_CURRENT = "valid_to IS NULL AND invalidated_at IS NULL"


class IntegrityProblem(BaseModel):
    """One thing found wrong: which check found it, and what (rows named by id)."""

    model_config = ConfigDict(frozen=True)

    check: str
    detail: str

    def __str__(self) -> str:
        return f"{self.check}: {self.detail}"


class IntegrityReport(BaseModel):
    """What `MemoryClient.check` found: `ok` when no check found a problem.

    `rows` is the agent's row count per table (read by sequential scan); `notes` says what could not be checked
    and why (no amcheck on this server, no index to compare with).
    """

    model_config = ConfigDict(frozen=True)

    agent_id: str
    problems: list[IntegrityProblem] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    rows: dict[str, int] = Field(default_factory=dict)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def ok(self) -> bool:
        return not self.problems


class _Found:
    """What the checks collect as they run: problems, notes, row counts."""

    def __init__(self) -> None:
        self.problems: list[IntegrityProblem] = []
        self.notes: list[str] = []
        self.rows: dict[str, int] = {}


Check = Callable[[AsyncSession, str, _Found], Awaitable[list[str]]]


async def check_integrity(database: Database, agent_id: str) -> IntegrityReport:
    """Run every check on `agent_id`'s memory (validated by the caller) and report what they found."""
    found = _Found()
    params = {"agent_id": agent_id}
    async with database.transaction() as session:
        await session.execute(text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"))
        # Without the tenant role (a superuser sees every row; the queries filter on agent_id themselves), with the
        # tenant setting anyway so that row-level security shows the agent's rows to any other user.
        await session.execute(text("SELECT set_config('memory_sdk.agent_id', :agent_id, true)"), params)
        for name, check in CHECKS:
            found.problems += _problems(name, await _isolated(session, check, agent_id, found))
    found.problems += _problems("amcheck", await _amcheck(database, found))
    return IntegrityReport(agent_id=agent_id, problems=found.problems, notes=found.notes, rows=found.rows)


async def _isolated(session: AsyncSession, check: Check, subject: str, found: _Found) -> list[str]:
    """Run one check in a savepoint that is rolled back after it (its SET LOCALs with it); a database error is
    the check's finding, unless the database is gone."""
    savepoint = await session.begin_nested()
    try:
        return await check(session, subject, found)
    except SQLAlchemyError as exc:
        if is_unavailable(exc):
            raise
        return [f"the check failed with a database error: {error_reason(exc)}"]
    finally:
        await savepoint.rollback()


def _problems(check: str, details: list[str]) -> list[IntegrityProblem]:
    shown = [IntegrityProblem(check=check, detail=detail) for detail in details[:SHOWN_PER_CHECK]]
    if len(details) > SHOWN_PER_CHECK:
        shown.append(IntegrityProblem(check=check, detail=f"... and {len(details) - SHOWN_PER_CHECK} more"))
    return shown


async def _rows(session: AsyncSession, sql: str, agent_id: str, **params: Any) -> list[Any]:
    return list((await session.execute(text(sql), {"agent_id": agent_id, **params})).all())


# -- the memory's own invariants ----------------------------------------------------------------------------

# A current edge with no evidence at all is damage too: every edge the pipeline stores has a fact of its write
# behind it (an extracted one, or the mirror fact it plans for an edge no fact supports).
_EDGES_WITHOUT_CURRENT_EVIDENCE = """
    SELECT r.id, r.source_key, r.rel_type, r.target_key, r.evidence_fact_id, f.id AS fact_id
    FROM memory_relationships r
    LEFT JOIN memory_facts f ON f.id = r.evidence_fact_id AND f.agent_id = r.agent_id
    WHERE r.agent_id = :agent_id AND r.invalidated_at IS NULL AND r.valid_to IS NULL
      AND (f.id IS NULL OR NOT (f.valid_to IS NULL AND f.invalidated_at IS NULL))
    ORDER BY r.source_key, r.rel_type, r.target_key
"""

_SEVERAL_OPEN_VALUES = f"""
    SELECT entity_key, attribute, array_agg(id::text ORDER BY valid_from, recorded_at) AS ids
    FROM memory_facts
    WHERE agent_id = :agent_id AND single_valued AND attribute IS NOT NULL AND {_CURRENT}
    GROUP BY entity_key, attribute
    HAVING count(*) > 1
    ORDER BY entity_key, attribute
"""  # noqa: S608 - constants only

_FACTS_WITHOUT_SOURCE_EVENT = """
    SELECT f.id, f.entity_key, f.source_event_id
    FROM memory_facts f
    WHERE f.agent_id = :agent_id AND f.source_event_id IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM memory_events e WHERE e.id = f.source_event_id AND e.agent_id = f.agent_id)
    ORDER BY f.recorded_at, f.id
"""

_RUNS_WITHOUT_EVENT = """
    SELECT r.id, r.event_id, r.status
    FROM memory_pipeline_runs r
    WHERE r.agent_id = :agent_id AND r.event_id IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM memory_events e WHERE e.id = r.event_id AND e.agent_id = r.agent_id)
    ORDER BY r.started_at, r.id
"""


async def _edges(session: AsyncSession, agent_id: str, found: _Found) -> list[str]:
    return [
        f"current edge {row.source_key} -{row.rel_type}-> {row.target_key} ({row.id}) stands on "
        + ("no evidence fact" if row.evidence_fact_id is None else f"evidence fact {row.evidence_fact_id}, ")
        + ("" if row.evidence_fact_id is None else "which is missing" if row.fact_id is None else "which is closed")
        for row in await _rows(session, _EDGES_WITHOUT_CURRENT_EVIDENCE, agent_id)
    ]


async def _open_values(session: AsyncSession, agent_id: str, found: _Found) -> list[str]:
    return [
        f"{row.entity_key}.{row.attribute} has {len(row.ids)} open values (facts {', '.join(row.ids)})"
        for row in await _rows(session, _SEVERAL_OPEN_VALUES, agent_id)
    ]


async def _fact_events(session: AsyncSession, agent_id: str, found: _Found) -> list[str]:
    return [
        f"fact {row.id} ({row.entity_key}) names source event {row.source_event_id}, which is not in the event log"
        for row in await _rows(session, _FACTS_WITHOUT_SOURCE_EVENT, agent_id)
    ]


async def _run_events(session: AsyncSession, agent_id: str, found: _Found) -> list[str]:
    return [
        f"pipeline run {row.id} ({row.status}) names event {row.event_id}, which is not in the event log"
        for row in await _rows(session, _RUNS_WITHOUT_EVENT, agent_id)
    ]


# -- the tables against their indexes -----------------------------------------------------------------------

_SEQUENTIAL_ONLY = (
    "SELECT set_config('enable_indexscan', 'off', true), set_config('enable_indexonlyscan', 'off', true), "
    "set_config('enable_bitmapscan', 'off', true)"
)
# Index and index-only scans only: a bitmap heap scan skips the index's entries past the end of a truncated table
# without a word, where an index scan fails to read them (and an index-only scan counts them from the index).
_INDEX_ONLY = (
    "SELECT set_config('enable_indexscan', 'on', true), set_config('enable_indexonlyscan', 'on', true), "
    "set_config('enable_bitmapscan', 'off', true), set_config('enable_seqscan', 'off', true)"
)


async def _counts(session: AsyncSession, agent_id: str, found: _Found) -> list[str]:
    details: list[str] = []
    for table in _AGENT_TABLES:
        details += await _isolated(session, _count_both_ways, f"{table} {agent_id}", found)
    return details


async def _count_both_ways(session: AsyncSession, subject: str, found: _Found) -> list[str]:
    """`subject` is "<table> <agent id>": the agent's rows of that table by sequential scan, then by index."""
    table, agent_id = subject.split(" ", 1)
    count = f"SELECT count(*) FROM {table} WHERE agent_id = :agent_id"  # noqa: S608 - a constant table name
    await session.execute(text(_SEQUENTIAL_ONLY))
    try:  # planning reads every btree index's metapage: a lost index fails even the sequential count
        scanned = int((await session.execute(text(count), {"agent_id": agent_id})).scalar_one())
    except SQLAlchemyError as exc:
        if is_unavailable(exc):
            raise
        return [f"{table}: counting the agent's rows failed: {error_reason(exc)}"]
    found.rows[table.removeprefix("memory_")] = scanned
    await session.execute(text(_INDEX_ONLY))
    plan = "\n".join(row[0] for row in await _rows(session, f"EXPLAIN {count}", agent_id))
    if "Index" not in plan:
        found.notes.append(f"counts: no index of {table} leads with agent_id; its rows were not compared")
        return []
    try:
        indexed = int((await session.execute(text(count), {"agent_id": agent_id})).scalar_one())
    except SQLAlchemyError as exc:
        if is_unavailable(exc):
            raise
        return [f"{table}: reading the agent's {scanned} rows through its index failed: {error_reason(exc)}"]
    if indexed == scanned:
        return []
    return [
        f"{table}: {scanned} rows of the agent read from the table, {indexed} through its index "
        "(a table or index file cut short or lost)"
    ]


# The rows the facts' HNSW index holds (its predicate, migration 0012), of the agent.
_IN_HNSW = (
    "f.agent_id = :agent_id AND f.valid_to IS NULL AND f.invalidated_at IS NULL AND f.indexed "
    "AND f.embedding IS NOT NULL"
)
_VECTOR_EXPECTED = f"SELECT count(*) FROM memory_facts f WHERE {_IN_HNSW}"  # noqa: S608 - constants only
_VECTOR_PROBE = f"SELECT f.embedding::text, vector_dims(f.embedding) FROM memory_facts f WHERE {_IN_HNSW} LIMIT 1"  # noqa: S608
# {order} is search.hnsw_order for the vectors' size: the index's own expression, or the planner cannot walk it.
_VECTOR_WALK = (
    f"SELECT count(*) FROM (SELECT f.id FROM memory_facts f WHERE {_IN_HNSW} "  # noqa: S608 - constants only
    "ORDER BY {order} LIMIT " + str(_VECTOR_PROBE_ROWS) + ") walked"
)


async def _vector_index(session: AsyncSession, agent_id: str, found: _Found) -> list[str]:
    indexes = await _rows(
        session,
        "SELECT indexname FROM pg_indexes WHERE tablename = 'memory_facts' AND schemaname = current_schema() "
        "AND indexdef LIKE '%USING hnsw%'",
        agent_id,
    )
    if not indexes:
        found.notes.append("vector_index: memory_facts has no HNSW index to check")
        return []
    in_index = int((await _rows(session, _VECTOR_EXPECTED, agent_id))[0][0])
    if in_index == 0:
        return []
    probe, dim = (await _rows(session, _VECTOR_PROBE, agent_id))[0]
    walk = _VECTOR_WALK.format(order=hnsw_order(int(dim), "CAST(CAST(:probe AS text) AS vector)"))
    # The walk as search makes it (store/search.py): the index's order, an iterative scan past other agents' facts.
    await session.execute(
        text(
            "SELECT set_config('enable_seqscan', 'off', true), set_config('enable_sort', 'off', true), "
            "set_config('hnsw.iterative_scan', 'relaxed_order', true), "
            "set_config('hnsw.max_scan_tuples', '50000', true)"
        )
    )
    plan = "\n".join(row[0] for row in await _rows(session, f"EXPLAIN {walk}", agent_id, probe=probe))
    names = [row.indexname for row in indexes]
    if not any(name in plan for name in names):
        found.notes.append(f"vector_index: the planner would not walk {', '.join(names)}; not compared")
        return []
    walked = (await session.execute(text(walk), {"agent_id": agent_id, "probe": probe})).scalar_one()
    if walked == 0:
        return [
            f"the facts' HNSW index ({', '.join(names)}) finds none of the agent's {in_index} indexed current facts, "
            "not even the one whose vector it was asked for (an emptied or cut-short index)"
        ]
    return []


CHECKS: tuple[tuple[str, Check], ...] = (
    ("edges", _edges),
    ("open_values", _open_values),
    ("fact_events", _fact_events),
    ("run_events", _run_events),
    ("counts", _counts),
    ("vector_index", _vector_index),
)


# -- PostgreSQL's own check -----------------------------------------------------------------------------------

_BTREE_INDEXES = """
    SELECT c.relname AS name
    FROM pg_index i
    JOIN pg_class c ON c.oid = i.indexrelid
    JOIN pg_class tbl ON tbl.oid = i.indrelid
    JOIN pg_am am ON am.oid = c.relam
    WHERE am.amname = 'btree' AND i.indisvalid AND tbl.relname LIKE 'memory\\_%'
      AND tbl.relnamespace = current_schema()::regnamespace
    ORDER BY c.relname
"""


class _RollBack(Exception):
    """Ends amcheck's transaction with a rollback: CREATE EXTENSION, if it ran, is undone."""


async def _amcheck(database: Database, found: _Found) -> list[str]:
    """bt_index_check on every btree index of the SDK's tables (structure only: heapallindexed would read each
    table once per index; `counts` compares the rows). A note instead when the server has no amcheck or this
    user may not use it."""
    details: list[str] = []
    try:
        async with database.transaction() as session:
            available = (
                await session.execute(
                    text("SELECT installed_version FROM pg_available_extensions WHERE name = 'amcheck'")
                )
            ).first()
            if available is None:
                found.notes.append(
                    "amcheck: this server does not have PostgreSQL's amcheck extension (the embedded one ships "
                    "without contrib); btree indexes were checked through `counts` only"
                )
                return []
            if available.installed_version is None:
                refused = await _create_amcheck(session)
                if refused is not None:
                    found.notes.append(f"amcheck: could not be enabled here ({refused}); not run")
                    return []
            for row in (await session.execute(text(_BTREE_INDEXES))).all():
                details += [
                    f"btree index {row.name}: {detail}"
                    for detail in await _isolated(session, _bt_index_check, row.name, found)
                ]
            if any("permission denied" in detail for detail in details):
                found.notes.append("amcheck: this database user may not run bt_index_check; not run")
                details = []
            raise _RollBack
    except _RollBack:
        pass
    return details


async def _create_amcheck(session: AsyncSession) -> str | None:
    """CREATE EXTENSION amcheck in a savepoint kept (the caller's transaction is rolled back in the end); why not,
    if it was refused (not a superuser, say)."""
    savepoint = await session.begin_nested()
    try:
        await session.execute(text("CREATE EXTENSION amcheck"))
    except SQLAlchemyError as exc:
        await savepoint.rollback()
        if is_unavailable(exc):
            raise
        return error_reason(exc)
    await savepoint.commit()
    return None


async def _bt_index_check(session: AsyncSession, name: str, found: _Found) -> list[str]:
    await session.execute(text("SELECT bt_index_check(CAST(:name AS regclass), false)"), {"name": name})
    return []
