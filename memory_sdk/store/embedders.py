"""Which embedder an agent's vectors come from, and the statements that replace them (migration 0005).

Like store/queries.py: fixed SQL on a tenant transaction's asyncpg connection, never a commit, every statement
filtered on agent_id.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal
from uuid import UUID

from memory_sdk.store.database import Connection
from memory_sdk.store.queries import vector_param

__all__ = [
    "EMBEDDED_TABLES",
    "EmbeddedTable",
    "RecordedEmbedder",
    "claim_embedder",
    "record_embedder",
    "recorded_embedder",
    "texts_after",
    "update_vectors",
]

EmbeddedTable = Literal["events", "facts", "entities"]
# Each table with a vector: (table, the text its vector is computed from, the vector column). The texts are the
# ones the write path embeds: the message, the fact text, the entity's name.
EMBEDDED_TABLES: dict[EmbeddedTable, tuple[str, str, str]] = {
    "events": ("memory_events", "content", "embedding"),
    "facts": ("memory_facts", "fact_text", "embedding"),
    "entities": ("memory_entities", "display_name", "name_embedding"),
}


@dataclass(frozen=True)
class RecordedEmbedder:
    """The embedder an agent's vectors were computed with, and their size."""

    embedder: str
    dimensions: int


async def recorded_embedder(conn: Connection, agent_id: str) -> RecordedEmbedder | None:
    """The agent's recorded embedder, None before its first write."""
    row = await conn.fetchrow(
        "SELECT embedder, dimensions FROM memory_agent_embedders WHERE agent_id = $1",
        agent_id,
    )
    return None if row is None else RecordedEmbedder(row["embedder"], row["dimensions"])


async def claim_embedder(conn: Connection, agent_id: str, embedder: str, dimensions: int) -> RecordedEmbedder:
    """Record `embedder` for an agent that has none yet; return what is recorded now (this one or an earlier).

    Two statements on purpose: when a concurrent first write recorded another embedder, the insert waits for it
    and does nothing, and only a new statement's snapshot (READ COMMITTED) sees the winner's row.
    """
    await conn.execute(
        "INSERT INTO memory_agent_embedders (agent_id, embedder, dimensions) VALUES ($1, $2, $3) "
        "ON CONFLICT (agent_id) DO NOTHING",
        agent_id,
        embedder,
        dimensions,
    )
    recorded = await recorded_embedder(conn, agent_id)
    if recorded is None:  # only a concurrent forget() between the two statements gets here
        return RecordedEmbedder(embedder, dimensions)
    return recorded


async def record_embedder(conn: Connection, agent_id: str, embedder: str, dimensions: int) -> None:
    """Record `embedder` for the agent, replacing what was recorded (re-embedding)."""
    await conn.execute(
        """
        INSERT INTO memory_agent_embedders (agent_id, embedder, dimensions) VALUES ($1, $2, $3)
        ON CONFLICT (agent_id) DO UPDATE
        SET embedder = excluded.embedder, dimensions = excluded.dimensions, recorded_at = clock_timestamp()
        """,
        agent_id,
        embedder,
        dimensions,
    )


async def texts_after(
    conn: Connection, agent_id: str, table: EmbeddedTable, after: UUID | None, limit: int
) -> list[tuple[UUID, str]]:
    """The next `limit` rows of `table` (by id, after `after`) with the text their vector is computed from."""
    name, text_column, _ = EMBEDDED_TABLES[table]
    rows = await conn.fetch(
        f"SELECT id, {text_column} AS text FROM {name} "  # noqa: S608 - names from EMBEDDED_TABLES
        "WHERE agent_id = $1 AND ($2::uuid IS NULL OR id > $2) ORDER BY id LIMIT $3",
        agent_id,
        after,
        limit,
    )
    return [(row["id"], row["text"]) for row in rows]


async def update_vectors(
    conn: Connection, agent_id: str, table: EmbeddedTable, ids: Sequence[UUID], vectors: Sequence[list[float]]
) -> int:
    """Set the vectors of these rows in one statement (events' content stays immutable: only the vector
    changes); return how many rows were updated."""
    name, _, vector_column = EMBEDDED_TABLES[table]
    status = await conn.execute(
        f"UPDATE {name} AS t SET {vector_column} = v.vec "  # noqa: S608 - names from EMBEDDED_TABLES
        "FROM unnest($2::uuid[], $3::vector[]) AS v(id, vec) WHERE t.agent_id = $1 AND t.id = v.id",
        agent_id,
        list(ids),
        [vector_param(vector) for vector in vectors],
    )
    return int(status.split()[-1])
