"""Optional OpenTelemetry spans: one `memory_sdk.write` span per write, one `memory_sdk.stage.<name>` child per stage.

Install the `otel` extra and set a tracer provider in the application; the SDK then reports each write (agent,
extraction path, LLM calls, tokens, cost, success, error type) and each stage under it, so spans the application
already records inside a stage (an instrumented HTTP client calling the model) nest under that stage. Without
opentelemetry installed, or with no tracer provider set, every hook here is a shared no-op context manager.

The message text is never put on a span unless `MemoryConfig(trace_message_text=True)`: spans go to whatever
backend the application exports to. For the same reason an exception's message (which may quote the model's
answer, and so the user's words) is recorded only then; its type always is, as `error.type`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass

from memory_sdk.config import MemoryConfig
from memory_sdk.pipeline.state import WriteRequest
from memory_sdk.results import Cost, LLMCall, TraceStep, WriteResult

try:
    from opentelemetry import trace

    _OTEL_INSTALLED = True
except ImportError:  # the `otel` extra is not installed: every hook is a no-op
    _OTEL_INSTALLED = False

__all__ = ["STAGE_SPAN_PREFIX", "WRITE_SPAN", "WriteSpan", "stage_span", "write_span"]

WRITE_SPAN = "memory_sdk.write"
STAGE_SPAN_PREFIX = "memory_sdk.stage."
# OpenTelemetry's semantic conventions for the tokens of a generative-AI call, and for a failure's kind.
_INPUT_TOKENS = "gen_ai.usage.input_tokens"
_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
_ERROR_TYPE = "error.type"


class WriteSpan:
    """The running write's span: `finish(result)` puts the outcome on it. Disabled, it does nothing."""

    def finish(self, result: WriteResult) -> None:
        """Record what the write did: path, calls, tokens, cost, success and, for a failed write, the error type."""


_NO_SPAN = WriteSpan()
_NO_WRITE_SPAN: AbstractContextManager[WriteSpan] = nullcontext(_NO_SPAN)
_NO_STAGE_SPAN: AbstractContextManager[None] = nullcontext()


@dataclass
class _Recording(WriteSpan):
    span: trace.Span
    # The type of the exception a stage raised, if one did: the write span's error.type.
    stage_error: str | None = None

    def finish(self, result: WriteResult) -> None:
        self.span.set_attributes(
            {
                "memory_sdk.extraction_path": result.extraction_path,
                "memory_sdk.success": result.success,
                "memory_sdk.duplicate": result.duplicate,
                "memory_sdk.facts_added": len(result.facts_added),
                "memory_sdk.facts_updated": len(result.facts_updated),
                "memory_sdk.facts_deleted": len(result.facts_deleted),
                "memory_sdk.llm_calls": result.llm_calls,
                _INPUT_TOKENS: result.tokens_used.input_tokens,
                _OUTPUT_TOKENS: result.tokens_used.output_tokens,
            }
        )
        _set_cost(self.span, result.cost)
        if not result.success:
            self.span.set_attribute(_ERROR_TYPE, self.stage_error or _failure_kind(result))
            self.span.set_status(trace.StatusCode.ERROR)


_current_write: ContextVar[_Recording | None] = ContextVar("memory_sdk_current_write", default=None)


def _enabled() -> bool:
    """Spans are worth making: opentelemetry is installed and the application set a tracer provider."""
    return _OTEL_INSTALLED and not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def write_span(request: WriteRequest, config: MemoryConfig) -> AbstractContextManager[WriteSpan]:
    """The span of one write; the runner calls `finish(result)` on what it yields before leaving.

    An exception leaving the write (a reused message_id, a cancellation) marks the span failed with its type.
    """
    if not _enabled():
        return _NO_WRITE_SPAN
    return _write_span(request, config)


@contextmanager
def _write_span(request: WriteRequest, config: MemoryConfig) -> Iterator[WriteSpan]:
    tracer = trace.get_tracer("memory_sdk")
    with tracer.start_as_current_span(WRITE_SPAN, record_exception=False, set_status_on_exception=False) as span:
        if not span.is_recording():  # sampled out: nothing to put on it, no stage spans under it
            yield _NO_SPAN
            return
        span.set_attributes(
            {
                "memory_sdk.agent_id": request.agent_id,
                "memory_sdk.dry_run": request.dry_run,
                "memory_sdk.reprocess": request.event_id is not None,
            }
        )
        if config.trace_message_text:
            span.set_attribute("memory_sdk.message", request.message)
        recording = _Recording(span)
        token = _current_write.set(recording)
        try:
            yield recording
        except BaseException as exc:
            _failed(span, exc, config)
            raise
        finally:
            _current_write.reset(token)


def stage_span(name: str, step: TraceStep, config: MemoryConfig) -> AbstractContextManager[None]:
    """The span of one stage, a child of the write's; on leaving it records the step's calls, tokens and cost."""
    recording = _current_write.get()
    if recording is None:
        return _NO_STAGE_SPAN
    return _stage_span(name, step, config, recording)


@contextmanager
def _stage_span(name: str, step: TraceStep, config: MemoryConfig, recording: _Recording) -> Iterator[None]:
    tracer = trace.get_tracer("memory_sdk")
    with tracer.start_as_current_span(
        STAGE_SPAN_PREFIX + name,
        attributes={"memory_sdk.stage": name},
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield
        except BaseException as exc:
            _failed(span, exc, config)
            if recording.stage_error is None:
                recording.stage_error = _error_type(exc)
            span.set_attribute("memory_sdk.stage.status", "failed")
            raise
        else:
            span.set_attribute("memory_sdk.stage.status", step.status)
            if step.status == "failed":
                span.set_status(trace.StatusCode.ERROR)
        finally:
            _set_calls(span, step.llm_calls)
            _set_cost(span, step.cost)


def _set_calls(span: trace.Span, calls: list[LLMCall]) -> None:
    span.set_attributes(
        {
            "memory_sdk.llm_calls": len(calls),
            _INPUT_TOKENS: sum(call.usage.input_tokens for call in calls),
            _OUTPUT_TOKENS: sum(call.usage.output_tokens for call in calls),
        }
    )


def _set_cost(span: trace.Span, cost: Cost | None) -> None:
    """A cost as attributes (float amount, currency, estimated); nothing when the model has no price."""
    if cost is None:
        return
    span.set_attributes(
        {
            "memory_sdk.cost.amount": float(cost.amount),
            "memory_sdk.cost.currency": cost.currency,
            "memory_sdk.cost.estimated": cost.estimated,
        }
    )


def _failed(span: trace.Span, exc: BaseException, config: MemoryConfig) -> None:
    span.set_attribute(_ERROR_TYPE, _error_type(exc))
    span.set_status(trace.StatusCode.ERROR, str(exc) if config.trace_message_text else None)
    if config.trace_message_text:
        span.record_exception(exc)


def _error_type(exc: BaseException) -> str:
    return type(exc).__name__


def _failure_kind(result: WriteResult) -> str:
    """error.type of a failed write no stage raised in: its extraction failed, or a failure it survived."""
    return "extraction_failed" if result.extraction_path == "failed" else "partial_failure"
