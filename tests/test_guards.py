"""The guards between a model's answer and memory (pipeline/guards.py), tested as pure functions."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from memory_sdk.pipeline.guards import Candidate, guard_decision
from memory_sdk.pipeline.state import FactDecision, PreparedFact

WHEN = datetime(2026, 6, 10, tzinfo=UTC)


# --- decisions -------------------------------------------------------------------------------------------------


def prepared(
    text: str, *, attribute: str | None = None, confidence: float = 0.95, source: str = "extracted"
) -> PreparedFact:
    return PreparedFact(
        subject_name="Rafael",
        entity_key="person:rafael",
        text=text,
        attribute=attribute,
        single_valued=attribute in ("lives_in", "job_title", "employer"),
        confidence=confidence,
        importance=0.9,
        importance_category="relationship_change",
        valid_from=WHEN,
        action_hint="NEW",
        source_context=source,
        embedding=None,
        prompt_version=None,
    )


def known(text: str, similarity: float, *, attribute: str | None = None, **extra: Any) -> Candidate:
    return Candidate(uuid.uuid4(), text, similarity, attribute, datetime(2026, 1, 1, tzinfo=UTC), **extra)


def guarded(decision: FactDecision, candidates: list[Candidate]) -> FactDecision:
    return guard_decision(decision, candidates, min_similarity=0.5, same_above=0.85)


def test_update_of_a_fact_with_another_attribute_becomes_an_add() -> None:
    home = known("Rafael mora em Curitiba", 0.7, attribute="lives_in")
    fact = prepared("Rafael falou com Guilherme Maturana sobre o projeto", attribute="job_title")
    decision = guarded(FactDecision(fact, "UPDATE", home.id, 0.7, "LLM: UPDATE #1"), [home])
    assert (decision.action, decision.target_id) == ("ADD", None)
    assert decision.reason.startswith("guard: UPDATE refused") and "lives_in" in decision.reason


def test_update_or_delete_of_a_dissimilar_fact_becomes_an_add() -> None:
    tennis = known("Rafael joga tênis", 0.44)
    for action in ("UPDATE", "DELETE", "NOOP"):
        decision = guarded(FactDecision(prepared("Rafael mora em São Paulo"), action, tennis.id, 0.44), [tennis])  # type: ignore[arg-type]
        assert decision.action == "ADD" and "similarity 0.44 < 0.50" in decision.reason, action


def test_update_of_a_similar_fact_or_the_same_attribute_stands() -> None:
    similar = known("Ricardo lives in São Paulo", 0.55)
    decision = FactDecision(prepared("Ricardo moved to Austin"), "UPDATE", similar.id, 0.55, "LLM")
    assert guarded(decision, [similar]) == decision
    home = known("Rafael mora em Curitiba", 0.1, attribute="lives_in")
    decision = FactDecision(prepared("Rafael mora em SP", attribute="lives_in"), "UPDATE", home.id, 0.1, "LLM")
    assert guarded(decision, [home]) == decision


def test_noop_on_the_identical_text_stands_without_embeddings() -> None:
    same = known("Rafael mora em Curitiba", 0.0)
    decision = FactDecision(prepared("Rafael mora em curitiba."), "NOOP", same.id, 0.0, "identical")
    assert guarded(decision, [same]) == decision


def test_mirror_fact_never_supersedes_a_stated_fact() -> None:
    stated = known("Ricardo se mudou pra Austin, Texas", 0.7, confidence=0.95)
    mirror = prepared("Ricardo Gomes lives in Austin", confidence=0.6, source="inferred_from_relation")
    decision = guarded(FactDecision(mirror, "UPDATE", stated.id, 0.7, "LLM: UPDATE #1"), [stated])
    assert (decision.action, decision.target_id) == ("ADD", None) and "never ends the stated" in decision.reason
    close = known("Ricardo Gomes lives in Austin, Texas", 0.9, confidence=0.95)
    decision = guarded(FactDecision(mirror, "UPDATE", close.id, 0.9, "LLM: UPDATE #1"), [close])
    assert (decision.action, decision.target_id) == ("NOOP", close.id)


def test_weak_fact_never_ends_a_stated_single_valued_value() -> None:
    home = known("Ricardo mora em São Paulo", 0.6, attribute="lives_in", confidence=0.95)
    weak = prepared("Ricardo talvez more em Austin", attribute="lives_in", confidence=0.6)
    for action in ("UPDATE", "ADD"):
        target = home.id if action == "UPDATE" else None
        decision = guarded(FactDecision(weak, action, target, 0.6), [home])  # type: ignore[arg-type]
        assert (decision.action, decision.target_id) == ("NOOP", home.id), action


def test_weak_retraction_of_a_stated_fact_is_kept_beside_it() -> None:
    job = known("Rafael trabalha na Acme", 0.8, confidence=0.95)
    weak = prepared("Rafael talvez tenha saído da Acme", confidence=0.4)
    decision = guarded(FactDecision(weak, "DELETE", job.id, 0.8, "LLM: DELETE #1"), [job])
    assert decision.action == "ADD"


def test_mirror_may_supersede_a_mirror_and_stated_facts_supersede_anything() -> None:
    old_mirror = known("Rafael lives in Curitiba", 0.7, source_context="inferred_from_relation", confidence=0.6)
    mirror = prepared("Rafael lives in São Paulo", confidence=0.6, source="inferred_from_relation")
    decision = FactDecision(mirror, "UPDATE", old_mirror.id, 0.7, "LLM")
    assert guarded(decision, [old_mirror]) == decision
    stated = known("Rafael mora em Curitiba", 0.7)
    decision = FactDecision(prepared("Rafael mora em São Paulo"), "UPDATE", stated.id, 0.7, "LLM")
    assert guarded(decision, [stated]) == decision


def test_a_guarded_fallback_still_reports_its_failure() -> None:
    tennis = known("Rafael joga tênis", 0.3)
    decision = FactDecision(prepared("Rafael mora em SP"), "UPDATE", tennis.id, 0.3, "fallback", failure="LLM failed")
    assert guarded(decision, [tennis]).failure == "LLM failed"
