"""One vector space per agent: the first write records the embedder, another embedder is refused before anything
is stored, and reembed() moves every vector of the agent to a new embedder."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from memory_sdk import EmbedderMismatch, InvalidInputError, MemoryClient, ProviderError
from memory_sdk.llm.protocols import embedder_id
from memory_sdk.store.queries import vector_param
from memory_sdk.testing import HashEmbedder, ScriptedLLM
from tests.conftest import ClientFactory
from tests.scripts import CLARA_EXTRACTION, CLARA_MESSAGE


class ReversedEmbedder:
    """Another vector space of the same size, with no model_id: HashEmbedder's vector of the reversed text."""

    def __init__(self) -> None:
        self._inner = HashEmbedder()

    @property
    def dimensions(self) -> int:
        return self._inner.dimensions

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self._inner.embed_one(text[::-1]) for text in texts]


def clara_llm(writes: int = 1) -> ScriptedLLM:
    return ScriptedLLM({"informed_extraction": [CLARA_EXTRACTION] * writes})


async def recorded(memory: MemoryClient, agent_id: str) -> tuple[str, int] | None:
    async with memory.database.tenant(agent_id) as conn:
        row = await conn.fetchrow(
            "SELECT embedder, dimensions FROM memory_agent_embedders WHERE agent_id = $1", agent_id
        )
    return None if row is None else (row["embedder"], row["dimensions"])


async def stored_vectors(memory: MemoryClient, agent_id: str) -> dict[str, list[tuple[str, list[float] | None]]]:
    """Each embedded table's (text, vector) rows."""
    queries = {
        "events": "SELECT content AS text, embedding AS vector FROM memory_events WHERE agent_id = $1",
        "facts": "SELECT fact_text AS text, embedding AS vector FROM memory_facts WHERE agent_id = $1",
        "entities": "SELECT display_name AS text, name_embedding AS vector FROM memory_entities WHERE agent_id = $1",
    }
    found: dict[str, list[tuple[str, list[float] | None]]] = {}
    async with memory.database.tenant(agent_id) as conn:
        for table, sql in queries.items():
            rows = await conn.fetch(sql, agent_id)
            found[table] = [(r["text"], None if r["vector"] is None else r["vector"].to_list()) for r in rows]
    return found


def test_embedder_id_is_the_model_id_else_the_class_name() -> None:
    assert embedder_id(HashEmbedder()) == "hash:HashEmbedder"
    assert embedder_id(ReversedEmbedder()) == "custom:ReversedEmbedder"


async def test_first_write_records_the_embedder(make_client: ClientFactory, agent_id: str) -> None:
    async with make_client(clara_llm()) as memory:
        assert await recorded(memory, agent_id) is None
        result = await memory.write(agent_id, CLARA_MESSAGE, "Ana")
        assert result.success, result.error
        assert await recorded(memory, agent_id) == ("hash:HashEmbedder", 1536)


async def test_write_with_another_embedder_is_refused_and_stores_nothing(
    make_client: ClientFactory, agent_id: str
) -> None:
    async with make_client(clara_llm()) as memory:
        assert (await memory.write(agent_id, CLARA_MESSAGE, "Ana")).success
    llm = clara_llm()
    async with make_client(llm, embedder=ReversedEmbedder()) as other:
        with pytest.raises(EmbedderMismatch) as refused:
            await other.write(agent_id, "Clara mora em Lisboa", "Ana")
        events = await other.get_events(agent_id)
    assert refused.value.recorded == "hash:HashEmbedder"
    assert refused.value.configured == "custom:ReversedEmbedder"
    assert f"memory-sdk reembed {agent_id}" in str(refused.value)
    assert [event.content for event in events] == [CLARA_MESSAGE]
    assert not llm.requests  # refused before any model call


async def test_dry_run_checks_the_embedder_but_records_none(make_client: ClientFactory, agent_id: str) -> None:
    async with make_client(clara_llm(writes=2)) as memory:
        assert (await memory.write(agent_id, CLARA_MESSAGE, "Ana", dry_run=True)).success
        assert await recorded(memory, agent_id) is None
        assert (await memory.write(agent_id, CLARA_MESSAGE, "Ana")).success
    async with make_client(clara_llm(), embedder=ReversedEmbedder()) as other:
        with pytest.raises(EmbedderMismatch):
            await other.write(agent_id, CLARA_MESSAGE, "Ana", dry_run=True)


async def test_concurrent_first_writes_with_two_embedders_record_one(make_client: ClientFactory, agent_id: str) -> None:
    async with make_client(clara_llm()) as first, make_client(clara_llm(), embedder=ReversedEmbedder()) as second:
        outcomes: list[Any] = await asyncio.gather(
            first.write(agent_id, CLARA_MESSAGE, "Ana"),
            second.write(agent_id, CLARA_MESSAGE, "Ana"),
            return_exceptions=True,
        )
        winner = await recorded(first, agent_id)
    refused = [outcome for outcome in outcomes if isinstance(outcome, EmbedderMismatch)]
    assert len(refused) == 1
    assert winner is not None and refused[0].recorded == winner[0]


async def test_concurrent_first_writes_of_one_client_check_the_embedder_once(
    make_client: ClientFactory, agent_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writes launched at once for a new agent wait for the first one's check (a transaction) instead of each
    running its own; a dry run among them checks on its own and teaches nothing. The real check runs, counted."""
    import memory_sdk.client as client_module
    from memory_sdk.vector_space import check_embedder

    checks: list[bool] = []

    async def counted(*args: Any, record: bool) -> None:
        checks.append(record)
        await asyncio.sleep(0)  # the other writes reach the check meanwhile
        await check_embedder(*args, record=record)

    monkeypatch.setattr(client_module, "check_embedder", counted)
    async with make_client(clara_llm(writes=7)) as memory:
        results = await asyncio.gather(
            *(memory.write(agent_id, CLARA_MESSAGE, "Ana") for _ in range(5)),
            memory.write(agent_id, CLARA_MESSAGE, "Ana", dry_run=True),
        )
        assert all(result.success for result in results)
        assert sorted(checks) == [False, True]
        assert await recorded(memory, agent_id) == (embedder_id(HashEmbedder()), HashEmbedder().dimensions)
        assert (await memory.write(agent_id, CLARA_MESSAGE, "Ana")).success
    assert sorted(checks) == [False, True]  # checked once per client


async def test_reembed_moves_every_vector_and_the_record(make_client: ClientFactory, agent_id: str) -> None:
    async with make_client(clara_llm()) as memory:
        assert (await memory.write(agent_id, CLARA_MESSAGE, "Ana")).success
        before = await stored_vectors(memory, agent_id)
    reversed_embedder = ReversedEmbedder()
    async with make_client(clara_llm(), embedder=reversed_embedder) as other:
        counts = await other.reembed(agent_id, batch_size=2)  # several batches per table
        after = await stored_vectors(other, agent_id)
        assert await recorded(other, agent_id) == ("custom:ReversedEmbedder", 1536)
        probe = (await reversed_embedder.embed(["Clara Rezende left Vertix"]))[0]
        async with other.database.tenant(agent_id) as conn:
            nearest = await conn.fetchval(
                "SELECT fact_text FROM memory_facts WHERE agent_id = $1 ORDER BY embedding <=> $2 LIMIT 1",
                agent_id,
                vector_param(probe),
            )
        assert (await other.write(agent_id, CLARA_MESSAGE, "Ana")).success  # no longer refused
    assert counts == {table: len(rows) for table, rows in before.items()}
    assert counts["events"] == 1 and counts["facts"] >= 3 and counts["entities"] == 4
    for table, rows in after.items():
        for text, vector in rows:
            assert vector == pytest.approx((await reversed_embedder.embed([text]))[0], abs=1e-6), (table, text)
    assert nearest == "Clara Rezende left Vertix"
    async with make_client(clara_llm()) as old:
        with pytest.raises(EmbedderMismatch):
            await old.write(agent_id, CLARA_MESSAGE, "Ana")


async def test_reembed_needs_no_llm_and_checks_its_arguments(
    make_client: ClientFactory, database_url: str, agent_id: str
) -> None:
    async with make_client(clara_llm()) as memory:
        assert (await memory.write(agent_id, CLARA_MESSAGE, "Ana")).success
    async with MemoryClient(database_url, embedder=ReversedEmbedder()) as no_llm:  # no llm, no OPENAI_API_KEY
        assert (await no_llm.reembed(agent_id))["events"] == 1
        with pytest.raises(InvalidInputError):
            await no_llm.reembed(agent_id, batch_size=0)


async def test_reembed_with_a_failing_embedder_is_a_provider_error(make_client: ClientFactory, agent_id: str) -> None:
    class Broken(ReversedEmbedder):
        async def embed(self, texts: Sequence[str]) -> list[list[float]]:
            return [[0.0] * self.dimensions for _ in texts]

    async with make_client(clara_llm()) as memory:
        assert (await memory.write(agent_id, CLARA_MESSAGE, "Ana")).success
    async with make_client(embedder=Broken()) as broken:
        with pytest.raises(ProviderError, match="all zeros"):
            await broken.reembed(agent_id)


async def test_forget_erases_the_record(make_client: ClientFactory, agent_id: str) -> None:
    async with make_client(clara_llm()) as memory:
        assert (await memory.write(agent_id, CLARA_MESSAGE, "Ana")).success
        counts = await memory.forget(agent_id)
        assert counts["agent_embedders"] == 1
    async with make_client(clara_llm(), embedder=ReversedEmbedder()) as other:
        assert (await other.write(agent_id, CLARA_MESSAGE, "Ana")).success
