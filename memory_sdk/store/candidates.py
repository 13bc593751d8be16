"""The current facts a new fact (or a message) is compared with: nearest by embedding, right at any size.

One statement serves every subject of a write. Per subject it counts the current facts up to EXACT_SCAN_MAX_FACTS. A
subject under MID_SIZE_FROM facts is ranked exactly (every vector read: it cannot miss). A larger one is ranked over the
binary codes of its facts' vectors (one bit per dimension, migration 0010): the facts nearest by Hamming distance, with
the fact of the probe's identity key, are re-ranked by full-precision distance. Under EXACT_SCAN_MAX_FACTS (a mid-size
subject) MID_SHORTLIST of them or a quarter of the subject, picked on the server; from it on (a large subject)
BINARY_SHORTLIST, narrowed from four times as many by the probe's vector when the client holds the codes, all four times
as many when the server picks them. Each vector read costs ~15-20 µs (TOAST), so a mid-size subject's shortlist saves
three quarters of its reads or more. The facts' HNSW index (migration 0008) is not used here: at 100,000 facts its walk
missed planted near-duplicates in a 60,000-fact subject however it was searched (0.55-0.79 of the exact top 5 with e5
geometry, and as much without any filter: the graph's misses, not the filters'), while the codes' shortlist found every
planted target, with 0.90-0.94 of the exact top 5 (docs/benchmarks.md, "Exact ranking of large subjects over binary
codes").

Where the Hamming shortlist is computed: on the server, by an index-only scan of every code of the subject (~30 ms a
probe in a 60,000-fact subject), unless the client holds the subject's codes (store/subject_codes.py, loaded in the
background once a read finds the subject large). Then the client picks the shortlist from its entry and the server ranks
it with every fact of the subject changed since the entry's sequence (migration 0011's change_seq: the delta, which
keeps the entry as exact as the server's codes) and sends the delta back for the entry to move forward
(docs/decisions.md, "Large subjects' codes cached in the client"). The server-side read's plans are custom
(plan_cache_mode), planned for each subject's size and vector. The cached read keeps one generic plan per connection
(database.generic_plans): every ranking in it is an exact sort of rows fetched by key or by subject, so no plan can
change what it returns, and its planning (~2.3-2.9 ms: the largest statement of the SDK) is paid once per connection
instead of at every read."""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar
from uuid import UUID

from pgvector import Vector

from memory_sdk.store.database import Connection, generic_plans, plans_back
from memory_sdk.store.queries import vector_param
from memory_sdk.store.subject_codes import (
    RESCORED_POOL,
    CodeRow,
    SubjectCodes,
    SubjectEntry,
    cache_of,
    codes_from_bytes,
)

__all__ = [
    "BINARY_SHORTLIST",
    "EXACT_SCAN_MAX_FACTS",
    "MAX_DELTA_CHANGES",
    "MID_SHARE",
    "MID_SHORTLIST",
    "MID_SIZE_FROM",
    "CandidateProbe",
    "Shortlists",
    "StoredCandidate",
    "current_facts_with_identity",
    "nearest_current_facts",
    "open_single_valued_facts",
    "while_running",
]

_T = TypeVar("_T")

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

# Facts of a large subject re-ranked by full-precision distance, after its binary codes (migration 0010) picked
# them. Measured at 100,000 facts, a 60,000-fact subject, 240 probes (benchmarks/recall.py, docs/benchmarks.md
# "Recall of the candidate read"): with e5 geometry
# every planted target (near-duplicate, rewording, translation, update) is found from 150 on. Picked by Hamming
# distance alone, agreement with the exact top 5 grows slowly with the list: 0.89 / 0.91 / 0.92 / 0.93 / 0.94 / 0.95
# / 0.97 at 100 / 150 / 200 / 300 / 400 / 800 / 1600. The client's cached read narrows the RESCORED_POOL x as many
# nearest by Hamming distance to this many by the probe's vector against their codes (subject_codes.code_scores):
# 0.925 / 0.939 / 0.948 at 100 / 150 / 200. The server-side read (a subject not cached) cannot score codes against a
# vector, so it re-ranks that whole pool at full precision: a superset of what the cached read ranks. Each re-ranked
# fact costs a vector read (~20 µs: its primary key, heap row and TOAST chunks), ~3 probes of a large subject a
# write: 400 by Hamming distance -> 150 narrowed from 600 saves ~5 ms a probe for the same top-5 agreement.
BINARY_SHORTLIST = 150

# Subjects of MID_SIZE_FROM current facts or more (and under EXACT_SCAN_MAX_FACTS) are ranked over their facts nearest
# by Hamming distance of their codes, MID_SHORTLIST or a MID_SHARE-th of the subject (a quarter), whichever is more,
# with the fact of the probe's identity key, re-ranked at full precision, on the server (not cached: a subject this
# size is no load worth keeping). One standard for every shortlisted subject: agreement with the exact top 5 about the
# large subject's read (0.939), every planted target found. Simulated over benchmarks/recall.py's e5
# vectors: subsets of 64 / 96 / 127 / 200 / 300 / 400 / 499 facts of the large subject, its
# 240 probes, agree at 0.992 / 0.971 / 0.958 / 0.930 / 0.940 / 0.953 / 0.946 (the former 96 or half the subject:
# 0.986-1.000), and every planted target is found; probes of the 100,000-fact agent's other subjects (152-228 facts:
# new facts, near-duplicates, whole messages, 280 probes) at 0.992-0.997 / 1.000 / 0.925 (through this read, in
# recall.py: 0.997 / 1.000, every target found). Each vector not read saves ~15-20 µs: against 96 or half, ~4-5 ms a
# write at the median in that agent's writes (ab.py interleave).
MID_SIZE_FROM = 64
MID_SHORTLIST = 48
MID_SHARE = 4

# A cached subject's entry may lag its subject by this many changes (migration 0011's change_seq) before its read
# falls back to the server-side shortlist and the entry is loaded again: each change after the entry is a fact
# ranked at full precision (~25 µs) and sent back with its code.
MAX_DELTA_CHANGES = 1000

# The parts both reads share, so that they cannot drift apart. The subject's current facts counted up to the cap ($5),
# and the two rankings done on the server: under $8 (and, for a probe without a vector, under the cap) every current
# fact exactly; from $8 up to the cap the $9 (or a quarter of the subject, if more) facts nearest by Hamming distance of
# their codes, and from the cap on (in the cached read, for a subject not served by the client's entry: `large`) the $7
# nearest, each with the identity key's fact, re-ranked by full-precision distance.
_COUNTED = f"""CROSS JOIN LATERAL (
        SELECT count(*) AS n FROM (
            SELECT 1 FROM memory_facts f WHERE {_CURRENT} AND f.entity_key = p.entity_key LIMIT $5
        ) capped
    ) cnt"""  # noqa: S608 - assembled from this module's constants only
_RANKED_ON_SERVER = f"""SELECT {_COLUMNS}, f.recorded_at, f.embedding <=> p.vec AS distance
            FROM memory_facts f
            WHERE cnt.n < $5 AND (cnt.n < $8 OR p.code IS NULL) AND {_CURRENT} AND f.entity_key = p.entity_key
            UNION ALL
            SELECT {_COLUMNS}, f.recorded_at, f.embedding <=> p.vec AS distance
            FROM memory_facts f
            WHERE (cnt.n >= $5{{large}} OR (cnt.n >= $8 AND cnt.n < $5))
              AND f.id = ANY (ARRAY(
                (SELECT s.id FROM memory_facts s
                 WHERE p.code IS NOT NULL AND {_CURRENT_CODE} AND s.entity_key = p.entity_key
                 ORDER BY s.embedding_bits <~> p.code
                 LIMIT CASE WHEN cnt.n < $5 THEN greatest($9::bigint, cnt.n / {MID_SHARE}) ELSE $7::bigint END)
                UNION
                (SELECT s.id FROM memory_facts s
                 WHERE p.code IS NOT NULL AND {_CURRENT_CODE} AND s.entity_key = p.entity_key
                   AND s.identity_key = p.identity_key)
            ))"""  # noqa: S608 - assembled from this module's constants only

# Per probe: the subject's current facts counted up to the cap ($5), then one of two rankings, each behind a
# one-time filter on that count, so only one runs:
# - under $8, every current fact ranked by full-precision distance (exact);
# - from $8 on, the $9 or a quarter of the subject (up to the cap; from it, $7) facts nearest by Hamming distance of
#   their codes, read by an index-only scan of ix_memory_facts_current_bits (no TOAST; no heap either once vacuum has
#   marked the pages all-visible), with the current fact of the probe's identity key; then those ids are fetched through
#   the primary key and ranked by full-precision distance; the probe's best k (p.k) kept.
# The probes' codes are computed once each in the materialized CTE (a lateral reference to an expression would be
# evaluated again for every fact scanned). OFFSET 0 fences each ranking, so the planner orders the distance it
# is given rather than look for an index that serves it. A probe without a vector gets no code: under the cap its
# subject comes most recent first (the exact ranking, whatever $8); from the cap on it gets nothing here and
# nearest_current_facts ranks it with no cap.
_READ_SQL = f"""
    WITH p AS MATERIALIZED (
        SELECT u.*, binary_quantize(u.vec) AS code
        FROM unnest($2::text[], $3::vector[], $4::text[], $6::int[])
            WITH ORDINALITY AS u(entity_key, vec, identity_key, k, ord)
    )
    SELECT p.ord, cnt.n, c.id, c.entity_key, c.fact_text, c.attribute, c.single_valued, c.valid_from,
           c.source_context, c.confidence, 1 - c.distance AS similarity
    FROM p
    {_COUNTED}
    LEFT JOIN LATERAL (
        SELECT d.* FROM (
            {_RANKED_ON_SERVER.format(large="")}
            OFFSET 0
        ) d
        ORDER BY d.distance, d.recorded_at DESC
        LIMIT p.k
    ) c ON true
    ORDER BY p.ord, c.distance, c.recorded_at DESC
    """  # noqa: S608 - assembled from this module's constants only


# Whether what a statement sees of entity row `e` and its facts is committed: its transaction wrote nothing, or did
# not change this entity (migration 0011's changed_by: every fact change of the entity stamps it). Only then may a
# cache learn from it: a transaction's own changes may yet be rolled back and their sequence values handed out again.
_COMMITTED = (
    "coalesce(pg_current_xact_id_if_assigned() IS NULL "
    "OR e.changed_by IS DISTINCT FROM pg_current_xact_id_if_assigned(), false)"
)

# The same read when at least one probe's subject is cached (else _READ_SQL runs: planned in 0.5 ms against 2.6 for
# this one, which a write's reads of small subjects would pay for nothing). Per probe: the subject's current facts
# counted up to the cap ($5), then one of three rankings, each behind a one-time filter, so only one runs:
# - under $8 (for a probe without a vector: under the cap), every current fact ranked by full-precision distance;
# - from $8 up to the cap, the $9 (or a quarter of the subject) facts nearest by Hamming distance of their codes, as
#   below;
# - from the cap on, for a subject this client has not cached (or whose entry is of another entity row, more than
#   $13 changes behind, or older than a fact's move out of it), the $7 facts nearest by Hamming distance of their
#   codes, read by an index-only scan of ix_memory_facts_current_bits (no TOAST; no heap either once vacuum has
#   marked the pages all-visible), with the current fact of the probe's identity key;
# - from the cap on, for a cached subject, the shortlist the client picked from its entry ($12: ids packed per probe),
#   every fact of the subject stamped after the entry's sequence ($10, the delta, through ix_memory_facts_subject_seq)
#   and the identity key's fact, fetched by primary key (OFFSET 0 fences the fetch from the filter that keeps the
#   facts still current in the subject: with the filter beside it, the planner scanned the whole subject through
#   the current facts' index and filtered the ids, 1,156 rows for 400 in a 1,200-fact subject);
# then those ids are fetched through the primary key, kept if still current in the subject, and ranked by
# full-precision distance; the probe's best k (p.k) kept, with how many were ranked (a shortlisted id that left the
# subject is not). The delta rows themselves (id, code, current or not) come back once per cached subject, for the
# entry to move to the subject's sequence, when the transaction has not changed the subject itself (_COMMITTED).
# kind 0 rows rank, kind 1 rows are the delta; one snapshot serves both. The delta's ORDER BY and LIMIT (never
# binding: a subject more than $13 changes ahead is not read this way) make the planner read it through its index,
# where a lateral bound estimated at a third of the subject chose a scan of the table.
# The probes' codes are computed once each in the materialized CTE (a lateral reference to an expression would be
# evaluated again for every fact scanned). OFFSET 0 fences each ranking, so the planner orders the distance it
# is given rather than look for an index that serves it. A probe without a vector gets no code: under the cap its
# subject comes most recent first; from the cap on it gets nothing here and nearest_current_facts ranks it with no
# cap.
_CACHED_READ_SQL = f"""
    WITH p AS MATERIALIZED (
        SELECT u.*, binary_quantize(u.vec) AS code
        FROM unnest($2::text[], $3::vector[], $4::text[], $6::int[], $10::bigint[], $11::uuid[], $12::bytea[])
            WITH ORDINALITY AS u(entity_key, vec, identity_key, k, known_seq, entity_id, listed, ord)
    ), m AS MATERIALIZED (
        SELECT p.ord, e.change_seq AS seq,
               coalesce(p.known_seq IS NOT NULL AND p.code IS NOT NULL AND e.id = p.entity_id
                        AND e.moved_out_seq <= p.known_seq AND e.change_seq - p.known_seq <= $13, false) AS cached,
               {_COMMITTED} AS learnable
        FROM p LEFT JOIN memory_entities e ON e.agent_id = $1 AND e.entity_key = p.entity_key
    ), ranked AS (
        SELECT 0 AS kind, p.ord, cnt.n, m.seq, m.cached, m.learnable, c.ranked, c.id, c.entity_key, c.fact_text,
               c.attribute, c.single_valued, c.valid_from, c.source_context, c.confidence, c.distance, c.recorded_at,
               NULL::bytea AS code, NULL::boolean AS current
        FROM p
        JOIN m ON m.ord = p.ord
        {_COUNTED}
        LEFT JOIN LATERAL (
            SELECT d.*, count(*) OVER () AS ranked FROM (
                {_RANKED_ON_SERVER.format(large=" AND NOT m.cached")}
                UNION ALL
                SELECT {_COLUMNS}, f.recorded_at, f.embedding <=> p.vec AS distance
                FROM (
                    SELECT * FROM memory_facts listed
                    WHERE cnt.n >= $5 AND m.cached AND listed.id = ANY (ARRAY(
                        SELECT encode(substring(p.listed FROM 16 * i + 1 FOR 16), 'hex')::uuid
                        FROM generate_series(0, length(p.listed) / 16 - 1) AS i
                        UNION
                        (SELECT s.id FROM memory_facts s
                         WHERE s.agent_id = $1 AND s.entity_key = p.entity_key AND s.subject_seq > p.known_seq
                         ORDER BY s.subject_seq
                         LIMIT $13)
                        UNION
                        SELECT s.id FROM memory_facts s
                        WHERE {_CURRENT_CODE} AND s.entity_key = p.entity_key AND s.identity_key = p.identity_key
                    ))
                    OFFSET 0
                ) f
                WHERE {_CURRENT} AND f.entity_key = p.entity_key
                OFFSET 0
            ) d
            ORDER BY d.distance, d.recorded_at DESC
            LIMIT p.k
        ) c ON true
    ), changed AS (
        SELECT 1 AS kind, p.ord, NULL::bigint AS n, NULL::bigint AS seq, NULL::boolean AS cached,
               NULL::boolean AS learnable, NULL::bigint AS ranked, f.id, f.entity_key, NULL::text AS fact_text,
               NULL::text AS attribute,
               NULL::boolean AS single_valued, NULL::timestamptz AS valid_from, NULL::text AS source_context,
               NULL::float8 AS confidence, NULL::float8 AS distance, NULL::timestamptz AS recorded_at,
               substring(varbit_send(f.embedding_bits) FROM 5) AS code,
               f.valid_to IS NULL AND f.invalidated_at IS NULL AS current
        FROM p
        JOIN m ON m.ord = p.ord AND m.cached AND m.learnable
        JOIN memory_facts f ON f.agent_id = $1 AND f.entity_key = p.entity_key AND f.subject_seq > p.known_seq
        WHERE p.ord = (SELECT min(q.ord) FROM p q WHERE q.entity_key = p.entity_key AND q.known_seq IS NOT NULL)
    )
    SELECT r.*, 1 - r.distance AS similarity
    FROM (SELECT * FROM ranked UNION ALL SELECT * FROM changed) r
    WHERE {plans_back(14)}
    ORDER BY r.kind, r.ord, r.distance, r.recorded_at DESC
    """  # noqa: S608 - assembled from this module's constants only

# A large subject's entry: its current facts' ids and codes and its sequence, in one snapshot, unless the
# transaction changed the subject itself (what it sees may yet be rolled back). The ids and the codes come as one
# bytea each, in the same order: each id as uuid_send gives it (16 bytes), each code as varbit_send gives it without
# its 4-byte length. (An array of 60,000 uuids cost ~30 ms more on the server and ~25 ms of the client's CPU to
# decode into UUID objects and pack again, in the first write of a process.)
_LOAD_SQL = f"""
    SELECT k.entity_key, e.id AS entity_id, e.change_seq AS seq, c.n, c.ids, c.codes
    FROM unnest($2::text[]) AS k(entity_key)
    JOIN memory_entities e ON e.agent_id = $1 AND e.entity_key = k.entity_key
    CROSS JOIN LATERAL (
        SELECT count(*) AS n, string_agg(uuid_send(s.id), ''::bytea) AS ids,
               string_agg(substring(varbit_send(s.embedding_bits) FROM 5), ''::bytea) AS codes
        FROM memory_facts s
        WHERE {_CURRENT_CODE} AND s.entity_key = k.entity_key AND s.embedding_bits IS NOT NULL
    ) c
    WHERE {_COMMITTED}
    """  # noqa: S608 - assembled from this module's constants only


async def while_running(statement: Awaitable[_T], work: Callable[[], object]) -> _T:
    """`statement`'s result, with `work` (the client's CPU) done while the server runs it: the statement's task runs
    first up to its first wait, which asyncpg reaches once the statement is on the wire (Bind and Execute of a
    statement this connection has prepared before, as the write path's are after their first use; the first time,
    only its Parse overlaps), then `work` runs, then the answer is awaited. On two cores the server and the client
    work at once instead of in turn. If `work` raises (or the caller is cancelled first), the statement is cancelled
    and waited for before the error goes on, so the connection is not left mid-statement."""
    task = asyncio.ensure_future(statement)
    try:
        await asyncio.sleep(0)
        work()
    except BaseException:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        raise
    return await task


@dataclass(frozen=True)
class _Picked:
    entry: SubjectEntry
    version: int
    embedding: Sequence[float]
    size: int
    keep: int
    ids: bytes


class Shortlists:
    """Large subjects' shortlists picked ahead of their candidate read, while the server runs an earlier statement
    of the write (`while_running`): a 60,000-fact subject's shortlist is ~2.4 ms of client CPU a probe, which the
    client otherwise spends while the server waits. The read uses a picked shortlist only if it was picked from the
    subject's entry as the entry is now (same object, same version: no delta applied since), for the same vector and
    size; anything else it picks itself, as without this."""

    def __init__(self) -> None:
        self._picked: list[_Picked] = []

    def pick(
        self,
        conn: Connection,
        agent_id: str,
        probes: Sequence[CandidateProbe],
        limit: int,
        *,
        shortlist: int = BINARY_SHORTLIST,
    ) -> None:
        """Pick the shortlist of each probe whose subject the connection's cache holds, for a read of top-k `limit`
        (or the probe's own) and `shortlist` (nearest_current_facts' arguments: the size that read will ask for)."""
        codes = cache_of(conn)
        if codes is None:
            return
        size = max(shortlist, limit)
        for probe in probes:
            if probe.embedding is None:
                continue
            entry = codes.get(agent_id, probe.entity_key)
            keep = limit if probe.limit is None else probe.limit
            if entry is None or self.take(entry, probe.embedding, size, keep) is not None:
                continue
            ids = entry.shortlist_packed(probe.embedding, size, keep)
            self._picked.append(_Picked(entry, entry.version, probe.embedding, size, keep, ids))

    def take(self, entry: SubjectEntry, embedding: Sequence[float], size: int, keep: int) -> bytes | None:
        """The ids picked for `embedding` from `entry` as it is now, for a list of `size` and a top `keep`, if any."""
        for picked in self._picked:
            if picked.entry is not entry or picked.version != entry.version:
                continue
            if picked.size != size or picked.keep != keep:
                continue
            if picked.embedding is embedding or list(picked.embedding) == list(embedding):
                return picked.ids
        return None


async def nearest_current_facts(
    conn: Connection,
    agent_id: str,
    probes: Sequence[CandidateProbe],
    limit: int,
    *,
    large_from: int = EXACT_SCAN_MAX_FACTS,
    exact_below: int = MID_SIZE_FROM,
    shortlist: int = BINARY_SHORTLIST,
    mid_shortlist: int = MID_SHORTLIST,
    shortlists: Shortlists | None = None,
) -> list[list[StoredCandidate]]:
    """For each probe, up to its limit (else `limit`) current facts of its subject, most similar first, in one
    statement: exact top-k for subjects under `exact_below` current facts; from there up to `large_from`, the
    `mid_shortlist` (or a quarter of the subject, if more) nearest by the Hamming distance of their binary codes (picked
    on the server), re-ranked by full-precision distance; from `large_from` on, the `shortlist` nearest by their binary
    codes (from the connection's database's cache of the subject's codes when it holds them: the RESCORED_POOL x
    `shortlist` nearest by Hamming distance narrowed by the probe's vector, taken from `shortlists` when picked there
    ahead of the read; else all of those, picked on the server), re-ranked by full-precision distance. A large subject
    not cached yet is loaded in the background (subject_codes.EntryLoader)."""
    limits = [limit if probe.limit is None else probe.limit for probe in probes]
    if not probes or max(limits) <= 0:
        return [[] for _ in probes]
    codes = cache_of(conn)
    mid = (exact_below, max(mid_shortlist, *limits))
    read = _Read(agent_id, probes, limits, large_from, max(shortlist, *limits), codes, shortlists, mid)
    await read.run(conn)
    found = read.found
    # A large subject probed without a vector: most recent first, which only a ranking of the whole subject gives.
    fallback = [index for index in read.large if probes[index].embedding is None]
    if fallback:
        exact = _Read(agent_id, [probes[i] for i in fallback], [limits[i] for i in fallback], _NO_CAP, 0, None)
        await exact.run(conn)
        for index, rows in zip(fallback, exact.found, strict=True):
            found[index] = rows
    if codes is not None and codes.loader is not None:
        wanted = {probes[i].entity_key for i in read.large if probes[i].embedding is not None}
        codes.loader.schedule(agent_id, sorted(wanted), _load)
    return found


class _Read:
    """One candidate statement: _READ_SQL when no probe's subject is cached, else _CACHED_READ_SQL with each
    cached subject's shortlists and sequence (from `codes`); what it learns: each probe's ranking, the large
    subjects, the cached subjects' deltas."""

    def __init__(
        self,
        agent_id: str,
        probes: Sequence[CandidateProbe],
        limits: Sequence[int],
        cap: int,
        shortlist: int,
        codes: SubjectCodes | None,
        shortlists: Shortlists | None = None,
        mid: tuple[int, int] = (_NO_CAP, 0),
    ) -> None:
        self.agent_id, self.probes, self.limits, self.cap, self.shortlist = agent_id, probes, limits, cap, shortlist
        self.codes, self.shortlists = codes, shortlists
        # Mid-size subjects (from the first size up to the cap) are ranked over a Hamming shortlist of at least the
        # second on the server; none by default (a fallback read ranks exactly).
        self.mid = mid
        self.found: list[list[StoredCandidate]] = [[] for _ in probes]
        self.large: list[int] = []
        # Per cached probe: its subject's entry as it was when the shortlist was picked, and the ids sent.
        self._entries: dict[int, tuple[SubjectEntry, int, bytes]] = {}

    async def run(self, conn: Connection) -> None:
        # A cached probe's shortlist picked ahead of the read is used when it is still right; the others (`late`)
        # are picked while the server runs generic_plans.
        late: list[tuple[int, SubjectEntry, list[float]]] = []
        for index, probe in enumerate(self.probes):
            if self.codes is None or probe.embedding is None:
                continue
            entry = self.codes.get(self.agent_id, probe.entity_key)
            if entry is None:
                continue
            ahead = None
            if self.shortlists is not None:
                ahead = self.shortlists.take(entry, probe.embedding, self.shortlist, self.limits[index])
            if ahead is None:
                late.append((index, entry, probe.embedding))
            else:
                self._entries[index] = (entry, entry.seq, ahead)
        shared = (
            self.agent_id,
            [p.entity_key for p in self.probes],
            _vectors(self.probes),
            [p.identity_key for p in self.probes],
            self.cap,
            list(self.limits),
            self.shortlist * RESCORED_POOL,  # the server-side read's Hamming shortlist, all re-ranked
            *self.mid,
        )
        if not self._entries and not late:
            self._rank(await conn.fetch(_READ_SQL, *shared))
            return

        def pick_the_rest() -> None:
            # The ids packed, 16 bytes each, unpacked on the server: no UUID objects built or encoded one by one
            # (~0.6 ms of client CPU a probe of 150). The sequence is read with the shortlist, so the two agree
            # even if the entry moved while generic_plans was being sent.
            for index, entry, embedding in late:
                packed = entry.shortlist_packed(embedding, self.shortlist, self.limits[index])
                self._entries[index] = (entry, entry.seq, packed)

        # Its rankings are exact sorts (no index orders a distance here), so a generic plan returns the rows a custom
        # one would; planned once per connection instead of ~2.3-2.9 ms at every read (docs/benchmarks.md, session
        # 25). The statement puts the transaction's plan setting back as it starts ($14).
        prior_plans = await while_running(generic_plans(conn), pick_the_rest)
        entries = [self._entries.get(index) for index in range(len(self.probes))]
        rows = await conn.fetch(
            _CACHED_READ_SQL,
            *shared,
            [None if c is None else c[1] for c in entries],  # the entry's sequence when its shortlist was picked
            [None if c is None else c[0].entity_id for c in entries],
            [None if c is None else c[2] for c in entries],  # the shortlisted ids
            MAX_DELTA_CHANGES,
            prior_plans,
        )
        self._rank([row for row in rows if row["kind"] == 0])
        self._learn(rows)

    def _rank(self, rows: Sequence[Any]) -> None:
        """Each probe's ranking and the large subjects, from the ranking rows."""
        large: set[int] = set()
        for row in rows:
            index = int(row["ord"]) - 1
            if row["n"] >= self.cap:
                large.add(index)
            if row["id"] is not None:
                self.found[index].append(_candidate(row))
        self.large = sorted(large)

    def _learn(self, rows: Sequence[Any]) -> None:
        """Each cached subject's entry moves forward with its delta (kind 1 rows), or is dropped when the read
        could not use it (or found one of its ids gone)."""
        subjects: dict[int, Any] = {}
        changed: dict[str, list[CodeRow]] = {}
        for row in rows:
            if row["kind"] == 1:
                changed.setdefault(row["entity_key"], []).append(
                    CodeRow(id=row["id"], code=row["code"], current=bool(row["current"]))
                )
            else:
                subjects.setdefault(int(row["ord"]) - 1, row)
        if self.codes is not None:
            for index, (entry, sent_seq, ids) in self._entries.items():
                key = self.probes[index].entity_key
                self._advance(self.codes, key, entry, sent_seq, ids, subjects[index], changed.get(key, []))

    def _advance(
        self,
        codes: SubjectCodes,
        key: str,
        entry: SubjectEntry,
        sent_seq: int,
        ids: bytes,
        subject: Any,
        delta: list[CodeRow],
    ) -> None:
        if codes.get(self.agent_id, key) is not entry:
            return  # evicted or replaced meanwhile: the newer entry is not this read's to change
        if not subject["cached"] or subject["n"] < self.cap:
            codes.forget(self.agent_id, key)  # another entity row, too far behind, or no longer large
            return
        if not subject["learnable"]:
            return  # this transaction changed the subject: what it sees may yet be rolled back
        # Every id sent is current in the subject (the entry is exact) unless a fact row was deleted without its
        # entity row, which the SDK never does (an agent's deletion takes its entities too) and no sequence
        # records: an id that did not rank cost the read a slot of its shortlist, so the entry is loaded afresh.
        ranked = subject["ranked"]
        gone = {row.id.bytes for row in delta if not row.current}
        sent = {ids[at : at + 16] for at in range(0, len(ids), 16)}
        if (
            ranked is not None
            and len(sent.difference(gone).union(row.id.bytes for row in delta if row.current)) > ranked
        ):
            codes.forget(self.agent_id, key)
            return
        if entry.seq < subject["seq"] and sent_seq <= entry.seq:
            entry.apply(delta, int(subject["seq"]))
            codes.shrink()


def _vectors(probes: Sequence[CandidateProbe]) -> list[Vector | None]:
    """Each probe's vector as a parameter, packed once per vector: the message's vector probes every entity the
    message names."""
    packed: dict[int, Vector | None] = {}
    for probe in probes:
        if probe.embedding is not None and id(probe.embedding) not in packed:
            packed[id(probe.embedding)] = vector_param(probe.embedding)
    return [None if probe.embedding is None else packed[id(probe.embedding)] for probe in probes]


async def _load(conn: Connection, codes: SubjectCodes, agent_id: str, keys: Sequence[str]) -> None:
    """Load the entries of large subjects found uncached (subject_codes.EntryLoader runs it in the background, in a
    tenant transaction of its own: row-level security, committed data only)."""
    for row in await conn.fetch(_LOAD_SQL, agent_id, list(keys)):
        count = int(row["n"])
        if count == 0:
            continue  # no codes to rank (facts without vectors): the server-side read ranks it
        entry = SubjectEntry(row["entity_id"], int(row["seq"]), row["ids"], codes_from_bytes(row["codes"], count))
        codes.put(agent_id, row["entity_key"], entry)


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
