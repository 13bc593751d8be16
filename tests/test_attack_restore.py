"""Attacks through restore() and the import command (issue 39): documents that name another agent's ids, documents
that break write()'s rules, and import lines that are not messages. Real database, scripted LLM.

What must hold: a reference to another agent's row is refused with InvalidInputError naming the row, in the same
words whether that row exists or not (restore is no oracle), and is refused by the database itself, not only by
Python (composite keys of migration 0014); afterwards every agent's forget() succeeds and deletes only its own rows.
A bad document restores nothing; a bad import line fails alone, with no traceback.
"""

from __future__ import annotations

import asyncio
import copy
import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from memory_sdk import InvalidInputError, MemoryClient, StorageError
from memory_sdk.cli import main
from memory_sdk.cli_import import MAX_LINE_BYTES, MAX_LINE_DEPTH
from memory_sdk.store.dump import DUMPED_TABLES
from memory_sdk.testing import HashEmbedder, ScriptedLLM
from tests.conftest import ClientFactory, downgrade
from tests.test_export import remembered, scripted
from tests.test_import import conversation, extract

# Every column of a memory row that names another row by id: (document table, column, the table it names).
REFERENCES = [
    ("pipeline_runs", "event_id", "events"),
    ("facts", "source_event_id", "events"),
    ("facts", "supersedes_fact_id", "facts"),
    ("facts", "merged_into_fact_id", "facts"),
    ("fact_entities", "fact_id", "facts"),
    ("relationships", "evidence_fact_id", "facts"),
    ("relationships", "last_event_id", "events"),
]


# What forget() reports, table by table (store/queries.erase_agent).
_ERASED = (
    "relationships",
    "fact_entities",
    "facts",
    "entity_aliases",
    "entities",
    "pipeline_runs",
    "events",
    "agent_embedders",
)


async def _memories(make_client: ClientFactory, *agents: str) -> dict[str, dict[str, Any]]:
    """Each agent's memory written through the pipeline (a move, an alias, profiles, edges), as exported."""
    documents = {}
    for agent in agents:
        async with make_client(scripted()) as memory:
            documents[agent] = await remembered(memory, agent)
    return documents


async def _row_counts(memory: MemoryClient) -> dict[str, dict[str, int]]:
    """Rows per agent per table, read without row-level security (not a tenant transaction)."""
    counts: dict[str, dict[str, int]] = {}
    async with memory.database.transaction() as session:
        for table, _ in DUMPED_TABLES.values():
            rows = await session.execute(text(f"SELECT agent_id, count(*) FROM {table.name} GROUP BY agent_id"))
            for agent, count in rows.all():
                counts.setdefault(agent, {})[table.name.removeprefix("memory_")] = count
    return counts


def _foreign_id(victim: dict[str, Any], referenced: str) -> str:
    return str(victim[referenced][0]["id"])


async def test_restore_naming_another_agents_ids_is_refused_alike_whether_they_exist_or_not(
    make_client: ClientFactory, agent_id: str
) -> None:
    attacker, victim = f"{agent_id}-attacker", f"{agent_id}-victim"
    documents = await _memories(make_client, attacker, victim)
    own, theirs = documents[attacker], documents[victim]
    async with make_client() as memory:
        await memory.forget(attacker)  # the attacker restores its own document, with one reference changed
        before = await _row_counts(memory)
        refusals: dict[tuple[str, str], set[str]] = {}
        for table, column, referenced in REFERENCES:
            for foreign in (_foreign_id(theirs, referenced), str(uuid.uuid4())):
                crafted = copy.deepcopy(own)
                crafted[table][0][column] = foreign
                with pytest.raises(InvalidInputError) as refused:
                    await memory.restore(crafted)
                assert str(refused.value).startswith(f"{table}[0].{column} names no row"), refused.value
                refusals.setdefault((table, column), set()).add(str(refused.value))
        assert len(refusals) == 7
        assert all(len(messages) == 1 for messages in refusals.values()), refusals  # no oracle: same words
        assert await _row_counts(memory) == before  # nothing half-restored
        assert await memory.get_events(attacker) == []

        await memory.restore(own)  # the untouched document goes in
        counts = await _row_counts(memory)
        victim_rows, attacker_rows = counts[victim], counts[attacker]
        assert await memory.forget(victim) == {**dict.fromkeys(_ERASED, 0), **victim_rows, "agent_embedders": 1}
        assert victim not in await _row_counts(memory)
        assert (await _row_counts(memory))[attacker] == attacker_rows  # the victim's forget took none of the attacker's
        await memory.forget(attacker)
        assert attacker not in await _row_counts(memory)


def _insert_naming(attacker: str, column: str, foreign: str, own: dict[str, Any]) -> tuple[str, list[Any]]:
    """A row of the attacker's naming `foreign` in `column`, as the store's own SQL would insert it."""
    key, other = own["entities"][0]["entity_key"], own["entities"][1]["entity_key"]
    named = uuid.UUID(foreign)
    if column == "event_id":
        statement = "INSERT INTO memory_pipeline_runs (id, agent_id, event_id, status) VALUES ($1, $2, $3, 'failed')"
        return statement, [uuid.uuid4(), attacker, named]
    if column == "fact_id":
        statement = "INSERT INTO memory_fact_entities (fact_id, agent_id, entity_key) VALUES ($1, $2, $3)"
        return statement, [named, attacker, key]
    if column in ("evidence_fact_id", "last_event_id"):
        statement = (
            f"INSERT INTO memory_relationships (id, agent_id, source_key, target_key, rel_type, {column}) "
            "VALUES ($1, $2, $3, $4, 'knows', $5)"
        )
        return statement, [uuid.uuid4(), attacker, key, other, named]
    statement = (
        "INSERT INTO memory_facts (id, agent_id, entity_key, fact_text, confidence, importance, "
        f"importance_category, valid_from, schema_version, {column}) "
        "VALUES ($1, $2, $3, 'planted', 0.9, 0.5, 'conversational', clock_timestamp(), 1, $4)"
    )
    return statement, [uuid.uuid4(), attacker, key, named]


async def test_the_database_refuses_a_row_naming_another_agents_row(make_client: ClientFactory, agent_id: str) -> None:
    """The keys themselves, with restore's own checks out of the way: a tenant transaction of the attacker inserts
    rows naming the victim's ids, as a write path with a bug (or a restore without its checks) would. Goes red
    with migration 0014's composite keys replaced by 0001's keys on `id` alone."""
    attacker, victim = f"{agent_id}-attacker", f"{agent_id}-victim"
    documents = await _memories(make_client, attacker, victim)
    async with make_client() as memory:
        before = await _row_counts(memory)
        for table, column, referenced in REFERENCES:
            for foreign in (_foreign_id(documents[victim], referenced), str(uuid.uuid4())):
                statement, values = _insert_naming(attacker, column, foreign, documents[attacker])
                with pytest.raises(StorageError) as refused:
                    async with memory.database.tenant(attacker) as conn:
                        await conn.execute(statement, *values)
                cause = refused.value.__cause__
                assert isinstance(cause, asyncpg.ForeignKeyViolationError), (table, column, refused.value)
                assert cause.constraint_name == f"fk_memory_{table}_{column}", (table, column)
        assert await _row_counts(memory) == before
        for agent in (victim, attacker):
            erased = await memory.forget(agent)
            assert erased["facts"] == before[agent]["facts"] and erased["events"] == before[agent]["events"]
            assert agent not in await _row_counts(memory)


async def test_a_referenced_row_still_cannot_be_deleted_alone_within_one_agent(
    make_client: ClientFactory, agent_id: str
) -> None:
    """ON DELETE kept: a fact another fact supersedes cannot be deleted alone (NO ACTION); its fact links go with it
    once nothing names it (CASCADE)."""
    (document,) = (await _memories(make_client, agent_id)).values()
    superseded = next(f["supersedes_fact_id"] for f in document["facts"] if f["supersedes_fact_id"])
    delete = "DELETE FROM memory_facts WHERE agent_id = $1 AND id = $2"
    links = "SELECT count(*) FROM memory_fact_entities WHERE fact_id = $1"
    async with make_client() as memory:
        async with memory.database.tenant(agent_id) as conn:
            await conn.execute("DELETE FROM memory_relationships WHERE agent_id = $1", agent_id)
            assert await conn.fetchval(links, superseded) > 0
        with pytest.raises(StorageError, match="fk_memory_facts_supersedes_fact_id"):
            async with memory.database.tenant(agent_id) as conn:
                await conn.execute(delete, agent_id, superseded)
        async with memory.database.tenant(agent_id) as conn:
            await conn.execute("UPDATE memory_facts SET supersedes_fact_id = NULL WHERE agent_id = $1", agent_id)
            await conn.execute(delete, agent_id, superseded)
            assert await conn.fetchval(links, superseded) == 0
        await memory.forget(agent_id)


# --- documents that break write()'s rules ---------------------------------------------------------------------


Change = Callable[[dict[str, Any]], str]


def _set(table: str, column: str, value: Any) -> Change:
    """Set a column of the table's first row; the path the error must name."""

    def change(document: dict[str, Any]) -> str:
        document[table][0][column] = value
        return f"{table}[0].{column}"

    return change


def _agent(value: Any) -> Change:
    def change(document: dict[str, Any]) -> str:
        document["agent_id"] = value
        return "agent_id"

    return change


def _twice(table: str) -> Change:
    def change(document: dict[str, Any]) -> str:
        document[table].append(copy.deepcopy(document[table][0]))
        return f"{table}[{len(document[table]) - 1}]"

    return change


def _not_an_object(document: dict[str, Any]) -> str:
    document["facts"][0] = None
    return "facts[0]"


def _ends_before_it_starts(document: dict[str, Any]) -> str:
    index = next(i for i, row in enumerate(document["facts"]) if row["valid_to"] is None)
    document["facts"][index].update(valid_to="2000-01-01T00:00:00+00:00", closed_at="2000-01-01T00:00:00+00:00")
    return f"facts[{index}].valid_to"


def _edge_to_itself(document: dict[str, Any]) -> str:
    document["relationships"][0]["target_key"] = document["relationships"][0]["source_key"]
    return "relationships[0].target_key"


def _nested(depth: int) -> Any:
    value: Any = "deep"
    for _ in range(depth):
        value = [value]
    return {"steps": [], "extra": value}


# What is wrong with the document, and the change that makes it so (returning the path the error must name).
BAD_DOCUMENTS: list[tuple[str, Change]] = [
    ("a 300-character agent id", _agent("a" * 300)),
    ("a blank agent id", _agent("   ")),
    ("an agent id with a lone surrogate", _agent("agent-\ud800")),
    ("an agent id that is not a string", _agent(7)),
    ("a 100,000-character event", _set("events", "content", "x" * 100_000)),
    ("a blank speaker", _set("events", "speaker", "  ")),
    ("a 5,000-character entity type", _set("entities", "entity_type", "t" * 5_000)),
    ("a lone surrogate in a fact", _set("facts", "fact_text", "Rafael \udc80")),
    ("a NUL in an alias", _set("aliases", "alias", "Or\x00ion")),
    ("a message id with a control character", _set("events", "message_id", "m\x07")),
    ("a stored outcome that is no WriteResult", _set("pipeline_runs", "result", {"success": "maybe"})),
    ("a trace that is no trace", _set("pipeline_runs", "trace", {"steps": "all of them"})),
    ("a trace nested 200 deep", _set("pipeline_runs", "trace", _nested(200))),
    ("an emotion with a NUL", _set("events", "emotion", {"label": "\x00", "intensity": 0, "energy": 0})),
    ("a run status nobody writes", _set("pipeline_runs", "status", "hacked")),
    ("a confidence as a word", _set("facts", "confidence", "high")),
    ("a confidence of 7", _set("facts", "confidence", 7)),
    ("a NaN strength", _set("relationships", "strength", float("nan"))),
    ("a count as a string", _set("entities", "mention_count", "3")),
    ("a version past integer", _set("entities", "facts_version", 2**40)),
    ("a flag as a string", _set("facts", "single_valued", "yes")),
    ("a moment as a number", _set("events", "occurred_at", 1_700_000_000)),
    ("a moment in year 1", _set("facts", "valid_from", "0001-01-01T00:00:00+00:00")),
    ("an id as a number", _set("events", "id", 42)),
    ("a null where the table has none", _set("events", "recorded_at", None)),
    ("a row that is no object", _not_an_object),
    ("an interval that ends before it starts", _ends_before_it_starts),
    ("an edge from an entity to itself", _edge_to_itself),
    ("an event twice", _twice("events")),
    ("a fact link twice", _twice("fact_entities")),
    ("a fact about no entity of the document", _set("facts", "entity_key", "person:nobody")),
]


async def test_restore_refuses_a_document_that_breaks_the_rules_and_restores_nothing(
    make_client: ClientFactory, agent_id: str
) -> None:
    (document,) = (await _memories(make_client, agent_id)).values()
    target = f"{agent_id}-copy"
    async with make_client() as memory:
        before = await _row_counts(memory)
        for what, change in BAD_DOCUMENTS:
            crafted = copy.deepcopy(document)
            path = change(crafted)
            # A document's own agent id is the target when restore() is given none: the case that skipped its check.
            into = None if path == "agent_id" else target
            with pytest.raises(InvalidInputError) as refused:
                await memory.restore(crafted, agent_id=into)
            assert str(refused.value).startswith(path), (what, str(refused.value))
        assert await _row_counts(memory) == before
        await memory.restore(document, agent_id=target)  # the untouched document restores
        await memory.forget(target)


async def test_a_restored_outcome_is_what_a_retried_write_returns(make_client: ClientFactory, agent_id: str) -> None:
    """The stored outcomes a restore accepts are the ones write() can read back (no pydantic error later)."""
    (document,) = (await _memories(make_client, agent_id)).values()
    target = f"{agent_id}-copy"
    async with make_client() as memory:
        await memory.restore(document, agent_id=target)
        first = document["events"][0]
        again = await memory.write(
            target, first["content"], speaker_name=first["speaker"], message_id=first["message_id"]
        )
        assert again.success and again.duplicate
        await memory.forget(target)


# --- the migration's repair -----------------------------------------------------------------------------------


async def test_migration_0014_clears_references_across_agents_and_keeps_the_rest(
    fresh_database_url: str, agent_id: str
) -> None:
    """A database that already holds rows naming another agent's (what the attacks above stored before 0014) still
    opens: those references are cleared, every other is kept, and the victim's forget then succeeds."""
    attacker, victim = f"{agent_id}-attacker", f"{agent_id}-victim"
    documents: dict[str, dict[str, Any]] = {}
    for agent in (attacker, victim):
        async with MemoryClient(fresh_database_url, llm=scripted(), embedder=HashEmbedder()) as memory:
            documents[agent] = await remembered(memory, agent)
    own, theirs = documents[attacker], documents[victim]
    engine = create_async_engine(fresh_database_url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(downgrade, "0013")
            kept = await conn.scalar(
                text("SELECT count(*) FROM memory_facts WHERE agent_id = :a AND supersedes_fact_id IS NOT NULL"),
                {"a": attacker},
            )
            planted = {"event": theirs["events"][0]["id"], "fact": theirs["facts"][0]["id"]}
            for statement in (
                "UPDATE memory_pipeline_runs SET event_id = :event WHERE id = :run",
                "UPDATE memory_facts SET source_event_id = :event, merged_into_fact_id = :fact WHERE id = :own_fact",
                "UPDATE memory_relationships SET evidence_fact_id = :fact, last_event_id = :event WHERE id = :edge",
                "INSERT INTO memory_fact_entities (fact_id, agent_id, entity_key) VALUES (:fact, :a, 'planted')",
            ):
                await conn.execute(
                    text(statement),
                    {
                        **planted,
                        "a": attacker,
                        "run": own["pipeline_runs"][0]["id"],
                        "own_fact": own["facts"][0]["id"],
                        "edge": own["relationships"][0]["id"],
                    },
                )
    finally:
        await engine.dispose()
    async with MemoryClient(fresh_database_url, llm=ScriptedLLM(), embedder=HashEmbedder()) as memory:
        async with memory.database.transaction() as session:
            foreign = await session.scalar(
                text(
                    "SELECT count(*) FROM memory_facts f JOIN memory_events e ON e.id = f.source_event_id "
                    "WHERE f.agent_id <> e.agent_id"
                )
            )
            assert foreign == 0
            assert (
                await session.scalar(
                    text("SELECT count(*) FROM memory_fact_entities WHERE entity_key = 'planted'"),
                )
                == 0
            )
            still = await session.scalar(
                text("SELECT count(*) FROM memory_facts WHERE agent_id = :a AND supersedes_fact_id IS NOT NULL"),
                {"a": attacker},
            )
            assert still == kept > 0  # references inside the agent stay
        assert (await memory.forget(victim))["events"] == len(theirs["events"])
        await memory.forget(attacker)


# --- the import command -----------------------------------------------------------------------------------------


def test_import_reports_each_unreadable_line_alone_and_imports_the_others(
    database_url: str, agent_id: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = [
        json.dumps({"speaker": m.speaker, "text": m.text, "occurred_at": m.occurred_at.isoformat()}).encode()
        for m in conversation(2)
    ]
    bad = {
        2: b"[" * 100_000 + b"]" * 100_000,  # a RecursionError in json.loads
        3: b'{"speaker": "Rafael", "text": "caf\xe9", "occurred_at": "2025-01-01T00:00:00+00:00"}',  # Latin-1
        4: b'{"text": "' + b"a" * MAX_LINE_BYTES + b'"}',  # past the line cap
        5: b'{"a": ' * (MAX_LINE_DEPTH + 1) + b"1" + b"}" * (MAX_LINE_DEPTH + 1),
        6: b'{"speaker": "Rafael", "text": "\\ud800", "occurred_at": "2025-01-01T00:00:00+00:00"}',  # surrogate
    }
    source = tmp_path / "chat.jsonl"
    source.write_bytes(b"\n".join([good[0], *bad.values(), good[1]]) + b"\n")
    script = tmp_path / "answers.json"
    script.write_text(json.dumps({"informed_extraction": [extract(m.text) for m in conversation(2)]}), encoding="utf-8")
    where = ["--database-url", database_url]
    command = ["import", str(source), "--agent", agent_id, *where, "--embedder", "hash", "--scripted-llm", str(script)]

    assert main([*command, "--json"]) == 1
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    summary = json.loads(captured.out)
    assert (summary["messages"], summary["written"], summary["failed"]) == (7, 2, 5)
    errors = {failure["index"]: failure["error"] for failure in summary["failures"]}
    assert sorted(errors) == sorted(bad)
    assert "nested deeper" in errors[2] and "not UTF-8" in errors[3] and "longer than" in errors[4]
    assert "nested deeper" in errors[5] and "surrogate" in errors[6]
    assert main(["forget", agent_id, "--yes", *where, "--json"]) == 0


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "too deeply"),
        (b'{"format": "memory-sdk-export", "agent_id": "caf\xe9"}', "not UTF-8"),
        (b"{not json", "not JSON"),
    ],
)
def test_import_restore_reports_an_unreadable_export_in_one_line(
    database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, expected: str
) -> None:
    source = tmp_path / "export.json"
    source.write_bytes(content)
    command = ["import", "--restore", str(source), "--database-url", database_url, "--embedder", "hash", "--json"]
    assert main(command) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.startswith("memory-sdk: error:") and expected in err, err


def test_import_restore_names_the_bad_row(
    make_client: ClientFactory, database_url: str, agent_id: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (document,) = asyncio.run(_memories(make_client, agent_id)).values()
    document["facts"][1]["confidence"] = "very"
    source = tmp_path / "export.json"
    source.write_text(json.dumps(document), encoding="utf-8")
    command = ["import", "--restore", str(source), "--agent", f"{agent_id}-copy", "--database-url", database_url]
    assert main([*command, "--embedder", "hash", "--json"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "facts[1].confidence" in err, err
    assert main(["forget", agent_id, "--yes", "--database-url", database_url, "--json"]) == 0
