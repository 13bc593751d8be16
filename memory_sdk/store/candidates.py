"""The current facts a new fact (or a message) is compared with: nearest by embedding, right at any size.

One statement serves every subject of a write. Per subject it counts the current facts up to EXACT_SCAN_MAX_FACTS;
below that it ranks them exactly (an exact scan of a few hundred vectors costs a few ms and cannot miss). A larger
subject is ranked over the binary codes of its facts' vectors (one bit per dimension, migration 0010), read by an
index-only scan: the BINARY_SHORTLIST facts nearest by Hamming distance, with the fact of the probe's identity key,
are re-ranked by full-precision distance. The facts' HNSW index (migration 0008) is not used here: at 100,000 facts
its walk missed planted near-duplicates in a 60,000-fact subject however it was searched (0.55-0.79 of the exact
top 5 with e5 geometry, and as much without any filter: the graph's misses, not the filters'), while the codes'
shortlist found every planted target, with 0.90-0.94 of the exact top 5 (docs/benchmarks.md, "Exact ranking of
large subjects over binary codes"); it reads every code of the subject, one scan per probe. Plans are
always custom (plan_cache_mode), so a prepared statement is planned for each subject's size and vector and never
switches to a generic plan."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from pgvector import Vector

from memory_sdk.store.database import Connection

__all__ = [
    "BINARY_SHORTLIST",
    "EXACT_SCAN_MAX_FACTS",
    "CandidateProbe",
    "StoredCandidate",
    "current_facts_with_identity",
    "nearest_current_facts",
    "open_single_valued_facts",
]

# Subjects with fewer current facts are ranked exactly. Measured here (1536 dimensions): an exact scan costs about
# 25 µs per fact, so the exact path stays under ~12 ms; above it the codes' shortlist reads every current fact's
# 192-byte code and only BINARY_SHORTLIST vectors.
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
_CURRENT_CODE = _CURRENT.replace("f.", "s.")

# Facts of a large subject taken by Hamming distance of their binary codes (migration 0010) before the exact
# re-rank by full-precision distance. Measured at 100,000 facts, a 60,000-fact subject, 240 probes
# (benchmarks/recall.py, docs/benchmarks.md "Exact ranking of large subjects over binary codes"): with e5 geometry
# every probe's target (near-duplicate, rewording, translation, update) was found at 200-1600 (at 100 one
# paraphrase's was not), and agreement with the exact top 5 grows with the list: 0.88 / 0.92 / 0.94 / 0.95 / 0.97
# at 100 / 200 / 400 / 800 / 1600 (HashEmbedder: 0.85 / 0.87 / 0.90 / 0.92 at 100-800). Each shortlisted fact
# costs a vector read (~25 µs).
BINARY_SHORTLIST = 400

# Per probe: the subject's current facts counted up to the cap ($5), then one of two rankings, each behind a
# one-time filter on that count, so only one runs:
# - under the cap, every current fact ranked by full-precision distance (exact);
# - from the cap on, the $7 facts nearest by Hamming distance of their codes, read by an index-only scan of
#   ix_memory_facts_current_bits (no TOAST; no heap either once vacuum has marked the pages all-visible), with the
#   current fact of the probe's identity key; then those ids are fetched through the primary key and ranked by
#   full-precision distance; the probe's best k (p.k) kept.
# The probes' codes are computed once each in the materialized CTE (a lateral reference to an expression would be
# evaluated again for every fact scanned). OFFSET 0 fences each ranking, so the planner orders the distance it
# is given rather than look for an index that serves it. A probe without a vector gets no code: under the cap its
# subject comes most recent first; from the cap on it gets nothing here and nearest_current_facts ranks it with no
# cap.
_READ_SQL = f"""
    WITH p AS MATERIALIZED (
        SELECT u.*, binary_quantize(u.vec) AS code
        FROM unnest($2::text[], $3::vector[], $4::text[], $6::int[])
            WITH ORDINALITY AS u(entity_key, vec, identity_key, k, ord)
    )
    SELECT p.ord, cnt.n, c.id, c.entity_key, c.fact_text, c.attribute, c.single_valued, c.valid_from,
           c.source_context, c.confidence, 1 - c.distance AS similarity
    FROM p
    CROSS JOIN LATERAL (
        SELECT count(*) AS n FROM (
            SELECT 1 FROM memory_facts f WHERE {_CURRENT} AND f.entity_key = p.entity_key LIMIT $5
        ) capped
    ) cnt
    LEFT JOIN LATERAL (
        SELECT d.* FROM (
            SELECT {_COLUMNS}, f.recorded_at, f.embedding <=> p.vec AS distance
            FROM memory_facts f
            WHERE cnt.n < $5 AND {_CURRENT} AND f.entity_key = p.entity_key
            UNION ALL
            SELECT {_COLUMNS}, f.recorded_at, f.embedding <=> p.vec AS distance
            FROM memory_facts f
            WHERE cnt.n >= $5 AND f.id = ANY (ARRAY(
                (SELECT s.id FROM memory_facts s
                 WHERE p.code IS NOT NULL AND {_CURRENT_CODE} AND s.entity_key = p.entity_key
                 ORDER BY s.embedding_bits <~> p.code
                 LIMIT $7)
                UNION
                (SELECT s.id FROM memory_facts s
                 WHERE p.code IS NOT NULL AND {_CURRENT_CODE} AND s.entity_key = p.entity_key
                   AND s.identity_key = p.identity_key)
            ))
            OFFSET 0
        ) d
        ORDER BY d.distance, d.recorded_at DESC
        LIMIT p.k
    ) c ON true
    ORDER BY p.ord, c.distance, c.recorded_at DESC
    """  # noqa: S608 - assembled from this module's constants only


async def nearest_current_facts(
    conn: Connection,
    agent_id: str,
    probes: Sequence[CandidateProbe],
    limit: int,
    *,
    exact_below: int = EXACT_SCAN_MAX_FACTS,
    shortlist: int = BINARY_SHORTLIST,
) -> list[list[StoredCandidate]]:
    """For each probe, up to its limit (else `limit`) current facts of its subject, most similar first, in one
    statement: exact top-k for subjects under `exact_below` current facts; above, the `shortlist` nearest by
    Hamming distance of their binary codes, re-ranked by full-precision distance."""
    limits = [limit if probe.limit is None else probe.limit for probe in probes]
    if not probes or max(limits) <= 0:
        return [[] for _ in probes]
    found, large = await _ranked(conn, agent_id, probes, limits, exact_below, shortlist)
    # A large subject probed without a vector: most recent first, which only a ranking of the whole subject gives.
    fallback = [index for index in large if probes[index].embedding is None]
    if fallback:
        exact, _ = await _ranked(
            conn, agent_id, [probes[i] for i in fallback], [limits[i] for i in fallback], _NO_CAP, shortlist
        )
        for index, rows in zip(fallback, exact, strict=True):
            found[index] = rows
    return found


async def _ranked(
    conn: Connection,
    agent_id: str,
    probes: Sequence[CandidateProbe],
    limits: Sequence[int],
    cap: int,
    shortlist: int,
) -> tuple[list[list[StoredCandidate]], list[int]]:
    """Every probe's top-k (exact under `cap` current facts, over binary codes from it); the indexes of the probes
    whose subject has `cap` facts or more."""
    rows = await conn.fetch(
        _READ_SQL,
        agent_id,
        [p.entity_key for p in probes],
        [None if p.embedding is None else Vector(p.embedding) for p in probes],
        [p.identity_key for p in probes],
        cap,
        list(limits),
        max(shortlist, *limits),
    )
    found: list[list[StoredCandidate]] = [[] for _ in probes]
    large: set[int] = set()
    for row in rows:
        index = int(row["ord"]) - 1
        if row["n"] >= cap:
            large.add(index)
        if row["id"] is not None:
            found[index].append(_candidate(row))
    return found, sorted(large)


def _candidate(row: Any) -> StoredCandidate:
    similarity = row.get("similarity")
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
