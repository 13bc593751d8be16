"""Applying one reconciliation decision to the facts table: the only code path that creates a fact.

The decision is planned as plain values by temporal.plan_version_write (which versions close, where the new one
ends, what it supersedes); this module only reads what the plan needs, under row locks, and carries it out:
lock and re-check the target (a target closed meanwhile makes the decision an ADD), lock the attribute's timeline
when the plan needs it, close what the plan closes (each close cascading to the relationships the closed fact is
evidence for), insert the new version or confirm the target. The caller runs each call as one unit of work.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from sqlalchemy import func

from memory_sdk.pipeline.state import FactDecision, PreparedFact, WriteState
from memory_sdk.pipeline.temporal import Interval, needs_timeline, plan_version_write
from memory_sdk.results import Fact
from memory_sdk.store import queries
from memory_sdk.store.database import Connection
from memory_sdk.text import fact_identity_key

__all__ = ["AppliedDecision", "apply_decision"]

# A merged fact's survivor can itself be merged by a later consolidation; a decision follows at most this many
# merges to the fact that stands for its target now (a chain that long means something else went wrong).
_MAX_MERGE_HOPS = 8


@dataclass
class AppliedDecision:
    """What applying one decision changed."""

    action: str
    fact_id: UUID | None = None  # the fact this write now stands on (new version, or NOOP target)
    added: Fact | None = None
    updated: Fact | None = None
    superseded: list[Fact] = field(default_factory=list)
    unchanged: Fact | None = None
    deleted: Fact | None = None
    invalidated_relationships: list[UUID] = field(default_factory=list)
    note: str = ""


async def apply_decision(state: WriteState, conn: Connection, decision: FactDecision) -> AppliedDecision:
    agent_id = state.request.agent_id
    fact = decision.fact
    target = await _current_target(conn, agent_id, decision.target_id)
    timeline: list[Interval] = []
    if fact.attribute and needs_timeline(
        decision.action, has_target=target is not None, attribute=fact.attribute, single_valued=fact.single_valued
    ):
        versions = await queries.lock_timeline(conn, agent_id, fact.entity_key, fact.attribute)
        timeline = [Interval(*version) for version in versions]
    plan = plan_version_write(
        decision.action,
        fact.valid_from,
        attribute=fact.attribute,
        single_valued=fact.single_valued,
        target=target,
        timeline=timeline,
    )
    stale = "target no longer current" if decision.target_id is not None and target is None else ""
    applied = AppliedDecision(plan.action, note="; ".join(note for note in (stale, plan.note) if note))
    if not plan.insert:
        assert target is not None
        confirmed = await queries.confirm_fact(conn, agent_id, target.id)
        applied.fact_id, applied.unchanged = target.id, confirmed
        return applied
    for close in plan.closes:
        closed = await queries.close_fact(conn, agent_id, close.fact_id, close.at, invalidate=close.invalidate)
        applied.invalidated_relationships += await queries.invalidate_relationships_evidenced_by(
            conn, agent_id, close.fact_id, close.at
        )
        if close.deleted:
            applied.deleted = closed
        else:
            applied.superseded.append(closed)
    values = _values(state, fact)
    values.update(single_valued=plan.single_valued, supersedes_fact_id=plan.supersedes)
    if plan.valid_to is not None:
        values.update(valid_to=plan.valid_to, closed_at=func.clock_timestamp())
    stored = await queries.insert_fact(conn, values)
    applied.fact_id = stored.id
    if plan.action == "UPDATE":
        applied.updated = stored
    else:
        applied.added = stored
    return applied


async def _current_target(conn: Connection, agent_id: str, target_id: UUID | None) -> Interval | None:
    """The decision's target, locked, if it is still current: another fact of this write or a concurrent writer
    may have closed it since the decision was made. A target consolidation merged meanwhile stands for its
    survivor, so "Ana no longer sings" still ends the fact that says she does."""
    if target_id is None:
        return None
    target = await queries.lock_fact(conn, agent_id, target_id)
    for _ in range(_MAX_MERGE_HOPS):
        if target is None or target.merged_into_fact_id is None:
            break
        # Consolidation merged the target into a fact that says the same: the decision is about that one now.
        target = await queries.lock_fact(conn, agent_id, target.merged_into_fact_id)
    if target is None or target.id is None or target.valid_to is not None or target.invalidated_at is not None:
        return None
    return Interval(target.id, target.valid_from, target.valid_to)


def _values(state: WriteState, fact: PreparedFact) -> dict[str, Any]:
    return {
        "agent_id": state.request.agent_id,
        "entity_key": fact.entity_key,
        "fact_text": fact.text,
        "attribute": fact.attribute,
        "single_valued": fact.single_valued,
        "confidence": fact.confidence,
        "importance": fact.importance,
        "importance_category": fact.importance_category,
        "speaker": state.request.speaker_name,
        "source_event_id": state.event_id,
        "source_context": fact.source_context,
        "valid_from": fact.valid_from,
        "embedding": fact.embedding,
        "schema_version": state.schema_version,
        "prompt_version": fact.prompt_version,
        "identity_key": fact_identity_key(fact.text),
    }
