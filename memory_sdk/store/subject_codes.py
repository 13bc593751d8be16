"""An in-process cache of large subjects' binary codes: the Hamming shortlist of the candidate read, computed here.

store/candidates.py ranks a subject of EXACT_SCAN_MAX_FACTS current facts or more over the binary codes of its
facts' vectors (migration 0010): the BINARY_SHORTLIST nearest by Hamming distance, re-ranked at full precision.
On the server that reads every code of the subject for every probe (~30 ms a probe in a 60,000-fact subject). This
cache holds each large subject's current codes in a numpy matrix, so the client picks the shortlist and the server
only re-ranks it by primary key.

It is kept exact by the subject's change sequence (migration 0011): an entry is the subject's current facts as of
one `memory_entities.change_seq`; each read ranks the entry's shortlist together with every current fact stamped
after it (the delta), and hands back those rows (id, code, current or not) and the subject's sequence, with which
the entry moves forward. An entry also remembers its entity row's id: an entity deleted and created again starts
its sequence at 0 again, and must not be mistaken for the old one.

It learns only from committed data: a statement reports, per subject, whether its own transaction changed the
subject (migration 0011's `memory_entities.changed_by`, stamped by every fact change); if it did, what it sees may
yet be rolled back (a dry run, a failed write) and sequence values may be handed out again, so the read uses its
delta but the cache keeps what it had. A transaction that wrote other rows (the event a write logs first) learns.

Memory is bounded: entries are evicted least recently used first once their codes and ids pass the budget
(MemoryConfig.subject_code_cache_mb; 0 turns the cache off). One cache per Database (so per MemoryClient), found
from the pool's connections; several clients on one database each keep their own, each kept right by the change
sequence. Everything here but the loads is synchronous: on one event loop no other task runs while an entry changes.

Entries are loaded off the write path (EntryLoader): a candidate read that finds a large subject not cached asks for
its entry and goes on; one background task of the event loop reads it in a tenant transaction of its own (a pooled
connection of the Database's), where only committed data is seen, and puts it here. Until it lands the subject's
reads pick their shortlists on the server, as without the cache. A real model call takes longer than the load (~120
ms for a 60,000-fact subject), so a write's later reads of the subject usually find it cached; the write that found it
no longer waits for it (175-221 ms for the first write of a process on a 100,000-fact agent: docs/benchmarks.md,
"The write path as memory grows"). A failed load is logged and counted, never raised into a write: the subject
stays uncached and the next read that finds it asks again.
"""

from __future__ import annotations

import functools
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import numpy as np
import numpy.typing as npt

from memory_sdk.store.background import AgentQueue

__all__ = [
    "DEFAULT_CACHE_MB",
    "RESCORED_POOL",
    "SHORTLIST_FLOOR",
    "SHORTLIST_MARGIN_SD",
    "CodeRow",
    "EntryLoader",
    "SubjectCodes",
    "SubjectEntry",
    "attach",
    "cache_of",
    "code_scores",
    "codes_from_bytes",
    "hamming_distances",
    "hamming_pool",
    "nearest_by_distance",
    "pack_ids",
    "popcount_rows_by_table",
    "probe_code",
    "split_codes",
]

Words = npt.NDArray[np.uint64]
# A tenant transaction of an agent on a pooled connection of its own, committed at its end (Database.tenant).
TenantOpener = Callable[[str], AbstractAsyncContextManager[Any]]
# Reads the entries of an agent's subjects on a connection and puts them into a cache (store/candidates._load: the
# SQL lives with the reads that use the entries).
EntryLoad = Callable[[Any, "SubjectCodes", str, Sequence[str]], Awaitable[None]]
# The default budget: a 60,000-fact subject of 1536-dimension codes takes 12.5 MB (192 bytes of code and 16 of id
# per fact), so a few of the largest subjects fit, and a process of several clients stays small.
DEFAULT_CACHE_MB = 64
# The bytes an entry spends per fact beside its code: the id (16 bytes in a matrix of its own).
_ID_BYTES = 16
# Spare rows an entry keeps for new facts: a 32nd of its size and 64 more (a write adds a few facts at a time).
_SPARE_SHARE = 32
_SPARE_MIN = 64
# Subjects found too large for the budget are not loaded again (their load would be evicted at once); past this
# many remembered, the list starts over.
_REFUSED_MAX = 1024

_BYTE_BITS = np.array([bin(n).count("1") for n in range(256)], dtype=np.uint8)


def popcount_rows_by_table(words: Words) -> npt.NDArray[np.int64]:
    """Set bits per row, counted byte by byte with a table: numpy 1.26 has no bitwise_count (numpy >= 2.0). Any
    layout (a transposed or sliced matrix is copied into rows first: its bytes are read by row)."""
    rows, width = words.shape
    as_bytes = np.ascontiguousarray(words).view(np.uint8).reshape(rows, width * words.itemsize)
    counts: npt.NDArray[np.int64] = _BYTE_BITS[as_bytes].sum(axis=1, dtype=np.int64)
    return counts


_NATIVE_POPCOUNT = hasattr(np, "bitwise_count")
# Words whose popcounts are summed in 8 bits before they join the int32 distances: 3 x 64 = 192 fits a byte.
_WORDS_PER_SUM = 3
# The facts a cached probe ranks by Hamming distance, per fact it shortlists: code_scores then keeps the best
# quarter. With e5 geometry (benchmarks/recall.py, 240 probes of a 60,000-fact subject) agreement with the exact top
# 5 was 0.920 for the 200 nearest by Hamming distance alone and 0.939 / 0.948 for 150 / 200 narrowed from 600 /
# 800 this way (0.937 for 400 by Hamming distance alone).
RESCORED_POOL = 4
# The Hamming scan of a large subject runs in two passes (hamming_pool): every FIRST_PASS_STRIDE-th word of each
# code first, keeping FIRST_PASS_POOL x the pool nearest by that part; then the whole code over those only. With e5
# geometry (240 probes of a 60,000-fact subject, the codes of the recall benchmark: a third of their information in
# the first pass, as a third of a 1536-dimension code's words) agreement with the exact top 5 was 0.943 against
# 0.940 for the whole scan and every planted target was found; keeping 3 x the pool gave 0.935, a sixth of the
# words with 5 x 0.883 (benchmarks/recall.py).
FIRST_PASS_STRIDE = 3
FIRST_PASS_POOL = 5
# A probe that ranks its top k keeps, of its list narrowed by code score, only the facts whose score is within this
# many standard deviations (of the scores of its Hamming pool) of the k-th best score, and at least SHORTLIST_FLOOR x k
# of them: a fact scored that far below the k-th cannot be expected in the exact top k, and each fact not re-ranked is
# a vector the server does not read (~11 µs). With e5 geometry (240 probes of a 60,000-fact subject, benchmarks/
# recall.py's vectors; docs/benchmarks.md, "Recall of the candidate read") agreement with the exact top 5 was 0.932
# as with the whole list of 150, for 93 facts on average (top 10: 0.905 as with 150, for 98); 2 deviations 0.931 for
# 87, 1.5 0.922 for 69.
# Through the SDK's read (benchmarks/recall.py --vectors e5): 0.934 and 0.933 against 0.933 with the whole list, every
# planted target found, the read 1.7-1.9 ms faster at the median. Probes with a clear nearest group keep few; probes
# whose scores are flat keep the whole list (a tenth of the probes here; most of the benchmarks' hash vectors' probes).
SHORTLIST_MARGIN_SD = 2.5
SHORTLIST_FLOOR = 4


def hamming_distances(columns: Words, probe: Words) -> npt.NDArray[np.int32]:
    """Hamming distance to `probe` of each code held by word in `columns` (one row per 64-bit word of the code,
    one column per code): per word, one XOR and one popcount over every code, each over contiguous memory, the
    counts of _WORDS_PER_SUM words summed in 8 bits before they are added to the int32 distances (60,000 codes of
    1536 bits: ~1.3-1.5 ms here, against ~2.2 adding every word's counts to the int32 distances and ~4.9 for codes held
    row by row, whose short rows numpy reduces slowly). int32 distances: what nearest_by_distance's bincount reads."""
    words, count = columns.shape
    if not _NATIVE_POPCOUNT:
        return popcount_rows_by_table(columns.T ^ probe).astype(np.int32)
    distances = np.zeros(count, dtype=np.int32)
    xor = np.empty(count, dtype=np.uint64)
    bits, group = np.empty(count, dtype=np.uint8), np.empty(count, dtype=np.uint8)
    for first in range(0, words, _WORDS_PER_SUM):
        np.bitwise_xor(columns[first], probe[first], out=xor)
        np.bitwise_count(xor, out=group)
        for word in range(first + 1, min(words, first + _WORDS_PER_SUM)):
            np.bitwise_xor(columns[word], probe[word], out=xor)
            np.bitwise_count(xor, out=bits)
            np.add(group, bits, out=group)
        np.add(distances, group, out=distances)
    return distances


def nearest_by_distance(distances: npt.NDArray[np.int32], size: int) -> npt.NDArray[np.intp]:
    """The positions of the `size` smallest distances (ties at the cut in position order), by counting: the
    distances are small integers (at most the code's bits), so one bincount finds the cut and two comparisons
    pick the positions (~0.15 ms for 60,000 against ~0.6 for argpartition)."""
    if size >= distances.size:
        return np.arange(distances.size)
    if size <= 0:
        return np.zeros(0, dtype=np.intp)
    cut = int(np.searchsorted(np.cumsum(np.bincount(distances)), size))
    below = np.flatnonzero(distances < cut)
    return np.concatenate([below, np.flatnonzero(distances == cut)[: size - below.size]])


def probe_code(embedding: Sequence[float] | npt.NDArray[np.float32], words: int) -> Words:
    """The binary code of a vector as PostgreSQL's binary_quantize makes it (a bit per dimension, set where the
    value is positive, first dimension in the high bit of the first byte), as `words` 64-bit words."""
    bits = np.packbits(np.asarray(embedding, dtype=np.float32) > 0)
    padded = np.zeros(words * 8, dtype=np.uint8)
    padded[: bits.size] = bits
    return padded.view(np.uint64)


def code_scores(codes: Words, embedding: Sequence[float] | npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """The probe's full vector summed over the dimensions each code sets: its dot product with the code read as
    +1/-1 per dimension, but for a constant. An estimate of the vectors' similarity far closer than the Hamming
    distance of the two codes, which throws the probe's magnitudes away.

    Summed a byte at a time: per byte of the code, a table of what each of its 256 values adds (the probe's 8
    dimensions of that byte, summed over the bits set), built in 8 doubling steps; then one lookup per byte of each
    code (~0.56 ms for 600 codes of 1536 bits against ~0.96 for unpacking every bit and an einsum). No matrix product:
    numpy's BLAS runs its threads even for these sizes, 17 ms on a busy 2-core machine."""
    vector = np.asarray(embedding, dtype=np.float32)
    width = -(-vector.size // 8)
    per_bit = np.zeros((width, 8), dtype=np.float32)
    per_bit.ravel()[: vector.size] = vector
    table = np.zeros((width, 256), dtype=np.float32)
    for bit in range(8):  # a byte's bit of value 2**bit is its dimension 7 - bit (the first in the high bit)
        value = 1 << bit
        np.add(table[:, :value], per_bit[:, 7 - bit : 8 - bit], out=table[:, value : 2 * value])
    at = codes.view(np.uint8)[:, :width] + np.arange(0, width * 256, 256, dtype=np.intp)
    scores: npt.NDArray[np.float32] = table.ravel().take(at).sum(axis=1, dtype=np.float32)
    return scores


def _within_margin(scores: npt.NDArray[np.float32], size: int, keep: int | None) -> npt.NDArray[np.intp]:
    """The positions of the `size` best `scores`; for a read of the top `keep`, only those of them within
    SHORTLIST_MARGIN_SD standard deviations of the scores of the `keep`-th best, at least SHORTLIST_FLOOR x `keep`."""
    size = min(size, scores.size)
    best = np.argpartition(-scores, size - 1)[:size]
    if keep is None or keep <= 0 or keep * SHORTLIST_FLOOR >= size:
        return best
    kth = float(np.partition(scores, scores.size - keep)[scores.size - keep])
    near = best[scores[best] >= kth - SHORTLIST_MARGIN_SD * float(scores.std())]
    if near.size >= keep * SHORTLIST_FLOOR:
        return near
    return best[np.argpartition(-scores[best], keep * SHORTLIST_FLOOR - 1)[: keep * SHORTLIST_FLOOR]]


def pack_ids(ids: Iterable[UUID]) -> bytes:
    """`ids` packed 16 bytes each, as SubjectEntry holds them."""
    return b"".join(fact_id.bytes for fact_id in ids)


def codes_from_bytes(data: bytes, count: int) -> Words:
    """`count` codes of equal length packed in `data` (each as varbit_send gives it without its length) as rows of
    64-bit words, zero-padded to a whole word."""
    if count == 0:
        return np.zeros((0, 1), dtype=np.uint64)
    width = len(data) // count
    words = -(-width // 8)
    matrix = np.zeros((count, words * 8), dtype=np.uint8)
    matrix[:, :width] = np.frombuffer(data, dtype=np.uint8).reshape(count, width)
    return matrix.view(np.uint64)


def hamming_pool(first: Words, rest: Words, probe: Words, size: int) -> npt.NDArray[np.intp]:
    """The positions of about the `size` codes nearest to `probe` by Hamming distance, codes held as a SubjectEntry
    holds them: `first`, every FIRST_PASS_STRIDE-th word by word (a row per word); `rest`, the other words by code
    (a row per code). Two passes: the distances over `first` keep FIRST_PASS_POOL x `size` codes, and only those
    are ranked by their whole codes (60,000 codes of 1536 bits: ~1.06 ms against ~1.46 for one scan of every word).
    The second pass reads each kept code's other words from one row: taken word by word across the columns instead,
    its ~50,000 scattered reads cost more than the scan they save. A code near by the whole but far by the first
    pass's words can be missed: the same trade as the pool's own cut, measured to keep the read's agreement with an
    exact top 5 (see FIRST_PASS_STRIDE)."""
    words = first.shape[0] + rest.shape[1]
    first_distances = hamming_distances(first, probe[:words:FIRST_PASS_STRIDE])
    near = nearest_by_distance(first_distances, size * FIRST_PASS_POOL)
    distances = first_distances[near]
    if rest.shape[1]:
        others = np.bitwise_xor(rest[near], probe[_rest_words(words)])
        if _NATIVE_POPCOUNT:
            distances += np.bitwise_count(others).sum(axis=1, dtype=np.int32)
        else:
            distances += popcount_rows_by_table(others).astype(np.int32)
    return near[nearest_by_distance(distances, size)]


@functools.cache
def _rest_words(words: int) -> npt.NDArray[np.intp]:
    """The words of a code of `words` words that the first pass does not read (one array per width, kept: it
    indexes every probe's code; never written to)."""
    rest = np.array([word for word in range(words) if word % FIRST_PASS_STRIDE], dtype=np.intp)
    rest.flags.writeable = False
    return rest


def split_codes(codes: Words) -> tuple[Words, Words]:
    """Codes held a code per row, as a SubjectEntry holds them (views, not copies): the first pass's words by word
    (a row per word, a code per column) and the other words by code (a row per code); hamming_pool's two inputs."""
    return codes[:, ::FIRST_PASS_STRIDE].T, codes[:, _rest_words(codes.shape[1])]


@dataclass(frozen=True)
class CodeRow:
    """A fact of the subject changed after the entry's sequence: its code (None without a vector) and whether it
    is current in this subject now."""

    id: UUID
    code: bytes | None
    current: bool


class SubjectEntry:
    """One subject's current codes as of `seq` of entity row `entity_id`."""

    def __init__(self, entity_id: UUID, seq: int, ids: bytes, codes: Words) -> None:
        """`ids`: the facts' ids packed 16 bytes each (pack_ids, or uuid_send's bytes as the load reads them), in the
        order of the rows of `codes`."""
        self.entity_id, self.seq = entity_id, seq
        # Counts the entry's changes (apply): a shortlist picked ahead of its read is used only at the version it
        # was picked from (candidates.Shortlists).
        self.version = 0
        self._count = len(ids) // _ID_BYTES
        # Room for the deltas to come: growing copies the whole matrix (tens of ms at 60,000 codes).
        capacity = self._count + self._count // _SPARE_SHARE + _SPARE_MIN
        self._ids = np.zeros((capacity, _ID_BYTES), dtype=np.uint8)
        self._ids[: self._count] = np.frombuffer(ids, dtype=np.uint8).reshape(-1, _ID_BYTES)
        # The first pass's words held by word, a code per column (hamming_distances reads each word of every code as
        # one contiguous row); the other words by code, a code per row (the second pass reads a few thousand codes).
        self._words = codes.shape[1]
        first, rest = split_codes(codes)
        self._first = np.zeros((first.shape[0], capacity), dtype=np.uint64)
        self._first[:, : self._count] = first
        self._rest = np.zeros((capacity, rest.shape[1]), dtype=np.uint64)
        self._rest[: self._count] = rest

    @property
    def count(self) -> int:
        return self._count

    @property
    def nbytes(self) -> int:
        """What the entry holds (allocated rows, codes and ids): what the budget counts."""
        return int(self._first.nbytes + self._rest.nbytes + self._ids.nbytes)

    def shortlist(self, embedding: Sequence[float], size: int, keep: int | None = None) -> list[UUID]:
        """The ids of the `size` facts nearest to `embedding` by its codes: the RESCORED_POOL x `size` nearest by
        Hamming distance, narrowed to `size` by the probe's own vector against their codes (ties in any order). For
        a read of the top `keep`, only those scored within SHORTLIST_MARGIN_SD of the `keep`-th best (at least
        SHORTLIST_FLOOR x `keep`)."""
        raw = self.shortlist_packed(embedding, size, keep)
        return [UUID(bytes=raw[at : at + 16]) for at in range(0, len(raw), 16)]

    def shortlist_packed(self, embedding: Sequence[float], size: int, keep: int | None = None) -> bytes:
        """shortlist()'s ids as they are held, 16 bytes each, in one bytes object (what the candidate read sends)."""
        if self._count == 0 or size <= 0:
            return b""
        if size >= self._count:
            return self._ids[: self._count].tobytes()
        vector = np.asarray(embedding, dtype=np.float32)
        count = self._count
        wide = hamming_pool(
            self._first[:, :count], self._rest[:count], probe_code(vector, self._words), size * RESCORED_POOL
        )
        scores = code_scores(self._codes(wide), vector)
        return self._ids[wide[_within_margin(scores, size, keep)]].tobytes()

    def _codes(self, positions: npt.NDArray[np.intp]) -> Words:
        """The whole codes at `positions`, a code per row, their words in order again."""
        codes = np.empty((positions.size, self._words), dtype=np.uint64)
        codes[:, ::FIRST_PASS_STRIDE] = self._first[:, positions].T
        codes[:, _rest_words(self._words)] = self._rest[positions]
        return codes

    def apply(self, rows: Iterable[CodeRow], seq: int) -> None:
        """Move to `seq`: each changed row replaces what the entry had for its id (a current one with a code is
        kept, anything else dropped)."""
        self.version += 1
        for row in rows:
            at = self._find(row.id)
            if row.current and row.code is not None:
                first, rest = split_codes(codes_from_bytes(row.code, 1)[:, : self._words])
                if at is None:
                    at = self._append()
                    self._ids[at] = np.frombuffer(row.id.bytes, dtype=np.uint8)
                self._first[:, at], self._rest[at] = first[:, 0], rest[0]
            elif at is not None:
                self._remove(at)
        self.seq = seq

    def _find(self, fact_id: UUID) -> int | None:
        """The row of `fact_id`: two 64-bit compares per fact (~0.2 ms at 60,000), no index kept beside it."""
        high, low = np.frombuffer(fact_id.bytes, dtype=np.uint64)
        ids = self._ids[: self._count].view(np.uint64)
        hits = np.flatnonzero((ids[:, 0] == high) & (ids[:, 1] == low))
        return int(hits[0]) if hits.size else None

    def _append(self) -> int:
        if self._count == self._ids.shape[0]:
            grow = self._count // _SPARE_SHARE + _SPARE_MIN
            self._first = np.concatenate([self._first, np.zeros((self._first.shape[0], grow), np.uint64)], axis=1)
            self._rest = np.concatenate([self._rest, np.zeros((grow, self._rest.shape[1]), np.uint64)])
            self._ids = np.concatenate([self._ids, np.zeros((grow, 16), dtype=np.uint8)])
        self._count += 1
        return self._count - 1

    def _remove(self, at: int) -> None:
        last = self._count - 1
        self._first[:, at], self._rest[at], self._ids[at] = self._first[:, last], self._rest[last], self._ids[last]
        self._count = last


class SubjectCodes:
    """Per (agent, subject) entries, least recently used evicted first past `budget_bytes` (0: off); loaded in the
    background through `tenant` (Database.tenant; without it, only what is put here is held)."""

    def __init__(self, budget_bytes: int, tenant: TenantOpener | None = None) -> None:
        self.budget_bytes = budget_bytes
        self._entries: OrderedDict[tuple[str, str], SubjectEntry] = OrderedDict()
        self._refused: set[tuple[str, str]] = set()
        self.loader = None if tenant is None else EntryLoader(self, tenant)

    @property
    def enabled(self) -> bool:
        return self.budget_bytes > 0

    @property
    def nbytes(self) -> int:
        return sum(entry.nbytes for entry in self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, agent_id: str, entity_key: str) -> SubjectEntry | None:
        """The subject's entry (now the most recently used), if cached."""
        entry = self._entries.get((agent_id, entity_key))
        if entry is not None:
            self._entries.move_to_end((agent_id, entity_key))
        return entry

    def wants(self, agent_id: str, entity_key: str) -> bool:
        """Whether a read that found this subject large should load it: not cached, and not refused for size."""
        key = (agent_id, entity_key)
        return self.enabled and key not in self._entries and key not in self._refused

    def put(self, agent_id: str, entity_key: str, entry: SubjectEntry) -> None:
        """Keep `entry` unless a newer one of the subject is already here; evict the least recently used past the
        budget. An entry larger than the whole budget is refused (and not loaded again)."""
        key = (agent_id, entity_key)
        if entry.nbytes > self.budget_bytes:
            self._entries.pop(key, None)
            if len(self._refused) >= _REFUSED_MAX:
                self._refused.clear()
            self._refused.add(key)
            return
        held = self._entries.get(key)
        if held is not None and held.entity_id == entry.entity_id and held.seq >= entry.seq:
            return
        self._entries[key] = entry
        self._entries.move_to_end(key)
        self.shrink()

    def forget(self, agent_id: str, entity_key: str) -> None:
        self._entries.pop((agent_id, entity_key), None)

    def shrink(self) -> None:
        """Evict least recently used entries until the held codes fit the budget (entries grow with deltas)."""
        total = self.nbytes
        while total > self.budget_bytes and self._entries:
            _key, evicted = self._entries.popitem(last=False)
            total -= evicted.nbytes


class EntryLoader(AgentQueue[dict[str, None]]):
    """Loads the entries a cache's reads ask for, one agent's subjects at a time, on one background task of the
    running event loop, each agent's in a tenant transaction of its own."""

    def __init__(self, codes: SubjectCodes, tenant: TenantOpener) -> None:
        super().__init__("subject codes")
        self._codes, self._tenant = codes, tenant
        self._load: EntryLoad | None = None
        self.loads = 0

    def schedule(self, agent_id: str, keys: Iterable[str], load: EntryLoad) -> None:
        """Load the entries of `agent_id`'s subjects `keys` soon, with `load`: those the cache wants and not asked
        for already."""
        self._load = load
        for key in keys:
            if self._codes.wants(agent_id, key) and not self._asked_for(agent_id, key):
                self._waiting.setdefault(agent_id, {})[key] = None
        self._start()

    def _asked_for(self, agent_id: str, key: str) -> bool:
        """Whether the subject's load waits or runs."""
        serving = self._serving
        in_flight = serving is not None and serving[0] == agent_id and key in serving[1]
        return in_flight or key in self._waiting.get(agent_id, {})

    async def _serve(self, agent_id: str, work: dict[str, None]) -> None:
        assert self._load is not None  # set by the schedule() that asked for the work
        async with self._tenant(agent_id) as conn:
            await self._load(conn, self._codes, agent_id, list(work))
        self.loads += len(work)

    def _failed(self, agent_id: str, work: dict[str, None]) -> str:
        return (
            f"the codes of {len(work)} large subject(s) of agent {agent_id!r} were not loaded (their candidates are"
            " shortlisted on the server meanwhile; the next read asks again)"
        )


# The cache of the Database whose pool opened each connection (weak: a closed connection leaves it).
_BY_CONNECTION: weakref.WeakKeyDictionary[object, SubjectCodes] = weakref.WeakKeyDictionary()


def attach(connection: object, cache: SubjectCodes) -> None:
    """Make `cache` the one candidate reads on `connection` use (Database does it for each pooled connection)."""
    _BY_CONNECTION[connection] = cache


def cache_of(connection: object) -> SubjectCodes | None:
    """The cache of the database `connection` belongs to; None for a connection no Database opened, or when off."""
    cache = _BY_CONNECTION.get(connection)
    return cache if cache is not None and cache.enabled else None
