"""A dry run is the real write, rolled back: each decision kind runs as a dry run and then as a real run on the
same stored state with the same model answers; both must report the same thing, and the dry run must leave every
table of the schema exactly as it found it (row counts and contents)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import pytest
from sqlalchemy import text

from memory_sdk import MemoryClient, WriteResult
from memory_sdk.errors import InvalidInputError, ProviderError
from memory_sdk.llm.protocols import LLMRequest
from memory_sdk.testing import ScriptedLLM
from tests.conftest import ClientFactory
from tests.scripts import CLARA_EXTRACTION, CLARA_MESSAGE
from tests.test_stays_true import answer, fact

T0 = datetime(2025, 2, 1, 10, 0, tzinfo=UTC)
T1 = datetime(2025, 3, 1, 10, 0, tzinfo=UTC)
T2 = datetime(2025, 6, 15, 10, 0, tzinfo=UTC)
T3 = datetime(2025, 9, 1, 10, 0, tzinfo=UTC)


# --- the parity harness ------------------------------------------------------------------------------------------

Snapshot = dict[str, tuple[int, str]]


async def snapshot(memory: MemoryClient) -> Snapshot:
    """Row count and a digest of the rows of every table of the schema, all agents: a dry run that inserted,
    updated or deleted anything anywhere changes it. The fact indexer is drained first: it sets `indexed` on the
    facts an earlier real write committed, in the background, and would otherwise change a row while the dry run
    runs (store/indexing.py)."""
    await memory.database.indexer.drain()
    async with memory.database.engine.connect() as conn:
        tables = (
            await conn.execute(text("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"))
        ).scalars()
        result: Snapshot = {}
        for table in sorted(tables):
            digest = (
                f"SELECT count(*), md5(coalesce(string_agg(t::text, chr(10) ORDER BY t::text), '')) FROM \"{table}\" t"
            )
            row = (await conn.execute(text(digest))).one()
            result[table] = (row[0], row[1])
        return result


def normalised(result: WriteResult, shared: set[str], since: datetime) -> Any:
    """The result as plain data with what must differ between two runs taken out: timings, the dry_run flag,
    ids of rows each run created (numbered in order of appearance; ids of stored rows, found in both results, are
    kept) and wall-clock timestamps (taken after `since`)."""
    fresh: dict[str, str] = {}

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items() if k not in ("duration_ms", "dry_run")}
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, str):
            if _is_uuid(value) and value not in shared:
                return fresh.setdefault(value, f"new-{len(fresh)}")
            moment = _aware(value)
            if moment is not None and moment >= since:
                return "<now>"
        return value

    return walk(result.model_dump(mode="json"))


def _is_uuid(value: str) -> bool:
    try:
        UUID(value)
    except ValueError:
        return False
    return True


def _aware(value: str) -> datetime | None:
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def _uuids(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set().union(*(_uuids(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_uuids(v) for v in value))
    return {value} if isinstance(value, str) and _is_uuid(value) else set()


def _calls(requests: list[LLMRequest]) -> list[tuple[str, Any]]:
    return [(request.purpose, request.messages) for request in requests]


async def dry_then_real(
    memory: MemoryClient, llm: ScriptedLLM, agent_id: str, message: str, speaker: str, **kwargs: Any
) -> tuple[WriteResult, WriteResult]:
    """Write `message` as a dry run, check that nothing changed, write it for real, and check that both runs
    asked the model the same things and report the same outcome; return (dry, real) for the scenario's own
    checks. The model's answers for both runs are queued by the caller."""
    before = await snapshot(memory)
    started = datetime.now(UTC)
    asked = len(llm.requests)
    dry = await memory.write(agent_id, message, speaker, dry_run=True, verbose=True, **kwargs)
    assert await snapshot(memory) == before, "the dry run changed the database"
    dry_requests = llm.requests[asked:]
    real = await memory.write(agent_id, message, speaker, verbose=True, **kwargs)
    real_requests = llm.requests[asked + len(dry_requests) :]
    assert dry.dry_run and not real.dry_run
    assert _calls(dry_requests) == _calls(real_requests), "the dry run asked the model other things"
    dumps = (dry.model_dump(mode="json"), real.model_dump(mode="json"))
    shared = _uuids(dumps[0]) & _uuids(dumps[1])
    assert normalised(dry, shared, started) == normalised(real, shared, started)
    return dry, real


def twice(llm: ScriptedLLM, **answers: Any) -> None:
    """The same answer per purpose for the dry run and for the real run."""
    for purpose, response in answers.items():
        llm.add(purpose, response, response)


def step_data(result: WriteResult, name: str) -> dict[str, Any]:
    assert result.pipeline is not None
    return result.pipeline.step(name).data


# --- one test per decision kind ------------------------------------------------------------------------------------


async def test_dry_run_of_new_entities_facts_aliases_and_edges_matches_the_real_run(
    make_client: ClientFactory, agent_id: str
) -> None:
    llm = ScriptedLLM()
    twice(llm, informed_extraction=CLARA_EXTRACTION)
    async with make_client(llm) as memory:
        dry, real = await dry_then_real(memory, llm, agent_id, CLARA_MESSAGE, "Rafael", occurred_at=T1)
        assert dry.success, dry.error
        assert len(dry.facts_added) == 3 and len(dry.relationships) == 3
        assert {e.key for e in dry.entities_resolved if e.created} == {
            "person:clara_rezende",
            "organization:vertix",
            "organization:orion_tech",
            "person:thiago_nogueira",
        }
        # The ids are the rolled-back rows': consistent within the result, found nowhere after it.
        assert dry.event_id is not None and {f.source_event_id for f in dry.facts_added} == {dry.event_id}
        assert [e.id for e in await memory.get_events(agent_id)] == [real.event_id]
        assert await memory.get_entity(agent_id, "Clara Rezende") is not None


async def test_dry_run_of_an_update_reports_the_superseded_fact_and_the_cascade(
    make_client: ClientFactory, agent_id: str
) -> None:
    llm = ScriptedLLM()
    llm.add(
        "informed_extraction",
        answer(
            [("Rafael", "person"), ("Curitiba", "place")],
            [fact("Rafael", "Rafael mora em Curitiba", attribute="lives_in")],
            [("Rafael", "lives_in", "Curitiba")],
        ),
    )
    twice(
        llm,
        informed_extraction=answer(
            [("Rafael", "person"), ("São Paulo", "place")],
            [fact("Rafael", "Rafael mora em São Paulo", attribute="lives_in")],
            [("Rafael", "lives_in", "São Paulo")],
        ),
        reconciliation={"action": "UPDATE", "target": "1", "reasoning": "moved"},
    )
    async with make_client(llm) as memory:
        first = await memory.write(agent_id, "Moro em Curitiba", "Rafael", occurred_at=T1)
        dry, _ = await dry_then_real(memory, llm, agent_id, "Me mudei pra São Paulo", "Rafael", occurred_at=T2)
        assert llm.remaining("reconciliation") == 0
        [new], [old] = dry.facts_updated, dry.facts_superseded
        assert old.id == first.facts_added[0].id and new.supersedes_fact_id == old.id
        assert old.valid_to == T2
        [decision] = step_data(dry, "upsert")["facts"]
        assert len(decision["cascade_invalidated_relationships"]) == 1  # the Curitiba edge


async def test_dry_run_of_a_new_single_valued_value_supersedes_the_open_one_as_the_real_run(
    make_client: ClientFactory, agent_id: str
) -> None:
    llm = ScriptedLLM()
    llm.add(
        "informed_extraction",
        answer([("Ana", "person"), ("Lisbon", "place")], [fact("Ana", "Ana lives in Lisbon", attribute="lives_in")]),
    )
    twice(
        llm,
        informed_extraction=answer(
            [("Ana", "person"), ("Porto", "place")], [fact("Ana", "Ana lives in Porto", attribute="lives_in")]
        ),
        reconciliation={"action": "ADD", "target": None},
    )
    async with make_client(llm) as memory:
        first = await memory.write(agent_id, "Ana lives in Lisbon", "Rafael", occurred_at=T1)
        dry, _ = await dry_then_real(memory, llm, agent_id, "Ana lives in Porto now", "Rafael", occurred_at=T2)
        # The model said ADD; a single-valued attribute makes it an UPDATE of the open value, and says so.
        assert step_data(dry, "upsert")["facts"][0]["applied"] == "UPDATE"
        assert [(a.rule, a.item, a.before) for a in dry.adjustments] == [
            ("single_valued_update", "Ana lives in Porto", "ADD")
        ]
        assert [f.text for f in dry.facts_updated] == ["Ana lives in Porto"]
        assert [f.id for f in dry.facts_superseded] == [first.facts_added[0].id]


async def test_dry_run_of_a_noop_matches_the_real_run(make_client: ClientFactory, agent_id: str) -> None:
    said = answer([("Ana", "person")], [fact("Ana", "Ana loves jazz")])
    llm = ScriptedLLM()
    llm.add("informed_extraction", said)
    twice(llm, informed_extraction=said)
    async with make_client(llm) as memory:
        first = await memory.write(agent_id, "Ana loves jazz", "Rafael", occurred_at=T1)
        dry, real = await dry_then_real(memory, llm, agent_id, "Ana loves jazz!", "Rafael", occurred_at=T2)
        assert [f.id for f in dry.facts_unchanged] == [first.facts_added[0].id]
        assert dry.facts_added == [] and real.facts_unchanged[0].last_confirmed_at is not None


async def test_dry_run_of_a_delete_reports_the_retraction_and_the_closed_target_as_the_real_run(
    make_client: ClientFactory, agent_id: str
) -> None:
    llm = ScriptedLLM()
    llm.add(
        "informed_extraction",
        answer(
            [("Rafael", "person"), ("Acme", "organization")],
            [fact("Rafael", "Rafael trabalha na Acme", attribute="employer")],
            [("Rafael", "works_at", "Acme")],
        ),
    )
    twice(
        llm,
        informed_extraction=answer(
            [("Rafael", "person"), ("Acme", "organization")],
            [fact("Rafael", "Rafael não trabalha mais na Acme")],
        ),
        reconciliation={"action": "DELETE", "target": "1"},  # the answer gives no decision: this call does
    )
    async with make_client(llm) as memory:
        hired = await memory.write(agent_id, "Trabalho na Acme", "Rafael", occurred_at=T1)
        dry, _ = await dry_then_real(memory, llm, agent_id, "Não trabalho mais na Acme", "Rafael", occurred_at=T2)
        [deleted], [statement] = dry.facts_deleted, dry.facts_added
        assert deleted.id == hired.facts_added[0].id and deleted.invalidated_at is not None
        assert statement.supersedes_fact_id == deleted.id
        assert dry.adjustments == []  # the model's DELETE, applied as it said
        assert len(step_data(dry, "upsert")["facts"][0]["cascade_invalidated_relationships"]) == 1


async def test_dry_run_of_a_relation_without_its_fact_stores_the_same_mirror_fact(
    make_client: ClientFactory, agent_id: str
) -> None:
    llm = ScriptedLLM()
    twice(
        llm,
        informed_extraction=answer(
            [("Rafael", "person"), ("Rafael's mom", "person"), ("Curitiba", "place")],
            [fact("Rafael", "Rafael vai pra Curitiba no sábado")],
            [("Rafael's mom", "lives_in", "Curitiba")],
        ),
    )
    async with make_client(llm) as memory:
        dry, _ = await dry_then_real(memory, llm, agent_id, "Vou pra Curitiba ver minha mãe", "Rafael", occurred_at=T1)
        mirror = next(f for f in dry.facts_added if f.source_context == "inferred_from_relation")
        assert {r.evidence_fact_id for r in dry.relationships if r.rel_type == "lives_in"} == {mirror.id}


async def test_dry_run_of_a_delayed_older_message_files_it_as_history_as_the_real_run(
    make_client: ClientFactory, agent_id: str
) -> None:
    def deadline(value: str) -> Any:
        return answer(
            [("Mira", "person")], [fact("Mira", f"Mira's passport deadline is {value}", attribute="deadline")]
        )

    llm = ScriptedLLM({"reconciliation": lambda request: {"action": "UPDATE", "target": "1"}})
    llm.add("informed_extraction", deadline("2026-07-15"), deadline("2026-06-30"))
    twice(llm, informed_extraction=deadline("2026-08-01"))
    async with make_client(llm) as memory:
        for moment, value in ((T1, "2026-07-15"), (T2, "2026-06-30")):
            assert (await memory.write(agent_id, f"Passport deadline {value}", "Mira", occurred_at=moment)).success
        dry, _ = await dry_then_real(memory, llm, agent_id, "Passport deadline 2026-08-01", "Mira", occurred_at=T0)
        # Decided UPDATE, applied as an ADD of history (fact_writes): before every version, closed where they begin.
        [history] = dry.facts_added
        assert (history.valid_from, history.valid_to) == (T0, T1)
        assert dry.facts_updated == [] and dry.facts_superseded == []  # the current value stays open
        assert step_data(dry, "upsert")["facts"][0]["applied"] == "ADD"


async def test_dry_run_of_a_nickname_merge_moves_the_same_rows_and_keeps_none(
    make_client: ClientFactory, agent_id: str
) -> None:
    llm = ScriptedLLM()
    llm.add("informed_extraction", answer([("Mel", "person")], [fact("Mel", "Mel went to the support group")]))
    twice(llm, informed_extraction=answer([("Melanie", "person")], [fact("Melanie", "Melanie paints sunsets")]))
    async with make_client(llm) as memory:
        await memory.write(agent_id, "Hey Mel! Mel went to the support group", "Caroline", occurred_at=T1)
        dry, _ = await dry_then_real(memory, llm, agent_id, "I paint sunsets", "Melanie", occurred_at=T2)
        [merge] = step_data(dry, "entity_resolution")["merged"]
        assert (merge["from"], merge["into"], merge["moved"]["facts"]) == ("person:mel", "person:melanie", 1)


async def test_dry_run_whose_extraction_fails_fails_as_the_real_run(make_client: ClientFactory, agent_id: str) -> None:
    llm = ScriptedLLM()
    twice(llm, informed_extraction=ProviderError("model down"), entity_scan=ProviderError("still down"))
    async with make_client(llm) as memory:
        dry, real = await dry_then_real(memory, llm, agent_id, "Moro em Curitiba", "Rafael", occurred_at=T1)
        assert not dry.success and dry.extraction_path == "failed"
        assert dry.error is not None and "extraction failed" in dry.error
        assert [e.id for e in await memory.get_events(agent_id)] == [real.event_id]  # the real run keeps its event


# --- retries, cancellation and what a dry run holds ---------------------------------------------------------------


async def test_dry_run_of_a_written_message_id_returns_the_stored_outcome_as_a_real_retry(
    make_client: ClientFactory, agent_id: str
) -> None:
    llm = ScriptedLLM()
    llm.add("informed_extraction", CLARA_EXTRACTION)
    async with make_client(llm) as memory:
        first = await memory.write(agent_id, CLARA_MESSAGE, "Ana", occurred_at=T1, message_id="m-1")
        dry, _ = await dry_then_real(memory, llm, agent_id, CLARA_MESSAGE, "Ana", occurred_at=T1, message_id="m-1")
        assert dry.duplicate and dry.event_id == first.event_id and dry.llm_calls == 0


async def test_dry_run_of_a_failed_message_id_takes_it_over_as_a_real_retry_and_leaves_it_failed(
    make_client: ClientFactory, agent_id: str
) -> None:
    llm = ScriptedLLM()
    llm.add("informed_extraction", ProviderError("down"))
    llm.add("entity_scan", ProviderError("down"))
    twice(llm, informed_extraction=CLARA_EXTRACTION)
    async with make_client(llm) as memory:
        failed = await memory.write(agent_id, CLARA_MESSAGE, "Ana", occurred_at=T1, message_id="m-1")
        assert not failed.success
        dry, real = await dry_then_real(memory, llm, agent_id, CLARA_MESSAGE, "Ana", occurred_at=T1, message_id="m-1")
        assert dry.success and not dry.duplicate and dry.event_id == failed.event_id
        assert step_data(dry, "event_log")["taken_over"] is True
        assert len(real.facts_added) == 3


async def test_dry_run_reusing_a_message_id_for_another_message_raises_as_the_real_write_and_stores_nothing(
    make_client: ClientFactory, agent_id: str
) -> None:
    llm = ScriptedLLM()
    llm.add("informed_extraction", CLARA_EXTRACTION)
    async with make_client(llm) as memory:
        await memory.write(agent_id, CLARA_MESSAGE, "Ana", occurred_at=T1, message_id="m-1")
        before = await snapshot(memory)
        for dry_run in (True, False):
            with pytest.raises(InvalidInputError, match="message_id"):
                await memory.write(agent_id, "Outra mensagem", "Ana", occurred_at=T1, message_id="m-1", dry_run=dry_run)
            assert await snapshot(memory) == before
            assert memory.database.engine.pool.checkedout() == 0  # type: ignore[attr-defined]


async def test_cancelled_dry_run_leaves_nothing_and_gives_its_connection_back(
    make_client: ClientFactory, agent_id: str
) -> None:
    reached = asyncio.Event()

    async def never_answers(request: LLMRequest) -> dict[str, Any]:
        reached.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    llm = ScriptedLLM({"informed_extraction": never_answers})
    async with make_client(llm) as memory:
        before = await snapshot(memory)
        dry = asyncio.create_task(memory.write(agent_id, CLARA_MESSAGE, "Ana", occurred_at=T1, dry_run=True))
        await reached.wait()  # the event and its run are inserted, the connection is held in its transaction
        assert memory.database.engine.pool.checkedout() == 1  # type: ignore[attr-defined]
        dry.cancel()
        with pytest.raises(asyncio.CancelledError):
            await dry
        assert await snapshot(memory) == before
        assert memory.database.engine.pool.checkedout() == 0  # type: ignore[attr-defined]
        async with memory.database.engine.connect() as conn:
            open_transactions = (
                await conn.execute(
                    text(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                        "AND state LIKE 'idle in transaction%'"
                    )
                )
            ).scalar_one()
        assert open_transactions == 0


async def test_real_write_of_the_same_entity_does_not_wait_for_a_dry_run_parked_in_its_llm_call(
    make_client: ClientFactory, agent_id: str
) -> None:
    reached, release = asyncio.Event(), asyncio.Event()
    jazz: dict[str, Any] = answer([("Ana", "person")], [fact("Ana", "Ana loves jazz")])

    async def extraction(request: LLMRequest) -> dict[str, Any]:
        if not reached.is_set():  # the dry run's call: park it
            reached.set()
            await release.wait()
        return jazz

    llm = ScriptedLLM({"informed_extraction": extraction})
    async with make_client(llm) as memory:
        dry = asyncio.create_task(memory.write(agent_id, "Ana loves jazz", "Rafael", occurred_at=T1, dry_run=True))
        await reached.wait()
        # The same entity, the same fact: were the dry run holding a lock or a row the real write needs, this
        # would hang until the timeout (30 s: a deadlock guard, not a speed check).
        async with asyncio.timeout(30):
            real = await memory.write(agent_id, "Ana loves jazz", "Rafael", occurred_at=T1)
        assert real.success, real.error
        assert not dry.done()
        release.set()
        parked = await dry
        # The dry run ends after the real write and runs on what it committed: the fact is now known.
        assert parked.success and [f.id for f in parked.facts_unchanged] == [real.facts_added[0].id]
        assert [f.text for f in await memory.get_facts(agent_id)] == ["Ana loves jazz"]


async def test_dry_runs_waiting_on_their_model_leave_real_writes_a_connection(
    make_client: ClientFactory, agent_id: str
) -> None:
    parked, release = asyncio.Event(), asyncio.Event()
    calls: list[str] = []
    jazz: dict[str, Any] = answer([("Ana", "person")], [fact("Ana", "Ana loves jazz")])

    async def extraction(request: LLMRequest) -> dict[str, Any]:
        calls.append(request.messages[-1]["content"])
        if "2025-03-01" in calls[-1]:  # a dry run (T1): park it in its model call, its connection held
            parked.set()
            await release.wait()
        return jazz

    llm = ScriptedLLM({"informed_extraction": extraction})
    async with make_client(llm, pool_size=2) as memory:  # one connection for dry runs, one always left
        first = asyncio.create_task(memory.write(agent_id, "Ana loves jazz", "Rafael", occurred_at=T1, dry_run=True))
        await parked.wait()
        second = asyncio.create_task(memory.write(agent_id, "Ana loves jazz", "Rafael", occurred_at=T1, dry_run=True))
        # A deadlock guard, not a speed check: with both dry runs holding a connection the real write would wait
        # for pool_timeout.
        async with asyncio.timeout(30):
            real = await memory.write(agent_id, "Ana loves jazz", "Rafael", occurred_at=T2)
        assert real.success, real.error
        assert len(calls) == 2  # the first dry run's call and the real write's: the second dry run waits its turn
        release.set()
        assert (await first).success and (await second).success
        assert len(calls) == 3
        assert memory.database.engine.pool.checkedout() == 0  # type: ignore[attr-defined]
