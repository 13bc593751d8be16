"""The facts' HNSW index definitions side by side on one seeded database: `python benchmarks/fact_index.py`.

benchmarks/scale.py measures whole writes, where an index change is a few ms among many stages on a shared machine.
This script isolates the index. It seeds the agents of benchmarks/scale.py once (100 / 10,000 / 100,000 facts,
HashEmbedder vectors, the planted facts), then builds each definition in turn (the others dropped) and measures,
on the same rows and in the same minutes:

- scan: the candidate statement for the 100,000-fact agent's subject (60,000 facts), iterative scan,
  `ef_search` 1000 (the SDK's), 40 rows re-ranked by full-precision distance: p50 / p95 ms over the probes;
- recall: the planted facts whose near-duplicate finds them in the re-ranked top 5 (benchmarks/scale.py's
  near-duplicates; an exact ranking has each at the top), at candidate lists (`ef_search`) of 100, 400 and 1000;
- insert / close / confirm: one current fact inserted with its vector, one closed (valid_to set), one confirmed
  (last_confirmed_at set), each in its own transaction, rolled back afterwards so every definition sees the same
  rows: p50 / p95 ms. The index work is done before the rollback.

    python benchmarks/fact_index.py [--sizes 100 10000 100000] [--ops 60] [--definitions before after]
    python benchmarks/fact_index.py --database-url postgresql://...   # an existing database: left with 0008's index
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped, unused-ignore]
from _common import asyncpg_dsn, database, format_table, percentile
from alembic import command
from alembic.config import Config as AlembicConfig
from pgvector import Vector
from pgvector.asyncpg import register_vector
from scale import SUBJECT_KEY, AgentSeed, build_agent, near_duplicate, seed
from sqlalchemy.ext.asyncio import create_async_engine

from memory_sdk import MemoryClient, MemoryConfig, store
from memory_sdk.store import candidates
from memory_sdk.store.database import to_async_url
from memory_sdk.testing import HashEmbedder

DIM = 1536
CURRENT = "valid_to IS NULL AND invalidated_at IS NULL"
# name -> (index definition, ORDER BY expression it serves)
DEFINITIONS = {
    "before": (
        "CREATE INDEX ix_memory_facts_embedding ON memory_facts USING hnsw (embedding vector_cosine_ops)",
        "f.embedding <=> $3",
    ),
    "after": (
        f"CREATE INDEX ix_memory_facts_embedding ON memory_facts USING hnsw ((embedding::halfvec({DIM})) "
        f"halfvec_cosine_ops) WHERE {CURRENT}",
        f"f.embedding::halfvec({DIM}) <=> $3::halfvec({DIM})",
    ),
    "after-ef128": (
        f"CREATE INDEX ix_memory_facts_embedding ON memory_facts USING hnsw ((embedding::halfvec({DIM})) "
        f"halfvec_cosine_ops) WITH (ef_construction = 128) WHERE {CURRENT}",
        f"f.embedding::halfvec({DIM}) <=> $3::halfvec({DIM})",
    ),
    # Twice the links per node (m 16 -> 32) and a wider build search: more ways into an isolated cluster.
    "after-m32": (
        f"CREATE INDEX ix_memory_facts_embedding ON memory_facts USING hnsw ((embedding::halfvec({DIM})) "
        f"halfvec_cosine_ops) WITH (m = 32, ef_construction = 128) WHERE {CURRENT}",
        f"f.embedding::halfvec({DIM}) <=> $3::halfvec({DIM})",
    ),
}
# Candidate lists the recall is measured at (the write path uses 1000: store/candidates.py).
EF_SEARCH = (100, 400, 1000)
SETTINGS = (
    "SET enable_sort = off; SET hnsw.iterative_scan = relaxed_order; SET hnsw.ef_search = 1000; "
    "SET hnsw.max_scan_tuples = 50000; SET hnsw.scan_mem_multiplier = 8; SET plan_cache_mode = force_custom_plan; "
    "SET jit = off"
)


def scan_sql(order: str) -> str:
    return f"""
        SELECT w.id FROM (
            SELECT f.id, f.embedding <=> $3 AS distance FROM memory_facts f
            WHERE f.agent_id = $1 AND f.entity_key = $2 AND f.{CURRENT.replace(" AND ", " AND f.")}
            ORDER BY {order} LIMIT 40
        ) w ORDER BY w.distance LIMIT 5"""  # noqa: S608 - constants of this script


async def timed(conn: asyncpg.Connection, sql: str, *args: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    rows = await conn.fetch(sql, *args)
    return (time.perf_counter() - started) * 1000, rows


async def rolled_back(conn: asyncpg.Connection, sql: str, *args: Any) -> float:
    """One statement in its own transaction, rolled back: its time, index maintenance included."""
    transaction = conn.transaction()
    await transaction.start()
    try:
        started = time.perf_counter()
        await conn.execute(sql, *args)
        return (time.perf_counter() - started) * 1000
    finally:
        await transaction.rollback()


async def measure(
    conn: asyncpg.Connection, name: str, agent: AgentSeed, embedder: HashEmbedder, ops: int, build_s: float | None
) -> dict[str, Any]:
    """One definition's figures; `build_s` is None to build it here, else the seed's build of this definition."""
    definition, order = DEFINITIONS[name]
    if build_s is None:
        await conn.execute("DROP INDEX IF EXISTS ix_memory_facts_embedding")
        started = time.perf_counter()
        await conn.execute("SET maintenance_work_mem = '2GB'")
        await conn.execute(definition)
        build_s = time.perf_counter() - started
    await conn.execute("ANALYZE memory_facts")
    await conn.execute(SETTINGS)
    sql = scan_sql(order)
    k = len(agent.planted) // 2
    planted = agent.planted[:k]
    vectors = await embedder.embed([near_duplicate(f.text) for f in planted])
    plan = await conn.fetch("EXPLAIN " + sql, agent.agent_id, SUBJECT_KEY, Vector(vectors[0]))
    uses_index = any("ix_memory_facts_embedding" in row[0] for row in plan)
    rng = random.Random(1)
    subject = [f for f in agent.facts if f.entity_key == SUBJECT_KEY and f.current and f not in agent.planted]
    probes = await embedder.embed([f.text + " again" for f in rng.sample(subject, ops)])
    await timed(conn, sql, agent.agent_id, SUBJECT_KEY, Vector(probes[0]))  # warm the statement and the cache
    scans = [(await timed(conn, sql, agent.agent_id, SUBJECT_KEY, Vector(v)))[0] for v in probes]
    recall: dict[int, float] = {}
    for ef_search in EF_SEARCH:
        await conn.execute(f"SET hnsw.ef_search = {ef_search}")
        found = 0
        for fact, vector in zip(planted, vectors, strict=True):
            _ms, rows = await timed(conn, sql, agent.agent_id, SUBJECT_KEY, Vector(vector))
            found += any(row["id"] == fact.id for row in rows)
        recall[ef_search] = found / max(1, len(planted))
    await conn.execute("SET hnsw.ef_search = 1000")
    texts = [f"Rafael measured the index {i} times in {name}" for i in range(ops)]
    inserts = [
        await rolled_back(
            conn,
            "INSERT INTO memory_facts (id, agent_id, entity_key, fact_text, confidence, importance, "
            "importance_category, valid_from, embedding, schema_version) "
            "VALUES ($1, $2, $3, $4, 0.9, 0.5, 'specific_event', now(), $5, 1)",
            uuid.uuid4(),
            agent.agent_id,
            SUBJECT_KEY,
            text,
            Vector(vector),
        )
        for text, vector in zip(texts, await embedder.embed(texts), strict=True)
    ]
    targets = rng.sample(subject, 2 * ops)
    closes = [
        await rolled_back(conn, "UPDATE memory_facts SET valid_to = now(), closed_at = now() WHERE id = $1", f.id)
        for f in targets[:ops]
    ]
    confirms = [
        await rolled_back(conn, "UPDATE memory_facts SET last_confirmed_at = now() WHERE id = $1", f.id)
        for f in targets[ops:]
    ]
    size_mb = await conn.fetchval("SELECT pg_relation_size('ix_memory_facts_embedding') / 1048576.0")
    return {
        "name": name,
        "build_s": build_s,
        "size_mb": float(size_mb),
        "uses_index": uses_index,
        "scan": scans,
        "recall": recall,
        "insert": inserts,
        "close": closes,
        "confirm": confirms,
    }


# --- the candidate read over binary codes (migration 0010, store/candidates.py) -----------------------------------

# Variants of the large-subject ranking, measured side by side (`--reads`): one statement per variant, $2 probes of
# one subject. "per probe" ranks each probe's shortlist with its own index-only scan of the codes (the shipped
# read's large-subject branch); "shared" reads the subject's (id, code) once into a MATERIALIZED CTE that every
# probe of the statement ranks.
READ_VARIANTS = {
    "per probe": """
    WITH p AS MATERIALIZED (
        SELECT u.*, binary_quantize(u.vec) AS code FROM unnest($2::vector[]) WITH ORDINALITY AS u(vec, ord)
    )
    SELECT p.ord, c.* FROM p CROSS JOIN LATERAL (
        SELECT f.id, f.embedding <=> p.vec AS distance
        FROM (
            SELECT s.id FROM memory_facts s
            WHERE s.agent_id = $1 AND s.entity_key = $4 AND s.valid_to IS NULL AND s.invalidated_at IS NULL
            ORDER BY s.embedding_bits <~> p.code LIMIT $3
        ) sl JOIN memory_facts f ON f.id = sl.id
        ORDER BY 2 LIMIT 5
    ) c""",
    "shared": """
    WITH p AS MATERIALIZED (
        SELECT u.*, binary_quantize(u.vec) AS code FROM unnest($2::vector[]) WITH ORDINALITY AS u(vec, ord)
    ), subject AS MATERIALIZED (
        SELECT s.id, s.embedding_bits FROM memory_facts s
        WHERE s.agent_id = $1 AND s.entity_key = $4 AND s.valid_to IS NULL AND s.invalidated_at IS NULL
    )
    SELECT p.ord, c.* FROM p CROSS JOIN LATERAL (
        SELECT f.id, f.embedding <=> p.vec AS distance
        FROM (SELECT id FROM subject ORDER BY embedding_bits <~> p.code LIMIT $3) sl
        JOIN memory_facts f ON f.id = sl.id
        ORDER BY 2 LIMIT 5
    ) c""",
}


async def measure_reads(conn: asyncpg.Connection, agent: AgentSeed, embedder: HashEmbedder, ops: int) -> list[Any]:
    """p50 / p95 ms of the shipped read (one probe) and of the variants above, 1 and 2 probes a statement, over
    shortlists of 100 / 200 / 400 and work_mem 4 MB / 64 MB."""
    rng = random.Random(2)
    subject = [f for f in agent.facts if f.entity_key == SUBJECT_KEY and f.current]
    vectors = [Vector(v) for v in await embedder.embed([f.text + " again" for f in rng.sample(subject, 2 * ops)])]
    rows = []
    for work_mem in ("4MB", "64MB"):
        await conn.execute(f"SET work_mem = '{work_mem}'")
        for shortlist in (100, 200, 400):
            for probes in (1, 2):
                shipped = [
                    (await timed(conn, *_shipped_read(agent.agent_id, vectors[i : i + probes], shortlist)))[0]
                    for i in range(0, probes * ops, probes)
                ]
                rows.append((work_mem, shortlist, "shipped read", probes, shipped))
            for name, sql in READ_VARIANTS.items():
                for probes in (1, 2):
                    # the first execution warms the statement
                    await timed(conn, sql, agent.agent_id, vectors[:probes], shortlist, SUBJECT_KEY)
                    ms = [
                        (await timed(conn, sql, agent.agent_id, vectors[i : i + probes], shortlist, SUBJECT_KEY))[0]
                        for i in range(0, probes * ops, probes)
                    ]
                    rows.append((work_mem, shortlist, name, probes, ms))
    await conn.execute("RESET work_mem")
    return rows


def _shipped_read(agent_id: str, vectors: Sequence[Vector], shortlist: int) -> tuple[Any, ...]:
    return (
        candidates._READ_SQL,
        agent_id,
        [SUBJECT_KEY] * len(vectors),
        list(vectors),
        [None] * len(vectors),
        candidates.EXACT_SCAN_MAX_FACTS,
        [5] * len(vectors),
        shortlist,
        candidates.MID_SIZE_FROM,
        candidates.MID_SHORTLIST,
    )


async def explain_read(conn: asyncpg.Connection, agent: AgentSeed, embedder: HashEmbedder) -> None:
    """EXPLAIN (ANALYZE, BUFFERS) of the shipped read as a prepared statement, at its 1st and 8th execution."""
    [vector] = await embedder.embed([agent.planted[0].text + " again"])
    literal = "'[" + ",".join(repr(x) for x in vector) + "]'"
    await conn.execute(
        "PREPARE candidate_read(text, text[], vector[], text[], int, int[], int, int, int) AS " + candidates._READ_SQL
    )
    execute = (
        f"EXECUTE candidate_read('{agent.agent_id}', ARRAY['{SUBJECT_KEY}'], ARRAY[{literal}::vector], "
        f"ARRAY[NULL::text], {candidates.EXACT_SCAN_MAX_FACTS}, ARRAY[5], {candidates.BINARY_SHORTLIST}, "
        f"{candidates.MID_SIZE_FROM}, {candidates.MID_SHORTLIST})"
    )
    for execution in range(1, 9):
        if execution in (1, 8):
            plan = await conn.fetch("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + execute)
            print(f"\nexecution {execution} of the prepared candidate read:")
            print("\n".join(row[0] for row in plan))
        else:
            await conn.execute(execute)
    counts = await conn.fetchrow(
        "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE name = 'candidate_read'"
    )
    print(f"generic plans {counts['generic_plans']}, custom plans {counts['custom_plans']}")
    await conn.execute("DEALLOCATE candidate_read")


async def time_migration(url: str) -> None:
    """Seconds to downgrade the seeded rows by the latest migration (0010: the codes' column and index) and upgrade
    them again, through the SDK's migrations, as MemoryClient runs them on a database at an older revision."""
    times = {}
    for action, revision in (("downgrade", "-1"), ("upgrade", "+1")):
        started = time.perf_counter()
        engine = create_async_engine(to_async_url(url))
        try:
            async with engine.connect() as conn:
                await conn.run_sync(_migrate, action, revision)
                await conn.commit()
        finally:
            await engine.dispose()
        times[f"{action} to {revision}"] = time.perf_counter() - started
    print("the latest migration over the seeded facts: " + ", ".join(f"{k} {v:.1f} s" for k, v in times.items()))


def _migrate(connection: Any, action: str, revision: str) -> None:
    config = AlembicConfig()
    config.set_main_option("script_location", str(Path(store.__file__).parent / "migrations"))
    config.attributes["connection"] = connection
    config.attributes["embedding_dim"] = DIM
    getattr(command, action)(config, revision)


def p(values: Sequence[float], q: float) -> str:
    return f"{percentile(values, q):.1f}"


async def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 10_000, 100_000])
    parser.add_argument("--ops", type=int, default=60, help="probes, inserts, closes and confirms per definition")
    parser.add_argument("--recall-k", type=int, default=20)
    parser.add_argument("--definitions", nargs="+", default=["before", "after"], choices=sorted(DEFINITIONS))
    parser.add_argument(
        "--reads", action="store_true", help="instead of the definitions: the candidate read's variants and its plan"
    )
    parser.add_argument("--vacuum", action="store_true", help="VACUUM after the load (sets the visibility map)")
    parser.add_argument("--migration", action="store_true", help="also time the latest migration over the rows")
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args(argv)
    run = uuid.uuid4().hex[:8]
    agents = [build_agent(f"index-{size}-{run}", size, args.recall_k, 200, seed=size) for size in sorted(args.sizes)]
    embedder = HashEmbedder(dimensions=DIM)
    results = []
    with database(args.database_url) as url:
        async with MemoryClient(url, embedder=embedder, config=MemoryConfig(embedding_dim=DIM)):
            pass  # migrated
        seeded = await seed(url, agents, DIM)
        print(f"seeded {sum(a.size for a in agents):,} facts (index built in {seeded.index_s:.0f} s)")
        if args.migration:
            await time_migration(url)
        conn = await asyncpg.connect(asyncpg_dsn(url))
        try:
            await register_vector(conn)
            if args.vacuum:
                started = time.perf_counter()
                await conn.execute("VACUUM (ANALYZE) memory_facts")
                print(f"VACUUM (ANALYZE) memory_facts: {time.perf_counter() - started:.0f} s")
            if args.reads:
                await conn.execute(SETTINGS)
                await explain_read(conn, agents[-1], embedder)
                reads = await measure_reads(conn, agents[-1], embedder, args.ops)
                header = ("work_mem", "shortlist", "read", "probes", "p50 ms", "p95 ms", "per probe p50")
                table = [
                    (mem, str(n), name, str(k), p(ms, 50), p(ms, 95), f"{percentile(ms, 50) / k:.1f}")
                    for mem, n, name, k, ms in reads
                ]
                print(format_table(header, table))
                print(f"(subject of {agents[-1].subject_facts:,} facts, {args.ops} statements each)")
                return
            for number, name in enumerate(args.definitions):
                # The seed built the migration's definition (0008's: "after"); the first one reuses it if it is that.
                built = seeded.index_s if number == 0 and name == "after" else None
                results.append(await measure(conn, name, agents[-1], embedder, args.ops, built))
                print(f"  {name}: done", flush=True)
            if args.definitions[-1] != "after":  # leave the database with the migration's index (0008)
                await conn.execute("DROP INDEX ix_memory_facts_embedding")
                await conn.execute(DEFINITIONS["after"][0])
        finally:
            await conn.close()
    rows = [
        (
            r["name"],
            f"{r['build_s']:.0f}",
            f"{r['size_mb']:.0f}",
            "yes" if r["uses_index"] else "NO",
            p(r["scan"], 50),
            p(r["scan"], 95),
            " / ".join(f"{r['recall'][ef]:.2f}" for ef in EF_SEARCH),
            p(r["insert"], 50),
            p(r["insert"], 95),
            p(r["close"], 50),
            p(r["close"], 95),
            p(r["confirm"], 50),
            p(r["confirm"], 95),
        )
        for r in results
    ]
    print(
        format_table(
            (
                "index",
                "build s",
                "MB",
                "scan uses it",
                "scan p50",
                "p95",
                "recall top5 at ef " + "/".join(map(str, EF_SEARCH)),
                "insert p50",
                "p95",
                "close p50",
                "p95",
                "confirm p50",
                "p95",
            ),
            rows,
        )
    )
    print(f"(ms; {args.ops} operations each; the subject holds {agents[-1].subject_facts:,} facts)")


if __name__ == "__main__":
    asyncio.run(main())
