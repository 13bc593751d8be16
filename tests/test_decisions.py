"""The pure decisions of reconciliation and valid time, tested apart from any I/O."""

from __future__ import annotations

import random
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from memory_sdk.llm.schemas import ReconciliationResponse
from memory_sdk.pipeline.reconciliation import Candidate, decision_from_verdict, plan_decision
from memory_sdk.pipeline.state import PreparedFact
from memory_sdk.pipeline.temporal import (
    Close,
    Interval,
    VersionWrite,
    bears_on,
    needs_timeline,
    place_version,
    plan_version_write,
)


def day(n: int) -> datetime:
    return datetime(2026, 6, n, tzinfo=UTC)


def prepared(text: str = "Ana lives in Porto", *, attribute: str | None = None, hint: str = "NEW") -> PreparedFact:
    return PreparedFact(
        subject_name="Ana",
        entity_key="person:ana",
        text=text,
        attribute=attribute,
        single_valued=attribute is not None,
        confidence=0.95,
        importance=0.9,
        importance_category="relationship_change",
        valid_from=day(10),
        action_hint=hint,  # type: ignore[arg-type]
        source_context="extracted",
        embedding=None,
        prompt_version=None,
    )


def candidate(text: str, similarity: float, attribute: str | None = None) -> Candidate:
    return Candidate(uuid.uuid4(), text, similarity, attribute, day(1))


# --- place_version -------------------------------------------------------------------------------------------


def test_new_version_after_current_closes_it_at_the_new_valid_from() -> None:
    current = Interval(uuid.uuid4(), day(1), None)
    placement = place_version(day(5), [current])
    assert (placement.close, placement.corrected, placement.new_valid_to) == (current.id, None, None)
    assert placement.supersedes == current.id


def test_delayed_version_before_every_interval_ends_where_the_first_begins() -> None:
    e1, e2 = Interval(uuid.uuid4(), day(1), day(3)), Interval(uuid.uuid4(), day(3), None)
    placement = place_version(datetime(2026, 5, 30, tzinfo=UTC), [e2, e1])
    assert (placement.close, placement.corrected, placement.new_valid_to) == (None, None, day(1))


def test_delayed_version_inside_a_closed_interval_splits_it() -> None:
    e1, e2 = Interval(uuid.uuid4(), day(1), day(5)), Interval(uuid.uuid4(), day(5), None)
    placement = place_version(day(3), [e1, e2])
    assert (placement.close, placement.new_valid_to) == (e1.id, day(5))


def test_equal_valid_from_is_a_correction_not_an_overlap() -> None:
    current = Interval(uuid.uuid4(), day(1), None)
    placement = place_version(day(1), [current])
    assert (placement.close, placement.corrected, placement.new_valid_to) == (None, current.id, None)


def test_version_in_a_gap_after_everything_closed_is_current() -> None:
    closed = Interval(uuid.uuid4(), day(1), day(2))
    assert place_version(day(9), [closed]) == place_version(day(9), [])


def test_empty_intervals_are_ignored() -> None:
    corrected = Interval(uuid.uuid4(), day(4), day(4))
    assert place_version(day(4), [corrected]).corrected is None


# --- plan_version_write: what applying a decision writes -------------------------------------------------


def test_update_closes_the_target_at_the_new_valid_from_and_supersedes_it() -> None:
    home = Interval(uuid.uuid4(), day(1), None)
    plan = plan_version_write("UPDATE", day(5), attribute="lives_in", single_valued=True, target=home, timeline=[home])
    assert plan == VersionWrite(
        "UPDATE", closes=(Close(home.id, day(5), invalidate=False),), supersedes=home.id, single_valued=True
    )


def test_delayed_update_is_stored_as_history_and_closes_nothing_current() -> None:
    e1, e2 = Interval(uuid.uuid4(), day(1), day(5)), Interval(uuid.uuid4(), day(5), None)
    plan = plan_version_write("UPDATE", day(3), attribute="lives_in", single_valued=True, target=e2, timeline=[e1, e2])
    assert plan.closes == (Close(e1.id, day(3), invalidate=False),)
    assert (plan.valid_to, plan.supersedes, plan.action) == (day(5), e1.id, "UPDATE")
    assert plan.note.startswith("delayed message")


def test_update_of_a_target_outside_the_attribute_also_closes_the_attributes_open_value() -> None:
    open_home = Interval(uuid.uuid4(), day(1), None)
    other = Interval(uuid.uuid4(), day(2), None)  # the LLM's target holds another attribute
    plan = plan_version_write(
        "UPDATE", day(5), attribute="lives_in", single_valued=True, target=other, timeline=[open_home]
    )
    assert {close.fact_id for close in plan.closes} == {open_home.id, other.id}
    assert plan.supersedes == open_home.id  # the attribute's own predecessor first


def test_update_without_attribute_closes_only_its_target() -> None:
    target = Interval(uuid.uuid4(), day(1), None)
    plan = plan_version_write("UPDATE", day(5), attribute=None, single_valued=False, target=target, timeline=[])
    assert plan.closes == (Close(target.id, day(5), invalidate=False),) and plan.supersedes == target.id


def test_add_of_a_single_valued_attribute_fits_its_timeline() -> None:
    home = Interval(uuid.uuid4(), day(1), None)
    plan = plan_version_write("ADD", day(5), attribute="lives_in", single_valued=True, target=None, timeline=[home])
    assert plan.action == "UPDATE" and plan.supersedes == home.id


def test_plain_add_closes_nothing() -> None:
    assert plan_version_write("ADD", day(5), attribute=None, single_valued=False, target=None, timeline=[]) == (
        VersionWrite("ADD")
    )


def test_verdict_whose_target_is_gone_is_an_add() -> None:
    for action in ("UPDATE", "NOOP", "DELETE"):
        plan = plan_version_write(action, day(5), attribute=None, single_valued=False, target=None, timeline=[])
        assert plan == VersionWrite("ADD"), action


def test_noop_confirms_without_inserting() -> None:
    target = Interval(uuid.uuid4(), day(1), None)
    plan = plan_version_write("NOOP", day(5), attribute=None, single_valued=False, target=target, timeline=[])
    assert (plan.action, plan.insert, plan.closes) == ("NOOP", False, ())


def test_delete_retracts_the_target_and_keeps_the_retraction_outside_the_attribute() -> None:
    target = Interval(uuid.uuid4(), day(1), None)
    plan = plan_version_write("DELETE", day(5), attribute="employer", single_valued=True, target=target, timeline=[])
    assert plan.closes == (Close(target.id, day(5), invalidate=True, deleted=True),)
    assert (plan.supersedes, plan.single_valued, plan.valid_to) == (target.id, False, None)


def test_retraction_dated_before_its_target_closes_nothing() -> None:
    target = Interval(uuid.uuid4(), day(5), None)
    plan = plan_version_write("DELETE", day(3), attribute=None, single_valued=False, target=target, timeline=[])
    assert (plan.action, plan.closes, plan.single_valued) == ("ADD", (), False)


def test_timeline_is_read_only_when_the_plan_uses_it() -> None:
    assert needs_timeline("UPDATE", has_target=True, attribute="hobby", single_valued=False)
    assert needs_timeline("ADD", has_target=False, attribute="lives_in", single_valued=True)
    assert not needs_timeline("ADD", has_target=False, attribute="hobby", single_valued=False)
    assert not needs_timeline("DELETE", has_target=True, attribute="lives_in", single_valued=True)
    assert not needs_timeline("UPDATE", has_target=True, attribute=None, single_valued=False)
    # A NOOP or DELETE whose target is gone becomes an ADD, which must still fit a single-valued timeline.
    assert needs_timeline("NOOP", has_target=False, attribute="lives_in", single_valued=True)
    assert needs_timeline("DELETE", has_target=False, attribute="lives_in", single_valued=True)


# --- plan_decision: what needs no LLM ----------------------------------------------------------------------


def test_nothing_known_is_a_fast_add() -> None:
    decision = plan_decision(prepared(), [], 0.5, 0.5)
    assert decision is not None and decision.action == "ADD"


def test_dissimilar_facts_are_a_fast_add() -> None:
    decision = plan_decision(prepared(), [candidate("Ana plays tennis", 0.49)], 0.5, 0.5)
    assert decision is not None and (decision.action, decision.similarity) == ("ADD", 0.49)


def test_similarity_at_the_threshold_asks_the_llm() -> None:
    assert plan_decision(prepared(), [candidate("Ana lives in Lisbon", 0.50)], 0.5, 0.5) is None


def test_similar_facts_no_decision_may_touch_are_a_fast_add() -> None:
    """Similar, but sharing no word beyond the subject, or about another attribute: a guard would refuse any
    UPDATE, DELETE or NOOP of them, so the LLM is not asked."""
    other_topic = candidate("Ana plays the cello", 0.7)
    other_attribute = candidate("Ana works in Porto", 0.9, attribute="employer")
    decision = plan_decision(prepared(attribute="lives_in"), [other_topic, other_attribute], 0.5, 0.5)
    assert decision is not None and (decision.action, decision.source) == ("ADD", "fast")
    assert "no similar fact a decision may touch" in decision.reason
    assert plan_decision(prepared(), [other_topic, candidate("Ana lived in Porto", 0.6)], 0.5, 0.5) is None


def test_identical_text_is_a_noop_without_llm() -> None:
    known = candidate("ana lives in porto!", 0.99)
    decision = plan_decision(prepared(), [known], 0.5, 0.5)
    assert decision is not None and (decision.action, decision.target_id) == ("NOOP", known.id)


def test_same_single_valued_attribute_asks_the_llm_even_when_texts_differ() -> None:
    known = candidate("Ana mora em Lisboa", 0.1, attribute="lives_in")
    assert plan_decision(prepared(attribute="lives_in"), [known], 0.5, 0.5) is None


def test_extractor_update_hint_does_not_bypass_the_fast_path() -> None:
    """Issue 13: the hint sent facts of similarity 0.27-0.44 to a small model, which closed true facts."""
    known = candidate("Ana works at Acme", 0.2)
    decision = plan_decision(prepared(hint="UPDATE"), [known], 0.5, 0.5)
    assert decision is not None and decision.action == "ADD"
    assert plan_decision(prepared(hint="UPDATE"), [candidate("Ana lives in Lisbon", 0.6)], 0.5, 0.5) is None


# --- decision_from_verdict: mapping the LLM's answer back ----------------------------------------------------


@pytest.mark.parametrize("target", ["2", 2, "#2", " 2 "])
def test_shown_id_maps_back_to_the_candidate(target: object) -> None:
    shown = [candidate("a", 0.6), candidate("b", 0.7)]
    verdict = ReconciliationResponse(action="UPDATE", target=target)  # type: ignore[arg-type]
    decision = decision_from_verdict(prepared(), shown, verdict, None)
    assert (decision.action, decision.target_id) == ("UPDATE", shown[1].id)


@pytest.mark.parametrize(
    "target", ["3", "0", "-1", None, "abc", pytest.param(str(uuid.uuid4()), id="a-uuid")]
)  # a fixed id for the random one: every xdist worker must collect the same names
def test_invented_or_missing_target_becomes_add(target: str | None) -> None:
    shown = [candidate("a", 0.6), candidate("b", 0.7)]
    decision = decision_from_verdict(prepared(), shown, ReconciliationResponse(action="DELETE", target=target), None)
    assert decision.action == "ADD"
    assert "rejected" in decision.reason


def test_llm_failure_defaults_to_add() -> None:
    decision = decision_from_verdict(prepared(), [candidate("a", 0.6)], None, "timeout")
    assert decision.action == "ADD"
    assert "timeout" in decision.reason


def test_llm_failure_on_a_single_valued_attribute_updates_the_open_value() -> None:
    open_value = candidate("Ana mora em Lisboa", 0.3, attribute="lives_in")
    decision = decision_from_verdict(prepared(attribute="lives_in"), [open_value], None, "timeout")
    assert (decision.action, decision.target_id) == ("UPDATE", open_value.id)


def test_noop_and_delete_keep_their_target() -> None:
    shown = [candidate("a", 0.9)]
    for action in ("NOOP", "DELETE"):
        decision = decision_from_verdict(prepared(), shown, ReconciliationResponse(action=action, target="1"), None)
        assert (decision.action, decision.target_id) == (action, shown[0].id)


def test_the_versions_that_bear_on_a_new_one_plan_it_as_the_whole_timeline_does() -> None:
    """store/queries.lock_timeline reads only the versions open or ending after the new one starts (and the
    target): over random timelines (overlaps, empty intervals, ties, targets in and out of the timeline), the plan
    from those is the plan from every version."""
    rng = random.Random(29)
    start = datetime(2026, 1, 1, tzinfo=UTC)

    def moment() -> datetime:
        return start + timedelta(days=rng.randrange(40))

    checked = 0
    for _ in range(3000):
        timeline = []
        for _ in range(rng.randrange(8)):
            since = moment()
            until = rng.choice([None, since + timedelta(days=rng.randrange(-2, 12))])
            timeline.append(Interval(uuid.uuid4(), since, until))
        outside = Interval(uuid.uuid4(), moment(), rng.choice([None, moment()]))
        target = rng.choice([None, outside, *timeline])
        valid_from = moment()
        action = rng.choice(["UPDATE", "ADD"])
        read = [v for v in timeline if bears_on(valid_from, v) or (target is not None and v.id == target.id)]
        checked += len(read) < len(timeline)
        plans = [
            plan_version_write(
                action, valid_from, attribute="lives_in", single_valued=True, target=target, timeline=versions
            )
            for versions in (timeline, read)
        ]
        assert plans[0] == plans[1], (valid_from, target, timeline)
    assert checked > 1000  # most cases left versions out
