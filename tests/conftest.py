"""Shared fixtures: one real embedded PostgreSQL + pgvector per test session, providers replaced only at their
protocol boundary with the doubles memory_sdk.testing ships."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import pytest

from memory_sdk import MemoryClient, MemoryConfig
from memory_sdk.llm.protocols import LLMProvider
from memory_sdk.store.embedded import temporary_embedded_server
from memory_sdk.testing import HashEmbedder, ScriptedLLM

# No test may reach a real model: the OpenAI defaults must fail loudly if a test forgets to inject a double.
os.environ.pop("OPENAI_API_KEY", None)
os.environ.pop("OPENAI_BASE_URL", None)

ClientFactory = Callable[..., AbstractAsyncContextManager[MemoryClient]]


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    """MEMORY_SDK_TEST_DATABASE_URL when set (any PostgreSQL >= 15 with pgvector), else the embedded server.

    The embedded server lives in its own temporary directory and is stopped and removed at the end of the session.
    """
    configured = os.environ.get("MEMORY_SDK_TEST_DATABASE_URL")
    if configured:
        yield configured
        return
    with temporary_embedded_server("memory-sdk-test-") as url:
        yield url


@pytest.fixture
def agent_id() -> str:
    """A fresh tenant per test: tests share one database and never see each other's rows."""
    return f"agent-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def make_client(database_url: str) -> ClientFactory:
    """Open a MemoryClient on the test database with the given doubles."""

    @asynccontextmanager
    async def factory(
        llm: LLMProvider | None = None, config: MemoryConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[MemoryClient]:
        kwargs.setdefault("embedder", HashEmbedder())
        async with MemoryClient(database_url, llm=llm or ScriptedLLM(), config=config, **kwargs) as client:
            yield client

    return factory
