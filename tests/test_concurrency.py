"""Concurrent writes against the real database: the writes are made to really overlap with barriers at the provider
boundary (the scripted LLM and a gated embedder), then the stored memory is checked, each test ending with the
invariants of tests/invariants.py.

A rendezvous holds the first `parties` arrivals until all of them are there, so every write has logged its event
and read memory before any of them goes on; if they never all arrive (the SDK serialised them), the responder
raises after a timeout and the write reports it, rather than the test hanging.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import uuid
from collections.abc import Awaitable, Collection, Iterable, Sequence
from contextlib import AsyncExitStack
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from memory_sdk.llm.protocols import LLMRequest
from memory_sdk.results import WriteResult
from memory_sdk.testing import HashEmbedder, ScriptedLLM
from memory_sdk.text import slugify
from tests.conftest import ClientFactory
from tests.invariants import assert_memory_invariants
from tests.scripts import extraction
from tests.test_stays_true import answer, fact

T0 = datetime(2025, 1, 1, 9, 0, tzinfo=UTC)
T1 = datetime(2025, 3, 1, 10, 0, tzinfo=UTC)
T2 = datetime(2025, 6, 15, 10, 0, tzinfo=UTC)
# Long enough for a loaded 2-core machine, well under config.extraction_timeout_sec (30 s).
OVERLAP_TIMEOUT_SEC = 10.0
# Twenty distinct names no pair of which resolves to another by prefix or name similarity.
CITIES = (
    "Recife",
    "Natal",
    "Salvador",
    "Fortaleza",
    "Belém",
    "Manaus",
    "Goiânia",
    "Cuiabá",
    "Maceió",
    "Aracaju",
    "Teresina",
    "Palmas",
    "Macapá",
    "Boa Vista",
    "Porto Velho",
    "Rio Branco",
    "Vitória",
    "Florianópolis",
    "Campo Grande",
    "Londrina",
)


class Rendezvous:
    """The first `parties` arrivals wait for one another, once; later arrivals pass straight through.

    When they do not all arrive in time, each waiter raises (the write reports it as a provider failure) and
    `failure` says so, for the stages that swallow a provider failure into a fallback (reconciliation).
    """

    def __init__(self, parties: int, where: str) -> None:
        self.parties = parties
        self.where = where
        self.arrived = 0
        self.failure: str | None = None
        self._barrier = asyncio.Barrier(parties)

    async def wait(self) -> None:
        self.arrived += 1
        if self.arrived > self.parties:
            return
        try:
            await asyncio.wait_for(self._barrier.wait(), OVERLAP_TIMEOUT_SEC)
        except (TimeoutError, asyncio.BrokenBarrierError):
            await self._barrier.abort()  # the others stop waiting too
            self.failure = self.failure or (
                f"only {min(self.arrived, self.parties)} of {self.parties} writes reached {self.where} together "
                f"within {OVERLAP_TIMEOUT_SEC:g}s: the writes did not overlap"
            )
            raise AssertionError(self.failure) from None


def assert_overlapped(*gates: Rendezvous) -> None:
    failures = [gate.failure for gate in gates if gate.failure]
    assert not failures, failures


class GatedEmbedder:
    """A HashEmbedder whose batches other than a message alone (the fact texts and entity names post_extraction
    embeds) meet at a rendezvous first."""

    def __init__(self, gate: Rendezvous, messages: Collection[str]) -> None:
        self._inner = HashEmbedder()
        self._gate = gate
        self._messages = set(messages)

    @property
    def dimensions(self) -> int:
        return self._inner.dimensions

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not set(texts) <= self._messages:
            await self._gate.wait()
        return await self._inner.embed(texts)


async def all_succeed(writes: Iterable[Awaitable[WriteResult]]) -> list[WriteResult]:
    """Run the writes concurrently; none may raise and every one must succeed (so none reports an error either,
    a savepoint rolled back alone included)."""
    outcomes = await asyncio.gather(*writes, return_exceptions=True)
    raised = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
    assert not raised, f"{len(raised)} of {len(outcomes)} writes raised: {raised[:3]!r}"
    results = [outcome for outcome in outcomes if isinstance(outcome, WriteResult)]
    failed = [result.error for result in results if not result.success]
    assert not failed, f"{len(failed)} of {len(results)} writes failed: {failed[:5]}"
    return results


def user_prompt(request: LLMRequest) -> str:
    return request.messages[-1]["content"]


@pytest.mark.parametrize("clients", [1, 2], ids=["one_client", "two_clients"])
@pytest.mark.parametrize("copies", [2, 5, 10])
async def test_identical_concurrent_writes_leave_one_current_fact(
    make_client: ClientFactory, agent_id: str, copies: int, clients: int
) -> None:
    message = "A Ana adora jazz, sabia?"
    said = answer([("Ana", "person")], [fact("Ana", "Ana loves jazz")])
    extraction = Rendezvous(copies, "extraction")
    embedding = Rendezvous(copies, "the fact embedding")

    async def extract(request: LLMRequest) -> dict[str, Any]:
        await extraction.wait()
        return said

    async with AsyncExitStack() as stack:
        memories = [
            await stack.enter_async_context(
                make_client(
                    ScriptedLLM(
                        {
                            "informed_extraction": extract,
                            "reconciliation": lambda request: {"action": "NOOP", "target": "1"},
                        }
                    ),
                    embedder=GatedEmbedder(embedding, {message}),
                )
            )
            for _ in range(clients)
        ]
        await all_succeed(
            memories[n % clients].write(agent_id, message, speaker_name="Rafael", occurred_at=T1) for n in range(copies)
        )
        assert_overlapped(extraction, embedding)
        memory = memories[0]
        current = [f.text for f in await memory.get_facts(agent_id)]
        assert current.count("Ana loves jazz") == 1, f"current facts after {copies} identical writes: {current}"
        assert len(await memory.get_events(agent_id)) == copies  # every message is logged, even a repeated one
        await assert_memory_invariants(memory, agent_id)


async def test_concurrent_moves_leave_one_open_home_and_one_current_edge(
    make_client: ClientFactory, agent_id: str
) -> None:
    moves = len(CITIES)
    moved_at = {city: T0 + timedelta(days=n + 1) for n, city in enumerate(CITIES)}
    extraction = Rendezvous(moves, "extraction")
    reconciliation = Rendezvous(moves, "reconciliation")

    async def extract(request: LLMRequest) -> dict[str, Any]:
        prompt = user_prompt(request)
        city = next((c for c in CITIES if f"Me mudei pra {c}" in prompt), "Curitiba")
        if city != "Curitiba":
            await extraction.wait()
        return answer(
            [("Rafael", "person"), (city, "place")],
            [fact("Rafael", f"Rafael mora em {city}", attribute="lives_in")],
            [("Rafael", "lives_in", city)],
        )

    async def reconcile(request: LLMRequest) -> dict[str, Any]:
        await reconciliation.wait()
        return {"action": "UPDATE", "target": "1", "reasoning": "moved"}

    llm = ScriptedLLM(
        {
            "informed_extraction": extract,
            "reconciliation": reconcile,
            "entity_resolution": lambda request: {"match": None},
        }
    )
    async with make_client(llm) as memory:
        home = await memory.write(agent_id, "Moro em Curitiba", speaker_name="Rafael", occurred_at=T0)
        assert home.success, home.error
        await all_succeed(
            memory.write(agent_id, f"Me mudei pra {city}", speaker_name="Rafael", occurred_at=moved_at[city])
            for city in CITIES
        )
        assert_overlapped(extraction, reconciliation)

        history = [f for f in await memory.get_facts(agent_id, include_history=True) if f.attribute == "lives_in"]
        open_homes = [f for f in history if f.valid_to is None and f.invalidated_at is None]
        assert [f.text for f in open_homes] == [f"Rafael mora em {CITIES[-1]}"], "the latest move is the open home"
        [home_now] = open_homes
        edges = [e for e in await memory.get_relationships(agent_id, entity="Rafael") if e.rel_type == "lives_in"]
        found = [(e.target_key, e.evidence_fact_id == home_now.id) for e in edges]
        assert found == [(f"place:{slugify(CITIES[-1])}", True)], (
            f"{len(edges)} current lives_in edges (target, evidence is the open home): {found}"
        )
        times = [T0, *moved_at.values()]
        assert sorted((f.valid_from, f.valid_to) for f in history) == [
            *itertools.pairwise(times),
            (times[-1], None),
        ]  # one home at a time, no gap, whatever order the writes committed in
        await assert_memory_invariants(memory, agent_id)


@pytest.mark.parametrize("writers", [2, 8])
async def test_concurrent_writes_naming_one_new_city_with_different_types_create_one_entity(
    make_client: ClientFactory, agent_id: str, writers: int
) -> None:
    years = [2017 + n for n in range(writers)]
    kinds = ("city", "place")  # a small model is not consistent about the type of one place
    messages = {year: f"Visitei São Paulo (Sampa) em {year}" for year in years}
    extraction = Rendezvous(writers, "extraction")
    embedding = Rendezvous(writers, "the name embedding")

    async def extract(request: LLMRequest) -> dict[str, Any]:
        await extraction.wait()
        year = next(y for y in years if messages[y] in user_prompt(request))
        return {
            "entities": [
                {"name": "Rafael", "type": "person"},
                {"name": "São Paulo", "type": kinds[year % 2], "aliases": ["Sampa"]},
            ],
            "facts": [fact("Rafael", f"Rafael visitou São Paulo em {year}")],
            "relations": [],
        }

    llm = ScriptedLLM(
        {
            "informed_extraction": extract,
            "reconciliation": lambda request: {"action": "ADD"},
            "entity_resolution": lambda request: {"match": "1"},
        }
    )
    async with make_client(llm, embedder=GatedEmbedder(embedding, messages.values())) as memory:
        await all_succeed(memory.write(agent_id, messages[year], speaker_name="Rafael") for year in years)
        assert_overlapped(extraction, embedding)

        city = await memory.get_entity(agent_id, "São Paulo")
        assert city is not None and city.name == "São Paulo"
        assert "Sampa" in city.aliases, city
        assert await memory.get_entity(agent_id, "Sampa") == city
        visits = sorted(f.text for f in await memory.get_facts(agent_id, entity="São Paulo"))
        expected = [f"Rafael visitou São Paulo em {year}" for year in years]
        assert visits == expected, f"facts linked to {city.key}: {visits}"  # every visit is on the one city
        await assert_memory_invariants(memory, agent_id)


async def test_delayed_older_move_is_stored_closed_and_leaves_the_newer_edge_current(
    make_client: ClientFactory, agent_id: str
) -> None:
    def lives_in(city: str) -> dict[str, Any]:
        return answer(
            [("Rafael", "person"), (city, "place")],
            [fact("Rafael", f"Rafael mora em {city}", attribute="lives_in")],
            [("Rafael", "lives_in", city)],
        )

    llm = ScriptedLLM(
        {
            "informed_extraction": [lives_in("São Paulo"), lives_in("Curitiba")],
            "reconciliation": lambda request: {"action": "UPDATE", "target": "1"},
        }
    )
    async with make_client(llm) as memory:
        newer = await memory.write(agent_id, "Me mudei pra São Paulo", speaker_name="Rafael", occurred_at=T2)
        older = await memory.write(agent_id, "Morava em Curitiba", speaker_name="Rafael", occurred_at=T1)
        assert newer.success and older.success, (newer.error, older.error)

        history = {f.text: f for f in await memory.get_facts(agent_id, entity="Rafael", include_history=True)}
        curitiba, sao_paulo = history["Rafael mora em Curitiba"], history["Rafael mora em São Paulo"]
        assert (curitiba.valid_from, curitiba.valid_to, curitiba.invalidated_at) == (T1, T2, None)  # history
        assert (sao_paulo.valid_to, sao_paulo.invalidated_at) == (None, None)
        edges = await memory.get_relationships(agent_id, entity="Rafael")
        assert [(e.rel_type, e.target_key, e.evidence_fact_id) for e in edges] == [
            ("lives_in", "place:sao_paulo", sao_paulo.id)
        ], f"current edges of Rafael: {[(e.rel_type, e.target_key, e.evidence_fact_id == sao_paulo.id) for e in edges]}"
        await assert_memory_invariants(memory, agent_id)


LOAD_AGENTS = 32
LOAD_WRITES_PER_AGENT = 8
_NUMBER = re.compile(r"número da sorte é (\d+)")


async def test_many_agents_writing_at_once_through_a_small_pool_lose_no_write(make_client: ClientFactory) -> None:
    agents = [f"load-{uuid.uuid4().hex[:8]}-{n}" for n in range(LOAD_AGENTS)]

    def extract(request: LLMRequest) -> dict[str, Any]:
        match = _NUMBER.search(user_prompt(request))
        assert match is not None
        return answer([("Rafael", "person")], [fact("Rafael", f"O número da sorte do Rafael foi {match[1]}")])

    llm = ScriptedLLM({"informed_extraction": extract, "reconciliation": lambda request: {"action": "ADD"}})
    async with make_client(llm, pool_size=4) as memory:
        await all_succeed(
            memory.write(agent, f"Meu número da sorte é {n}", speaker_name="Rafael")
            for n in range(LOAD_WRITES_PER_AGENT)
            for agent in agents
        )
        stored = {agent: len(await memory.get_events(agent)) for agent in agents}
        short = {agent: count for agent, count in stored.items() if count != LOAD_WRITES_PER_AGENT}
        assert not short, f"events stored per agent, expected {LOAD_WRITES_PER_AGENT}: {short}"
        for agent in agents:
            await assert_memory_invariants(memory, agent)  # includes: no pipeline run left 'running'


OTHER_AGENT_TIMEOUT_SEC = 5.0


async def test_writes_parked_in_extraction_for_one_agent_do_not_hold_up_another_agent(
    make_client: ClientFactory, agent_id: str
) -> None:
    parked, other = 8, f"{agent_id}-b"
    arrived: list[str] = []
    all_parked, release = asyncio.Event(), asyncio.Event()

    async def extract(request: LLMRequest) -> dict[str, Any]:
        prompt = user_prompt(request)
        if "Bia" in prompt:
            return answer([("Bia", "person")], [fact("Bia", "Bia toca violino")])
        arrived.append(prompt)
        if len(arrived) == parked:
            all_parked.set()
        await asyncio.wait_for(release.wait(), OVERLAP_TIMEOUT_SEC * 2)
        number = next(n for n in range(parked) if f"tarefa {n}." in prompt)
        return answer([("Rafael", "person")], [fact("Rafael", f"Rafael terminou a tarefa {number}")])

    llm = ScriptedLLM({"informed_extraction": extract, "reconciliation": lambda request: {"action": "ADD"}})
    # A pool smaller than the parked writes: a write waiting on its LLM call must hold no connection.
    async with make_client(llm, pool_size=2) as memory:
        writes = [
            asyncio.ensure_future(memory.write(agent_id, f"Terminei a tarefa {n}.", speaker_name="Rafael"))
            for n in range(parked)
        ]
        try:
            try:
                await asyncio.wait_for(all_parked.wait(), OVERLAP_TIMEOUT_SEC)
            except TimeoutError:
                pytest.fail(f"only {len(arrived)} of {parked} writes of one agent reached extraction together")
            try:
                meanwhile = await asyncio.wait_for(
                    memory.write(other, "A Bia toca violino", speaker_name="Bia"), OTHER_AGENT_TIMEOUT_SEC
                )
            except TimeoutError:
                pytest.fail(
                    f"a write for another agent did not finish within {OTHER_AGENT_TIMEOUT_SEC:g}s "
                    f"while {parked} writes of {agent_id} were parked in extraction"
                )
            assert meanwhile.success, meanwhile.error
            assert not any(write.done() for write in writes)  # agent A's writes were still parked all along
        finally:
            release.set()
            await all_succeed(writes)
        assert len(await memory.get_events(agent_id)) == parked
        for agent in (agent_id, other):
            await assert_memory_invariants(memory, agent)


async def test_a_noop_whose_target_closed_meanwhile_confirms_the_identical_fact_added_meanwhile(
    make_client: ClientFactory, agent_id: str
) -> None:
    """Found by benchmarks/faults.py. Write B decides NOOP on the current "Ana likes jazz" and waits (its other fact
    is at the reconciliation LLM). Meanwhile C retracts that fact and A says it again, so a new identical fact is
    current. B's NOOP target is no longer current when B applies: it must confirm A's fact, not ADD a second copy."""
    answers = {  # by a marker word of the message
        "zqfirst": extraction(("Ana", "Ana likes jazz")),
        "zqpiano": extraction(("Ana", "Ana plays the piano now")),
        "zqb": extraction(("Ana", "Ana likes jazz"), ("Ana", "Ana plays the guitar now")),
        "zqc": extraction(("Ana", "Ana no longer likes jazz")),
        "zqa": extraction(("Ana", "Ana likes jazz")),
    }
    b_waits, release_b = asyncio.Event(), asyncio.Event()

    def extract(request: LLMRequest) -> dict[str, Any]:
        [marker] = [word for word in answers if word in user_prompt(request).split()]
        return answers[marker]

    async def reconcile(request: LLMRequest) -> dict[str, Any]:
        prompt = user_prompt(request)
        if "guitar" in prompt:
            b_waits.set()
            await release_b.wait()
            return {"action": "ADD", "target": None}
        if "no longer" in prompt:
            return {"action": "DELETE", "target": "1"}
        return {"action": "ADD", "target": None}

    llm = ScriptedLLM({"informed_extraction": extract, "reconciliation": reconcile})
    async with make_client(llm) as memory:
        assert (await memory.write(agent_id, "zqfirst Ana likes jazz", "Rafael")).success
        assert (await memory.write(agent_id, "zqpiano Ana plays the piano now", "Rafael")).success
        b = asyncio.create_task(memory.write(agent_id, "zqb Ana likes jazz and plays the guitar now", "Rafael"))
        await asyncio.wait_for(b_waits.wait(), OVERLAP_TIMEOUT_SEC)
        c = await memory.write(agent_id, "zqc Ana no longer likes jazz", "Rafael", verbose=True)
        a = await memory.write(agent_id, "zqa Ana likes jazz", "Rafael")
        release_b.set()
        b_result = await b
        await assert_memory_invariants(memory, agent_id)
        jazz = [f for f in await memory.get_facts(agent_id, entity="Ana") if f.text == "Ana likes jazz"]

    assert c.facts_deleted, c.pipeline
    assert [f.text for f in a.facts_added] == ["Ana likes jazz"]
    assert b_result.success, b_result.error
    assert [f.id for f in jazz] == [a.facts_added[0].id]
