"""Export and restore (memory_sdk/export.py): a scripted conversation exported, restored into another agent and
into the same agent after forget, exported again and compared; no LLM call on the way back. Real database."""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

import pytest
from sqlalchemy import text

from memory_sdk import ImportMessage, InvalidInputError, MemoryClient
from memory_sdk.export import EXPORT_VERSION
from memory_sdk.store.dump import BOOKKEEPING, DUMPED_TABLES, dumped_columns
from memory_sdk.testing import HashEmbedder, ScriptedLLM
from tests.conftest import ClientFactory
from tests.invariants import assert_memory_invariants
from tests.test_stays_true import T1, T2, fact

MESSAGES = [
    ImportMessage(text="Moro em Curitiba e trabalho na Orion Tech", speaker="Rafael", occurred_at=T1, message_id="1"),
    ImportMessage(text="Me mudei pra São Paulo", speaker="Rafael", occurred_at=T2, message_id="2"),
]


def scripted() -> ScriptedLLM:
    """A move (an UPDATE that closes the old home and invalidates its edge), an alias, profiles, consolidation."""
    return ScriptedLLM(
        {
            "informed_extraction": [
                {
                    "entities": [
                        {"name": "Rafael", "type": "person"},
                        {"name": "Curitiba", "type": "place"},
                        {"name": "Orion Tech", "type": "organization", "aliases": ["Orion"]},
                    ],
                    "facts": [
                        fact("Rafael", "Rafael mora em Curitiba", attribute="lives_in"),
                        fact("Rafael", "Rafael trabalha na Orion Tech", attribute="employer"),
                    ],
                    "relations": [
                        {"source": "Rafael", "target": "Curitiba", "type": "lives_in"},
                        {"source": "Rafael", "target": "Orion Tech", "type": "works_at"},
                    ],
                    "updated_profiles": {"Rafael": "Lives in Curitiba, works at Orion Tech."},
                },
                {
                    "entities": [{"name": "Rafael", "type": "person"}, {"name": "São Paulo", "type": "place"}],
                    "facts": [fact("Rafael", "Rafael mora em São Paulo", action="UPDATE", attribute="lives_in")],
                    "relations": [{"source": "Rafael", "target": "São Paulo", "type": "lives_in"}],
                },
            ],
            "reconciliation": lambda request: {"action": "UPDATE", "target": "1"},
            "profile_consolidation": lambda request: {"profile": "Lives in São Paulo, works at Orion Tech."},
        }
    )


async def remembered(memory: MemoryClient, agent_id: str) -> dict[str, Any]:
    """Write the conversation and consolidate; return the export as it would come back from a JSON file."""
    summary = await memory.write_many(agent_id, MESSAGES)
    assert summary.written == 2, summary.failures
    report = await memory.consolidate(agent_id)
    assert report.success, report.failures
    document = json.loads(json.dumps(await memory.export(agent_id)))
    assert any(f["supersedes_fact_id"] for f in document["facts"])  # the history is in it
    assert any(r["invalidated_at"] for r in document["relationships"])
    assert any(e["profile_text"] for e in document["entities"])
    assert {a["alias"] for a in document["aliases"]} >= {"Orion"}
    return document


def canonical(document: dict[str, Any]) -> dict[str, Any]:
    """The document with the agent id and every id replaced by its order of first appearance, each table's rows
    sorted: two exports of the same memory under other ids compare equal."""
    labels: dict[str, str] = {}
    agent = document["agent_id"]

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            return {key: walk(item) for key, item in value.items() if key != "exported_at"}
        if isinstance(value, list):
            return [walk(item) for item in value]
        if value == agent:
            return "<agent>"
        if isinstance(value, str) and len(value) == 36:
            try:
                UUID(value)
            except ValueError:
                return value
            return labels.setdefault(value, f"<id {len(labels)}>")
        return value

    shown = walk(document)
    for name in DUMPED_TABLES:
        shown[name] = sorted(shown[name], key=lambda row: json.dumps(row, sort_keys=True))
    return shown


async def test_restore_into_another_agent_reproduces_the_memory_without_the_llm(
    make_client: ClientFactory, agent_id: str
) -> None:
    copy = f"{agent_id}-copy"
    llm = scripted()
    async with make_client(llm) as memory:
        document = await remembered(memory, agent_id)
        calls = len(llm.requests)
        counts = await memory.restore(document, agent_id=copy)
        assert counts == {name: len(document[name]) for name in DUMPED_TABLES}
        assert len(llm.requests) == calls  # no LLM call
        again = await memory.export(copy)
        assert canonical(again) == canonical(document)
        assert not {row["id"] for row in again["facts"]} & {row["id"] for row in document["facts"]}  # remapped
        history = await memory.get_facts(copy, include_history=True)
        assert [(f.text, f.valid_from, f.valid_to) for f in history] == [
            (f.text, f.valid_from, f.valid_to) for f in await memory.get_facts(agent_id, include_history=True)
        ]
        assert (await memory.get_entity(copy, "Orion")) == (await memory.get_entity(agent_id, "Orion"))
        await assert_memory_invariants(memory, copy)
        await memory.forget(copy)


async def test_restore_after_forget_keeps_ids_and_a_reimport_skips_every_message(
    make_client: ClientFactory, agent_id: str
) -> None:
    llm = scripted()
    async with make_client(llm) as memory:
        document = await remembered(memory, agent_id)
        await memory.forget(agent_id)
        await memory.restore(document)
        again = await memory.export(agent_id)
        assert {k: v for k, v in again.items() if k != "exported_at"} == {
            k: v for k, v in document.items() if k != "exported_at"
        }
        calls = len(llm.requests)
        summary = await memory.write_many(agent_id, MESSAGES)  # the runs' outcomes came back with the events
        assert (summary.duplicates, summary.written) == (2, 0)
        assert len(llm.requests) == calls
        [home] = [f for f in await memory.get_facts(agent_id) if f.attribute == "lives_in"]
        assert home.text == "Rafael mora em São Paulo"


async def test_restore_recomputes_vectors_with_the_restoring_embedder(
    make_client: ClientFactory, database_url: str, agent_id: str
) -> None:
    copy = f"{agent_id}-vectors"
    async with make_client(scripted()) as memory:
        document = await remembered(memory, agent_id)
    embedder = HashEmbedder()
    async with make_client(embedder=embedder) as memory:
        await memory.restore(document, agent_id=copy)
        embedded = {text for batch in embedder.calls for text in batch}
        assert {e["content"] for e in document["events"]} <= embedded
        assert {f["fact_text"] for f in document["facts"]} <= embedded
        async with memory.database.transaction(copy) as session:
            missing = await session.execute(
                text("SELECT count(*) FROM memory_facts WHERE agent_id = :agent AND embedding IS NULL"),
                {"agent": copy},
            )
            assert missing.scalar_one() == 0
        await memory.forget(copy)
    assert document["embedder"]["id"] == "hash:HashEmbedder"


async def test_restore_refuses_an_agent_with_memory_and_a_document_it_cannot_read(
    make_client: ClientFactory, agent_id: str
) -> None:
    async with make_client(scripted()) as memory:
        document = await remembered(memory, agent_id)
        before = await memory.export(agent_id)
        with pytest.raises(InvalidInputError, match="already has a memory"):
            await memory.restore(document)
        assert canonical(await memory.export(agent_id)) == canonical(before)
        with pytest.raises(InvalidInputError, match="version"):
            await memory.restore({**document, "version": EXPORT_VERSION + 1}, agent_id=f"{agent_id}-x")
        with pytest.raises(InvalidInputError, match="not a memory-sdk export"):
            await memory.restore({"facts": []}, agent_id=f"{agent_id}-x")
        broken = {**document, "facts": [{**document["facts"][0], "valid_from": "yesterday"}]}
        with pytest.raises(InvalidInputError, match="valid_from"):
            await memory.restore(broken, agent_id=f"{agent_id}-x")
        assert await memory.get_events(f"{agent_id}-x") == []


# Migration 0011's change sequence (what keeps a client's cache of codes exact): not memory but bookkeeping that the
# triggers hand out afresh as a restore inserts the facts; restored, it could only move backwards.
SEQUENCE_COLUMNS = {"change_seq", "moved_out_seq", "changed_by", "subject_seq"}


async def test_the_export_carries_every_stored_column_but_the_vectors(make_client: ClientFactory) -> None:
    """A column a migration adds and tables.py does not describe would be lost by export/restore: caught here.
    Generated columns (the database computes them from others) are left out, like the vectors and the change
    sequence."""
    async with make_client() as memory, memory.database.transaction() as session:
        for name, (table, _) in DUMPED_TABLES.items():
            rows = await session.execute(
                text(
                    "SELECT column_name FROM information_schema.columns "
                    "WHERE table_name = :table AND udt_name <> 'vector' AND is_generated = 'NEVER'"
                ),
                {"table": table.name},
            )
            stored = {row[0] for row in rows} - SEQUENCE_COLUMNS - BOOKKEEPING
            exported = set(dumped_columns(table)) - {"embedding", "name_embedding"}
            assert stored == exported, f"{name}: stored {sorted(stored ^ exported)} not exported"


async def test_tables_describe_the_keys_and_nulls_the_database_holds(make_client: ClientFactory) -> None:
    """restore checks a document against tables.py (NOT NULL, unique keys, agent-scoped references) before the
    database sees it: tables.py must say what the migrations left, or a check would be missing or wrong."""
    described_keys, described_nulls = set(), {}
    for table, _ in DUMPED_TABLES.values():
        for key in table.foreign_key_constraints:
            columns = tuple(e.parent.name for e in key.elements)
            described_keys.add((table.name, key.name, columns, key.referred_table.name, key.ondelete or "NO ACTION"))
        described_nulls |= {(table.name, column.name): column.nullable for column in table.c}
    async with make_client() as memory, memory.database.transaction() as session:
        keys = await session.execute(
            text(
                "SELECT c.conrelid::regclass::text, c.conname, "
                "array(SELECT a.attname FROM unnest(c.conkey) WITH ORDINALITY k(n, i) "
                "      JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.n ORDER BY k.i), "
                "c.confrelid::regclass::text, "
                "CASE c.confdeltype WHEN 'c' THEN 'CASCADE' WHEN 'a' THEN 'NO ACTION' ELSE c.confdeltype::text END "
                "FROM pg_constraint c WHERE c.contype = 'f' AND c.conrelid::regclass::text LIKE 'memory_%'"
            )
        )
        stored_keys = {(table, name, tuple(columns), target, rule) for table, name, columns, target, rule in keys}
        nulls = await session.execute(
            text(
                "SELECT table_name, column_name, is_nullable = 'YES' FROM information_schema.columns "
                "WHERE table_name LIKE 'memory_%'"
            )
        )
        stored_nulls = {(table, column): nullable for table, column, nullable in nulls}
    assert described_keys == stored_keys
    assert all(columns[0] == "agent_id" for _, _, columns, _, _ in stored_keys)  # no reference across agents
    assert {column: stored_nulls[column] for column in described_nulls} == described_nulls
