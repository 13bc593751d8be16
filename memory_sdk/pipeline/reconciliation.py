"""Stage: decide, for each fact, ADD / UPDATE / NOOP / DELETE against the subject's current facts.

This first version decides without an LLM: a fact whose single-valued attribute already has an open fact for
the same subject is an UPDATE of it (the database allows one open fact per single-valued attribute); every other
fact is an ADD. The LLM slow path for similar facts is issue 5.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time
from uuid import UUID

from sqlalchemy import select

from memory_sdk.llm.schemas import IMPORTANCE_BY_CATEGORY
from memory_sdk.pipeline.state import CandidateFact, Deps, FactDecision, PreparedFact, WriteState
from memory_sdk.store import tables as t
from memory_sdk.store.queries import current_fact_clause

__all__ = ["decide_by_attribute", "fact_valid_from", "prepare_fact", "run"]


async def run(state: WriteState, deps: Deps) -> None:
    prepared: list[PreparedFact] = []
    for candidate in state.candidate_facts:
        fact = prepare_fact(state, candidate)
        if fact is None:
            state.fail(f"reconciliation: subject {candidate.fact.subject!r} did not resolve; fact skipped")
            continue
        prepared.append(fact)
    state.prepared_facts = prepared
    open_by_attribute = await _open_single_valued(state, deps, prepared)
    state.decisions = [
        decide_by_attribute(fact, open_by_attribute.get((fact.entity_key, fact.attribute or ""))) for fact in prepared
    ]
    state.step.data["decisions"] = [
        {
            "text": d.fact.text,
            "action": d.action,
            "target": str(d.target_id) if d.target_id else None,
            "why": d.reason,
        }
        for d in state.decisions
    ]


def fact_valid_from(value: date | datetime | None, occurred_at: datetime) -> datetime:
    """The fact's own date when it has one (dates at 00:00 UTC, naive times as UTC), else the event's time."""
    if value is None:
        return occurred_at
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return datetime.combine(value, time.min, tzinfo=UTC)


def prepare_fact(state: WriteState, candidate: CandidateFact) -> PreparedFact | None:
    resolved = state.resolve_name(candidate.fact.subject)
    if resolved is None:
        return None
    fact = candidate.fact
    attribute = "_".join(fact.attribute.lower().split()) if fact.attribute else None
    return PreparedFact(
        subject_name=resolved.display_name,
        entity_key=resolved.key,
        text=fact.text.strip(),
        attribute=attribute,
        single_valued=attribute in state.config.single_valued_attributes,
        confidence=fact.confidence,
        importance=IMPORTANCE_BY_CATEGORY[fact.importance_category],
        importance_category=fact.importance_category,
        valid_from=fact_valid_from(fact.valid_from, state.request.occurred_at),
        action_hint=fact.action,
        source_context=candidate.source_context,
        embedding=candidate.embedding,
        prompt_version=state.extraction.prompt_version,
    )


def decide_by_attribute(fact: PreparedFact, open_fact_id: UUID | None) -> FactDecision:
    """UPDATE the open fact of the same single-valued attribute, else ADD."""
    if fact.single_valued and open_fact_id is not None:
        return FactDecision(fact=fact, action="UPDATE", target_id=open_fact_id, reason="same single-valued attribute")
    return FactDecision(fact=fact, action="ADD", reason="new information")


async def _open_single_valued(state: WriteState, deps: Deps, facts: list[PreparedFact]) -> dict[tuple[str, str], UUID]:
    wanted = {(fact.entity_key, fact.attribute) for fact in facts if fact.single_valued and fact.attribute}
    if not wanted:
        return {}
    query = select(t.facts.c.id, t.facts.c.entity_key, t.facts.c.attribute).where(
        current_fact_clause(state.request.agent_id),
        t.facts.c.single_valued,
        t.facts.c.entity_key.in_(sorted({key for key, _ in wanted})),
    )
    async with deps.db.transaction() as session:
        rows = (await session.execute(query)).all()
    return {(row.entity_key, row.attribute): row.id for row in rows}
