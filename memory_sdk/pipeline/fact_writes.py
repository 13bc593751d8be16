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
from memory_sdk.pipeline.temporal import Interval, Placement, place_version
from memory_sdk.results import Fact
from memory_sdk.store import queries
from memory_sdk.store.rows import fact_from_row
from memory_sdk.text import fact_identity_key

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


async def _attribute_timeline(state: WriteState, session: AsyncSession, fact: PreparedFact) -> list[Interval]:
    """Every version of the fact's attribute for its subject (locked), or none when the fact has no attribute."""
    if not fact.attribute:
        return []
    rows = await queries.lock_timeline(session, state.request.agent_id, fact.entity_key, fact.attribute)
    return [Interval(row.id, row.valid_from, row.valid_to) for row in rows]


async def _close(
    state: WriteState, session: AsyncSession, fact_id: UUID, at: datetime, *, invalidate: bool
) -> tuple[Fact, list[UUID]]:
    agent_id = state.request.agent_id
    closed = await queries.close_fact(session, agent_id, fact_id, at, invalidate=invalidate)
    cascaded = await queries.invalidate_relationships_evidenced_by(session, agent_id, fact_id, at)
    return fact_from_row(closed), cascaded


async def _update(state: WriteState, session: AsyncSession, fact: PreparedFact, target: Any | None) -> AppliedDecision:
    """Fit the new version into its attribute's timeline, and end the target where the new information begins.

    The target may hold another attribute (or none) than the new fact: it is placed on its own then, so that both
    the attribute's open value and the target are closed, and never two values stay open.
    """
    applied = AppliedDecision("UPDATE")
    timeline = await _attribute_timeline(state, session, fact)
    ends: list[datetime] = []
    supersedes: list[UUID | None] = []
    if target is not None and all(version.id != target.id for version in timeline):
        alone = place_version(fact.valid_from, [Interval(target.id, target.valid_from, target.valid_to)])
        if fact.attribute:
            await _apply_placement(state, session, alone, fact.valid_from, applied)
            supersedes.append(alone.supersedes)
            if alone.new_valid_to is not None:
                ends.append(alone.new_valid_to)
        else:
            timeline = [Interval(target.id, target.valid_from, target.valid_to)]
    placement = place_version(fact.valid_from, timeline)
    await _apply_placement(state, session, placement, fact.valid_from, applied)
    supersedes.insert(0, placement.supersedes)
    if placement.new_valid_to is not None:
        ends.append(placement.new_valid_to)
    values = _values(state, fact)
    values["supersedes_fact_id"] = next((fact_id for fact_id in supersedes if fact_id is not None), None)
    if ends:
        values["valid_to"] = min(ends)
        values["closed_at"] = func.clock_timestamp()
        applied.note = f"delayed message: stored as history ending {min(ends):%Y-%m-%d %H:%M}"
    row = await queries.insert_fact(session, values)
    applied.fact_id = row.id
    if values["supersedes_fact_id"] is None:
        applied.action = "ADD"
        applied.added = fact_from_row(row)
    else:
        applied.updated = fact_from_row(row)
    return applied


async def _apply_placement(
    state: WriteState, session: AsyncSession, placement: Placement, at: datetime, applied: AppliedDecision
) -> None:
    """Close the version the new one interrupts; turn a same-instant version into a retracted empty interval."""
    for version_id, invalidate in ((placement.close, False), (placement.corrected, True)):
        if version_id is not None:
            closed, cascaded = await _close(state, session, version_id, at, invalidate=invalidate)
            applied.superseded.append(closed)
            applied.invalidated_relationships += cascaded


async def _delete(state: WriteState, session: AsyncSession, fact: PreparedFact, target: Any) -> AppliedDecision:
    """Close and retract the target, and keep the retraction itself as the current statement.

    The retraction ("Rafael não trabalha mais na Acme") is information too: storing it means a DELETE verdict on
    a message that also carried a new value ("me mudei pra São Paulo") can never lose that value.
    """
    values = _values(state, fact)
    # A retraction is not a value of the attribute: it must not compete with the attribute's open value.
    values["single_valued"] = False
    if fact.valid_from <= target.valid_from:
        # Retraction dated before the fact began: nothing to close; the statement is kept as it is.
        row = await queries.insert_fact(session, values)
        return AppliedDecision("ADD", fact_id=row.id, added=fact_from_row(row), note="retraction predates target")
    closed, cascaded = await _close(state, session, target.id, fact.valid_from, invalidate=True)
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
        "identity_key": fact_identity_key(fact.text),
    }
