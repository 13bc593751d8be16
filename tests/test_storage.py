"""The storage foundation against the real embedded PostgreSQL + pgvector: schema, the immutable event log,
the guard, dry runs, tenancy, the extraction fallback, pipeline-run records and versioned reads.

The LLM is replaced only by ScriptedLLM and the embedder by HashEmbedder; every assertion about what is stored
reads the database itself, through the SDK's reads or plain SQL.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from memory_sdk import MemoryClient, MemoryConfig
from memory_sdk.errors import (
    ConfigError,
    InvalidInputError,
    ProviderError,
    SchemaMismatch,
    StorageError,
    UsageError,
)
from memory_sdk.llm.protocols import LLMRequest
from memory_sdk.pipeline.runner import STAGES
from memory_sdk.store import database as database_module
from memory_sdk.store.database import Database, to_async_url
from memory_sdk.store.queries import count_rows
from memory_sdk.testing import HashEmbedder, ScriptedLLM
from tests.conftest import ClientFactory
from tests.scripts import CLARA_EXTRACTION, CLARA_MESSAGE, extraction

pytestmark = pytest.mark.integration

WHEN = datetime(2025, 6, 15, 12, 0, tzinfo=UTC)
STAGE_NAMES = [name for name, _ in STAGES]


@pytest.fixture(scope="session")
async def raw_engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    """A plain connection pool on the test database, outside any MemoryClient: what another process sees."""
    engine = create_async_engine(to_async_url(database_url))
    yield engine
    await engine.dispose()


async def _counts(memory: MemoryClient, agent_id: str | None = None) -> dict[str, int]:
    async with memory.database.transaction() as session:
        return await count_rows(session, agent_id)


async def _rows(engine: AsyncEngine, sql: str, **params: Any) -> list[Any]:
    async with engine.connect() as conn:
        return list((await conn.execute(text(sql), params)).all())


# --- schema -------------------------------------------------------------------------------------------------

_SCHEMA_LISTING = r"""
SELECT 'column ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
       || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
       || coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), '')
FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE n.nspname = current_schema() AND c.relkind = 'r' AND c.relname LIKE 'memory\_%'
  AND a.attnum > 0 AND NOT a.attisdropped
UNION ALL
SELECT 'index ' || indexdef FROM pg_indexes WHERE schemaname = current_schema() AND tablename LIKE 'memory\_%'
UNION ALL
SELECT 'constraint ' || conrelid::regclass::text || ' ' || conname || ' ' || pg_get_constraintdef(oid)
FROM pg_constraint WHERE conrelid::regclass::text LIKE 'memory\_%'
UNION ALL
SELECT 'trigger ' || pg_get_triggerdef(t.oid)
FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
WHERE NOT t.tgisinternal AND c.relname LIKE 'memory\_%'
UNION ALL
SELECT 'info ' || key || '=' || value FROM memory_schema_info
UNION ALL
SELECT 'alembic ' || version_num FROM alembic_version
ORDER BY 1
"""


async def _execute(url: str, sql: str) -> None:
    """One statement, committed, on a connection of its own (outside any MemoryClient)."""
    engine = create_async_engine(to_async_url(url))
    try:
        async with engine.begin() as conn:
            await conn.execute(text(sql))
    finally:
        await engine.dispose()


async def _schema_listing(url: str) -> list[str]:
    engine = create_async_engine(to_async_url(url))
    try:
        return [row[0] for row in await _rows(engine, _SCHEMA_LISTING)]
    finally:
        await engine.dispose()


async def test_applying_the_schema_twice_changes_nothing(fresh_database_url: str) -> None:
    async with MemoryClient(fresh_database_url, llm=ScriptedLLM(), embedder=HashEmbedder()) as first:
        version = first.schema_version
    listing = await _schema_listing(fresh_database_url)
    async with MemoryClient(fresh_database_url, llm=ScriptedLLM(), embedder=HashEmbedder()) as second:
        assert second.schema_version == version > 0
    assert await _schema_listing(fresh_database_url) == listing

    assert len([line for line in listing if line.startswith("alembic ")]) == 1  # one alembic_version row
    assert f"info schema_version={version}" in listing
    assert "info embedding_dim=1536" in listing
    assert "column memory_facts.embedding vector(1536)" in listing
    assert any("uq_memory_facts_open_single_valued" in line for line in listing)
    assert any(line.startswith("trigger ") and "memory_events" in line for line in listing)


async def test_concurrent_first_opens_migrate_once(fresh_database_url: str) -> None:
    clients = [MemoryClient(fresh_database_url, llm=ScriptedLLM(), embedder=HashEmbedder()) for _ in range(3)]
    try:
        await asyncio.gather(*(client.open() for client in clients))
        assert len({client.schema_version for client in clients}) == 1
    finally:
        for client in clients:
            await client.close()
    listing = await _schema_listing(fresh_database_url)
    assert len([line for line in listing if line.startswith("alembic ")]) == 1
    assert len([line for line in listing if line.startswith("info schema_version=")]) == 1


async def test_opening_with_another_embedding_dim_raises_schema_mismatch(
    make_client: ClientFactory, database_url: str
) -> None:
    async with make_client():  # the session database holds 1536-dimensional vectors
        pass
    listing = await _schema_listing(database_url)
    memory = MemoryClient(database_url, llm=ScriptedLLM(), embedder=HashEmbedder(dimensions=64))
    with pytest.raises(SchemaMismatch, match=r"1536.*64"):
        async with memory:
            pass
    with pytest.raises(UsageError):
        _ = memory.database  # the failed open left no half-open client behind
    assert await _schema_listing(database_url) == listing


async def test_database_migrated_by_a_newer_sdk_raises_schema_mismatch(fresh_database_url: str) -> None:
    async with MemoryClient(fresh_database_url, llm=ScriptedLLM(), embedder=HashEmbedder()):
        pass
    await _execute(fresh_database_url, "UPDATE alembic_version SET version_num = '9999_from_the_future'")
    with pytest.raises(SchemaMismatch):
        async with MemoryClient(fresh_database_url, llm=ScriptedLLM(), embedder=HashEmbedder()):
            pass


async def test_a_failed_migration_raises_its_own_error(fresh_database_url: str) -> None:
    # A table in the way of the first migration: the error named must be that one. The unlock after it once ran in the
    # aborted transaction and raised "current transaction is aborted" instead, whatever had failed.
    await _execute(fresh_database_url, "CREATE TABLE memory_events (id int)")
    memory = MemoryClient(fresh_database_url, llm=ScriptedLLM(), embedder=HashEmbedder())
    with pytest.raises(StorageError, match=r"memory_events.*already exists") as caught:
        async with memory:
            pass
    assert "aborted" not in str(caught.value)
    # The lock was released: another open gets as far as the same error instead of waiting for it.
    with pytest.raises(StorageError, match="already exists"):
        async with asyncio.timeout(30), MemoryClient(fresh_database_url, llm=ScriptedLLM(), embedder=HashEmbedder()):
            pass


def test_an_embedding_dim_no_index_can_take_is_refused_up_front() -> None:
    # pgvector's HNSW index takes vectors of at most 2,000 dimensions: past that the first migration failed halfway.
    with pytest.raises(ConfigError, match="embedding_dim"):
        MemoryConfig(embedding_dim=3072)
    with pytest.raises(ConfigError, match="embedding_dim"):
        MemoryClient("postgresql://unused/db", llm=ScriptedLLM(), embedder=HashEmbedder(dimensions=3072))
    assert MemoryConfig(embedding_dim=2000).embedding_dim == 2000


_OPEN_AND_LIST_MODULES = """
import asyncio, sys
from memory_sdk import MemoryClient
from memory_sdk.testing import HashEmbedder, ScriptedLLM

async def main() -> None:
    async with MemoryClient(sys.argv[1], llm=ScriptedLLM(), embedder=HashEmbedder()) as memory:
        print(memory.schema_version, "alembic" in sys.modules, "mako" in sys.modules)

asyncio.run(main())
"""


def _open_in_a_new_process(url: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", _OPEN_AND_LIST_MODULES, url], capture_output=True, text=True, timeout=120, check=True
    )
    return done.stdout.split()


async def test_a_database_at_head_opens_without_importing_alembic(fresh_database_url: str) -> None:
    first = await asyncio.to_thread(_open_in_a_new_process, fresh_database_url)  # migrates: imports alembic
    second = await asyncio.to_thread(_open_in_a_new_process, fresh_database_url)  # at head: nothing to run
    assert first[1:] == ["True", "True"] and second[1:] == ["False", "False"]
    assert first[0] == second[0] and int(first[0]) > 0


def test_head_revision_is_the_newest_migration() -> None:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", str(Path(database_module.__file__).parent / "migrations"))
    assert ScriptDirectory.from_config(config).get_current_head() == database_module.HEAD_REVISION


# --- the event log --------------------------------------------------------------------------------------------


async def test_event_is_committed_before_extraction_runs(
    make_client: ClientFactory, agent_id: str, raw_engine: AsyncEngine
) -> None:
    seen: dict[str, Any] = {}

    async def informed(request: LLMRequest) -> dict[str, Any]:
        # Another connection, outside the write's transactions: what a crash at this moment would leave.
        seen["events"] = await _rows(
            raw_engine,
            "SELECT content, speaker, occurred_at, embedding IS NOT NULL AS embedded FROM memory_events "
            "WHERE agent_id = :agent",
            agent=agent_id,
        )
        seen["runs"] = await _rows(
            raw_engine, "SELECT status FROM memory_pipeline_runs WHERE agent_id = :agent", agent=agent_id
        )
        seen["open_transactions"] = await _rows(
            raw_engine,
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND state LIKE 'idle in transaction%'",
        )
        return extraction(("Ana", "Ana loves jazz"))

    async with make_client(ScriptedLLM({"informed_extraction": informed})) as memory:
        result = await memory.write(agent_id, "Ana loves jazz", speaker_name="Rafael", occurred_at=WHEN)

    assert result.success, result.error
    assert [tuple(row) for row in seen["events"]] == [("Ana loves jazz", "Rafael", WHEN, True)]
    assert [row.status for row in seen["runs"]] == ["running"]
    assert seen["open_transactions"] == []  # no transaction held open across the LLM call


class _FailingEmbedder:
    """An EmbeddingProvider whose service is down, failing the way a custom client would."""

    dimensions = 1536

    def __init__(self, error: Exception) -> None:
        self.error = error

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        raise self.error


@pytest.mark.parametrize(
    "error",
    [
        ProviderError("embedding quota exceeded"),
        pytest.param(ConnectionError("embedding service unreachable")),
    ],
    ids=["provider-error", "connection-error"],
)
async def test_event_is_stored_without_embedding_when_the_embedder_fails(
    make_client: ClientFactory, agent_id: str, raw_engine: AsyncEngine, error: Exception
) -> None:
    llm = ScriptedLLM({"informed_extraction": [extraction()]})
    async with make_client(llm, embedder=_FailingEmbedder(error)) as memory:
        result = await memory.write(agent_id, "Ana loves jazz", speaker_name="Rafael", occurred_at=WHEN)
    assert result.event_id is not None, result.error
    assert result.error is not None and "embedding" in result.error
    rows = await _rows(
        raw_engine, "SELECT content, embedding IS NULL AS bare FROM memory_events WHERE agent_id = :a", a=agent_id
    )
    assert [tuple(row) for row in rows] == [("Ana loves jazz", True)]


@pytest.fixture
async def stored_event(make_client: ClientFactory, agent_id: str) -> uuid.UUID:
    """One event written through the SDK, with the emotion the SDK itself sets after extraction."""
    answer = extraction(("Ana", "Ana loves jazz")) | {"emotion": {"label": "joy", "intensity": 0.7, "energy": 0.6}}
    async with make_client(ScriptedLLM({"informed_extraction": [answer]})) as memory:
        result = await memory.write(agent_id, "Ana loves jazz", speaker_name="Rafael", occurred_at=WHEN)
    assert result.success and result.event_id is not None, result.error
    return result.event_id


async def _event_row(engine: AsyncEngine, event_id: uuid.UUID) -> Any:
    [row] = await _rows(
        engine,
        "SELECT id, agent_id, speaker, content, occurred_at, recorded_at, emotion FROM memory_events WHERE id = :id",
        id=event_id,
    )
    return row


async def _refused(engine: AsyncEngine, sql: str, **params: Any) -> str:
    """Run `sql` in a transaction that is always rolled back; return PostgreSQL's refusal."""
    async with engine.connect() as conn:
        try:
            with pytest.raises(DBAPIError) as caught:
                await conn.execute(text(sql), params)
        finally:
            await conn.rollback()
    return str(caught.value.orig)


@pytest.mark.parametrize(
    "assignment",
    [
        "content = 'I never said that'",
        "speaker = 'Mallory'",
        "occurred_at = occurred_at - interval '1 day'",
        "agent_id = 'another-agent'",
        "recorded_at = now() - interval '1 year'",
    ],
    ids=["content", "speaker", "occurred_at", "agent_id", "recorded_at"],
)
async def test_database_refuses_update_of_event_content(
    stored_event: uuid.UUID, raw_engine: AsyncEngine, assignment: str
) -> None:
    before = await _event_row(raw_engine, stored_event)
    refusal = await _refused(raw_engine, f"UPDATE memory_events SET {assignment} WHERE id = :id", id=stored_event)
    assert "immutable" in refusal
    assert await _event_row(raw_engine, stored_event) == before


async def test_database_refuses_delete_of_an_event(stored_event: uuid.UUID, raw_engine: AsyncEngine) -> None:
    refusal = await _refused(raw_engine, "DELETE FROM memory_events WHERE id = :id", id=stored_event)
    assert "append-only" in refusal
    assert await _event_row(raw_engine, stored_event) is not None


@pytest.mark.parametrize(
    ("statement", "refusal_says"),
    [
        ("TRUNCATE memory_events", "truncate"),  # the foreign keys or the trigger
        ("TRUNCATE memory_events CASCADE", "append-only"),  # CASCADE passes the foreign keys: only the trigger stops it
    ],
    ids=["plain", "cascade"],
)
async def test_database_refuses_truncate_of_the_event_log(
    stored_event: uuid.UUID, raw_engine: AsyncEngine, statement: str, refusal_says: str
) -> None:
    refusal = await _refused(raw_engine, statement)
    assert refusal_says in refusal.lower()
    assert await _event_row(raw_engine, stored_event) is not None


async def test_event_emotion_can_be_updated(stored_event: uuid.UUID, raw_engine: AsyncEngine) -> None:
    before = await _event_row(raw_engine, stored_event)
    assert before.emotion == {"label": "joy", "intensity": 0.7, "energy": 0.6}  # set by the SDK after extraction
    async with raw_engine.begin() as conn:
        updated = await conn.execute(
            text("UPDATE memory_events SET emotion = CAST(:emotion AS jsonb) WHERE id = :id"),
            {"emotion": '{"label": "calm", "intensity": 0.1, "energy": 0.2}', "id": stored_event},
        )
        assert updated.rowcount == 1
    after = await _event_row(raw_engine, stored_event)
    assert after.emotion == {"label": "calm", "intensity": 0.1, "energy": 0.2}
    assert (after.content, after.speaker, after.occurred_at) == (before.content, before.speaker, before.occurred_at)


# --- the guard --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("message", ["", "   ", "\n\t  \r\n"], ids=["empty", "spaces", "whitespace"])
async def test_empty_message_returns_success_with_no_event_no_llm_call_and_no_rows(
    make_client: ClientFactory, agent_id: str, message: str
) -> None:
    llm, embedder = ScriptedLLM(), HashEmbedder()
    async with make_client(llm, embedder=embedder) as memory:
        before = await _counts(memory)
        result = await memory.write(agent_id, message, speaker_name="Rafael", verbose=True)
        assert result.success and result.error is None
        assert result.event_id is None
        assert result.tokens_used.total_tokens == 0 and result.llm_calls == 0
        assert result.facts_added == [] and result.entities_resolved == []
        assert llm.requests == [] and embedder.calls == []
        assert result.pipeline is not None and [s.name for s in result.pipeline.steps] == ["guard"]
        assert set((await _counts(memory, agent_id)).values()) == {0}
        assert await _counts(memory) == before


@pytest.mark.parametrize(
    "bad",
    [
        {"agent_id": ""},
        {"agent_id": "   "},
        {"agent_id": "agent\x00"},
        {"agent_id": 42},
        {"agent_id": "a" * 256},
        {"speaker_name": ""},
        {"occurred_at": datetime(2025, 6, 15, 12, 0)},
        {"occurred_at": "2025-06-15"},
        {"message": "Ana\x00 loves jazz"},
        {"message": b"Ana loves jazz"},
        {"message": "a" * 21, "config_overrides": {"max_message_chars": 20}},
        {"message": "a" * 32_001},
        {"recent_messages": ["Oi", 3]},
        {"recent_messages": "Oi, tudo bem?"},
    ],
    ids=[
        "empty-agent",
        "blank-agent",
        "nul-agent",
        "int-agent",
        "long-agent",
        "empty-speaker",
        "naive-occurred_at",
        "str-occurred_at",
        "nul-message",
        "bytes-message",
        "over-max-override",
        "over-max-default",
        "non-str-recent",
        "str-recent",
    ],
)
async def test_bad_input_raises_invalid_input_error_and_writes_nothing(
    make_client: ClientFactory, agent_id: str, bad: dict[str, Any]
) -> None:
    llm = ScriptedLLM()
    call: dict[str, Any] = {"agent_id": agent_id, "message": "Ana loves jazz", "speaker_name": "Rafael"} | bad
    async with make_client(llm) as memory:
        before = await _counts(memory)
        with pytest.raises(InvalidInputError) as caught:
            await memory.write(**call)
        assert isinstance(caught.value, ValueError)
        assert await _counts(memory) == before
        assert llm.requests == []


async def test_message_of_exactly_max_message_chars_is_accepted(make_client: ClientFactory, agent_id: str) -> None:
    llm = ScriptedLLM({"informed_extraction": [extraction()]})
    async with make_client(llm, config=MemoryConfig(max_message_chars=20)) as memory:
        result = await memory.write(agent_id, "a" * 20, speaker_name="Rafael")
        assert result.success and result.event_id is not None, result.error


async def test_non_iterable_recent_messages_raise_invalid_input_error(
    make_client: ClientFactory, agent_id: str
) -> None:
    async with make_client() as memory:
        with pytest.raises(InvalidInputError):
            await memory.write(agent_id, "Ana loves jazz", speaker_name="Rafael", recent_messages=42)  # type: ignore[arg-type]


async def test_config_override_of_wrong_type_raises_config_error_and_writes_nothing(
    make_client: ClientFactory, agent_id: str
) -> None:
    llm = ScriptedLLM()
    async with make_client(llm) as memory:
        before = await _counts(memory)
        with pytest.raises(ConfigError, match="fuzzy_threshold") as caught:
            await memory.write(agent_id, "Ana loves jazz", "Rafael", config_overrides={"fuzzy_threshold": "high"})
        assert isinstance(caught.value, ValueError)
        assert await _counts(memory) == before
        assert llm.requests == []


async def test_config_overrides_that_are_not_a_mapping_raise_config_error(
    make_client: ClientFactory, agent_id: str
) -> None:
    async with make_client() as memory:
        with pytest.raises(ConfigError):
            await memory.write(agent_id, "Ana", "Rafael", config_overrides=[("fuzzy_threshold", 0.9)])  # type: ignore[arg-type]


async def test_unknown_config_override_warns_and_the_write_proceeds(make_client: ClientFactory, agent_id: str) -> None:
    llm = ScriptedLLM({"informed_extraction": [extraction(("Ana", "Ana loves jazz"))]})
    async with make_client(llm) as memory:
        with pytest.warns(UserWarning, match="no_such_setting"):
            result = await memory.write(
                agent_id, "Ana loves jazz", speaker_name="Rafael", config_overrides={"no_such_setting": 1}
            )
        assert result.success, result.error
        assert [f.text for f in await memory.get_facts(agent_id)] == ["Ana loves jazz"]


# --- dry run ------------------------------------------------------------------------------------------------------


async def test_dry_run_persists_nothing_but_reports_what_the_real_write_does(
    make_client: ClientFactory, agent_id: str
) -> None:
    llm = ScriptedLLM({"informed_extraction": [CLARA_EXTRACTION, CLARA_EXTRACTION]})
    async with make_client(llm) as memory:
        before = await _counts(memory)
        dry = await memory.write(agent_id, CLARA_MESSAGE, speaker_name="Rafael", occurred_at=WHEN, dry_run=True)
        assert await _counts(memory) == before
        assert await memory.get_events(agent_id) == []
        assert await memory.get_entity(agent_id, "Clara Rezende") is None

        assert dry.success and dry.dry_run, dry.error
        assert dry.tokens_used.total_tokens > 0 and dry.llm_calls == 1
        assert [f.text for f in dry.facts_added] == [
            "Clara Rezende left Vertix",
            "Clara Rezende joined Orion Tech as head of engineering",
            "Thiago Nogueira personally hired Clara Rezende",
        ]
        # The ids are those of the rolled-back rows (tests/test_dry_run.py): none of them exists.
        assert {f.source_event_id for f in dry.facts_added} == {dry.event_id}
        assert {(r.source_key, r.rel_type, r.target_key) for r in dry.relationships} == {
            ("person:clara_rezende", "former_employee_of", "organization:vertix"),
            ("person:clara_rezende", "works_at", "organization:orion_tech"),
            ("person:thiago_nogueira", "hired", "person:clara_rezende"),
        }

        real = await memory.write(agent_id, CLARA_MESSAGE, speaker_name="Rafael", occurred_at=WHEN)
        assert real.success, real.error
        assert [f.text for f in real.facts_added] == [f.text for f in dry.facts_added]
        assert real.tokens_used == dry.tokens_used
        # Same extraction call: the dry run left no trace (no alias, no entity) that could change the prompt.
        dry_request, real_request = llm.requests_for("informed_extraction")
        assert dry_request.messages == real_request.messages
        assert (await _counts(memory, agent_id))["memory_events"] == 1
        assert real.event_id != dry.event_id


# --- tenancy -----------------------------------------------------------------------------------------------------

ALICE_MESSAGE = "Aninha works at Acme"
BOB_MESSAGE = "Nana works at Acme since 2020"


async def test_agents_writing_the_same_names_share_no_rows(
    make_client: ClientFactory, agent_id: str, raw_engine: AsyncEngine
) -> None:
    alice, bob = agent_id, agent_id + "-b"

    def answer(alias: str, fact: str) -> dict[str, Any]:
        return {
            "entities": [
                {"name": "Ana", "type": "person", "aliases": [alias]},
                {"name": "Acme", "type": "organization"},
            ],
            "facts": [{"subject": "Ana", "text": fact}],
            "relations": [{"source": "Ana", "target": "Acme", "type": "works_at"}],
        }

    llm = ScriptedLLM(
        {"informed_extraction": [answer("Aninha", "Ana works at Acme"), answer("Nana", "Ana works at Acme since 2020")]}
    )
    async with make_client(llm) as memory:
        first = await memory.write(alice, ALICE_MESSAGE, speaker_name="Rafael", occurred_at=WHEN)
        second = await memory.write(bob, BOB_MESSAGE, speaker_name="Rafael", occurred_at=WHEN)
        assert first.success and second.success

        rows = await _rows(
            raw_engine,
            "SELECT agent_id, id FROM memory_entities WHERE entity_key = 'person:ana' AND agent_id IN (:a, :b)",
            a=alice,
            b=bob,
        )
        assert sorted(row.agent_id for row in rows) == [alice, bob]
        assert len({row.id for row in rows}) == 2
        assert all(e.created for e in second.entities_resolved)

        for me, other, alias, other_alias, message, fact in (
            (alice, bob, "Aninha", "Nana", ALICE_MESSAGE, "Ana works at Acme"),
            (bob, alice, "Nana", "Aninha", BOB_MESSAGE, "Ana works at Acme since 2020"),
        ):
            ana = await memory.get_entity(me, "Ana")
            assert ana is not None and ana.aliases == (alias,)
            assert await memory.get_entity(me, other_alias) is None
            assert await memory.get_facts(me, entity=other_alias) == []

            facts = await memory.get_facts(me)
            assert [(f.agent_id, f.text) for f in facts] == [(me, fact)]
            events = await memory.get_events(me)
            assert [(e.agent_id, e.content) for e in events] == [(me, message)]
            assert {f.source_event_id for f in facts} == {events[0].id}
            rels = await memory.get_relationships(me, entity="Ana")
            assert [(r.agent_id, r.source_key, r.target_key) for r in rels] == [(me, "person:ana", "organization:acme")]
            assert await memory.get_trace(other, events[0].id) is None
            assert await memory.get_trace(me, events[0].id) is not None

        alice_ids = {f.id for f in await memory.get_facts(alice)} | {
            r.id for r in await memory.get_relationships(alice)
        }
        bob_ids = {f.id for f in await memory.get_facts(bob)} | {r.id for r in await memory.get_relationships(bob)}
        assert not alice_ids & bob_ids


# --- extraction fallback ----------------------------------------------------------------------------------------

BLIND_SCRIPT: dict[str, Any] = {
    "entity_scan": [{"entities": [{"name": "Ana", "type": "person"}, {"name": "Acme", "type": "organization"}]}],
    "fact_extraction": [{"facts": [{"subject": "Ana", "text": "Ana works at Acme"}]}],
    "relation_extraction": [{"relations": [{"source": "Ana", "target": "Acme", "type": "works_at"}]}],
}


async def _never_answers(request: LLMRequest) -> dict[str, Any]:
    await asyncio.sleep(5)
    return {}


@pytest.mark.parametrize(
    ("failure", "reason"),
    [
        ([ProviderError("model overloaded")], "model overloaded"),
        (["Sorry, I cannot help with that."], "no JSON object"),
        (['{"facts": [{"subject": "Ana"}]}'], "does not fit"),
        ([RuntimeError("connection reset by peer")], "connection reset by peer"),
        (_never_answers, "no answer within"),
        pytest.param([{"answer": "I cannot help with that."}], ""),
    ],
    ids=["provider-error", "not-json", "wrong-shape", "any-exception", "timeout", "off-shape-object"],
)
async def test_informed_failure_falls_back_to_blind_path_and_trace_says_why(
    make_client: ClientFactory, agent_id: str, failure: Any, reason: str
) -> None:
    llm = ScriptedLLM({"informed_extraction": failure, **BLIND_SCRIPT})
    async with make_client(llm) as memory:
        result = await memory.write(
            agent_id,
            "Ana works at Acme",
            speaker_name="Rafael",
            verbose=True,
            config_overrides={"extraction_timeout_sec": 0.5},
        )
        assert result.success, result.error
        assert result.extraction_path == "blind"
        assert [f.text for f in result.facts_added] == ["Ana works at Acme"]
        assert [(r.source_key, r.rel_type, r.target_key) for r in await memory.get_relationships(agent_id)] == [
            ("person:ana", "works_at", "organization:acme")
        ]

    purposes = [request.purpose for request in llm.requests]
    assert purposes[:2] == ["informed_extraction", "entity_scan"]
    assert sorted(purposes[2:]) == ["fact_extraction", "relation_extraction"]
    assert result.pipeline is not None
    step = result.pipeline.step("extraction")
    assert step.data["path"] == "blind"
    assert reason in step.data["fallback_reason"]
    assert step.data["fallback_reason"].startswith("informed extraction failed")
    informed_call = step.llm_calls[0]
    assert informed_call.purpose == "informed_extraction" and informed_call.status == "failed"
    assert informed_call.error is not None and reason in informed_call.error
    assert result.llm_calls == 4


@pytest.mark.parametrize(
    ("entities", "first_relations", "retried"),
    [
        (["Ana", "Acme"], [], True),
        (["Ana", "Acme", "Lisboa"], [], True),
        (["Ana", "Acme"], [{"source": "Ana", "target": "Acme", "type": "works_at"}], False),
        (["Ana"], [], False),
    ],
    ids=["two-entities-none", "three-entities-none", "two-entities-one", "one-entity-none"],
)
async def test_relation_retry_runs_once_exactly_when_no_relations_for_two_or_more_entities(
    make_client: ClientFactory, agent_id: str, entities: list[str], first_relations: list[Any], retried: bool
) -> None:
    retry_answer = {"relations": [{"source": "Ana", "target": "Acme", "type": "works_at"}]}
    llm = ScriptedLLM(
        {
            "entity_scan": [
                # works_at needs a person and an organization for its mirror fact (guards.mirror_allowed)
                {
                    "entities": [
                        {"name": name, "type": "person" if name == "Ana" else "organization"} for name in entities
                    ]
                }
            ],
            "fact_extraction": [{"facts": [{"subject": "Ana", "text": "Ana is here"}]}],
            "relation_extraction": [{"relations": first_relations}, retry_answer, {"relations": []}],
        }
    )
    async with make_client(llm) as memory:
        result = await memory.write(
            agent_id,
            " ".join(entities),
            speaker_name="Rafael",
            verbose=True,
            config_overrides={"enable_informed_extraction": False},
        )
    assert result.success and result.extraction_path == "blind", result.error
    assert result.pipeline is not None
    step = result.pipeline.step("extraction")
    assert step.data["relation_retry_triggered"] is retried
    assert step.data["fallback_reason"] == "informed extraction disabled by config"

    relation_requests = llm.requests_for("relation_extraction")
    assert len(relation_requests) == (2 if retried else 1)
    assert "found no relations" not in relation_requests[0].messages[1]["content"]
    if retried:
        assert "found no relations" in relation_requests[1].messages[1]["content"]
        assert [(r.source_key, r.target_key) for r in result.relationships] == [("person:ana", "organization:acme")]
    # Every call's tokens, the retry's included, are in the write's total.
    calls = [call for s in result.pipeline.steps for call in s.llm_calls]
    assert len(calls) == result.llm_calls == 3 + retried
    assert result.tokens_used.total_tokens == sum(call.usage.total_tokens for call in calls) > 0


# --- pipeline runs --------------------------------------------------------------------------------------------


async def test_each_write_records_one_pipeline_run_with_status_path_tokens_and_trace(
    make_client: ClientFactory, agent_id: str, raw_engine: AsyncEngine
) -> None:
    llm = ScriptedLLM(
        {
            "informed_extraction": [extraction(("Ana", "Ana loves jazz")), ProviderError("down")],
            "entity_scan": [ProviderError("still down")],
        }
    )
    async with make_client(llm) as memory:
        ok = await memory.write(agent_id, "Ana loves jazz", speaker_name="Rafael", occurred_at=WHEN)
        failed = await memory.write(agent_id, "Ana hates jazz", speaker_name="Rafael", occurred_at=WHEN)
        stored_trace = await memory.get_trace(agent_id, ok.event_id) if ok.event_id else None
    assert ok.success and not failed.success

    runs = await _rows(
        raw_engine,
        "SELECT * FROM memory_pipeline_runs WHERE agent_id = :agent ORDER BY started_at",
        agent=agent_id,
    )
    assert [(run.event_id, run.status, run.extraction_path) for run in runs] == [
        (ok.event_id, "succeeded", "informed"),
        (failed.event_id, "failed", "failed"),
    ]
    first, second = runs
    assert (first.llm_calls, first.input_tokens, first.output_tokens) == (
        ok.llm_calls,
        ok.tokens_used.input_tokens,
        ok.tokens_used.output_tokens,
    )
    assert first.input_tokens > 0 and first.output_tokens > 0
    assert first.error is None
    assert first.finished_at is not None and first.finished_at >= first.started_at
    # The trace is stored even though the write was not verbose.
    assert ok.pipeline is None
    assert [step["name"] for step in first.trace["steps"]] == STAGE_NAMES
    extraction_step = first.trace["steps"][STAGE_NAMES.index("extraction")]
    assert [call["purpose"] for call in extraction_step["llm_calls"]] == ["informed_extraction"]
    assert stored_trace is not None and [s.name for s in stored_trace.steps] == STAGE_NAMES

    assert second.error is not None and "extraction failed" in second.error
    assert second.llm_calls == 2
    assert second.finished_at is not None


# --- versions and time --------------------------------------------------------------------------------------------


def _lives_in(city: str, action: str) -> dict[str, Any]:
    return {
        "entities": [{"name": "Rafael", "type": "person"}, {"name": city, "type": "place"}],
        "facts": [
            {
                "subject": "Rafael",
                "text": f"Rafael lives in {city}",
                "action": action,
                "attribute": "lives_in",
                "importance_category": "biographical_milestone",
            }
        ],
        "relations": [],
    }


async def test_single_valued_update_keeps_history_and_answers_as_of_and_known_at(
    make_client: ClientFactory, agent_id: str
) -> None:
    t1, t2 = datetime(2024, 3, 1, tzinfo=UTC), datetime(2025, 6, 15, tzinfo=UTC)
    llm = ScriptedLLM(
        {
            # No decision in the answers (an older prompt's "NEW"): the reconciliation call decides.
            "informed_extraction": [_lives_in("Curitiba", "NEW"), _lives_in("São Paulo", "NEW")],
            "reconciliation": [{"action": "UPDATE", "target": "1"}],  # "1": the Curitiba fact, as shown
        }
    )
    async with make_client(llm) as memory:
        first = await memory.write(agent_id, "Moro em Curitiba", speaker_name="Rafael", occurred_at=t1)
        believed_before_move = datetime.now(UTC)
        second = await memory.write(agent_id, "Me mudei pra São Paulo", speaker_name="Rafael", occurred_at=t2)
        assert first.success and second.success, (first.error, second.error)
        [old] = first.facts_added
        [new] = second.facts_updated
        assert second.facts_added == []
        assert llm.remaining("reconciliation") == 0

        async def texts(**kwargs: Any) -> list[str]:
            return [f.text for f in await memory.get_facts(agent_id, entity="Rafael", **kwargs)]

        assert await texts() == ["Rafael lives in São Paulo"]
        assert await texts(as_of=t1 + (t2 - t1) / 2) == ["Rafael lives in Curitiba"]
        assert await texts(as_of=t1) == ["Rafael lives in Curitiba"]  # [valid_from, valid_to): start included
        assert await texts(as_of=t2) == ["Rafael lives in São Paulo"]  # end excluded
        assert await texts(as_of=t1 - timedelta(seconds=1)) == []
        assert await texts(known_at=believed_before_move) == ["Rafael lives in Curitiba"]
        assert await texts(known_at=datetime.now(UTC)) == ["Rafael lives in São Paulo"]

        history = await memory.get_facts(agent_id, entity="Rafael", include_history=True)
        by_id = {f.id: f for f in history}
        assert set(by_id) == {old.id, new.id}
        closed, current = by_id[old.id], by_id[new.id]
        assert current.supersedes_fact_id == old.id and closed.supersedes_fact_id is None
        assert closed.valid_from == t1 and closed.valid_to == t2  # closed at the new valid time, not the wall clock
        assert closed.invalidated_at is None  # superseded, not retracted: it was true in its interval
        assert current.valid_from == t2 and current.valid_to is None and current.invalidated_at is None
        assert current.attribute == closed.attribute == "lives_in"
        assert current.source_event_id == second.event_id and closed.source_event_id == first.event_id


async def test_write_keeps_its_event_when_its_pooled_connection_was_killed(
    make_client: ClientFactory, agent_id: str, raw_engine: AsyncEngine
) -> None:
    llm = ScriptedLLM(
        {"informed_extraction": [extraction(("Ana", "Ana loves jazz")), extraction(("Ana", "Ana sings"))]}
    )
    async with make_client(llm, pool_size=1) as memory:  # one pooled connection, so the write must meet it
        await memory.write(agent_id, "Ana loves jazz", speaker_name="Rafael", occurred_at=WHEN)
        async with memory.database.tenant(agent_id) as conn:
            pid = await conn.fetchval("SELECT pg_backend_pid()")
        async with raw_engine.connect() as admin:  # the server restarts or an operator kills it
            await admin.execute(text("SELECT pg_terminate_backend(:pid, 5000)"), {"pid": pid})
        result = await memory.write(agent_id, "Ana sings", speaker_name="Rafael", occurred_at=WHEN)
        assert result.success, result.error  # the dead connection was replaced (or the event insert retried)
        assert [event.content for event in await memory.get_events(agent_id)] == ["Ana loves jazz", "Ana sings"]


async def test_a_transaction_cancelled_during_its_commit_leaves_no_connection_inside_a_transaction(
    make_client: ClientFactory, agent_id: str, raw_engine: AsyncEngine
) -> None:
    """A task cancelled while its tenant transaction commits (a write cancelled at its last statement, a heartbeat
    stopped mid-renewal) must not hand the pool a connection asyncpg still believes is in a transaction: every
    later transaction on it would fail, or run as a savepoint of one that never commits. A deferred trigger makes
    this agent's COMMIT take 0.5 s, so the cancellation lands inside it."""
    slow_agent = f"{agent_id}-slow-commit"

    async def insert_event(db: Database) -> None:
        async with db.tenant(slow_agent) as conn:
            await conn.execute(
                "INSERT INTO memory_events (id, agent_id, speaker, content, occurred_at) "
                "VALUES ($1, $2, 's', 'c', now())",
                uuid.uuid4(),
                slow_agent,
            )

    async with make_client(pool_size=1) as memory:
        async with raw_engine.begin() as conn:
            await conn.execute(
                text(
                    "CREATE FUNCTION test_slow_commit() RETURNS trigger LANGUAGE plpgsql "
                    "AS $$ BEGIN PERFORM pg_sleep(0.5); RETURN NULL; END $$"
                )
            )
            await conn.execute(
                text(
                    "CREATE CONSTRAINT TRIGGER test_slow_commit AFTER INSERT ON memory_events DEFERRABLE INITIALLY "
                    f"DEFERRED FOR EACH ROW WHEN (NEW.agent_id = '{slow_agent}') EXECUTE FUNCTION test_slow_commit()"
                )
            )
        try:
            task = asyncio.create_task(insert_event(memory.database))
            await asyncio.sleep(0.2)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            for _ in range(2):  # the pool's one connection, or its replacement
                async with memory.database.tenant(agent_id) as conn:
                    age = await conn.fetchval("SELECT extract(epoch FROM clock_timestamp() - now())")
                    assert age < 0.2 and conn.is_in_transaction()
        finally:
            async with raw_engine.begin() as conn:
                await conn.execute(text("DROP TRIGGER test_slow_commit ON memory_events"))
                await conn.execute(text("DROP FUNCTION test_slow_commit()"))
