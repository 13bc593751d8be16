"""The sync client (memory_sdk/sync.py) from one thread and from many, its lifecycle, and chat-shaped input
(MemoryClient.write_chat, write_many with write()'s argument names). Real database, scripted LLM."""

from __future__ import annotations

import asyncio
import inspect
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import pytest

from memory_sdk import InvalidInputError, Memory, MemoryClient, UsageError
from memory_sdk.llm.protocols import LLMRequest
from memory_sdk.testing import HashEmbedder, ScriptedLLM
from tests.conftest import ClientFactory


def extract(request: LLMRequest) -> dict[str, Any]:
    """One fact about the speaker of each extraction: 'Ana: I like jazz' -> Ana likes jazz."""
    prompt = request.messages[-1]["content"]
    message = prompt.split("<<<\n", 1)[1].split("\n>>>", 1)[0]
    return {
        "entities": [{"name": "Ana", "type": "person"}],
        "facts": [{"subject": "Ana", "text": f"Ana said: {message}", "action": "NEW", "importance_category": "other"}],
        "relations": [],
    }


def scripted() -> ScriptedLLM:
    return ScriptedLLM({"informed_extraction": extract, "reconciliation": lambda _: {"action": "ADD", "target": None}})


def sync_memory(database_url: str, llm: ScriptedLLM | None = None) -> Memory:
    """Memory built as conftest's make_client builds MemoryClient."""
    return Memory(database_url, llm=llm or scripted(), embedder=HashEmbedder())


# -- the sync client ---------------------------------------------------------------------------------------------


def test_sync_client_writes_and_reads_from_the_main_thread(database_url: str, agent_id: str) -> None:
    with sync_memory(database_url) as memory:
        result = memory.write(agent_id, "Ana loves jazz", speaker_name="Ana")
        assert result.success and not result.error
        facts = memory.get_facts(agent_id)
        assert [fact.text for fact in facts] == ["Ana said: Ana loves jazz"]
        assert memory.get_entity(agent_id, "Ana") is not None
        assert [hit.fact.text for hit in memory.search(agent_id, "jazz")] == ["Ana said: Ana loves jazz"]
        assert memory.export(agent_id)["agent_id"] == agent_id
        assert memory.forget(agent_id)["events"] == 1
        assert memory.get_facts(agent_id) == []


def test_sync_client_serves_four_threads_writing_to_different_agents(database_url: str, agent_id: str) -> None:
    agents = [f"{agent_id}-{n}" for n in range(4)]
    per_agent = 3

    def work(agent: str) -> tuple[int, int, str]:
        results = [memory.write(agent, f"Ana likes thing {n}", "Ana", message_id=f"m{n}") for n in range(per_agent)]
        return sum(result.success for result in results), len(memory.get_events(agent)), threading.current_thread().name

    with sync_memory(database_url) as memory, ThreadPoolExecutor(max_workers=4) as pool:
        outcomes = list(pool.map(work, agents))
        assert [(ok, events) for ok, events, _ in outcomes] == [(per_agent, per_agent)] * 4
        assert len({thread for _, _, thread in outcomes}) > 1  # the calls came from several threads
        for agent in agents:
            assert len(memory.get_facts(agent)) == per_agent


def test_sync_client_opens_and_closes_repeatedly_in_one_process(
    database_url: str, agent_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    threads_before = threading.active_count()
    for round_ in range(3):
        with sync_memory(database_url) as memory:
            memory.write(agent_id, f"Ana went to concert {round_}", "Ana", message_id=f"m{round_}")
            assert len(memory.get_events(agent_id)) == round_ + 1
    reused = sync_memory(database_url)
    for _ in range(2):  # the same Memory opened again gets a new loop and a new client
        reused.open()
        assert len(reused.get_events(agent_id)) == 3
        reused.close()
    reused.close()  # idempotent
    assert threading.active_count() == threads_before  # every loop thread stopped
    assert not [record for record in caplog.records if record.name == "asyncio"]  # no task left pending


def test_sync_client_refuses_a_name_memory_client_has_no_coroutine_for(database_url: str) -> None:
    memory, name = sync_memory(database_url), "schema_version"  # a property of MemoryClient: use memory.client
    with pytest.raises(AttributeError, match=name):
        getattr(memory, name)


def test_a_closed_sync_client_raises_a_usage_error(database_url: str, agent_id: str) -> None:
    memory = sync_memory(database_url)
    with pytest.raises(UsageError, match="Memory is closed"):
        memory.get_facts(agent_id)
    with memory:
        assert memory.is_open
    assert not memory.is_open
    with pytest.raises(UsageError, match="Memory is closed"):
        memory.write(agent_id, "Ana loves jazz", "Ana")


def test_sync_client_raises_the_clients_errors_in_the_callers_thread(database_url: str) -> None:
    with sync_memory(database_url) as memory, pytest.raises(InvalidInputError, match="agent_id"):
        memory.get_facts("")


def test_sync_client_can_be_used_while_another_event_loop_runs(database_url: str, agent_id: str) -> None:
    async def inside_a_loop() -> int:  # a sync library called from async code keeps to its own loop
        with sync_memory(database_url) as memory:
            memory.write(agent_id, "Ana loves jazz", "Ana")
            return len(memory.get_events(agent_id))

    assert asyncio.run(inside_a_loop()) == 1


def test_sync_client_has_every_public_coroutine_method_with_its_signature() -> None:
    coroutines = {
        name
        for name, member in inspect.getmembers(MemoryClient, inspect.iscoroutinefunction)
        if not name.startswith("_") and name not in {"open", "close"}
    }
    assert coroutines <= set(vars(Memory))  # listed, so mypy sees each one's signature
    for name in coroutines:
        assert inspect.signature(getattr(Memory, name)) == inspect.signature(getattr(MemoryClient, name)), name
        assert "await " not in (getattr(Memory, name).__doc__ or ""), name


# -- chat-shaped input -------------------------------------------------------------------------------------------

CHAT: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "I moved to Porto last month"},
    {"role": "assistant", "content": "Porto is lovely, do you like the new flat?"},
    {"role": "user", "content": "Yes, it is close to the river"},
    {"role": "assistant", "content": "Living by the Douro sounds great"},
]


def extraction_prompts(llm: ScriptedLLM) -> list[str]:
    return [request.messages[-1]["content"] for request in llm.requests_for("informed_extraction")]


async def test_write_chat_writes_each_turn_with_its_speaker_and_earlier_turns(
    make_client: ClientFactory, agent_id: str
) -> None:
    llm = scripted()
    async with make_client(llm=llm) as memory:
        results = await memory.write_chat(agent_id, CHAT, user_name="Rafael", assistant_name="Ava")
        events = await memory.get_events(agent_id)
    assert len(results) == 4 and all(result.success and not result.duplicate for result in results)
    assert [(event.speaker, event.content) for event in events] == [
        ("Rafael", CHAT[1]["content"]),
        ("Ava", CHAT[2]["content"]),
        ("Rafael", CHAT[3]["content"]),
        ("Ava", CHAT[4]["content"]),
    ]
    assert all(event.message_id and event.message_id.startswith("chat:") for event in events)
    prompts = extraction_prompts(llm)
    assert len(prompts) == 4
    assert "You are a helpful assistant" not in "".join(prompts)  # the system turn is no one's message
    last = prompts[-1]
    for said in ("Rafael: I moved to Porto last month", "Ava: Porto is lovely", "Rafael: Yes, it is close"):
        assert said in last  # the earlier turns are the last turn's recent messages
    assert "Rafael:" not in prompts[0].split("<<<", 1)[0]  # the first turn has none


async def test_write_chat_again_with_one_more_turn_writes_only_the_new_turn(
    make_client: ClientFactory, agent_id: str
) -> None:
    llm = scripted()
    async with make_client(llm=llm) as memory:
        await memory.write_chat(agent_id, CHAT, user_name="Rafael", assistant_name="Ava")
        longer = [*CHAT, {"role": "user", "content": "I even bought a bike to ride along it"}]
        results = await memory.write_chat(agent_id, longer, user_name="Rafael", assistant_name="Ava")
        events = await memory.get_events(agent_id)
    assert [result.event_id for result in results] == [events[-1].id]
    assert len(events) == 5 and events[-1].speaker == "Rafael"
    assert len(extraction_prompts(llm)) == 5  # the four old turns cost no model call


async def test_write_chat_ids_follow_the_conversation_not_the_position(
    make_client: ClientFactory, agent_id: str
) -> None:
    async with make_client(llm=scripted()) as memory:
        await memory.write_chat(agent_id, [{"role": "user", "content": "Ana loves jazz"}])
        other = [{"role": "user", "content": "Hello there friend"}, {"role": "user", "content": "Ana loves jazz"}]
        results = await memory.write_chat(agent_id, other)
    assert len(results) == 2  # the same words after another turn are another turn


async def test_write_chat_speaker_is_the_name_then_the_role(make_client: ClientFactory, agent_id: str) -> None:
    chat: list[dict[str, Any]] = [
        {"role": "user", "name": "Mel", "content": "I adopted a cat"},
        {"role": "user", "content": "I adopted a dog"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "1"}]},
        {"role": "tool", "content": "42"},
        {"role": "assistant", "content": [{"type": "text", "text": "Pets are great"}, {"type": "image_url"}]},
    ]
    async with make_client(llm=scripted()) as memory:
        await memory.write_chat(agent_id, chat)
        events = await memory.get_events(agent_id)
    assert [(event.speaker, event.content) for event in events] == [
        ("Mel", "I adopted a cat"),
        ("user", "I adopted a dog"),
        ("assistant", "Pets are great"),
    ]


@pytest.mark.parametrize(
    ("message", "error"),
    [
        pytest.param("hello", r"messages\[1\] must be a mapping", id="not-a-mapping"),
        pytest.param({"role": "robot", "content": "hi"}, r"messages\[1\]\.role", id="unknown-role"),
        pytest.param({"content": "hi"}, r"messages\[1\]\.role", id="no-role"),
        pytest.param({"role": "user"}, r"messages\[1\] has no 'content'", id="no-content"),
        pytest.param({"role": "user", "content": 42}, r"messages\[1\]\.content", id="content-not-text"),
        pytest.param({"role": "user", "content": "hi", "name": ""}, r"messages\[1\]\.name", id="blank-name"),
    ],
)
async def test_write_chat_refuses_a_bad_message_by_index_before_writing(
    make_client: ClientFactory, agent_id: str, message: Any, error: str
) -> None:
    async with make_client(llm=scripted()) as memory:
        with pytest.raises(InvalidInputError, match=error):
            await memory.write_chat(agent_id, [{"role": "user", "content": "Ana loves jazz"}, message])
        assert await memory.get_events(agent_id) == []


def test_sync_client_writes_a_chat(database_url: str, agent_id: str) -> None:
    with sync_memory(database_url) as memory:
        results = memory.write_chat(agent_id, CHAT[:3], user_name="Rafael")
        assert [result.success for result in results] == [True, True]
        assert memory.write_chat(agent_id, CHAT[:3], user_name="Rafael") == []


async def test_write_many_takes_writes_argument_names(make_client: ClientFactory, agent_id: str) -> None:
    moment = datetime(2025, 1, 10, tzinfo=UTC)
    async with make_client(llm=scripted()) as memory:
        summary = await memory.write_many(
            agent_id,
            [
                {"message": "Ana loves jazz", "speaker_name": "Ana", "occurred_at": moment},
                {"text": "Ana loves tango", "speaker": "Ana", "occurred_at": moment},
            ],
        )
        events = await memory.get_events(agent_id)
    assert (summary.written, summary.failed) == (2, 0), summary.failures
    assert [(event.speaker, event.content) for event in events] == [
        ("Ana", "Ana loves jazz"),
        ("Ana", "Ana loves tango"),
    ]
