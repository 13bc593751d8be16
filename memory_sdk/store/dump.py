"""An agent's rows, table by table, as they are stored: read out for an export, inserted back by a restore.

Like store/queries.py: fixed SQL on a tenant transaction's asyncpg connection, never a commit, every statement
filtered on (or writing) agent_id. Column lists come from store/tables.py, so a column a migration adds and
tables.py describes is exported and restored with no change here. Vectors are neither read nor shipped: a
restore recomputes them with its own embedder (docs/import-export.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from uuid import UUID

from sqlalchemy import Table
from sqlalchemy.dialects.postgresql import JSONB

from memory_sdk.store import tables as t
from memory_sdk.store.database import Connection
from memory_sdk.store.queries import _jsonb, vector_param
from memory_sdk.store.tables import Vector

__all__ = [
    "BOOKKEEPING",
    "DUMPED_TABLES",
    "agent_has_rows",
    "dumped_columns",
    "insert_rows",
    "read_rows",
    "set_entity_versions",
    "set_fact_links",
]

# Every table of an agent's memory, parents first (the order a restore inserts them in), with the order its rows
# are read in: stable across databases (times and names, not random ids) so two exports of one memory compare.
DUMPED_TABLES: dict[str, tuple[Table, str]] = {
    "events": (t.events, "occurred_at, recorded_at, id"),
    "pipeline_runs": (t.pipeline_runs, "started_at, id"),
    "entities": (t.entities, "entity_key"),
    "aliases": (t.aliases, "alias_norm"),
    "facts": (t.facts, "entity_key, valid_from, recorded_at, id"),
    "fact_entities": (t.fact_entities, "entity_key, fact_id"),
    "relationships": (t.relationships, "source_key, rel_type, target_key, created_at, id"),
}
# Fact columns pointing at other facts: a restore sets them once every fact is in, whatever order facts come in.
FACT_LINKS = ("supersedes_fact_id", "merged_into_fact_id")


# Columns that are the store's bookkeeping, not memory: whether a fact is in the HNSW index yet (migration 0012). A
# restored fact is inserted with the column's default, so it goes into the index as it is inserted.
BOOKKEEPING = frozenset({"indexed"})


def dumped_columns(table: Table) -> list[str]:
    """The columns an export carries: all but the vectors and the bookkeeping."""
    return [column.name for column in table.c if not isinstance(column.type, Vector) and column.name not in BOOKKEEPING]


async def read_rows(conn: Connection, agent_id: str, name: str) -> list[dict[str, Any]]:
    """Every row of the agent in table `name` (a DUMPED_TABLES key), vectors left out, in the table's order."""
    table, order = DUMPED_TABLES[name]
    columns = ", ".join(dumped_columns(table))
    rows = await conn.fetch(
        f"SELECT {columns} FROM {table.name} WHERE agent_id = $1 ORDER BY {order}",  # noqa: S608 - constants
        agent_id,
    )
    return [dict(row) for row in rows]


async def agent_has_rows(conn: Connection, agent_id: str) -> bool:
    """Whether the agent has anything stored (a restore goes into an empty agent only)."""
    found = await conn.fetchval(
        "SELECT EXISTS (SELECT 1 FROM memory_events WHERE agent_id = $1) "
        "OR EXISTS (SELECT 1 FROM memory_entities WHERE agent_id = $1) "
        "OR EXISTS (SELECT 1 FROM memory_agent_embedders WHERE agent_id = $1)",
        agent_id,
    )
    return bool(found)


async def insert_rows(conn: Connection, name: str, rows: Sequence[Mapping[str, Any]]) -> int:
    """Insert rows of table `name` as given (Python values; jsonb as decoded JSON, vectors as lists of floats).

    Every row must have the same keys, columns of the table. Fact rows go in without their links to other facts
    (FACT_LINKS): set them with set_fact_links once all facts are in.
    """
    if not rows:
        return 0
    table, _ = DUMPED_TABLES[name]
    columns = [c for c in rows[0] if not (name == "facts" and c in FACT_LINKS)]
    casts = [_placeholder(table, column, n) for n, column in enumerate(columns, start=1)]
    statement = f"INSERT INTO {table.name} ({', '.join(columns)}) VALUES ({', '.join(casts)})"  # noqa: S608 - table columns
    await conn.executemany(statement, [[_bound(table, column, row[column]) for column in columns] for row in rows])
    return len(rows)


def _placeholder(table: Table, column: str, position: int) -> str:
    return f"${position}::jsonb" if isinstance(table.c[column].type, JSONB) else f"${position}"


def _bound(table: Table, column: str, value: Any) -> Any:
    kind = table.c[column].type
    if isinstance(kind, JSONB):
        return None if value is None else _jsonb(value)
    if isinstance(kind, Vector):
        return vector_param(value)
    return value


async def set_fact_links(
    conn: Connection, agent_id: str, links: Sequence[tuple[UUID, UUID | None, UUID | None]]
) -> None:
    """Set each fact's (supersedes_fact_id, merged_into_fact_id) after a restore inserted them all."""
    await conn.executemany(
        "UPDATE memory_facts SET supersedes_fact_id = $3, merged_into_fact_id = $4 WHERE agent_id = $1 AND id = $2",
        [(agent_id, fact_id, supersedes, merged_into) for fact_id, supersedes, merged_into in links],
    )


async def set_entity_versions(conn: Connection, agent_id: str, versions: Sequence[tuple[str, int, int | None]]) -> None:
    """Put back each entity's (facts_version, profile_facts_version): the fact inserts of a restore bumped them,
    and a profile's staleness is the difference between the two (migration 0006)."""
    await conn.executemany(
        "UPDATE memory_entities SET facts_version = $3, profile_facts_version = $4 "
        "WHERE agent_id = $1 AND entity_key = $2",
        [(agent_id, key, facts_version, profile_version) for key, facts_version, profile_version in versions],
    )
