"""Erasing one message (forget_event) against the real database: no row of the agent quotes it afterwards, what it
changed is undone, a fact another message said again stays with that message as its source, the memory checks
clean, other agents are untouched, and an unknown or another agent's event id is refused the same way."""

from __future__ import annotations

import subprocess
import sys
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import text

from memory_sdk import MemoryClient
from memory_sdk.erasure import Version, plan_erasure, redact
from memory_sdk.errors import InvalidInputError
from memory_sdk.testing import ScriptedLLM
from tests.conftest import ClientFactory
from tests.invariants import assert_memory_invariants
from tests.test_stays_true import answer, fact

T1 = datetime(2025, 3, 1, 10, 0, tzinfo=UTC)
T2 = datetime(2025, 6, 15, 10, 0, tzinfo=UTC)
T3 = datetime(2025, 9, 1, 10, 0, tzinfo=UTC)

LISBON, PORTO = "Ana lives in Lisbon", "Ana lives in Porto"
# Words only message B says: in its text, in a fact only B is the source of, in an entity only B named.
MARKER, CAT = "zyxquorble", "Ana adopted a cat named Fizzgigwump"


def _lisbon() -> dict[str, Any]:
    return answer(
        [("Ana", "person"), ("Lisbon", "place")],
        [fact("Ana", LISBON, attribute="lives_in")],
        [("Ana", "lives_in", "Lisbon")],
    )


def _porto() -> dict[str, Any]:
    return answer(
        [("Ana", "person"), ("Porto", "place"), ("Fizzgigwump", "animal")],
        [fact("Ana", PORTO, action="UPDATE", attribute="lives_in"), fact("Ana", CAT)],
        [("Ana", "lives_in", "Porto")],
    )


def _porto_again() -> dict[str, Any]:
    return answer([("Ana", "person"), ("Porto", "place")], [fact("Ana", PORTO, attribute="lives_in")])


def _llm(*answers: dict[str, Any]) -> ScriptedLLM:
    return ScriptedLLM(
        {"informed_extraction": list(answers), "reconciliation": lambda request: {"action": "UPDATE", "target": "1"}}
    )


async def _write(memory: MemoryClient, agent_id: str, message: str, at: datetime) -> Any:
    result = await memory.write(agent_id, message, speaker_name="Ana", occurred_at=at)
    assert result.success, result.error
    return result


async def _rows_quoting(memory: MemoryClient, agent_id: str, word: str) -> list[str]:
    """Every text or jsonb column of every row of the agent that contains `word` (case-insensitive)."""
    found: list[str] = []
    async with memory.database.transaction() as session:
        await session.execute(text("SELECT set_config('memory_sdk.agent_id', :a, true)"), {"a": agent_id})
        columns = (
            await session.execute(
                text(
                    """
                    SELECT c.table_name, c.column_name FROM information_schema.columns c
                    WHERE c.table_schema = current_schema() AND c.table_name LIKE 'memory_%'
                      AND c.data_type IN ('text', 'jsonb', 'character varying')
                      AND EXISTS (SELECT 1 FROM information_schema.columns a WHERE a.table_name = c.table_name
                                  AND a.table_schema = c.table_schema AND a.column_name = 'agent_id')
                    """
                )
            )
        ).all()
        for table, column in columns:
            hits = (
                await session.execute(
                    text(f'SELECT count(*) FROM {table} WHERE agent_id = :a AND "{column}"::text ILIKE :w'),
                    {"a": agent_id, "w": f"%{word}%"},
                )
            ).scalar_one()
            if hits:
                found.append(f"{table}.{column} x{hits}")
    return found


async def _assert_clean(memory: MemoryClient, agent_id: str) -> None:
    await assert_memory_invariants(memory, agent_id)
    report = await memory.check(agent_id)
    assert report.ok, [str(problem) for problem in report.problems]


async def test_forgetting_an_update_erases_its_quotes_and_makes_the_old_value_current_again(
    make_client: ClientFactory, agent_id: str
) -> None:
    async with make_client(_llm(_lisbon(), _porto())) as memory:
        a = await _write(memory, agent_id, "I live in Lisbon", T1)
        b = await _write(memory, agent_id, f"Moved to Porto with my cat Fizzgigwump, {MARKER}!", T2)
        assert [f.text for f in b.facts_updated] == [PORTO]
        assert await _rows_quoting(memory, agent_id, MARKER)

        counts = await memory.forget_event(agent_id, b.event_id)

        assert counts["events"] == 1 and counts["facts_erased"] == 2 and counts["facts_reopened"] == 1
        for word in (MARKER, "Fizzgigwump", "Porto"):
            assert await _rows_quoting(memory, agent_id, word) == [], word
        [x] = a.facts_added
        current = await memory.get_facts(agent_id)
        assert [(f.id, f.text, f.valid_to, f.invalidated_at) for f in current] == [(x.id, LISBON, None, None)]
        assert [f.id for f in await memory.get_facts(agent_id, include_history=True)] == [x.id]
        edges = await memory.get_relationships(agent_id, include_invalidated=True)
        assert [(e.target_key, e.evidence_fact_id, e.invalidated_at) for e in edges] == [("place:lisbon", x.id, None)]
        assert [e.id for e in await memory.get_events(agent_id)] == [a.event_id]
        assert await memory.get_trace(agent_id, a.event_id) is not None
        await _assert_clean(memory, agent_id)


async def test_a_fact_another_message_said_again_stays_with_that_message_as_its_source(
    make_client: ClientFactory, agent_id: str
) -> None:
    async with make_client(_llm(_lisbon(), _porto(), _porto_again(), _porto_again())) as memory:
        a = await _write(memory, agent_id, "I live in Lisbon", T1)
        b = await _write(memory, agent_id, f"Moved to Porto with my cat Fizzgigwump, {MARKER}!", T2)
        c = await _write(memory, agent_id, "Yes, I live in Porto now", T3)
        [y] = b.facts_updated
        assert [f.id for f in c.facts_unchanged] == [y.id]  # a NOOP: C backs Y

        counts = await memory.forget_event(agent_id, b.event_id)

        assert counts["facts_kept"] == 1 and counts["facts_erased"] == 1 and counts["facts_reopened"] == 0
        for word in (MARKER, "Fizzgigwump"):
            assert await _rows_quoting(memory, agent_id, word) == [], word
        [kept] = await memory.get_facts(agent_id)
        assert (kept.id, kept.text, kept.source_event_id) == (y.id, PORTO, c.event_id)
        history = await memory.get_facts(agent_id, include_history=True)
        [x] = a.facts_added
        assert [(f.id, f.valid_to is None) for f in history] == [(x.id, False), (y.id, True)]  # C still says Porto
        [edge] = await memory.get_relationships(agent_id)
        assert (edge.target_key, edge.evidence_fact_id) == ("place:porto", y.id)
        assert {e.id for e in await memory.get_events(agent_id)} == {a.event_id, c.event_id}
        await _assert_clean(memory, agent_id)


async def test_a_later_version_follows_what_the_erased_one_followed(make_client: ClientFactory, agent_id: str) -> None:
    madrid = answer(
        [("Ana", "person"), ("Madrid", "place")],
        [fact("Ana", "Ana lives in Madrid", action="UPDATE", attribute="lives_in")],
    )
    async with make_client(_llm(_lisbon(), _porto(), madrid)) as memory:
        a = await _write(memory, agent_id, "I live in Lisbon", T1)
        b = await _write(memory, agent_id, f"Moved to Porto with my cat Fizzgigwump, {MARKER}!", T2)
        d = await _write(memory, agent_id, "Now I live in Madrid", T3)

        await memory.forget_event(agent_id, b.event_id)

        assert await _rows_quoting(memory, agent_id, MARKER) == []
        [x], [w] = a.facts_added, d.facts_updated
        history = await memory.get_facts(agent_id, include_history=True)
        assert [(f.id, f.valid_from, f.valid_to) for f in history] == [(x.id, T1, T3), (w.id, T3, None)]
        assert [v.id for v in await memory.fact_history(agent_id, w.id)] == [x.id, w.id]
        await _assert_clean(memory, agent_id)


async def test_another_agents_event_is_refused_like_an_unknown_one_and_changes_nothing(
    make_client: ClientFactory, agent_id: str
) -> None:
    other = f"{agent_id}-other"
    async with make_client(_llm(_lisbon(), _lisbon())) as memory:
        mine = await _write(memory, agent_id, "I live in Lisbon", T1)
        theirs = await _write(memory, other, "I live in Lisbon", T1)
        messages = []
        for event_id in (theirs.event_id, uuid.uuid4()):
            with pytest.raises(InvalidInputError) as refused:
                await memory.forget_event(agent_id, event_id)
            messages.append(str(refused.value).replace(str(event_id), "<id>"))
        assert messages[0] == messages[1]
        with pytest.raises(InvalidInputError, match="UUID"):
            await memory.forget_event(agent_id, "not-an-id")
        for agent, written in ((agent_id, mine), (other, theirs)):
            assert [e.id for e in await memory.get_events(agent)] == [written.event_id]
            assert [f.text for f in await memory.get_facts(agent)] == [LISBON]

        await memory.forget_event(agent_id, mine.event_id)  # erasing mine leaves the other agent alone
        assert await memory.get_events(agent_id) == [] and await memory.get_facts(agent_id) == []
        assert [f.text for f in await memory.get_facts(other)] == [LISBON]
        assert await _rows_quoting(memory, agent_id, "Lisbon") == []
        await _assert_clean(memory, agent_id)
        await _assert_clean(memory, other)
        await memory.forget(other)


def test_cli_forget_event_needs_yes() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "memory_sdk", "forget-event", "someone", str(uuid.uuid4())],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--yes" in done.stderr


def _v(name: str, *, supersedes: str | None = None, current: bool = False, at: datetime = T1) -> Version:
    return Version(
        uuid.uuid5(uuid.NAMESPACE_OID, name),
        "person:ana",
        name,
        "lives_in",
        True,
        None if supersedes is None else uuid.uuid5(uuid.NAMESPACE_OID, supersedes),
        None,
        current,
        at,
    )


def test_plan_reopens_what_the_erased_update_closed_unless_a_kept_fact_closed_it() -> None:
    x, y = _v("x", at=T1), _v("y", supersedes="x", current=True, at=T2)
    erased = plan_erasure([y], {}, [x.id], {x.id: x}, {})
    assert erased.erased == {y.id} and erased.reopened == {x.id}
    kept = plan_erasure([y], {y.id: uuid.uuid4()}, [x.id], {x.id: x}, {})
    assert kept.erased == set() and kept.reopened == set() and y.id in kept.rehomed


def test_plan_relinks_a_later_version_and_ends_the_old_one_where_it_starts() -> None:
    x, y, w = _v("x", at=T1), _v("y", supersedes="x", at=T2), _v("w", supersedes="y", current=True, at=T3)
    plan = plan_erasure([y], {}, [x.id], {x.id: x, w.id: w}, {})
    assert plan.relinked == {w.id: x.id} and plan.retimed == {x.id: T3} and plan.reopened == set()


def test_redact_drops_erased_items_and_strings_quoting_the_message() -> None:
    stored = {"facts_unchanged": [{"id": "gone", "text": "t"}, {"id": "kept", "text": "said: hello there"}]}
    assert redact(stored, ["hello there"], {"gone"}, set()) == {"facts_unchanged": [{"id": "kept", "text": "[erased]"}]}
