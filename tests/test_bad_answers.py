"""Malformed answers and failing providers, against the real database: whatever an LLM or an embedder returns, the
event is kept, the run is finished with a storable trace, a malformed item is dropped alone, and `success` is False
with `result.error` saying what was lost whenever anything was dropped or fell back (docs/write-pipeline.md,
"When an answer is wrong")."""

from __future__ import annotations

import asyncio
import hashlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

from memory_sdk import MemoryClient
from memory_sdk.errors import ProviderError
from memory_sdk.llm.protocols import EmbeddingProvider, LLMRequest
from memory_sdk.testing import HashEmbedder, ScriptedLLM, ScriptedResponse
from tests.conftest import ClientFactory
from tests.invariants import assert_memory_invariants
from tests.test_resolution import vector_at

WHEN = datetime(2025, 6, 15, 12, 0, tzinfo=UTC)
LATER = datetime(2025, 7, 1, 12, 0, tzinfo=UTC)
MESSAGE = "Ana loves jazz and plays the piano"
JAZZ, PIANO = "Ana loves jazz", "Ana plays the piano"


def fact(text: str, subject: str = "Ana", **extra: Any) -> dict[str, Any]:
    return {"subject": subject, "text": text, **extra}


def informed(
    *facts: Any, entities: Sequence[Any] = ({"name": "Ana", "type": "person"},), **extra: Any
) -> dict[str, Any]:
    """An informed-extraction answer: the two good facts about Ana plus `facts`."""
    return {"entities": list(entities), "facts": [fact(JAZZ), fact(PIANO), *facts], "relations": [], **extra}


# 38 facts no two of which are near-duplicates, so only the cap decides which are stored; the message says each code.
CODES = [f"Ana knows {hashlib.sha1(str(n).encode()).hexdigest()[:16]}" for n in range(38)]
CODES_MESSAGE = f"{MESSAGE}. She knows the codes {', '.join(code.split()[-1] for code in CODES)}"


def nested(depth: int) -> str:
    return '{"entities": [], "facts": ' + "[" * depth + "]" * depth + ', "relations": []}'


# The blind path's answers, for cases whose informed answer cannot be read at all.
BLIND: dict[str, list[ScriptedResponse]] = {
    "entity_scan": [{"entities": [{"name": "Ana", "type": "person"}]}],
    "fact_extraction": [{"facts": [fact(JAZZ)]}],
    "relation_extraction": [{"relations": []}],
}


@dataclass(frozen=True)
class Case:
    """One write whose answers are wrong in one way, and what must come of it."""

    script: dict[str, list[ScriptedResponse]]
    stored: Sequence[str]  # current fact texts after the write
    success: bool
    error: str = ""  # in result.error ("" when success)
    prior: str | None = None  # a message written first (its answers come first in the script)
    embedder: Callable[[], EmbeddingProvider] = HashEmbedder
    trace: tuple[str, str, str] | None = None  # (step, data key, text in it)
    message: str = MESSAGE


def one_write(answer: ScriptedResponse, **more: list[ScriptedResponse]) -> dict[str, list[ScriptedResponse]]:
    return {"informed_extraction": [answer], **more}


def about(name: str, text: str, **extra: Any) -> dict[str, Any]:
    """An answer with one person and one fact about them."""
    return {"entities": [{"name": name, "type": "person"}], "facts": [fact(text, name, **extra)], "relations": []}


# No decision in the second answer (an older prompt's "NEW"): the reconciliation call decides, and its verdict is bad.
PORTO, PORTO_ALEGRE = about("Ana", "Ana visited Porto"), about("Ana", "Ana visited Porto Alegre")
GUILHERME, GUILI = about("Guilherme", "Guilherme plays chess"), about("Guili", "Guili arrived late")


def guili_embedder() -> EmbeddingProvider:
    """Guili's name sits in the ambiguous band (cosine 0.70) of Guilherme's: phase 3 asks the LLM."""
    return HashEmbedder(overrides={"Guilherme": vector_at(1.0), "Guili": vector_at(0.70)})


def reconciled(verdict: ScriptedResponse, error: str) -> Case:
    return Case(
        {"informed_extraction": [PORTO, PORTO_ALEGRE], "reconciliation": [verdict]},
        ["Ana visited Porto", "Ana visited Porto Alegre"],
        False,
        error,
        prior="Ana visited Porto",
        message="Ana visited Porto Alegre",
    )


def resolved(verdict: ScriptedResponse, error: str) -> Case:
    return Case(
        {"informed_extraction": [GUILHERME, GUILI], "entity_resolution": [verdict]},
        ["Guilherme plays chess", "Guili arrived late"],
        False,
        error,
        prior="Guilherme plays chess",
        embedder=guili_embedder,
        message="Guili arrived late",
    )


LLM_CASES: dict[str, Case] = {
    "blank-subject": Case(one_write(informed(fact("Nobody knows", "   "))), [JAZZ, PIANO], False, "facts[2].subject"),
    "blank-entity-name": Case(
        one_write(informed(entities=[{"name": "Ana", "type": "person"}, {"name": " \t", "type": "person"}])),
        [JAZZ, PIANO],
        False,
        "1 entities dropped as malformed",
    ),
    "blank-relation-endpoint": Case(
        one_write({**informed(), "relations": [{"source": "Ana", "target": "  ", "type": "likes"}]}),
        [JAZZ, PIANO],
        False,
        "relations[0].target",
    ),
    "blank-profile-key": Case(
        one_write(informed(updated_profiles={" ": "Someone.", "Ana": "Ana is a jazz fan."})),
        [JAZZ, PIANO],
        False,
        "1 updated_profiles dropped as malformed",
    ),
    "impossible-date": Case(
        one_write(informed(fact("Ana moved to Lyon", valid_from="2025-13-45"))), [JAZZ, PIANO], False, "valid_from"
    ),
    "relative-date-word": Case(
        one_write(informed(fact("Ana moved to Lyon", valid_from="yesterday"))), [JAZZ, PIANO], False, "valid_from"
    ),
    "date-beyond-utc": Case(
        one_write(informed(fact("Ana moved to Lyon", valid_from="9999-12-31T23:00:00-14:00"))),
        [JAZZ, PIANO],
        False,
        "out of range in UTC",
    ),
    "nan-confidence": Case(
        one_write(informed(fact("Ana hates opera", confidence=math.nan))), [JAZZ, PIANO], False, "finite number"
    ),
    "infinite-confidence": Case(
        one_write(informed(fact("Ana hates opera", confidence=math.inf))), [JAZZ, PIANO], False, "finite number"
    ),
    "nan-emotion": Case(
        one_write(informed(emotion={"label": "joy", "intensity": math.nan})),
        [JAZZ, PIANO],
        False,
        "emotion dropped as malformed",
    ),
    "fact-without-text": Case(one_write(informed({"subject": "Ana"})), [JAZZ, PIANO], False, "facts[2].text"),
    "unknown-action": Case(
        one_write(informed(fact("Ana hates opera", action="MAYBE"))), [JAZZ, PIANO], False, "facts[2].action"
    ),
    "fact-not-an-object": Case(one_write(informed("Ana hates opera")), [JAZZ, PIANO], False, "facts[2]"),
    "facts-past-the-cap": Case(
        one_write(informed(*(fact(code) for code in CODES))),
        [JAZZ, PIANO, *CODES[:28]],
        False,
        "10 facts beyond the cap of 30 dropped",
        message=CODES_MESSAGE,
    ),
    "entities-past-the-cap": Case(
        one_write(informed(entities=[{"name": f"Band {n}", "type": "organization"} for n in range(25)])),
        [JAZZ, PIANO],
        False,
        "5 entities beyond the cap of 20 dropped",
    ),
    "nul-and-lone-surrogate-in-text": Case(
        one_write(informed(fact("Ana sings\u0000 in a choir \ud800"))),
        [JAZZ, PIANO, "Ana sings in a choir \ufffd"],
        True,
        message="Ana loves jazz, plays the piano and sings in a choir",
    ),
    "nul-in-an-unreadable-answer": Case(
        one_write("Sorry \u0000 \ud800 no JSON here", **BLIND),
        [JAZZ],
        True,
        trace=("extraction", "fallback_reason", "no JSON object"),
    ),
    "nesting-deeper-than-the-parser": Case(
        one_write(nested(100_000), **BLIND), [JAZZ], True, trace=("extraction", "fallback_reason", "nested too deeply")
    ),
    "reconciliation-target-superscript-two": reconciled(
        {"action": "UPDATE", "target": "²"}, "LLM said UPDATE with target '²', not one shown; ADD instead"
    ),
    "reconciliation-target-not-shown": reconciled({"action": "DELETE", "target": "7"}, "target '7', not one shown"),
    "reconciliation-noop-without-target": reconciled({"action": "NOOP", "target": "null"}, "target None"),
    "reconciliation-answer-off-shape": reconciled({"verdict": "same"}, "does not fit ReconciliationResponse"),
    "resolution-match-superscript-two": resolved({"match": "²"}, "'Guili': LLM answered '²', not one of the"),
    "resolution-match-not-shown": resolved({"match": "4"}, "'Guili': LLM answered '4'"),
}


class BadEmbedder:
    """An EmbeddingProvider whose every vector is spoiled by `spoil` (or whose batch is replaced by it)."""

    def __init__(self, spoil: Callable[[list[list[float]]], Any]) -> None:
        self._inner = HashEmbedder()
        self._spoil = spoil

    @property
    def dimensions(self) -> int:
        return self._inner.dimensions

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        spoiled: list[list[float]] = self._spoil(await self._inner.embed(texts))
        return spoiled


def each(change: Callable[[list[float]], Any]) -> Callable[[], EmbeddingProvider]:
    return lambda: BadEmbedder(lambda vectors: [change(vector) for vector in vectors])


def embedder_case(make: Callable[[], EmbeddingProvider], problem: str) -> Case:
    """A bad vector is a failed embedding: the event is stored without one, the facts without theirs."""
    return Case(one_write(informed()), [JAZZ, PIANO], False, problem, embedder=make)


EMBEDDER_CASES: dict[str, Case] = {
    "wrong-size": embedder_case(each(lambda v: v[:10]), "vector 1 of 1 has 10 dimensions, expected 1536"),
    "nan": embedder_case(each(lambda v: [math.nan, *v[1:]]), "holds NaN or infinity"),
    "plus-infinity": embedder_case(each(lambda v: [*v[:-1], math.inf]), "holds NaN or infinity"),
    "empty-vector": embedder_case(each(lambda v: []), "has 0 dimensions"),
    "all-zeros": embedder_case(each(lambda v: [0.0] * len(v)), "is all zeros"),
    "not-numbers": embedder_case(each(lambda v: [None] * len(v)), "is not a list of numbers"),
    "fewer-vectors-than-texts": embedder_case(lambda: BadEmbedder(lambda vectors: vectors[1:]), "0 vectors for 1"),
    "no-list-at-all": embedder_case(lambda: BadEmbedder(lambda vectors: None), "expected a list of vectors"),
}


async def write_case(memory: MemoryClient, agent_id: str, case: Case) -> Any:
    if case.prior is not None:
        first = await memory.write(agent_id, case.prior, speaker_name="Rafael", occurred_at=WHEN)
        assert first.success, first.error
    return await memory.write(agent_id, case.message, speaker_name="Rafael", occurred_at=LATER, verbose=True)


@pytest.mark.parametrize("case", [*LLM_CASES.values(), *EMBEDDER_CASES.values()], ids=[*LLM_CASES, *EMBEDDER_CASES])
async def test_bad_answer_loses_only_what_is_bad_and_says_so(
    make_client: ClientFactory, agent_id: str, case: Case
) -> None:
    llm = ScriptedLLM(case.script)
    async with make_client(llm, embedder=case.embedder()) as memory:
        result = await write_case(memory, agent_id, case)

        assert result.event_id is not None
        assert (await memory.get_events(agent_id))[-1].id == result.event_id
        assert sorted(f.text for f in await memory.get_facts(agent_id)) == sorted(case.stored)
        assert result.success is case.success, result.error
        if case.success:
            assert result.error is None
        else:
            assert result.error is not None and case.error in result.error
        trace = await memory.get_trace(agent_id, result.event_id)
        assert trace is not None
        if case.trace is not None:
            step, key, text = case.trace
            assert text in str(trace.step(step).data.get(key))
        await assert_memory_invariants(memory, agent_id)


async def test_ten_thousand_facts_store_the_cap_quickly_and_say_how_many_were_dropped(
    make_client: ClientFactory, agent_id: str
) -> None:
    flood = informed(*(fact(f"Ana knows {hashlib.sha1(str(n).encode()).hexdigest()}") for n in range(10_000)))
    async with make_client(ScriptedLLM(one_write(flood))) as memory:
        started = time.perf_counter()
        result = await memory.write(agent_id, MESSAGE, speaker_name="Rafael", occurred_at=WHEN)
        elapsed = time.perf_counter() - started

        assert elapsed < 5, f"{elapsed:.1f} s"
        assert not result.success
        assert result.error is not None and "9972 facts beyond the cap of 30 dropped" in result.error
        assert len(await memory.get_facts(agent_id)) <= 30
        await assert_memory_invariants(memory, agent_id)


async def test_names_without_letters_or_digits_stay_apart(make_client: ClientFactory, agent_id: str) -> None:
    said = {"😀": "plays chess", "🙂": "sings in a choir", "🍕": "is always hungry", "🎉": "organised the party"}
    answer = {
        "entities": [{"name": name, "type": "person"} for name in said],
        "facts": [fact(f"{name} {what}", name) for name, what in said.items()],
        "relations": [],
    }
    async with make_client(ScriptedLLM(one_write(answer))) as memory:
        message = ", ".join(f"{name} {what}" for name, what in said.items())  # facts come from the message
        result = await memory.write(agent_id, message, speaker_name="Rafael", occurred_at=WHEN)

        assert result.success, result.error
        keys = {e.key for e in result.entities_resolved}
        assert len(keys) == 4 and "person:" not in keys
        assert {f.entity_key for f in await memory.get_facts(agent_id)} == keys
        await assert_memory_invariants(memory, agent_id)


# --- an LLM call that fails outright, at each stage --------------------------------------------------------------


class HTTPStatusError(Exception):
    """What a custom provider built on an HTTP client might raise."""

    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status


async def _never_answers(request: LLMRequest) -> ScriptedResponse:
    await asyncio.sleep(5)
    return {}


FAULTS: dict[str, ScriptedResponse | Callable[[LLMRequest], Any]] = {
    "timeout": _never_answers,
    "rate-limited-429": HTTPStatusError(429),
    "server-error-500": ProviderError("HTTP 500 Internal Server Error"),
    "any-exception": RuntimeError("connection reset by peer"),
}


@dataclass(frozen=True)
class Stage:
    """A write whose `purpose` call fails, and what must come of it."""

    script: dict[str, list[ScriptedResponse]]
    stored: Sequence[str]
    success: bool
    error: str  # in result.error when not success, else in the extraction trace's fallback_reason
    prior: str | None = None
    message: str = MESSAGE
    embedder: Callable[[], EmbeddingProvider] = HashEmbedder


INFORMED_DOWN: list[ScriptedResponse] = [ProviderError("informed extraction down")]
STAGES: dict[str, Stage] = {
    # The blind path gives the same memory (seeds/002: "O resultado final é equivalente"): not a failure.
    "informed_extraction": Stage(BLIND, [JAZZ], True, "informed extraction failed"),
    "entity_scan": Stage({"informed_extraction": INFORMED_DOWN}, [], False, "extraction failed on both paths"),
    "fact_extraction": Stage(
        {
            "informed_extraction": INFORMED_DOWN,
            "entity_scan": BLIND["entity_scan"],
            "relation_extraction": [{"relations": []}],
        },
        [],
        False,
        "extraction failed on both paths",
    ),
    "relation_extraction": Stage(
        {
            "informed_extraction": INFORMED_DOWN,
            "entity_scan": BLIND["entity_scan"],
            "fact_extraction": BLIND["fact_extraction"],
        },
        [JAZZ],
        False,
        "relation extraction failed, facts kept without relations",
    ),
    "entity_resolution": Stage(
        {"informed_extraction": [GUILHERME, GUILI]},
        ["Guilherme plays chess", "Guili arrived late"],
        False,
        "entity_resolution: 'Guili': LLM resolution failed, new entity",
        prior="Guilherme plays chess",
        message="Guili arrived late",
        embedder=guili_embedder,
    ),
    "reconciliation": Stage(
        {"informed_extraction": [PORTO, PORTO_ALEGRE]},
        ["Ana visited Porto", "Ana visited Porto Alegre"],
        False,
        "reconciliation: 'Ana visited Porto Alegre': LLM failed",
        prior="Ana visited Porto",
        message="Ana visited Porto Alegre",
    ),
}


@pytest.mark.parametrize("fault", FAULTS.values(), ids=FAULTS.keys())
@pytest.mark.parametrize("purpose", STAGES.keys())
async def test_failing_llm_call_keeps_the_event_and_reports_the_stage(
    make_client: ClientFactory, agent_id: str, purpose: str, fault: Any
) -> None:
    stage = STAGES[purpose]
    script: dict[str, Any] = {**stage.script, purpose: fault if callable(fault) else [fault]}
    async with make_client(ScriptedLLM(script), embedder=stage.embedder()) as memory:
        if stage.prior is not None:
            first = await memory.write(agent_id, stage.prior, speaker_name="Rafael", occurred_at=WHEN)
            assert first.success, first.error
        result = await memory.write(
            agent_id,
            stage.message,
            speaker_name="Rafael",
            occurred_at=LATER,
            verbose=True,
            config_overrides={"extraction_timeout_sec": 0.3},
        )

        assert result.event_id is not None and (await memory.get_events(agent_id))[-1].id == result.event_id
        assert result.success is stage.success, result.error
        if stage.success:
            assert result.error is None
            assert result.pipeline is not None
            assert stage.error in result.pipeline.step("extraction").data["fallback_reason"]
        else:
            assert result.error is not None and stage.error in result.error
        assert sorted(f.text for f in await memory.get_facts(agent_id)) == sorted(stage.stored)
        assert await memory.get_trace(agent_id, result.event_id) is not None
        await assert_memory_invariants(memory, agent_id)
