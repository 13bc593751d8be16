"""memory_sdk: a memory for AI agents that stays true.

>>> from memory_sdk import MemoryClient
>>> async with MemoryClient() as memory:
...     result = await memory.write("user_123", "Moro em Curitiba", speaker_name="Rafael")

Names are imported on first use (PEP 562): `import memory_sdk` (and so `memory-sdk --version`) stays cheap, with
no SQLAlchemy, alembic or pydantic loaded until a name that needs them is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memory_sdk.bulk import ImportMessage
    from memory_sdk.client import MemoryClient
    from memory_sdk.config import MemoryConfig
    from memory_sdk.errors import (
        ConfigError,
        DatabaseUnavailable,
        EmbedderMismatch,
        InvalidInputError,
        InvalidResponse,
        MemorySDKError,
        ProviderError,
        ProviderNotConfigured,
        ProviderTimeout,
        RunTakenOver,
        RuntimeFailure,
        SchemaMismatch,
        StorageError,
        UsageError,
    )
    from memory_sdk.llm.protocols import EmbeddingProvider, LLMProvider, LLMResult
    from memory_sdk.results import (
        ConsolidationResult,
        Context,
        Cost,
        Emotion,
        Entity,
        Event,
        Fact,
        ImportFailure,
        ImportProgress,
        ImportSummary,
        LLMCall,
        MergedFact,
        PipelineTrace,
        Relationship,
        ResolvedEntity,
        SearchHit,
        TokenUsage,
        TraceStep,
        WriteResult,
    )
    from memory_sdk.sync import Memory

__version__ = "0.1.0"

# Where each public name lives; resolved by __getattr__ the first time it is asked for.
_EXPORTS: dict[str, str] = {
    "ConfigError": "memory_sdk.errors",
    "ConsolidationResult": "memory_sdk.results",
    "Context": "memory_sdk.results",
    "Cost": "memory_sdk.results",
    "DatabaseUnavailable": "memory_sdk.errors",
    "EmbedderMismatch": "memory_sdk.errors",
    "EmbeddingProvider": "memory_sdk.llm.protocols",
    "Emotion": "memory_sdk.results",
    "Entity": "memory_sdk.results",
    "Event": "memory_sdk.results",
    "Fact": "memory_sdk.results",
    "ImportFailure": "memory_sdk.results",
    "ImportMessage": "memory_sdk.bulk",
    "ImportProgress": "memory_sdk.results",
    "ImportSummary": "memory_sdk.results",
    "InvalidInputError": "memory_sdk.errors",
    "InvalidResponse": "memory_sdk.errors",
    "LLMCall": "memory_sdk.results",
    "LLMProvider": "memory_sdk.llm.protocols",
    "LLMResult": "memory_sdk.llm.protocols",
    "Memory": "memory_sdk.sync",
    "MemoryClient": "memory_sdk.client",
    "MemoryConfig": "memory_sdk.config",
    "MemorySDKError": "memory_sdk.errors",
    "MergedFact": "memory_sdk.results",
    "PipelineTrace": "memory_sdk.results",
    "ProviderError": "memory_sdk.errors",
    "ProviderNotConfigured": "memory_sdk.errors",
    "ProviderTimeout": "memory_sdk.errors",
    "Relationship": "memory_sdk.results",
    "ResolvedEntity": "memory_sdk.results",
    "SearchHit": "memory_sdk.results",
    "RunTakenOver": "memory_sdk.errors",
    "RuntimeFailure": "memory_sdk.errors",
    "SchemaMismatch": "memory_sdk.errors",
    "StorageError": "memory_sdk.errors",
    "TokenUsage": "memory_sdk.results",
    "TraceStep": "memory_sdk.results",
    "UsageError": "memory_sdk.errors",
    "WriteResult": "memory_sdk.results",
}


__all__ = [
    "ConfigError",
    "ConsolidationResult",
    "Context",
    "Cost",
    "DatabaseUnavailable",
    "EmbedderMismatch",
    "EmbeddingProvider",
    "Emotion",
    "Entity",
    "Event",
    "Fact",
    "ImportFailure",
    "ImportMessage",
    "ImportProgress",
    "ImportSummary",
    "InvalidInputError",
    "InvalidResponse",
    "LLMCall",
    "LLMProvider",
    "LLMResult",
    "Memory",
    "MemoryClient",
    "MemoryConfig",
    "MemorySDKError",
    "MergedFact",
    "PipelineTrace",
    "ProviderError",
    "ProviderNotConfigured",
    "ProviderTimeout",
    "Relationship",
    "ResolvedEntity",
    "RunTakenOver",
    "RuntimeFailure",
    "SchemaMismatch",
    "SearchHit",
    "StorageError",
    "TokenUsage",
    "TraceStep",
    "UsageError",
    "WriteResult",
    "__version__",
]


def __getattr__(name: str) -> Any:
    """Import a public name on first use and cache it in the module (later lookups skip this function)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'memory_sdk' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
