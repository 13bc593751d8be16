"""The `memory-sdk` command line without a database: parsing stays cheap (no SQLAlchemy, alembic, asyncpg, openai or
pydantic behind --help and --version), every option says what it does, a bad argument is one line and exit 2, and
the text output (tables, trace tree) says what happened, without colour codes in a pipe."""

from __future__ import annotations

import argparse
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from uuid import uuid4

import pytest

from memory_sdk.cli import build_parser, main
from memory_sdk.results import Fact, LLMCall, PipelineTrace, TokenUsage, TraceStep

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("sqlalchemy", "alembic", "asyncpg", "openai", "pydantic")

_PARSE_ONLY = f"""
import sys
from memory_sdk.cli import main
for argv in (["--help"], ["--version"], ["facts", "--help"], ["write", "--help"]):
    try:
        main(argv)
    except SystemExit:
        pass
print(sorted(name for name in {HEAVY!r} if name in sys.modules))
"""


def test_help_and_version_import_no_database_model_or_pydantic_library() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _PARSE_ONLY],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert "memory-sdk 0.1.0" in done.stdout
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout[-300:]


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("no subcommands")


def test_every_argument_of_every_command_has_help_text() -> None:
    commands = _subparsers(build_parser())
    assert {"demo", "write", "facts", "entity", "relationships", "events", "trace"} <= set(commands)
    missing = [
        f"{name} {action.dest}"
        for name, parser in commands.items()
        for action in parser._actions
        if not isinstance(action, argparse._HelpAction) and not (action.help or "").strip()
    ]
    assert missing == []


@pytest.mark.parametrize(
    "argv",
    [
        ["events", "someone", "--limit", "-1"],
        ["events", "someone", "--limit", "many"],
        ["trace", "someone", "not-an-id"],
        ["facts", "someone", "--as-of", "yesterday"],
        ["relationships", "someone", "--known-at", "last week"],
        ["bench", "--rounds", "0"],
        ["write", "someone", "hi", "--timeout", "0"],
        ["reprocess", "someone", "--max-attempts", "0"],
        ["facts"],
        ["frobnicate"],
        [],
    ],
)
def test_a_bad_argument_is_one_line_and_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("memory-sdk") and "error:" in err and "usage:" not in err and "Traceback" not in err


def test_relationships_take_known_at_and_history_and_events_take_oldest() -> None:
    args = build_parser().parse_args(["relationships", "a", "--known-at", "2025-03-01", "--history"])
    assert args.known_at == datetime(2025, 3, 1, tzinfo=UTC) and args.history
    assert build_parser().parse_args(["relationships", "a", "--all"]).history  # the old spelling still works
    assert build_parser().parse_args(["events", "a", "--oldest"]).oldest


def test_write_replay_picks_a_demo_message_by_number_or_text() -> None:
    from memory_sdk.cli_demo import demo_message
    from memory_sdk.demo import CONVERSATION
    from memory_sdk.errors import UsageError

    assert demo_message("4") == (4, CONVERSATION[3])
    assert demo_message("  ricardo se mudou pra  Austin, Texas. ") == (6, CONVERSATION[5])
    with pytest.raises(UsageError, match="a number 1-9"):
        demo_message("Moro em Lisboa")
    with pytest.raises(UsageError):
        demo_message("10")


def _fact(text: str, start: datetime, end: datetime | None, **fields: object) -> Fact:
    return Fact.model_validate(
        {
            "id": uuid4(),
            "agent_id": "a",
            "entity_key": "person:ana",
            "text": text,
            "confidence": 0.9,
            "importance": 0.5,
            "importance_category": "fact",
            "valid_from": start,
            "valid_to": end,
            "recorded_at": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
            **fields,
        }
    )


def test_facts_history_shows_one_date_format_a_recorded_column_and_explains_zero_length_versions(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from memory_sdk.cli_output import fact_status, print_facts

    march, may = datetime(2025, 3, 1, tzinfo=UTC), datetime(2025, 5, 20, 12, tzinfo=UTC)
    facts = [
        _fact("Ana mora em Lisboa", march, march),  # replaced from the moment it began
        _fact("Ana mora no Porto", march, may),
        _fact("Ana mora em Braga", may, None),
        _fact("Ana trabalha na Acme", march, may, invalidated_at=may),
    ]
    assert [fact_status(fact) for fact in facts] == ["corrected", "ended", "current", "retracted"]
    print_facts(argparse.Namespace(json=False), facts)
    out = capsys.readouterr().out
    assert "recorded at" in out and "2026-01-02 03:04" in out
    assert "2025-03-01 00:00" in out and "2025-05-20 12:00" in out  # one format, midnight included
    assert "never in force" in out
    assert "\x1b[" not in out  # no colour codes when stdout is not a terminal
    assert len([line for line in out.splitlines() if "Ana " in line]) == 4  # one row per line in a pipe


def test_trace_tree_shows_resolution_decisions_cascades_calls_and_failures(capsys: pytest.CaptureFixture[str]) -> None:
    from memory_sdk.cli_output import print_trace

    trace = PipelineTrace(
        steps=[
            TraceStep(
                name="extraction",
                status="partial",
                duration_ms=1200.0,
                data={"path": "blind", "facts_dropped": []},
                llm_calls=[
                    LLMCall(purpose="informed_extraction", status="failed", duration_ms=900, error="cut off"),
                    LLMCall(
                        purpose="blind_extraction",
                        status="ok",
                        duration_ms=300,
                        usage=TokenUsage(input_tokens=10, output_tokens=5),
                    ),
                ],
            ),
            TraceStep(
                name="entity_resolution",
                data={"entities": [{"name": "Guili", "key": "person:guilherme", "phase": "fuzzy", "score": 0.91}]},
            ),
            TraceStep(
                name="reconciliation",
                data={
                    "decisions": [
                        {
                            "action": "DELETE",
                            "text": "Ana saiu da Acme",
                            "similarity": 0.671,
                            "path": "llm",
                            "why": "LLM",
                        }
                    ]
                },
            ),
            TraceStep(
                name="upsert",
                status="failed",
                data={
                    "facts": [
                        {
                            "text": "Ana saiu da Acme",
                            "decided": "DELETE",
                            "applied": "DELETE",
                            "cascade_invalidated_relationships": ["r1", "r2"],
                        }
                    ]
                },
                error="storage: deadlock",
            ),
        ]
    )
    print_trace(trace, title="write")
    out = capsys.readouterr().out
    assert "write: 4 stages" in out
    assert "extraction  partial  1200.0 ms" in out
    assert "LLM informed_extraction failed, 900 ms" in out and "cut off" in out
    assert "LLM blind_extraction ok, 300 ms, 10 in / 5 out tokens" in out
    assert "Guili -> person:guilherme (fuzzy, score 0.91)" in out
    assert "DELETE 'Ana saiu da Acme', similarity 0.67, path llm: LLM" in out
    assert "cascade invalidated relationships: 2" in out
    assert "error: storage: deadlock" in out
    assert "facts_dropped" not in out  # an empty list is not a line
