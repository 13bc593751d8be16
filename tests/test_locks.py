"""The row locks and the re-check under the write path, each shown to hold by a race made real against the real
database (the LLM and the embedder are memory_sdk.testing doubles).

Writes about one entity queue on its advisory locks for their whole apply transaction (pipeline/upsert.py), so two
writes about one subject never apply at once: there, what keeps memory true is the re-check of a decision's target
once it is locked (fact_writes: a target closed meanwhile makes the decision an ADD). The row locks are what queues
two writes where those locks do not meet: the retries of one message, which take no entity lock, and two writes a
merge left on one fact (merge_entities moved the first write's subject into the second's while it was deciding).

Each race is made real with an `Overlap` at its critical point, the moment a locking read has returned: the first
party there waits until the second is there too (which happens only when the read took no lock) or is seen in
pg_stat_activity waiting on a lock in that read (the lock holding it back), then goes on and commits. Each test
went red with what it is named for removed from the source (issue 39):

- FOR UPDATE in queries.claim_event: test_two_retries_of_one_failed_message_take_it_over_once (two runs)
- the re-check in fact_writes._current_target: test_two_updates_decided_at_once_close_their_target_once and
  test_two_writes_a_merge_left_on_one_fact_close_it_once (the target closed twice, two successors)
- FOR UPDATE in queries.lock_fact: test_two_writes_a_merge_left_on_one_fact_close_it_once (two successors)
- FOR UPDATE in queries.lock_timeline: test_a_version_a_timeline_read_returned_stays_open_until_the_reader_ends
  (two transactions, not two writes: no race of two writes tells that lock apart today, see the test)
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any, ParamSpec, TypeVar

import pytest
from sqlalchemy import text

from memory_sdk import MemoryClient
from memory_sdk.errors import ProviderError
from memory_sdk.llm.protocols import LLMRequest
from memory_sdk.results import Fact, WriteResult
from memory_sdk.store import queries
from memory_sdk.testing import HashEmbedder, ScriptedLLM
from tests.conftest import ClientFactory
from tests.invariants import assert_memory_invariants
from tests.test_concurrency import OVERLAP_TIMEOUT_SEC, Rendezvous, all_succeed, user_prompt
from tests.test_recovery import run_statuses

pytestmark = pytest.mark.integration

P = ParamSpec("P")
R = TypeVar("R")

SPEAKER = "Rafael"
JAN, MAR, JUN, SEP = (datetime(2025, month, 1, 9, 0, tzinfo=UTC) for month in (1, 3, 6, 9))
DIM = HashEmbedder().dimensions
# The statements of the locking reads, as pg_stat_activity shows a backend waiting in one.
CLAIM_READ = "FROM memory_events"
FACT_READ = "FROM memory_facts WHERE agent_id = $1 AND id = $2 FOR UPDATE"


def vector_at(cosine: float, axis: int) -> list[float]:
    """A unit vector whose cosine with `vector_at(1.0, 1)` is `cosine`: pins how similar a new fact is to the
    stored one, so that reconciliation asks the model (above the fast path) and the guards let it touch it."""
    vector = [0.0] * DIM
    vector[0], vector[axis] = cosine, math.sqrt(1 - cosine * cosine)
    return vector


def said(*facts: tuple[str, str, str | None], places: tuple[str, ...] = ()) -> dict[str, Any]:
    """An informed answer without decisions (reconciliation decides): facts as (subject, text, attribute)."""
    people = dict.fromkeys(subject for subject, _text, _attribute in facts)
    return {
        "entities": [{"name": name, "type": "person"} for name in people]
        + [{"name": place, "type": "place"} for place in places],
        "facts": [{"subject": s, "text": t, "attribute": a} for s, t, a in facts],
        "relations": [],
    }


def by_message(answers: dict[str, dict[str, Any]]) -> Callable[[LLMRequest], dict[str, Any]]:
    """An informed-extraction responder answering the message its prompt carries."""

    def extract(request: LLMRequest) -> dict[str, Any]:
        return answers[user_prompt(request).split("<<<\n", 1)[1].split("\n>>>", 1)[0]]

    return extract


def shown_number(request: LLMRequest, fact_text: str) -> str:
    """The number a reconciliation prompt shows `fact_text` under."""
    for line in user_prompt(request).splitlines():
        number, _, rest = line.partition(". ")
        if number.isdigit() and rest.startswith(fact_text):
            return number
    raise AssertionError(f"{fact_text!r} is not among the candidates shown:\n{user_prompt(request)}")


async def waits_on_a_lock(memory: MemoryClient, statement: str) -> bool:
    """Whether a backend of the test database is waiting on a lock in a statement containing `statement`."""
    async with memory.database.transaction() as session:  # the operator's view: every backend
        waiting = await session.scalar(
            text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock' AND position(:statement in query) > 0"
            ),
            {"statement": statement},
        )
    return bool(waiting)


class Overlap:
    """Two transactions at one critical point, right after a locking read returned.

    The first to get there waits until the second is there too (its read took no lock: both go on, and the race
    happens) or until the second is seen waiting on a lock in `statement` (the lock holds it back: the first goes
    on and commits, then the second's read returns what the first left). Later arrivals pass straight through.
    `held_back` says which of the two it was.
    """

    def __init__(self, memory: MemoryClient, statement: str) -> None:
        self._memory = memory
        self._statement = statement
        self._second = asyncio.Event()
        self.first = asyncio.Event()
        self.arrived = 0
        self.held_back = False

    def after(
        self, read: Callable[P, Awaitable[R]], when: Callable[..., bool] = lambda *_a, **_k: True
    ) -> Callable[P, Awaitable[R]]:
        """`read`, then the overlap for the calls `when` picks (called with the read's arguments)."""

        async def locked_read(*args: P.args, **kwargs: P.kwargs) -> R:
            result = await read(*args, **kwargs)
            if when(*args, **kwargs):
                await self.wait()
            return result

        return locked_read

    async def wait(self) -> None:
        self.arrived += 1
        if self.arrived > 1:
            self._second.set()
            return
        self.first.set()
        deadline = time.monotonic() + OVERLAP_TIMEOUT_SEC
        while not self._second.is_set():
            if await waits_on_a_lock(self._memory, self._statement):
                self.held_back = True
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"the second party neither passed nor waited in {self._statement!r}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._second.wait(), 0.02)


async def history_of(memory: MemoryClient, agent_id: str, fact_text: str) -> tuple[Fact, list[Fact]]:
    """The stored fact with `fact_text`, and every version that supersedes it."""
    history = await memory.get_facts(agent_id, include_history=True, min_confidence=0.0)
    [stored] = [fact for fact in history if fact.text == fact_text]
    return stored, [fact for fact in history if fact.supersedes_fact_id == stored.id]


def rolled_back_applies(results: Sequence[WriteResult]) -> list[str]:
    """Why each write's apply transaction was rolled back and run again (isolated, upsert.py), from the traces
    (verbose=True): two writes that queue on a lock never need it; two that take no lock may deadlock instead."""
    steps = [step for result in results if result.pipeline for step in result.pipeline.steps]
    return [str(step.data["isolated_retry"]) for step in steps if "isolated_retry" in step.data]


async def written(memory: MemoryClient, agent_id: str, message: str, at: datetime) -> WriteResult:
    result = await memory.write(agent_id, message, SPEAKER, occurred_at=at)
    assert result.success, result.error
    return result


# -- claim_event: the retries of one message ------------------------------------------------------------------


async def test_two_retries_of_one_failed_message_take_it_over_once(
    make_client: ClientFactory, agent_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both retries find the event's only run failed. The first to lock the event opens a run; the second waits on
    the event row, then sees that live run and waits for its outcome instead of running the message again."""
    message = "Ana plays the violin"
    down = ProviderError("chaos: the model is down")
    async with make_client(ScriptedLLM({"informed_extraction": [down], "entity_scan": [down]})) as memory:
        first = await memory.write(agent_id, message, SPEAKER, message_id="m-1")
    assert not first.success
    llm = ScriptedLLM({"informed_extraction": by_message({message: said(("Ana", message, None))})})
    async with make_client(llm) as memory:
        overlap = Overlap(memory, CLAIM_READ)
        monkeypatch.setattr(queries, "claim_event", overlap.after(queries.claim_event))
        retries = await all_succeed(memory.write(agent_id, message, SPEAKER, message_id="m-1") for _ in range(2))
        statuses = await run_statuses(memory, agent_id)
        facts = await memory.get_facts(agent_id)
        await assert_memory_invariants(memory, agent_id)

    assert statuses == ["failed", "succeeded"]  # one run for the two retries
    assert sorted(result.duplicate for result in retries) == [False, True]
    assert [fact.text for fact in facts] == [message]
    assert overlap.held_back  # the second retry waited on the event's row lock


# -- the re-check: two decisions on one target, applied one after the other -----------------------------------

JAZZ, ROCK, BLUES = "Ana likes jazz", "Ana likes rock now", "Ana likes blues now"


async def test_two_updates_decided_at_once_close_their_target_once(make_client: ClientFactory, agent_id: str) -> None:
    """Both writes decide UPDATE of "Ana likes jazz" before either applies (they meet at the reconciliation call).
    The entity's advisory lock queues the second behind the first; under it, the second finds its target closed by
    the first and ADDs its fact: the target is closed once, with one successor."""
    decided = Rendezvous(2, "the reconciliation call")

    async def reconcile(request: LLMRequest) -> dict[str, Any]:
        await decided.wait()
        return {"action": "UPDATE", "target": shown_number(request, JAZZ)}

    answers = {text: said(("Ana", text, None)) for text in (JAZZ, ROCK, BLUES)}
    llm = ScriptedLLM({"informed_extraction": by_message(answers), "reconciliation": reconcile})
    embedder = HashEmbedder(overrides={JAZZ: vector_at(1.0, 1), ROCK: vector_at(0.7, 2), BLUES: vector_at(0.7, 3)})
    async with make_client(llm, embedder=embedder) as memory:
        await written(memory, agent_id, JAZZ, JAN)
        results = await all_succeed(
            [
                memory.write(agent_id, ROCK, SPEAKER, occurred_at=MAR, verbose=True),
                memory.write(agent_id, BLUES, SPEAKER, occurred_at=JUN, verbose=True),
            ]
        )
        jazz, successors = await history_of(memory, agent_id, JAZZ)
        current = sorted(fact.text for fact in await memory.get_facts(agent_id))
        await assert_memory_invariants(memory, agent_id)

    assert decided.failure is None, decided.failure
    assert len(successors) == 1, [(f.text, f.valid_from) for f in successors]
    assert jazz.valid_to == successors[0].valid_from
    assert sorted(len(result.facts_superseded) for result in results) == [0, 1]  # the second became an ADD
    assert current == sorted([BLUES, ROCK])
    assert not rolled_back_applies(results)


# -- lock_fact: two writes a merge left on one fact -----------------------------------------------------------

VIOLIN, CELLO, PIANO = "Bia plays the violin", "Bia plays the cello now", "Beatriz plays the piano now"
NURSE = "Beatriz is a nurse"


async def test_two_writes_a_merge_left_on_one_fact_close_it_once(
    make_client: ClientFactory, agent_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write about Bia decides to UPDATE "Bia plays the violin"; meanwhile Bia is merged into Beatriz, and a write
    about Beatriz decides to UPDATE the same fact, now Beatriz's. Their advisory locks differ (Bia's, Beatriz's), so
    they apply at once: Beatriz's locks the fact first, and its row lock queues Bia's, which then finds the fact
    closed and ADDs its own. The fact is closed once, with one successor, and neither apply is rolled back."""
    parked = asyncio.Event()
    answers = {text: said((text.split()[0], text, None)) for text in (VIOLIN, NURSE, CELLO, PIANO)}
    pinned = {VIOLIN: vector_at(1.0, 1), CELLO: vector_at(0.7, 2), PIANO: vector_at(0.7, 3), NURSE: vector_at(0, 4)}
    overlap: Overlap | None = None

    async def reconcile(request: LLMRequest) -> dict[str, Any]:
        if CELLO in user_prompt(request):  # Bia's write: decided before the merge, applied once Beatriz's holds
            parked.set()
            assert overlap is not None
            await asyncio.wait_for(overlap.first.wait(), OVERLAP_TIMEOUT_SEC)
        return {"action": "UPDATE", "target": shown_number(request, VIOLIN)}

    llm = ScriptedLLM({"informed_extraction": by_message(answers), "reconciliation": reconcile})
    async with make_client(llm, embedder=HashEmbedder(overrides=pinned)) as memory:
        await written(memory, agent_id, VIOLIN, JAN)
        await written(memory, agent_id, NURSE, JAN)
        violin, _ = await history_of(memory, agent_id, VIOLIN)
        overlap = Overlap(memory, FACT_READ)
        on_violin = overlap.after(queries.lock_fact, lambda _conn, _agent, fact_id: fact_id == violin.id)
        monkeypatch.setattr(queries, "lock_fact", on_violin)
        bia = asyncio.create_task(memory.write(agent_id, CELLO, SPEAKER, occurred_at=MAR, verbose=True))
        await asyncio.wait_for(parked.wait(), OVERLAP_TIMEOUT_SEC)
        await memory.merge_entities(agent_id, "person:bia", "person:beatriz")
        beatriz = memory.write(agent_id, PIANO, SPEAKER, occurred_at=JUN, verbose=True)
        bia_result, beatriz_result = await all_succeed([bia, beatriz])
        violin, successors = await history_of(memory, agent_id, VIOLIN)
        await assert_memory_invariants(memory, agent_id)

    assert [fact.text for fact in successors] == [PIANO]
    assert violin.valid_to == JUN
    assert [fact.text for fact in bia_result.facts_added] == [CELLO] and not bia_result.facts_superseded
    assert not rolled_back_applies([bia_result, beatriz_result])
    assert overlap.held_back  # Bia's write waited on the fact's row lock


# -- lock_timeline: the versions it returns stay as read until the reader's transaction ends --------------------

LISBON = "Ana lives in Lisbon"
CLOSE_STATEMENT = "UPDATE memory_facts"


async def test_a_version_a_timeline_read_returned_stays_open_until_the_reader_ends(
    make_client: ClientFactory, agent_id: str
) -> None:
    """What fact_writes plans on: the versions lock_timeline returns are locked until its transaction ends, so a
    transaction closing one of them waits for the reader instead of changing the timeline under its plan.

    Two transactions, not two writes: a write upserts its subject's entity row before reading the timeline, and
    every fact change takes that row too (the change counter of migration 0011), so any other write that would
    close a version of the subject already queues there; no race of two writes tells this lock apart today
    (tried: two writes a merge left on one timeline deadlock on those two rows, with or without it, and the
    isolated retry lands the right state). This lock is the layer under that one."""
    answer = said(("Ana", LISBON, "lives_in"), places=("Lisbon",))
    async with make_client(ScriptedLLM({"informed_extraction": by_message({LISBON: answer})})) as memory:
        await written(memory, agent_id, LISBON, JAN)
        lisbon, _ = await history_of(memory, agent_id, LISBON)
        lisbon_id = lisbon.id
        assert lisbon_id is not None and lisbon.attribute == "lives_in"
        closed = asyncio.Event()

        async def close_lisbon() -> None:
            async with memory.database.tenant(agent_id) as conn:
                await queries.close_fact(conn, agent_id, lisbon_id, MAR, invalidate=False)
            closed.set()

        async with memory.database.tenant(agent_id) as reader:
            versions = await queries.lock_timeline(reader, agent_id, lisbon.entity_key, "lives_in", JUN, None)
            closer = asyncio.create_task(close_lisbon())
            deadline = time.monotonic() + OVERLAP_TIMEOUT_SEC
            while not closed.is_set() and not await waits_on_a_lock(memory, CLOSE_STATEMENT):
                assert time.monotonic() < deadline, "the closing transaction neither ended nor waited"
                await asyncio.sleep(0.02)
            closed_under_the_reader = closed.is_set()
            as_the_reader_sees_it = await queries.lock_fact(reader, agent_id, lisbon_id)
        await asyncio.wait_for(closer, OVERLAP_TIMEOUT_SEC)  # the reader ended: the close goes through
        lisbon, _ = await history_of(memory, agent_id, LISBON)

    assert [version_id for version_id, _start, _end in versions] == [lisbon.id]
    assert not closed_under_the_reader
    assert as_the_reader_sees_it is not None and as_the_reader_sees_it.valid_to is None
    assert lisbon.valid_to == MAR
