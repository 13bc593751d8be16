"""Bulk import (memory_sdk/bulk.py): time order per agent, one write at a time per agent and agents in parallel,
resume after an interruption, per-message failures, and the summary's figures. Real database, scripted LLM."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import re
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memory_sdk import ImportMessage, ImportProgress, InvalidInputError
from memory_sdk.bulk import derive_message_id
from memory_sdk.cli import main
from memory_sdk.llm.protocols import LLMRequest
from memory_sdk.testing import ScriptedLLM
from tests.conftest import ClientFactory
from tests.invariants import assert_memory_invariants

T0 = datetime(2025, 1, 1, 9, tzinfo=UTC)
NAMES = ("Ana", "Bruno", "Carla", "Diego", "Elisa", "Fabio", "Gabriela", "Heitor")
THINGS = ("jazz", "xadrez", "montanhas", "ciclismo", "origami", "astronomia", "tango", "cerâmica")


def message_of(request: LLMRequest) -> str:
    """The message an extraction prompt carries (between the prompt's <<< and >>> markers)."""
    prompt = request.messages[-1]["content"]
    return prompt.split("<<<\n", 1)[1].split("\n>>>", 1)[0]


def extract(text: str) -> dict[str, Any]:
    """'Ana gosta de jazz' -> one person, one fact about her."""
    name = text.split()[0]
    return {
        "entities": [{"name": name, "type": "person"}],
        "facts": [{"subject": name, "text": text, "action": "NEW", "importance_category": "stable_preference"}],
        "relations": [],
    }


def conversation(count: int, *, prefix: str = "") -> list[ImportMessage]:
    """`count` messages a day apart, each about another person (no reconciliation call: nothing to compare)."""
    return [
        ImportMessage(
            text=f"{prefix}{NAMES[n]} gosta de {THINGS[n]}",
            speaker="Rafael",
            occurred_at=T0 + timedelta(days=n),
            message_id=f"{prefix}m{n}",
        )
        for n in range(count)
    ]


class Recorder:
    """A scripted extraction that records the messages it saw, in call order, and how many ran at once."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def __call__(self, request: LLMRequest) -> dict[str, Any]:
        text = message_of(request)
        self.seen.append(text)
        await asyncio.sleep(0)
        return extract(text)


async def test_messages_are_written_in_occurred_at_order_even_when_shuffled(
    make_client: ClientFactory, agent_id: str
) -> None:
    messages = conversation(8)
    shuffled = messages[:]
    random.Random(7).shuffle(shuffled)
    assert shuffled != messages
    recorder = Recorder()
    llm = ScriptedLLM({"informed_extraction": recorder})
    async with make_client(llm) as memory:
        summary = await memory.write_many(agent_id, shuffled, concurrency=4)
        assert recorder.seen == [m.text for m in messages]
        events = await memory.get_events(agent_id)
        logged = sorted(events, key=lambda event: event.recorded_at)
        assert [event.content for event in logged] == [m.text for m in messages]  # stored in time order too
        assert (summary.written, summary.duplicates, summary.failed, summary.agents) == (8, 0, 0, 1)
        assert summary.facts_added == 8 and summary.facts_updated == summary.facts_deleted == 0
        assert summary.llm_calls == len(llm.requests) == 8
        assert summary.tokens_used.total_tokens > 0
        assert summary.success
        await assert_memory_invariants(memory, agent_id)


async def test_one_agent_writes_one_message_at_a_time_and_agents_run_in_parallel(make_client: ClientFactory) -> None:
    agents = {"import-par-a": "A", "import-par-b": "B"}
    owner: dict[str, str] = {}
    messages: list[ImportMessage] = []
    for agent, prefix in agents.items():
        for message in conversation(3, prefix=prefix):
            owner[message.text] = agent
            messages.append(message.model_copy(update={"agent_id": agent}))
    in_flight: Counter[str] = Counter()
    most_at_once: Counter[str] = Counter()
    both_arrived = asyncio.Event()
    overlapped = False

    async def extraction(request: LLMRequest) -> dict[str, Any]:
        nonlocal overlapped
        text = message_of(request)
        agent = owner[text]
        in_flight[agent] += 1
        most_at_once[agent] = max(most_at_once[agent], in_flight[agent])
        if len(+in_flight) == len(agents):
            overlapped = True
            both_arrived.set()
        # The first message of each agent waits (a bounded while) for the other agent's: if agents ran one after
        # the other, the wait runs out and `overlapped` stays False.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(both_arrived.wait(), timeout=10)
        in_flight[agent] -= 1
        return extract(text)

    async with make_client(ScriptedLLM({"informed_extraction": extraction})) as memory:
        for agent in agents:
            await memory.forget(agent)
        summary = await memory.import_messages(messages, concurrency=2)
        assert summary.written == 6 and summary.agents == 2, summary.failures
        assert overlapped, "the two agents' imports never ran at the same time"
        assert dict(most_at_once) == dict.fromkeys(agents, 1), f"writes of one agent overlapped: {most_at_once}"
        for agent, prefix in agents.items():
            assert [e.content for e in await memory.get_events(agent)] == [
                m.text for m in conversation(3, prefix=prefix)
            ]
            await memory.forget(agent)


async def test_an_interrupted_import_resumes_without_duplicate_events(
    make_client: ClientFactory, agent_id: str
) -> None:
    messages = conversation(6)
    stuck_on = messages[3].text
    reached = asyncio.Event()
    block = True

    async def extraction(request: LLMRequest) -> dict[str, Any]:
        text = message_of(request)
        if block and text == stuck_on:
            reached.set()
            await asyncio.Event().wait()  # never answers: the import is cancelled here
        return extract(text)

    llm = ScriptedLLM({"informed_extraction": extraction})
    async with make_client(llm) as memory:
        task = asyncio.create_task(memory.write_many(agent_id, messages))
        await asyncio.wait_for(reached.wait(), timeout=30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert len(await memory.get_events(agent_id)) == 4  # three written, the fourth logged and cut off
        block = False
        calls_before = len(llm.requests)

        summary = await memory.write_many(agent_id, messages)
        assert (summary.duplicates, summary.written, summary.failed) == (3, 3, 0), summary.failures
        assert len(llm.requests) - calls_before == 3  # the skipped messages cost no LLM call
        events = await memory.get_events(agent_id)
        assert sorted(event.message_id or "" for event in events) == sorted(m.message_id or "" for m in messages)
        current = [fact.text for fact in await memory.get_facts(agent_id)]
        assert sorted(current) == sorted(m.text for m in messages)
        await assert_memory_invariants(memory, agent_id)


async def test_a_bad_message_is_reported_and_the_others_are_written(make_client: ClientFactory, agent_id: str) -> None:
    good = conversation(3)
    entries: list[ImportMessage | dict[str, Any]] = [
        good[0],
        ImportMessage(text="Zeca gosta de sol", speaker="Rafael", occurred_at=datetime(2025, 1, 5)),  # naive
        {"text": "Sem falante", "occurred_at": T0},  # no speaker
        {"text": "Campo a mais", "speaker": "Rafael", "occurred_at": T0, "mood": "happy"},  # unknown field
        good[1],
        good[0].model_copy(update={"text": "Ana gosta de outra coisa"}),  # good[0]'s id, another text
        good[2].model_copy(update={"agent_id": "someone-else"}),
    ]
    heard: list[ImportProgress] = []
    async with make_client(ScriptedLLM({"informed_extraction": Recorder()})) as memory:
        summary = await memory.write_many(agent_id, entries, progress=heard.append)
        assert (summary.messages, summary.written, summary.failed) == (7, 2, 5)
        assert [failure.index for failure in summary.failures] == [1, 2, 3, 5, 6]
        assert {failure.error_type for failure in summary.failures} == {"InvalidInputError"}
        by_index = {failure.index: failure for failure in summary.failures}
        assert "occurred_at" in by_index[1].error
        assert "speaker" in by_index[2].error and "mood" in by_index[3].error
        assert by_index[5].message_id == "m0" and by_index[5].agent_id == agent_id
        assert "someone-else" in by_index[6].error
        assert not summary.success
        assert [p.done for p in heard] == list(range(1, 8)) and {p.total for p in heard} == {7}
        assert Counter(p.status for p in heard) == {"written": 2, "failed": 5}
        assert [e.content for e in await memory.get_events(agent_id)] == [good[0].text, good[1].text]


async def test_messages_without_ids_get_derived_ones_and_a_second_import_skips_them(
    make_client: ClientFactory, agent_id: str
) -> None:
    messages = [m.model_copy(update={"message_id": None}) for m in conversation(3)]
    llm = ScriptedLLM({"informed_extraction": Recorder()})
    async with make_client(llm) as memory:
        first = await memory.write_many(agent_id, messages)
        again = await memory.write_many(agent_id, [m.model_dump() for m in messages])
        assert (first.written, again.written, again.duplicates) == (3, 0, 3)
        assert again.llm_calls == 0 and len(llm.requests) == 3
        ids = [event.message_id for event in await memory.get_events(agent_id)]
        assert ids == [derive_message_id(m.occurred_at, m.speaker, m.text) for m in messages]
    moved = T0.astimezone(datetime.now().astimezone().tzinfo)
    assert derive_message_id(moved, "Rafael", "oi") == derive_message_id(T0, "Rafael", "oi")  # same instant
    assert derive_message_id(T0, "Rafael", "oi") != derive_message_id(T0, "Rafael", "oi!")


async def test_bad_arguments_are_usage_errors(make_client: ClientFactory, agent_id: str) -> None:
    async with make_client() as memory:
        with pytest.raises(InvalidInputError, match="concurrency"):
            await memory.write_many(agent_id, [], concurrency=0)
        with pytest.raises(InvalidInputError, match="agent_id"):
            await memory.write_many("", [])
        summary = await memory.import_messages(conversation(1))  # no agent_id anywhere
        assert summary.failed == 1 and "agent_id" in summary.failures[0].error


def test_the_import_command_reads_jsonl_reports_bad_lines_and_resumes(
    database_url: str, agent_id: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = [
        json.dumps({"speaker": m.speaker, "text": m.text, "occurred_at": m.occurred_at.isoformat()})
        for m in conversation(2)
    ]
    source = tmp_path / "chat.jsonl"
    source.write_text(f"{lines[1]}\n{{not json\n\n{lines[0]}\n", encoding="utf-8")
    script = tmp_path / "answers.json"
    script.write_text(json.dumps({"informed_extraction": [extract(m.text) for m in conversation(2)]}), encoding="utf-8")
    where = ["--database-url", database_url]
    command = ["import", str(source), "--agent", agent_id, *where, "--embedder", "hash", "--scripted-llm", str(script)]

    assert main([*command, "--json"]) == 1  # one line failed
    first = json.loads(capsys.readouterr().out)
    assert (first["messages"], first["written"], first["failed"]) == (3, 2, 1)
    assert first["failures"][0]["index"] == 2 and "not JSON" in first["failures"][0]["error"]

    assert main(command) == 1  # run again: the written lines are skipped; the summary as a table
    table = capsys.readouterr().out
    assert "import summary" in table and "not JSON" in table
    assert re.search(r"already written \(skipped\)\s*│\s*2", table), table

    exported = tmp_path / "export.json"
    assert main(["export", agent_id, *where, "-o", str(exported)]) == 0
    copy = f"{agent_id}-restored"
    restore = ["import", "--restore", str(exported), "--agent", copy, *where, "--embedder", "hash", "--json"]
    assert main(restore) == 0
    capsys.readouterr()
    assert main(["export", copy, *where]) == 0
    document = json.loads(capsys.readouterr().out)
    assert sorted(event["content"] for event in document["events"]) == sorted(m.text for m in conversation(2))
    for agent in (agent_id, copy):
        assert main(["forget", agent, "--yes", *where, "--json"]) == 0
