"""Recovery against the real database: idempotent writes (message_id), runs that always end (cancelled), reprocess
of failed, cancelled and dead writes (a killed process included), and forget."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from typing import Any

import pytest
from sqlalchemy import text

from memory_sdk import InvalidInputError, MemoryClient, MemoryConfig, WriteResult
from memory_sdk.llm.protocols import LLMRequest
from memory_sdk.store import queries
from memory_sdk.testing import HashEmbedder, ScriptedLLM
from tests.conftest import ClientFactory
from tests.invariants import assert_memory_invariants
from tests.scripts import extraction

pytestmark = pytest.mark.integration

MESSAGE = "A Ana mora em Lisboa e trabalha na Orion"
ANSWER = extraction(
    ("Ana", "Ana lives in Lisbon"),
    ("Ana", "Ana works at Orion"),
    entities=[
        {"name": "Ana", "type": "person"},
        {"name": "Lisboa", "type": "city"},
        {"name": "Orion", "type": "organization"},
    ],
    relations=[{"source": "Ana", "target": "Orion", "type": "works_at"}],
)
# Short leases so that a test can wait one out.
FAST_LEASE = MemoryConfig(embedding_dim=HashEmbedder().dimensions, run_heartbeat_sec=0.1, run_stale_after_sec=0.6)


class Gate:
    """An extraction answer that waits until the test opens the gate; `entered` is set once a write waits."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.open = asyncio.Event()
        self.calls = 0

    async def __call__(self, request: LLMRequest) -> dict[str, Any]:
        self.calls += 1
        self.entered.set()
        await self.open.wait()
        return ANSWER


async def table_counts(memory: MemoryClient, agent_id: str) -> dict[str, int]:
    async with memory.database.transaction() as session:
        counts = await queries.count_rows(session, agent_id)
    return {table.removeprefix("memory_"): count for table, count in counts.items()}


async def run_statuses(memory: MemoryClient, agent_id: str) -> list[str]:
    async with memory.database.transaction() as session:
        rows = await session.execute(
            text("SELECT status FROM memory_pipeline_runs WHERE agent_id = :a ORDER BY started_at"), {"a": agent_id}
        )
        return [row.status for row in rows]


def current_texts(result: WriteResult) -> list[str]:
    return sorted(fact.text for fact in result.facts_added)


# -- idempotent writes ----------------------------------------------------------------------------------------


async def test_a_second_write_with_the_same_message_id_returns_the_first_outcome_and_stores_nothing(
    make_client: ClientFactory, agent_id: str
) -> None:
    llm = ScriptedLLM({"informed_extraction": [ANSWER]})
    async with make_client(llm) as memory:
        first = await memory.write(agent_id, MESSAGE, "Ana", message_id="msg-1")
        before = await table_counts(memory, agent_id)
        second = await memory.write(agent_id, MESSAGE, "Ana", message_id="msg-1")
        after = await table_counts(memory, agent_id)
        relationships = await memory.get_relationships(agent_id)
        events = await memory.get_events(agent_id)

    assert first.success and not first.duplicate, first.error
    assert second.success and second.duplicate
    assert second.event_id == first.event_id
    assert [f.id for f in second.facts_added] == [f.id for f in first.facts_added]
    assert second.llm_calls == 0 and second.tokens_used.total_tokens == 0
    assert after == before
    assert [event.message_id for event in events] == ["msg-1"]
    assert len(llm.requests_for("informed_extraction")) == 1
    assert [(r.rel_type, r.strength) for r in relationships] == [("works_at", 0.8)]


async def test_the_same_message_id_for_another_message_is_refused_and_stores_nothing(
    make_client: ClientFactory, agent_id: str
) -> None:
    async with make_client(ScriptedLLM({"informed_extraction": [ANSWER]})) as memory:
        await memory.write(agent_id, MESSAGE, "Ana", message_id="msg-1")
        before = await table_counts(memory, agent_id)
        with pytest.raises(InvalidInputError, match="message_id"):
            await memory.write(agent_id, "Outra mensagem", "Ana", message_id="msg-1")
        assert await table_counts(memory, agent_id) == before


async def test_concurrent_writes_with_one_message_id_store_one_event_and_share_its_outcome(
    make_client: ClientFactory, agent_id: str
) -> None:
    gate = Gate()
    llm = ScriptedLLM({"informed_extraction": gate})
    async with make_client(llm, config=FAST_LEASE) as memory:
        first = asyncio.create_task(memory.write(agent_id, MESSAGE, "Ana", message_id="m"))
        await asyncio.wait_for(gate.entered.wait(), 10)
        # The first write holds the event and is in its LLM call: the second must wait for it, not run again.
        second = asyncio.create_task(memory.write(agent_id, MESSAGE, "Ana", message_id="m"))
        await asyncio.sleep(1.0)  # longer than the lease: the first's heartbeat keeps its run alive
        assert not second.done()
        gate.open.set()
        results = await asyncio.gather(first, second)
        counts = await table_counts(memory, agent_id)
        await assert_memory_invariants(memory, agent_id)

    assert [r.duplicate for r in results] == [False, True]
    assert all(r.success for r in results), [r.error for r in results]
    assert results[0].event_id == results[1].event_id
    assert current_texts(results[0]) == current_texts(results[1]) == ["Ana lives in Lisbon", "Ana works at Orion"]
    assert gate.calls == 1
    assert counts["events"] == 1 and counts["pipeline_runs"] == 1 and counts["facts"] == 2


async def test_a_retried_write_finishes_a_first_attempt_that_failed(make_client: ClientFactory, agent_id: str) -> None:
    down = RuntimeError("provider down")
    llm = ScriptedLLM({"informed_extraction": [down, ANSWER], "blind_extraction": [down], "entity_scan": [down]})
    async with make_client(llm) as memory:
        failed = await memory.write(agent_id, MESSAGE, "Ana", message_id="m")
        retried = await memory.write(agent_id, MESSAGE, "Ana", message_id="m")
        statuses = await run_statuses(memory, agent_id)
        await assert_memory_invariants(memory, agent_id)

    assert not failed.success and not failed.facts_added
    assert retried.success and not retried.duplicate, retried.error
    assert retried.event_id == failed.event_id
    assert current_texts(retried) == ["Ana lives in Lisbon", "Ana works at Orion"]
    assert statuses == ["failed", "succeeded"]


# -- runs always end ------------------------------------------------------------------------------------------


async def test_a_cancelled_write_ends_its_run_cancelled_and_reprocess_finishes_it(
    make_client: ClientFactory, agent_id: str
) -> None:
    gate = Gate()
    async with make_client(ScriptedLLM({"informed_extraction": gate})) as memory:
        write = asyncio.create_task(memory.write(agent_id, MESSAGE, "Ana"))
        await asyncio.wait_for(gate.entered.wait(), 10)
        write.cancel()
        with pytest.raises(asyncio.CancelledError):
            await write
        assert await run_statuses(memory, agent_id) == ["cancelled"]

        gate.open.set()
        [redone] = await memory.reprocess(agent_id)
        assert await memory.reprocess(agent_id) == []
        statuses = await run_statuses(memory, agent_id)
        events = await memory.get_events(agent_id)
        await assert_memory_invariants(memory, agent_id)

    assert redone.success, redone.error
    assert current_texts(redone) == ["Ana lives in Lisbon", "Ana works at Orion"]
    assert statuses == ["cancelled", "succeeded"]
    assert [event.id for event in events] == [redone.event_id]


async def test_reprocess_leaves_a_live_write_alone(make_client: ClientFactory, agent_id: str) -> None:
    gate = Gate()
    async with make_client(ScriptedLLM({"informed_extraction": gate}), config=FAST_LEASE) as memory:
        write = asyncio.create_task(memory.write(agent_id, MESSAGE, "Ana"))
        await asyncio.wait_for(gate.entered.wait(), 10)
        await asyncio.sleep(1.0)  # past the lease: only the heartbeat says the write is alive
        assert await memory.reprocess(agent_id) == []
        events = await memory.get_events(agent_id)
        [forced] = await memory.reprocess(agent_id, events[0].id)
        gate.open.set()
        written = await write

    assert not forced.success and "another live run" in (forced.error or "")
    assert written.success, written.error
    assert gate.calls == 1


async def test_a_write_whose_run_was_taken_over_applies_nothing(make_client: ClientFactory, agent_id: str) -> None:
    """A write whose heartbeat stopped (its process looked dead) loses its event to reprocess: when it wakes up, its
    apply is refused and rolled back, so the event's facts are stored once, by the run that took it over."""
    gate = Gate()
    silent = FAST_LEASE.model_copy(update={"run_heartbeat_sec": 3600.0})
    llm = ScriptedLLM({"informed_extraction": gate})
    async with make_client(llm, config=silent) as memory:
        stalled = asyncio.create_task(memory.write(agent_id, MESSAGE, "Ana"))
        await asyncio.wait_for(gate.entered.wait(), 10)
        await asyncio.sleep(1.0)
        reprocess = asyncio.create_task(memory.reprocess(agent_id))
        await asyncio.sleep(0.2)
        gate.open.set()
        [redone] = await reprocess
        late = await stalled
        statuses = await run_statuses(memory, agent_id)
        facts = await memory.get_facts(agent_id)
        await assert_memory_invariants(memory, agent_id)

    assert redone.success, redone.error
    assert not late.success and "no longer running" in (late.error or "")
    assert sorted(statuses) == ["abandoned", "succeeded"]
    assert sorted(f.text for f in facts) == ["Ana lives in Lisbon", "Ana works at Orion"]


async def test_reprocess_stores_nothing_twice_and_reinforces_no_edge_again(
    make_client: ClientFactory, agent_id: str
) -> None:
    """A write that stored its facts and edge but failed (its message embedding failed) is reprocessed: its facts
    come back as NOOPs and the edge keeps the strength one mention gives."""

    class FailsFirstCall(HashEmbedder):
        calls = 0

        async def embed(self, texts: Sequence[str]) -> list[list[float]]:
            type(self).calls += 1
            if type(self).calls == 1:
                raise RuntimeError("embedder hiccup")
            return await super().embed(texts)

    llm = ScriptedLLM({"informed_extraction": [ANSWER, ANSWER]})
    async with make_client(llm, embedder=FailsFirstCall()) as memory:
        first = await memory.write(agent_id, MESSAGE, "Ana")
        before = await table_counts(memory, agent_id)
        [redone] = await memory.reprocess(agent_id)
        after = await table_counts(memory, agent_id)
        relationships = await memory.get_relationships(agent_id)
        await assert_memory_invariants(memory, agent_id)

    assert not first.success and len(first.facts_added) == 2
    assert redone.success, redone.error
    assert not redone.facts_added and len(redone.facts_unchanged) == 2
    assert {k: v for k, v in after.items() if k != "pipeline_runs"} == {
        k: v for k, v in before.items() if k != "pipeline_runs"
    }
    assert [(r.rel_type, r.strength) for r in relationships] == [("works_at", 0.8)]


async def test_reprocess_gives_up_on_an_event_after_max_attempts(make_client: ClientFactory, agent_id: str) -> None:
    down = RuntimeError("provider down")
    llm = ScriptedLLM({"informed_extraction": lambda r: down, "blind_extraction": lambda r: down})
    async with make_client(llm) as memory:
        await memory.write(agent_id, MESSAGE, "Ana")
        [second] = await memory.reprocess(agent_id, max_attempts=2)
        [given_up] = await memory.reprocess(agent_id, max_attempts=2)
        statuses = await run_statuses(memory, agent_id)

    assert not second.success
    assert not given_up.success and "after 2 runs" in (given_up.error or "")
    assert statuses == ["failed", "failed"]


# -- a killed process -----------------------------------------------------------------------------------------

_KILLED_WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from memory_sdk import MemoryClient
    from memory_sdk.testing import HashEmbedder, ScriptedLLM

    async def hang(request):
        print("in-llm", flush=True)
        await asyncio.Event().wait()

    async def main(url, agent_id, message):
        llm = ScriptedLLM({"informed_extraction": hang})
        async with MemoryClient(url, llm=llm, embedder=HashEmbedder()) as memory:
            await memory.write(agent_id, message, "Ana", message_id="m-1")

    asyncio.run(main(*sys.argv[1:]))
    """
)


async def test_a_write_killed_mid_way_is_finished_by_reprocess(
    make_client: ClientFactory, agent_id: str, database_url: str
) -> None:
    writer = subprocess.Popen(  # noqa: ASYNC220 - the child is killed, never awaited for long
        [sys.executable, "-c", _KILLED_WRITER, database_url, agent_id, MESSAGE],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert writer.stdout is not None
    line = await asyncio.wait_for(asyncio.to_thread(writer.stdout.readline), 60)
    assert line.strip() == b"in-llm"
    writer.send_signal(signal.SIGKILL)
    await asyncio.to_thread(writer.wait)
    writer.stdout.close()

    async with make_client(ScriptedLLM({"informed_extraction": [ANSWER]}), config=FAST_LEASE) as memory:
        assert await run_statuses(memory, agent_id) == ["running"]
        await asyncio.sleep(FAST_LEASE.run_stale_after_sec + 0.2)
        [redone] = await memory.reprocess(agent_id)
        again = await memory.write(agent_id, MESSAGE, "Ana", message_id="m-1")
        statuses = await run_statuses(memory, agent_id)
        counts = await table_counts(memory, agent_id)
        await assert_memory_invariants(memory, agent_id)

    assert redone.success, redone.error
    assert current_texts(redone) == ["Ana lives in Lisbon", "Ana works at Orion"]
    assert again.duplicate and again.event_id == redone.event_id
    assert statuses == ["abandoned", "succeeded"]
    assert counts["events"] == 1 and counts["facts"] == 2


# -- forget ---------------------------------------------------------------------------------------------------


async def test_forget_erases_every_row_of_the_agent_and_no_other(make_client: ClientFactory, agent_id: str) -> None:
    other = f"{agent_id}-other"
    llm = ScriptedLLM({"informed_extraction": lambda request: ANSWER})
    async with make_client(llm) as memory:
        for agent in (agent_id, other):
            assert (await memory.write(agent, MESSAGE, "Ana", message_id="m")).success
        other_before = await table_counts(memory, other)
        erased = await memory.forget(agent_id)
        left = await table_counts(memory, agent_id)
        other_after = await table_counts(memory, other)
        rewritten = await memory.write(agent_id, MESSAGE, "Ana", message_id="m")

    assert erased["events"] == 1 and erased["facts"] == 2 and erased["relationships"] == 1
    assert set(left.values()) == {0}, left
    assert other_after == other_before
    assert rewritten.success and not rewritten.duplicate


class GatedEmbedder(HashEmbedder):
    """A HashEmbedder whose `gated_call`-th call (1-based) waits for the test, like Gate does for the LLM."""

    def __init__(self, gated_call: int | None) -> None:
        super().__init__()
        self.gate = Gate()
        self.gated_call = gated_call
        self.embed_calls = 0

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.embed_calls += 1
        if self.embed_calls == self.gated_call:
            await self.gate(LLMRequest(purpose="informed_extraction", messages=(), response_schema=WriteResult))
        return await super().embed(texts)


MOVE = extraction(("Ana", "Ana lives in Lisbon now, near the river"))


def in_turn(*answers: Any) -> Any:
    """A script entry answering each call with the next answer; an answer that is a Gate waits at it."""
    queue = list(answers)

    async def answer(request: LLMRequest) -> Any:
        next_answer = queue.pop(0)
        return await next_answer(request) if isinstance(next_answer, Gate) else next_answer

    return answer


@pytest.mark.parametrize(
    ("where", "runs_after_cancel"),
    [
        ("message embedding", ["succeeded"]),
        ("extraction call", ["succeeded", "cancelled"]),
        ("fact embedding", ["succeeded", "cancelled"]),
        ("reconciliation call", ["succeeded", "cancelled"]),
    ],
)
async def test_a_write_cancelled_in_any_stage_leaves_no_running_run_and_reprocess_finishes_it(
    make_client: ClientFactory, agent_id: str, where: str, runs_after_cancel: list[str]
) -> None:
    # Each write embeds twice (its message, then its facts and names): calls 3 and 4 are the second write's.
    embedder = GatedEmbedder({"message embedding": 3, "fact embedding": 4}.get(where))
    llm_gate = Gate()
    update = {"action": "UPDATE", "target": 1}
    llm = ScriptedLLM(
        {
            "informed_extraction": in_turn(ANSWER, llm_gate if where == "extraction call" else MOVE, MOVE),
            "reconciliation": in_turn(llm_gate if where == "reconciliation call" else update, update),
        }
    )
    gate = embedder.gate if embedder.gated_call else llm_gate
    async with make_client(llm, embedder=embedder) as memory:
        assert (await memory.write(agent_id, MESSAGE, "Ana")).success
        write = asyncio.create_task(memory.write(agent_id, "A Ana mora em Lisboa agora", "Ana"))
        await asyncio.wait_for(gate.entered.wait(), 10)
        write.cancel()
        with pytest.raises(asyncio.CancelledError):
            await write
        assert await run_statuses(memory, agent_id) == runs_after_cancel
        gate.open.set()
        redone = await memory.reprocess(agent_id)
        await assert_memory_invariants(memory, agent_id)
        facts = await memory.get_facts(agent_id, entity="Ana")

    cancelled_with_event = "cancelled" in runs_after_cancel
    assert [r.success for r in redone] == ([True] if cancelled_with_event else []), [r.error for r in redone]
    texts = {f.text for f in facts}
    assert ("Ana lives in Lisbon now, near the river" in texts) == cancelled_with_event


async def test_a_provider_raising_cancelled_error_is_a_failed_call_not_a_cancelled_write(
    make_client: ClientFactory, agent_id: str
) -> None:
    """asyncio.CancelledError raised by the provider itself (its HTTP client torn down), while nobody cancelled the
    write: the extraction falls back like for any provider failure, and the write returns."""
    llm = ScriptedLLM({"informed_extraction": [asyncio.CancelledError()], "entity_scan": [asyncio.CancelledError()]})
    async with make_client(llm) as memory:
        result = await memory.write(agent_id, MESSAGE, "Ana")
        statuses = await run_statuses(memory, agent_id)

    assert not result.success and "cancelled" in (result.error or "")
    assert result.event_id is not None
    assert statuses == ["failed"]
