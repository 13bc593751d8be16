"""The exception tree of memory_sdk.

    MemorySDKError                 root: catch this to catch everything the SDK raises on purpose
    ├── UsageError                 the caller did something wrong; fix the call, retrying will not help
    │   ├── InvalidInputError      bad argument of write() or a read (empty agent_id, naive or out-of-range
    │   │                          datetime, NUL or lone surrogate, too long; limits in docs/errors.md)
    │   └── ConfigError            bad MemoryConfig value or config_overrides type (also a ValueError)
    │       └── EmbedderMismatch   the agent's vectors come from another embedder than this client's
    └── RuntimeFailure             the outside world failed; the call may succeed later
        ├── ProviderError          an LLM or embedding provider failed
        │   ├── ProviderTimeout    the provider did not answer within the configured timeout
        │   ├── ProviderNotConfigured  no API key / base URL for the default provider
        │   └── InvalidResponse    the provider answered, but not with the JSON object the purpose needs
        ├── RunTakenOver           a write's run was taken over by reprocess (its heartbeat had stopped)
        ├── StorageError           PostgreSQL refused or failed an operation
        │   └── DatabaseUnavailable  the database cannot be reached at all (stopped, socket gone, refused)
        └── SchemaMismatch         the database schema does not fit this SDK or this config

A write() never raises a RuntimeFailure for a stage failure: the failure is recorded in the result and trace.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memory_sdk.results import TokenUsage

__all__ = [
    "ConfigError",
    "DatabaseUnavailable",
    "EmbedderMismatch",
    "InvalidInputError",
    "InvalidResponse",
    "MemorySDKError",
    "ProviderError",
    "ProviderNotConfigured",
    "ProviderTimeout",
    "RunTakenOver",
    "RuntimeFailure",
    "SchemaMismatch",
    "StorageError",
    "UsageError",
]


class MemorySDKError(Exception):
    """Root of every error memory_sdk raises on purpose."""


class UsageError(MemorySDKError):
    """The call itself is wrong; retrying it unchanged will fail again."""


class InvalidInputError(UsageError, ValueError):
    """A write() or read argument is not acceptable (see the message for which and why)."""


class ConfigError(UsageError, ValueError):
    """A MemoryConfig field or a config override has the wrong type or an impossible value."""


class EmbedderMismatch(ConfigError):
    """The agent's memory was embedded with another model than this client's embedder: its vectors and the
    client's would be compared as if they were one space. Use that embedder, or re-embed the agent with this one
    (`MemoryClient.reembed`). `recorded` and `configured` are the two embedder ids."""

    def __init__(self, message: str, *, recorded: str, configured: str) -> None:
        super().__init__(message)
        self.recorded = recorded
        self.configured = configured


class RuntimeFailure(MemorySDKError):
    """Something outside the caller's control failed."""


class ProviderError(RuntimeFailure):
    """An LLM or embedding provider failed.

    `usage` holds the tokens the failed call still cost, when the provider knows them (e.g. two answers that were
    not JSON), so the write's `tokens_used` counts them.
    """

    def __init__(self, message: str, *, usage: TokenUsage | None = None) -> None:
        super().__init__(message)
        self.usage = usage


class ProviderTimeout(ProviderError):
    """The provider did not answer in time."""


class ProviderNotConfigured(ProviderError):
    """The default provider has no API key or base URL to talk to."""


class InvalidResponse(ProviderError):
    """The provider answered with something that is not the JSON object the purpose needs."""


class StorageError(RuntimeFailure):
    """PostgreSQL refused or failed an operation.

    `transient` is True when a retry may succeed (lost connection, serialization failure, deadlock, overload).
    """

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


class SchemaMismatch(RuntimeFailure):
    """The database schema does not fit this SDK version or this configuration."""


class DatabaseUnavailable(StorageError):
    """The database cannot be reached at all: the server is stopped, its socket is gone, or it refuses
    connections. Always transient: the same call may succeed once the server is back."""

    def __init__(self, message: str) -> None:
        super().__init__(message, transient=True)


class RunTakenOver(RuntimeFailure):
    """A write's pipeline run was taken over by another run of the same event (`reprocess`, or a retried write
    with the same message id) after the write's heartbeat stopped; the write applied nothing, the other run did."""
