"""The `memory-sdk import` / `export` commands' work: read a JSONL file of messages, import it with a progress bar,
print the summary as a table; read and write export documents; the scripted LLM of test runs.

    $ memory-sdk import chats.jsonl --agent user_123      # one message per line: speaker, text, occurred_at, ...
    $ memory-sdk export user_123 > user_123.json
    $ memory-sdk import --restore user_123.json --agent user_123_copy

`rich` is imported here only, when a command that draws runs.
"""

from __future__ import annotations

import argparse
import codecs
import json
import re
import sys
from collections.abc import Iterator, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

from memory_sdk.cli import EXIT_ERROR
from memory_sdk.cli_commands import require_agent
from memory_sdk.cli_output import print_counts, print_json, progress, to_json
from memory_sdk.cli_providers import CountedEmbedder, client, embedder, model_client
from memory_sdk.client import MemoryClient
from memory_sdk.errors import InvalidInputError
from memory_sdk.pricing import format_cost
from memory_sdk.results import ImportFailure, ImportProgress, ImportSummary
from memory_sdk.testing import ScriptedLLM

__all__ = [
    "MAX_LINE_BYTES",
    "MAX_LINE_DEPTH",
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


# A line holds one message: at most max_message_chars (32,000 by default) of text and a few recent messages as
# long, each character at worst a 6-byte \uXXXX escape, is ~1.2 MB. A longer line is no message: refused unread.
MAX_LINE_BYTES = 4 * 2**20
# A message line is an object of strings and lists of strings (2 levels); the cap leaves room for what a caller may
# add and refuses a line nested so deep that the JSON reader would exhaust the stack.
MAX_LINE_DEPTH = 16
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS = bytes(byte for byte in range(256) if byte not in b"[]{}")


def read_message_file(path: Path) -> MessageFile:
    """One JSON object per line (blank lines skipped): agent_id?, speaker, text, occurred_at, message_id?, ...
    Each line is read on its own, as bytes: a line that is too long, not UTF-8, nested too deep, not JSON or not
    an object is a failure of that line; the others are imported."""
    read = MessageFile()
    with path.open("rb") as source:
        for number, line in enumerate(_lines(source), start=1):
            if line is None:
                read.unreadable.append(_line_failure(number, f"longer than {MAX_LINE_BYTES:,} bytes, not read"))
                continue
            if number == 1:
                line = line.removeprefix(codecs.BOM_UTF8)
            if not line.strip():
                continue
            entry = _parse_line(line)
            if isinstance(entry, str):
                read.unreadable.append(_line_failure(number, entry))
                continue
            read.entries.append(_as_utc(entry))
            read.lines.append(number)
    return read


def _lines(source: BinaryIO) -> Iterator[bytes | None]:
    """The file's lines as bytes, each read with a cap: None for a line past MAX_LINE_BYTES (skipped to its end)."""
    while line := source.readline(MAX_LINE_BYTES + 1):
        if len(line) <= MAX_LINE_BYTES or line.endswith(b"\n"):
            yield line
            continue
        while (rest := source.readline(MAX_LINE_BYTES)) and not rest.endswith(b"\n"):
            pass
        yield None


def _parse_line(line: bytes) -> dict[str, Any] | str:
    """A line's message object, or why the line is not one."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"not UTF-8 text (byte {exc.start}: {line[exc.start : exc.start + 1]!r})"
    if _depth(line) > MAX_LINE_DEPTH:
        return f"JSON nested deeper than {MAX_LINE_DEPTH} levels"
    try:
        entry = json.loads(text)
    except json.JSONDecodeError as exc:
        return f"not JSON: {exc}"
    except RecursionError:  # unreachable past the depth check; kept so no line can end the import
        return "JSON nested too deeply to read"
    if not isinstance(entry, dict):
        return f"a line must be a JSON object, got {type(entry).__name__}"
    return entry


def _as_utc(entry: dict[str, Any]) -> dict[str, Any]:
    """The line with a naive ISO `occurred_at` read as UTC, as `write --occurred-at` reads it; any other value
    is left for write()'s own check to refuse with its message."""
    moment = entry.get("occurred_at")
    if not isinstance(moment, str):
        return entry
    try:
        parsed = datetime.fromisoformat(moment)
    except ValueError:
        return entry
    if parsed.utcoffset() is not None:
        return entry
    return {**entry, "occurred_at": parsed.replace(tzinfo=UTC).isoformat()}


def _depth(line: bytes) -> int:
    """How deep the line's brackets nest, strings left out (C-speed passes, then one over the brackets only)."""
    brackets = _JSON_STRING.sub(b"", line).translate(None, _NOT_BRACKETS)
    depth = deepest = 0
    for byte in brackets:
        depth += 1 if byte in b"[{" else -1
        deepest = max(deepest, depth)
    return deepest


def _line_failure(number: int, error: str) -> ImportFailure:
    return ImportFailure(index=number, error_type="InvalidInputError", error=f"line {number}: {error}")


async def import_file(
    memory: MemoryClient, read: MessageFile, *, agent_id: str | None, concurrency: int, progress_bar: bool
) -> ImportSummary:
    """Import the file's messages (all for `agent_id`, or each for its own) with a progress bar on stderr; the
    summary's failure indexes are the file's line numbers."""
    total = len(read.entries) + len(read.unreadable)
    if progress_bar:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        bar = Progress(
            TextColumn("importing"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[failed]} failed"),
            TimeRemainingColumn(),
            console=Console(stderr=True),  # stdout is the summary's (and --json's)
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
        ("cost", format_cost(summary.cost)),
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
    """An export document from a file (InvalidInputError when it is not UTF-8 JSON, or nests too deep to read;
    restore checks every row of it)."""
    try:
        document = json.loads(path.read_bytes().decode("utf-8").removeprefix("\ufeff"))
    except UnicodeDecodeError as exc:
        raise InvalidInputError(f"{path} is not UTF-8 text (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise InvalidInputError(f"{path} is not JSON: {exc}") from exc
    except RecursionError:
        raise InvalidInputError(f"{path} nests its JSON too deeply to read") from None
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


# -- the command handlers (memory_sdk.cli names them; imported only when one of these commands runs) --------------


async def import_command(args: argparse.Namespace) -> int:
    """`memory-sdk import FILE.jsonl` (through write(), with a progress bar) or `import --restore EXPORT.json`."""
    async with AsyncExitStack() as stack:
        if args.restore:
            document = read_export(args.file)
            if isinstance(document.get("events"), list) and not document["events"]:
                # An agent's memory starts with its first event: "restored 0 rows" would pass for a restore.
                raise InvalidInputError(f"{args.file} holds no events: the export of an agent with no memory")
            chosen, note = embedder(args, stack)
            if not args.json:
                print(note, file=sys.stderr)
            embedded = sum(len(document.get(name) or []) for name in ("events", "facts", "entities"))
            with progress(args, "restoring", embedded) as advance:
                async with client(args, embedder=CountedEmbedder(chosen, advance)) as memory:
                    counts = await memory.restore(document, agent_id=args.agent)
            target = args.agent or document.get("agent_id")
            print_counts(args, f"restored {sum(counts.values())} rows into agent {target!r}", counts)
            return 0
        read = read_message_file(args.file)
        memory = await stack.enter_async_context(_provided_client(args, stack, "import"))
        summary = await import_file(
            memory,
            read,
            agent_id=args.agent,
            concurrency=args.concurrency,
            progress_bar=not (args.json or args.no_progress),
        )
    if args.json:
        print_json(to_json(summary))
    else:
        print_summary(summary)
    return 0 if summary.success else EXIT_ERROR


async def export_command(args: argparse.Namespace) -> int:
    """`memory-sdk export AGENT [-o FILE]`: the export document on stdout or in a file."""
    async with client(args) as memory:
        await require_agent(memory, args.agent)
        document = await memory.export(args.agent)
    text = json.dumps(document, ensure_ascii=False, indent=1)
    if args.output is None:
        print(text)
        return 0
    args.output.write_text(text + "\n", encoding="utf-8")
    rows = sum(len(value) for value in document.values() if isinstance(value, list))
    print(f"exported {rows} rows of agent {args.agent!r} to {args.output}", file=sys.stderr)
    return 0


async def mcp_command(args: argparse.Namespace) -> int:
    """`memory-sdk mcp --agent A`: serve the agent's memory over MCP on stdio until the client goes away. Without
    a model it serves all the same: the read tools work and `remember` answers a tool error saying why."""
    from memory_sdk.mcp_server import serve_stdio

    async with AsyncExitStack() as stack:
        provided, no_model_reason = _mcp_client(args, stack)
        memory = await stack.enter_async_context(provided)
        await serve_stdio(memory, args.agent, allow_forget=args.allow_forget, no_model_reason=no_model_reason)
    return 0


# What `remember` answers when `memory-sdk mcp` started without a model (the server runs on: reads need none).
_MCP_NO_MODEL = (
    "start `memory-sdk mcp` with OPENAI_API_KEY set, or OPENAI_BASE_URL / --base-url for an OpenAI-compatible "
    "server (recall, facts, entity, fact_history, correct_fact and forget_fact work without one)"
)


def _mcp_client(args: argparse.Namespace, stack: AsyncExitStack) -> tuple[MemoryClient, str | None]:
    """The mcp command's client and, when no model is configured, why `remember` is refused. The notes go to
    stderr: stdout is the protocol's."""
    from memory_sdk.cli_providers import config, real_providers

    if args.scripted_llm is not None:
        return _provided_client(args, stack, "mcp"), None
    real = real_providers(args, stack)
    if real is not None:
        print("\n".join(real.notes), file=sys.stderr)
        return client(args, real.llm, real.embedder, config(args)), None
    chosen, note = embedder(args, stack)
    print(f"model: none, remember is refused: {_MCP_NO_MODEL}\n{note}", file=sys.stderr)
    return client(args, None, chosen, config(args)), _MCP_NO_MODEL


def _provided_client(args: argparse.Namespace, stack: AsyncExitStack, command: str) -> MemoryClient:
    """The configured model's client; with the hidden --scripted-llm FILE, one answering from that file (tests)."""
    if args.scripted_llm is None:
        return model_client(args, stack, command)
    chosen, _ = embedder(args, stack)
    return client(args, scripted_llm_from_file(args.scripted_llm), chosen)
