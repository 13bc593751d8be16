"""One LLM call per typical write (issue 11, item 0): the informed extraction sees the known facts under short
ids and answers each fact's decision; reconciliation decides from it through the same guards, and calls the model
only for facts with a similar stored fact the informed call did not see: once per write, for all of them.

Against the real database; the LLM is a ScriptedLLM and the embedder a HashEmbedder with pinned vectors, so every
similarity is exact."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from typing import Any

import pytest

from memory_sdk import MemoryConfig
from memory_sdk.errors import ProviderError
from memory_sdk.lexicons import NEUTRAL, lexicon_for
from memory_sdk.llm.protocols import LLMRequest
from memory_sdk.llm.schemas import BatchVerdict
from memory_sdk.pipeline.guards import says_the_opposite
from memory_sdk.pipeline.reconciliation import match_verdicts
from memory_sdk.testing import HashEmbedder, ScriptedLLM
from tests.conftest import ClientFactory
from tests.invariants import assert_memory_invariants
from tests.scripts import each_fact
from tests.test_resolution import DIM
from tests.test_stays_true import answer, fact

T1 = datetime(2025, 3, 1, 10, 0, tzinfo=UTC)
T2 = datetime(2025, 6, 15, 10, 0, tzinfo=UTC)

HOME = "Rafael mora em Curitiba"
JAZZ = "Rafael gosta de jazz"
ONG = "Rafael é voluntário na ONG Sol"
ANA_HOME = "Ana mora em Porto"
# The speaker talks about Rafael and Ana: the informed call sees the known facts of the entities a message names.
SPEAKER = "Bia"
_SHOWN = re.compile(r"^\s*\[(\d+)\] (.*)$", re.MULTILINE)


def pinned(axis: int, cosine: float = 1.0) -> list[float]:
    """A unit vector at `cosine` to `pinned(axis)`, and orthogonal to every other axis's vectors."""
    vector = [0.0] * DIM
    vector[axis], vector[axis + DIM // 2] = cosine, math.sqrt(1 - cosine * cosine)
    return vector


def shown_id(request: LLMRequest, text: str) -> str:
    """The short id the informed prompt gave the known fact `text`."""
    shown = {fact_text: short for short, fact_text in _SHOWN.findall(request.messages[-1]["content"])}
    return shown[text]


def informed(entities: list[tuple[str, str]], *facts: dict[str, Any]) -> Any:
    """An informed-extraction responder whose facts' `target` may be a known fact's text, read back as its id."""

    def respond(request: LLMRequest) -> dict[str, Any]:
        decided = [
            {**f, "target": shown_id(request, f["target"])} if f.get("target") in _texts(request) else f for f in facts
        ]
        return answer(entities, decided)

    return respond


def in_turn(*answers: Any) -> Any:
    """A responder giving `answers` in turn; an answer that is a function is called with the request."""
    queue = list(answers)

    def respond(request: LLMRequest) -> Any:
        answer = queue.pop(0)
        return answer(request) if callable(answer) else answer

    return respond


def _texts(request: LLMRequest) -> set[str]:
    return {text for _, text in _SHOWN.findall(request.messages[-1]["content"])}


FIRST = answer(
    [("Rafael", "person"), ("Ana", "person"), ("Curitiba", "place"), ("Porto", "place")],
    [
        fact("Rafael", HOME, attribute="lives_in"),
        fact("Rafael", JAZZ),
        fact("Rafael", ONG),
        fact("Ana", ANA_HOME, attribute="lives_in"),
    ],
)
# A move's answer names the new home (a lives_in fact that names no place is refused, post_extraction).
RAFAEL_IN_SAO_PAULO = [("Rafael", "person"), ("São Paulo", "place")]
FIRST_MESSAGE = "O Rafael mora em Curitiba, gosta de jazz e é voluntário na ONG Sol. A Ana mora em Porto."


def embedder(**cosines: tuple[int, float]) -> HashEmbedder:
    """The stored facts on axes 1-4; each new text of `cosines` at its cosine to one of them."""
    stored = {HOME: pinned(1), JAZZ: pinned(2), ONG: pinned(3), ANA_HOME: pinned(4)}
    return HashEmbedder(overrides={**stored, **{text: pinned(*at) for text, at in cosines.items()}})


async def after_first(memory: Any, agent_id: str, message: str) -> Any:
    """Write FIRST_MESSAGE, then `message` (verbose): the write under test."""
    await memory.write(agent_id, FIRST_MESSAGE, speaker_name=SPEAKER, occurred_at=T1)
    return await memory.write(agent_id, message, speaker_name=SPEAKER, occurred_at=T2, verbose=True)


def decisions(result: Any) -> list[dict[str, Any]]:
    assert result.pipeline is not None
    return list(result.pipeline.step("reconciliation").data["decisions"])


async def test_informed_update_noop_and_delete_of_shown_ids_decide_with_one_call(
    make_client: ClientFactory, agent_id: str
) -> None:
    moved, likes, quit_ = "Rafael mora em São Paulo", "Rafael curte jazz", "Rafael não é mais voluntário na ONG Sol"
    second = informed(
        RAFAEL_IN_SAO_PAULO,
        fact("Rafael", moved, action="UPDATE", target=HOME, attribute="lives_in"),
        fact("Rafael", likes, action="NOOP", target=JAZZ),
        fact("Rafael", quit_, action="DELETE", target=ONG),
    )
    llm = ScriptedLLM({"informed_extraction": in_turn(FIRST, second)})
    vectors = embedder(**{moved: (1, 0.6), likes: (2, 0.95), quit_: (3, 0.8)})
    async with make_client(llm, embedder=vectors) as memory:
        result = await after_first(
            memory, agent_id, "O Rafael agora mora em São Paulo, curte jazz e não é mais voluntário na ONG Sol."
        )
        assert result.success, result.error
        assert result.llm_calls == 1, result.error
        assert [r.purpose for r in llm.requests] == ["informed_extraction"] * 2
        assert [f.text for f in result.facts_updated] == [moved]
        assert [f.text for f in result.facts_unchanged] == [JAZZ]
        assert [f.text for f in result.facts_deleted] == [ONG]
        assert [(d["path"], d["action"]) for d in decisions(result)] == [
            ("informed", "UPDATE"),
            ("informed", "NOOP"),
            ("informed", "DELETE"),
        ]
        step = result.pipeline.step("reconciliation") if result.pipeline else None
        assert step is not None and step.data["llm_decisions"] == 3 and step.data["reconciliation_calls"] == 0
        current = sorted(f.text for f in await memory.get_facts(agent_id, entity="Rafael"))
        assert current == sorted([moved, JAZZ, quit_])
        await assert_memory_invariants(memory, agent_id)


@pytest.mark.parametrize(
    ("target", "refusal"),
    [
        ("9", "not an id the informed call was shown"),
        ("0", "not an id the informed call was shown"),
        (ANA_HOME, "is about person:ana"),
    ],
    ids=["out-of-range", "zero", "another-subject"],
)
async def test_informed_target_it_may_not_touch_is_refused_and_one_reconciliation_call_decides(
    make_client: ClientFactory, agent_id: str, target: str | None, refusal: str
) -> None:
    moved = "Rafael mora em São Paulo"
    second = informed(
        [("Rafael", "person"), ("Ana", "person"), ("São Paulo", "place")],
        fact("Rafael", moved, action="UPDATE", target=target, attribute="lives_in"),
    )
    llm = ScriptedLLM(
        {"informed_extraction": in_turn(FIRST, second), "reconciliation": [{"action": "UPDATE", "target": "1"}]}
    )
    async with make_client(llm, embedder=embedder(**{moved: (1, 0.6)})) as memory:
        result = await after_first(memory, agent_id, "O Rafael, amigo da Ana, agora mora em São Paulo.")
        assert result.success, result.error
        assert len(llm.requests_for("reconciliation")) == 1
        assert result.llm_calls == 2
        [decision] = decisions(result)
        assert decision["path"] == "reconciliation"
        assert refusal in decision["not_informed"]
        assert [f.text for f in await memory.get_facts(agent_id, entity="Ana")] == [ANA_HOME]
        homes = [f.text for f in await memory.get_facts(agent_id, entity="Rafael") if f.attribute == "lives_in"]
        assert homes == [moved]


async def test_an_informed_update_of_another_attribute_is_refused_as_a_reconciliation_verdict_is(
    make_client: ClientFactory, agent_id: str
) -> None:
    """test_model_mistakes' first case, answered by the informed call: UPDATE of the home into a job fact. The home
    is about another attribute, so no decision may touch it: the fact is ADDed on the fast path, whatever the
    answer said."""
    talk = "Rafael falou com o Guilherme sobre o projeto"
    second = informed([("Rafael", "person")], fact("Rafael", talk, action="UPDATE", target=HOME, attribute="job_title"))
    llm = ScriptedLLM({"informed_extraction": in_turn(FIRST, second)})
    async with make_client(llm, embedder=embedder(**{talk: (1, 0.6)})) as memory:
        result = await after_first(memory, agent_id, "O Rafael falou com o Guilherme sobre o projeto")
        assert result.llm_calls == 1, result.error
        [decision] = decisions(result)
        assert (decision["path"], decision["action"]) == ("fast", "ADD")
        assert "no similar fact a decision may touch" in decision["why"] and "about lives_in" in decision["why"]
        assert HOME in [f.text for f in await memory.get_facts(agent_id, entity="Rafael")]


async def test_an_informed_update_of_a_dissimilar_shown_fact_is_refused_as_a_reconciliation_verdict_is(
    make_client: ClientFactory, agent_id: str
) -> None:
    """Issue 13: wrong UPDATEs targeted facts at similarity 0.27-0.44. The new fact is close to the jazz fact (so it
    is a judgement call) and the model closes the volunteering, shown too but at 0.3."""
    music = "Rafael gosta de jazz e de blues"
    vector = [0.0] * DIM
    vector[2], vector[3], vector[-1] = 0.8, 0.3, math.sqrt(1 - 0.8**2 - 0.3**2)  # 0.8 to jazz, 0.3 to the ONG
    second = informed([("Rafael", "person")], fact("Rafael", music, action="UPDATE", target=ONG))
    llm = ScriptedLLM({"informed_extraction": in_turn(FIRST, second)})
    overrides = {HOME: pinned(1), JAZZ: pinned(2), ONG: pinned(3), ANA_HOME: pinned(4), music: vector}
    async with make_client(llm, embedder=HashEmbedder(overrides=overrides)) as memory:
        result = await after_first(memory, agent_id, "O Rafael gosta de jazz e de blues")
        assert result.llm_calls == 1, result.error
        [decision] = decisions(result)
        assert (decision["path"], decision["action"]) == ("informed", "ADD")
        assert "not about the same thing" in decision["why"]
        assert ONG in [f.text for f in await memory.get_facts(agent_id, entity="Rafael")]


async def test_an_informed_delete_without_a_target_takes_the_one_fact_it_may_touch(
    make_client: ClientFactory, agent_id: str
) -> None:
    """The 1.5B model answered "I'm not working at Globex anymore" with DELETE and no target; the one fact a decision
    could touch was the job, and a reconciliation call was paid to choose it. With two such facts it still is."""
    quit_ = "Rafael não é mais voluntário na ONG Sol"
    second = answer([("Rafael", "person")], [fact("Rafael", quit_, action="DELETE")])
    llm = ScriptedLLM({"informed_extraction": in_turn(FIRST, second)})
    async with make_client(llm, embedder=embedder(**{quit_: (3, 0.8)})) as memory:
        result = await after_first(memory, agent_id, "O Rafael não é mais voluntário na ONG Sol.")
        assert result.llm_calls == 1, result.error
        [decision] = decisions(result)
        assert (decision["path"], decision["action"]) == ("informed", "DELETE")
        assert "no target given" in decision["why"]
        assert [f.text for f in result.facts_deleted] == [ONG]

    both = "Rafael não gosta mais de jazz nem da ONG Sol"
    vector = [0.0] * DIM
    vector[2], vector[3], vector[-1] = 0.6, 0.6, math.sqrt(1 - 2 * 0.6**2)  # 0.6 to the jazz and to the ONG
    second = answer([("Rafael", "person")], [fact("Rafael", both, action="DELETE")])
    llm = ScriptedLLM(
        {
            "informed_extraction": in_turn(FIRST, second),
            "reconciliation": lambda request: {"action": "ADD", "target": None},
        }
    )
    overrides = {HOME: pinned(1), JAZZ: pinned(2), ONG: pinned(3), ANA_HOME: pinned(4), both: vector}
    async with make_client(llm, embedder=HashEmbedder(overrides=overrides)) as memory:
        result = await after_first(memory, f"{agent_id}-2", "O Rafael não gosta mais de jazz nem da ONG Sol.")
        assert [r.purpose for r in llm.requests][-1] == "reconciliation"
        [decision] = decisions(result)
        assert "not an id the informed call was shown" in decision["not_informed"]


async def test_an_informed_update_without_a_target_by_the_negation_stays_an_update_in_one_call(
    make_client: ClientFactory, agent_id: str
) -> None:
    """The 1.5B model's "I'm not working at Globex anymore": UPDATE, no target. The one fact it may touch is the
    volunteering, so the informed answer decides without a reconciliation call, and its UPDATE stays an UPDATE: no
    guard turns it into a retraction (the guard contract), and nothing on `result.adjustments` says otherwise."""
    quit_ = "Rafael não é mais voluntário na ONG Sol"
    second = answer([("Rafael", "person")], [fact("Rafael", quit_, action="UPDATE")])
    llm = ScriptedLLM({"informed_extraction": in_turn(FIRST, second)})
    async with make_client(llm, embedder=embedder(**{quit_: (3, 0.8)})) as memory:
        result = await after_first(memory, agent_id, "O Rafael não é mais voluntário na ONG Sol.")
        assert result.success, result.error
        assert result.llm_calls == 1, result.error
        [decision] = decisions(result)
        assert (decision["path"], decision["action"]) == ("informed", "UPDATE")
        assert "no target given" in decision["why"] and "guard_override" not in decision, decision
        assert result.adjustments == []
        assert [f.text for f in result.facts_updated] == [quit_]
        assert [f.text for f in result.facts_superseded] == [ONG] and result.facts_deleted == []
        current = [f.text for f in await memory.get_facts(agent_id, entity="Rafael")]
        assert quit_ in current and ONG not in current
        await assert_memory_invariants(memory, agent_id)


async def test_similar_facts_the_informed_call_did_not_see_take_one_batched_call_for_all(
    make_client: ClientFactory, agent_id: str
) -> None:
    """With no known fact shown (informed_extraction_topk=0), both facts' similar candidates are unseen: one
    batched reconciliation call decides both, not one call each."""
    moved, quit_ = "Rafael mora em São Paulo", "Rafael não é mais voluntário na ONG Sol"
    second = answer(
        RAFAEL_IN_SAO_PAULO,
        [
            fact("Rafael", moved, action="UPDATE", target="1", attribute="lives_in"),
            fact("Rafael", quit_, action="DELETE", target="2"),
        ],
    )

    def batch(request: LLMRequest) -> dict[str, Any]:
        content = request.messages[-1]["content"]
        assert content.count("New fact ") == 2 and moved in content and quit_ in content
        return {
            "decisions": [
                {"fact": "2", "action": "DELETE", "target": "1"},
                {"fact": "1", "action": "UPDATE", "target": "1"},
            ]
        }

    llm = ScriptedLLM({"informed_extraction": in_turn(FIRST, second), "reconciliation_batch": batch})
    config = MemoryConfig(informed_extraction_topk=0)
    async with make_client(llm, config=config, embedder=embedder(**{moved: (1, 0.6), quit_: (3, 0.8)})) as memory:
        result = await after_first(
            memory, agent_id, "O Rafael agora mora em São Paulo e não é mais voluntário na ONG Sol."
        )
        assert result.success, result.error
        assert [r.purpose for r in llm.requests] == [
            "informed_extraction",
            "informed_extraction",
            "reconciliation_batch",
        ]
        assert result.llm_calls == 2
        assert [f.text for f in result.facts_updated] == [moved]
        assert [f.text for f in result.facts_deleted] == [ONG]
        assert all(d["path"] == "reconciliation" and "did not see" in d["not_informed"] for d in decisions(result))
        await assert_memory_invariants(memory, agent_id)


async def test_a_similar_fact_no_decision_may_touch_is_added_without_a_reconciliation_call(
    make_client: ClientFactory, agent_id: str
) -> None:
    """The new fact embeds close to the jazz fact (0.8) but shares no word with it beyond "Rafael", and the informed
    call never saw it: any UPDATE, DELETE or NOOP of it would be refused (`guards.untouchable`), so no LLM is asked.
    The 1.5B run of melanie_caroline paid a reconciliation call for such a fact."""
    records = "Rafael coleciona discos antigos"
    second = answer([("Rafael", "person")], [fact("Rafael", records)])
    llm = ScriptedLLM({"informed_extraction": in_turn(FIRST, second)})
    config = MemoryConfig(informed_extraction_topk=0)
    async with make_client(llm, config=config, embedder=embedder(**{records: (2, 0.8)})) as memory:
        result = await after_first(memory, agent_id, "O Rafael coleciona discos antigos.")
        assert result.success, result.error
        assert [r.purpose for r in llm.requests] == ["informed_extraction", "informed_extraction"]
        [decision] = decisions(result)
        assert (decision["path"], decision["action"]) == ("fast", "ADD")
        assert "no similar fact a decision may touch" in decision["why"] and "shares no word" in decision["why"]
        current = [f.text for f in await memory.get_facts(agent_id, entity="Rafael")]
        assert records in current and JAZZ in current


async def test_a_batched_answer_without_a_facts_verdict_takes_that_facts_fallback(
    make_client: ClientFactory, agent_id: str
) -> None:
    moved, likes = "Rafael mora em São Paulo", "Rafael curte jazz"
    second = answer(RAFAEL_IN_SAO_PAULO, [fact("Rafael", moved, attribute="lives_in"), fact("Rafael", likes)])
    llm = ScriptedLLM(
        {
            "informed_extraction": in_turn(FIRST, second),
            "reconciliation_batch": [{"decisions": [{"fact": "2", "action": "NOOP", "target": "1"}]}],
        }
    )
    async with make_client(llm, embedder=embedder(**{moved: (1, 0.6), likes: (2, 0.95)})) as memory:
        result = await after_first(memory, agent_id, "O Rafael mora em São Paulo e curte jazz")
        assert not result.success and "no verdict for new fact 1" in (result.error or "")
        assert [f.text for f in result.facts_unchanged] == [JAZZ]
        assert [f.text for f in result.facts_updated] == [moved]  # the fallback of a single-valued attribute
        assert result.llm_calls == 2


async def test_the_blind_path_batches_its_reconciliation_too(make_client: ClientFactory, agent_id: str) -> None:
    moved, likes = "Rafael mora em São Paulo", "Rafael curte jazz"
    llm = ScriptedLLM(
        {
            "informed_extraction": [FIRST, ValueError("down")],
            "entity_scan": [
                {"entities": [{"name": "Rafael", "type": "person"}, {"name": "São Paulo", "type": "place"}]}
            ],
            "fact_extraction": [
                {
                    "facts": [
                        # Targets from a prompt that showed no ids: never trusted.
                        fact("Rafael", moved, action="UPDATE", target="1", attribute="lives_in"),
                        fact("Rafael", likes, action="NOOP", target="1"),
                    ]
                }
            ],
            "relation_extraction": [{"relations": []}],
            "reconciliation_batch": each_fact({"action": "NOOP", "target": "1"}),
        }
    )
    async with make_client(llm, embedder=embedder(**{moved: (1, 0.6), likes: (2, 0.95)})) as memory:
        result = await after_first(memory, agent_id, "O Rafael mora em São Paulo e curte jazz")
        assert result.extraction_path == "blind"
        assert len(llm.requests_for("reconciliation_batch")) == 1 and not llm.requests_for("reconciliation")
        assert all(d["path"] == "reconciliation" and d["not_informed"].startswith("blind") for d in decisions(result))


async def test_an_older_answer_without_actions_is_decided_by_reconciliation_as_before(
    make_client: ClientFactory, agent_id: str
) -> None:
    """Recorded runs (memory_sdk/demo/recorded.json) answer "NEW"/"UPDATE" without targets: no decision."""
    moved = "Rafael mora em São Paulo"
    second = answer(RAFAEL_IN_SAO_PAULO, [fact("Rafael", moved, action="NEW", attribute="lives_in")])
    llm = ScriptedLLM({"informed_extraction": [FIRST, second], "reconciliation": [{"action": "UPDATE", "target": "1"}]})
    async with make_client(llm, embedder=embedder(**{moved: (1, 0.6)})) as memory:
        result = await after_first(memory, agent_id, "O Rafael mora em São Paulo")
        assert result.success, result.error
        assert len(llm.requests_for("reconciliation")) == 1 and result.llm_calls == 2
        [decision] = decisions(result)
        assert decision["path"] == "reconciliation" and decision["informed_said"] is None
        assert [f.text for f in result.facts_updated] == [moved]


def test_batched_verdicts_map_by_fact_number_else_by_place() -> None:
    by_number = [BatchVerdict(fact="2", action="ADD"), BatchVerdict(fact="1", action="NOOP", target="1")]
    assert [v.action if v else None for v in match_verdicts(by_number, 2)] == ["NOOP", "ADD"]
    by_place = [BatchVerdict(action="ADD"), BatchVerdict(action="DELETE", target="1")]
    assert [v.action if v else None for v in match_verdicts(by_place, 2)] == ["ADD", "DELETE"]
    twice = [
        BatchVerdict(fact="1", action="ADD"),
        BatchVerdict(fact="1", action="NOOP"),
        BatchVerdict(fact="7", action="ADD"),
    ]
    assert [v.action if v else None for v in match_verdicts(twice, 2)] == ["ADD", None]


async def test_the_speakers_own_facts_are_shown_so_a_first_person_update_takes_one_call(
    make_client: ClientFactory, agent_id: str
) -> None:
    """ "Agora moro em São Paulo" names nobody: the speaker's known facts are looked up by the speaker's key."""
    moved = "Rafael mora em São Paulo"
    first = answer([("Rafael", "person"), ("Curitiba", "place")], [fact("Rafael", HOME, attribute="lives_in")])
    second = informed(RAFAEL_IN_SAO_PAULO, fact("Rafael", moved, action="UPDATE", target=HOME, attribute="lives_in"))
    llm = ScriptedLLM({"informed_extraction": in_turn(first, second)})
    async with make_client(llm, embedder=embedder(**{moved: (1, 0.6)})) as memory:
        await memory.write(agent_id, "Moro em Curitiba", speaker_name="Rafael", occurred_at=T1)
        result = await memory.write(
            agent_id, "Agora moro em São Paulo", speaker_name="Rafael", occurred_at=T2, verbose=True
        )
        assert result.success, result.error
        assert f"] {HOME}" in llm.requests[-1].messages[-1]["content"]
        assert result.llm_calls == 1
        assert [(d["path"], d["action"]) for d in decisions(result)] == [("informed", "UPDATE")]
        assert [f.text for f in result.facts_updated] == [moved]


async def test_an_entity_with_a_profile_shows_its_nearest_facts_too_so_the_informed_call_decides(
    make_client: ClientFactory, agent_id: str
) -> None:
    """The first write seeds Rafael's profile; the second names him again: the prompt holds the profile AND his
    facts nearest to the message under short ids, so his move is decided by the informed answer (one call)."""
    moved = "Rafael mora em São Paulo"
    first = {**FIRST, "updated_profiles": {"Rafael": "Lives in Curitiba, likes jazz."}}
    second = informed(RAFAEL_IN_SAO_PAULO, fact("Rafael", moved, action="UPDATE", target=HOME, attribute="lives_in"))
    llm = ScriptedLLM({"informed_extraction": in_turn(first, second)})
    async with make_client(llm, embedder=embedder(**{moved: (1, 0.6)})) as memory:
        result = await after_first(memory, agent_id, "O Rafael agora mora em São Paulo.")
        assert result.success, result.error
        prompt = llm.requests[-1].messages[-1]["content"]
        assert "profile: Lives in Curitiba, likes jazz." in prompt
        assert HOME in _texts(llm.requests[-1])
        assert result.llm_calls == 1, [d for d in decisions(result)]
        assert [(d["path"], d["action"]) for d in decisions(result)] == [("informed", "UPDATE")]
        assert [f.text for f in result.facts_updated] == [moved]


async def test_an_informed_noop_of_the_opposite_fact_is_refused_and_the_reconciliation_call_decides(
    make_client: ClientFactory, agent_id: str
) -> None:
    """The 1.5B model answered NOOP of "Rafael trabalha na Acme" for "Rafael não trabalha mais na Acme" (truth
    benchmark, prompt v8): the ended job stayed current. A NOOP between a negated and a plain fact is refused."""
    quit_ = "Rafael não é mais voluntário na ONG Sol"
    second = informed([("Rafael", "person")], fact("Rafael", quit_, action="NOOP", target=ONG))
    llm = ScriptedLLM(
        {"informed_extraction": in_turn(FIRST, second), "reconciliation": [{"action": "DELETE", "target": "1"}]}
    )
    async with make_client(llm, embedder=embedder(**{quit_: (3, 0.8)})) as memory:
        result = await after_first(memory, agent_id, "O Rafael não é mais voluntário na ONG Sol.")
        [decided] = decisions(result)
        assert "says the opposite" in decided["not_informed"], decided
        assert decided["path"] == "reconciliation" and decided["action"] == "DELETE"
        assert [r.purpose for r in llm.requests].count("reconciliation") == 1
        assert [f.text for f in result.facts_deleted] == [ONG]


def test_says_the_opposite_needs_the_same_words_with_one_negated() -> None:
    """One text is the other negated in the message language's words: the same words (token_set_ratio >= 85) and
    one negation. Texts in other words are the model's to judge, and without a lexicon nothing reads as negated."""
    pt, en, it = (lexicon_for(code).is_negated for code in ("pt", "en", "it"))
    assert says_the_opposite("Rafael não trabalha mais na Acme", "Rafael trabalha na Acme", pt)
    assert says_the_opposite("Ana isn't working at Globex anymore", "Ana is working at Globex", en)
    assert not says_the_opposite("Rafael curte jazz", "Rafael gosta de jazz", pt)
    assert not says_the_opposite("Ana is not at Globex", "Ana never liked Globex", en)
    # Other words: "works" is not "working", and a restatement with a negation is no opposite.
    assert not says_the_opposite("Ana isn't working at Globex anymore", "Ana works at Globex", en)
    assert not says_the_opposite("Ilaria non rinuncia mai alla nuotata", "Ilaria nuota ogni mattina", it)
    assert not says_the_opposite("Rafael não trabalha mais na Acme", "Rafael trabalha na Acme", NEUTRAL.is_negated)


async def test_a_reconciliation_noop_of_the_opposite_fact_is_added_not_confirmed(
    make_client: ClientFactory, agent_id: str
) -> None:
    """The same guard on the reconciliation call's verdict: a NOOP of the opposite fact becomes an ADD (the negated
    fact is kept beside the old one, never folded into it as a confirmation)."""
    quit_ = "Rafael não é mais voluntário na ONG Sol"
    second = answer([("Rafael", "person")], [fact("Rafael", quit_)])  # no decision: the reconciliation call decides
    llm = ScriptedLLM(
        {"informed_extraction": in_turn(FIRST, second), "reconciliation": [{"action": "NOOP", "target": "1"}]}
    )
    async with make_client(llm, embedder=embedder(**{quit_: (3, 0.8)})) as memory:
        result = await after_first(memory, agent_id, "O Rafael não é mais voluntário na ONG Sol.")
        [decided] = decisions(result)
        assert decided["path"] == "reconciliation" and decided["action"] == "ADD", decided
        assert "says the opposite" in decided["why"]
        assert [f.text for f in result.facts_added] == [quit_] and result.facts_unchanged == []


async def test_an_answer_that_only_repeats_known_memory_is_asked_again_without_it(
    make_client: ClientFactory, agent_id: str
) -> None:
    """The demo re-recorded with the 1.5B model: for "Não trabalho mais na Acme" the informed call answered
    Rafael's known facts word for word, the guards dropped them all, and the retraction was lost. Such an answer is
    asked once more without the known memory; the new fact then meets memory through the reconciliation call."""
    quit_ = "Rafael não é mais voluntário na ONG Sol"
    parroted = informed(
        [("Rafael", "person")], fact("Rafael", ONG, action="NOOP", target=ONG), fact("Rafael", HOME, action="NOOP")
    )
    fresh = answer([("Rafael", "person")], [fact("Rafael", quit_, action="ADD")])
    llm = ScriptedLLM(
        {
            "informed_extraction": in_turn(FIRST, parroted, fresh),
            "reconciliation": [{"action": "DELETE", "target": "1"}],
        }
    )
    async with make_client(llm, embedder=embedder(**{quit_: (3, 0.8)})) as memory:
        result = await after_first(memory, agent_id, "O Rafael não é mais voluntário na ONG Sol.")
        assert result.pipeline is not None
        extraction = result.pipeline.step("extraction").data
        assert "repeat the known memory" in extraction["reasked_without_memory"]
        prompts = [r.messages[-1]["content"] for r in llm.requests_for("informed_extraction")]
        assert HOME in prompts[1] and HOME not in prompts[2] and "(nothing known yet)" in prompts[2]
        [decided] = decisions(result)
        assert decided["path"] == "reconciliation" and decided["action"] == "DELETE", decided
        assert [f.text for f in result.facts_deleted] == [ONG]
        assert result.llm_calls == 3  # the answer, the one without memory, the reconciliation
        await assert_memory_invariants(memory, agent_id)


async def test_a_second_answer_updates_a_fact_only_through_its_attribute(
    make_client: ClientFactory, agent_id: str
) -> None:
    """The answer asked without memory comes from the model that answered memory back; on LoCoMo its
    reconciliation UPDATEd "Jon is passionate about dancing" into "Jon wants to go to a dance class". Such an
    UPDATE is an ADD, reported; the retraction of the test above still DELETEs."""
    saturdays = "Rafael toca jazz aos sábados"
    parroted = informed([("Rafael", "person")], fact("Rafael", ONG, action="NOOP", target=ONG))
    fresh = answer([("Rafael", "person")], [fact("Rafael", saturdays, action="ADD")])
    llm = ScriptedLLM(
        {
            "informed_extraction": in_turn(FIRST, parroted, fresh),
            "reconciliation": [{"action": "UPDATE", "target": "1"}],
        }
    )
    async with make_client(llm, embedder=embedder(**{saturdays: (2, 0.8)})) as memory:
        result = await after_first(memory, agent_id, "O Rafael toca jazz aos sábados.")
        [decided] = decisions(result)
        assert decided["path"] == "reconciliation" and decided["action"] == "ADD", decided
        assert decided["model_said"].startswith("UPDATE")
        [safer] = [a for a in result.adjustments if a.rule == "decision_safer"]
        assert "second answer" in safer.why and safer.after == "ADD"
        current = [f.text for f in await memory.get_facts(agent_id)]
        assert JAZZ in current and saturdays in current
        await assert_memory_invariants(memory, agent_id)


async def test_an_answer_with_one_new_fact_among_known_ones_is_not_asked_again(
    make_client: ClientFactory, agent_id: str
) -> None:
    moved = "Rafael mora em São Paulo"
    second = informed(
        RAFAEL_IN_SAO_PAULO,
        fact("Rafael", JAZZ, action="NOOP", target=JAZZ),
        fact("Rafael", moved, action="UPDATE", target=HOME, attribute="lives_in"),
    )
    llm = ScriptedLLM({"informed_extraction": in_turn(FIRST, second)})
    async with make_client(llm, embedder=embedder(**{moved: (1, 0.6)})) as memory:
        result = await after_first(memory, agent_id, "O Rafael agora mora em São Paulo.")
        assert result.pipeline is not None
        assert "reasked_without_memory" not in result.pipeline.step("extraction").data
        assert len(llm.requests_for("informed_extraction")) == 2 and result.llm_calls == 1
        assert [f.text for f in result.facts_updated] == [moved]


async def test_when_the_answer_without_memory_fails_the_first_answer_stays_and_the_write_says_so(
    make_client: ClientFactory, agent_id: str
) -> None:
    parroted = informed([("Rafael", "person")], fact("Rafael", ONG, action="NOOP", target=ONG))

    def down(request: LLMRequest) -> Any:
        raise ProviderError("server down")

    llm = ScriptedLLM({"informed_extraction": in_turn(FIRST, parroted, down)})
    async with make_client(llm, embedder=embedder()) as memory:
        result = await after_first(memory, agent_id, "O Rafael não é mais voluntário na ONG Sol.")
        assert not result.success
        assert result.error is not None and "without the known memory failed" in result.error
        assert result.extraction_path == "informed"
        assert ONG in [f.text for f in await memory.get_facts(agent_id)]  # nothing closed on a parroted answer
        await assert_memory_invariants(memory, agent_id)


async def test_a_fact_not_about_the_open_value_of_an_unchecked_attribute_is_stored_without_it(
    make_client: ClientFactory, agent_id: str
) -> None:
    """With the 1.5B model on LoCoMo, "Gina launched an ad campaign for her clothing store" came as `job_title` and
    ended "Gina is a dancer" (similarity 0.41 with the local embedder). Below the embedder's
    `attribute_min_similarity` the SDK cannot tell such a fact is about the title, so it is stored without the
    attribute, reported; the title stays. An embedder that declares no floor leaves the model's answer alone."""
    dancer, campaign = "Rafael é dançarino", "Rafael lançou uma campanha para a loja dele"
    first = answer([("Rafael", "person")], [fact("Rafael", dancer, attribute="job_title")])
    second = answer([("Rafael", "person")], [fact("Rafael", campaign, attribute="job_title")])
    vectors = HashEmbedder(overrides={dancer: pinned(1), campaign: pinned(1, 0.41)})
    for floor, title_stays in ((0.5, True), (None, False)):
        llm = ScriptedLLM({"informed_extraction": in_turn(first, second)})
        config = MemoryConfig(reconciliation_attribute_min_similarity=floor)
        async with make_client(llm, config=config, embedder=vectors) as memory:
            agent = f"{agent_id}-{floor}"
            await memory.write(agent, "O Rafael é dançarino.", speaker_name=SPEAKER, occurred_at=T1)
            result = await memory.write(
                agent, "O Rafael lançou uma campanha para a loja dele.", speaker_name=SPEAKER, occurred_at=T2
            )
            current = {f.text: f.attribute for f in await memory.get_facts(agent)}
            refused = [a for a in result.adjustments if a.rule == "attribute_refused"]
            if title_stays:
                assert current == {dancer: "job_title", campaign: None}
                assert len(refused) == 1 and refused[0].before == "job_title" and "0.41 < 0.50" in refused[0].why
            else:
                assert current == {campaign: "job_title"} and not refused
            await assert_memory_invariants(memory, agent)


async def test_one_answer_never_ends_its_own_fact_through_a_single_valued_attribute(
    make_client: ClientFactory, agent_id: str
) -> None:
    """Two facts of one answer that give the subject's `job_title` at one moment: the database keeps one open value,
    so the second would close the first at its own start (measured with the 1.5B model on LoCoMo). Both are
    stored current, the first without the attribute, reported; the last ends the title it replaces."""
    dancer, goal, passion = "Rafael é dançarino", "Rafael quer ensinar ioga", "Rafael adora ajudar as pessoas"
    first = answer([("Rafael", "person")], [fact("Rafael", dancer, attribute="job_title")])
    second = answer(
        [("Rafael", "person")],
        [fact("Rafael", goal, attribute="job_title"), fact("Rafael", passion, attribute="job_title")],
    )
    llm = ScriptedLLM({"informed_extraction": in_turn(first, second)})
    async with make_client(llm) as memory:
        await memory.write(agent_id, "O Rafael é dançarino.", speaker_name=SPEAKER, occurred_at=T1)
        result = await memory.write(
            agent_id, "O Rafael quer ensinar ioga, adora ajudar as pessoas.", speaker_name=SPEAKER, occurred_at=T2
        )
        current = {f.text: f.attribute for f in await memory.get_facts(agent_id)}
        assert current == {goal: None, passion: "job_title"}
        refused = [a for a in result.adjustments if a.rule == "attribute_refused"]
        assert [(a.item, a.before, a.after) for a in refused] == [(goal, "job_title", None)]
        await assert_memory_invariants(memory, agent_id)


async def test_a_turn_copied_whole_is_kept_as_said_only_when_it_is_the_answers_only_record(
    make_client: ClientFactory, agent_id: str
) -> None:
    """With the 1.5B model on LoCoMo, an answer whose one fact was the turn copied whole, a statement and a question,
    stored nothing: the question check dropped it. Such a copy is kept, marked a chat line and reported, when it is
    the answer's only record of the message; beside a fact that stands, it is dropped as before."""
    turn = "Hi Deb! My week's been busy. I finished an electrical engineering project last week. Anything fun for you?"
    project = fact("Jolene", "Jolene finished an electrical engineering project last week", evidence="I finished")
    people = [("Jolene", "person"), ("Deborah", "person")]
    homed = fact("Jolene", turn, attribute="lives_in")  # an attribute refused on the way: still kept as said
    cases = (([fact("Jolene", turn)], [turn]), ([homed], [turn]), ([fact("Jolene", turn), project], [project["text"]]))
    for facts, kept in cases:
        llm = ScriptedLLM({"informed_extraction": [answer(people, facts)]})
        async with make_client(llm) as memory:
            agent = f"{agent_id}-{len(facts)}-{facts[0].get('attribute')}"
            result = await memory.write(
                agent, turn, speaker_name="Jolene", occurred_at=T2, participants=["Jolene", "Deborah"]
            )
            assert [f.text for f in result.facts_added] == kept
            rules = {a.rule: a for a in result.adjustments if a.item == turn}
            if len(facts) == 1:
                assert "question" not in rules and "only record" in rules["chat_line"].why
                stored = [(f.source_context, f.attribute) for f in await memory.get_facts(agent)]
                assert stored == [("chat_line", None)]
            else:
                assert rules["question"].why == "the fact is a question" and "chat_line" not in rules


async def test_an_answer_taken_from_the_recent_messages_is_asked_again_without_them(
    make_client: ClientFactory, agent_id: str
) -> None:
    """The 1.5B model wrote the turns before the message instead of the message (LoCoMo conv-48: "My mother also
    passed away last year" went unstored, every fact of its answer dropped). Such an answer is asked once more
    without the recent messages and the memory, reported; an answer of the message's own questions is not."""
    recent = ["Deborah: Last week I visited my mother's old house, it holds a lot of memories."]
    message = "Sorry about your loss. My mother also passed away last year. Is there anything special you remember?"
    people = [("Jolene", "person"), ("Deborah", "person")]
    visit = fact(
        "Deborah", "Deborah visited her mother's old house", evidence="Last week I visited my mother's old house"
    )
    taken = answer(people, [visit])
    said = "Jolene's mother passed away last year"
    fresh = answer(people, [fact("Jolene", said, evidence="My mother also passed away last year")])
    asked = answer(people, [fact("Jolene", "Is there anything special you remember?")])
    for first, asked_again in ((taken, True), (asked, False)):
        llm = ScriptedLLM({"informed_extraction": in_turn(first, fresh)})
        async with make_client(llm) as memory:
            result = await memory.write(
                f"{agent_id}-{asked_again}",
                message,
                speaker_name="Jolene",
                occurred_at=T2,
                recent_messages=recent,
                participants=["Jolene", "Deborah"],
            )
            requests = llm.requests_for("informed_extraction")
            assert len(requests) == (2 if asked_again else 1)
            reasked = [a for a in result.adjustments if a.rule == "reasked"]
            if asked_again:
                assert "mother's old house" in requests[0].messages[-1]["content"]
                assert "mother's old house" not in requests[1].messages[-1]["content"]
                assert len(reasked) == 1 and "recent messages" in reasked[0].why
                assert [f.text for f in result.facts_added] == [said]
            else:
                assert not reasked and not result.facts_added
