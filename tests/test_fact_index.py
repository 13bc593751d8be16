"""The facts' HNSW index (migration 0008: current facts only, half precision) against the real database: the
candidate query walks it, each probe gets its own top-k, and a search of a past view still ranks closed facts."""

from __future__ import annotations

import importlib
import re
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from memory_sdk.store import search as search_store
from memory_sdk.store.candidates import HNSW_FACT_EF_SEARCH, CandidateProbe, nearest_current_facts
from memory_sdk.testing import HashEmbedder, ScriptedLLM
from tests.conftest import ClientFactory
from tests.test_candidates import exact_top, fact_texts, seed_subject
from tests.test_search import answer, fact

pytestmark = pytest.mark.integration

T1 = datetime(2025, 3, 1, 10, 0, tzinfo=UTC)
T2 = datetime(2025, 6, 15, 10, 0, tzinfo=UTC)

_INDEX_SCANS = "SELECT pg_stat_get_xact_numscans('ix_memory_facts_embedding'::regclass)"
BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


async def test_a_large_subjects_candidates_come_from_the_current_facts_index(
    make_client: ClientFactory, agent_id: str
) -> None:
    embedder = HashEmbedder()
    texts = fact_texts(80, "Rafael")
    async with make_client() as memory:
        await seed_subject(memory.database, agent_id, "person:rafael", texts, embedder)
        [query] = await embedder.embed(["Rafael gosta de jazz número 3"])
        async with memory.database.tenant(agent_id) as conn:
            [found] = await nearest_current_facts(
                conn, agent_id, [CandidateProbe("person:rafael", query)], 5, exact_below=10
            )
            scans = await conn.fetchval(_INDEX_SCANS)  # this transaction's scans of the index
    assert scans >= 1  # planned as an index scan: the query's ORDER BY and WHERE match the partial halfvec index
    # Half precision only orders the walk: the similarities are the full-precision ones of an exact search.
    vectors = await embedder.embed(texts)
    assert [c.similarity for c in found] == pytest.approx(exact_top(vectors, query, 5), abs=1e-6)


async def test_the_candidate_read_searches_with_its_own_candidate_list_not_the_connections(
    make_client: ClientFactory, agent_id: str
) -> None:
    """The pooled connection's ef_search (100) serves other reads; the candidate read widens it for its transaction
    (docs/benchmarks.md, recall with real embedding geometry: the widest walk misses a near-duplicate least)."""
    embedder = HashEmbedder()
    async with make_client() as memory:
        await seed_subject(memory.database, agent_id, "person:rafael", fact_texts(40, "Rafael"), embedder)
        [query] = await embedder.embed(["Rafael gosta de jazz"])
        async with memory.database.tenant(agent_id) as conn:
            before = await conn.fetchval("SELECT current_setting('hnsw.ef_search')")
            await nearest_current_facts(conn, agent_id, [CandidateProbe("person:rafael", query)], 5, exact_below=10)
            during = await conn.fetchval("SELECT current_setting('hnsw.ef_search')")
        async with memory.database.tenant(agent_id) as conn:
            after = await conn.fetchval("SELECT current_setting('hnsw.ef_search')")
    assert (before, during, after) == ("100", str(HNSW_FACT_EF_SEARCH), "100")


@pytest.mark.parametrize("exact_below", [1_000, 10], ids=["exact-scan", "hnsw-iterative-scan"])
async def test_each_probe_gets_its_own_top_k(make_client: ClientFactory, agent_id: str, exact_below: int) -> None:
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
            rafael, ana, none = await nearest_current_facts(conn, agent_id, probes, 6, exact_below=exact_below)
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
    """benchmarks/recall.py's quick form: its own exact top 5 is the database's, and the SDK's read gets a row."""
    pytest.importorskip("numpy")
    sys.path.insert(0, str(BENCHMARKS))
    try:
        recall = importlib.import_module("recall")
        await recall.main(["--quick", "--no-sweep", "--database-url", database_url])
    finally:
        sys.path.remove(str(BENCHMARKS))
    out = capsys.readouterr().out
    assert "exact top 5 computed here = the database's exact scan on 4/4" in out
    assert re.search(r"^\s+1\s+\d+\s+sdk as shipped\s+[01]\.\d{3}\s+\d+/240(\s+[01]\.\d\d){6}\s", out, re.MULTILINE)
