"""The tenant transaction's one-round-trip BEGIN (store/database.py `Database.tenant`), against the real database.

BEGIN, the tenant setting, the role and the advisory locks go in one simple query, with the agent id as a quoted
literal: a hostile id must be a value, never SQL; a cancellation anywhere in it must leave no connection inside a
transaction; row-level security must still hold in it.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from memory_sdk.errors import StorageError, UsageError
from memory_sdk.llm.protocols import LLMRequest
from memory_sdk.store.database import Database, quote_literal, to_async_url
from memory_sdk.store.queries import advisory_lock_ids
from memory_sdk.testing import HashEmbedder, ScriptedLLM
from tests.conftest import ClientFactory
from tests.scripts import extraction
from tests.test_resolution import mention, vector_at
from tests.test_statements import T0, Statements


@pytest.fixture
async def raw_engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    """A plain connection pool on the test database, outside any MemoryClient: what another process sees."""
    engine = create_async_engine(to_async_url(database_url))
    yield engine
    await engine.dispose()


HOSTILE_SUFFIXES = [
    "'",
    "\\",
    "\\'",
    "''",
    "'; SELECT set_config('memory_sdk.agent_id', 'victim', true); --",
    "' OR '1'='1",
    "$$; ROLLBACK; $$",
    "E'\\x27",
    "\\\\'\\",
    "añ ção 日本 🙂",
]


def test_quote_literal_doubles_quotes_and_backslashes_in_an_escape_string() -> None:
    assert quote_literal("plain") == "E'plain'"
    assert quote_literal("a'b") == "E'a''b'"
    assert quote_literal("a\\b") == "E'a\\\\b'"
    assert quote_literal("\\'") == "E'\\\\'''"


def test_quote_literal_refuses_nul() -> None:
    with pytest.raises(UsageError, match="NUL"):
        quote_literal("agent\x00x")


async def _insert_event(conn: object, agent: str) -> None:
    await conn.execute(  # type: ignore[attr-defined]
        "INSERT INTO memory_events (id, agent_id, speaker, content, occurred_at) VALUES ($1, $2, 's', 'c', now())",
        uuid.uuid4(),
        agent,
    )


@pytest.mark.parametrize("conforming", ["on", "off"])
@pytest.mark.parametrize("suffix", HOSTILE_SUFFIXES)
async def test_a_hostile_agent_id_is_set_as_a_value_and_sees_only_its_rows(
    make_client: ClientFactory, agent_id: str, suffix: str, conforming: str
) -> None:
    """Whatever the server's standard_conforming_strings (off: backslashes escape in plain literals)."""
    hostile = agent_id + suffix
    async with make_client(pool_size=1) as memory:
        db = memory.database
        async with db.tenant(agent_id) as conn:
            await conn.execute(
                f"SET standard_conforming_strings = {conforming}"
            )  # the session's, on the one connection
            await _insert_event(conn, agent_id)
        for written, lock_ids in enumerate(((), advisory_lock_ids(hostile, ["person:ana", "person:bia"]))):
            async with db.tenant(hostile, lock_ids) as conn:
                assert await conn.fetchval("SELECT current_setting('memory_sdk.agent_id')") == hostile
                assert await conn.fetchval("SELECT count(*) FROM memory_events") == written  # never agent_id's
                await _insert_event(conn, hostile)
                held = await conn.fetchval(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
                )
                assert held == len(lock_ids)
        async with db.tenant(agent_id) as conn:
            assert await conn.fetchval("SELECT count(*) FROM memory_events") == 1
        async with db.tenant(hostile) as conn:
            assert await conn.fetchval("SELECT count(*) FROM memory_events") == 2


async def test_a_tenant_transaction_cannot_write_another_agents_rows(make_client: ClientFactory, agent_id: str) -> None:
    async with make_client() as memory:
        with pytest.raises(StorageError, match="row-level security"):
            async with memory.database.tenant(agent_id) as conn:
                await _insert_event(conn, agent_id + "' OR true --")
        async with memory.database.tenant(agent_id) as conn:  # the failed transaction was rolled back
            assert await conn.fetchval("SELECT count(*) FROM memory_events") == 0


async def test_a_nul_agent_id_fails_before_a_connection_is_taken(make_client: ClientFactory) -> None:
    async with make_client(pool_size=1) as memory:
        pool = memory.database.engine.pool
        with pytest.raises(UsageError, match="NUL"):
            async with memory.database.tenant("agent\x00x"):
                pass
        assert pool.checkedout() == 0  # type: ignore[attr-defined]


async def _committed(db: Database, raw_engine: AsyncEngine, agent: str) -> None:
    """A tenant transaction on the pool works from scratch: its setting holds, and what it writes is committed
    (seen from another connection), not left inside a transaction a cancellation left open."""
    marker = str(uuid.uuid4())
    async with db.tenant(agent) as conn:
        assert await conn.fetchval("SELECT current_setting('memory_sdk.agent_id')") == agent
        await conn.execute(
            "INSERT INTO memory_events (id, agent_id, speaker, content, occurred_at) VALUES ($1, $2, 's', $3, now())",
            uuid.uuid4(),
            agent,
            marker,
        )
    async with raw_engine.connect() as admin:
        found = await admin.execute(text("SELECT count(*) FROM memory_events WHERE content = :m"), {"m": marker})
        assert found.scalar_one() == 1


async def test_a_transaction_cancelled_while_its_begin_waits_for_a_lock_leaves_nothing_open(
    make_client: ClientFactory, agent_id: str, raw_engine: AsyncEngine
) -> None:
    """The BEGIN statement takes the advisory locks; one held elsewhere makes it wait, and the cancellation lands
    inside it. The connection must not come back to the pool inside a transaction (or holding the lock)."""
    ids = advisory_lock_ids(agent_id, ["person:ana"])
    async with make_client(pool_size=1) as memory:
        db = memory.database
        async with raw_engine.connect() as holder:
            await holder.execute(text("SELECT pg_advisory_lock(:id)"), {"id": ids[0]})
            try:

                async def locked() -> None:
                    async with db.tenant(agent_id, ids):
                        raise AssertionError("the lock is held elsewhere: BEGIN cannot have finished")

                task = asyncio.create_task(locked())
                await _until_waiting(raw_engine, ids[0])
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            finally:
                await holder.execute(text("SELECT pg_advisory_unlock(:id)"), {"id": ids[0]})
                await holder.commit()
        for _ in range(2):  # the pool's one connection, or its replacement
            await _committed(db, raw_engine, agent_id)


async def _until_waiting(raw_engine: AsyncEngine, lock_id: int) -> None:
    """Until a session waits for the advisory lock `lock_id` (pg_locks shows a bigint lock as two 32-bit words)."""
    high, low = (lock_id >> 32) & 0xFFFFFFFF, lock_id & 0xFFFFFFFF
    sql = text(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
        "AND classid::bigint = :high AND objid::bigint = :low"
    )
    for _ in range(500):
        async with raw_engine.connect() as conn:
            if (await conn.execute(sql, {"high": high, "low": low})).scalar_one():
                return
        await asyncio.sleep(0.01)
    raise AssertionError("the tenant transaction never waited for the lock")


@pytest.mark.parametrize("with_locks", [False, True])
async def test_a_transaction_cancelled_at_any_step_leaves_no_connection_inside_a_transaction(
    make_client: ClientFactory, agent_id: str, raw_engine: AsyncEngine, with_locks: bool
) -> None:
    """Cancel a tenant transaction after 0, 0.2, 0.4, ... ms, until one finishes first: wherever the cancellation
    lands (pool checkout, the BEGIN statement, the caller's statement, COMMIT), the next transaction on the
    one-connection pool starts from scratch and commits."""
    ids = advisory_lock_ids(agent_id, ["person:ana"]) if with_locks else []
    cancelled = 0
    async with make_client(pool_size=1) as memory:
        db = memory.database

        async def one() -> None:
            async with db.tenant(agent_id, ids) as conn:
                await _insert_event(conn, agent_id)

        for step in range(1000):
            task = asyncio.create_task(one())
            await asyncio.sleep(step * 0.0002)
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                cancelled += 1
                await _committed(db, raw_engine, agent_id)
                continue
            break  # finished before the cancellation: every point before its end was tried
    assert 1 < cancelled < 1000


async def test_an_error_inside_a_savepoint_rolls_back_only_the_savepoint(
    make_client: ClientFactory, agent_id: str
) -> None:
    async with make_client() as memory:
        async with memory.database.tenant(agent_id) as conn:
            await _insert_event(conn, agent_id)
            with pytest.raises(StorageError):  # noqa: PT012 (the savepoint's own work fails inside it)
                async with Database.savepoint(conn):
                    await _insert_event(conn, agent_id)
                    async with Database.savepoint(conn):  # savepoints nest
                        await _insert_event(conn, agent_id)
                    await conn.execute("SELECT 1/0")
            async with Database.savepoint(conn):
                await _insert_event(conn, agent_id)
        async with memory.database.tenant(agent_id) as conn:
            assert await conn.fetchval("SELECT count(*) FROM memory_events") == 2


# --- transactions per write: entity resolution's transaction carries reconciliation's read ----------------------


async def _begins(statements: Statements, start: int) -> int:
    for _ in range(3):  # asyncpg calls query loggers with call_soon
        await asyncio.sleep(0)
    return sum(1 for sql in statements.since(start) if sql.upper().startswith("BEGIN"))


async def test_a_write_resolved_without_a_call_reads_its_candidates_in_the_resolution_transaction(
    make_client: ClientFactory, agent_id: str
) -> None:
    """Names resolved by the registry (no LLM call): nothing comes between resolution's read and reconciliation's,
    so one transaction serves both, as the event's serves alias lookup's read: three transactions per write (the
    event with alias lookup, resolution with the candidates, apply), and the reads still find the subject and its
    facts (the repeat is a NOOP)."""
    llm = ScriptedLLM({"informed_extraction": [extraction(("Ana", "Ana loves jazz"))] * 2})
    async with make_client(llm) as memory:
        statements = Statements(memory)
        await memory.write(agent_id, "Ana loves jazz", speaker_name="Rafael", occurred_at=T0)
        start = statements.mark()
        result = await memory.write(agent_id, "Ana loves jazz", speaker_name="Rafael", occurred_at=T0, verbose=True)
        assert result.success, result.error
        assert [fact.text for fact in result.facts_unchanged] == ["Ana loves jazz"]
        assert result.pipeline is not None
        assert result.pipeline.step("alias_lookup").data["read_by"] == "event_log"
        assert result.pipeline.step("alias_lookup").data["matched"] == {"person:ana": "ana"}
        assert result.pipeline.step("reconciliation").data["candidates_read_by"] == "entity_resolution"
        assert await _begins(statements, start) == 3


async def test_a_name_left_to_the_llm_is_resolved_before_reconciliation_reads_and_outside_any_transaction(
    make_client: ClientFactory, agent_id: str, raw_engine: AsyncEngine
) -> None:
    """An ambiguous name costs an LLM call between resolution and reconciliation: no transaction is open during
    the call, and reconciliation reads in its own transaction after it, under the subject the call chose (the
    stored fact of Guilherme is the candidate the NOOP names; read before the call, the subject would not have
    resolved and the fact would be skipped)."""
    embedder = HashEmbedder(overrides={"Guilherme": vector_at(1.0), "Guili": vector_at(0.70)})
    seen: dict[str, int] = {}

    async def open_transactions() -> int:
        async with raw_engine.connect() as conn:
            found = await conn.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND pid <> pg_backend_pid() AND state LIKE 'idle in transaction%'"
                )
            )
            return int(found.scalar_one())

    async def resolve(request: LLMRequest) -> dict[str, object]:
        seen["resolution"] = await open_transactions()
        return {"reasoning": "nickname", "match": "1"}

    async def reconcile(request: LLMRequest) -> dict[str, object]:
        seen["reconciliation"] = await open_transactions()
        return {"action": "NOOP", "target": "1"}

    llm = ScriptedLLM(
        {
            "informed_extraction": [
                mention(("Guilherme", "person"), facts=[("Guilherme", "Guilherme chegou de Porto")]),
                mention(("Guili", "person"), facts=[("Guili", "Guili chegou de Porto")]),
            ],
            "entity_resolution": resolve,
            "reconciliation": reconcile,
        }
    )
    async with make_client(llm, embedder=embedder) as memory:
        statements = Statements(memory)
        first = await memory.write(agent_id, "Guilherme chegou de Porto.", speaker_name="Rafael", occurred_at=T0)
        start = statements.mark()
        result = await memory.write(agent_id, "Guili chegou de Porto.", speaker_name="Rafael", verbose=True)
        assert result.success, result.error
        assert [(e.phase, e.key) for e in result.entities_resolved] == [("llm", "person:guilherme")]
        assert [fact.id for fact in result.facts_unchanged] == [fact.id for fact in first.facts_added]
        assert seen == {"resolution": 0, "reconciliation": 0}
        assert result.pipeline is not None
        assert result.pipeline.step("reconciliation").data["candidates_read_by"] == "reconciliation"
        assert await _begins(statements, start) == 4


async def test_the_event_is_stored_when_alias_lookups_read_fails_in_its_transaction(
    make_client: ClientFactory, agent_id: str, raw_engine: AsyncEngine
) -> None:
    """The event's transaction makes alias lookup's read first; when that read fails (here: the tenant role may
    not read the entities), the event still goes in, alone, and alias lookup reports the failure."""
    llm = ScriptedLLM({"informed_extraction": [extraction(("Ana", "Ana loves jazz"))]})
    async with make_client(llm) as memory:
        async with raw_engine.begin() as conn:
            await conn.execute(text("REVOKE SELECT ON memory_entities FROM memory_sdk_tenant"))
        try:
            result = await memory.write(agent_id, "Ana loves jazz", speaker_name="Rafael", verbose=True)
        finally:
            async with raw_engine.begin() as conn:
                await conn.execute(text("GRANT SELECT ON memory_entities TO memory_sdk_tenant"))
        assert not result.success
        assert result.error is not None and result.error.startswith("alias_lookup: StorageError")
        assert result.pipeline is not None
        assert "permission denied" in result.pipeline.step("event_log").data["read_failed"]
        assert [event.content for event in await memory.get_events(agent_id)] == ["Ana loves jazz"]
        assert result.event_id is not None
