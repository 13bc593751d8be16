"""The facts' indexes against the real database: the candidate read of a large subject scans the binary codes'
index (migration 0010), not the HNSW index (migration 0008: current facts only, half precision), with a plan of its
own at every execution; each probe gets its own top-k; a search of a past view walks the HNSW index and still ranks
closed facts."""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from alembic import command
from alembic.config import Config as AlembicConfig
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from memory_sdk import MemoryConfig, store
from memory_sdk.store import search as search_store
from memory_sdk.store.candidates import (
    _CACHED_READ_SQL,
    _READ_SQL,
    EXACT_SCAN_MAX_FACTS,
    MID_SIZE_FROM,
    CandidateProbe,
    nearest_current_facts,
)
from memory_sdk.store.database import to_async_url
from memory_sdk.testing import HashEmbedder, ScriptedLLM
from tests.conftest import ClientFactory
from tests.test_candidates import TOPICS, exact_top, fact_texts, seed_subject
from tests.test_search import answer, fact

pytestmark = pytest.mark.integration

T1 = datetime(2025, 3, 1, 10, 0, tzinfo=UTC)
T2 = datetime(2025, 6, 15, 10, 0, tzinfo=UTC)

_HNSW_SCANS = "SELECT pg_stat_get_xact_numscans('ix_memory_facts_embedding'::regclass)"
BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


async def test_a_large_subjects_candidates_are_exact_and_never_walk_the_hnsw_index(
    make_client: ClientFactory, agent_id: str
) -> None:
    embedder = HashEmbedder()
    texts = fact_texts(80, "Rafael")
    async with make_client() as memory:
        await seed_subject(memory.database, agent_id, "person:rafael", texts, embedder)
        [query] = await embedder.embed(["Rafael gosta de jazz número 3"])
        async with memory.database.tenant(agent_id) as conn:
            [found] = await nearest_current_facts(
                conn, agent_id, [CandidateProbe("person:rafael", query)], 5, large_from=10
            )
            hnsw = await conn.fetchval(_HNSW_SCANS)  # this transaction's scans of the index
    assert hnsw == 0
    # The codes only shortlist: the similarities are the full-precision ones of an exact search.
    vectors = await embedder.embed(texts)
    assert [c.similarity for c in found] == pytest.approx(exact_top(vectors, query, 5), abs=1e-6)


async def test_the_server_side_read_stays_custom_and_the_cached_read_generic_past_the_sixth_execution(
    make_client: ClientFactory, agent_id: str
) -> None:
    """A generic plan (from the sixth execution of a prepared statement, unless plan_cache_mode forbids it) is
    planned without the subject's size or vector: the server-side read is planned for its own values at every
    execution. The cached read keeps one generic plan (its rankings are exact sorts, so a plan changes only its
    speed: same rows as the server-side read here), and the transaction's custom plans are back after it. (The plan
    at 60,000 facts, an index-only scan of the codes, is in docs/benchmarks.md: a table of a few hundred rows is
    read faster by other plans.)"""
    embedder = HashEmbedder()
    async with make_client(pool_size=1) as memory:  # one connection: its prepared statements are reused
        await seed_subject(memory.database, agent_id, "person:rafael", fact_texts(60, "Rafael"), embedder)
        queries = await embedder.embed([f"Rafael gosta de {topic}" for topic in TOPICS[:8]])
        cached: list[list[UUID]] = []
        for query in queries:
            async with memory.database.tenant(agent_id) as conn:
                [found] = await nearest_current_facts(
                    conn, agent_id, [CandidateProbe("person:rafael", query)], 5, large_from=10
                )
                cached.append([c.id for c in found])
                assert await conn.fetchval(_HNSW_SCANS) == 0
                assert await conn.fetchval("SELECT current_setting('plan_cache_mode')") == "force_custom_plan"
        async with memory.database.tenant(agent_id) as conn:
            # The first read ranks on the server (_READ_SQL) and loads the subject's codes; the others rank the
            # client's shortlist (_CACHED_READ_SQL).
            plans = {
                row["statement"]: (row["generic_plans"], row["custom_plans"])
                for row in await conn.fetch(
                    "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements"
                    " WHERE statement = ANY ($1)",
                    [_READ_SQL, _CACHED_READ_SQL],
                )
            }
            # What forbids the generic plan: under `auto` PostgreSQL picks one whenever it costs no more than the
            # custom plans did, which depends on the data (here the custom plans stayed cheaper).
            mode = await conn.fetchval("SELECT current_setting('plan_cache_mode')")
        # The same queries ranked on the server alone (no cache) on fresh plans: the cached read's generic plan
        # returned their rows.
        uncached_config = MemoryConfig(subject_code_cache_mb=0)
        async with (
            make_client(pool_size=1, config=uncached_config) as uncached,
            uncached.database.tenant(agent_id) as conn,
        ):
            for query, ids in zip(queries, cached, strict=True):
                [found] = await nearest_current_facts(
                    conn, agent_id, [CandidateProbe("person:rafael", query)], 5, large_from=10
                )
                assert [c.id for c in found] == ids
    assert plans == {_READ_SQL: (0, 1), _CACHED_READ_SQL: (len(queries) - 1, 0)}
    assert mode == "force_custom_plan"


async def test_every_transaction_keeps_custom_plans_the_apply_transaction_too(
    make_client: ClientFactory, agent_id: str
) -> None:
    """The transaction that takes advisory locks (upsert's apply transaction) plans its statements for their values
    like every other: it once let them go generic (auto), and a generic plan walked an attribute's whole history
    (tests/test_timeline_index.py)."""
    show = "SELECT current_setting('plan_cache_mode')"
    async with make_client(pool_size=1) as memory:  # one connection: a setting that leaked would show
        async with memory.database.tenant(agent_id) as conn:
            assert await conn.fetchval(show) == "force_custom_plan"
        async with memory.database.tenant(agent_id, [7, 11]) as conn:
            assert await conn.fetchval(show) == "force_custom_plan"
        async with memory.database.tenant(agent_id) as conn:
            assert await conn.fetchval(show) == "force_custom_plan"


@pytest.mark.parametrize("large_from", [1_000, 10], ids=["exact-scan", "binary-codes"])
async def test_each_probe_gets_its_own_top_k(make_client: ClientFactory, agent_id: str, large_from: int) -> None:
    embedder = HashEmbedder()
    async with make_client() as memory:
        await seed_subject(memory.database, agent_id, "person:rafael", fact_texts(40, "Rafael"), embedder)
        await seed_subject(memory.database, agent_id, "person:ana", fact_texts(40, "Ana"), embedder)
        [query] = await embedder.embed(["gosta de jazz"])
        probes = [
            CandidateProbe("person:rafael", query, limit=2),
            CandidateProbe("person:ana", query),
            CandidateProbe("person:rafael", query, limit=0),
        ]
        async with memory.database.tenant(agent_id) as conn:
            rafael, ana, none = await nearest_current_facts(conn, agent_id, probes, 6, large_from=large_from)
    assert [len(rafael), len(ana), len(none)] == [2, 6, 0]
    assert {c.entity_key for c in rafael} == {"person:rafael"} and {c.entity_key for c in ana} == {"person:ana"}


async def test_a_past_view_search_ranks_closed_facts_beside_the_index_walk(
    make_client: ClientFactory, agent_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    llm = ScriptedLLM(
        {
            "informed_extraction": [
                answer(
                    [("Rafael", "person")],
                    [
                        fact("Rafael", "Rafael adora feijoada"),
                        fact("Rafael", "Rafael mora em Curitiba", attribute="lives_in"),
                    ],
                ),
                answer(
                    [("Rafael", "person")],
                    [fact("Rafael", "Rafael mora em São Paulo", action="UPDATE", attribute="lives_in")],
                ),
            ],
            "reconciliation": [{"action": "UPDATE", "target": "1"}],
        }
    )
    async with make_client(llm) as memory:
        await memory.write(agent_id, "Adoro feijoada e moro em Curitiba", speaker_name="Rafael", occurred_at=T1)
        await memory.write(agent_id, "Me mudei pra São Paulo", speaker_name="Rafael", occurred_at=T2)
        # Every agent counts as large and one fact per signal: the vector signal walks the index, which holds the
        # current facts only; Curitiba's closed fact is true on T1 and nearest to the query.
        monkeypatch.setattr(search_store, "EXACT_SCAN_MAX_FACTS", 1)
        monkeypatch.setattr(search_store, "SIGNAL_POOL", 1)
        hits = await memory.search(agent_id, "Rafael mora em Curitiba", as_of=T1 + timedelta(days=1), k=1)
    by_vector = [hit.fact.text for hit in hits if hit.signals.get("vector") == 1]
    assert by_vector == ["Rafael mora em Curitiba"]


@pytest.mark.skipif(not (BENCHMARKS / "recall.py").exists(), reason="benchmarks/ is not in this tree")
async def test_recall_benchmark_checks_its_exact_ranking_against_the_database_and_scores_the_sdk_read(
    database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """benchmarks/recall.py's quick form: its own exact top 5 is the database's, and the SDK's read gets a row, for
    the large subject and for the mid-size ones."""
    pytest.importorskip("numpy")
    sys.path.insert(0, str(BENCHMARKS))
    try:
        recall = importlib.import_module("recall")
        await recall.main(["--quick", "--no-sweep", "--database-url", database_url])
    finally:
        sys.path.remove(str(BENCHMARKS))
    out = capsys.readouterr().out
    assert "exact top 5 computed here = the database's exact scan on 4/4" in out
    shipped = r"^\s+1\s+\d+\s+sdk as shipped \(binary \d+\)\s+[01]\.\d{3}\s+\d+/240\s+\d\.\d{4}(\s+[01]\.\d\d){6}\s"
    assert re.search(shipped, out, re.MULTILINE)
    # The mid-size subjects (5 other entities of ~160 facts at 2,000): the exact read agrees with the truth computed
    # here, the shortlist's read is scored, and each near-duplicate's target is counted.
    assert f"mid-size subjects ({MID_SIZE_FROM}-{EXACT_SCAN_MAX_FACTS - 1} current facts, 5 of them)" in out
    for kind in ("near-duplicate", "new fact"):
        assert re.search(rf"^\s*{kind}\s+10\s+[01]\.\d{{3}}\s+1\.000\s+", out, re.MULTILINE), out


async def _migrate(url: str, action: str, revision: str) -> None:
    def run(connection: Any) -> None:
        config = AlembicConfig()
        config.set_main_option("script_location", str(Path(store.__file__).parent / "migrations"))
        config.attributes["connection"] = connection
        config.attributes["embedding_dim"] = 1536
        getattr(command, action)(config, revision)

    engine = create_async_engine(to_async_url(url))
    try:
        async with engine.connect() as conn:
            await conn.run_sync(run)
            await conn.commit()
    finally:
        await engine.dispose()


async def test_migration_0010_codes_the_stored_facts_and_indexes_them_with_the_identity_key(
    fresh_database_url: str,
) -> None:
    await _migrate(fresh_database_url, "upgrade", "0009")
    engine = create_async_engine(to_async_url(fresh_database_url))
    [vector] = await HashEmbedder().embed(["Rafael gosta de jazz"])
    listing = (
        "SELECT column_name::text FROM information_schema.columns WHERE table_name = 'memory_facts' "
        "AND column_name = 'embedding_bits' UNION ALL "
        "SELECT indexdef FROM pg_indexes WHERE tablename = 'memory_facts' AND indexname LIKE 'ix_memory_facts_current%'"
    )
    try:
        async with engine.begin() as conn:
            await conn.execute(
                text(
                    "INSERT INTO memory_entities (id, agent_id, entity_key, display_name, entity_type) "
                    "VALUES (gen_random_uuid(), 'a', 'person:rafael', 'Rafael', 'person')"
                )
            )
            await conn.execute(
                text(
                    "INSERT INTO memory_facts (id, agent_id, entity_key, fact_text, confidence, importance, "
                    "importance_category, valid_from, embedding, schema_version) "
                    "SELECT gen_random_uuid(), 'a', 'person:rafael', t, 0.9, 0.5, 'routine_activity', now(), "
                    "CAST(v AS vector), 1 FROM (VALUES ('with a vector', :vector), ('without', NULL)) AS r(t, v)"
                ),
                {"vector": str(vector)},
            )
        await _migrate(fresh_database_url, "upgrade", "head")
        async with engine.connect() as conn:
            codes = (
                await conn.execute(
                    text(
                        "SELECT fact_text, embedding_bits = binary_quantize(embedding)::bit(1536), "
                        "length(embedding_bits) FROM memory_facts ORDER BY fact_text"
                    )
                )
            ).all()
            upgraded = (await conn.execute(text(listing))).scalars().all()
        await _migrate(fresh_database_url, "downgrade", "0009")
        async with engine.connect() as conn:
            downgraded = (await conn.execute(text(listing))).scalars().all()
    finally:
        await engine.dispose()
    assert codes == [("with a vector", True, 1536), ("without", None, None)]
    assert upgraded[0] == "embedding_bits" and len(upgraded) == 2
    assert "ix_memory_facts_current_bits" in upgraded[1]
    assert "(agent_id, entity_key, identity_key) INCLUDE (id, embedding_bits) WHERE" in upgraded[1]
    assert len(downgraded) == 1 and "ix_memory_facts_current_identity" in downgraded[0]
    assert "INCLUDE" not in downgraded[0]


def test_migration_0010_gives_the_rebuilt_hnsw_graph_its_memory_and_never_lowers_the_setting() -> None:
    """Adding the codes' column rebuilds the HNSW index; a graph larger than maintenance_work_mem is built on disk
    (155 s against 54.5 s for 110,100 facts: docs/benchmarks.md)."""
    path = Path(store.__file__).parent / "migrations" / "versions" / "0010_current_facts_bits.py"
    spec = importlib.util.spec_from_file_location("migration_0010", path)
    assert spec is not None and spec.loader is not None
    migration = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(migration)
    mb = 2**20
    assert migration.build_memory_mb(400 * mb, 64 * mb) == 564  # the graph and a quarter, plus 64 MB
    assert migration.build_memory_mb(10 * 2**30, 64 * mb) == 2048  # at most 2 GB
    assert migration.build_memory_mb(0, 64 * mb) is None  # an empty index fits in the default
    assert migration.build_memory_mb(400 * mb, 4096 * mb) is None  # never lowered
