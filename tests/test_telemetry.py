"""OpenTelemetry spans of a write, recorded with the SDK's in-memory exporter on the real write path."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel tests need opentelemetry-sdk (the dev extra)")

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
from opentelemetry.trace import Link, SpanKind, StatusCode
from opentelemetry.util.types import Attributes

from memory_sdk import MemoryConfig
from memory_sdk.errors import StorageError
from memory_sdk.pipeline.runner import STAGES
from memory_sdk.store import registry
from memory_sdk.telemetry import STAGE_SPAN_PREFIX, WRITE_SPAN
from tests.conftest import ClientFactory
from tests.scripts import CLARA_EXTRACTION, CLARA_MESSAGE
from tests.test_cost import PricedScriptedLLM, write_clara

WHEN = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
STAGE_NAMES = [name for name, _ in STAGES]


class Switch(Sampler):
    """Records spans only while on: the global tracer provider can be set once per process, and the tests of
    other modules should not pay for spans nobody reads."""

    on = False

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: Any = None,
    ) -> SamplingResult:
        return SamplingResult(Decision.RECORD_AND_SAMPLE if self.on else Decision.DROP, attributes)

    def get_description(self) -> str:
        return "Switch"


SWITCH = Switch()
EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The in-memory exporter of a tracer provider that records for this test only."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider(sampler=SWITCH)
        provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
        trace.set_tracer_provider(provider)
    EXPORTER.clear()
    SWITCH.on = True
    try:
        yield EXPORTER
    finally:
        SWITCH.on = False
        EXPORTER.clear()


def by_name(finished: Sequence[ReadableSpan]) -> dict[str, ReadableSpan]:
    return {span.name: span for span in finished}


def every_attribute_value(finished: Sequence[ReadableSpan]) -> list[str]:
    values = [str(value) for span in finished for value in (span.attributes or {}).values()]
    values += [span.status.description or "" for span in finished]
    values += [str(event.attributes) for span in finished for event in span.events]
    return values


async def test_a_write_is_one_span_with_a_child_span_per_stage_carrying_calls_tokens_and_cost(
    make_client: ClientFactory, agent_id: str, spans: InMemorySpanExporter
) -> None:
    llm = PricedScriptedLLM({"informed_extraction": [CLARA_EXTRACTION]})
    result = await write_clara(make_client, agent_id, llm)
    assert result.cost is not None

    finished = spans.get_finished_spans()
    assert sorted(span.name for span in finished) == sorted([WRITE_SPAN] + [STAGE_SPAN_PREFIX + s for s in STAGE_NAMES])
    named = by_name(finished)
    write = named[WRITE_SPAN]
    assert write.parent is None or write.parent.span_id != write.context.span_id
    for stage in STAGE_NAMES:
        child = named[STAGE_SPAN_PREFIX + stage]
        assert child.parent is not None and child.parent.span_id == write.context.span_id, stage
        assert child.context.trace_id == write.context.trace_id
        assert child.attributes is not None and child.attributes["memory_sdk.stage"] == stage
        assert child.attributes["memory_sdk.stage.status"] == "ok", stage

    assert write.attributes is not None
    assert write.attributes["memory_sdk.agent_id"] == agent_id
    assert write.attributes["memory_sdk.dry_run"] is False
    assert write.attributes["memory_sdk.extraction_path"] == "informed"
    assert write.attributes["memory_sdk.success"] is True
    assert write.attributes["memory_sdk.llm_calls"] == result.llm_calls == 1
    assert write.attributes["gen_ai.usage.input_tokens"] == result.tokens_used.input_tokens > 0
    assert write.attributes["gen_ai.usage.output_tokens"] == result.tokens_used.output_tokens > 0
    assert write.attributes["memory_sdk.cost.amount"] == pytest.approx(float(result.cost.amount))
    assert write.attributes["memory_sdk.cost.currency"] == "USD"
    assert write.attributes["memory_sdk.facts_added"] == len(result.facts_added) == 3
    assert write.status.status_code is not StatusCode.ERROR
    assert "error.type" not in write.attributes

    extraction = named[STAGE_SPAN_PREFIX + "extraction"].attributes
    assert extraction is not None
    assert extraction["memory_sdk.llm_calls"] == 1
    assert extraction["gen_ai.usage.input_tokens"] == result.tokens_used.input_tokens
    assert extraction["memory_sdk.cost.amount"] == pytest.approx(float(result.cost.amount))
    upsert = named[STAGE_SPAN_PREFIX + "upsert"].attributes
    assert upsert is not None and upsert["memory_sdk.llm_calls"] == 0


async def test_the_message_text_is_on_no_span_unless_enabled(
    make_client: ClientFactory, agent_id: str, spans: InMemorySpanExporter
) -> None:
    llm = PricedScriptedLLM({"informed_extraction": [CLARA_EXTRACTION, CLARA_EXTRACTION]})
    await write_clara(make_client, agent_id, llm, dry_run=True)
    finished = spans.get_finished_spans()
    assert not [value for value in every_attribute_value(finished) if "Vertix" in value]
    dry = by_name(finished)[WRITE_SPAN].attributes
    assert dry is not None and dry["memory_sdk.dry_run"] is True and "memory_sdk.message" not in dry
    spans.clear()

    await write_clara(make_client, agent_id, llm, MemoryConfig(trace_message_text=True), dry_run=True)
    write = by_name(spans.get_finished_spans())[WRITE_SPAN]
    assert write.attributes is not None and write.attributes["memory_sdk.message"] == CLARA_MESSAGE


async def test_a_stage_that_raises_marks_its_span_and_the_write_span_failed_with_the_error_type(
    make_client: ClientFactory, agent_id: str, spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def refused(*args: object, **kwargs: object) -> None:
        raise StorageError(f"the database refused the lookup of {CLARA_MESSAGE!r}")

    monkeypatch.setattr(registry, "find_entities", refused)
    async with make_client(PricedScriptedLLM()) as memory:
        result = await memory.write(agent_id, CLARA_MESSAGE, speaker_name="Rafael", occurred_at=WHEN)
    assert not result.success and result.error is not None and "alias_lookup" in result.error

    finished = spans.get_finished_spans()
    named = by_name(finished)
    failed = named[STAGE_SPAN_PREFIX + "alias_lookup"]
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.attributes is not None and failed.attributes["error.type"] == "StorageError"
    assert failed.attributes["memory_sdk.stage.status"] == "failed"
    # The stages after it are skipped: they never ran, so they have no span.
    assert STAGE_SPAN_PREFIX + "extraction" not in named
    write = named[WRITE_SPAN]
    assert write.status.status_code is StatusCode.ERROR
    assert write.attributes is not None and write.attributes["error.type"] == "StorageError"
    assert write.attributes["memory_sdk.success"] is False
    # The error's message quotes the user's words: not on a span by default.
    assert not [value for value in every_attribute_value(finished) if "Vertix" in value]


async def test_a_sampled_out_write_records_nothing(
    make_client: ClientFactory, agent_id: str, spans: InMemorySpanExporter
) -> None:
    SWITCH.on = False  # the provider's sampler drops every span
    llm = PricedScriptedLLM({"informed_extraction": [CLARA_EXTRACTION]})
    await write_clara(make_client, agent_id, llm)
    assert spans.get_finished_spans() == ()


NO_OP_CHECK = """
import sys
{block}
from memory_sdk import telemetry
from memory_sdk.config import MemoryConfig
from memory_sdk.results import TraceStep
assert not telemetry._enabled()
assert telemetry.write_span(None, MemoryConfig()) is telemetry._NO_WRITE_SPAN
with telemetry.write_span(None, MemoryConfig()) as span:
    assert span is telemetry._NO_SPAN
    assert telemetry.stage_span("extraction", TraceStep(name="extraction"), MemoryConfig()) is telemetry._NO_STAGE_SPAN
print("no-op")
"""


@pytest.mark.parametrize(
    "block",
    [
        pytest.param("", id="no-tracer-provider"),
        pytest.param("sys.modules['opentelemetry'] = None  # as if the otel extra were not installed", id="no-otel"),
    ],
)
def test_without_opentelemetry_or_a_tracer_provider_the_hooks_are_shared_no_ops(block: str) -> None:
    ran = subprocess.run(
        [sys.executable, "-c", NO_OP_CHECK.format(block=block)], capture_output=True, text=True, check=False
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "no-op"
