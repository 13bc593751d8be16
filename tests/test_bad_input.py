"""The input guard at the door: every bad argument of write() and of each read raises a typed error before any
I/O, a refused write leaves no row anywhere, every moment read back is timezone-aware, a database failure inside
a read is a StorageError, and the CLI turns these into one line of stderr.

The write table runs against the real database and counts every memory table before and after. The read table
runs on a client that was never opened: a read that reached for the database would raise UsageError("not
open") instead of InvalidInputError, so passing proves the check came first.
"""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from memory_sdk import MemoryClient, MemoryConfig
from memory_sdk.cli import main
from memory_sdk.errors import InvalidInputError, StorageError
from memory_sdk.store.database import to_async_url
from memory_sdk.store.queries import count_rows
from memory_sdk.testing import HashEmbedder, ScriptedLLM
from tests.conftest import ClientFactory
from tests.scripts import extraction

pytestmark = pytest.mark.integration

PLUS_5 = timezone(timedelta(hours=5))
MINUS_5 = timezone(timedelta(hours=-5))
MAX_CHARS = MemoryConfig().max_message_chars
NOTHING_EXTRACTED = {"entities": [], "facts": [], "relations": []}

BAD_WRITES = [
    pytest.param({"agent_id": "agent-\ud800"}, id="agent_id-lone-surrogate"),
    pytest.param({"agent_id": "agent\x00x"}, id="agent_id-nul"),
    pytest.param({"agent_id": "a" * 256}, id="agent_id-over-255"),
    pytest.param({"agent_id": None}, id="agent_id-none"),
    pytest.param({"speaker_name": "Ra\udc80fael"}, id="speaker-lone-surrogate"),
    pytest.param({"speaker_name": "Ra\x00fael"}, id="speaker-nul"),
    pytest.param({"speaker_name": "R" * 201}, id="speaker-over-200"),
    pytest.param({"speaker_name": "   "}, id="speaker-blank"),
    pytest.param({"message": "Moro em \ud800 Curitiba"}, id="message-lone-surrogate"),
    pytest.param({"message": "Moro em\x00 Curitiba"}, id="message-nul"),
    pytest.param({"message": "a" * (MAX_CHARS + 1)}, id="message-over-max"),
    pytest.param({"message": b"Moro em Curitiba"}, id="message-bytes"),
    pytest.param({"occurred_at": datetime(1, 1, 1, tzinfo=PLUS_5)}, id="occurred_at-year-1-at-plus-5"),
    pytest.param({"occurred_at": datetime(9999, 12, 31, 23, tzinfo=MINUS_5)}, id="occurred_at-9999-at-minus-5"),
    pytest.param({"occurred_at": datetime(1, 1, 1, tzinfo=UTC)}, id="occurred_at-year-1-utc"),
    pytest.param({"occurred_at": datetime(1899, 12, 31, 23, 59, tzinfo=UTC)}, id="occurred_at-1899-utc"),
    pytest.param({"occurred_at": datetime(1900, 1, 1, 4, 59, tzinfo=PLUS_5)}, id="occurred_at-1899-after-utc"),
    pytest.param({"occurred_at": datetime(2201, 1, 1, tzinfo=UTC)}, id="occurred_at-2201"),
    pytest.param({"occurred_at": datetime(2025, 6, 15, 12)}, id="occurred_at-naive"),
    pytest.param({"occurred_at": date(2025, 6, 15)}, id="occurred_at-date"),
    pytest.param({"occurred_at": "2025-06-15T12:00:00+00:00"}, id="occurred_at-str"),
    pytest.param({"recent_messages": ["oi"] * 1_001}, id="recent-over-1000-items"),
    pytest.param({"recent_messages": ["oi", "a" * (MAX_CHARS + 1)]}, id="recent-item-over-max"),
    pytest.param({"recent_messages": ["a" * (MAX_CHARS + 1), "oi"]}, id="recent-old-item-over-max"),
    pytest.param({"recent_messages": ["oi \ud800"]}, id="recent-lone-surrogate"),
    pytest.param({"recent_messages": ["oi", 3]}, id="recent-item-not-str"),
    pytest.param({"recent_messages": "oi, tudo bem?"}, id="recent-str"),
    pytest.param({"dry_run": "no"}, id="dry_run-str"),
    pytest.param({"verbose": 1}, id="verbose-int"),
]


@pytest.mark.parametrize("bad", BAD_WRITES)
async def test_bad_write_argument_raises_invalid_input_error_and_stores_nothing(
    make_client: ClientFactory, agent_id: str, bad: dict[str, Any]
) -> None:
    llm = ScriptedLLM()
    call: dict[str, Any] = {"agent_id": agent_id, "message": "Moro em Curitiba", "speaker_name": "Rafael"} | bad
    async with make_client(llm) as memory:
        before = await _counts(memory)
        with pytest.raises(InvalidInputError):
            await memory.write(**call)
        assert await _counts(memory) == before
        assert await memory.get_events(agent_id) == []
        assert llm.requests == []


def _read(method: str, *args: Any, **kwargs: Any) -> Callable[[MemoryClient], Awaitable[Any]]:
    """One read call, to be made on a client."""

    async def call(memory: MemoryClient) -> Any:
        return await getattr(memory, method)(*args, **kwargs)

    return call


A = "agent-reads"
EVENT = uuid.uuid4()
BAD_READS = [
    pytest.param(_read("get_facts", "agent-\ud800"), id="facts-agent-lone-surrogate"),
    pytest.param(_read("get_facts", ""), id="facts-agent-empty"),
    pytest.param(_read("get_facts", A, entity=123), id="facts-entity-int"),
    pytest.param(_read("get_facts", A, entity=""), id="facts-entity-empty"),
    pytest.param(_read("get_facts", A, entity="\x00"), id="facts-entity-nul"),
    pytest.param(_read("get_facts", A, entity="Ra\ud800"), id="facts-entity-lone-surrogate"),
    pytest.param(_read("get_facts", A, entity="R" * 1_001), id="facts-entity-over-1000"),
    pytest.param(_read("get_facts", A, min_confidence="x"), id="facts-min_confidence-str"),
    pytest.param(_read("get_facts", A, min_confidence=math.nan), id="facts-min_confidence-nan"),
    pytest.param(_read("get_facts", A, min_confidence=1.5), id="facts-min_confidence-1.5"),
    pytest.param(_read("get_facts", A, min_confidence=-0.1), id="facts-min_confidence-negative"),
    pytest.param(_read("get_facts", A, min_confidence=True), id="facts-min_confidence-bool"),
    pytest.param(_read("get_facts", A, as_of=datetime(2025, 1, 1)), id="facts-as_of-naive"),
    pytest.param(_read("get_facts", A, as_of=date(2025, 1, 1)), id="facts-as_of-date"),
    pytest.param(_read("get_facts", A, as_of="2025-01-01"), id="facts-as_of-str"),
    pytest.param(_read("get_facts", A, as_of=datetime(1, 1, 1, tzinfo=PLUS_5)), id="facts-as_of-year-1-at-plus-5"),
    pytest.param(_read("get_facts", A, known_at=datetime(2201, 1, 1, tzinfo=UTC)), id="facts-known_at-2201"),
    pytest.param(_read("get_facts", A, known_at=datetime(1899, 12, 31, tzinfo=UTC)), id="facts-known_at-1899"),
    pytest.param(_read("get_facts", A, include_history="yes"), id="facts-include_history-str"),
    pytest.param(_read("get_entity", A, None), id="entity-name-none"),
    pytest.param(_read("get_entity", A, ""), id="entity-name-empty"),
    pytest.param(_read("get_entity", A, 123), id="entity-name-int"),
    pytest.param(_read("get_entity", A, "Ra\udc80"), id="entity-name-lone-surrogate"),
    pytest.param(_read("get_entity", A, "Ra\x00"), id="entity-name-nul"),
    pytest.param(_read("get_entity", "a\x00", "Rafael"), id="entity-agent-nul"),
    pytest.param(_read("get_relationships", A, entity=123), id="relationships-entity-int"),
    pytest.param(_read("get_relationships", A, entity="\x00"), id="relationships-entity-nul"),
    pytest.param(
        _read("get_relationships", A, as_of=datetime(9999, 12, 31, 23, tzinfo=MINUS_5)),
        id="relationships-as_of-9999-at-minus-5",
    ),
    pytest.param(_read("get_relationships", A, as_of=datetime(2025, 1, 1)), id="relationships-as_of-naive"),
    pytest.param(_read("get_relationships", A, include_invalidated=1), id="relationships-include_invalidated-int"),
    pytest.param(_read("get_relationships", "a" * 256), id="relationships-agent-over-255"),
    pytest.param(_read("get_events", A, limit=-1), id="events-limit-negative"),
    pytest.param(_read("get_events", A, limit=0), id="events-limit-0"),
    pytest.param(_read("get_events", A, limit=True), id="events-limit-bool"),
    pytest.param(_read("get_events", A, limit="3"), id="events-limit-str"),
    pytest.param(_read("get_events", A, limit=2.0), id="events-limit-float"),
    pytest.param(_read("get_events", A, limit=10_001), id="events-limit-over-10000"),
    pytest.param(_read("get_events", A, newest="yes"), id="events-newest-str"),
    pytest.param(_read("get_events", None), id="events-agent-none"),
    pytest.param(_read("get_trace", A, "abc"), id="trace-event_id-abc"),
    pytest.param(_read("get_trace", A, 123), id="trace-event_id-int"),
    pytest.param(_read("get_trace", A, None), id="trace-event_id-none"),
    pytest.param(_read("get_trace", A, str(EVENT) + "\ud800"), id="trace-event_id-lone-surrogate"),
    pytest.param(_read("get_trace", "a\ud800", EVENT), id="trace-agent-lone-surrogate"),
]


@pytest.mark.parametrize("read", BAD_READS)
async def test_bad_read_argument_raises_invalid_input_error_before_any_io(
    read: Callable[[MemoryClient], Awaitable[Any]],
) -> None:
    never_opened = MemoryClient("postgresql://nobody@127.0.0.1:1/none", llm=ScriptedLLM(), embedder=HashEmbedder())
    with pytest.raises(InvalidInputError):
        await read(never_opened)


@pytest.mark.parametrize(
    "occurred_at",
    [
        pytest.param(datetime(1900, 1, 1, tzinfo=UTC), id="1900-01-01-utc"),
        pytest.param(datetime(1900, 1, 1, 5, tzinfo=PLUS_5), id="1900-01-01-utc-at-plus-5"),
        pytest.param(datetime(2200, 12, 31, tzinfo=UTC), id="2200-12-31-utc"),
        pytest.param(datetime(2200, 12, 31, 18, 59, 59, 999_999, tzinfo=MINUS_5), id="last-microsecond-at-minus-5"),
    ],
)
async def test_moments_at_the_ends_of_the_range_are_stored_and_read_back_aware(
    make_client: ClientFactory, agent_id: str, occurred_at: datetime
) -> None:
    async with make_client(ScriptedLLM({"informed_extraction": [NOTHING_EXTRACTED]})) as memory:
        result = await memory.write(agent_id, "Moro em Curitiba", "Rafael", occurred_at=occurred_at)
        assert result.event_id is not None, result.error
        [event] = await memory.get_events(agent_id)
        assert event.occurred_at.tzinfo is not None
        assert event.occurred_at == occurred_at
        assert await memory.get_facts(agent_id, as_of=occurred_at, known_at=occurred_at) == []


async def test_facts_stored_at_infinity_are_read_back_aware(make_client: ClientFactory, agent_id: str) -> None:
    """Rows written before the guard (or by hand) may hold -infinity / infinity: the driver reads those naive."""
    llm = ScriptedLLM({"informed_extraction": [extraction(("Rafael", "Rafael mora em Curitiba"))]})
    async with make_client(llm) as memory:
        result = await memory.write(agent_id, "Moro em Curitiba", "Rafael")
        assert result.facts_added, result.error
        async with memory.database.transaction() as session:
            await session.execute(
                text(
                    "UPDATE memory_facts SET valid_from = '-infinity', last_confirmed_at = 'infinity' "
                    "WHERE agent_id = :a"
                ),
                {"a": agent_id},
            )
        [fact] = await memory.get_facts(agent_id, include_history=True)
    assert fact.valid_from == datetime.min.replace(tzinfo=UTC)
    assert fact.last_confirmed_at == datetime.max.replace(tzinfo=UTC)


@pytest.mark.parametrize(("said_at", "registered"), [(-1, True), (-3, False)], ids=["seen", "before-the-window"])
async def test_only_the_recent_messages_the_model_sees_are_kept(
    make_client: ClientFactory, agent_id: str, said_at: int, registered: bool
) -> None:
    """An alias counts as said when a kept recent message says it; with recent_messages_limit=2 a message three
    back is dropped at the door, unread (it is neither in the prompt nor scanned)."""
    guilherme = {"name": "Guilherme Maturana", "type": "person", "aliases": ["Guili"]}
    answer = extraction(("Guilherme Maturana", "Guilherme Maturana chegou"), entities=[guilherme])
    llm = ScriptedLLM({"informed_extraction": [answer]})
    recent = ["oi"] * 999
    recent[said_at] = "O Guili chegou"
    async with make_client(llm, config=MemoryConfig(recent_messages_limit=2)) as memory:
        result = await memory.write(agent_id, "Guilherme Maturana chegou", "Rafael", recent_messages=recent)
        assert result.success, result.error
        entity = await memory.get_entity(agent_id, "Guilherme Maturana")
    assert entity is not None
    assert ("Guili" in entity.aliases) is registered
    prompt = "\n".join(message["content"] for message in llm.requests[0].messages)
    assert ("Guili" in prompt) is registered


async def test_a_thousand_long_recent_messages_are_cheap(make_client: ClientFactory, agent_id: str) -> None:
    """Measured before the guard: 2,000 recent messages of 10,000 characters were all scanned for aliases (80 s).
    Now 2,000 are refused and 1,000 cost a check and a slice; the bound leaves room for a loaded machine."""
    recent = [("palavra " * 1_250)[:10_000]] * 1_000
    async with make_client(ScriptedLLM({"informed_extraction": [NOTHING_EXTRACTED]})) as memory:
        with pytest.raises(InvalidInputError, match="recent_messages has 2,000 items"):
            await memory.write(agent_id, "Moro em Curitiba", "Rafael", recent_messages=recent * 2)
        started = time.perf_counter()
        result = await memory.write(agent_id, "Moro em Curitiba", "Rafael", recent_messages=recent)
        seconds = time.perf_counter() - started
    assert result.success, result.error
    assert seconds < 5


READS_OF_ONE_AGENT = [
    pytest.param(_read("get_facts", A), id="get_facts"),
    pytest.param(_read("get_entity", A, "Rafael"), id="get_entity"),
    pytest.param(_read("get_relationships", A), id="get_relationships"),
    pytest.param(_read("get_events", A), id="get_events"),
    pytest.param(_read("get_trace", A, EVENT), id="get_trace"),
]


@pytest.mark.parametrize("read", READS_OF_ONE_AGENT)
async def test_a_read_on_a_connection_the_server_killed_raises_storage_error(
    make_client: ClientFactory, database_url: str, read: Callable[[MemoryClient], Awaitable[Any]]
) -> None:
    """A driver error inside a read comes out as StorageError, whatever the read: here the pooled connection was
    terminated by the server between two reads (no pre-ping, so the read itself meets the dead socket)."""
    async with make_client(pool_size=1) as memory:
        async with memory.database.transaction(A) as session:
            pid = (await session.execute(text("SELECT pg_backend_pid()"))).scalar_one()
        await _terminate(database_url, pid)
        with pytest.raises(StorageError) as caught:
            await read(memory)
        assert caught.value.transient


async def _terminate(database_url: str, pid: int) -> None:
    """End one server backend from another connection, and wait until it is gone. Each check is a transaction of
    its own (AUTOCOMMIT): a transaction reads pg_stat_activity once and keeps that snapshot, so a backend still
    exiting at the first check looked alive until the loop gave up (2 runs of this file in 11 failed so here)."""
    engine = create_async_engine(to_async_url(database_url), isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            await conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
            for _ in range(1000):  # up to 10 s: a busy machine (CI on 2 cores) can take seconds to reap a backend
                alive = (
                    await conn.execute(text("SELECT count(*) FROM pg_stat_activity WHERE pid = :pid"), {"pid": pid})
                ).scalar_one()
                if not alive:
                    return
                await asyncio.sleep(0.01)
        raise AssertionError(f"backend {pid} still alive")
    finally:
        await engine.dispose()


async def test_cli_refuses_a_negative_limit_in_one_short_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["events", "some-agent", "--limit", "-1"])
    assert exit_.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) <= 6  # argparse's usage (wrapped to the terminal) and one error line
    assert not any("Traceback" in line for line in lines)
    assert lines[-1] == "memory-sdk events: error: argument --limit: must be 1 or more, got -1"


async def test_cli_prints_an_invalid_input_error_as_one_line_and_exits_2(
    database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = await asyncio.to_thread(main, ["events", "agent-\udcff", "--database-url", database_url])
    err = capsys.readouterr().err
    assert code == 2
    assert err.splitlines() == [err.strip()]
    assert err.startswith("memory-sdk: error: agent_id contains a lone surrogate")


async def test_cli_events_limit_shows_the_most_recent_in_order(
    make_client: ClientFactory, agent_id: str, database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    llm = ScriptedLLM({"informed_extraction": [NOTHING_EXTRACTED] * 3})
    async with make_client(llm) as memory:
        for day in (1, 2, 3):
            await memory.write(agent_id, f"dia {day}", "Rafael", occurred_at=datetime(2025, 1, day, tzinfo=UTC))
        assert [e.content for e in await memory.get_events(agent_id, limit=2)] == ["dia 1", "dia 2"]
        assert [e.content for e in await memory.get_events(agent_id, limit=2, newest=True)] == ["dia 2", "dia 3"]
    code = await asyncio.to_thread(main, ["events", agent_id, "--limit", "2", "--database-url", database_url])
    out = capsys.readouterr().out
    assert code == 0
    assert "dia 1" not in out
    assert out.index("dia 3") < out.index("dia 2")  # the CLI lists the newest first (issue 11)


async def _counts(memory: MemoryClient) -> dict[str, int]:
    async with memory.database.transaction() as session:
        return await count_rows(session)
