"""The attribute timeline's index (migrations 0009 and 0013) against the real database: a move's timeline read finds
the versions of a single-valued attribute that bear on the new one through it (those open or ending after it starts,
and the target), not by walking the subject's or the attribute's whole history."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import text

from memory_sdk import MemoryClient
from memory_sdk.store import queries
from tests.conftest import ClientFactory

pytestmark = pytest.mark.integration

_SCANS = "SELECT pg_stat_get_xact_numscans('ix_memory_facts_attribute'::regclass)"
_IDS = "SELECT fact_text, id FROM memory_facts WHERE agent_id = $1 AND attribute IS NOT NULL"


def _at(year: int) -> datetime:
    return datetime(year, 1, 1, tzinfo=UTC)


_RAFAEL = text(
    "INSERT INTO memory_entities (id, agent_id, entity_key, display_name, entity_type) "
    "VALUES (gen_random_uuid(), :agent, 'person:rafael', 'Rafael', 'person')"
)

# Rafael's facts: the rows of `versions` (a SELECT of the columns below), then where he works.
_FACTS = """
    INSERT INTO memory_facts (id, agent_id, entity_key, fact_text, attribute, single_valued, confidence, importance,
        importance_category, source_context, valid_from, valid_to, closed_at, schema_version)
    {versions}
    UNION ALL
    SELECT gen_random_uuid(), :agent, 'person:rafael', 'Rafael works at Acme', 'employer', true, 0.9, 0.5,
        'stable_fact', 'seed', timestamptz '2021-01-01', NULL, NULL, 1
"""


async def _seed(
    memory: MemoryClient, agent_id: str, versions: str, params: dict[str, object], *more: tuple[str, dict[str, object]]
) -> None:
    """Rafael, his facts (`versions` and his employer), then `more` statements, in one transaction; then ANALYZE."""
    async with memory.database.transaction() as session:
        await session.execute(_RAFAEL, {"agent": agent_id})
        await session.execute(text(_FACTS.format(versions=versions)), {"agent": agent_id, **params})
        for statement, values in more:
            await session.execute(text(statement), {"agent": agent_id, **values})
    async with memory.database.transaction() as session:
        await session.execute(text("ANALYZE memory_facts"))


HISTORY = 4_000  # facts of the subject with no attribute: most of what a large subject holds


async def test_an_attribute_timeline_is_read_through_its_index_not_the_subjects_history(
    make_client: ClientFactory, agent_id: str
) -> None:
    async with make_client() as memory:
        # The subject's history, then three versions of where they live (two closed, one open).
        history = """
            SELECT gen_random_uuid(), :agent, 'person:rafael', 'Rafael fact ' || n, NULL, false, 0.9, 0.5,
                'routine_activity', 'seed', now() - n * interval '1 hour', NULL, NULL, 1
            FROM generate_series(1, :history) n
            UNION ALL
            SELECT gen_random_uuid(), :agent, 'person:rafael', 'Rafael lives in ' || city, 'lives_in', true,
                0.9, 0.5, 'stable_fact', 'seed', since, until, until, 1
            FROM (VALUES ('Recife', timestamptz '2020-01-01', timestamptz '2022-01-01'),
                         ('Lisbon', timestamptz '2022-01-01', timestamptz '2024-01-01'),
                         ('Porto', timestamptz '2024-01-01', NULL)) AS v(city, since, until)
        """
        await _seed(memory, agent_id, history, {"history": HISTORY})
        async with memory.database.tenant(agent_id) as conn:
            ids = dict(await conn.fetch(_IDS, agent_id))
            now = await queries.lock_timeline(conn, agent_id, "person:rafael", "lives_in", _at(2026), None)
            after_timeline = await conn.fetchval(_SCANS)
            in_2023 = await queries.lock_timeline(conn, agent_id, "person:rafael", "lives_in", _at(2023), None)
            at_an_end = await queries.lock_timeline(conn, agent_id, "person:rafael", "lives_in", _at(2022), None)
            targeted = await queries.lock_timeline(
                conn, agent_id, "person:rafael", "lives_in", _at(2026), ids["Rafael lives in Recife"]
            )
            other_attribute = await queries.lock_timeline(
                conn, agent_id, "person:rafael", "lives_in", _at(2026), ids["Rafael works at Acme"]
            )
    assert after_timeline >= 1  # the timeline came from the attribute index

    def cities(versions: list[tuple[object, datetime, datetime | None]]) -> list[str]:
        return sorted(text_ for text_, id_ in ids.items() for version in versions if version[0] == id_)

    assert cities(now) == cities(other_attribute) == ["Rafael lives in Porto"]  # the open version alone
    assert cities(in_2023) == ["Rafael lives in Lisbon", "Rafael lives in Porto"]
    assert cities(at_an_end) == ["Rafael lives in Lisbon", "Rafael lives in Porto"]  # Recife ended then: no bearing
    assert cities(targeted) == ["Rafael lives in Porto", "Rafael lives in Recife"]


OTHER_AGENTS = 300
LONG_HISTORY = 2_000  # closed versions of one attribute: a subject whose city, mood or task changes every day


_ROWS_READ = (  # index entries and heap rows (sequential scans) read from memory_facts in this transaction
    "SELECT pg_stat_get_xact_tuples_returned('memory_facts'::regclass)"
    " + sum(pg_stat_get_xact_tuples_returned(indexrelid)) FROM pg_index WHERE indrelid = 'memory_facts'::regclass"
)


async def test_a_long_attribute_history_is_not_walked_past_the_sixth_read_on_a_connection(
    make_client: ClientFactory, agent_id: str
) -> None:
    """The move's timeline read, run as the apply transaction runs it (advisory locks taken) more than five times on
    one connection, in a database of many agents: it reads the versions that bear on the new one, not the attribute's
    history. When that transaction let its statements keep a generic plan (plan_cache_mode auto, from a statement's
    sixth run), the plan estimated a row for any (agent, subject, ...) prefix and read the attribute's every version
    or the subject's every fact to find them (7.6 ms a move at 6,363 versions of `lives_in`, 0.1 ms planned for the
    values)."""
    async with make_client() as memory:
        versions = """
            SELECT gen_random_uuid(), :agent, 'person:rafael', 'Rafael lives in city ' || n, 'lives_in', true,
                0.9, 0.5, 'stable_fact', 'seed', timestamptz '2020-01-01' + n * interval '1 hour',
                CASE WHEN n < :history THEN timestamptz '2020-01-01' + (n + 1) * interval '1 hour' END,
                CASE WHEN n < :history THEN timestamptz '2020-01-01' + (n + 1) * interval '1 hour' END, 1
            FROM generate_series(1, :history) n
        """
        # The rest of a memory and of the database: many subjects, attributes and agents, so that the planner's
        # statistics are a real deployment's (over one agent, subject and attribute a generic plan happened to read by
        # id; over many agents one read the whole agent by its agent_id prefix).
        others = {"agents": OTHER_AGENTS}
        entities = (
            "INSERT INTO memory_entities (id, agent_id, entity_key, display_name, entity_type) "
            "SELECT gen_random_uuid(), CASE WHEN k = 0 THEN :agent ELSE :agent || '-other-' || k END, "
            "'person:p' || n, 'P' || n, 'person' FROM generate_series(0, :agents) k, generate_series(1, 30) n"
        )
        facts = """
            INSERT INTO memory_facts (id, agent_id, entity_key, fact_text, attribute, single_valued,
                confidence, importance, importance_category, source_context, valid_from, schema_version)
            SELECT gen_random_uuid(), CASE WHEN k = 0 THEN :agent ELSE :agent || '-other-' || k END,
                'person:p' || (n % 30 + 1), 'P fact ' || n, 'attr_' || (n % 40), false, 0.9, 0.5,
                'stable_fact', 'seed', timestamptz '2021-01-01' + n * interval '1 minute', 1
            FROM generate_series(0, :agents) k, generate_series(1, CASE WHEN k = 0 THEN 3000 ELSE 20 END) n
        """
        await _seed(memory, agent_id, versions, {"history": LONG_HISTORY}, (entities, others), (facts, others))
        async with memory.database.tenant(agent_id, [7]) as conn:  # one transaction: one connection for every run
            ids = dict(await conn.fetch(_IDS + " AND entity_key = 'person:rafael'", agent_id))
            for run in range(1, 9):
                before = await conn.fetchval(_ROWS_READ)
                versions = await queries.lock_timeline(
                    conn, agent_id, "person:rafael", "lives_in", _at(2026), ids["Rafael lives in city 7"]
                )
                read = await conn.fetchval(_ROWS_READ) - before
                found = {text_ for text_, id_ in ids.items() if id_ in {version[0] for version in versions}}
                assert found == {"Rafael lives in city 7", f"Rafael lives in city {LONG_HISTORY}"}, run  # target, open
                assert read <= 10, (run, read)  # not the 2,000 versions nor the subject's history
            other_attribute = await queries.lock_timeline(
                conn, agent_id, "person:rafael", "lives_in", _at(2026), ids["Rafael works at Acme"]
            )
        assert [version[0] for version in other_attribute] == [ids[f"Rafael lives in city {LONG_HISTORY}"]]
