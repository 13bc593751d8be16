"""The facts' HNSW index filled after the write (migration 0012, store/indexing.py), against the real database: a
committed write's facts go into the index in the background; until they do, search ranks them exactly; a dry run
or a rolled-back write schedules nothing; the indexer never waits on a write's row locks; its failures are counted
and logged, never raised; closing the client indexes what is left."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from sqlalchemy import false, text

from memory_sdk.store import search as search_store
from memory_sdk.store.indexing import FactIndexer
from memory_sdk.testing import ScriptedLLM
from tests.conftest import ClientFactory
from tests.test_search import answer, fact

pytestmark = pytest.mark.integration

_HNSW_SCANS = "SELECT pg_stat_get_xact_numscans('ix_memory_facts_embedding'::regclass)"
_STATES = "SELECT fact_text, indexed FROM memory_facts WHERE agent_id = :agent AND valid_to IS NULL ORDER BY fact_text"


def _llm(*answers: dict[str, Any]) -> ScriptedLLM:
    return ScriptedLLM({"informed_extraction": list(answers)})


def _two_facts() -> dict[str, Any]:
    facts = [fact("Rafael", "Rafael adora feijoada"), fact("Rafael", "Rafael toca violão")]
    return answer([("Rafael", "person")], facts)


async def _states(memory: Any, agent_id: str) -> dict[str, bool]:
    async with memory.database.transaction() as session:
        rows = (await session.execute(text(_STATES), {"agent": agent_id})).all()
    return {row.fact_text: row.indexed for row in rows}


async def _unindex(memory: Any, agent_id: str, fact_text: str) -> None:
    """What a process that died before its indexer ran leaves behind."""
    async with memory.database.transaction() as session:
        await session.execute(
            text("UPDATE memory_facts SET indexed = false WHERE agent_id = :agent AND fact_text = :text"),
            {"agent": agent_id, "text": fact_text},
        )


async def _walked_without_the_guitar(memory: Any, agent_id: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two facts, the guitar left out of the index; every agent counts as large and a signal hands one fact on, so
    the vector signal walks the index."""
    await memory.write(agent_id, "Adoro feijoada e toco violão", speaker_name="Rafael")
    await memory.database.indexer.drain()
    await _unindex(memory, agent_id, "Rafael toca violão")
    monkeypatch.setattr(search_store, "EXACT_SCAN_MAX_FACTS", 1)
    monkeypatch.setattr(search_store, "SIGNAL_POOL", 1)


async def test_a_committed_writes_facts_enter_the_index_after_it(make_client: ClientFactory, agent_id: str) -> None:
    async with make_client(_llm(_two_facts())) as memory:
        indexer = memory.database.indexer
        before = indexer.indexed
        result = await memory.write(agent_id, "Adoro feijoada e toco violão", speaker_name="Rafael")
        assert len(result.facts_added) == 2
        await indexer.drain()
        assert await _states(memory, agent_id) == {"Rafael adora feijoada": True, "Rafael toca violão": True}
        assert indexer.indexed - before == 2
        assert indexer.failures == 0


async def test_search_finds_a_fact_not_in_the_index_yet_and_walks_the_index_for_the_rest(
    make_client: ClientFactory, agent_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with make_client(_llm(_two_facts())) as memory:
        # The vector signal walks the index, which no longer holds the guitar; it must still come first, ranked
        # exactly beside the walk.
        await _walked_without_the_guitar(memory, agent_id, monkeypatch)
        hits = await memory.search(agent_id, "Rafael toca violão", k=1)
        assert [hit.fact.text for hit in hits if hit.signals.get("vector") == 1] == ["Rafael toca violão"]
        # ...and the indexed fact is found by walking the index (the walk's WHERE implies its predicate).
        [query] = await memory._providers()[1].embed(["Rafael adora feijoada"])
        request = search_store.SearchRequest("Rafael adora feijoada", query, 1, None, None, None, 0.0)
        async with memory.database.transaction(agent_id) as session:
            rows = await search_store._vector(session, search_store._filters(agent_id, request), request, 1)
            walks = (await session.execute(text(_HNSW_SCANS))).scalar_one()
        assert [row.fact_text for row in rows] == ["Rafael adora feijoada"]
        assert walks >= 1


async def test_facts_ranked_beside_a_walk_that_came_back_short_do_not_stand_in_for_what_it_missed(
    make_client: ClientFactory, agent_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with make_client(_llm(_two_facts())) as memory:
        await _walked_without_the_guitar(memory, agent_id, monkeypatch)
        # A walk that reaches none of the agent's facts before its scan limit (many other agents' facts nearer the
        # query): the unindexed guitar alone would fill the pool, ahead of the feijoada the walk did not reach.
        walk = search_store._walk
        monkeypatch.setattr(search_store, "_walk", lambda *args: walk(*args).where(false()))
        hits = await memory.search(agent_id, "Rafael adora feijoada", k=1)
        assert [hit.fact.text for hit in hits if hit.signals.get("vector") == 1] == ["Rafael adora feijoada"]


async def test_facts_left_unindexed_are_indexed_by_the_agents_next_write_and_a_dry_run_schedules_nothing(
    make_client: ClientFactory, agent_id: str
) -> None:
    third = answer([("Rafael", "person")], [fact("Rafael", "Rafael mora em Curitiba", attribute="lives_in")])
    async with make_client(_llm(_two_facts(), third, third)) as memory:
        indexer = memory.database.indexer
        await memory.write(agent_id, "Adoro feijoada e toco violão", speaker_name="Rafael")
        await indexer.drain()
        await _unindex(memory, agent_id, "Rafael adora feijoada")
        dry = await memory.write(agent_id, "Moro em Curitiba", speaker_name="Rafael", dry_run=True)
        assert dry.success and len(dry.facts_added) == 1
        assert not indexer.busy  # the dry run's transaction rolled back: nothing to index
        assert (await _states(memory, agent_id))["Rafael adora feijoada"] is False
        await memory.write(agent_id, "Moro em Curitiba", speaker_name="Rafael")
        await indexer.drain()
        assert set((await _states(memory, agent_id)).values()) == {True}


async def test_the_indexer_skips_rows_a_write_holds_instead_of_waiting(
    make_client: ClientFactory, agent_id: str
) -> None:
    async with make_client(_llm(_two_facts())) as memory:
        await memory.write(agent_id, "Adoro feijoada e toco violão", speaker_name="Rafael")
        await memory.database.indexer.drain()
        await _unindex(memory, agent_id, "Rafael adora feijoada")
        await _unindex(memory, agent_id, "Rafael toca violão")
        indexer = FactIndexer(memory.database.tenant_script)
        async with memory.database.tenant(agent_id) as holder:
            await holder.execute(
                "SELECT 1 FROM memory_facts WHERE agent_id = $1 AND fact_text = 'Rafael toca violão' FOR UPDATE",
                agent_id,
            )
            done = await asyncio.wait_for(indexer.index_agent(agent_id), timeout=10)
        assert done == 1
        assert await _states(memory, agent_id) == {"Rafael adora feijoada": True, "Rafael toca violão": False}


async def test_a_failing_indexer_is_counted_and_logged_never_raised(
    make_client: ClientFactory, agent_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with make_client(_llm()) as memory:
        indexer = memory.database.indexer
        caplog.set_level(logging.WARNING, logger="memory_sdk")
        indexer.schedule("no\x00agent")  # refused before any statement is sent (a NUL byte)
        indexer.schedule(agent_id)  # the next agent is still served
        await indexer.drain()
        assert indexer.failures == 1
        assert indexer.last_error is not None and "NUL" in indexer.last_error
        assert "not added to the search index yet" in caplog.text


async def test_closing_the_client_indexes_what_its_writes_left(make_client: ClientFactory, agent_id: str) -> None:
    async with make_client(_llm(_two_facts())) as memory:
        indexer = memory.database.indexer
        before = indexer.indexed
        await memory.write(agent_id, "Adoro feijoada e toco violão", speaker_name="Rafael")
    # Done when close() returns, not later: a process may exit right after.
    assert not indexer.busy
    assert indexer.indexed - before == 2
    async with make_client(_llm()) as memory:
        assert await _states(memory, agent_id) == {"Rafael adora feijoada": True, "Rafael toca violão": True}
