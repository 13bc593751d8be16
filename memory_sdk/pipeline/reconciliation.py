"""Stage: decide, for each fact, ADD / UPDATE / NOOP / DELETE against the subject's current facts.

Always runs, on the informed and the blind path. Per fact, the subject's current facts are ranked by embedding
similarity (pgvector), and an open fact with the same single-valued attribute is always a candidate. The decision
is pure (`plan_decision`, `decision_from_verdict`); the I/O around it is one read transaction and, for the facts
that need it, one LLM call each, run concurrently and outside any transaction. A failed call or an unusable verdict
takes the fallback (ADD) and fails the write's success flag: the fact is kept, maybe as a near-duplicate.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, date, datetime, time

from memory_sdk.errors import ProviderError
from memory_sdk.llm.prompts import ReconciliationContext, load_prompt
from memory_sdk.llm.schemas import IMPORTANCE_BY_CATEGORY, ReconciliationResponse
from memory_sdk.pipeline.guards import Candidate, guard_decision
from memory_sdk.pipeline.llm_calls import call_llm, shown_index
from memory_sdk.pipeline.post_extraction import fact_identity_text
from memory_sdk.pipeline.state import CandidateFact, Deps, FactDecision, PreparedFact, WriteState
from memory_sdk.store.candidates import (
    CandidateProbe,
    StoredCandidate,
    nearest_current_facts,
    open_single_valued_facts,
)
from memory_sdk.store.database import Connection
from memory_sdk.text import fact_identity_key
from memory_sdk.timeexpr import ValidTime, valid_time
from memory_sdk.vectors import cosine

__all__ = [
    "MAX_CANDIDATES",
    "Candidate",
    "decision_from_verdict",
    "fact_valid_from",
    "plan_decision",
    "prepare_fact",
    "run",
]

# How many of the subject's current facts the LLM sees for one decision: enough for the contradicting fact to be
# among them (same-attribute facts are always added), few enough to keep a small model focused.
MAX_CANDIDATES = 5


async def run(state: WriteState, deps: Deps) -> None:
    prepared: list[PreparedFact] = []
    for candidate in state.candidate_facts:
        fact = prepare_fact(state, candidate)
        if fact is None:
            state.fail(f"reconciliation: subject {candidate.fact.subject!r} did not resolve; fact skipped")
            continue
        prepared.append(fact)
    async with deps.db.tenant(state.request.agent_id) as conn:
        candidates = await _candidates(conn, state.request.agent_id, prepared)
    planned = [
        plan_decision(fact, found, state.config.reconciliation_fast_path_below)
        for fact, found in zip(prepared, candidates, strict=True)
    ]
    asks = [
        _ask(state, deps, fact, found)
        for fact, found, plan in zip(prepared, candidates, planned, strict=True)
        if plan is None
    ]
    answers = iter(await asyncio.gather(*asks))
    decided = [plan if plan is not None else next(answers) for plan in planned]
    state.decisions = [
        guard_decision(
            decision,
            found,
            min_similarity=state.config.reconciliation_target_min_similarity,
            same_above=state.config.semantic_dedup_threshold,
        )
        for decision, found in zip(decided, candidates, strict=True)
    ]
    for decision in state.decisions:
        if decision.failure is not None:
            state.fail(f"reconciliation: {decision.fact.text!r}: {decision.failure}; {decision.action} instead")
    state.step.data["decisions"] = [
        {
            "text": decision.fact.text,
            "action": decision.action,
            "target": str(decision.target_id) if decision.target_id else None,
            "similarity": None if decision.similarity is None else round(decision.similarity, 3),
            "path": "llm" if plan is None else "fast",
            "why": decision.reason,
            **({"model_said": f"{before.action} ({before.reason})"} if decision is not before else {}),
        }
        for decision, before, plan in zip(state.decisions, decided, planned, strict=True)
    ]
    state.step.data["llm_decisions"] = len(asks)


def fact_valid_from(value: date | datetime | None, occurred_at: datetime, text: str, message: str) -> ValidTime:
    """The fact's valid time: the model's date (dates at 00:00 UTC, naive times as UTC) checked against the time
    expressions of the fact's text and the message (`timeexpr.valid_time`), which win when they disagree."""
    if value is None or isinstance(value, datetime):
        model = value if value is None or value.tzinfo else value.replace(tzinfo=UTC)
    else:
        model = datetime.combine(value, time.min, tzinfo=UTC)
    return valid_time(model, text, message, occurred_at)


def prepare_fact(state: WriteState, candidate: CandidateFact) -> PreparedFact | None:
    """Resolve the subject, normalise the attribute, map importance, fix the valid time (recorded in the trace)."""
    resolved = state.resolve_name(candidate.fact.subject)
    if resolved is None:
        return None
    fact = candidate.fact
    attribute = "_".join(fact.attribute.lower().split()) if fact.attribute else None
    when = fact_valid_from(fact.valid_from, state.request.occurred_at, fact.text, state.request.message)
    state.step.data.setdefault("valid_from", []).append(
        {
            "text": fact.text.strip(),
            "valid_from": when.valid_from.isoformat(),
            "source": when.source,
            "expression": when.expression,
            "overridden": None if when.overridden is None else when.overridden.isoformat(),
            "why": when.why,
        }
    )
    return PreparedFact(
        subject_name=resolved.display_name,
        entity_key=resolved.key,
        text=fact.text.strip(),
        attribute=attribute,
        single_valued=attribute in state.config.single_valued_attributes,
        confidence=fact.confidence,
        importance=IMPORTANCE_BY_CATEGORY[fact.importance_category],
        importance_category=fact.importance_category,
        valid_from=when.valid_from,
        action_hint=fact.action,
        source_context=candidate.source_context,
        embedding=candidate.embedding,
        prompt_version=state.extraction.prompt_version,
    )


def plan_decision(fact: PreparedFact, candidates: list[Candidate], fast_path_below: float) -> FactDecision | None:
    """The decision that needs no LLM, or None when the LLM must decide.

    - no current fact is similar enough and none shares a single-valued attribute: ADD, the fast path. The
      extractor's UPDATE hint does not bypass it (issue 13: it sent facts of similarity 0.27-0.44 to a small model,
      which answered UPDATE and closed true facts); the hint is still shown to the LLM when it is asked;
    - a current fact says exactly the same (ignoring case and punctuation): NOOP;
    - anything else is a judgement call for the LLM.
    """
    identical = next((c for c in candidates if fact_identity_text(c.text) == fact_identity_text(fact.text)), None)
    if identical is not None:
        return FactDecision(fact, "NOOP", identical.id, identical.similarity, "identical text already current")
    best = max((c.similarity for c in candidates), default=None)
    same_attribute = fact.single_valued and any(c.attribute == fact.attribute for c in candidates)
    if not same_attribute and (best is None or best < fast_path_below):
        why = "no current fact" if best is None else f"best similarity {best:.2f} < {fast_path_below:.2f}"
        return FactDecision(fact, "ADD", None, best, f"fast path: {why}")
    return None


def decision_from_verdict(
    fact: PreparedFact, shown: list[Candidate], verdict: ReconciliationResponse | None, error: str | None
) -> FactDecision:
    """Map the LLM's verdict (ids as shown, "1".."n") back to a decision; never trust an id it invented.

    LLM failure defaults to ADD (a near-duplicate beats lost information), except where ADD is impossible: a
    single-valued attribute with an open value is UPDATEd, because the database keeps one open value.
    """
    best = max((c.similarity for c in shown), default=None)
    same_attribute = next((c for c in shown if fact.single_valued and c.attribute == fact.attribute), None)

    def fallback(reason: str, failure: str | None = None) -> FactDecision:
        if same_attribute is not None:
            return FactDecision(fact, "UPDATE", same_attribute.id, best, f"{reason}; single-valued attribute", failure)
        return FactDecision(fact, "ADD", None, best, reason, failure)

    if verdict is None:
        return fallback(f"LLM failed ({error}), default ADD", f"LLM failed ({error})")
    if verdict.action == "ADD":
        return fallback("LLM: ADD" + (f" ({verdict.reasoning})" if verdict.reasoning else ""))
    index = shown_index(verdict.target, len(shown))
    if index is None:
        invented = f"LLM said {verdict.action} with target {verdict.target!r}, not one shown"
        return fallback(f"{invented}: rejected", invented)
    target = shown[index]
    why = f"LLM: {verdict.action} #{index + 1}" + (f" ({verdict.reasoning})" if verdict.reasoning else "")
    return FactDecision(fact, verdict.action, target.id, target.similarity, why)


async def _candidates(conn: Connection, agent_id: str, prepared: list[PreparedFact]) -> list[list[Candidate]]:
    """Every fact's candidates in one round: its subject's nearest current facts (store/candidates.py), plus the
    open value of its single-valued attribute when that is not among them."""
    probes = [CandidateProbe(fact.entity_key, fact.embedding, fact_identity_key(fact.text)) for fact in prepared]
    nearest = await nearest_current_facts(conn, agent_id, probes, MAX_CANDIDATES)
    found = [[_candidate(row) for row in rows] for rows in nearest]
    missing = [
        (fact.entity_key, fact.attribute)
        for fact, rows in zip(prepared, found, strict=True)
        if fact.single_valued and fact.attribute and all(c.attribute != fact.attribute for c in rows)
    ]
    open_values = await open_single_valued_facts(conn, agent_id, missing)
    for fact, rows in zip(prepared, found, strict=True):
        extra = open_values.get((fact.entity_key, fact.attribute or ""))
        if extra is not None and all(c.id != extra[0].id for c in rows):
            stored, vector = extra
            similarity = cosine(fact.embedding, vector) if fact.embedding and vector else 0.0
            rows.append(_candidate(stored, similarity))
    return found


def _candidate(row: StoredCandidate, similarity: float | None = None) -> Candidate:
    if similarity is None:
        similarity = 0.0 if row.similarity is None else row.similarity
    return Candidate(
        row.id, row.text, similarity, row.attribute, row.valid_from, row.source_context, float(row.confidence)
    )


def _render_candidates(shown: list[Candidate]) -> str:
    return "\n".join(f"{n}. {c.text} (true since {c.valid_from:%Y-%m-%d})" for n, c in enumerate(shown, start=1))


async def _ask(state: WriteState, deps: Deps, fact: PreparedFact, shown: list[Candidate]) -> FactDecision:
    prompt = load_prompt("reconciliation")
    messages = prompt.render(
        ReconciliationContext(
            subject=fact.subject_name,
            hint="the message changes something already known" if fact.action_hint == "UPDATE" else "new",
            candidates=_render_candidates(shown),
            new_fact_date=f"{fact.valid_from:%Y-%m-%d}",
            new_fact=fact.text,
        )
    )
    try:
        verdict = await call_llm(state, deps.llm, "reconciliation", messages, ReconciliationResponse)
    except ProviderError as exc:
        return decision_from_verdict(fact, shown, None, str(exc))
    return decision_from_verdict(fact, shown, verdict, None)
