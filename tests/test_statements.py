"""How many SQL statements a write sends, and that sending fewer changed nothing it stores (issue 8, item 1).

Statements are counted on the pooled asyncpg connections (BEGIN, COMMIT and ROLLBACK are not counted), against the
real database. The counts are ceilings for the write shapes of benchmarks/scale.py: a write about known entities.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import event

from memory_sdk import MemoryClient
from memory_sdk.store import indexing
from memory_sdk.testing import ScriptedLLM
from tests.conftest import ClientFactory
from tests.scripts import each_fact

T0 = datetime(2026, 3, 1, 12, tzinfo=UTC)
_TRANSACTION = re.compile(r"^\s*(BEGIN|COMMIT|ROLLBACK)\b", re.IGNORECASE)
_BEGIN_WITH = re.compile(r"^\s*BEGIN;\s*", re.IGNORECASE)
_INDEX_SQL = " ".join(indexing.INDEX_SQL.split()).partition(" LIMIT")[0]  # the background indexer's statement
# asyncpg's own type introspection, once per connection for each type it has not met (JIT off around the catalog
# query): a write that runs on a connection the pool opened while the fact indexer held another pays it once there.
_DRIVER_INTROSPECTION = (
    "SELECT current_setting('jit') AS cur, set_config('jit', 'off', false)",
    "WITH RECURSIVE typeinfo_tree(",
)


def _answer(facts: list[tuple[str, str, str | None, str | None]], relations: list[dict[str, str]]) -> dict[str, Any]:
    """An informed extraction: facts as (subject, text, attribute, valid_from)."""
    return {
        "entities": [{"name": "Ana", "type": "person"}, {"name": "Acme", "type": "organization"}],
        "facts": [
            {
                "subject": subject,
                "text": text,
                "action": "NEW",
                "importance_category": "stable_preference",
                "attribute": attribute,
                "valid_from": valid_from,
            }
            for subject, text, attribute, valid_from in facts
        ],
        "relations": relations,
    }


class Statements:
    """Every statement the client's pooled connections send for the writes, in order: the fact indexer's
    statements, which run after a write in the background (store/indexing.py), are left out."""

    def __init__(self, memory: MemoryClient) -> None:
        self._log: list[str] = []
        self._seen: set[int] = set()
        event.listen(memory.database.engine.sync_engine, "checkout", self._attach)

    def _attach(self, dbapi_connection: Any, *_args: Any) -> None:
        driver = dbapi_connection.driver_connection
        if id(driver) not in self._seen:
            self._seen.add(id(driver))
            driver.add_query_logger(lambda record: self._log.append(" ".join(record.query.split())))

    def mark(self) -> int:
        """Where the statements sent from now on start (for since())."""
        return len(self._log)

    def since(self, start: int) -> list[str]:
        """The statements sent since mark() gave `start`, the fact indexer's (one simple query each) and the driver's
        per-connection type introspection left out."""
        return [sql for sql in self._log[start:] if _INDEX_SQL not in sql and not sql.startswith(_DRIVER_INTROSPECTION)]

    @contextmanager
    def counting(self) -> Iterator[list[str]]:
        """The statements sent inside the block, transaction control left out."""
        start = self.mark()
        counted: list[str] = []
        yield counted
        # BEGIN goes with the transaction's first statement, in one round trip (Database.tenant): that one counts.
        sent = [_BEGIN_WITH.sub("", sql) for sql in self.since(start)]
        counted += [sql for sql in sent if sql and not _TRANSACTION.match(sql)]


@asynccontextmanager
async def _client(make_client: ClientFactory, llm: ScriptedLLM) -> AsyncIterator[tuple[MemoryClient, Statements]]:
    async with make_client(llm) as memory:
        yield memory, Statements(memory)


async def _settled() -> None:
    """asyncpg calls query loggers with call_soon: let them run."""
    import asyncio

    for _ in range(3):
        await asyncio.sleep(0)


async def test_write_of_three_new_facts_about_known_entities_sends_at_most_fifteen_statements(
    make_client: ClientFactory, agent_id: str
) -> None:
    works_at = [{"source": "Ana", "target": "Acme", "type": "works_at"}]
    first = _answer([("Ana", "Ana works at Acme", "employer", None)], works_at)
    second = _answer(
        [
            ("Ana", "Ana plays the cello", None, None),
            ("Ana", "Ana collects old maps with her colleagues at Acme", None, None),
            ("Acme", "Acme opened an office in Porto", None, None),
        ],
        works_at,
    )
    llm = ScriptedLLM({"informed_extraction": [first, second]})
    async with _client(make_client, llm) as (memory, statements):
        await memory.write(agent_id, "Ana works at Acme.", speaker_name="Rafael", occurred_at=T0)
        with statements.counting() as sent:
            result = await memory.write(
                agent_id,
                "Ana plays the cello and collects old maps with her colleagues at Acme. Acme opened an office in Porto",
                speaker_name="Rafael",
                occurred_at=T0,
            )
            await _settled()
        assert result.success, result.error
        assert len(result.facts_added) == 3 and not result.facts_unchanged
        assert len(result.relationships) == 1
        inserts = [sql for sql in sent if "INSERT INTO memory_facts" in sql]
        assert len(inserts) == 1, "the three new versions go in one statement, with their links"
        assert not [sql for sql in sent if sql.startswith("INSERT INTO memory_fact_entities")]
        assert len(sent) <= 15, "\n".join(sent)
        links = {(f.text, key) for f in result.facts_added for key in await _links(memory, agent_id, f.id)}
        assert ("Acme opened an office in Porto", "organization:acme") in links
        assert ("Ana plays the cello", "person:ana") in links


async def _links(memory: MemoryClient, agent_id: str, fact_id: Any) -> list[str]:
    async with memory.database.tenant(agent_id) as conn:
        rows = await conn.fetch(
            "SELECT entity_key FROM memory_fact_entities WHERE agent_id = $1 AND fact_id = $2", agent_id, fact_id
        )
    return [row["entity_key"] for row in rows]


async def test_noop_is_confirmed_in_one_statement_without_a_separate_lock(
    make_client: ClientFactory, agent_id: str
) -> None:
    said = _answer([("Ana", "Ana plays the cello", None, None)], [])
    llm = ScriptedLLM({"informed_extraction": [said, said]})
    async with _client(make_client, llm) as (memory, statements):
        stored = await memory.write(agent_id, "Ana plays the cello.", speaker_name="Rafael", occurred_at=T0)
        with statements.counting() as sent:
            again = await memory.write(agent_id, "Ana plays the cello!", speaker_name="Rafael", occurred_at=T0)
            await _settled()
        assert [f.id for f in again.facts_unchanged] == [f.id for f in stored.facts_added]
        assert again.facts_unchanged[0].last_confirmed_at is not None
        assert not [sql for sql in sent if "FOR UPDATE" in sql and "memory_facts" in sql]
        assert len([sql for sql in sent if sql.startswith("UPDATE memory_facts SET last_confirmed_at")]) == 1


async def test_a_later_fact_of_one_write_sees_the_version_an_earlier_one_stored(
    make_client: ClientFactory, agent_id: str
) -> None:
    """New versions wait to be inserted together, but never past a read: the second home's timeline must hold the
    first, which it closes. (Read without it, the first attempt would open two homes; the database's one-open-value
    index refuses that, and only the isolated retry, one unit per fact, would store them right.)"""
    said = _answer(
        [
            ("Ana", "Ana lives in Lisbon", "lives_in", "2015-03-01"),
            ("Ana", "Ana lives in Porto", "lives_in", "2020-06-01"),
        ],
        [],
    )
    # The homes are places of the answer (a lives_in fact that names none is refused), and no Acme is said here.
    said["entities"] = [
        {"name": "Ana", "type": "person"},
        {"name": "Lisbon", "type": "place"},
        {"name": "Porto", "type": "place"},
    ]
    llm = ScriptedLLM({"informed_extraction": [said], "reconciliation_batch": [each_fact({"action": "ADD"})]})
    async with _client(make_client, llm) as (memory, _statements):
        result = await memory.write(
            agent_id,
            "Ana lived in Lisbon, and now Ana lives in Porto.",
            speaker_name="Rafael",
            occurred_at=T0,
            verbose=True,
        )
        assert result.success, result.error
        assert result.pipeline is not None and "isolated_retry" not in result.pipeline.step("upsert").data
        homes = {f.text: f for f in await memory.get_facts(agent_id, include_history=True)}
        assert homes["Ana lives in Porto"].valid_to is None
        assert homes["Ana lives in Lisbon"].valid_to == homes["Ana lives in Porto"].valid_from
        assert [f.text for f in await memory.get_facts(agent_id)] == ["Ana lives in Porto"]
