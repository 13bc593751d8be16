"""Starting the embedded server: retries when pg_ctl gives up while the server is still coming up."""

from __future__ import annotations

from pathlib import Path

import pytest

from memory_sdk.errors import StorageError
from memory_sdk.store import embedded


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
