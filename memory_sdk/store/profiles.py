"""Consolidation's statements: which profiles are stale, an entity's current facts with their vectors, merging
near-duplicate facts, writing a rebuilt profile. Like store/queries.py: fixed SQL on a tenant transaction's asyncpg
connection, never a commit, every statement filtered on agent_id.

Staleness is a version, not a time (migration 0006): `facts_version` counts the entity's fact changes (a trigger
bumps it), `profile_facts_version` is the count the profile was built from. Versions need no clock agreement
between transactions that overlap, and a profile a write seeds after its own facts is not stale because of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from memory_sdk.store.database import Connection

__all__ = [
    "CurrentFact",
    "EntityToConsolidate",
    "FactMerge",
    "current_facts",
    "entities_to_consolidate",
    "merge_facts",
    "stale_profiles",
    "write_profile",
]

_STALE = "e.profile_facts_version IS DISTINCT FROM e.facts_version"
_CURRENT = "f.valid_to IS NULL AND f.invalidated_at IS NULL"


@dataclass(frozen=True)
class EntityToConsolidate:
    key: str
    name: str
    type: str


async def entities_to_consolidate(conn: Connection, agent_id: str, *, only: str | None) -> list[EntityToConsolidate]:
    """Entities whose profile is missing or older than their facts and that have a current fact, in key order;
    with `only`, that entity whatever its profile's age."""
    rows = await conn.fetch(
        f"""
        SELECT e.entity_key, e.display_name, e.entity_type FROM memory_entities e
        WHERE e.agent_id = $1
          AND CASE WHEN $2::text IS NULL
                   THEN {_STALE} AND EXISTS (
                       SELECT 1 FROM memory_facts f
                       WHERE f.agent_id = $1 AND f.entity_key = e.entity_key AND {_CURRENT})
                   ELSE e.entity_key = $2 END
        ORDER BY e.entity_key
        """,  # noqa: S608 - assembled from this module's constants only
        agent_id,
        only,
    )
    return [EntityToConsolidate(r["entity_key"], r["display_name"], r["entity_type"]) for r in rows]


async def stale_profiles(conn: Connection, agent_id: str, keys: Sequence[str]) -> set[str]:
    """The keys among `keys` whose entity has a profile built before its latest fact change."""
    if not keys:
        return set()
    rows = await conn.fetch(
        f"""
        SELECT e.entity_key FROM memory_entities e
        WHERE e.agent_id = $1 AND e.entity_key = ANY($2::text[]) AND e.profile_text IS NOT NULL AND {_STALE}
        """,  # noqa: S608 - assembled from this module's constants only
        agent_id,
        list(keys),
    )
    return {row["entity_key"] for row in rows}


@dataclass(frozen=True)
class CurrentFact:
    """A current fact of the entity as consolidation compares and shows it."""

    id: UUID
    text: str
    attribute: str | None
    confidence: float
    valid_from: datetime
    recorded_at: datetime
    embedding: list[float] | None


async def current_facts(conn: Connection, agent_id: str, entity_key: str) -> tuple[list[CurrentFact], int]:
    """The entity's current facts, oldest first, with their vectors; and its facts_version as read with them."""
    rows = await conn.fetch(
        f"""
        SELECT f.id, f.fact_text, f.attribute, f.confidence, f.valid_from, f.recorded_at, f.embedding,
               e.facts_version
        FROM memory_entities e
        LEFT JOIN memory_facts f ON f.agent_id = e.agent_id AND f.entity_key = e.entity_key AND {_CURRENT}
        WHERE e.agent_id = $1 AND e.entity_key = $2
        ORDER BY f.valid_from, f.recorded_at
        """,  # noqa: S608 - assembled from this module's constants only
        agent_id,
        entity_key,
    )
    facts = [
        CurrentFact(
            r["id"],
            r["fact_text"],
            r["attribute"],
            r["confidence"],
            r["valid_from"],
            r["recorded_at"],
            None if r["embedding"] is None else r["embedding"].to_list(),
        )
        for r in rows
        if r["id"] is not None
    ]
    return facts, int(rows[0]["facts_version"]) if rows else 0


@dataclass(frozen=True)
class FactMerge:
    """Close `fact_id` at `valid_to` as a near-duplicate of `survivor_id`."""

    fact_id: UUID
    survivor_id: UUID
    valid_to: datetime


async def merge_facts(conn: Connection, agent_id: str, merges: Sequence[FactMerge]) -> int:
    """Close each merged fact like a retraction (valid_to, closed_at, invalidated_at) with a pointer to its
    survivor; move the current edges it was evidence for, and its entity links, to the survivor. Returns how many
    facts were closed (a fact no longer current is left alone)."""
    if not merges:
        return 0
    closed = await conn.fetch(
        f"""
        UPDATE memory_facts f
        SET valid_to = m.valid_to, closed_at = clock_timestamp(), invalidated_at = clock_timestamp(),
            merged_into_fact_id = m.survivor_id
        FROM unnest($2::uuid[], $3::uuid[], $4::timestamptz[]) AS m(fact_id, survivor_id, valid_to)
        WHERE f.agent_id = $1 AND f.id = m.fact_id AND {_CURRENT}
        RETURNING f.id
        """,  # noqa: S608 - assembled from this module's constants only
        agent_id,
        [m.fact_id for m in merges],
        [m.survivor_id for m in merges],
        [m.valid_to for m in merges],
    )
    done = {row["id"] for row in closed}
    merged = [m.fact_id for m in merges if m.fact_id in done]
    survivors = [m.survivor_id for m in merges if m.fact_id in done]
    await conn.execute(
        """
        UPDATE memory_relationships r SET evidence_fact_id = m.survivor_id, updated_at = clock_timestamp()
        FROM unnest($2::uuid[], $3::uuid[]) AS m(fact_id, survivor_id)
        WHERE r.agent_id = $1 AND r.evidence_fact_id = m.fact_id AND r.invalidated_at IS NULL AND r.valid_to IS NULL
        """,
        agent_id,
        merged,
        survivors,
    )
    await conn.execute(
        """
        INSERT INTO memory_fact_entities (fact_id, agent_id, entity_key, is_primary)
        SELECT m.survivor_id, $1, l.entity_key, l.is_primary
        FROM unnest($2::uuid[], $3::uuid[]) AS m(fact_id, survivor_id)
        JOIN memory_fact_entities l ON l.agent_id = $1 AND l.fact_id = m.fact_id
        ON CONFLICT DO NOTHING
        """,
        agent_id,
        merged,
        survivors,
    )
    return len(done)


async def write_profile(
    conn: Connection, agent_id: str, entity_key: str, profile_text: str, facts_version: int
) -> int | None:
    """Store a rebuilt profile as built from the facts at `facts_version`; return the entity's facts_version now
    (a larger one: its facts changed while the profile was being built, so it is stale again). None: no entity."""
    version = await conn.fetchval(
        """
        UPDATE memory_entities
        SET profile_text = $3, profile_facts_version = $4, profile_built_at = clock_timestamp(),
            updated_at = clock_timestamp()
        WHERE agent_id = $1 AND entity_key = $2
        RETURNING facts_version
        """,
        agent_id,
        entity_key,
        profile_text,
        facts_version,
    )
    return None if version is None else int(version)
