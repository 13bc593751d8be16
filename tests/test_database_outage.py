"""The database going away under a live client: stopped mid-write, stopped between calls, a handle left behind
by a killed process. Each test runs its own throwaway server, never the session's shared one."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from sqlalchemy.exc import DBAPIError

from memory_sdk import MemoryClient, MemoryConfig
from memory_sdk.errors import DatabaseUnavailable
from memory_sdk.llm.protocols import LLMRequest
from memory_sdk.store import embedded
from memory_sdk.store.database import storage_error
from memory_sdk.testing import HashEmbedder, ScriptedLLM
from tests.scripts import extraction

pytestmark = pytest.mark.integration

WHEN = datetime(2025, 6, 15, 12, 0, tzinfo=UTC)
AGENT = "agent-outage"


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """A data directory of its own (not pytest's tmp_path, which a concurrent run may rotate away)."""
    base = Path(tempfile.mkdtemp(prefix="memory-sdk-outage-"))
    base.chmod(0o711)  # reachable by the server's OS user when the tests run as root
    directory = base / "pgdata"
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


def _postmaster_runs(data_dir: Path) -> bool:
    pid_file = data_dir / "postmaster.pid"
    if not pid_file.exists():
        return False
    try:
        os.kill(int(pid_file.read_text().splitlines()[0]), 0)
    except ProcessLookupError:
        return False
    return True


async def test_server_stopped_mid_write_gives_a_failed_result_and_a_new_client_reads_the_event(
    data_dir: Path,
) -> None:
    waiting, release = asyncio.Event(), asyncio.Event()

    async def informed(request: LLMRequest) -> dict[str, Any]:
        waiting.set()
        await release.wait()  # the server is stopped while the write waits on its LLM
        return extraction(("Ana", "Ana loves jazz"))

    llm = ScriptedLLM({"informed_extraction": informed})
    memory = MemoryClient(data_dir=data_dir, llm=llm, embedder=HashEmbedder())
    await memory.open()
    try:
        write = asyncio.create_task(memory.write(AGENT, "Ana loves jazz", speaker_name="Rafael", occurred_at=WHEN))
        await waiting.wait()
        await asyncio.to_thread(_stop_from_outside, data_dir)
        release.set()
        result = await write  # returns: a stage failure is never raised

        assert not result.success
        assert result.event_id is not None  # committed before the LLM call
        assert result.error is not None and "DatabaseUnavailable" in result.error, result.error
        with pytest.raises(DatabaseUnavailable):
            await memory.get_events(AGENT)
    finally:
        await memory.close()

    # The write's run could not be closed while the server was down; its heartbeat stopped with it, so once the
    # lease is out, reprocess finishes the write from the stored event.
    config = MemoryConfig(embedding_dim=HashEmbedder().dimensions, run_stale_after_sec=0.3)
    llm = ScriptedLLM({"informed_extraction": [extraction(("Ana", "Ana loves jazz"))]})
    async with MemoryClient(data_dir=data_dir, llm=llm, embedder=HashEmbedder(), config=config) as recovered:
        assert [event.content for event in await recovered.get_events(AGENT)] == ["Ana loves jazz"]
        await asyncio.sleep(0.4)
        [redone] = await recovered.reprocess(AGENT)
        assert redone.success and redone.event_id == result.event_id, redone.error
        assert [fact.text for fact in await recovered.get_facts(AGENT)] == ["Ana loves jazz"]
        assert await recovered.reprocess(AGENT) == []


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


def test_a_server_stopped_under_this_process_is_started_again(data_dir: Path) -> None:
    first = embedded.start_embedded_server(data_dir)
    _stop_from_outside(data_dir)
    started = time.perf_counter()
    assert embedded.start_embedded_server(data_dir) == first
    assert _postmaster_runs(data_dir)
    assert time.perf_counter() - started < embedded.START_ATTEMPTS  # no failed attempt and retry pause


def test_handle_of_a_dead_process_does_not_keep_the_server_running(data_dir: Path) -> None:
    embedded.start_embedded_server(data_dir)
    exited = subprocess.Popen(["true"])  # a process that held a handle and was killed: it never let go
    exited.wait()
    handles = data_dir / ".handle_pids.json"
    handles.write_text(json.dumps([exited.pid, *json.loads(handles.read_text())]))

    embedded.stop_embedded_server(data_dir)  # this process was the last live one

    assert not _postmaster_runs(data_dir)
    assert exited.pid not in json.loads(handles.read_text() or "[]")


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
