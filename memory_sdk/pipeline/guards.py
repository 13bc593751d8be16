"""Guards between what a model answered and what the SDK stores: pure functions, plain values in and out.

Small models make the same few mistakes (measured with a 1.5B model, issues 10 and 13); among them, reconciliation
verdicts that close a true fact about something else. The pipeline asks for the right answer in its prompts; these
checks make a wrong one harmless, and say why in the trace.

- Decisions (reconciliation): an UPDATE, DELETE or NOOP only touches a fact about the same thing, and an inferred
  fact never supersedes a stated one (`guard_decision`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from uuid import UUID

from memory_sdk.pipeline.state import FactDecision
from memory_sdk.text import normalise_alias

__all__ = ["STATED_CONFIDENCE", "Candidate", "guard_decision"]

# A fact at or above this confidence is stated (the prompts: 0.95 stated, 0.8 strongly implied); below it, or
# built by the SDK from a relation, it is inferred.
STATED_CONFIDENCE = 0.9
_EXTRACTED = "extracted"


# --- decisions -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    """A current fact of the subject that a new fact may relate to."""

    id: UUID
    text: str
    similarity: float
    attribute: str | None
    valid_from: datetime
    source_context: str = _EXTRACTED
    confidence: float = 0.95


def guard_decision(
    decision: FactDecision, candidates: Sequence[Candidate], *, min_similarity: float, same_above: float
) -> FactDecision:
    """The decision, or what it must become so that it cannot corrupt memory; the reason says which guard.

    - UPDATE, DELETE and NOOP touch only a fact about the same thing: the same text, the same attribute when
      both carry one, else a similarity of at least `min_similarity`; otherwise the fact is ADDed. (Candidates are
      the subject's own facts by construction, so the subject is always the same);
    - an inferred fact (a mirror fact, or one below STATED_CONFIDENCE) never ends a stated fact of higher
      confidence: it confirms it (NOOP) when it says the same (similarity above `same_above`, or the same
      single-valued attribute, which an ADD would end too), else it is ADDed beside it.
    """
    decision = _same_thing(decision, candidates, min_similarity)
    return _weaker_keeps_out(decision, candidates, same_above)


def _target(decision: FactDecision, candidates: Sequence[Candidate]) -> Candidate | None:
    return next((c for c in candidates if c.id == decision.target_id), None)


def _same_thing(decision: FactDecision, candidates: Sequence[Candidate], floor: float) -> FactDecision:
    target = _target(decision, candidates)
    if decision.action == "ADD" or target is None:
        return decision
    fact = decision.fact
    if normalise_alias(fact.text) == normalise_alias(target.text):
        return decision
    if fact.attribute and target.attribute:
        if fact.attribute == target.attribute:
            return decision
        why = f"target {target.text!r} is about {target.attribute}, the fact about {fact.attribute}"
    elif target.similarity >= floor:
        return decision
    else:
        why = f"target {target.text!r} is not about the same thing (similarity {target.similarity:.2f} < {floor:.2f})"
    return replace(decision, action="ADD", target_id=None, reason=f"guard: {decision.action} refused, {why}; ADD")


def _weaker_keeps_out(decision: FactDecision, candidates: Sequence[Candidate], same_above: float) -> FactDecision:
    fact = decision.fact
    if decision.action == "NOOP" or (fact.source_context == _EXTRACTED and fact.confidence >= STATED_CONFIDENCE):
        return decision
    open_value = next((c for c in candidates if fact.single_valued and c.attribute == fact.attribute), None)
    target = _target(decision, candidates) if decision.action in ("UPDATE", "DELETE") else None
    stronger = [c for c in (target, open_value) if c is not None and _stated(c) and c.confidence > fact.confidence]
    if not stronger:
        return decision
    kept = stronger[0]
    why = (
        f"guard: {decision.action} refused, an inferred fact ({fact.source_context}, confidence "
        f"{fact.confidence:.2f}) never ends the stated {kept.text!r} ({kept.confidence:.2f})"
    )
    if kept is open_value or kept.similarity > same_above:
        return replace(decision, action="NOOP", target_id=kept.id, similarity=kept.similarity, reason=f"{why}; NOOP")
    return replace(decision, action="ADD", target_id=None, reason=f"{why}; ADD")


def _stated(candidate: Candidate) -> bool:
    return candidate.source_context == _EXTRACTED and candidate.confidence >= STATED_CONFIDENCE
