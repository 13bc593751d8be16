"""Shared fixtures: one real embedded PostgreSQL + pgvector per test session, providers replaced only at their
protocol boundary with the doubles memory_sdk.testing ships."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import make_url, text
from sqlalchemy.ext.asyncio import create_async_engine

from memory_sdk import MemoryClient, MemoryConfig
from memory_sdk.llm.protocols import LLMProvider
from memory_sdk.store.database import to_async_url
from memory_sdk.store.embedded import temporary_embedded_server
from memory_sdk.testing import HashEmbedder, ScriptedLLM

# No test may reach a real model: the OpenAI defaults must fail loudly if a test forgets to inject a double.
os.environ.pop("OPENAI_API_KEY", None)
os.environ.pop("OPENAI_BASE_URL", None)

ClientFactory = Callable[..., AbstractAsyncContextManager[MemoryClient]]


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    """MEMORY_SDK_TEST_DATABASE_URL when set (any PostgreSQL >= 15 with pgvector), else the embedded server.

    Each pytest-xdist worker is a session of its own: the embedded server is one per worker, in its own temporary
    directory, stopped and removed at the end; on a configured server each worker gets a database of its own (some
    tests migrate, count or terminate the whole database's sessions), dropped at the end.
    """
    configured = os.environ.get("MEMORY_SDK_TEST_DATABASE_URL")
    worker_id = os.environ.get("PYTEST_XDIST_WORKER", "master")  # gw0, gw1, ... under xdist
    if configured and worker_id == "master":
        yield configured
    elif configured:
        with _worker_database(configured, worker_id) as url:
            yield url
    else:
        with temporary_embedded_server(f"memory-sdk-test-{worker_id}-") as url:
            yield url


@contextmanager
def _worker_database(url: str, worker_id: str) -> Iterator[str]:
    """A database for one xdist worker on the server of `url`, created empty (a stale one from a killed run first
    dropped) and dropped after."""
    name = f"{make_url(url).database or 'postgres'}_{worker_id}"
    admin = to_async_url(url)

    async def run(statement: str) -> None:
        engine = create_async_engine(admin, isolation_level="AUTOCOMMIT")
        try:
            async with engine.connect() as conn:
                await conn.execute(text(statement))
        finally:
            await engine.dispose()

    asyncio.run(run(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    asyncio.run(run(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(url).set(database=name).render_as_string(hide_password=False)
    finally:
        asyncio.run(run(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


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


@pytest.fixture(autouse=True)
def _output_as_a_pipe_gets_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """No terminal width from the environment: pytest-xdist's workers inherit the terminal's COLUMNS, and the CLI
    fits its tables to COLUMNS when it is set (tests that want a width set it themselves)."""
    monkeypatch.delenv("COLUMNS", raising=False)


@pytest.fixture
async def fresh_database_url(database_url: str) -> AsyncIterator[str]:
    """An empty database on the same server, dropped after the test."""
    name = f"memtest_{uuid.uuid4().hex[:12]}"
    admin = create_async_engine(to_async_url(database_url), isolation_level="AUTOCOMMIT")
    try:
        async with admin.connect() as conn:
            await conn.execute(text(f'CREATE DATABASE "{name}"'))
        yield make_url(to_async_url(database_url)).set(database=name).render_as_string(hide_password=False)
        async with admin.connect() as conn:
            await conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        await admin.dispose()


def downgrade(connection: Any, revision: str) -> None:
    """Alembic's downgrade of the SDK's migrations on `connection` (run it with `conn.run_sync`)."""
    from alembic import command
    from alembic.config import Config

    import memory_sdk.store.database as database_module

    config = Config()
    config.set_main_option("script_location", str(Path(database_module.__file__).parent / "migrations"))
    config.attributes["connection"] = connection
    config.attributes["embedding_dim"] = 1536
    command.downgrade(config, revision)
