"""The database going away under a live client. Each test runs its own throwaway server, never the session's
shared one."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy.exc import DBAPIError

from memory_sdk import MemoryClient
from memory_sdk.errors import DatabaseUnavailable
from memory_sdk.store import embedded
from memory_sdk.store.database import storage_error
from memory_sdk.testing import HashEmbedder, ScriptedLLM

pytestmark = pytest.mark.integration

WHEN = datetime(2025, 6, 15, 12, 0, tzinfo=UTC)
AGENT = "agent-outage"


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """A data directory of its own (not pytest's tmp_path, which a concurrent run may rotate away)."""
    directory = Path(tempfile.mkdtemp(prefix="memory-sdk-outage-")) / "pgdata"
    yield directory
    embedded.stop_embedded_server(directory)
    shutil.rmtree(directory.parent, ignore_errors=True)


def _stop_from_outside(data_dir: Path) -> None:
    """Stop the server the way an operator, a crash or the OS would: a signal to the postmaster (SIGINT is
    PostgreSQL's fast shutdown), not through the SDK, so this process still believes it holds a server."""
    pid = int((data_dir / "postmaster.pid").read_text().splitlines()[0])
    os.kill(pid, signal.SIGINT)
    deadline = time.monotonic() + 30
    while (data_dir / "postmaster.pid").exists():
        assert time.monotonic() < deadline, "the server did not stop"
        time.sleep(0.05)


async def test_write_to_a_stopped_server_stores_nothing_and_says_the_database_is_unavailable(data_dir: Path) -> None:
    async with MemoryClient(data_dir=data_dir, llm=ScriptedLLM(), embedder=HashEmbedder()) as memory:
        await asyncio.to_thread(_stop_from_outside, data_dir)
        result = await memory.write(AGENT, "Ana loves jazz", speaker_name="Rafael", occurred_at=WHEN)
        assert not result.success and result.event_id is None
        assert result.error is not None and "DatabaseUnavailable" in result.error, result.error
        with pytest.raises(DatabaseUnavailable):
            await memory.get_facts(AGENT)


async def test_opening_a_database_whose_socket_is_gone_raises_database_unavailable(tmp_path: Path) -> None:
    url = f"postgresql://postgres@/memory_sdk?host={tmp_path}"  # a directory with no server socket in it
    with pytest.raises(DatabaseUnavailable, match="could not open or migrate"):
        async with MemoryClient(url, llm=ScriptedLLM(), embedder=HashEmbedder()):
            pass


@pytest.mark.parametrize(
    ("error", "unavailable"),
    [
        (FileNotFoundError(2, "No such file or directory"), True),  # the socket is gone
        (ConnectionRefusedError(111, "Connection refused"), True),
        (asyncpg.CannotConnectNowError("the database system is shutting down"), True),
        (asyncpg.AdminShutdownError("terminating connection due to administrator command"), True),
        (asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of operation"), True),
        (asyncpg.InternalClientError("cannot switch to state 15; another operation (2) is in progress"), True),
        (asyncpg.UniqueViolationError("duplicate key value"), False),
        (asyncpg.SerializationError("could not serialize access"), False),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, Exception) else str(value),
)
def test_connection_failures_become_database_unavailable(error: Exception, unavailable: bool) -> None:
    assert isinstance(storage_error(error), DatabaseUnavailable) is unavailable
    wrapped = DBAPIError("SELECT 1", None, error, connection_invalidated=False)  # as SQLAlchemy raises it
    assert isinstance(storage_error(wrapped), DatabaseUnavailable) is unavailable
    assert storage_error(error).transient or not unavailable
