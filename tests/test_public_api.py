"""The public surface: what `import memory_sdk` promises (like httpx's tests/test_exported_members.py)."""

from __future__ import annotations

import memory_sdk
import memory_sdk.testing

EXPECTED_EXPORTS = {
    "ConfigError",
    "ConsolidationResult",
    "Cost",
    "Context",
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
    "MergedFact",
    "Memory",
    "MemoryClient",
    "MemoryConfig",
    "MemorySDKError",
    "PipelineTrace",
    "ProviderError",
    "ProviderNotConfigured",
    "ProviderTimeout",
    "Relationship",
    "ResolvedEntity",
    "RuntimeFailure",
    "SchemaMismatch",
    "RunTakenOver",
    "SearchHit",
    "StorageError",
    "TokenUsage",
    "TraceStep",
    "UsageError",
    "WriteResult",
    "__version__",
}


def test_all_is_exactly_the_public_names() -> None:
    assert set(memory_sdk.__all__) == EXPECTED_EXPORTS
    assert len(memory_sdk.__all__) == len(set(memory_sdk.__all__))  # no name listed twice


def test_every_exported_name_imports() -> None:
    for name in memory_sdk.__all__:
        assert getattr(memory_sdk, name) is not None, name
    namespace: dict[str, object] = {}
    exec("from memory_sdk import *", namespace)
    assert set(namespace) >= EXPECTED_EXPORTS


def test_exported_classes_say_they_belong_to_memory_sdk() -> None:
    for name in memory_sdk.__all__:
        member = getattr(memory_sdk, name)
        if isinstance(member, type):
            assert member.__module__.startswith("memory_sdk."), (name, member.__module__)


def test_errors_share_one_root_and_split_usage_from_runtime() -> None:
    usage = {memory_sdk.InvalidInputError, memory_sdk.ConfigError}
    runtime = {
        memory_sdk.ProviderError,
        memory_sdk.ProviderTimeout,
        memory_sdk.ProviderNotConfigured,
        memory_sdk.InvalidResponse,
        memory_sdk.StorageError,
        memory_sdk.SchemaMismatch,
    }
    assert all(issubclass(error, memory_sdk.UsageError) for error in usage)
    assert all(issubclass(error, ValueError) for error in usage)
    assert all(issubclass(error, memory_sdk.RuntimeFailure) for error in runtime)
    assert all(issubclass(error, memory_sdk.MemorySDKError) for error in usage | runtime)
    assert not issubclass(memory_sdk.UsageError, memory_sdk.RuntimeFailure)


def test_version_is_a_string() -> None:
    assert isinstance(memory_sdk.__version__, str) and memory_sdk.__version__


def test_testing_module_exports_the_doubles() -> None:
    assert {"ScriptedLLM", "HashEmbedder"} <= set(memory_sdk.testing.__all__)
    testing = memory_sdk.testing
    for name in testing.__all__:
        assert getattr(testing, name) is not None, name
    assert isinstance(testing.ScriptedLLM(), memory_sdk.LLMProvider)
    assert isinstance(testing.HashEmbedder(), memory_sdk.EmbeddingProvider)
