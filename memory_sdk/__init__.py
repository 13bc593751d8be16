"""memory_sdk: a memory for AI agents that stays true.

>>> from memory_sdk import MemoryClient
>>> async with MemoryClient() as memory:
...     result = await memory.write("user_123", "Moro em Curitiba", speaker_name="Rafael")
"""

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
    Emotion,
    Entity,
    Event,
    Fact,
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

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "ConsolidationResult",
    "Context",
    "DatabaseUnavailable",
    "EmbedderMismatch",
    "EmbeddingProvider",
    "Emotion",
    "Entity",
    "Event",
    "Fact",
    "InvalidInputError",
    "InvalidResponse",
    "LLMCall",
    "LLMProvider",
    "LLMResult",
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
