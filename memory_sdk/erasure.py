"""Erasing one event and what was derived only from it (forget_event): an erasure request about one message.

The event's own record goes (the event row, its vector, its pipeline runs with their stored results and traces), and
so does every fact version whose source is the event, unless another event backs it: a later write that said the same
again (a NOOP: the fact is in that run's `facts_unchanged`). Such a fact stays, with that event as its source and its
speaker. What the event changed is undone (docs/decisions.md, "Forgetting one event"): a version it closed (superseded
or retracted) is current again unless something that stays closed it, with the edges that ended with it; a version
that stays and followed an erased one now follows what the erased one followed. Edges whose evidence is gone go, the
entities and aliases the event alone created go, the profiles of the entities it touched are cleared (consolidation
rebuilds them from the facts that stay), and other runs' stored results and traces lose every string that quotes the
message or an erased fact.

The rest of the write path's bookkeeping follows: the subjects' change sequence is bumped as a move-out (caches of
their binary codes load again, store/subject_codes.py). One tenant transaction under the write-path locks of every
entity touched, so it never interleaves with a write about them. No LLM call. An unknown event id and another agent's
are refused with the same message.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from memory_sdk.errors import InvalidInputError
from memory_sdk.pipeline.upsert import entity_lock_names
from memory_sdk.store import queries
from memory_sdk.store.database import Connection, Database
from memory_sdk.text import normalise_alias

__all__ = ["ERASED", "forget_event", "redact"]

logger = logging.getLogger("memory_sdk")

# What a string of another run's stored result or trace becomes when it quotes the erased message or an erased fact.
ERASED = "[erased]"


def _unknown(event_id: UUID) -> InvalidInputError:
    # One message for an id that does not exist and one that is another agent's: no oracle.
    return InvalidInputError(f"no event {event_id} in this agent's memory")


# --- pure decisions ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Version:
    """What the decisions need of one fact version."""

    id: UUID
    entity_key: str
    text: str
    attribute: str | None
    single_valued: bool
    supersedes: UUID | None
    merged_into: UUID | None
    current: bool
    valid_from: datetime


@dataclass
class ErasurePlan:
    """What forget_event changes, as plain values (plan_erasure decides it, the statements carry it out)."""

    erased: set[UUID] = field(default_factory=set)
    # kept fact -> the event that backs it now
    rehomed: dict[UUID, UUID] = field(default_factory=dict)
    # surviving fact -> what it supersedes now (None: the first of its chain)
    relinked: dict[UUID, UUID | None] = field(default_factory=dict)
    # closed versions to make current again
    reopened: set[UUID] = field(default_factory=set)
    # closed versions that now end where the surviving version that follows them (relinked) starts
    retimed: dict[UUID, datetime] = field(default_factory=dict)


def plan_erasure(
    from_event: Iterable[Version],
    backers: Mapping[UUID, UUID],
    closed_by_event: Iterable[UUID],
    others: Mapping[UUID, Version],
    retraction_records: Mapping[UUID, UUID],
) -> ErasurePlan:
    """Decide the erasure from plain values.

    `from_event`: the versions whose source is the event; `backers`: fact -> another event that confirmed it;
    `closed_by_event`: what the event's writes superseded or retracted; `others`: every other version the plan may
    touch (predecessors, successors, the facts merged into an erased one, the current facts of the same subjects);
    `retraction_records`: user_retraction record -> the fact it records (it quotes that fact's text).
    """
    plan = ErasurePlan()
    own = list(from_event)
    for version in own:
        if version.id in backers:
            plan.rehomed[version.id] = backers[version.id]
        else:
            plan.erased.add(version.id)
    plan.erased |= {record for record, fact in retraction_records.items() if fact in plan.erased}
    chain = {version.id: version for version in own} | dict(others)

    def first_kept_ancestor(fact_id: UUID | None) -> UUID | None:
        seen: set[UUID] = set()
        while fact_id is not None and fact_id in plan.erased and fact_id not in seen:
            seen.add(fact_id)
            fact_id = chain[fact_id].supersedes if fact_id in chain else None
        return fact_id

    for version in chain.values():
        if version.id not in plan.erased and version.supersedes in plan.erased:
            plan.relinked[version.id] = first_kept_ancestor(version.supersedes)
    # What the event closed: the closes its writes report, and the versions its erased facts superseded or absorbed.
    candidates = set(closed_by_event)
    candidates |= {ancestor for fact in plan.erased if fact in chain and (ancestor := chain[fact].supersedes)}
    candidates |= {v.id for v in chain.values() if v.merged_into in plan.erased}
    surviving = [v for v in chain.values() if v.id not in plan.erased]
    for fact_id in sorted(candidates - plan.erased, key=str):
        found = chain.get(fact_id)
        if found is None or found.current:
            continue
        version = found
        # Closed by something that stays: a surviving successor (a kept fact of the event included), untouched.
        if any(v.supersedes == fact_id and v.id not in plan.relinked for v in surviving):
            continue
        # Followed now by a later version that followed an erased one: it lasts until that one starts.
        followers = [chain[v].valid_from for v, ancestor in plan.relinked.items() if ancestor == fact_id]
        if followers:
            plan.retimed[fact_id] = max(version.valid_from, min(followers))
            continue
        if _conflicts(version, [v for v in surviving if v.current or v.id in plan.reopened]):
            continue
        plan.reopened.add(fact_id)
    return plan


def _conflicts(version: Version, current: list[Version]) -> bool:
    """Would the version, reopened, be a second open value of its attribute or a copy of a current fact?"""
    for other in current:
        if other.id == version.id or other.entity_key != version.entity_key:
            continue
        if other.text.lower() == version.text.lower():
            return True
        if version.single_valued and version.attribute and other.single_valued and other.attribute == version.attribute:
            return True
    return False


def redact(value: Any, needles: Iterable[str], drop_ids: set[str], drop_keys: set[str]) -> Any:
    """A stored result or trace without the erased: a string quoting a needle becomes ERASED, a listed object naming
    an erased fact or relationship (`id`) or an erased entity (`key`) is dropped."""
    texts = [needle for needle in needles if needle]

    def walk(item: Any) -> Any:
        if isinstance(item, str):
            return ERASED if any(needle in item for needle in texts) else item
        if isinstance(item, list):
            return [
                walk(element)
                for element in item
                if not (
                    isinstance(element, dict)
                    and (str(element.get("id")) in drop_ids or str(element.get("key")) in drop_keys)
                )
            ]
        if isinstance(item, dict):
            return {key: walk(element) for key, element in item.items()}
        return item

    return walk(value)


# --- the statements ------------------------------------------------------------------------------------------

_VERSION_SQL = """
    SELECT id, entity_key, fact_text, attribute, single_valued, supersedes_fact_id, merged_into_fact_id, valid_from,
           (valid_to IS NULL AND invalidated_at IS NULL AND merged_into_fact_id IS NULL) AS current,
           source_event_id, source_context
    FROM memory_facts
"""


def _version(row: Any) -> Version:
    return Version(
        row["id"],
        row["entity_key"],
        row["fact_text"],
        row["attribute"],
        bool(row["single_valued"]),
        row["supersedes_fact_id"],
        row["merged_into_fact_id"],
        bool(row["current"]),
        row["valid_from"],
    )


def _listed_ids(results: Iterable[Any], *lists: str) -> set[UUID]:
    found: set[UUID] = set()
    for result in results:
        for name in lists:
            for item in (result or {}).get(name) or []:
                if isinstance(item, dict) and item.get("id"):
                    found.add(UUID(str(item["id"])))
    return found


async def forget_event(db: Database, agent_id: str, event_id: UUID) -> dict[str, int]:
    """Erase the event and what was derived only from it; return what changed, counted per kind."""
    async with db.tenant(agent_id) as conn:
        event = await conn.fetchrow(
            "SELECT id, content FROM memory_events WHERE agent_id = $1 AND id = $2", agent_id, event_id
        )
        if event is None:
            raise _unknown(event_id)
        touched = await conn.fetch(
            """
            SELECT DISTINCT e.entity_key, e.display_name FROM memory_entities e
            WHERE e.agent_id = $1 AND e.entity_key IN (
                SELECT fe.entity_key FROM memory_fact_entities fe JOIN memory_facts f
                    ON f.agent_id = fe.agent_id AND f.id = fe.fact_id
                WHERE f.agent_id = $1 AND f.source_event_id = $2
                UNION SELECT source_key FROM memory_relationships WHERE agent_id = $1 AND last_event_id = $2
                UNION SELECT target_key FROM memory_relationships WHERE agent_id = $1 AND last_event_id = $2)
            """,
            agent_id,
            event_id,
        )
        names = [name for row in touched for name in entity_lock_names(row["entity_key"], row["display_name"])]
        await queries.lock_names(conn, agent_id, names)
        await conn.fetchrow(
            "SELECT id FROM memory_events WHERE agent_id = $1 AND id = $2 FOR UPDATE", agent_id, event_id
        )
        runs = await conn.fetch(
            "SELECT status, result, trace, "
            "coalesce(heartbeat_at, started_at) > clock_timestamp() - interval '5 minutes' AS live "
            "FROM memory_pipeline_runs WHERE agent_id = $1 AND event_id = $2",
            agent_id,
            event_id,
        )
        if any(run["status"] == "running" and run["live"] for run in runs):
            raise InvalidInputError(f"event {event_id} is still being written: forget it when its write is done")
        counts = await _erase(conn, agent_id, event_id, event["content"], runs)
    logger.info("forget_event agent=%s event=%s facts_erased=%d", agent_id, event_id, counts["facts_erased"])
    return counts


async def _erase(conn: Connection, agent_id: str, event_id: UUID, content: str, runs: list[Any]) -> dict[str, int]:
    succeeded = [run["result"] for run in runs if run["status"] == "succeeded"]
    own_rows = await conn.fetch(_VERSION_SQL + " WHERE agent_id = $1 AND source_event_id = $2", agent_id, event_id)
    own = [_version(row) for row in own_rows]
    own_ids = [version.id for version in own]
    # Other events that said one of the event's facts again: the latest one becomes its source.
    backing = await conn.fetch(
        """
        SELECT DISTINCT ON (fact_id) (u.item->>'id')::uuid AS fact_id, r.event_id
        FROM memory_pipeline_runs r JOIN memory_events e ON e.agent_id = r.agent_id AND e.id = r.event_id,
             jsonb_array_elements(coalesce(r.result->'facts_unchanged', '[]'::jsonb)) AS u(item)
        WHERE r.agent_id = $1 AND r.event_id <> $2 AND r.status = 'succeeded'
          AND (u.item->>'id')::uuid = ANY($3::uuid[])
        ORDER BY fact_id, e.occurred_at DESC, e.recorded_at DESC
        """,
        agent_id,
        event_id,
        own_ids,
    )
    backers = {row["fact_id"]: row["event_id"] for row in backing}
    closed_by_event = _listed_ids(succeeded, "facts_superseded", "facts_deleted")
    subjects = sorted({version.entity_key for version in own})
    other_rows = await conn.fetch(
        _VERSION_SQL  # noqa: S608 - fixed text
        + """
        WHERE agent_id = $1 AND source_event_id IS DISTINCT FROM $2
          AND (id = ANY($3::uuid[]) OR supersedes_fact_id = ANY($4::uuid[]) OR merged_into_fact_id = ANY($4::uuid[])
               OR id IN (SELECT supersedes_fact_id FROM memory_facts WHERE agent_id = $1 AND id = ANY($4::uuid[]))
               OR (entity_key = ANY($5::text[]) AND valid_to IS NULL AND invalidated_at IS NULL))
        """,
        agent_id,
        event_id,
        list(closed_by_event),
        own_ids,
        subjects,
    )
    others = {row["id"]: _version(row) for row in other_rows}
    records = {
        row["id"]: row["supersedes_fact_id"]
        for row in other_rows
        if row["source_context"] == "user_retraction" and row["supersedes_fact_id"] in set(own_ids)
    }
    plan = plan_erasure(own, backers, closed_by_event, others, records)
    erased_texts = [version.text for version in own if version.id in plan.erased]
    erased_texts += [others[record].text for record in plan.erased if record in others]
    erased = list(plan.erased)

    for fact_id, backer in plan.rehomed.items():
        await conn.execute(
            """
            UPDATE memory_facts f SET source_event_id = $3, speaker = e.speaker
            FROM memory_events e WHERE f.agent_id = $1 AND f.id = $2 AND e.agent_id = $1 AND e.id = $3
            """,
            agent_id,
            fact_id,
            backer,
        )
    for fact_id, ancestor in plan.relinked.items():
        await conn.execute(
            "UPDATE memory_facts SET supersedes_fact_id = $3 WHERE agent_id = $1 AND id = $2",
            agent_id,
            fact_id,
            ancestor,
        )
    # A fact consolidation merged into an erased one stands again (reopened, when the plan says so).
    await conn.execute(
        "UPDATE memory_facts SET merged_into_fact_id = NULL WHERE agent_id = $1 AND merged_into_fact_id = ANY($2)",
        agent_id,
        erased,
    )
    # Edges: those standing on an erased fact go; those that ended with a reopened fact's close start again.
    edges_erased = await conn.fetch(
        "DELETE FROM memory_relationships WHERE agent_id = $1 AND evidence_fact_id = ANY($2) "
        "RETURNING source_key, target_key",
        agent_id,
        erased,
    )
    # Erased first: a reopened value may take the place of an erased one (one open value per attribute).
    facts_erased = await conn.fetch(
        "DELETE FROM memory_facts WHERE agent_id = $1 AND id = ANY($2) RETURNING entity_key", agent_id, erased
    )
    reopened = await conn.fetch(
        """
        WITH old AS (
            SELECT id, valid_to FROM memory_facts WHERE agent_id = $1 AND id = ANY($2::uuid[]) FOR UPDATE
        ), opened AS (
            UPDATE memory_facts f SET valid_to = NULL, closed_at = NULL, invalidated_at = NULL
            FROM old WHERE f.agent_id = $1 AND f.id = old.id
            RETURNING f.id, old.valid_to AS was_closed_at
        )
        SELECT id, was_closed_at FROM opened
        """,
        agent_id,
        list(plan.reopened),
    )
    edges_reopened = 0
    for row in reopened:
        status = await conn.execute(
            """
            UPDATE memory_relationships r SET valid_to = NULL, invalidated_at = NULL, updated_at = clock_timestamp()
            WHERE r.agent_id = $1 AND r.evidence_fact_id = $2 AND r.invalidated_at IS NOT NULL
              AND r.valid_to = greatest($3::timestamptz, coalesce(r.valid_from, $3::timestamptz))
              AND NOT EXISTS (
                  SELECT 1 FROM memory_relationships c
                  WHERE c.agent_id = $1 AND c.source_key = r.source_key AND c.target_key = r.target_key
                    AND c.rel_type = r.rel_type AND c.invalidated_at IS NULL)
            """,
            agent_id,
            row["id"],
            row["was_closed_at"],
        )
        edges_reopened += int(status.split()[-1])
    for fact_id, until in plan.retimed.items():
        await conn.execute(
            "UPDATE memory_facts SET valid_to = $3, invalidated_at = NULL WHERE agent_id = $1 AND id = $2",
            agent_id,
            fact_id,
            until,
        )
    # Edges the event last reinforced and that stay: their last event is now another that listed them, or none.
    await conn.execute(
        """
        UPDATE memory_relationships m SET last_event_id = (
            SELECT r.event_id FROM memory_pipeline_runs r JOIN memory_events e ON e.agent_id = r.agent_id
                AND e.id = r.event_id,
                jsonb_array_elements(coalesce(r.result->'relationships', '[]'::jsonb)) AS x(item)
            WHERE r.agent_id = $1 AND r.event_id <> $2 AND r.status = 'succeeded' AND x.item->>'id' = m.id::text
            ORDER BY e.occurred_at DESC, e.recorded_at DESC LIMIT 1)
        WHERE m.agent_id = $1 AND m.last_event_id = $2
        """,
        agent_id,
        event_id,
    )
    await conn.execute("SELECT set_config('memory_sdk.allow_event_erase', 'on', true)")
    runs_erased = await conn.execute(
        "DELETE FROM memory_pipeline_runs WHERE agent_id = $1 AND event_id = $2", agent_id, event_id
    )
    await conn.execute("DELETE FROM memory_events WHERE agent_id = $1 AND id = $2", agent_id, event_id)

    entity_counts = await _erase_entities(conn, agent_id, succeeded, [run["trace"] for run in runs], subjects)
    # Deleted rows fire no trigger: the subjects move on as if their facts had moved out (caches load them again).
    await conn.execute(
        """
        UPDATE memory_entities SET change_seq = change_seq + 1, moved_out_seq = change_seq + 1,
            facts_version = facts_version + 1, changed_by = pg_current_xact_id()
        WHERE agent_id = $1 AND entity_key = ANY($2::text[])
        """,
        agent_id,
        sorted({row["entity_key"] for row in facts_erased}),
    )
    erased_entities = entity_counts.pop("_keys")
    redacted = await _redact_runs(
        conn,
        agent_id,
        [content, *erased_texts],
        {str(fact_id) for fact_id in plan.erased},
        set(map(str, erased_entities)),
    )
    return {
        "events": 1,
        "pipeline_runs": int(runs_erased.split()[-1]),
        "facts_erased": len(facts_erased),
        "facts_kept": len(plan.rehomed),
        "facts_reopened": len(reopened),
        "relationships_erased": len(edges_erased),
        "relationships_reopened": edges_reopened,
        **entity_counts,
        "runs_redacted": redacted,
    }


async def _erase_entities(
    conn: Connection, agent_id: str, results: list[Any], traces: list[Any], subjects: list[str]
) -> dict[str, Any]:
    """The entities the event created and nothing else names go (their aliases with them); the aliases it registered
    for entities that stay go; the profiles of the entities it touched are cleared (seeded by it, or built from facts
    some of which are gone)."""
    created: set[str] = set()
    resolved: set[str] = set(subjects)
    for result in results:
        for entity in (result or {}).get("entities_resolved") or []:
            resolved.add(entity["key"])
            if entity.get("created"):
                created.add(entity["key"])
    registered: list[tuple[str, str]] = []
    for trace in traces:
        for step in (trace or {}).get("steps") or []:
            if step.get("name") == "upsert":
                for key, norms in (step.get("data", {}).get("aliases_registered") or {}).items():
                    registered += [(key, norm) for norm in norms]
    gone = await conn.fetch(
        """
        DELETE FROM memory_entities n WHERE n.agent_id = $1 AND n.entity_key = ANY($2::text[])
          AND NOT EXISTS (SELECT 1 FROM memory_facts f WHERE f.agent_id = $1 AND f.entity_key = n.entity_key)
          AND NOT EXISTS (SELECT 1 FROM memory_fact_entities l WHERE l.agent_id = $1 AND l.entity_key = n.entity_key)
          AND NOT EXISTS (SELECT 1 FROM memory_relationships r
                          WHERE r.agent_id = $1 AND n.entity_key IN (r.source_key, r.target_key))
          AND NOT EXISTS (SELECT 1 FROM memory_pipeline_runs p,
                              jsonb_array_elements(coalesce(p.result->'entities_resolved', '[]'::jsonb)) AS x(item)
                          WHERE p.agent_id = $1 AND x.item->>'key' = n.entity_key)
        RETURNING entity_key
        """,
        agent_id,
        sorted(created),
    )
    keys = {row["entity_key"] for row in gone}
    kept = [(key, norm) for key, norm in registered if key not in keys]
    names = {
        row["entity_key"]: normalise_alias(row["display_name"])
        for row in await conn.fetch(
            "SELECT entity_key, display_name FROM memory_entities WHERE agent_id = $1 AND entity_key = ANY($2)",
            agent_id,
            sorted({key for key, _ in kept}),
        )
    }
    kept = [(key, norm) for key, norm in kept if names.get(key) not in (None, norm)]  # an entity keeps its own name
    aliases = await conn.execute(
        """
        DELETE FROM memory_entity_aliases a USING unnest($2::text[], $3::text[]) AS x(key, norm)
        WHERE a.agent_id = $1 AND a.entity_key = x.key AND a.alias_norm = x.norm
        """,
        agent_id,
        [key for key, _ in kept],
        [norm for _, norm in kept],
    )
    profiles = await conn.execute(
        """
        UPDATE memory_entities SET profile_text = NULL, profile_facts_version = NULL, profile_built_at = NULL
        WHERE agent_id = $1 AND entity_key = ANY($2::text[]) AND profile_text IS NOT NULL
        """,
        agent_id,
        sorted(resolved - keys),
    )
    return {
        "entities_erased": len(keys),
        "aliases_erased": int(aliases.split()[-1]),
        "profiles_cleared": int(profiles.split()[-1]),
        "_keys": keys,
    }


async def _redact_runs(
    conn: Connection, agent_id: str, needles: list[str], drop_ids: set[str], drop_keys: set[str]
) -> int:
    """Rewrite the other runs whose stored result, trace or error quotes the message or an erased fact."""
    needles = sorted({needle for needle in needles if needle.strip()})
    # jsonb's text form escapes like json.dumps without ensure_ascii: look for both forms.
    probes = sorted(set(needles) | {json.dumps(n, ensure_ascii=False)[1:-1] for n in needles} | drop_ids | drop_keys)
    rows = await conn.fetch(
        """
        SELECT id, result, trace, error FROM memory_pipeline_runs r
        WHERE r.agent_id = $1 AND EXISTS (
            SELECT 1 FROM unnest($2::text[]) AS p(probe)
            WHERE strpos(concat(r.result::text, r.trace::text, r.error), p.probe) > 0)
        """,
        agent_id,
        probes,
    )
    for row in rows:
        result, trace = (redact(row[name], needles, drop_ids, drop_keys) for name in ("result", "trace"))
        error = None if row["error"] is None else redact(row["error"], needles, set(), set())
        await conn.execute(
            "UPDATE memory_pipeline_runs SET result = $3::jsonb, trace = $4::jsonb, error = $5 "
            "WHERE agent_id = $1 AND id = $2",
            agent_id,
            row["id"],
            None if result is None else json.dumps(result),
            None if trace is None else json.dumps(trace),
            error,
        )
    return len(rows)
