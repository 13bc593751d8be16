"""No runaway answers (issue 13): an answer cut at the output cap or caught in a loop is not repaired (a cut one
keeps its complete items, tests/test_salvage.py), caps are per purpose, a slow answer gets no repair it could not
finish, a write's extraction never waits two full timeouts, and the tokens of failed calls are counted (reported,
or estimated and marked so). Driven through the real openai client against tests/openai_server.py."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from memory_sdk.errors import InvalidResponse, ProviderTimeout
from memory_sdk.llm.openai import OpenAIProvider, repeated_tail
from memory_sdk.llm.protocols import ChatMessage, Truncation
from memory_sdk.llm.schemas import EntityScanResponse
from memory_sdk.llm.tokens import OUTPUT_TOKEN_CAPS, estimate_tokens
from memory_sdk.pipeline.extraction import EXTRACTION_STAGE_TIMEOUTS, STOP_AFTER_DROPPED
from memory_sdk.results import TokenUsage
from memory_sdk.testing import ScriptedLLM
from tests.conftest import ClientFactory
from tests.openai_server import FakeOpenAIServer, Reply

MESSAGES: list[ChatMessage] = [
    {"role": "system", "content": "List the entities."},
    {"role": "user", "content": "Hey Mel!"},
]
# What a 1.5B model wrote until the cap: the same item again and again.
LOOP = '{"entities": [' + '{"name": "Melanie", "type": "person", "aliases": ["Mel"]}, ' * 30


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as fake:
        yield fake


def provider(server: FakeOpenAIServer, **options: Any) -> OpenAIProvider:
    return OpenAIProvider(base_url=server.base_url, api_key="sk-test", backoff_base_sec=0.01, **options)


async def scan(llm: OpenAIProvider, purpose: Any = "entity_scan") -> Any:
    return await llm.complete(purpose=purpose, messages=MESSAGES, response_schema=EntityScanResponse)


def test_a_loop_is_recognised_and_a_list_of_distinct_items_is_not() -> None:
    assert repeated_tail(LOOP) is not None
    distinct = ", ".join(f'{{"name": "Person {n}", "type": "person"}}' for n in range(30))
    assert repeated_tail(distinct) is None


async def test_looping_answer_cut_at_the_cap_keeps_its_complete_item_without_a_repair(
    server: FakeOpenAIServer,
) -> None:
    server.script_chat(Reply.chat(LOOP, input_tokens=1250, output_tokens=400, finish_reason="length"))

    async with provider(server) as llm:
        result = await scan(llm)

    assert len(server.chat_requests) == 1  # no repair: it would run into the cap again
    assert json.loads(result.text) == {"entities": [{"name": "Melanie", "type": "person", "aliases": ["Mel"]}]}
    assert result.truncation == Truncation(items_kept=1, repeats_dropped=29)
    assert result.usage == TokenUsage(input_tokens=1250, output_tokens=400)


async def test_answer_cut_before_its_first_item_is_not_repaired_and_keeps_its_usage(server: FakeOpenAIServer) -> None:
    # One alias repeated until the cap (the schemas.py caps were measured on such an answer): no item is complete.
    cut = '{"entities": [{"name": "Melanie", "type": "person", "aliases": [' + '"Mel", ' * 60
    server.script_chat(Reply.chat(cut, input_tokens=1250, output_tokens=400, finish_reason="length"))

    async with provider(server) as llm:
        with pytest.raises(InvalidResponse, match=r"cap of 400 output tokens, repeating .*no complete item") as failure:
            await scan(llm)

    assert len(server.chat_requests) == 1
    assert failure.value.usage == TokenUsage(input_tokens=1250, output_tokens=400)


async def test_output_caps_are_per_purpose(server: FakeOpenAIServer) -> None:
    server.script_chat(Reply.chat({"entities": []}), Reply.chat({"entities": []}), Reply.chat({"entities": []}))

    async with provider(server) as llm, provider(server, max_output_tokens=64) as flat:
        await scan(llm, "entity_scan")
        await scan(llm, "informed_extraction")
        await scan(flat, "informed_extraction")

    sent = [request.body["max_tokens"] for request in server.chat_requests]
    assert sent == [OUTPUT_TOKEN_CAPS["entity_scan"], OUTPUT_TOKEN_CAPS["informed_extraction"], 64]
    assert sent[1] < 1500  # the flat cap the runaway answers of issue 13 ran to


async def test_looping_answer_without_json_is_not_repaired(server: FakeOpenAIServer) -> None:
    server.script_chat(Reply.chat("Melanie paints sunsets and " * 20, input_tokens=300, output_tokens=200))

    async with provider(server) as llm:
        with pytest.raises(InvalidResponse, match="loop") as failure:
            await scan(llm)

    assert len(server.chat_requests) == 1
    assert failure.value.usage == TokenUsage(input_tokens=300, output_tokens=200)


async def test_slow_answer_gets_no_repair_it_could_not_finish(server: FakeOpenAIServer) -> None:
    server.script_chat(Reply.chat("Carol moved.", delay_sec=0.35), Reply.chat({"entities": []}))

    async with provider(server, timeout_sec=0.6) as llm:
        with pytest.raises(InvalidResponse, match="no repair"):
            await scan(llm)

    assert len(server.chat_requests) == 1


async def test_repair_that_times_out_still_counts_the_first_answer(server: FakeOpenAIServer) -> None:
    server.script_chat(Reply.chat("Carol moved.", input_tokens=900, output_tokens=80), Reply.slow(2.0))

    async with provider(server, timeout_sec=0.5, max_attempts=1) as llm:
        with pytest.raises(ProviderTimeout) as failure:
            await scan(llm)

    assert failure.value.usage == TokenUsage(input_tokens=900, output_tokens=80)


def blind_replies() -> list[Reply]:
    """The entity scan's answer, then two answers that fit both the fact and the relation call: those two calls
    run concurrently, so which of them reaches the server first is up to the scheduler."""
    both = {"facts": [{"subject": "Melanie", "text": "Melanie paints sunsets"}], "relations": []}
    return [
        Reply.chat({"entities": [{"name": "Melanie", "type": "person"}]}, input_tokens=200, output_tokens=20),
        Reply.chat(both),
        Reply.chat(both),
    ]


async def test_write_counts_the_tokens_of_a_cut_informed_answer_and_falls_back(
    server: FakeOpenAIServer, make_client: ClientFactory, agent_id: str
) -> None:
    server.script_chat(
        Reply.chat(LOOP, input_tokens=1250, output_tokens=1000, finish_reason="length"), *blind_replies()
    )

    async with provider(server) as llm, make_client(llm) as memory:
        result = await memory.write(agent_id, "Melanie paints sunsets", speaker_name="Caroline", verbose=True)

    assert result.success, result.error
    assert result.extraction_path == "blind"
    assert result.pipeline is not None
    informed = result.pipeline.step("extraction").llm_calls[0]
    assert (informed.status, informed.usage, informed.usage_estimated) == (
        "failed",
        TokenUsage(input_tokens=1250, output_tokens=1000),
        False,
    )
    assert result.tokens_used.total_tokens >= 2250


async def write_within(memory: Any, agent_id: str, call_sec: float) -> Any:
    """One verbose write whose extraction calls get `call_sec` seconds each."""
    return await memory.write(
        agent_id,
        "Melanie paints sunsets",
        speaker_name="Caroline",
        verbose=True,
        config_overrides={"extraction_timeout_sec": call_sec},
    )


async def test_timed_out_informed_call_leaves_time_for_the_blind_path_and_is_estimated(
    server: FakeOpenAIServer, make_client: ClientFactory, agent_id: str
) -> None:
    # 2 s: the blind path's three calls get the 1 s left of the stage's 3 s; with 0.6 s (0.3 s left) they ran out of
    # time on a machine at load average 8.
    timeout = 2.0
    server.script_chat(Reply.chat({"entities": []}, delay_sec=5.0), *blind_replies())

    async with provider(server) as llm, make_client(llm) as memory:
        started = time.perf_counter()
        result = await write_within(memory, agent_id, timeout)
        elapsed = time.perf_counter() - started

    assert result.success, result.error
    assert result.extraction_path == "blind"
    assert result.pipeline is not None
    step = result.pipeline.step("extraction")
    assert step.duration_ms / 1000 < timeout * EXTRACTION_STAGE_TIMEOUTS < 2 * timeout
    assert elapsed < 2 * timeout + 1.0  # the rest of the write is local and fast
    informed = step.llm_calls[0]
    assert informed.status == "failed" and informed.usage_estimated
    assert informed.usage.input_tokens > 100  # the prompt's estimated size
    assert informed.usage.output_tokens == OUTPUT_TOKEN_CAPS["informed_extraction"]
    assert result.tokens_used.total_tokens >= informed.usage.total_tokens


async def test_blind_path_gets_only_what_is_left_of_the_budget(
    server: FakeOpenAIServer, make_client: ClientFactory, agent_id: str
) -> None:
    timeout = 0.6
    server.script_chat(Reply.chat({"entities": []}, delay_sec=5.0), Reply.chat({"entities": []}, delay_sec=5.0))

    async with provider(server) as llm, make_client(llm) as memory:
        result = await write_within(memory, agent_id, timeout)

    assert result.extraction_path == "failed"
    assert result.pipeline is not None
    step = result.pipeline.step("extraction")
    assert [c.purpose for c in step.llm_calls] == ["informed_extraction", "entity_scan"]
    assert step.duration_ms / 1000 < timeout * EXTRACTION_STAGE_TIMEOUTS + 0.2  # not two full timeouts


async def test_refused_request_is_not_estimated(
    server: FakeOpenAIServer, make_client: ClientFactory, agent_id: str
) -> None:
    server.script_chat(Reply.error(400, "bad request"), *blind_replies())

    async with provider(server) as llm, make_client(llm) as memory:
        result = await memory.write(agent_id, "Melanie paints sunsets", speaker_name="Caroline", verbose=True)

    assert result.pipeline is not None
    informed = result.pipeline.step("extraction").llm_calls[0]
    assert (informed.status, informed.usage, informed.usage_estimated) == ("failed", TokenUsage(), False)


# -- an answer off the message is read no further (extraction.off_the_message) -------------------------------------

GREETING = "Hey Jon! Good to see you. I lost my job at Door Dash this month. What's up? Anything new?"
# What the 1.5B model answered to this LoCoMo turn (conv-30 D1:1): a conversation nobody had, 11 facts, all dropped.
INVENTED = [
    "Hey Gina! I'm doing well, thanks! What about you?",
    "Gina is working on a new app for a client, a bit challenging but exciting",
    "I haven't had much time to work on my projects lately. Any tips?",
    "Jon wants to open a bakery in Lisbon with his cousin",
    "Gina bought a red bicycle at the market",
]


def chat_answer(texts: list[str]) -> dict[str, Any]:
    return {
        "entities": [
            {"name": "Gina", "type": "person", "aliases": []},
            {"name": "Jon", "type": "person", "aliases": []},
        ],
        "facts": [{"subject": "Gina", "text": text, "action": "ADD", "evidence": text[:30]} for text in texts],
        "relations": [{"source": "Gina", "target": "Jon", "type": "friend_of"}],
    }


async def test_an_answer_whose_last_three_facts_are_off_the_message_is_read_no_further(
    make_client: ClientFactory, agent_id: str
) -> None:
    llm = ScriptedLLM({"informed_extraction": [chat_answer(INVENTED)]})

    async with make_client(llm) as memory:
        result = await memory.write(agent_id, GREETING, speaker_name="Gina", verbose=True)
        stored = await memory.get_facts(agent_id)

    assert result.pipeline is not None
    [call] = result.pipeline.step("extraction").llm_calls
    assert (call.status, call.items_kept) == ("truncated", 2 + STOP_AFTER_DROPPED)  # 2 entities, 3 facts
    assert result.error is not None and "stopped early (off the message)" in result.error
    assert "relations not reached" in result.error
    dropped = [a.item for a in result.adjustments if a.rule in ("question", "not_grounded")]
    assert dropped == INVENTED[:STOP_AFTER_DROPPED]  # the facts read are judged as ever; the rest was never read
    assert stored == []
    assert call.usage.output_tokens < estimate_tokens(json.dumps(chat_answer(INVENTED)))


async def test_a_fact_of_the_message_among_invented_ones_keeps_the_answer_read_to_its_end(
    make_client: ClientFactory, agent_id: str
) -> None:
    said = "Gina lost her job at Door Dash this month"
    llm = ScriptedLLM({"informed_extraction": [chat_answer([*INVENTED[:2], said, *INVENTED[2:4]])]})

    async with make_client(llm) as memory:
        result = await memory.write(agent_id, GREETING, speaker_name="Gina", verbose=True)

    assert result.pipeline is not None
    [call] = result.pipeline.step("extraction").llm_calls
    assert call.status == "ok" and result.error is None
    assert len([a for a in result.adjustments if a.rule in ("question", "not_grounded")]) == 4


async def test_the_openai_stream_is_closed_when_the_answer_goes_off_the_message(
    server: FakeOpenAIServer, make_client: ClientFactory, agent_id: str
) -> None:
    answer = json.dumps(chat_answer(INVENTED * 4))
    server.script_chat(Reply.chat(answer, output_tokens=2000, chunk_chars=64, chunk_delay_sec=0.01))

    async with provider(server) as llm, make_client(llm) as memory:
        result = await memory.write(agent_id, GREETING, speaker_name="Gina", verbose=True)

    [stream] = server.streams
    assert stream.hung_up or stream.sent < stream.chunks  # the model was cut off, not read to its end
    assert result.pipeline is not None
    [call] = result.pipeline.step("extraction").llm_calls
    assert (call.status, call.items_kept) == ("truncated", 5)
    assert result.error is not None and "stopped early (off the message)" in result.error
