"""Consolidation: stale profiles kept out of extraction prompts, profiles rebuilt from current facts, near-duplicate
facts merged with their provenance, against the real database; the LLM is scripted at its boundary."""

from __future__ import annotations

import asyncio
import re
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from memory_sdk import InvalidInputError, MemoryClient
from memory_sdk.errors import ProviderError
from memory_sdk.llm.protocols import LLMRequest
from memory_sdk.pipeline.consolidation import merge_closing, plan_merges, same_claim
from memory_sdk.pipeline.upsert import entity_lock_names
from memory_sdk.store import queries
from memory_sdk.store.profiles import CurrentFact
from memory_sdk.testing import HashEmbedder, ScriptedLLM
from tests.conftest import ClientFactory
from tests.invariants import assert_memory_invariants
from tests.test_stays_true import answer, fact

T1 = datetime(2025, 3, 1, 10, 0, tzinfo=UTC)
T2 = datetime(2025, 6, 15, 10, 0, tzinfo=UTC)
T3 = datetime(2025, 9, 1, 10, 0, tzinfo=UTC)
SINGS = "Bia canta no Coral Vozes"
SINGS_TOO = "Bia canta sempre no Coral Vozes"  # HashEmbedder cosine to SINGS: 0.876


def user_prompt(request: LLMRequest) -> str:
    return request.messages[1]["content"]


def facts_in(request: LLMRequest) -> list[str]:
    """The fact lines of a profile_consolidation prompt, without their dates."""
    return re.findall(r"^- (.*) \(since [\d-]+\)$", user_prompt(request), re.MULTILINE)


def profile_of_facts(request: LLMRequest) -> dict[str, Any]:
    return {"profile": " ".join(facts_in(request))}


def pick(text: str) -> Any:
    """A reconciliation responder that picks the shown candidate containing `text`."""

    def responder(request: LLMRequest) -> dict[str, Any]:
        number = re.search(rf"^(\d+)\. [^\n]*{re.escape(text)}", user_prompt(request), re.MULTILINE)
        assert number is not None, user_prompt(request)
        return {"action": "UPDATE", "target": number.group(1)}

    return responder


# -- the decision, pure -------------------------------------------------------------------------------------------


def current(text: str, *, days: int = 0, confidence: float = 0.95, attribute: str | None = None) -> CurrentFact:
    when = T1 + timedelta(days=days)
    return CurrentFact(
        id=uuid.uuid4(),
        text=text,
        attribute=attribute,
        confidence=confidence,
        valid_from=when,
        recorded_at=when,
        embedding=HashEmbedder().embed_one(text),
    )


def test_same_claim_needs_close_vectors_and_the_same_numbers_polarity_names_and_attribute() -> None:
    base = current(SINGS)
    assert same_claim(base, current(SINGS_TOO), 0.85) is not None
    assert same_claim(base, current("Bia não canta mais no Coral Vozes"), 0.85) is None  # cosine 0.877
    assert same_claim(base, current(SINGS_TOO), 0.9) is None
    assert same_claim(base, current(SINGS_TOO, attribute="hobby"), 0.85) is None
    assert same_claim(current("Bia tem 2 gatos"), current("Bia tem 3 gatos"), 0.5) is None
    assert same_claim(current("Bia canta com Bruno"), current("Bia canta com Bruna"), 0.5) is None


def test_merges_keep_the_most_confident_earliest_fact_and_end_where_it_begins() -> None:
    early, late, inferred = current(SINGS, days=0), current(SINGS_TOO, days=30), current(SINGS, confidence=0.6)
    [merge] = plan_merges([late, early], 0.85)
    assert (merge.fact, merge.survivor) == (late, early)
    assert merge_closing(merge).valid_to == late.valid_from  # later and the same: never separately true
    [merge] = plan_merges([inferred, late], 0.85)
    assert (merge.fact, merge.survivor) == (inferred, late)  # a stated fact outranks an inferred one
    assert merge_closing(merge).valid_to == late.valid_from  # the inferred one is history until the stated began
    assert plan_merges([current(SINGS), current("Bia mora em Recife")], 0.85) == []


# -- stale profiles and rebuilt profiles --------------------------------------------------------------------------


def rafael_script() -> ScriptedLLM:
    first = answer(
        [("Rafael", "person"), ("Curitiba", "place"), ("Acme", "organization")],
        [
            fact("Rafael", "Rafael mora em Curitiba", attribute="lives_in"),
            fact("Rafael", "Rafael trabalha na Acme", attribute="employer"),
        ],
    )
    first["updated_profiles"] = {"Rafael": "Rafael lives in Curitiba and works at Acme."}
    moved = answer(
        [("Rafael", "person"), ("São Paulo", "place")],
        [fact("Rafael", "Rafael mora em São Paulo", action="UPDATE", attribute="lives_in")],
    )
    moved["updated_profiles"] = {"Rafael": "Rafael lives in São Paulo."}  # seeded only where NULL: ignored
    coffee = answer([("Rafael", "person")], [fact("Rafael", "Rafael gosta de café")])
    nothing = answer([("Rafael", "person")], [])
    return ScriptedLLM(
        {
            "informed_extraction": [first, moved, coffee, nothing],
            "reconciliation": pick("Curitiba"),
            "profile_consolidation": profile_of_facts,
        }
    )


async def test_a_stale_profile_is_not_fed_to_extraction_and_consolidation_rebuilds_it(
    make_client: ClientFactory, agent_id: str
) -> None:
    llm = rafael_script()
    async with make_client(llm) as memory:
        await memory.write(agent_id, "Moro em Curitiba e trabalho na Acme", speaker_name="Rafael", occurred_at=T1)
        moved = await memory.write(agent_id, "Me mudei pra São Paulo", speaker_name="Rafael", occurred_at=T2)
        assert moved.success and [f.text for f in moved.facts_updated] == ["Rafael mora em São Paulo"]

        third = await memory.write(
            agent_id, "Rafael gosta de café", speaker_name="Rafael", occurred_at=T3, verbose=True
        )
        assert third.pipeline is not None
        assert third.pipeline.step("alias_lookup").data["stale_profiles"] == ["person:rafael"]
        prompt = user_prompt(llm.requests_for("informed_extraction")[2])
        assert "Curitiba" not in prompt  # neither the stale profile nor the closed fact
        assert "Rafael mora em São Paulo" in prompt  # its current facts stand in for the profile

        report = await memory.consolidate(agent_id)
        assert report.success, report.failures
        assert report.entities_consolidated == ["person:rafael"]  # places and the company have no facts
        assert report.llm_calls == 1 and report.tokens_used.total_tokens > 0
        [request] = llm.requests_for("profile_consolidation")
        assert facts_in(request) == ["Rafael trabalha na Acme", "Rafael mora em São Paulo", "Rafael gosta de café"]
        rafael = await memory.get_entity(agent_id, "Rafael")
        assert rafael is not None and rafael.profile_text is not None
        assert "São Paulo" in rafael.profile_text and "Curitiba" not in rafael.profile_text

        again = await memory.consolidate(agent_id)
        assert (again.entities_consolidated, again.llm_calls) == ([], 0)  # nothing changed since

        fourth = await memory.write(agent_id, "Oi Rafael", speaker_name="Ana", occurred_at=T3, verbose=True)
        assert fourth.pipeline is not None and fourth.pipeline.step("alias_lookup").data["stale_profiles"] == []
        assert f"profile: {rafael.profile_text}" in user_prompt(llm.requests_for("informed_extraction")[3])


async def test_a_seeded_profile_is_up_to_date_and_one_named_entity_is_rebuilt_anyway(
    make_client: ClientFactory, agent_id: str
) -> None:
    llm = rafael_script()
    async with make_client(llm) as memory:
        await memory.write(agent_id, "Moro em Curitiba e trabalho na Acme", speaker_name="Rafael", occurred_at=T1)
        report = await memory.consolidate(agent_id)  # seeded after the write's own facts: not stale
        assert (report.entities_consolidated, report.llm_calls) == ([], 0)
        report = await memory.consolidate(agent_id, entity="rafael")
        assert (report.entities_consolidated, report.llm_calls) == (["person:rafael"], 1)
        with pytest.raises(InvalidInputError, match="no entity 'Nobody'"):
            await memory.consolidate(agent_id, entity="Nobody")


async def test_one_failing_entity_is_reported_and_the_others_are_consolidated(
    make_client: ClientFactory, agent_id: str
) -> None:
    def responder(request: LLMRequest) -> Any:
        if "Entity: Ana" in user_prompt(request):
            return ProviderError("the model is down for Ana")
        return profile_of_facts(request)

    llm = ScriptedLLM(
        {
            "informed_extraction": [
                answer([("Ana", "person"), ("Bruno", "person")], [fact("Ana", "Ana toca violão")]),
                answer([("Bruno", "person")], [fact("Bruno", "Bruno joga xadrez")]),
            ],
            "profile_consolidation": responder,
        }
    )
    async with make_client(llm) as memory:
        await memory.write(agent_id, "Ana toca violão", speaker_name="Rafael", occurred_at=T1)
        await memory.write(agent_id, "Bruno joga xadrez", speaker_name="Rafael", occurred_at=T1)
        report = await memory.consolidate(agent_id)
        assert not report.success
        assert list(report.failures) == ["person:ana"] and "down for Ana" in report.failures["person:ana"]
        assert report.entities_consolidated == ["person:bruno"]
        assert report.llm_calls == 2
        assert [step.status for step in report.steps] == ["failed", "ok"]
        bruno, ana = await memory.get_entity(agent_id, "Bruno"), await memory.get_entity(agent_id, "Ana")
        assert bruno is not None and bruno.profile_text == "Bruno joga xadrez"
        assert ana is not None and ana.profile_text is None

        retry = await memory.consolidate(agent_id)  # Ana is still due; Bruno is not
        assert retry.llm_calls == 1 and list(retry.failures) == ["person:ana"]


# -- near-duplicate merge -----------------------------------------------------------------------------------------


def duplicates_script(*more: dict[str, Any], **purposes: Any) -> ScriptedLLM:
    """Two writes that leave SINGS and SINGS_TOO current (the model said ADD), the second the edge's evidence;
    then the extractions `more`. `purposes` replace the default answers of other purposes."""
    entities = [("Bia", "person"), ("Coral Vozes", "organization")]
    edge = [("Bia", "member_of", "Coral Vozes")]
    script: dict[str, Any] = {
        "informed_extraction": [
            answer(entities, [fact("Bia", SINGS)], edge),
            answer(entities, [fact("Bia", SINGS_TOO)], edge),
            *more,
        ],
        "reconciliation": [{"action": "ADD", "target": None}],
        "profile_consolidation": profile_of_facts,
    }
    return ScriptedLLM({**script, **purposes})


async def two_near_duplicates(memory: MemoryClient, agent_id: str) -> tuple[Any, Any]:
    first = await memory.write(agent_id, SINGS, speaker_name="Rafael", occurred_at=T1)
    second = await memory.write(agent_id, SINGS_TOO, speaker_name="Rafael", occurred_at=T2)
    assert first.success and second.success, (first.error, second.error)
    [kept], [merged] = first.facts_added, second.facts_added
    [edge] = await memory.get_relationships(agent_id)
    assert edge.evidence_fact_id == merged.id  # the repeat refreshed the edge's evidence
    return kept, merged


async def test_near_duplicates_merge_into_one_keeping_provenance_and_edges(
    make_client: ClientFactory, agent_id: str
) -> None:
    async with make_client(duplicates_script()) as memory:
        kept, merged = await two_near_duplicates(memory, agent_id)
        report = await memory.consolidate(agent_id)
        assert report.success, report.failures
        [entry] = report.facts_merged
        assert (entry.fact_id, entry.survivor_id, entry.entity_key) == (merged.id, kept.id, "person:bia")

        assert [f.id for f in await memory.get_facts(agent_id, entity="Bia")] == [kept.id]
        history = {f.id: f for f in await memory.get_facts(agent_id, entity="Bia", include_history=True)}
        closed = history[merged.id]
        assert closed.merged_into_fact_id == kept.id and closed.invalidated_at is not None
        assert closed.valid_to == closed.valid_from == T2  # the same claim, never separately true
        assert (closed.source_event_id, closed.text) == (merged.source_event_id, SINGS_TOO)  # provenance stays
        [edge] = await memory.get_relationships(agent_id)
        assert edge.evidence_fact_id == kept.id and edge.invalidated_at is None
        bia = await memory.get_entity(agent_id, "Bia")
        assert bia is not None and bia.profile_text == SINGS  # built from the facts left
        await assert_memory_invariants(memory, agent_id)


async def test_the_merge_waits_for_the_write_path_locks_of_its_entity(
    make_client: ClientFactory, agent_id: str
) -> None:
    async with make_client(duplicates_script()) as memory:
        await two_near_duplicates(memory, agent_id)
        async with memory.database.tenant(agent_id) as conn:  # a write about Bia in its apply transaction
            await queries.lock_names(conn, agent_id, entity_lock_names("person:bia", "Bia"))
            consolidation = asyncio.create_task(memory.consolidate(agent_id))
            await asyncio.sleep(1.0)
            assert len(await memory.get_facts(agent_id, entity="Bia")) == 2, "the merge did not wait for the lock"
            assert not consolidation.done()
        report = await consolidation
        assert len(report.facts_merged) == 1
        assert len(await memory.get_facts(agent_id, entity="Bia")) == 1


async def test_a_write_deciding_before_the_merge_and_applying_after_ends_the_survivor(
    make_client: ClientFactory, agent_id: str
) -> None:
    """The write reads Bia's facts and decides to end the duplicate; consolidation merges that duplicate before the
    write applies. Ana's profile call (her key sorts first) waits for the write's decision, the decision waits for
    Bia's profile call (Bia's merge has committed by then). The DELETE follows the merge to the survivor, so what
    the write retracted is not left current under another id."""
    deciding, merged = asyncio.Event(), asyncio.Event()
    stopped = "Bia não canta mais no Coral Vozes"

    async def consolidation(request: LLMRequest) -> dict[str, Any]:
        if "Entity: Ana" in user_prompt(request):
            await asyncio.wait_for(deciding.wait(), 10)
        else:
            merged.set()
        return profile_of_facts(request)

    async def reconciliation(request: LLMRequest) -> dict[str, Any]:
        prompt = user_prompt(request)
        if stopped not in prompt:
            return {"action": "ADD", "target": None}
        deciding.set()
        await asyncio.wait_for(merged.wait(), 10)
        number = re.search(rf"^(\d+)\. {SINGS_TOO} ", prompt, re.MULTILINE)
        assert number is not None, prompt
        return {"action": "DELETE", "target": number.group(1)}

    entities = [("Bia", "person"), ("Coral Vozes", "organization")]
    llm = duplicates_script(
        answer([("Ana", "person")], [fact("Ana", "Ana toca violão")]),
        answer(entities, [fact("Bia", stopped)]),
        reconciliation=reconciliation,
        profile_consolidation=consolidation,
    )
    async with make_client(llm) as memory:
        await two_near_duplicates(memory, agent_id)
        await memory.write(agent_id, "Ana toca violão", speaker_name="Rafael", occurred_at=T2)
        result, report = await asyncio.gather(
            memory.write(agent_id, stopped, speaker_name="Rafael", occurred_at=T3, verbose=True),
            memory.consolidate(agent_id),
        )
        assert result.success, result.error
        assert report.success and len(report.facts_merged) == 1, report
        assert [f.text for f in await memory.get_facts(agent_id, entity="Bia")] == [stopped]
        [deleted] = result.facts_deleted
        assert deleted.text == SINGS  # the survivor of the merged target
        assert await memory.get_relationships(agent_id, entity="Bia") == []  # its edge ended with its evidence
        await assert_memory_invariants(memory, agent_id)
