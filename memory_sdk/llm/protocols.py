"""The two narrow boundaries to the outside world: LLMProvider and EmbeddingProvider.

Everything else in the SDK talks to these, never to `openai` directly, so a custom provider (or the doubles in
`memory_sdk.testing`) replaces the real service at exactly one place.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, TypedDict, runtime_checkable

from pydantic import BaseModel

from memory_sdk.results import TokenUsage

__all__ = [
    "PURPOSES",
    "ChatMessage",
    "EmbeddingProvider",
    "LLMProvider",
    "LLMRequest",
    "LLMResult",
    "Purpose",
]

Purpose = Literal[
    "informed_extraction",
    "entity_scan",
    "fact_extraction",
    "relation_extraction",
    "entity_resolution",
    "reconciliation",
]
PURPOSES: tuple[Purpose, ...] = (
    "informed_extraction",
    "entity_scan",
    "fact_extraction",
    "relation_extraction",
    "entity_resolution",
    "reconciliation",
)


class ChatMessage(TypedDict):
    """One chat message in the OpenAI shape."""

    role: Literal["system", "user", "assistant"]
    content: str


@dataclass(frozen=True)
class LLMResult:
    """The provider's answer: the raw text (one JSON object expected) and the tokens it cost, if known."""

    text: str
    usage: TokenUsage | None = None


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
    """Anything that turns a batch of texts into vectors of a fixed size."""

    @property
    def dimensions(self) -> int: ...

    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...
