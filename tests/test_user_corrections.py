"""A user's retraction and correction of one fact (delete_fact, correct_fact, fact_history), against the real
database: the fact closes with the edges it backs, its history stays, a correction is current and found, and a
refused call (unknown id, another agent's) changes nothing and says the same for both."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from memory_sdk import MemoryClient
from memory_sdk.errors import InvalidInputError
from memory_sdk.results import Fact
from memory_sdk.testing import ScriptedLLM
from tests.conftest import ClientFactory
from tests.invariants import assert_memory_invariants

T1 = datetime(2025, 3, 1, 10, 0, tzinfo=UTC)


def _answer(city: str) -> dict[str, Any]:
    return {
        "entities": [{"name": "Ana", "type": "person"}, {"name": city, "type": "place"}],
        "facts": [
            {
                "subject": "Ana",
                "text": f"Ana lives in {city}",
                "action": "NEW",
                "importance_category": "relationship_change",
                "confidence": 0.95,
                "attribute": "lives_in",
            }
        ],
        "relations": [{"source": "Ana", "type": "lives_in", "target": city}],
    }


async def _ana_in_lisbon(memory: MemoryClient, agent_id: str) -> Fact:
    result = await memory.write(agent_id, "I live in Lisbon", speaker_name="Ana", occurred_at=T1)
    assert result.success, result.error
    [fact] = result.facts_added
    [edge] = result.relationships
    assert edge.evidence_fact_id == fact.id
    return fact


async def _everything(memory: MemoryClient, agent_id: str) -> tuple[list[Fact], list[Any]]:
    facts = await memory.get_facts(agent_id, include_history=True)
    edges = await memory.get_relationships(agent_id, include_invalidated=True)
    return facts, edges


async def test_delete_closes_the_fact_and_its_edge_and_keeps_history(make_client: ClientFactory, agent_id: str) -> None:
    llm = ScriptedLLM({"informed_extraction": [_answer("Lisbon")]})
    async with make_client(llm) as memory:
        fact = await _ana_in_lisbon(memory, agent_id)
        calls = len(llm.requests)

        done = await memory.delete_fact(agent_id, fact.id, reason="she never lived there")

        assert len(llm.requests) == calls  # no LLM call
        assert done.action == "deleted" and done.fact_id == fact.id
        [closed] = done.closed
        assert closed.id == fact.id and closed.valid_to is not None and closed.invalidated_at is not None
        assert len(done.relationships_closed) == 1
        assert done.added is not None
        assert done.added.source_context == "user_retraction"
        assert done.added.supersedes_fact_id == fact.id
        assert done.added.valid_to is not None  # a record, never current
        assert "she never lived there" in done.added.text

        assert await memory.get_facts(agent_id) == []
        assert await memory.get_relationships(agent_id) == []
        history = await memory.get_facts(agent_id, include_history=True)
        assert {f.id for f in history} == {fact.id, done.added.id}
        assert [v.id for v in await memory.fact_history(agent_id, fact.id)] == [fact.id, done.added.id]
        await assert_memory_invariants(memory, agent_id)
        report = await memory.check(agent_id)
        assert report.ok, [str(problem) for problem in report.problems]

        with pytest.raises(InvalidInputError, match="no longer current"):
            await memory.delete_fact(agent_id, fact.id)
        assert (await memory.get_facts(agent_id, include_history=True)) == history


async def test_correct_supersedes_is_current_and_found_by_search(make_client: ClientFactory, agent_id: str) -> None:
    llm = ScriptedLLM({"informed_extraction": [_answer("Lisbon")]})
    async with make_client(llm) as memory:
        fact = await _ana_in_lisbon(memory, agent_id)
        calls = len(llm.requests)

        fixed = await memory.correct_fact(agent_id, str(fact.id), "Ana lives in Porto")

        assert len(llm.requests) == calls  # embedded, reconciled as an UPDATE, no LLM call
        assert fixed.action == "corrected"
        assert fixed.added is not None
        new = fixed.added
        assert new.text == "Ana lives in Porto" and new.source_context == "user_correction"
        assert new.supersedes_fact_id == fact.id and new.valid_to is None and new.attribute == "lives_in"
        assert new.valid_from == fact.valid_from  # it was wrong from the start: the correction takes its place
        assert [c.id for c in fixed.closed] == [fact.id]
        assert fixed.closed[0].invalidated_at is not None  # retracted, not history that was once true
        assert len(fixed.relationships_closed) == 1  # the edge the wrong fact backed

        assert [f.text for f in await memory.get_facts(agent_id)] == ["Ana lives in Porto"]
        hits = await memory.search(agent_id, "Ana lives in Porto", k=3)
        assert hits and hits[0].fact.id == new.id
        history = await memory.fact_history(agent_id, new.id)
        assert [v.id for v in history] == [fact.id, new.id]
        assert [v.id for v in await memory.fact_history(agent_id, fact.id)] == [fact.id, new.id]
        await assert_memory_invariants(memory, agent_id)
        report = await memory.check(agent_id)
        assert report.ok, [str(problem) for problem in report.problems]

        with pytest.raises(InvalidInputError, match="already says that"):
            await memory.correct_fact(agent_id, new.id, "Ana lives in Porto")
        with pytest.raises(InvalidInputError, match="no longer current"):
            await memory.correct_fact(agent_id, fact.id, "Ana lives in Faro")
        assert [f.text for f in await memory.get_facts(agent_id)] == ["Ana lives in Porto"]


async def test_correction_dated_later_keeps_the_old_value_as_history(make_client: ClientFactory, agent_id: str) -> None:
    llm = ScriptedLLM({"informed_extraction": [_answer("Lisbon")]})
    async with make_client(llm) as memory:
        fact = await _ana_in_lisbon(memory, agent_id)
        moved = datetime(2025, 6, 1, tzinfo=UTC)

        fixed = await memory.correct_fact(agent_id, fact.id, "Ana lives in Porto", valid_from=moved)

        [old] = fixed.closed
        assert old.valid_to == moved and old.invalidated_at is None  # true until she moved
        assert fixed.added is not None and fixed.added.valid_from == moved
        assert [f.text for f in await memory.get_facts(agent_id, as_of=datetime(2025, 4, 1, tzinfo=UTC))] == [
            "Ana lives in Lisbon"
        ]
        assert [f.text for f in await memory.get_facts(agent_id)] == ["Ana lives in Porto"]
        await assert_memory_invariants(memory, agent_id)


async def test_another_agents_fact_is_refused_like_a_random_id_and_nothing_changes(
    make_client: ClientFactory, agent_id: str
) -> None:
    other = f"agent-{uuid.uuid4().hex[:12]}"
    llm = ScriptedLLM({"informed_extraction": [_answer("Lisbon"), _answer("Lisbon")]})
    async with make_client(llm) as memory:
        mine = await _ana_in_lisbon(memory, agent_id)
        theirs = await _ana_in_lisbon(memory, other)
        before = (await _everything(memory, agent_id), await _everything(memory, other))
        unknown = uuid.uuid4()

        messages = []
        for fact_id in (theirs.id, unknown):
            assert fact_id is not None
            calls = (
                memory.delete_fact(agent_id, fact_id),
                memory.correct_fact(agent_id, fact_id, "Ana lives in Porto"),
                memory.fact_history(agent_id, fact_id),
            )
            for call in calls:
                with pytest.raises(InvalidInputError) as refused:
                    await call
                messages.append(str(refused.value).replace(str(fact_id), "<id>"))
        assert messages[:3] == messages[3:]  # no oracle: another agent's id reads as an unknown one

        with pytest.raises(InvalidInputError, match="UUID"):
            await memory.delete_fact(agent_id, "not-an-id")
        with pytest.raises(InvalidInputError):
            await memory.correct_fact(agent_id, mine.id, "   ")
        assert (await _everything(memory, agent_id), await _everything(memory, other)) == before
        await assert_memory_invariants(memory, agent_id)
        await assert_memory_invariants(memory, other)


async def test_retraction_and_correction_survive_export_and_restore(make_client: ClientFactory, agent_id: str) -> None:
    llm = ScriptedLLM({"informed_extraction": [_answer("Lisbon")]})
    copy = f"agent-{uuid.uuid4().hex[:12]}"
    async with make_client(llm) as memory:
        fact = await _ana_in_lisbon(memory, agent_id)
        fixed = await memory.correct_fact(agent_id, fact.id, "Ana lives in Porto")
        assert fixed.added is not None and fixed.added.id is not None
        done = await memory.delete_fact(agent_id, fixed.added.id, reason="moved away, do not keep it")
        assert done.added is not None

        await memory.restore(await memory.export(agent_id), agent_id=copy)

        assert await memory.get_facts(copy) == []
        [first] = [v for v in await memory.get_facts(copy, include_history=True) if v.text == fact.text]
        texts = [(v.text, v.source_context) for v in await memory.fact_history(copy, first.id)]
        assert texts == [
            ("Ana lives in Lisbon", "extracted"),
            ("Ana lives in Porto", "user_correction"),
            (done.added.text, "user_retraction"),
        ]
        await assert_memory_invariants(memory, copy)


def test_cli_deletes_corrects_and_shows_history(
    database_url: str, agent_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from memory_sdk.cli import main
    from memory_sdk.testing import HashEmbedder

    async def seed() -> tuple[Fact, Fact]:
        llm = ScriptedLLM({"informed_extraction": [_answer("Lisbon"), _answer("Faro")]})
        async with MemoryClient(database_url, llm=llm, embedder=HashEmbedder()) as memory:
            lisbon = await _ana_in_lisbon(memory, agent_id)
            other = await memory.write(agent_id, "I live in Faro", speaker_name="Ana", occurred_at=T1)
            return lisbon, other.facts_updated[0] if other.facts_updated else other.facts_added[0]

    lisbon, faro = asyncio.run(seed())
    url = ["--database-url", database_url]

    assert main(["correct", agent_id, str(faro.id), "Ana lives in Porto", "--embedder", "hash", *url, "--json"]) == 0
    fixed = json.loads(capsys.readouterr().out)
    assert fixed["action"] == "corrected" and fixed["added"]["text"] == "Ana lives in Porto"

    assert main(["history", agent_id, fixed["added"]["id"], *url, "--json"]) == 0
    texts = [version["text"] for version in json.loads(capsys.readouterr().out)]
    assert texts[-2:] == ["Ana lives in Faro", "Ana lives in Porto"]

    assert main(["delete-fact", agent_id, fixed["added"]["id"], "--reason", "wrong", *url]) == 0
    out = capsys.readouterr().out
    assert "deleted fact" in out and "relationships closed: 0" in out  # a correction opens no edge (no extraction)

    assert main(["delete-fact", agent_id, str(uuid.uuid4()), *url]) == 2
    err = capsys.readouterr().err
    assert "no fact" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(SystemExit) as exit_:
        main(["history", agent_id, "not-a-fact", *url])
    assert exit_.value.code == 2
    assert "not a fact id" in capsys.readouterr().err
    assert lisbon.id is not None
