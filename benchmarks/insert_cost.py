"""What the fact insert costs, and where: `store/queries.insert_facts`, the largest statement of every write.

On scale.py's seed (one agent per size, HashEmbedder vectors, the facts' HNSW index built as the migration defines
it), the real statement inserts 3 new facts about the subject (and their fact-entity links) at a time, on one
connection, in transactions rolled back at the end (the HNSW graph keeps the rolled-back entries until a vacuum: a
few hundred among thousands). Two measurements:

- variants: per statement, the server backend's CPU time (read from /proc, so other work on a shared machine does
  not count; "n/a" for a server on another machine) and the wall time, with the schema as migrated, without the
  facts' HNSW index, with it rebuilt with m = 8 or ef_construction = 32 (pgvector's defaults are 16 and 64), and
  without the subject-sequence trigger (migration 0011). The first and last runs are the schema as migrated.
- checkpoint: WAL bytes and backend CPU per statement in batches right after a CHECKPOINT, when the first change of
  every page writes its full-page image to the WAL.

    python benchmarks/insert_cost.py [--sizes 100 10000] [--statements 60]
    python benchmarks/insert_cost.py --quick        # size 300, 6 statements: a smoke run
    python benchmarks/insert_cost.py --database-url postgresql://user:pw@host/db   # needs a superuser
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import asyncpg  # type: ignore[import-untyped, unused-ignore]
from _common import asyncpg_dsn, database, format_table
from pgvector.asyncpg import register_vector  # type: ignore[import-untyped, unused-ignore]
from scale import SUBJECT, SUBJECT_KEY, SUBJECT_TEMPLATES, Filler, build_agent, seed

from memory_sdk import MemoryClient, MemoryConfig
from memory_sdk.store.queries import FactRow, insert_facts
from memory_sdk.testing import HashEmbedder

FACTS_PER_STATEMENT = 3
# Unmeasured statements per transaction first: a rebuilt index's pages are read into shared_buffers by them.
WARMUP = 20
_HNSW = (
    "CREATE INDEX ix_memory_facts_embedding ON memory_facts USING hnsw ((embedding::halfvec({dim})) halfvec_cosine_ops)"
    " WITH ({options}) WHERE valid_to IS NULL AND invalidated_at IS NULL"
)
_DROP_HNSW = "DROP INDEX ix_memory_facts_embedding"
VARIANTS: dict[str, tuple[str, ...]] = {
    "as migrated": (),
    "no facts HNSW index": (_DROP_HNSW,),
    "HNSW m=8": (_DROP_HNSW, _HNSW.replace("{options}", "m = 8")),
    "HNSW ef_construction=32": (_DROP_HNSW, _HNSW.replace("{options}", "ef_construction = 32")),
    "no subject-sequence trigger": ("ALTER TABLE memory_facts DISABLE TRIGGER memory_facts_insert_stamps_seq",),
}
ORDER = (
    "as migrated",
    "no facts HNSW index",
    "HNSW m=8",
    "HNSW ef_construction=32",
    "no subject-sequence trigger",
    "as migrated",
)


class Backend:
    """One connection and the CPU time its server process has used (None when /proc does not show it)."""

    def __init__(self, conn: asyncpg.Connection, pid: int) -> None:
        self.conn = conn
        self._stat = Path(f"/proc/{pid}/stat")

    def cpu_s(self) -> float | None:
        if not self._stat.exists():
            return None
        fields = self._stat.read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


class Facts:
    """New facts about the subject: scale.py's templates filled with the agent's entities, HashEmbedder vectors."""

    def __init__(self, filler: Filler, rng: random.Random, dim: int) -> None:
        self.filler, self.rng, self.embedder = filler, rng, HashEmbedder(dimensions=dim)
        self.made = 0

    def rows(self, count: int) -> list[FactRow]:
        rows = []
        for _ in range(count):
            self.made += 1
            text = self.filler.fill(self.rng.choice(SUBJECT_TEMPLATES), datetime.now(UTC))[0] + f" ({self.made})"
            rows.append(
                FactRow(
                    id=uuid.uuid4(),
                    entity_key=SUBJECT_KEY,
                    fact_text=text,
                    attribute=None,
                    single_valued=False,
                    confidence=0.9,
                    importance=0.5,
                    importance_category="specific_event",
                    speaker=SUBJECT,
                    source_event_id=None,
                    source_context="",
                    valid_from=datetime.now(UTC),
                    valid_to=None,
                    supersedes_fact_id=None,
                    embedding=self.embedder.embed_one(text),
                    schema_version=1,
                    prompt_version=None,
                    identity_key=None,
                )
            )
        return rows


async def insert(backend: Backend, agent_id: str, facts: Facts) -> float:
    """One 3-fact insert statement; its wall time in ms."""
    rows = facts.rows(FACTS_PER_STATEMENT)
    started = time.perf_counter()
    await insert_facts(backend.conn, agent_id, rows, [(row.id, SUBJECT_KEY, True) for row in rows])
    return (time.perf_counter() - started) * 1000


async def measure_batch(backend: Backend, agent_id: str, facts: Facts, statements: int) -> tuple[str, float, float]:
    """(backend CPU ms, wall p50 ms, WAL KB) per statement over `statements` inserts."""
    lsn = "SELECT pg_current_wal_insert_lsn()"
    cpu_before, wal_before = backend.cpu_s(), await backend.conn.fetchval(lsn)
    walls = [await insert(backend, agent_id, facts) for _ in range(statements)]
    cpu_after, wal_after = backend.cpu_s(), await backend.conn.fetchval(lsn)
    wal_bytes = await backend.conn.fetchval("SELECT pg_wal_lsn_diff($1, $2)", wal_after, wal_before)
    cpu = "n/a" if cpu_before is None or cpu_after is None else f"{(cpu_after - cpu_before) * 1000 / statements:.2f}"
    return cpu, statistics.median(walls), float(wal_bytes) / 1024 / statements


async def variants(backend: Backend, agent_id: str, facts: Facts, statements: int, dim: int) -> list[list[object]]:
    rows: list[list[object]] = []
    for name in ORDER:
        transaction = backend.conn.transaction()
        await transaction.start()
        try:
            for statement in VARIANTS[name]:
                await backend.conn.execute(statement.replace("{dim}", str(dim)))
            for _ in range(WARMUP):
                await insert(backend, agent_id, facts)
            cpu, wall, wal_kb = await measure_batch(backend, agent_id, facts, statements)
            rows.append([name, cpu, f"{wall:.2f}", f"{wal_kb:.0f}"])
        finally:
            await transaction.rollback()
    return rows


async def after_checkpoint(
    backend: Backend, other: asyncpg.Connection, agent_id: str, facts: Facts, statements: int, batches: int
) -> list[list[object]]:
    rows: list[list[object]] = []
    transaction = backend.conn.transaction()
    await transaction.start()
    try:
        for _ in range(WARMUP):
            await insert(backend, agent_id, facts)
        await other.execute("CHECKPOINT")
        for batch in range(batches):
            cpu, wall, wal_kb = await measure_batch(backend, agent_id, facts, statements)
            first = batch * statements + 1
            rows.append([f"{first}-{first + statements - 1}", cpu, f"{wall:.2f}", f"{wal_kb:.0f}"])
    finally:
        await transaction.rollback()
    return rows


async def run_size(url: str, size: int, statements: int, batches: int, dim: int) -> None:
    agent = build_agent(f"insert-{size}-{uuid.uuid4().hex[:8]}", size, 3, 200, seed=size)
    await seed(url, [agent], dim)
    rng = random.Random(size)
    facts = Facts(Filler(rng, agent.others), rng, dim)
    conn = await asyncpg.connect(asyncpg_dsn(url))
    other = await asyncpg.connect(asyncpg_dsn(url))
    try:
        await register_vector(conn)
        await conn.execute("SET jit = off; SET maintenance_work_mem = '1GB'")
        backend = Backend(conn, await conn.fetchval("SELECT pg_backend_pid()"))
        header = ["", "backend CPU ms/stmt", "wall p50 ms", "WAL KB/stmt"]
        print(f"\n{size:,} facts/agent: one statement inserts {FACTS_PER_STATEMENT} facts, {statements} statements")
        print(
            format_table(
                ["variant", *header[1:]], await variants(backend, agent.agent_id, facts, statements, dim), left=1
            )
        )
        print("\nstatements after a CHECKPOINT (full-page images)")
        rows = await after_checkpoint(backend, other, agent.agent_id, facts, statements, batches)
        print(format_table(["statements", *header[1:]], rows, left=1))
    finally:
        await conn.close()
        await other.close()


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 10_000])
    parser.add_argument("--statements", type=int, default=60, help="measured statements per variant and batch")
    parser.add_argument("--batches", type=int, default=4, help="batches after the checkpoint")
    parser.add_argument("--dim", type=int, default=1536)
    parser.add_argument("--quick", action="store_true", help="size 300, 6 statements, 2 batches")
    parser.add_argument("--database-url")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.statements, args.batches = [300], 6, 2
    return args


async def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    with database(args.database_url) as url:
        async with MemoryClient(
            url, llm=None, embedder=HashEmbedder(dimensions=args.dim), config=MemoryConfig(embedding_dim=args.dim)
        ):
            pass  # migrations
        for size in args.sizes:
            await run_size(url, size, args.statements, args.batches, args.dim)


if __name__ == "__main__":
    asyncio.run(main())
