"""Helpers shared by benchmarks/scale.py and benchmarks/throughput.py: a database to run against, a timed embedder,
HashEmbedder's vectors made dense, SQL statement counting, reading the scripted LLM's prompts, percentiles and
plain-text tables."""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from memory_sdk.llm.protocols import EmbeddingProvider, LLMRequest
from memory_sdk.results import Fact, WriteResult
from memory_sdk.store.embedded import temporary_embedded_server
from memory_sdk.testing import HashEmbedder

__all__ = [
    "CITIES",
    "DenseEmbedder",
    "SqlCounter",
    "TimedEmbedder",
    "asyncpg_dsn",
    "bench_embedder",
    "database",
    "decided_facts",
    "format_table",
    "llm_ms",
    "percentile",
    "prompt_message",
    "reconciliation_prompt",
]

# Real city names, for places in seeded and written facts (the first one is where the speaker lives at first).
CITIES = (  # noqa: SIM905 - a line of names reads better than sixty short lines
    "Curitiba|Porto Alegre|Florianopolis|Sao Paulo|Campinas|Belo Horizonte|Recife|Salvador|Fortaleza|Manaus|Belem|"
    "Natal|Goiania|Londrina|Maringa|Joinville|Blumenau|Santos|Niteroi|Vitoria|Lisbon|Porto|Madrid|Barcelona|Berlin|"
    "Munich|Amsterdam|Paris|Lyon|Buenos Aires|Montevideo|Santiago|Lima|Bogota|Mexico City|Toronto|Boston|Chicago|"
    "Denver|Seattle|Austin|Dublin|Edinburgh|Vienna|Prague|Krakow|Oslo|Helsinki|Athens|Seville|Valencia|Turin|Milan|"
    "Naples|Zurich|Geneva|Hamburg|Cologne|Rotterdam|Antwerp"
).split("|")


@contextmanager
def database(database_url: str | None) -> Iterator[str]:
    """`database_url` as it is, or a fresh embedded server in a temporary directory, stopped and removed after."""
    if database_url:
        yield database_url
        return
    with temporary_embedded_server("memory-sdk-bench-") as url:
        yield url


def asyncpg_dsn(url: str) -> str:
    """The plain postgresql:// form of a SQLAlchemy URL, for asyncpg.connect()."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


class TimedEmbedder:
    """An EmbeddingProvider around another one that sums the time spent in it (the embedder is not the SDK)."""

    def __init__(self, inner: EmbeddingProvider) -> None:
        self.inner = inner
        self.seconds = 0.0
        self.calls = 0

    @property
    def dimensions(self) -> int:
        return self.inner.dimensions

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        started = time.perf_counter()
        try:
            return await self.inner.embed(texts)
        finally:
            self.seconds += time.perf_counter() - started
            self.calls += 1


class DenseEmbedder:
    """HashEmbedder's vectors (or another embedder's) turned by one fixed orthogonal transform: every cosine as the
    inner embedder's, but every dimension used, as in a real model's vectors.

    HashEmbedder hashes a text's features into a few dozen of its dimensions and leaves the others 0. Such vectors
    are not what the SDK stores for a real model: PostgreSQL compresses them to a tenth (so a storage setting that
    allows compression flatters them), and their binary codes are mostly zero bits (so the Hamming shortlist ranks
    them otherwise than a model's). The transform, the same for every text (seeded), is orthogonal, so it keeps
    every dot product: per block of the largest power of two dividing the dimension, random signs then a normalised
    Walsh-Hadamard transform, then a random permutation of all dimensions, twice; no BLAS call (its threads would
    compete with the SDK on a 2-core machine), ~0.3 ms a vector. HashEmbedder's weights are multiples of 0.5, so
    the turned values still repeat byte patterns (a fifth of the seed's vectors compressed to 70%); each value is then
    moved by a relative 1e-4 at most, the same way for the same text, which leaves the cosines within ~1e-4 and the
    bytes as incompressible as a model's."""

    def __init__(self, inner: Any, seed: int = 20261203) -> None:
        self.inner = inner
        dimensions: int = inner.dimensions
        self._block = dimensions & -dimensions
        if self._block < 64:
            raise ValueError("DenseEmbedder needs a dimension divisible by 64")
        rng = np.random.default_rng(seed)
        self._rounds = [(rng.choice((-1.0, 1.0), dimensions), rng.permutation(dimensions)) for _ in range(2)]

    @property
    def dimensions(self) -> int:
        return int(self.inner.dimensions)

    @property
    def model_id(self) -> str:
        return f"{getattr(self.inner, 'model_id', 'custom')}+dense"

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors = await self.inner.embed(texts)
        return [self.turn(vector, text) for vector, text in zip(vectors, texts, strict=True)]

    def embed_one(self, text: str) -> list[float]:
        """One text's vector, synchronously (what scale.py's seed asks of an embedder)."""
        return self.turn(self.inner.embed_one(text), text)

    def turn(self, vector: Sequence[float], text: str) -> list[float]:
        values: npt.NDArray[np.float64] = np.asarray(vector, dtype=np.float64)
        for signs, permutation in self._rounds:
            values = _walsh_hadamard(values * signs, self._block)[permutation]
        jitter = np.random.default_rng(int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big"))
        turned: list[float] = (values * (1.0 + jitter.uniform(-1e-4, 1e-4, values.size))).tolist()
        return turned


def bench_embedder(dimensions: int) -> DenseEmbedder:
    """The embedder of scale.py's and ab.py's seeds and writes: HashEmbedder's vectors made dense. One function for
    both, so the stored vectors and the probes are in one vector space."""
    return DenseEmbedder(HashEmbedder(dimensions=dimensions))


def _walsh_hadamard(values: npt.NDArray[np.float64], block: int) -> npt.NDArray[np.float64]:
    """The normalised Walsh-Hadamard transform of each consecutive `block` of `values` (orthogonal)."""
    rows = values.reshape(-1, block)
    half = 1
    while half < block:
        pairs = rows.reshape(rows.shape[0], -1, 2, half)
        rows = np.stack((pairs[:, :, 0] + pairs[:, :, 1], pairs[:, :, 0] - pairs[:, :, 1]), axis=2)
        half *= 2
    scaled: npt.NDArray[np.float64] = rows.reshape(values.shape) / np.sqrt(block)
    return scaled


@dataclass
class SqlCounts:
    statements: int = 0  # every statement sent to the server except BEGIN / COMMIT / ROLLBACK; SAVEPOINTs included
    savepoints: int = 0  # SAVEPOINT / RELEASE SAVEPOINT / ROLLBACK TO SAVEPOINT
    transactions: int = 0  # BEGINs, not counting the pings'
    pings: int = 0  # pool pre-pings: SQLAlchemy's asyncpg ping is BEGIN; ";"; ROLLBACK on checkout
    # the fact indexer's batches (store/indexing.py: one statement each, after the writes, in the background);
    # not in `statements`
    index_batches: int = 0

    def minus(self, other: SqlCounts) -> SqlCounts:
        return SqlCounts(
            self.statements - other.statements,
            self.savepoints - other.savepoints,
            self.transactions - other.transactions,
            self.pings - other.pings,
            self.index_batches - other.index_batches,
        )


_SAVEPOINT = re.compile(r"^\s*(SAVEPOINT|RELEASE\s+SAVEPOINT|ROLLBACK\s+TO)\b", re.IGNORECASE)
_BEGIN = re.compile(r"^\s*(BEGIN|START\s+TRANSACTION)\b", re.IGNORECASE)
_END = re.compile(r"^\s*(COMMIT|ROLLBACK|END)\s*;?\s*$", re.IGNORECASE)
_INDEXER = "SET indexed = true"  # the fact indexer's statement (store/indexing.INDEX_SQL)


class SqlCounter:
    """Counts the statements and transactions the SDK sends, whichever way it sends them.

    Statements executed through SQLAlchemy are seen by its "before_cursor_execute" event; statements an SDK runs on
    the pooled connection's asyncpg driver directly (and every BEGIN, which asyncpg's transaction object sends for
    SQLAlchemy too) are seen by an asyncpg query logger attached to each connection at connect and checkout.
    asyncpg logs its callbacks with call_soon: `await counter.settle()` before reading the counts.
    """

    def __init__(self, engine: AsyncEngine) -> None:
        self.counts = SqlCounts()
        self._attached: weakref.WeakSet[Any] = weakref.WeakSet()
        event.listen(engine.sync_engine, "before_cursor_execute", self._cursor_statement)
        event.listen(engine.sync_engine, "connect", self._attach)
        event.listen(engine.sync_engine, "checkout", self._attach)

    async def settle(self) -> SqlCounts:
        for _ in range(3):
            await asyncio.sleep(0)
        counts = self.counts
        return SqlCounts(counts.statements, counts.savepoints, counts.transactions, counts.pings, counts.index_batches)

    def _attach(self, dbapi_connection: Any, *args: Any) -> None:
        driver = getattr(dbapi_connection, "driver_connection", None)
        if driver is not None and hasattr(driver, "add_query_logger") and driver not in self._attached:
            driver.add_query_logger(self._driver_statement)
            self._attached.add(driver)

    def _count(self, statement: str) -> None:
        if _INDEXER in statement:
            self.counts.index_batches += 1
        elif _BEGIN.match(statement):
            self.counts.transactions += 1
            first = statement.partition(";")[2]  # BEGIN sent with the transaction's first statement (Database.tenant)
            if first.strip():
                self._count(first)
        elif statement.strip() == ";":
            self.counts.pings += 1
            self.counts.transactions -= 1  # the ping's own BEGIN
        elif not _END.match(statement):
            self.counts.statements += 1
            if _SAVEPOINT.match(statement):
                self.counts.savepoints += 1

    def _cursor_statement(
        self, conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool
    ) -> None:
        # SQLAlchemy runs single statements as asyncpg prepared statements, which asyncpg does not log; its
        # executemany goes through asyncpg's executemany, which the driver logger counts.
        if not executemany:
            self._count(statement)

    def _driver_statement(self, record: Any) -> None:
        self._count(record.query)


def llm_ms(result: WriteResult) -> float:
    """Time the write spent waiting on LLM calls, from its trace (verbose=True)."""
    if result.pipeline is None:
        return 0.0
    return sum(call.duration_ms for step in result.pipeline.steps for call in step.llm_calls)


_MESSAGE = re.compile(r"Message:\n<<<\n(.*)\n>>>", re.DOTALL)
_NEW_FACT = re.compile(r"New fact \(from a message sent on [^)]*\):\n(.*?)\n\nAnswer", re.DOTALL)
_CANDIDATE = re.compile(r"^(\d+)\. (.*) \(true since \d{4}-\d{2}-\d{2}\)$")


def prompt_message(request: LLMRequest) -> str:
    """The user message an extraction prompt carries (between <<< and >>>)."""
    found = _MESSAGE.findall(request.messages[-1]["content"])
    return found[-1].strip() if found else ""


def reconciliation_prompt(request: LLMRequest) -> tuple[str, list[str]]:
    """The new fact and the candidate facts (in their shown order, "1" first) of a reconciliation prompt."""
    content = request.messages[-1]["content"]
    found = _NEW_FACT.search(content)
    new_fact = found.group(1).strip() if found else ""
    section = content.split("Existing facts:\n", 1)[-1].split("\n\n", 1)[0]
    candidates = [m.group(2) for line in section.splitlines() if (m := _CANDIDATE.match(line.strip()))]
    return new_fact, candidates


def decided_facts(result: WriteResult) -> tuple[tuple[str, list[Fact]], ...]:
    """A write's facts under the decision that placed them, for printing what a model's answer became."""
    return (
        ("ADD", result.facts_added),
        ("UPDATE", result.facts_updated),
        ("NOOP", result.facts_unchanged),
        ("DELETE", result.facts_deleted),
    )


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def format_table(header: Sequence[str], rows: Sequence[Sequence[object]], *, left: int = 0) -> str:
    """Plain-text columns: the first `left` columns left-aligned, the others right-aligned."""
    cells = [[str(h) for h in header]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = []
    for row in cells:
        parts = [c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)
