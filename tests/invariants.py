"""What must hold for one agent's memory after any set of writes, however they interleaved: read straight from the
tables, so a read API that hides a broken row cannot hide it from this check.

Call it when no write is in flight: it also says that no pipeline run was left 'running'.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from sqlalchemy import text

from memory_sdk import MemoryClient
from memory_sdk.text import normalise_alias

__all__ = ["assert_memory_invariants"]

# A current relationship stands on a current fact. An edge with no evidence at all is a violation too: every edge
# the pipeline stores has a fact of its write behind it (an extracted one, or the mirror fact it plans for an edge no
# fact supports), so a NULL evidence_fact_id means that fact was lost.
_EDGES_WITHOUT_CURRENT_EVIDENCE = """
    SELECT r.id, r.source_key, r.rel_type, r.target_key, r.evidence_fact_id,
           f.fact_text, f.valid_from, f.valid_to, f.invalidated_at
    FROM memory_relationships r
    LEFT JOIN memory_facts f ON f.id = r.evidence_fact_id AND f.agent_id = r.agent_id
    WHERE r.agent_id = :agent_id AND r.invalidated_at IS NULL AND r.valid_to IS NULL
      AND (f.id IS NULL OR f.valid_to IS NOT NULL OR f.invalidated_at IS NOT NULL)
    ORDER BY r.source_key, r.rel_type, r.target_key
"""

_SEVERAL_OPEN_VALUES = """
    SELECT entity_key, attribute, array_agg(fact_text ORDER BY valid_from, recorded_at) AS texts
    FROM memory_facts
    WHERE agent_id = :agent_id AND single_valued AND attribute IS NOT NULL
      AND valid_to IS NULL AND invalidated_at IS NULL
    GROUP BY entity_key, attribute
    HAVING count(*) > 1
    ORDER BY entity_key, attribute
"""

_DUPLICATE_CURRENT_FACTS = """
    SELECT entity_key, lower(fact_text) AS text, count(*) AS copies,
           array_agg(id::text ORDER BY recorded_at) AS ids
    FROM memory_facts
    WHERE agent_id = :agent_id AND valid_to IS NULL AND invalidated_at IS NULL
    GROUP BY entity_key, lower(fact_text)
    HAVING count(*) > 1
    ORDER BY entity_key, lower(fact_text)
"""

_ENTITIES = """
    SELECT entity_key, display_name, entity_type
    FROM memory_entities
    WHERE agent_id = :agent_id
    ORDER BY entity_key
"""

_EVENTS_WITHOUT_FINISHED_RUN = """
    SELECT e.id, e.content, array_remove(array_agg(r.status), NULL) AS statuses
    FROM memory_events e
    LEFT JOIN memory_pipeline_runs r ON r.event_id = e.id AND r.agent_id = e.agent_id
    WHERE e.agent_id = :agent_id
    GROUP BY e.id, e.content, e.occurred_at
    HAVING NOT coalesce(bool_or(r.status <> 'running'), false)
    ORDER BY e.occurred_at
"""

_RUNS_LEFT_RUNNING = """
    SELECT r.id, r.event_id, r.started_at
    FROM memory_pipeline_runs r
    WHERE r.agent_id = :agent_id AND r.status = 'running'
    ORDER BY r.started_at
"""


async def assert_memory_invariants(memory: MemoryClient, agent_id: str) -> None:
    """Assert the invariants of `agent_id`'s memory; the message lists every offending row.

    The check runs in a transaction without the SDK's tenant role (a superuser connection, as the embedded server's,
    bypasses row-level security), and sets the tenant setting anyway so that a non-superuser test database shows
    the agent's rows too. Every query filters on agent_id itself.
    """
    problems: list[str] = []
    params = {"agent_id": agent_id}
    async with memory.database.transaction() as session:
        await session.execute(text("SELECT set_config('memory_sdk.agent_id', :agent_id, true)"), params)

        async def rows(sql: str) -> list[Any]:
            return list((await session.execute(text(sql), params)).all())

        edges = await rows(_EDGES_WITHOUT_CURRENT_EVIDENCE)
        if edges:
            problems.append(
                f"{len(edges)} current relationship(s) without a current evidence fact:\n"
                + "\n".join(
                    f"  {e.source_key} -{e.rel_type}-> {e.target_key} (edge {e.id}): "
                    + (
                        "no evidence fact"
                        if e.fact_text is None
                        else f"evidence {e.fact_text!r} valid {_when(e.valid_from)}..{_when(e.valid_to)}"
                        f" invalidated_at={_when(e.invalidated_at)}"
                    )
                    for e in edges
                )
            )
        several = await rows(_SEVERAL_OPEN_VALUES)
        if several:
            problems.append(
                "single-valued attribute(s) with more than one open fact:\n"
                + "\n".join(f"  {r.entity_key}.{r.attribute}: {list(r.texts)}" for r in several)
            )
        duplicates = await rows(_DUPLICATE_CURRENT_FACTS)
        if duplicates:
            problems.append(
                "current fact(s) stored more than once:\n"
                + "\n".join(f"  {r.entity_key}: {r.text!r} x{r.copies} (ids {list(r.ids)})" for r in duplicates)
            )
        by_name: dict[str, list[str]] = defaultdict(list)
        for entity in await rows(_ENTITIES):
            by_name[normalise_alias(entity.display_name)].append(
                f"{entity.entity_key} ({entity.display_name!r}, {entity.entity_type})"
            )
        split = {name: keys for name, keys in by_name.items() if len(keys) > 1}
        if split:
            problems.append(
                "one name, several entities:\n"
                + "\n".join(f"  {name!r}: {keys}" for name, keys in sorted(split.items()))
            )
        unfinished = await rows(_EVENTS_WITHOUT_FINISHED_RUN)
        if unfinished:
            problems.append(
                f"{len(unfinished)} event(s) without a finished pipeline run:\n"
                + "\n".join(f"  {e.id} {e.content!r}: runs {list(e.statuses)}" for e in unfinished)
            )
        running = await rows(_RUNS_LEFT_RUNNING)
        if running:
            problems.append(
                f"{len(running)} pipeline run(s) left 'running':\n"
                + "\n".join(f"  run {r.id} of event {r.event_id}, started {_when(r.started_at)}" for r in running)
            )
    assert not problems, f"memory invariants broken for agent {agent_id}:\n" + "\n".join(problems)


def _when(moment: Any) -> str:
    return "-" if moment is None else moment.isoformat()
