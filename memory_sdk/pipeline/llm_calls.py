"""The one way the SDK calls an LLM: with the configured timeout, traced, usage summed, answer parsed.

A write's stages call it with their WriteState; consolidation with its own run (pipeline/consolidation.py): both
are a CallLedger, the little a call needs to be timed out, counted and traced.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Sequence
from dataclasses import replace
from typing import Protocol, TypeVar

from pydantic import BaseModel

from memory_sdk.config import MemoryConfig
from memory_sdk.errors import InvalidResponse, ProviderError, ProviderTimeout
from memory_sdk.llm.parsing import parse_response
from memory_sdk.llm.protocols import (
    AnswerCheck,
    ChatMessage,
    EmbeddingProvider,
    LLMProvider,
    LLMResult,
    Purpose,
    complete_reading_until,
)
from memory_sdk.llm.schemas import LLMAnswer
from memory_sdk.llm.tokens import estimate_tokens, output_cap
from memory_sdk.pipeline.state import WriteState
from memory_sdk.pricing import cost_of, price_for, provider_model
from memory_sdk.results import LLMCall, TokenUsage, TraceStep

__all__ = [
    "CallLedger",
    "call_llm",
    "embed_checked",
    "embed_texts",
    "estimate_answered_usage",
    "estimate_usage",
    "shown_index",
    "vector_problem",
]

Model = TypeVar("Model", bound=BaseModel)
Result = TypeVar("Result")


class CallLedger(Protocol):
    """Where an LLM call is accounted: the config (its timeout), the summed usage and call count, the trace step
    of the work running now, and survivable failures."""

    config: MemoryConfig
    usage: TokenUsage
    llm_calls: int

    @property
    def step(self) -> TraceStep: ...

    def fail(self, message: str) -> None: ...


async def call_llm(
    state: CallLedger,
    provider: LLMProvider,
    purpose: Purpose,
    messages: Sequence[ChatMessage],
    schema: type[Model],
    *,
    within_sec: float | None = None,
    stop_when: AnswerCheck | None = None,
) -> Model:
    """Ask `provider` for `purpose` and parse the answer into `schema`, within `within_sec` seconds (default:
    config.extraction_timeout_sec).

    Raises ProviderError (ProviderTimeout, InvalidResponse): callers decide the fallback. Either way the call is
    in the current trace step, priced (memory_sdk.pricing), and its tokens are in the write's usage: as the
    provider reported them, or, when a call timed out without a report (the timeout cuts the provider off) or a
    server reports no usage, estimated and marked so. Items the answer lost (malformed, past a list's cap, or after
    the cut of an answer cut at the output cap: a "truncated" call) are recorded as a survivable failure of the
    current stage. `stop_when` goes to a provider whose `complete` takes it (`llm.protocols.complete_reading_until`),
    which stops reading the answer once it fires; any other provider's answer is read whole.
    """
    seconds = state.config.extraction_timeout_sec if within_sec is None else within_sec
    started = time.perf_counter()
    result: LLMResult | None = None
    model = provider_model(provider)
    estimated = False
    try:
        answer = complete_reading_until(
            provider, purpose=purpose, messages=messages, response_schema=schema, stop_when=stop_when
        )
        result = await _within(answer, seconds, purpose)
        if result.usage is None:
            # A server that reports no usage (some local ones): the answer is here, so its tokens are estimated.
            result = replace(result, usage=estimate_answered_usage(messages, result.text))
            estimated = True
        parsed = parse_response(result.text, schema)
    except ProviderError as exc:
        if result is None:
            # A timeout cut off a model that was generating: unreported, its tokens are estimated. A refused
            # request (HTTP 4xx/5xx) reported none and most likely cost none.
            estimated = exc.usage is None and isinstance(exc, ProviderTimeout)
            result = LLMResult(text="", usage=estimate_usage(purpose, messages) if estimated else exc.usage)
        _record(state, purpose, model, started, result, error=str(exc), estimated=estimated)
        raise
    _record(state, purpose, model, started, result, error=None, estimated=estimated)
    if result.truncation is not None:
        state.fail(f"{purpose}: {result.truncation.describe(result.stopped)}")
    if isinstance(parsed, LLMAnswer):
        for dropped in parsed.dropped:
            state.fail(f"{purpose}: {dropped}")
    return parsed


def estimate_usage(purpose: str, messages: Sequence[ChatMessage]) -> TokenUsage:
    """What a call the provider never reported on most likely cost: its prompt, and an answer up to the purpose's
    output cap (a call that timed out was generating all along; issue 13 measured such calls at the cap)."""
    return TokenUsage(input_tokens=_prompt_tokens(messages), output_tokens=output_cap(purpose))


def estimate_answered_usage(messages: Sequence[ChatMessage], answer: str) -> TokenUsage:
    """What an answered call most likely cost when its provider reported nothing: its prompt and its answer."""
    return TokenUsage(input_tokens=_prompt_tokens(messages), output_tokens=estimate_tokens(answer))


def _prompt_tokens(messages: Sequence[ChatMessage]) -> int:
    return sum(estimate_tokens(message["content"]) for message in messages)


def _record(
    state: CallLedger,
    purpose: str,
    model: str | None,
    started: float,
    result: LLMResult | None,
    error: str | None,
    *,
    estimated: bool = False,
) -> None:
    """Add the call to the ledger's usage and count, and to the current step, priced at its model's price."""
    usage = (result.usage if result is not None else None) or TokenUsage()
    truncation = result.truncation if result is not None and error is None else None
    state.usage = state.usage + usage
    state.llm_calls += 1
    state.step.llm_calls.append(
        LLMCall(
            purpose=purpose,
            status="failed" if error else "truncated" if truncation else "ok",
            duration_ms=round((time.perf_counter() - started) * 1000, 2),
            usage=usage,
            usage_estimated=estimated,
            error=error or (truncation.describe(result.stopped if result else None) if truncation else None),
            items_kept=truncation.items_kept if truncation else None,
            model=model,
            cost=cost_of(usage, price_for(model, state.config.prices), estimated=estimated),
        )
    )


async def embed_texts(state: WriteState, embedder: EmbeddingProvider, texts: Sequence[str]) -> list[list[float]]:
    """Embed a batch within the configured timeout; any failure becomes a ProviderError for the caller to record.

    A batch with one unusable vector is refused whole (InvalidResponse), so every caller degrades as for a failed
    embedding: the event is stored without a vector, facts and names go on without theirs.
    """
    return await embed_checked(embedder, texts, state.config)


async def embed_checked(embedder: EmbeddingProvider, texts: Sequence[str], config: MemoryConfig) -> list[list[float]]:
    """embed_texts outside a write (search embeds its query): the same timeout, checks and ProviderError."""
    vectors = await _within(embedder.embed(texts), config.extraction_timeout_sec, "embedding")
    try:
        count = len(vectors)
    except TypeError:
        raise InvalidResponse(f"embedding: expected a list of vectors, got {type(vectors).__name__}") from None
    if count != len(texts):
        raise InvalidResponse(f"embedding: {count} vectors for {len(texts)} texts")
    for index, vector in enumerate(vectors):
        problem = vector_problem(vector, config.embedding_dim)
        if problem is not None:
            raise InvalidResponse(f"embedding: vector {index + 1} of {count} {problem}")
    return vectors


def vector_problem(vector: Sequence[float], dimensions: int) -> str | None:
    """Why `vector` cannot be stored and compared, or None when it can.

    The vector columns hold exactly `dimensions` floats and PostgreSQL refuses NaN and infinity in them. An all-zero
    vector is refused too: it has no direction, pgvector's cosine distance to it is NaN and its HNSW cosine index
    leaves it out, so it would be stored yet never found, and it would make every similarity it enters meaningless.
    """
    try:
        size = len(vector)
        finite = _all_finite(vector)
    except TypeError:
        return "is not a list of numbers"
    if size != dimensions:
        return f"has {size} dimensions, expected {dimensions}"
    if not finite:
        return "holds NaN or infinity"
    if not any(vector):
        return "is all zeros"
    return None


def _all_finite(vector: Sequence[float]) -> bool:
    """Whether every element is a finite number (TypeError when one is no number).

    A float sum that comes out finite proves it (an infinity or NaN stays in any float sum) in a fifth of the time
    of testing each element, a dozen vectors a write; an overflowing sum or other number types are
    tested element by element, as always."""
    try:
        total = sum(vector)
    except TypeError:  # Decimal and float do not add up; math.isfinite takes both
        total = None
    return (type(total) is float and math.isfinite(total)) or all(map(math.isfinite, vector))


async def _within(call: Awaitable[Result], seconds: float, what: str) -> Result:
    """Await a provider call within `seconds`; whatever it raises comes out as a ProviderError naming `what`."""
    try:
        return await asyncio.wait_for(call, seconds)
    except TimeoutError as exc:
        raise ProviderTimeout(f"{what}: no answer within {seconds:g}s") from exc
    except ProviderError:
        raise
    except asyncio.CancelledError as exc:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise  # the write itself is being cancelled: the runner ends its run `cancelled`
        # The provider's own cancellation (an HTTP client torn down under it): a failed call, not a cancelled write.
        raise ProviderError(f"{what}: the provider's call was cancelled") from exc
    except Exception as exc:  # a custom provider may raise anything; one typed error for the pipeline
        raise ProviderError(f"{what}: {type(exc).__name__}: {exc}") from exc


def shown_index(answer: str | int | None, count: int) -> int | None:
    """The 0-based index of a candidate the model picked by its shown id ("1".."count"); None if not one shown."""
    if answer is None or isinstance(answer, bool):
        return None
    text = str(answer).strip().lstrip("#")
    # isdecimal, not isdigit: "²" is a digit that int() refuses.
    return int(text) - 1 if text.isdecimal() and 0 < int(text) <= count else None
