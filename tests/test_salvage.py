"""An answer cut at the output cap keeps its complete items (issue 11, item 0; issue 13, item 4).

The pure reading of a cut answer (complete_part) is cut at every character of real answers and checked against an
independent model of the rule (what a cut at that position leaves whole); then salvage_response (repeats, schema),
stop_reason (when a streamed answer is not worth reading on), the provider boundary (ScriptedLLM's CutAtCap,
OpenAIProvider on finish_reason "length" against tests/openai_server.py) and the write: one call instead of four,
the complete facts stored, the cut reported.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from memory_sdk.demo.replay import RecordingLLM, ReplayLLM
from memory_sdk.errors import InvalidResponse
from memory_sdk.llm.openai import REPAIR_NUDGE, OpenAIProvider
from memory_sdk.llm.parsing import REPEATS_TO_STOP, complete_part, salvage_response, stop_reason
from memory_sdk.llm.protocols import ChatMessage, Truncation
from memory_sdk.llm.schemas import (
    EntityScanResponse,
    FactExtractionResponse,
    InformedExtractionResponse,
    ProfileConsolidationResponse,
    ReconciliationBatchResponse,
    ReconciliationResponse,
)
from memory_sdk.results import TokenUsage, WriteResult
from memory_sdk.testing import CutAtCap, ScriptedLLM
from tests.conftest import ClientFactory
from tests.openai_server import FakeOpenAIServer, Reply

# Answers of qwen2.5-coder-1.5b-instruct recorded by the demo (memory_sdk/demo/recorded.json and the prompt v8 run).
REAL_INFORMED = (
    '{"entities": [{"name": "Rafael", "type": "person", "aliases": []}, {"name": "Guilherme", "type": "person", '
    '"aliases": []}, {"name": "Curitiba", "type": "place", "aliases": []}, {"name": "São Paulo", "type": "place", '
    '"aliases": []}, {"name": "Acme", "type": "organization", "aliases": []}, {"name": "engenheiro de dados", '
    '"type": "job_title", "aliases": []}], "facts": [{"subject": "Rafael", "text": "Rafael mudeu pra São Paulo '
    'ontem", "action": "ADD", "importance_category": "routine_activity", "confidence": 0.95, "valid_from": '
    '"2025-06-15", "evidence": "Me mudei pra São Paulo ontem."}, {"subject": "Guilherme", "text": "Guilherme falou '
    'com Rafael sobre o projeto", "action": "ADD", "importance_category": "relationship_change", "confidence": '
    '0.95, "attribute": "friend_of", "evidence": "Rafael falou com o Guilherme sobre o projeto"}], "relations": '
    '[{"source": "Rafael", "target": "São Paulo", "type": "lives_in"}, {"source": "Guilherme", "target": "Rafael", '
    '"type": "friend_of"}], "updated_profiles": {"Rafael": "Lives in São Paulo, works at Acme as engenheiro de '
    'dados."}, "emotion": {"label": "happy", "intensity": 0.5, "energy": 0.6}}'
)
REAL_GUILHERME = (
    '{"entities": [{"name": "Rafael", "type": "person", "aliases": []}, {"name": "Guilherme Maturana", "type": '
    '"person", "aliases": ["Guilherme", "Guilherme M.", "Guilherme Maturana", "Guilherme M. M."]}, {"name": '
    '"project", "type": "concept", "aliases": []}], "facts": [{"subject": "Rafael", "text": "Rafael falei com o '
    'Guilherme sobre o projeto", "action": "NEW", "importance_category": "routine_activity", "confidence": 0.95, '
    '"evidence": "<<<Falei com o Guili sobre o projeto. O Guilherme disse que tá no prazo.>>>"}], "relations": '
    '[{"source": "Rafael", "target": "Guilherme Maturana", "type": "friend_of"}], "updated_profiles": {}, '
    '"emotion": {"label": "neutral", "intensity": 0.5, "energy": 0.5}}'
)
REAL_FACTS = (
    '{"facts": [{"subject": "Guilherme Maturana", "text": "Guilherme Maturana is leading the new project.", '
    '"action": "NEW", "importance_category": "relationship_change", "confidence": 0.95, "attribute": "employer", '
    '"evidence": "Meu amigo Guili (Guilherme Maturana) está liderando o projeto novo."}]}'
)
# Strings holding every character that could fool a scanner, nested arrays, numbers a cut can shorten, a loop.
TRICKY: dict[str, Any] = {
    "entities": [
        {"name": 'Ana "Aninha" [the elder] {x}', "aliases": ["a\\b", "line\nbreak", "tab\there", "é 😀 }]"]},
        {"name": "Rui", "aliases": [], "scores": [[1, 2.5], [-3e-2, [4, [5]]]]},
    ],
    "counts": [12, 3.75, -40, 1e21],
    "flags": [True, False, None],
    "facts": [{"subject": "Ana", "text": 'Ana said "]}, {" twice'}] * 3 + [{"subject": "Rui", "text": "x"}],
    "note": 'a string member: {"facts": [',
    "relations": [],
}


def serialised_with_cuts(answer: dict[str, Any], ensure_ascii: bool) -> tuple[str, list[tuple[int, str, int]]]:
    """`json.dumps(answer)` and where each value ends: (end, key, index of the element or -1 for the member)."""
    text, ends = "{", []
    for number, (key, value) in enumerate(answer.items()):
        text += (", " if number else "") + json.dumps(key, ensure_ascii=ensure_ascii) + ": "
        if isinstance(value, list):
            text += "["
            for index, element in enumerate(value):
                text += (", " if index else "") + json.dumps(element, ensure_ascii=ensure_ascii)
                ends.append((len(text), key, index))
            text += "]"
        else:
            text += json.dumps(value, ensure_ascii=ensure_ascii)
        ends.append((len(text), key, -1))
    text += "}"
    assert text == json.dumps(answer, ensure_ascii=ensure_ascii)
    return text, ends


def whole_at(cut: int, end: int, value: Any) -> bool:
    """A value ending at `end` is whole in a text cut at `cut`; a number only once the character after it came."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    return end < cut if number else end <= cut


def expected_at(answer: dict[str, Any], ends: list[tuple[int, str, int]], cut: int) -> dict[str, Any] | None:
    """The rule, modelled apart from the parser: members whole before the cut, then the whole elements of the
    array the cut fell in (none: the member goes); None before the object has begun."""
    if cut == 0:
        return None
    kept: dict[str, Any] = {}
    for end, key, index in ends:
        value = answer[key] if index < 0 else answer[key][index]
        if not whole_at(cut, end, value):
            break
        if index < 0:
            kept[key] = value
        else:
            kept.setdefault(key, []).append(value)
    return kept


def items_in(part: dict[str, Any] | None) -> int:
    return sum(len(value) for value in (part or {}).values() if isinstance(value, list))


def assert_honest_at_every_cut(answer: dict[str, Any], *, ensure_ascii: bool = False) -> None:
    text, ends = serialised_with_cuts(answer, ensure_ascii)
    previous_items = 0
    for cut in range(len(text) + 1):
        got = complete_part(text[:cut])
        assert got == expected_at(answer, ends, cut), f"cut at {cut}: ...{text[max(0, cut - 40) : cut]!r}"
        assert items_in(got) >= previous_items, f"cut at {cut} kept fewer items than a shorter cut"
        previous_items = items_in(got)


@pytest.mark.parametrize("text", [REAL_INFORMED, REAL_GUILHERME, REAL_FACTS], ids=["informed", "aliases", "facts"])
def test_a_real_answer_cut_anywhere_keeps_exactly_its_whole_items(text: str) -> None:
    assert_honest_at_every_cut(json.loads(text))


@pytest.mark.parametrize("ensure_ascii", [False, True], ids=["utf8", "ascii-escapes"])
def test_brackets_quotes_escapes_nested_arrays_and_numbers_never_leave_half_a_value(ensure_ascii: bool) -> None:
    assert_honest_at_every_cut(TRICKY, ensure_ascii=ensure_ascii)


def test_a_cut_number_is_not_kept_until_the_text_shows_where_it_ends() -> None:
    assert complete_part('{"counts": [12, 3') == complete_part('{"counts": [12, ') == {"counts": [12]}
    assert complete_part('{"counts": [12, 3]') == {"counts": [12, 3]}
    assert complete_part('{"counts": [12], "n": 0.9') == {"counts": [12]}


def test_pretty_printed_answer_cut_anywhere_keeps_only_original_items_in_order() -> None:
    answer = json.loads(REAL_INFORMED)
    text = json.dumps(answer, indent=2, ensure_ascii=False)
    previous_items = 0
    for cut in range(len(text) + 1):
        part = complete_part(text[:cut]) or {}
        for position, (key, value) in enumerate(part.items()):
            original = answer[key]
            assert list(answer)[position] == key  # members in order, none skipped
            assert value == original or (isinstance(value, list) and value == original[: len(value)]), cut
        assert items_in(part) >= previous_items, f"cut at {cut} lost the items a shorter cut kept"
        previous_items = items_in(part)
    assert previous_items == 10  # all of it at the full length: 6 entities, 2 facts, 2 relations


def test_a_loop_keeps_one_copy_of_each_item_and_counts_the_repeats() -> None:
    fact = {"subject": "Melanie", "text": "Melanie paints sunsets"}
    other = {"subject": "Melanie", "text": "Melanie paints lakes"}
    loop = json.dumps({"facts": [fact, other, *[fact, other] * 20]})[:-30]

    text, truncation = salvage_response(loop, FactExtractionResponse)

    assert json.loads(text) == {"facts": [fact, other]}
    assert truncation == Truncation(items_kept=2, repeats_dropped=39)  # 41 whole items, the 42nd cut


def test_a_repeat_is_the_same_item_written_again_whatever_its_case_spaces_or_other_fields() -> None:
    first = {"subject": "Melanie", "text": "Melanie paints sunsets", "confidence": 0.9}
    again = {"subject": "melanie", "text": "Melanie  paints SUNSETS", "action": "ADD"}
    other = {"subject": "Melanie", "text": "Melanie paints lakes"}
    cut = json.dumps({"facts": [first, again, other, first]})[:-2]

    text, truncation = salvage_response(cut, FactExtractionResponse)

    assert json.loads(text) == {"facts": [first, other]}
    assert truncation == Truncation(items_kept=2, repeats_dropped=2)


@pytest.mark.parametrize(
    "wrap",
    [
        lambda text: "```json\n" + text,
        lambda text: "<think>Entities first: [Ana], {x}.</think>\n" + text,
        lambda text: "Here is the JSON:\n```\n" + text,
    ],
    ids=["open-fence", "think-block", "chatter-and-fence"],
)
def test_wrappings_before_a_cut_answer_are_read_past(wrap: Any) -> None:
    for cut in range(0, len(REAL_FACTS) + 1, 7):
        assert complete_part(wrap(REAL_FACTS[:cut])) == complete_part(REAL_FACTS[:cut])


@pytest.mark.parametrize(
    ("text", "schema"),
    [
        ("", EntityScanResponse),
        ("I think the entities are", EntityScanResponse),
        ('{"entities": [{"name": "Melanie", "type": "person", "aliases": [' + '"Mel", ' * 50, EntityScanResponse),
        ('{"entities": [], "facts": [], "relations": [], "emotion": {"label": "ha', InformedExtractionResponse),
        ('<think>Maybe {"entities": [{"name": "Mel"}, {"name": "Ana"}], "facts": [', InformedExtractionResponse),
        ('{"profile": "Melanie paints sunsets and', ProfileConsolidationResponse),
        ('{"facts": [{"subject": "Ana"}}, {"subject": "Rui", "te', FactExtractionResponse),
    ],
    ids=["empty", "prose", "one-item-looping", "empty-lists", "cut-thinking", "no-array", "bad-json-before-cut"],
)
def test_no_complete_item_is_an_invalid_response(text: str, schema: type[Any]) -> None:
    with pytest.raises(InvalidResponse, match="no complete item"):
        salvage_response(text, schema)


def test_verdicts_read_by_position_keep_their_repeats() -> None:
    verdicts = [{"action": "ADD"}, {"action": "ADD"}, {"action": "UPDATE", "target": "2"}, {"action": "NOOP"}]
    cut = json.dumps({"decisions": verdicts})[:-20]

    text, truncation = salvage_response(cut, ReconciliationBatchResponse)

    assert [verdict.action for verdict in ReconciliationBatchResponse.model_validate_json(text).decisions] == [
        "ADD",
        "ADD",
        "UPDATE",
    ]  # without the repeat, fact 2's verdict would go to fact 3
    assert truncation == Truncation(items_kept=3)


def test_an_answer_without_items_is_never_salvaged_so_no_default_stands_in_for_a_cut_value() -> None:
    verdict = '{"reasoning": "Melanie moved, so the old city ends.", "action": "UPDATE", "target": "3"}'
    for cut in range(len(verdict) + 1):
        with pytest.raises(InvalidResponse, match="no complete item"):
            salvage_response(verdict[:cut], ReconciliationResponse)


def test_nesting_too_deep_to_read_is_nothing_not_a_crash() -> None:
    for text in ('{"facts": [' + "[" * 100_000, '{"facts": [' + "[" * 100_000 + "]" * 100_000 + ", "):
        assert complete_part(text) is None
        with pytest.raises(InvalidResponse, match="no complete item"):
            salvage_response(text, FactExtractionResponse)


def test_informed_answer_cut_in_its_facts_keeps_them_and_says_the_relations_were_not_reached() -> None:
    cut = REAL_INFORMED[: REAL_INFORMED.index('{"subject": "Guilherme"') + 20]

    text, truncation = salvage_response(cut, InformedExtractionResponse)

    answer = InformedExtractionResponse.model_validate_json(text)
    assert [fact.text for fact in answer.facts] == ["Rafael mudeu pra São Paulo ontem"]
    assert len(answer.entities) == 6 and answer.relations == []
    assert truncation == Truncation(items_kept=7, repeats_dropped=0, not_reached=("relations",))
    assert "relations not reached" in truncation.describe()


@pytest.mark.parametrize(
    ("marker", "relations", "profiles"),
    [
        ('{"source": "Guilherme"', 1, {}),
        ('"updated_profiles": {"Rafael": "Lives', 2, {}),
        ('"emotion": {"label": "happy", "intensity": 0.5', 2, {"Rafael": "Lives in São Paulo"}),
    ],
    ids=["in-relations", "in-profiles", "in-emotion"],
)
def test_informed_answer_cut_after_its_facts_keeps_what_is_whole_and_drops_the_open_object(
    marker: str, relations: int, profiles: dict[str, str]
) -> None:
    cut = REAL_INFORMED[: REAL_INFORMED.index(marker) + len(marker)]

    text, truncation = salvage_response(cut, InformedExtractionResponse)

    answer = InformedExtractionResponse.model_validate_json(text)
    assert (len(answer.facts), len(answer.relations), answer.emotion) == (2, relations, None)
    assert all(answer.updated_profiles[name].startswith(start) for name, start in profiles.items())
    assert set(answer.updated_profiles) == set(profiles)
    assert truncation == Truncation(items_kept=8 + relations)


def test_informed_answer_cut_before_its_first_fact_is_unusable() -> None:
    for marker in ('"facts": [', '"facts": [{"subject": "Rafael", "text": "Rafael mudeu'):
        cut = REAL_INFORMED[: REAL_INFORMED.index(marker) + len(marker)]
        with pytest.raises(InvalidResponse, match="does not fit InformedExtractionResponse: facts"):
            salvage_response(cut, InformedExtractionResponse)


def test_only_the_informed_relations_may_be_unreached() -> None:
    assert InformedExtractionResponse.unreached_when_cut == ("relations",)
    for schema in (EntityScanResponse, FactExtractionResponse):
        assert schema.unreached_when_cut == ()


# -- when a streamed answer is not worth reading on (the OpenAI provider's early stop) ------------------------------


def fact(number: int) -> dict[str, str]:
    return {"subject": "Melanie", "text": f"Melanie painted picture {number}"}


def streamed(facts: list[dict[str, str]], schema_lists: str = '"entities": [], "facts": [') -> str:
    """An informed answer still coming in: its facts so far, the last one open."""
    return "{" + schema_lists + ", ".join(json.dumps(item) for item in facts) + ', {"subject": "Mel'


def test_one_repeat_is_a_slip_and_the_second_is_a_loop() -> None:
    assert REPEATS_TO_STOP == 2
    slip = streamed([fact(1), fact(2), fact(1), fact(3)])
    loop = streamed([fact(1), fact(2), fact(1), fact(2)])

    assert stop_reason(slip, InformedExtractionResponse) is None
    assert stop_reason(loop, InformedExtractionResponse) == "repeating"


def test_a_list_past_its_cap_stops_the_answer_and_one_at_its_cap_does_not() -> None:
    assert stop_reason(streamed([fact(n) for n in range(30)]), InformedExtractionResponse) is None
    assert stop_reason(streamed([fact(n) for n in range(31)]), InformedExtractionResponse) == "item cap"


def test_only_whole_items_count_towards_a_stop() -> None:
    loop = json.dumps({"facts": [fact(1), fact(1), fact(1)]})
    # Cut inside the third copy: its subject and text are there, but the item is not whole yet.
    assert stop_reason(loop[: loop.rindex("]") - 2], FactExtractionResponse) is None
    # The third copy closed: two repeats.
    assert stop_reason(loop[: loop.rindex("]")], FactExtractionResponse) == "repeating"


def test_verdicts_read_by_position_and_answers_without_lists_are_never_stopped_for_repeats() -> None:
    verdicts = '{"decisions": [' + '{"fact": 1, "action": "ADD"}, ' * 5
    assert stop_reason(verdicts, ReconciliationBatchResponse) is None
    assert stop_reason('{"reasoning": "same", "action": "NOOP"', ReconciliationResponse) is None


# -- the write, with the LLM scripted at its protocol boundary --------------------------------------------------

MESSAGE = "Melanie paints sunsets. She has two kids and a dog."
FACTS = [
    {"subject": "Melanie", "text": "Melanie paints sunsets", "action": "ADD", "evidence": "Melanie paints sunsets"},
    {"subject": "Melanie", "text": "Melanie has two kids", "action": "ADD", "evidence": "She has two kids"},
]
# The informed answer of a small model that repeats its last fact until the cap: it never reaches its relations.
RUNAWAY = json.dumps(
    {
        "entities": [{"name": "Melanie", "type": "person", "aliases": []}],
        "facts": [*FACTS, *[FACTS[1]] * 25],
        "relations": [{"source": "Melanie", "target": "Caroline", "type": "friend_of"}],
    }
)[:-120]
RUNAWAY_BEFORE_FACTS = RUNAWAY[: RUNAWAY.index('"facts"') + 12]
BLIND = {
    "entity_scan": [{"entities": [{"name": "Melanie", "type": "person"}]}],
    "fact_extraction": [{"facts": FACTS}],
    "relation_extraction": [{"relations": []}],
}


async def write(memory: Any, agent_id: str) -> WriteResult:
    return await memory.write(agent_id, MESSAGE, speaker_name="Caroline", verbose=True)


async def test_cut_informed_answer_makes_the_write_one_call_with_its_complete_facts_stored(
    make_client: ClientFactory, agent_id: str
) -> None:
    llm = ScriptedLLM({"informed_extraction": [CutAtCap(RUNAWAY)]})

    async with make_client(llm) as memory:
        result = await write(memory, agent_id)
        stored = sorted(fact.text for fact in await memory.get_facts(agent_id))

    assert (result.llm_calls, result.extraction_path) == (1, "informed")
    assert stored == ["Melanie has two kids", "Melanie paints sunsets"]
    assert not result.success  # partial: what came after the cut is lost, and the write says so
    assert result.error is not None and "informed_extraction: cut at the output cap" in result.error
    assert result.pipeline is not None
    [call] = result.pipeline.step("extraction").llm_calls
    assert (call.status, call.items_kept) == ("truncated", 3)
    assert call.error is not None and "24 repeats dropped, relations not reached" in call.error
    assert call.usage.output_tokens > 0 and result.tokens_used == call.usage
    assert result.pipeline.step("extraction").status == "partial"


async def test_cut_before_any_fact_still_falls_back_to_the_blind_path(
    make_client: ClientFactory, agent_id: str
) -> None:
    llm = ScriptedLLM({"informed_extraction": [CutAtCap(RUNAWAY_BEFORE_FACTS)], **BLIND})

    async with make_client(llm) as memory:
        result = await write(memory, agent_id)
        stored = sorted(fact.text for fact in await memory.get_facts(agent_id))

    assert (result.llm_calls, result.extraction_path) == (4, "blind")
    assert stored == ["Melanie has two kids", "Melanie paints sunsets"]
    assert result.pipeline is not None
    informed = result.pipeline.step("extraction").llm_calls[0]
    assert informed.status == "failed" and informed.usage.output_tokens > 0  # its tokens are counted all the same
    assert informed.error is not None and "does not fit InformedExtractionResponse" in informed.error


# -- the OpenAI provider on finish_reason "length", through the real client ---------------------------------------


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as fake:
        yield fake


def provider(server: FakeOpenAIServer) -> OpenAIProvider:
    return OpenAIProvider(base_url=server.base_url, api_key="sk-test", backoff_base_sec=0.01)


async def test_openai_write_with_an_answer_cut_at_the_cap_is_one_request_and_keeps_the_facts(
    server: FakeOpenAIServer, make_client: ClientFactory, agent_id: str
) -> None:
    server.script_chat(Reply.chat(RUNAWAY, input_tokens=1250, output_tokens=1000, finish_reason="length"))

    async with provider(server) as llm, make_client(llm) as memory:
        result = await write(memory, agent_id)
        stored = sorted(fact.text for fact in await memory.get_facts(agent_id))

    assert len(server.chat_requests) == 1  # no repair, no blind path
    assert (result.llm_calls, result.extraction_path) == (1, "informed")
    assert stored == ["Melanie has two kids", "Melanie paints sunsets"]
    assert result.pipeline is not None
    [call] = result.pipeline.step("extraction").llm_calls
    assert (call.status, call.items_kept, call.usage_estimated) == ("truncated", 3, False)
    assert call.usage == TokenUsage(input_tokens=1250, output_tokens=1000)  # the server's count, as usual
    assert result.tokens_used == call.usage
    assert result.error is not None and "cut at the output cap" in result.error


async def test_openai_repair_answer_cut_at_the_cap_is_salvaged_not_repaired_again(server: FakeOpenAIServer) -> None:
    cut = '{"facts": [{"subject": "Ana", "text": "Ana sings"}, {"subject": "Ana", "text": "Ana sin'
    server.script_chat(
        Reply.chat("Ana sings, I think.", input_tokens=40, output_tokens=6),
        Reply.chat(cut, input_tokens=60, output_tokens=800, finish_reason="length"),
    )

    async with provider(server) as llm:
        result = await llm.complete(
            purpose="fact_extraction",
            messages=[{"role": "user", "content": "Ana sings."}],
            response_schema=FactExtractionResponse,
        )

    assert [request.body["messages"][-1]["content"] for request in server.chat_requests][-1] == REPAIR_NUDGE
    assert len(server.chat_requests) == 2
    assert json.loads(result.text) == {"facts": [{"subject": "Ana", "text": "Ana sings"}]}
    assert result.truncation == Truncation(items_kept=1)
    assert result.usage == TokenUsage(input_tokens=100, output_tokens=806)


async def test_openai_answer_that_stops_normally_is_never_salvaged(server: FakeOpenAIServer) -> None:
    cut = '{"facts": [{"subject": "Ana", "text": "Ana sings"}, {"subject": "Ana", "text": "Ana sin'
    server.script_chat(Reply.chat(cut), Reply.chat({"facts": []}))

    async with provider(server) as llm:
        result = await llm.complete(
            purpose="fact_extraction",
            messages=[{"role": "user", "content": "Ana sings."}],
            response_schema=FactExtractionResponse,
        )

    assert len(server.chat_requests) == 2  # broken JSON that was not cut is repaired, as before
    assert result.truncation is None and json.loads(result.text) == {"facts": []}


async def test_a_recorded_cut_answer_replays_as_cut(tmp_path: Any) -> None:
    recorder = RecordingLLM(ScriptedLLM({"informed_extraction": [CutAtCap(RUNAWAY)]}))
    messages: list[ChatMessage] = [{"role": "user", "content": MESSAGE}]
    recorded = await recorder.complete(
        purpose="informed_extraction", messages=messages, response_schema=InformedExtractionResponse
    )
    recorder.save(tmp_path / "recorded.json", model="scripted")

    replayed = await ReplayLLM(tmp_path / "recorded.json").complete(
        purpose="informed_extraction", messages=messages, response_schema=InformedExtractionResponse
    )

    assert recorded.truncation == Truncation(items_kept=3, repeats_dropped=24, not_reached=("relations",))
    assert (replayed.text, replayed.truncation, replayed.stopped) == (recorded.text, recorded.truncation, None)


async def test_the_recorder_passes_stop_when_on_so_a_recorded_run_reads_as_far_as_a_plain_one(tmp_path: Any) -> None:
    """`memory-sdk demo --record` and `benchmarks/locomo.py --record` wrap the provider: without `stop_when` passed
    on, the recorded run would read every answer to its end, and record another run than the pipeline makes."""
    facts = [{"subject": "Rafael", "text": f"Rafael said line {n}", "action": "ADD"} for n in range(6)]
    recorder = RecordingLLM(ScriptedLLM({"informed_extraction": [{"entities": [], "facts": facts}]}))
    recorded = await recorder.complete(
        purpose="informed_extraction",
        messages=[{"role": "user", "content": MESSAGE}],
        response_schema=InformedExtractionResponse,
        stop_when=lambda read: "enough" if len(read.get("facts", [])) >= 2 else None,
    )
    assert recorded.truncation is not None and recorded.truncation.items_kept == 2
    assert recorded.stopped == "off the message"
    recorder.save(tmp_path / "recorded.json", model="scripted")
    replayed = await ReplayLLM(tmp_path / "recorded.json").complete(
        purpose="informed_extraction",
        messages=[{"role": "user", "content": MESSAGE}],
        response_schema=InformedExtractionResponse,
        stop_when=lambda read: None,
    )
    assert (replayed.text, replayed.truncation, replayed.stopped) == (
        recorded.text,
        recorded.truncation,
        "off the message",
    )
