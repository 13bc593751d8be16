"""The attribute timeline's index (migration 0009) against the real database: a move's timeline read finds a
single-valued attribute's few versions through it, not by walking the subject's whole history."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import text

from memory_sdk.store import queries
from tests.conftest import ClientFactory

pytestmark = pytest.mark.integration

_SCANS = "SELECT pg_stat_get_xact_numscans('ix_memory_facts_attribute'::regclass)"
HISTORY = 4_000  # facts of the subject with no attribute: most of what a large subject holds


async def test_an_attribute_timeline_is_read_through_its_index_not_the_subjects_history(
    make_client: ClientFactory, agent_id: str
) -> None:
    async with make_client() as memory:
        async with memory.database.transaction() as session:
            await session.execute(
                text(
                    "INSERT INTO memory_entities (id, agent_id, entity_key, display_name, entity_type) "
                    "VALUES (gen_random_uuid(), :agent, 'person:rafael', 'Rafael', 'person')"
                ),
                {"agent": agent_id},
            )
            # The subject's history, then three versions of where they live (two closed, one open).
            await session.execute(
                text(
                    """
                    INSERT INTO memory_facts (id, agent_id, entity_key, fact_text, attribute, single_valued,
                        confidence, importance, importance_category, source_context, valid_from, valid_to, closed_at,
                        schema_version)
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
                ),
                {"agent": agent_id, "history": HISTORY},
            )
        async with memory.database.transaction() as session:
            await session.execute(text("ANALYZE memory_facts"))
        async with memory.database.tenant(agent_id) as conn:
            timeline = await queries.lock_timeline(conn, agent_id, "person:rafael", "lives_in")
            after_timeline = await conn.fetchval(_SCANS)
    assert sorted(valid_from for _id, valid_from, _to in timeline) == [
        datetime(2020, 1, 1, tzinfo=UTC),
        datetime(2022, 1, 1, tzinfo=UTC),
        datetime(2024, 1, 1, tzinfo=UTC),
    ]
    assert after_timeline >= 1  # the timeline came from the attribute index
