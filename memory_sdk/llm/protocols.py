"""The two narrow boundaries to the outside world: LLMProvider and EmbeddingProvider.

Everything else in the SDK talks to these, never to `openai` directly, so a custom provider (or the doubles in
`memory_sdk.testing`) replaces the real service at exactly one place.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypedDict, runtime_checkable

from pydantic import BaseModel

from memory_sdk.results import TokenUsage

__all__ = [
    "PURPOSES",
    "AnswerCheck",
    "ChatMessage",
    "EmbeddingProvider",
    "LLMProvider",
    "LLMRequest",
    "LLMResult",
    "Purpose",
    "StopReason",
    "Truncation",
    "complete_reading_until",
    "embedder_id",
    "takes_stop_when",
]

Purpose = Literal[
    "informed_extraction",
    "entity_scan",
    "fact_extraction",
    "relation_extraction",
    "entity_resolution",
    "reconciliation",
    "reconciliation_batch",
    "profile_consolidation",
]
PURPOSES: tuple[Purpose, ...] = (
    "informed_extraction",
    "entity_scan",
    "fact_extraction",
    "relation_extraction",
    "entity_resolution",
    "reconciliation",
    "reconciliation_batch",
    "profile_consolidation",
)


class ChatMessage(TypedDict):
    """One chat message in the OpenAI shape."""

    role: Literal["system", "user", "assistant"]
    content: str


@dataclass(frozen=True)
class Truncation:
    """What an answer cut at the output cap lost: the provider kept its complete items (llm/parsing.py,
    salvage_response) and says so, so the write can report a partial outcome instead of a clean one."""

    items_kept: int
    repeats_dropped: int = 0
    # Required lists the answer never reached, counted as empty (the schema's `unreached_when_cut`).
    not_reached: tuple[str, ...] = ()

    def describe(self, stopped: StopReason | None = None) -> str:
        """'cut at the output cap: kept 7 complete items, 23 repeats dropped, relations not reached; the items
        after the cut are lost', or for an answer the provider stopped reading, 'stopped early (repeating): ...'."""
        parts = [f"kept {self.items_kept} complete item{'s' if self.items_kept != 1 else ''}"]
        if self.repeats_dropped:
            parts.append(f"{self.repeats_dropped} repeat{'s' if self.repeats_dropped != 1 else ''} dropped")
        if self.not_reached:
            parts.append(f"{', '.join(self.not_reached)} not reached")
        how = f"stopped early ({stopped})" if stopped else "cut at the output cap"
        return f"{how}: {', '.join(parts)}; the items after the cut are lost"


# Why a provider stopped reading an answer before the model finished it (llm/parsing.py, stop_reason): a list ran
# past its cap, the model started repeating its items, or the caller's AnswerCheck found the items off the message.
StopReason = Literal["item cap", "repeating", "off the message"]

# The caller's reason to stop reading an answer still coming in: given the members of the answer's object written
# whole so far (llm/parsing.py, complete_part), why the rest is not worth reading, or None. The write's informed
# extraction passes one (pipeline/extraction.py, off_the_message).
AnswerCheck = Callable[[dict[str, Any]], "str | None"]


@dataclass(frozen=True)
class LLMResult:
    """The provider's answer: the raw text (one JSON object expected) and the tokens it cost, if known.

    `truncation` is set when the answer was cut and `text` holds only its complete items: at the output cap, or
    by the provider itself, which then says why in `stopped` ("repeating": the model started repeating its items;
    "item cap": a list ran past its cap; "off the message": the caller's `stop_when` check fired).
    `usage_estimated` is True when `usage` is the SDK's estimate (llm/tokens.py) for a request the server reported
    nothing on, as for one read only up to an early stop.
    """

    text: str
    usage: TokenUsage | None = None
    truncation: Truncation | None = None
    stopped: StopReason | None = None
    usage_estimated: bool = False


@dataclass(frozen=True)
class LLMRequest:
    """One call as a provider (or the scripted double) sees it."""

    purpose: Purpose
    messages: tuple[ChatMessage, ...]
    response_schema: type[BaseModel]


@runtime_checkable
class LLMProvider(Protocol):
    """Anything that answers a chat request for a purpose with one JSON object.

    >>> class MyProvider:
    ...     async def complete(self, *, purpose, messages, response_schema):
    ...         return LLMResult(text='{"entities": []}')

    A provider that reads its answer as it comes may also take `stop_when` (an AnswerCheck) and stop reading once it
    returns a reason, as `OpenAIProvider` does; the SDK passes it only to a `complete` that declares it.
    """

    async def complete(
        self,
        *,
        purpose: Purpose,
        messages: Sequence[ChatMessage],
        response_schema: type[BaseModel],
    ) -> LLMResult: ...


@runtime_checkable
class EmbeddingProvider(Protocol):
    """Anything that turns a batch of texts into vectors of a fixed size.

    A provider may also have a `model_id` string naming its vector space ("openai:text-embedding-3-small"): the
    database records it per agent and refuses another one (vectors of two models cannot be compared). It is
    optional, so older providers keep working; without it the class name stands in (see `embedder_id`).
    """

    @property
    def dimensions(self) -> int: ...

    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


def complete_reading_until(
    provider: LLMProvider,
    *,
    purpose: Purpose,
    messages: Sequence[ChatMessage],
    response_schema: type[BaseModel],
    stop_when: AnswerCheck | None,
) -> Awaitable[LLMResult]:
    """`provider.complete(...)`, with `stop_when` passed only to a `complete` that takes it (`takes_stop_when`):
    `stop_when` is an optional keyword of the protocol, and a custom provider written without it is read whole."""
    extra = {"stop_when": stop_when} if stop_when is not None and takes_stop_when(provider) else {}
    return provider.complete(purpose=purpose, messages=messages, response_schema=response_schema, **extra)


def takes_stop_when(provider: LLMProvider) -> bool:
    """Whether the provider's `complete` declares a `stop_when` keyword (or takes any keyword)."""
    return _takes_stop_when(type(provider))


@functools.cache
def _takes_stop_when(kind: type) -> bool:
    try:
        parameters = inspect.signature(kind.complete).parameters.values()  # type: ignore[attr-defined]
    except (AttributeError, TypeError, ValueError):
        return False
    return any(p.name == "stop_when" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def closure_min_similarity(embedder: EmbeddingProvider) -> float | None:
    """The provider's optional `closure_min_similarity`: in its own vector space, the similarity below which two
    facts of one subject are not about the same thing, so that no UPDATE, DELETE or NOOP decided on their texts
    alone may close one for the other or drop the new one as its repeat
    (`MemoryConfig.reconciliation_closure_min_similarity`). None when it declares none."""
    return _declared_similarity(embedder, "closure_min_similarity")


def attribute_min_similarity(embedder: EmbeddingProvider) -> float | None:
    """The provider's optional `attribute_min_similarity`: in its own vector space, the similarity below which a
    fact is not about the open value of the single-valued attribute it shares, when the SDK cannot check the value
    (a `job_title`, a `relationship_status`), so that it neither ends nor replaces that value
    (`MemoryConfig.reconciliation_attribute_min_similarity`). None when it declares none."""
    return _declared_similarity(embedder, "attribute_min_similarity")


def _declared_similarity(embedder: EmbeddingProvider, name: str) -> float | None:
    declared = getattr(embedder, name, None)
    if isinstance(declared, int | float) and not isinstance(declared, bool) and 0.0 <= declared <= 1.0:
        return float(declared)
    return None


def embedder_id(embedder: EmbeddingProvider) -> str:
    """The provider's `model_id`, else "custom:<class name>": the vector space an agent's vectors are recorded in.

    >>> embedder_id(HashEmbedder())
    'hash:HashEmbedder'
    """
    declared = getattr(embedder, "model_id", None)
    if isinstance(declared, str) and declared.strip():
        return declared.strip()
    return f"custom:{type(embedder).__name__}"
