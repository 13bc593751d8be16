"""What migration 0011's change sequence costs per inserted fact: the BEFORE trigger that stamps each fact row from
its entity row (it replaces 0006's AFTER trigger, which bumped the same row) and the index on (agent_id, entity_key,
subject_seq).

Two databases on one embedded server (or `--database-url`'s), one at revision 0010 and one at head, each with one
subject of `--facts` facts (1536-dim HashEmbedder-like random vectors). Then rounds of a write's worth of facts
(`--batch`, one INSERT per fact, in one transaction, as the write path's one statement per fact batch does not
change the per-row triggers), alternating between the two databases so that the machine's load falls on both
alike. The facts' HNSW index is dropped in both, so its insert cost (5-10 ms a fact) does not drown the difference.

    python benchmarks/subject_seq.py [--facts 20000] [--rounds 300] [--batch 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from typing import Any

import asyncpg  # type: ignore[import-untyped, unused-ignore]
import numpy as np
from _common import asyncpg_dsn, database, format_table
from alembic import command
from alembic.config import Config as AlembicConfig
from pgvector.asyncpg import register_vector
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from memory_sdk.store.database import _MIGRATIONS, to_async_url

DIM = 1536
INSERT = (
    "INSERT INTO memory_facts (id, agent_id, entity_key, fact_text, confidence, importance, importance_category, "
    "valid_from, embedding, schema_version) VALUES ($1, 'bench', 'person:rafael', $2, 0.9, 0.5, 'routine_activity', "
    "now(), $3, 1)"
)


async def migrate(url: str, revision: str) -> None:
    def upgrade(connection: Any) -> None:
        config = AlembicConfig()
        config.set_main_option("script_location", str(_MIGRATIONS))
        config.attributes["connection"] = connection
        config.attributes["embedding_dim"] = DIM
        command.upgrade(config, revision)

    engine = create_async_engine(to_async_url(url))
    try:
        async with engine.begin() as conn:
            await conn.run_sync(upgrade)
    finally:
        await engine.dispose()


async def seed(conn: Any, facts: int, rng: np.random.Generator) -> None:
    await conn.execute("DROP INDEX IF EXISTS ix_memory_facts_embedding")
    await conn.execute(
        "INSERT INTO memory_entities (id, agent_id, entity_key, display_name, entity_type) "
        "VALUES ($1, 'bench', 'person:rafael', 'Rafael', 'person')",
        uuid.uuid4(),
    )
    for start in range(0, facts, 2000):
        rows = [
            (uuid.uuid4(), "bench", "person:rafael", f"fact {n}", 0.9, 0.5, "routine_activity", 1, vector)
            for n, vector in zip(range(start, min(facts, start + 2000)), rng.standard_normal((2000, DIM)), strict=False)
        ]
        await conn.executemany(
            "INSERT INTO memory_facts (id, agent_id, entity_key, fact_text, confidence, importance, "
            "importance_category, valid_from, schema_version, embedding) "
            "VALUES ($1, $2, $3, $4, $5, $6, $7, now(), $8, $9)",
            rows,
        )
    await conn.execute("VACUUM ANALYZE memory_facts")
    await conn.execute("VACUUM ANALYZE memory_entities")


async def write_round(conn: Any, batch: int, rng: np.random.Generator) -> float:
    """One transaction of `batch` inserts: its time per fact, in ms."""
    vectors = rng.standard_normal((batch, DIM)).astype(np.float32)
    started = time.perf_counter()
    async with conn.transaction():
        for vector in vectors:
            await conn.execute(INSERT, uuid.uuid4(), "a new fact", vector)
    return (time.perf_counter() - started) * 1000 / batch


async def measure(urls: dict[str, str], args: argparse.Namespace) -> dict[str, list[float]]:
    rng = np.random.default_rng(11)
    conns = {}
    for name, url in urls.items():
        conn = await asyncpg.connect(asyncpg_dsn(url))
        await register_vector(conn)
        await seed(conn, args.facts, rng)
        conns[name] = conn
    timings: dict[str, list[float]] = {name: [] for name in urls}
    try:
        for _ in range(args.rounds):
            for name, conn in conns.items():
                timings[name].append(await write_round(conn, args.batch, rng))
    finally:
        for conn in conns.values():
            await conn.close()
    return timings


async def run(url: str, args: argparse.Namespace) -> dict[str, list[float]]:
    """Two fresh databases (0010, head) on the server of `url`, measured, dropped."""
    admin = await asyncpg.connect(asyncpg_dsn(url))
    names = {revision: f"bench_seq_{revision}_{uuid.uuid4().hex[:6]}" for revision in ("0010", "head")}
    urls = {
        revision: make_url(url).set(database=name).render_as_string(hide_password=False)
        for revision, name in names.items()
    }
    try:
        for revision, name in names.items():
            await admin.execute(f'CREATE DATABASE "{name}"')
            await migrate(urls[revision], revision)
        return await measure(urls, args)
    finally:
        for name in names.values():
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--facts", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--batch", type=int, default=3)
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()
    with database(args.database_url) as url:
        timings = asyncio.run(run(url, args))
    rows = [
        (
            revision,
            f"{statistics.median(values):.3f}",
            f"{statistics.mean(values):.3f}",
            f"{np.percentile(values, 95):.3f}",
        )
        for revision, values in timings.items()
    ]
    print(
        f"insert time per fact, ms: {args.rounds} transactions of {args.batch} one-row INSERTs per schema, "
        f"alternating, into a {args.facts:,}-fact subject (no HNSW index)"
    )
    print(format_table(("schema", "median", "mean", "p95"), rows))
    base, change = (statistics.median(timings[r]) for r in ("0010", "head"))
    print(f"0011's trigger and index: {change - base:+.3f} ms per fact (median)")


if __name__ == "__main__":
    main()
