"""Applying one reconciliation decision to the facts table: the only code path that creates a fact.

ADD inserts. UPDATE fits the new version into the timeline (temporal.place_version): it closes the version that
contains the new valid time at exactly that time, or, for a delayed message, stores the new version as history
ending where the next one begins. NOOP moves last_confirmed_at. DELETE closes the target, marks it retracted and
stores the retraction statement as its successor.
Every close cascades to the relationships the closed fact is evidence for. The caller runs each call inside its
own savepoint.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from sqlalchemy import func
from sqlalchemy.ext.asyncio import AsyncSession

from memory_sdk.pipeline.state import FactDecision, PreparedFact, WriteState
from memory_sdk.pipeline.temporal import Interval, place_version
from memory_sdk.results import Fact
from memory_sdk.store import queries
from memory_sdk.store.rows import fact_from_row

__all__ = ["AppliedDecision", "apply_decision"]


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


async def apply_decision(state: WriteState, session: AsyncSession, decision: FactDecision) -> AppliedDecision:
    agent_id = state.request.agent_id
    fact = decision.fact
    target = None
    if decision.target_id is not None:
        target = await queries.lock_fact(session, agent_id, decision.target_id)
        if target is None or target.valid_to is not None or target.invalidated_at is not None:
            # Another fact of this write (or a concurrent writer) already closed it: the new fact stands alone.
            decision = FactDecision(fact, "ADD", None, decision.similarity, "target no longer current: ADD")
            target = None
    if decision.action == "NOOP" and target is not None:
        row = await queries.confirm_fact(session, agent_id, target.id)
        return AppliedDecision("NOOP", fact_id=target.id, unchanged=fact_from_row(row), note="confirmed")
    if decision.action == "DELETE" and target is not None:
        return await _delete(state, session, fact, target)
    if decision.action == "UPDATE" and target is not None:
        return await _update(state, session, fact, target)
    if fact.single_valued and fact.attribute:
        # An ADD of a single-valued attribute still has to fit the attribute's timeline (e.g. a delayed message
        # for an attribute whose later versions are already closed).
        return await _update(state, session, fact, None)
    row = await queries.insert_fact(session, _values(state, fact))
    return AppliedDecision("ADD", fact_id=row.id, added=fact_from_row(row))


async def _timeline(state: WriteState, session: AsyncSession, fact: PreparedFact, target: Any | None) -> list[Interval]:
    if fact.attribute:
        rows = await queries.lock_timeline(session, state.request.agent_id, fact.entity_key, fact.attribute)
        intervals = [Interval(row.id, row.valid_from, row.valid_to) for row in rows]
        if target is not None and all(i.id != target.id for i in intervals):
            intervals.append(Interval(target.id, target.valid_from, target.valid_to))
        return intervals
    return [] if target is None else [Interval(target.id, target.valid_from, target.valid_to)]


async def _close(
    state: WriteState, session: AsyncSession, fact_id: UUID, at: datetime, *, invalidate: bool
) -> tuple[Fact, list[UUID]]:
    agent_id = state.request.agent_id
    closed = await queries.close_fact(session, agent_id, fact_id, at, invalidate=invalidate)
    cascaded = await queries.invalidate_relationships_evidenced_by(session, agent_id, fact_id, at)
    return fact_from_row(closed), cascaded


async def _update(state: WriteState, session: AsyncSession, fact: PreparedFact, target: Any | None) -> AppliedDecision:
    placement = place_version(fact.valid_from, await _timeline(state, session, fact, target))
    applied = AppliedDecision("UPDATE")
    if placement.close is not None:
        closed, cascaded = await _close(state, session, placement.close, fact.valid_from, invalidate=False)
        applied.superseded.append(closed)
        applied.invalidated_relationships += cascaded
    if placement.corrected is not None:
        # Same valid time: a correction. The earlier version becomes an empty interval and is marked retracted.
        corrected, cascaded = await _close(state, session, placement.corrected, fact.valid_from, invalidate=True)
        applied.superseded.append(corrected)
        applied.invalidated_relationships += cascaded
    values = _values(state, fact)
    values["supersedes_fact_id"] = placement.supersedes
    if placement.new_valid_to is not None:
        values["valid_to"] = placement.new_valid_to
        values["closed_at"] = func.clock_timestamp()
        applied.note = f"delayed message: stored as history ending {placement.new_valid_to:%Y-%m-%d %H:%M}"
    row = await queries.insert_fact(session, values)
    applied.fact_id = row.id
    if placement.supersedes is None:
        applied.action = "ADD"
        applied.added = fact_from_row(row)
    else:
        applied.updated = fact_from_row(row)
    return applied


async def _delete(state: WriteState, session: AsyncSession, fact: PreparedFact, target: Any) -> AppliedDecision:
    """Close and retract the target, and keep the retraction itself as the current statement.

    The retraction ("Rafael não trabalha mais na Acme") is information too: storing it means a DELETE verdict on
    a message that also carried a new value ("me mudei pra São Paulo") can never lose that value.
    """
    if fact.valid_from <= target.valid_from:
        # Retraction dated before the fact began: nothing to close; the statement is kept as it is.
        row = await queries.insert_fact(session, _values(state, fact))
        return AppliedDecision("ADD", fact_id=row.id, added=fact_from_row(row), note="retraction predates target")
    closed, cascaded = await _close(state, session, target.id, fact.valid_from, invalidate=True)
    values = _values(state, fact)
    values["supersedes_fact_id"] = target.id
    row = await queries.insert_fact(session, values)
    return AppliedDecision(
        "DELETE", fact_id=row.id, added=fact_from_row(row), deleted=closed, invalidated_relationships=cascaded
    )


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
    }
