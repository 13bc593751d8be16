"""Applying reconciliation decisions to the facts table: the only code path that creates a fact.

Each decision is planned as plain values by temporal.plan_version_write (which versions close, where the new one
ends, what it supersedes); this module only reads what the plan needs, under row locks, and carries it out:
lock and re-check the target (a target closed meanwhile makes the decision an ADD), lock the attribute's timeline
when the plan needs it, close what the plan closes (each close ending, in the same statement, the relationships
the closed fact is evidence for), insert the new version or confirm the target.

The statements are few: a NOOP's confirmation is the lock on its target (one UPDATE that finds it current); and the
new versions of consecutive decisions wait in a queue that goes out as one statement with their fact-entity links
(queries.insert_facts), sent before the next read of the facts table and at the end. A read of a later decision
(its target, its timeline) therefore sees every version an earlier one wrote, and the rows are written in the
order one statement per version wrote them. The caller runs each call as one unit of work.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from uuid import UUID, uuid4

from memory_sdk.pipeline.post_extraction import mentions
from memory_sdk.pipeline.state import FactDecision, PreparedFact, WriteState
from memory_sdk.pipeline.temporal import Interval, VersionWrite, needs_timeline, plan_version_write
from memory_sdk.results import Fact, ResolvedEntity
from memory_sdk.store import queries
from memory_sdk.store.database import Connection
from memory_sdk.text import fact_identity_key

__all__ = ["AppliedDecision", "apply_decisions", "version_links"]

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


async def apply_decisions(
    state: WriteState, conn: Connection, decisions: Sequence[FactDecision], entities: Mapping[str, ResolvedEntity]
) -> list[AppliedDecision]:
    """Apply the decisions in order; `entities` are the write's, which a new version's text may name (its links).
    Every new version is stored when this returns."""
    writer = _Writer(state, conn, entities)
    applied = [await writer.apply(decision) for decision in decisions]
    await writer.flush()
    return applied


def version_links(
    fact: PreparedFact, fact_id: UUID, entities: Mapping[str, ResolvedEntity]
) -> list[tuple[UUID, str, bool]]:
    """Fact-entity links of a new version: its subject (primary) and every entity its text names."""
    keys = {key for key, entity in entities.items() if mentions(fact.text, entity.display_name)}
    return [(fact_id, key, key == fact.entity_key) for key in sorted(keys | {fact.entity_key})]


@dataclass
class _Queued:
    """A new version waiting for the next insert statement, and the decision it reports to."""

    row: queries.FactRow
    applied: AppliedDecision
    links: list[tuple[UUID, str, bool]]


class _Writer:
    """One unit's decisions: reads and closes run as they come, inserts wait for the next read or the end."""

    def __init__(self, state: WriteState, conn: Connection, entities: Mapping[str, ResolvedEntity]) -> None:
        self._state, self._conn, self._entities = state, conn, entities
        self._agent_id = state.request.agent_id
        self._queue: list[_Queued] = []

    async def apply(self, decision: FactDecision) -> AppliedDecision:
        fact = decision.fact
        target, confirmed = await self._current_target(decision)
        timeline: list[Interval] = []
        if fact.attribute and needs_timeline(
            decision.action, has_target=target is not None, attribute=fact.attribute, single_valued=fact.single_valued
        ):
            await self.flush()
            versions = await queries.lock_timeline(
                self._conn,
                self._agent_id,
                fact.entity_key,
                fact.attribute,
                fact.valid_from,
                None if target is None else target.id,
            )
            timeline = [Interval(*version) for version in versions]
        plan = plan_version_write(
            decision.action,
            fact.valid_from,
            attribute=fact.attribute,
            single_valued=fact.single_valued,
            target=target,
            timeline=timeline,
            told_at=self._state.request.occurred_at,
        )
        stale = "target no longer current" if decision.target_id is not None and target is None else ""
        applied = AppliedDecision(plan.action, note="; ".join(note for note in (stale, plan.note) if note))
        if not plan.insert:
            assert target is not None
            if confirmed is None:
                confirmed = await queries.confirm_fact(self._conn, self._agent_id, target.id)
            applied.fact_id, applied.unchanged = target.id, confirmed
            return applied
        for close in plan.closes:
            closed, ended = await queries.close_fact(
                self._conn, self._agent_id, close.fact_id, close.at, invalidate=close.invalidate
            )
            applied.invalidated_relationships += ended
            if close.deleted:
                applied.deleted = closed
            else:
                applied.superseded.append(closed)
        row = self._row(fact, plan)
        applied.fact_id = row.id
        self._queue.append(_Queued(row, applied, version_links(fact, row.id, self._entities)))
        return applied

    async def flush(self) -> None:
        """Insert the queued versions (one statement) and report each to its decision."""
        queued, self._queue = self._queue, []
        if not queued:
            return
        links = [link for item in queued for link in item.links]
        stored = await queries.insert_facts(self._conn, self._agent_id, [item.row for item in queued], links)
        for item, version in zip(queued, stored, strict=True):
            if item.applied.action == "UPDATE":
                item.applied.updated = version
            else:
                item.applied.added = version

    async def _current_target(self, decision: FactDecision) -> tuple[Interval | None, Fact | None]:
        """The decision's target, locked, if it is still current (another fact of this write or a concurrent
        writer may have closed it since the decision was made), and the target as confirmed when the decision is a
        NOOP: its confirmation takes the lock, one statement. A target consolidation merged meanwhile stands for
        its survivor, so "Ana no longer sings" still ends the fact that says she does."""
        if decision.target_id is None:
            return None, None
        await self.flush()
        if decision.action == "NOOP":
            confirmed = await queries.confirm_fact(self._conn, self._agent_id, decision.target_id)
            if confirmed is not None and confirmed.id is not None:
                return Interval(confirmed.id, confirmed.valid_from, confirmed.valid_to), confirmed
        target = await queries.lock_fact(self._conn, self._agent_id, decision.target_id)
        for _ in range(_MAX_MERGE_HOPS):
            if target is None or target.merged_into_fact_id is None:
                break
            # Consolidation merged the target into a fact that says the same: the decision is about that one now.
            target = await queries.lock_fact(self._conn, self._agent_id, target.merged_into_fact_id)
        if target is None or target.id is None or target.valid_to is not None or target.invalidated_at is not None:
            return None, None
        return Interval(target.id, target.valid_from, target.valid_to), None

    def _row(self, fact: PreparedFact, plan: VersionWrite) -> queries.FactRow:
        state = self._state
        return queries.FactRow(
            id=uuid4(),
            entity_key=fact.entity_key,
            fact_text=fact.text,
            attribute=fact.attribute,
            single_valued=plan.single_valued,
            confidence=fact.confidence,
            importance=fact.importance,
            importance_category=fact.importance_category,
            speaker=state.request.speaker_name,
            source_event_id=state.event_id,
            source_context=fact.source_context,
            valid_from=fact.valid_from,
            valid_to=plan.valid_to,
            supersedes_fact_id=plan.supersedes,
            embedding=fact.embedding,
            schema_version=state.schema_version,
            prompt_version=fact.prompt_version,
            identity_key=fact_identity_key(fact.text),
        )
