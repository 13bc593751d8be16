"""`MemoryClient.check` and `memory-sdk check`: a clean memory passes; each kind of damage is found and named, the
kinds rows deleted or changed behind the foreign keys' and triggers' back leave (as corruption would), and files
cut short on disk, which the reads take for an emptier memory without a word."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from memory_sdk import MemoryClient
from memory_sdk.cli import main
from memory_sdk.store import embedded
from memory_sdk.store.integrity import CHECKS, IntegrityReport
from memory_sdk.testing import HashEmbedder, ScriptedLLM
from tests.conftest import ClientFactory
from tests.scripts import CLARA_EXTRACTION, CLARA_MESSAGE

WHEN = datetime(2025, 6, 15, 12, 0, tzinfo=UTC)
CHATS = ("oi", "tudo bem?", "kkkk", "bom dia", "valeu")  # small talk: logged as events, nothing extracted


async def _write_clara(memory: MemoryClient, agent_id: str) -> None:
    result = await memory.write(agent_id, CLARA_MESSAGE, speaker_name="Rafael", occurred_at=WHEN)
    assert result.success, result.error
    await memory.database.indexer.drain()  # its facts in the HNSW index: the vector check has something to walk


@asynccontextmanager
async def _behind_the_keys_back(memory: MemoryClient) -> AsyncIterator[Any]:
    """A superuser transaction with triggers and foreign keys off (session_replication_role = replica): what a
    lost page or a bad restore leaves, which the SDK's own writes never could."""
    async with memory.database.transaction() as session:
        if not (await session.execute(text("SELECT rolsuper FROM pg_roles WHERE rolname = current_user"))).scalar():
            pytest.skip("damaging rows behind the keys' back needs a superuser (the embedded server's)")
        await session.execute(text("SET LOCAL session_replication_role = replica"))
        yield session


def _problems(report: IntegrityReport, check: str) -> list[str]:
    return [problem.detail for problem in report.problems if problem.check == check]


# --- on the shared test database: rows damaged behind the keys' back ----------------------------------------------


@pytest.fixture
async def clara(make_client: ClientFactory, agent_id: str) -> AsyncIterator[MemoryClient]:
    """The Clara message written (three facts, three edges); the agent erased afterwards, damage and all."""
    async with make_client(ScriptedLLM({"informed_extraction": [CLARA_EXTRACTION]})) as memory:
        await _write_clara(memory, agent_id)
        yield memory
        await memory.forget(agent_id)


async def test_a_clean_memory_passes_every_check(clara: MemoryClient, agent_id: str) -> None:
    report = await clara.check(agent_id)
    assert report.ok and report.problems == [], report.problems
    assert report.rows["events"] == 1 and report.rows["facts"] == 3 and report.rows["relationships"] == 3
    assert not [note for note in report.notes if "not compared" in note], report.notes  # every table, the HNSW too
    assert [name for name, _ in CHECKS] == [
        "edges",
        "open_values",
        "fact_events",
        "run_events",
        "counts",
        "vector_index",
    ]


async def test_a_current_edge_whose_evidence_fact_was_closed_is_found(clara: MemoryClient, agent_id: str) -> None:
    async with _behind_the_keys_back(clara) as session:
        evidence = (
            await session.execute(
                text(
                    "UPDATE memory_facts SET valid_to = now(), closed_at = now() WHERE id = (SELECT evidence_fact_id "
                    "FROM memory_relationships WHERE agent_id = :agent_id AND rel_type = 'works_at') RETURNING id"
                ),
                {"agent_id": agent_id},
            )
        ).scalar_one()
    report = await clara.check(agent_id)
    [found] = _problems(report, "edges")
    assert found.startswith("current edge person:clara_rezende -works_at-> organization:orion_tech ("), found
    assert found.endswith(f"stands on evidence fact {evidence}, which is closed"), found
    assert not report.ok and {problem.check for problem in report.problems} == {"edges"}


async def test_a_deleted_event_leaves_facts_and_a_run_that_name_it(clara: MemoryClient, agent_id: str) -> None:
    async with _behind_the_keys_back(clara) as session:
        event_id = (
            await session.execute(
                text("DELETE FROM memory_events WHERE agent_id = :agent_id RETURNING id"), {"agent_id": agent_id}
            )
        ).scalar_one()
    report = await clara.check(agent_id)
    assert len(_problems(report, "fact_events")) == 3
    assert all(f"source event {event_id}, which is not in the event log" in d for d in _problems(report, "fact_events"))
    [run] = _problems(report, "run_events")
    assert f"names event {event_id}, which is not in the event log" in run
    assert report.rows["events"] == 0 and not report.ok


def test_cli_check_exits_0_on_a_clean_memory_and_1_printing_each_problem(
    database_url: str, agent_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    async def write_then(damage: str | None) -> None:
        llm = ScriptedLLM({"informed_extraction": [CLARA_EXTRACTION]})
        async with MemoryClient(database_url, llm=llm, embedder=HashEmbedder()) as memory:
            if damage is None:
                await _write_clara(memory, agent_id)
                return
            async with _behind_the_keys_back(memory) as session:
                await session.execute(text(damage), {"agent_id": agent_id})

    async def forget() -> None:
        async with MemoryClient(database_url, llm=ScriptedLLM(), embedder=HashEmbedder()) as memory:
            await memory.forget(agent_id)

    asyncio.run(write_then(None))
    try:
        assert main(["check", agent_id, "--database-url", database_url]) == 0
        out = capsys.readouterr().out
        assert f"checked agent {agent_id!r}: events 1, pipeline_runs 1," in out and "no problems found" in out
        asyncio.run(write_then("DELETE FROM memory_events WHERE agent_id = :agent_id"))
        assert main(["check", agent_id, "--database-url", database_url]) == 1
        lines = capsys.readouterr().out.splitlines()
        assert "4 problem(s) found:" in lines
        assert sum(line.startswith("  fact_events: fact ") for line in lines) == 3
        assert sum(line.startswith("  run_events: pipeline run ") for line in lines) == 1
        assert main(["check", agent_id, "--database-url", database_url, "--json"]) == 1
        shown = json.loads(capsys.readouterr().out)
        assert shown["ok"] is False and len(shown["problems"]) == 4
    finally:
        asyncio.run(forget())


def test_cli_check_of_an_agent_with_no_memory_says_so(database_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "nobody-ever-wrote-here", "--database-url", database_url]) == 1
    assert "agent 'nobody-ever-wrote-here' has no memory" in capsys.readouterr().err


# --- on a server of its own: files cut short on disk -------------------------------------------------------------


@dataclass
class _Damaged:
    data_dir: Path
    agent_id: str


@pytest.fixture(scope="module")
def own_server() -> Iterator[_Damaged]:
    """A server of this module's own (its files are damaged), with one agent: Clara's message and small talk."""
    base = Path(tempfile.mkdtemp(prefix="memory-sdk-check-"))
    base.chmod(0o711)  # as root, the server's OS user must enter it
    damaged = _Damaged(base / "pgdata", "agent-check")

    async def write() -> None:
        none: dict[str, Any] = {"entities": [], "facts": [], "relations": []}
        llm = ScriptedLLM({"informed_extraction": [CLARA_EXTRACTION] + [none] * len(CHATS)})
        async with MemoryClient(data_dir=damaged.data_dir, llm=llm, embedder=HashEmbedder()) as memory:
            await _write_clara(memory, damaged.agent_id)
            for chat in CHATS:
                result = await memory.write(damaged.agent_id, chat, speaker_name="Rafael", occurred_at=WHEN)
                assert result.success, result.error

    asyncio.run(write())
    yield damaged
    embedded.stop_embedded_server(damaged.data_dir)
    shutil.rmtree(base, ignore_errors=True)


def _own_client(damaged: _Damaged) -> MemoryClient:
    return MemoryClient(data_dir=damaged.data_dir, llm=ScriptedLLM(), embedder=HashEmbedder())


async def _check(damaged: _Damaged, *, repair: str | None = None, read: bool = True) -> tuple[IntegrityReport, int]:
    """The check's report and how many events the reads return (-1 when not read); `repair` run first."""
    async with _own_client(damaged) as memory:
        if repair is not None:
            async with memory.database.transaction() as session:
                await session.execute(text(repair))
        report = await memory.check(damaged.agent_id)
        return report, len(await memory.get_events(damaged.agent_id)) if read else -1


def _cut_short(damaged: _Damaged, relation: str) -> None:
    """Truncate `relation`'s file to 0 bytes with the server stopped, as a lost write or a bad copy leaves it."""

    async def path() -> str:
        async with _own_client(damaged) as memory, memory.database.transaction() as session:
            found = (await session.execute(text("SELECT pg_relation_filepath(:r)"), {"r": relation})).scalar()
        assert isinstance(found, str), relation
        return found

    relative = asyncio.run(path())
    embedded.stop_embedded_server(damaged.data_dir)  # a clean stop: every page of the relation is on disk
    os.truncate(damaged.data_dir / relative, 0)


@pytest.mark.parametrize(
    ("index", "check"),
    [("ix_memory_facts_embedding", "vector_index"), ("ix_memory_events_agent_occurred", "counts")],
    ids=["hnsw", "btree"],
)
def test_an_index_cut_short_is_found_and_gone_after_reindex(own_server: _Damaged, index: str, check: str) -> None:
    report, _ = asyncio.run(_check(own_server))
    assert report.ok, report.problems
    _cut_short(own_server, index)
    report, _ = asyncio.run(_check(own_server, read=False))  # a lost btree index fails the reads too
    assert any("could not read block" in detail for detail in _problems(report, check)), report.problems
    repaired, _ = asyncio.run(_check(own_server, repair=f"REINDEX INDEX {index}"))
    assert repaired.ok, repaired.problems


def test_two_open_values_of_a_single_valued_attribute_are_found(own_server: _Damaged) -> None:
    """The unique index that keeps a second open value out (uq_memory_facts_open_single_valued) lost, as a damaged
    index loses entries; the rows and the index are put back afterwards."""
    unique = "uq_memory_facts_open_single_valued"

    async def damage_check_repair() -> tuple[IntegrityReport, IntegrityReport]:
        params = {"agent_id": own_server.agent_id, "entity": "person:clara_rezende"}
        async with _own_client(own_server) as memory:
            async with memory.database.transaction() as session:
                definition = (
                    await session.execute(text("SELECT indexdef FROM pg_indexes WHERE indexname = :i"), {"i": unique})
                ).scalar_one()
                await session.execute(text(f"DROP INDEX {unique}"))
                before = (
                    await session.execute(
                        text(
                            "UPDATE memory_facts f SET single_valued = true, attribute = 'employer' "
                            "FROM memory_facts old WHERE old.id = f.id AND f.agent_id = :agent_id "
                            "AND f.entity_key = :entity RETURNING f.id, old.single_valued, old.attribute"
                        ),
                        params,
                    )
                ).all()
            damaged = await memory.check(own_server.agent_id)
            async with memory.database.transaction() as session:
                for row in before:
                    await session.execute(
                        text("UPDATE memory_facts SET single_valued = :s, attribute = :a WHERE id = :id"),
                        {"s": row.single_valued, "a": row.attribute, "id": row.id},
                    )
                await session.execute(text(definition))
            return damaged, await memory.check(own_server.agent_id)

    damaged, repaired = asyncio.run(damage_check_repair())
    [found] = _problems(damaged, "open_values")
    assert found.startswith("person:clara_rezende.employer has 2 open values (facts "), found
    assert {problem.check for problem in damaged.problems} == {"open_values"}
    assert repaired.ok, repaired.problems


def test_a_truncated_events_table_is_found_where_the_reads_see_an_empty_log(
    own_server: _Damaged, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's case: 6 events read as 0 with no error. Last in this module: the damage stays."""
    report, events = asyncio.run(_check(own_server))
    assert report.ok and events == len(CHATS) + 1
    _cut_short(own_server, "memory_events")
    report, events = asyncio.run(_check(own_server))
    assert events == 0  # what the reads say: an empty event log, no error
    assert not report.ok
    assert _problems(report, "counts") and "memory_events" in _problems(report, "counts")[0]
    assert _problems(report, "fact_events") and _problems(report, "run_events")
    assert main(["check", own_server.agent_id, "--data-dir", str(own_server.data_dir)]) == 1
    out = capsys.readouterr().out
    assert "  counts: memory_events: " in out and "problem(s) found:" in out
