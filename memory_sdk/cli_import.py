"""The `memory-sdk import` / `export` commands' work: read a JSONL file of messages, import it with a progress bar,
print the summary as a table; read and write export documents; the scripted LLM of test runs.

    $ memory-sdk import chats.jsonl --agent user_123      # one message per line: speaker, text, occurred_at, ...
    $ memory-sdk export user_123 > user_123.json
    $ memory-sdk import --restore user_123.json --agent user_123_copy

`rich` is imported here only, when a command that draws runs.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memory_sdk.client import MemoryClient
from memory_sdk.errors import InvalidInputError
from memory_sdk.results import ImportFailure, ImportProgress, ImportSummary
from memory_sdk.testing import ScriptedLLM

__all__ = [
    "MessageFile",
    "import_file",
    "print_summary",
    "read_export",
    "read_message_file",
    "scripted_llm_from_file",
]


@dataclass
class MessageFile:
    """A JSONL file read: the message objects, the line each came from, and the lines that were not JSON objects."""

    entries: list[Mapping[str, Any]] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    unreadable: list[ImportFailure] = field(default_factory=list)


def read_message_file(path: Path) -> MessageFile:
    """One JSON object per line (blank lines skipped): agent_id?, speaker, text, occurred_at, message_id?, ...
    A line that is not a JSON object is a failure of that line; the others are imported."""
    read = MessageFile()
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except json.JSONDecodeError as exc:
                read.unreadable.append(_line_failure(number, f"not JSON: {exc}"))
                continue
            if not isinstance(entry, dict):
                read.unreadable.append(
                    _line_failure(number, f"a line must be a JSON object, got {type(entry).__name__}")
                )
                continue
            read.entries.append(entry)
            read.lines.append(number)
    return read


def _line_failure(number: int, error: str) -> ImportFailure:
    return ImportFailure(index=number, error_type="InvalidInputError", error=f"line {number}: {error}")


async def import_file(
    memory: MemoryClient, read: MessageFile, *, agent_id: str | None, concurrency: int, progress_bar: bool
) -> ImportSummary:
    """Import the file's messages (all for `agent_id`, or each for its own) with a progress bar on stderr; the
    summary's failure indexes are the file's line numbers."""
    total = len(read.entries) + len(read.unreadable)
    if progress_bar:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        bar = Progress(
            TextColumn("importing"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[failed]} failed"),
            TimeRemainingColumn(),
            transient=True,
        )
        task = bar.add_task("import", total=len(read.entries), failed=len(read.unreadable))

        failed = len(read.unreadable)

        def advance(step: ImportProgress) -> None:
            nonlocal failed
            failed += step.status == "failed"
            bar.update(task, completed=step.done, failed=failed)

        with bar:
            summary = await _run(memory, read, agent_id, concurrency, advance)
    else:
        summary = await _run(memory, read, agent_id, concurrency, None)
    failures = [f.model_copy(update={"index": read.lines[f.index]}) for f in summary.failures] + read.unreadable
    return summary.model_copy(
        update={
            "messages": total,
            "failed": len(failures),
            "failures": sorted(failures, key=lambda failure: failure.index),
        }
    )


async def _run(
    memory: MemoryClient, read: MessageFile, agent_id: str | None, concurrency: int, progress: Any
) -> ImportSummary:
    if agent_id is None:
        return await memory.import_messages(read.entries, concurrency=concurrency, progress=progress)
    return await memory.write_many(agent_id, read.entries, concurrency=concurrency, progress=progress)


def print_summary(summary: ImportSummary) -> None:
    """The summary as two tables on stdout: the figures, then each failure by line."""
    from rich.console import Console
    from rich.table import Table

    console = Console(file=sys.stdout, soft_wrap=True)
    figures = Table(title="import summary", show_header=False)
    figures.add_column("figure")
    figures.add_column("value", justify="right")
    for name, value in (
        ("messages", summary.messages),
        ("written", summary.written),
        ("already written (skipped)", summary.duplicates),
        ("failed", summary.failed),
        ("agents", summary.agents),
        ("facts added", summary.facts_added),
        ("facts updated", summary.facts_updated),
        ("facts unchanged", summary.facts_unchanged),
        ("facts deleted", summary.facts_deleted),
        ("LLM calls", summary.llm_calls),
        ("tokens", summary.tokens_used.total_tokens),
        ("seconds", f"{summary.duration_ms / 1000:.1f}"),
    ):
        figures.add_row(name, str(value))
    console.print(figures)
    if not summary.failures:
        return
    failed = Table(title="failures")
    for column in ("line", "agent", "message id", "error"):
        failed.add_column(column)
    for failure in summary.failures:
        failed.add_row(
            str(failure.index),
            failure.agent_id or "",
            failure.message_id or "",
            f"{failure.error_type}: {failure.error}",
        )
    console.print(failed)


def read_export(path: Path) -> dict[str, Any]:
    """An export document from a file (InvalidInputError when it is not JSON)."""
    try:
        with path.open(encoding="utf-8") as source:
            document = json.load(source)
    except json.JSONDecodeError as exc:
        raise InvalidInputError(f"{path} is not JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise InvalidInputError(f"{path} is not a memory-sdk export (a JSON object)")
    return document


def scripted_llm_from_file(path: Path) -> ScriptedLLM:
    """A ScriptedLLM from a JSON file {purpose: [answer, ...]}: for test runs of the commands, never a default.

    Only answers are read (JSON objects or strings), no code: the worst such a file can do is make the command
    store what it says, which the person who wrote the command line could do with `memory-sdk write` anyway.
    """
    try:
        script = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InvalidInputError(f"scripted LLM file {path} is not JSON: {exc}") from exc
    if not isinstance(script, dict) or not all(
        isinstance(answers, list) and all(isinstance(a, dict | str) for a in answers) for answers in script.values()
    ):
        raise InvalidInputError(f"scripted LLM file {path} must map each purpose to a list of answers")
    print(f"memory-sdk: answering from the scripted LLM in {path} (test mode, no model)", file=sys.stderr)
    return ScriptedLLM(script)
