"""The current facts a new fact (or a message) is compared with: nearest by embedding, right at any size.

One batched statement serves every subject of a write. Per subject it counts the current facts up to
EXACT_SCAN_MAX_FACTS; below that it ranks them exactly (an exact scan of a few hundred vectors costs a few ms and
cannot miss). The larger subjects are searched through the facts' HNSW index (current facts only, half precision:
migration 0008) in one more statement, with pgvector's iterative scan and a candidate list of 1000, so the agent and
subject filters cannot starve the index scan, and re-ranked by full-precision distance; if the index still returns
fewer rows than asked for, that subject falls back to the exact scan. Plans are always custom (plan_cache_mode), so
a prepared statement never switches to a generic plan that sorts a whole subject or filters an index scan to
nothing."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from pgvector import Vector

from memory_sdk.store.database import Connection

__all__ = [
    "EXACT_SCAN_MAX_FACTS",
    "CandidateProbe",
    "StoredCandidate",
    "current_facts_with_identity",
    "hnsw_order",
    "nearest_current_facts",
    "open_single_valued_facts",
]

# Subjects with fewer current facts are ranked exactly. Measured here (1536 dimensions): an exact scan costs about
# 25 µs per fact, so the exact path stays under ~12 ms; above it the HNSW scan costs 3-25 ms whatever the size.
EXACT_SCAN_MAX_FACTS = 500
_NO_CAP = 2**31 - 1


@dataclass(frozen=True)
class CandidateProbe:
    """Nearest current facts of `entity_key` to `embedding` (most recent first when there is no embedding); a
    current fact with `identity_key` (the same text but for case, accents and punctuation) is always among them.
    `limit` is this probe's own top-k (None: the call's)."""

    entity_key: str
    embedding: list[float] | None
    identity_key: str | None = None
    limit: int | None = None


@dataclass(frozen=True)
class StoredCandidate:
    """A current fact as the pipeline compares it: no vector, a similarity to the probe (None without one)."""

    id: UUID
    entity_key: str
    text: str
    attribute: str | None
    single_valued: bool
    valid_from: datetime
    similarity: float | None
    source_context: str
    confidence: float


_COLUMNS = "f.id, f.entity_key, f.fact_text, f.attribute, f.single_valued, f.valid_from, f.source_context, f.confidence"
_CURRENT = "f.agent_id = $1 AND f.valid_to IS NULL AND f.invalidated_at IS NULL"

# Rows taken from the index per subject before the exact re-rank: the first rows of a relaxed-order scan are not
# exactly the nearest; 40 of them hold the true top 5 where 5 alone missed planted near-duplicates at 100k facts.
HNSW_OVERFETCH = 40
# The HNSW statement is planned and run with these (transaction-local) settings:
# - enable_sort off: else the planner sorts a subject of a few thousand facts by distance (137 ms measured for
#   5,786 facts) instead of walking the index (26 ms); it does not price 1536-dimensional distances;
# - a candidate list of 1000, pgvector's maximum (the connection's default is 100): a near-duplicate in a
#   60,000-fact subject is missed by the graph walk, not by the re-rank, and the widest walk misses it least.
#   Measured over six index builds at 100,000 facts, e5 and HashEmbedder vectors (benchmarks/recall.py,
#   docs/benchmarks.md): top-5 agreement with the exact ranking 0.63-0.79 against 0.56-0.73 at 400, never lower
#   in any build; it costs +6-20 ms a search (p50 ~25 ms against ~19 under load). It does not reach 1.0: the graph
#   loses a near-duplicate (an unfiltered walk misses as much), by an amount that varies from build to build.
# - iterative scans may visit 50,000 tuples in up to 8 x work_mem (defaults 20,000 and 1 x): 1536-dimensional
#   candidates fill 4 MB after a few hundred tuples, and an exhausted scan returns what it has.
# The exact statement, which runs first, sets them as a side effect (one round trip fewer than a SET of their
# own), and nothing resets them: they hold to the end of the transaction, and the write path's read transactions
# end with the candidate read. (In a dry run, whose stages are savepoints of one transaction, they hold in the
# later stages too; those run no statement whose plan a sort or an HNSW scan could change.)
HNSW_FACT_EF_SEARCH = 1000
_INDEX_SETTINGS = (
    "SELECT set_config('enable_sort', 'off', true), "
    f"set_config('hnsw.ef_search', '{HNSW_FACT_EF_SEARCH}', true), "
    "set_config('hnsw.max_scan_tuples', '50000', true), set_config('hnsw.scan_mem_multiplier', '8', true)"
)

# Per probe: the subject's current facts counted up to the cap ($4), and, only when fewer (a one-time filter, so
# a large subject costs the count alone), the exact top k (the probe's own, p.k). OFFSET 0 fences the ranking from
# the HNSW index. The settings CTE is materialized and joined, so it runs once, and before any HNSW statement of
# this transaction is planned.
_EXACT_SQL = f"""
    WITH index_settings AS MATERIALIZED ({_INDEX_SETTINGS})
    SELECT p.ord, cnt.n, c.id, c.entity_key, c.fact_text, c.attribute, c.single_valued, c.valid_from,
           c.source_context, c.confidence, 1 - c.distance AS similarity
    FROM index_settings
    CROSS JOIN unnest($2::text[], $3::vector[], $5::int[]) WITH ORDINALITY AS p(entity_key, vec, k, ord)
    CROSS JOIN LATERAL (
        SELECT count(*) AS n FROM (
            SELECT 1 FROM memory_facts f WHERE {_CURRENT} AND f.entity_key = p.entity_key LIMIT $4
        ) capped
    ) cnt
    LEFT JOIN LATERAL (
        SELECT d.* FROM (
            SELECT {_COLUMNS}, f.recorded_at, f.embedding <=> p.vec AS distance
            FROM memory_facts f
            WHERE cnt.n < $4 AND {_CURRENT} AND f.entity_key = p.entity_key
            OFFSET 0
        ) d
        ORDER BY d.distance, d.recorded_at DESC
        LIMIT p.k
    ) c ON true
    ORDER BY p.ord, c.distance, c.recorded_at DESC
    """  # noqa: S608 - assembled from this module's constants only


@functools.cache
def hnsw_order(dim: int, query: str) -> str:
    """The ORDER BY expression the facts' HNSW index serves (migration 0008): half-precision cosine distance.
    It must match the index expression exactly, vector size included, or the planner cannot use the index."""
    return f"f.embedding::halfvec({dim}) <=> {query}::halfvec({dim})"


@functools.cache
def _hnsw_sql(dim: int) -> str:
    """Every large subject's probe in one statement: per probe, the index returns $5 rows in relaxed (approximate,
    half-precision) order; they are re-ranked by their full-precision distance, with the subject's fact of the same
    identity key if it has one, and the probe's best k kept. The WHERE implies the index's predicate (current
    facts), and the index scan is a parameterised one, rescanned with each probe's vector."""
    return f"""
    SELECT p.ord, c.*, 1 - c.distance AS similarity
    FROM unnest($2::text[], $3::vector[], $4::text[], $6::int[])
        WITH ORDINALITY AS p(entity_key, vec, identity_key, k, ord)
    CROSS JOIN LATERAL (
        SELECT u.* FROM (
            (SELECT {_COLUMNS}, f.embedding <=> p.vec AS distance
             FROM memory_facts f
             WHERE {_CURRENT} AND f.entity_key = p.entity_key
             ORDER BY {hnsw_order(dim, "p.vec")}
             LIMIT $5)
            UNION
            (SELECT {_COLUMNS}, f.embedding <=> p.vec AS distance
             FROM memory_facts f
             WHERE {_CURRENT} AND f.entity_key = p.entity_key AND f.identity_key = p.identity_key)
        ) u
        ORDER BY u.distance
        LIMIT p.k
    ) c
    ORDER BY p.ord, c.distance
    """  # noqa: S608 - assembled from this module's constants only


async def nearest_current_facts(
    conn: Connection,
    agent_id: str,
    probes: Sequence[CandidateProbe],
    limit: int,
    *,
    exact_below: int = EXACT_SCAN_MAX_FACTS,
) -> list[list[StoredCandidate]]:
    """For each probe, up to its limit (else `limit`) current facts of its subject, most similar first: exact
    top-k for subjects under `exact_below` current facts, HNSW iterative scan above (one statement for all)."""
    limits = [limit if probe.limit is None else probe.limit for probe in probes]
    if not probes or max(limits) <= 0:
        return [[] for _ in probes]
    found, large = await _exact(conn, agent_id, probes, limits, exact_below)
    fallback = [index for index in large if probes[index].embedding is None]
    searched = [index for index in large if probes[index].embedding is not None and limits[index] > 0]
    if searched:
        rows = await conn.fetch(
            _hnsw_sql(len(probes[searched[0]].embedding or [])),
            agent_id,
            [probes[i].entity_key for i in searched],
            [Vector(probes[i].embedding or []) for i in searched],
            [probes[i].identity_key for i in searched],
            max(HNSW_OVERFETCH, *(limits[i] for i in searched)),
            [limits[i] for i in searched],
        )
        for row in rows:
            found[searched[int(row["ord"]) - 1]].append(_candidate(row))
        # The index scan gave up before finding enough: rank that subject exactly.
        fallback += [index for index in searched if len(found[index]) < limits[index]]
    if fallback:
        fallback.sort()
        exact, _ = await _exact(conn, agent_id, [probes[i] for i in fallback], [limits[i] for i in fallback], _NO_CAP)
        for index, rows_ in zip(fallback, exact, strict=True):
            found[index] = rows_
    return found


async def _exact(
    conn: Connection, agent_id: str, probes: Sequence[CandidateProbe], limits: Sequence[int], cap: int
) -> tuple[list[list[StoredCandidate]], list[int]]:
    """Exact top-k for subjects with fewer than `cap` current facts; the indexes of the larger ones."""
    rows = await conn.fetch(
        _EXACT_SQL,
        agent_id,
        [p.entity_key for p in probes],
        [None if p.embedding is None else Vector(p.embedding) for p in probes],
        cap,
        list(limits),
    )
    found: list[list[StoredCandidate]] = [[] for _ in probes]
    large: set[int] = set()
    for row in rows:
        index = int(row["ord"]) - 1
        if row["n"] >= cap:
            large.add(index)
        elif row["id"] is not None:
            found[index].append(_candidate(row))
    return found, sorted(large)


def _candidate(row: Any, similarity: float | None = None) -> StoredCandidate:
    if similarity is None and "similarity" in row:
        similarity = row["similarity"]
    return StoredCandidate(
        id=row["id"],
        entity_key=row["entity_key"],
        text=row["fact_text"],
        attribute=row["attribute"],
        single_valued=row["single_valued"],
        valid_from=row["valid_from"],
        source_context=row["source_context"],
        confidence=row["confidence"],
        similarity=None if similarity is None or math.isnan(similarity) else float(similarity),
    )


async def open_single_valued_facts(
    conn: Connection, agent_id: str, pairs: Sequence[tuple[str, str]]
) -> dict[tuple[str, str], tuple[StoredCandidate, list[float] | None]]:
    """The open fact of each (subject, single-valued attribute) pair that has one, with its embedding."""
    if not pairs:
        return {}
    unique = list(dict.fromkeys(pairs))
    rows = await conn.fetch(
        f"""
        SELECT {_COLUMNS}, f.embedding
        FROM unnest($2::text[], $3::text[]) AS p(entity_key, attribute)
        JOIN memory_facts f ON f.entity_key = p.entity_key AND f.attribute = p.attribute
        WHERE {_CURRENT} AND f.single_valued
        """,  # noqa: S608 - assembled from this module's constants only
        agent_id,
        [key for key, _attribute in unique],
        [attribute for _key, attribute in unique],
    )
    return {
        (row["entity_key"], row["attribute"]): (
            _candidate(row),
            None if row["embedding"] is None else row["embedding"].to_list(),
        )
        for row in rows
    }


async def current_facts_with_identity(
    conn: Connection, agent_id: str, pairs: Sequence[tuple[str, str]]
) -> dict[tuple[str, str], UUID]:
    """The current fact of each (subject, identity key) pair that has one: the apply-time duplicate re-check."""
    if not pairs:
        return {}
    unique = list(dict.fromkeys(pairs))
    rows = await conn.fetch(
        f"""
        SELECT f.id, f.entity_key, f.identity_key
        FROM unnest($2::text[], $3::text[]) AS p(entity_key, identity_key)
        JOIN memory_facts f ON f.entity_key = p.entity_key AND f.identity_key = p.identity_key
        WHERE {_CURRENT}
        """,  # noqa: S608 - assembled from this module's constants only
        agent_id,
        [key for key, _identity in unique],
        [identity for _key, identity in unique],
    )
    return {(row["entity_key"], row["identity_key"]): row["id"] for row in rows}
