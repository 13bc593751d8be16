"""The `memory-sdk` command: run the demo, write a message, read facts, relationships, events and traces.

    $ memory-sdk demo                                  # offline: replays answers recorded from a real model
    $ memory-sdk write user_123 "Moro em Curitiba" --speaker Rafael --occurred-at 2025-01-10
    $ memory-sdk facts user_123 --entity Rafael --history
    $ memory-sdk trace user_123 <event id>

Errors the SDK raises on purpose (MemorySDKError) print as one line and exit with status 1.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import io
import json
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
from typing import Any, TypeVar
from uuid import UUID

from pydantic import BaseModel

from memory_sdk import __version__
from memory_sdk.client import MemoryClient
from memory_sdk.config import MemoryConfig
from memory_sdk.demo import CONVERSATION, DEMO_SPEAKER, Recording, RecordingLLM, ReplayLLM, bundled_recording
from memory_sdk.demo.replay import load_recording
from memory_sdk.errors import MemorySDKError, ProviderNotConfigured, UsageError
from memory_sdk.llm.protocols import EmbeddingProvider, LLMProvider
from memory_sdk.results import Event, Fact, PipelineTrace, Relationship, WriteResult
from memory_sdk.testing import HashEmbedder

__all__ = ["main"]

Row = TypeVar("Row", Fact, Relationship, Event)

# OpenAIProvider's default model; repeated here only to say on screen which model answers.
_DEFAULT_MODEL = "gpt-4o-mini"
# Trace data values longer than this are cut in text output (`--json` prints them whole).
_TRACE_VALUE_MAX_CHARS = 240
_EXIT_ERROR = 1
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
        print(f"memory-sdk: error: {_one_line(str(exc)) or type(exc).__name__}", file=sys.stderr)
        return _EXIT_ERROR
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

    parser = argparse.ArgumentParser(prog="memory-sdk", description="Versioned memory for AI agents.")
    parser.add_argument("--version", action="version", version=f"memory-sdk {__version__}")
    sub = parser.add_subparsers(required=True, metavar="COMMAND")

    demo = sub.add_parser("demo", parents=[common, model], help="write the example conversation and show the result")
    demo.add_argument("--agent", help="agent id (default: demo-<timestamp>, fresh each run)")
    demo.add_argument("--record", type=Path, metavar="PATH", help="save the real model's answers for replay")
    demo.add_argument("--replay", type=Path, metavar="PATH", help="replay this recording instead of the bundled one")
    demo.set_defaults(command=_demo)

    write = sub.add_parser("write", parents=[common, model], help="write one message")
    write.add_argument("agent")
    write.add_argument("message")
    write.add_argument("--speaker", required=True)
    write.add_argument("--occurred-at", type=_moment, help="ISO date or datetime (naive means UTC)")
    write.add_argument("--dry-run", action="store_true", help="extract and reconcile, store nothing")
    write.add_argument("--verbose", action="store_true", help="print the pipeline trace")
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
    events.add_argument("--limit", type=int)
    events.set_defaults(command=_events)

    trace = sub.add_parser("trace", parents=[common], help="the pipeline trace of one write")
    trace.add_argument("agent")
    trace.add_argument("event_id", type=UUID, metavar="EVENT_ID")
    trace.set_defaults(command=_trace)

    bench = sub.add_parser("bench", parents=[common], help="time the SDK's own work per write (replayed LLM)")
    bench.add_argument("--rounds", type=int, default=3, help="times the demo conversation is written (default 3)")
    bench.set_defaults(command=_bench)
    return parser


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
    from memory_sdk.llm.openai import OpenAIEmbedder, OpenAIProvider

    model = args.model or _DEFAULT_MODEL
    timeout = {"timeout_sec": args.timeout} if args.timeout else {}
    llm = OpenAIProvider(model=model, base_url=base_url, structured=args.structured, **timeout)
    stack.push_async_callback(llm.aclose)
    embedder: EmbeddingProvider
    if api_key and not base_url:
        openai_embedder = OpenAIEmbedder()
        stack.push_async_callback(openai_embedder.aclose)
        embedder, embedder_name = openai_embedder, f"OpenAIEmbedder ({openai_embedder.model})"
        why = ""
    else:
        embedder, embedder_name = HashEmbedder(), "HashEmbedder"
        why = f" ({base_url} is not assumed to serve embeddings)" if base_url else " (no OPENAI_API_KEY)"
    notes = [
        f"model: {model} at {base_url or 'the OpenAI API'}",
        f"embeddings: {embedder_name}{why}",
    ]
    if embedder_name == "HashEmbedder":
        notes[-1] += ": deterministic lexical vectors, no embedding model"
    return _Providers(llm, embedder, model, base_url, embedder_name, notes)


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
    notes = [
        f"no OPENAI_API_KEY / OPENAI_BASE_URL: replaying responses recorded from {recording.model} "
        f"on {recording.recorded_at:%Y-%m-%d}"
        + (f" (that run took {took} s; a replay takes far less)" if took else ""),
        "embeddings: HashEmbedder (deterministic lexical vectors, no embedding model, no network)",
    ]
    return _DemoSetup(ReplayLLM(recording), HashEmbedder(), notes, recording=recording)


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
                    _print_result(result, calls=True)
                    print()
            facts = await memory.get_facts(agent)
            relationships = await memory.get_relationships(agent)
    seconds = time.perf_counter() - started
    summaries = [_summary(result) for result in results]
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
        _print_json({key: _dump(value) for key, value in document.items()})
        return 0
    _print_memory(agent, facts, relationships)
    calls = [call for r in results if r.pipeline for step in r.pipeline.steps for call in step.llm_calls]
    failed = sum(call.status == "failed" for call in calls)
    tokens = sum(r.tokens_used.total_tokens for r in results)
    print(f"\ntotal: {len(results)} writes, {len(calls)} LLM calls ({failed} failed), {tokens} tokens, {seconds:.1f} s")
    if isinstance(llm, RecordingLLM):
        print(f"recorded {len(llm.calls)} calls to {args.record}")
    if isinstance(llm, ReplayLLM) and setup.recording is not None:
        _print_replay_check(setup.recording, llm, summaries)
    where = _location_flags(args)
    print(f"\nexplore: memory-sdk facts {agent} --history{where}   |   memory-sdk events {agent}{where}")
    return 0


async def _write(args: argparse.Namespace) -> int:
    async with AsyncExitStack() as stack:
        real = _real_providers(args, stack)
        if real is None:
            raise ProviderNotConfigured(
                "write needs a model: set OPENAI_API_KEY, or OPENAI_BASE_URL / --base-url for an OpenAI-compatible "
                "server (`memory-sdk demo` runs offline)"
            )
        if not args.json:
            print("\n".join(real.notes), file=sys.stderr)
        async with _client(args, real.llm, real.embedder, _config(args)) as memory:
            result = await memory.write(
                args.agent,
                args.message,
                args.speaker,
                occurred_at=args.occurred_at,
                dry_run=args.dry_run,
                verbose=args.verbose,
            )
    if args.json:
        _print_json(_dump(result))
        return 0 if result.success else _EXIT_ERROR
    _print_result(result, calls=True, indent="")
    if result.pipeline is not None:
        print("trace:")
        _print_trace(result.pipeline)
    return 0 if result.success else _EXIT_ERROR


async def _facts(args: argparse.Namespace) -> int:
    async with _client(args) as memory:
        facts = await memory.get_facts(
            args.agent, entity=args.entity, as_of=args.as_of, known_at=args.known_at, include_history=args.history
        )
    _print_rows(args, facts, _fact_line, "(no facts)")
    return 0


async def _relationships(args: argparse.Namespace) -> int:
    async with _client(args) as memory:
        rels = await memory.get_relationships(
            args.agent, entity=args.entity, as_of=args.as_of, include_invalidated=args.all
        )
    _print_rows(args, rels, _relationship_line, "(no relationships)")
    return 0


async def _events(args: argparse.Namespace) -> int:
    async with _client(args) as memory:
        events = await memory.get_events(args.agent, limit=args.limit)
    _print_rows(args, events, _event_line, "(no events)")
    return 0


async def _trace(args: argparse.Namespace) -> int:
    async with _client(args) as memory:
        trace = await memory.get_trace(args.agent, args.event_id)
    if trace is None:
        raise UsageError(f"no pipeline run recorded for event {args.event_id} of agent {args.agent!r}")
    if args.json:
        _print_json(_dump(trace))
    else:
        _print_trace(trace, indent="")
    return 0


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
        _print_json(report)
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
    return f"{scripts}: {', '.join(found)}" if found else "benchmarks/ of the source repository"


# -- output -----------------------------------------------------------------------------------------------------


def _when(moment: datetime | None) -> str:
    if moment is None:
        return "now"
    moment = moment.astimezone(UTC)
    return (
        f"{moment:%Y-%m-%d}" if (moment.hour, moment.minute, moment.second) == (0, 0, 0) else f"{moment:%Y-%m-%d %H:%M}"
    )


def _fact_line(fact: Fact) -> str:
    attribute = f" [{fact.attribute}]" if fact.attribute else ""
    span = f"{_when(fact.valid_from)} -> {_when(fact.valid_to)}" if fact.valid_to else f"since {_when(fact.valid_from)}"
    invalidated = ", invalidated" if fact.invalidated_at else ""
    return (
        f"{fact.entity_key}: {_one_line(fact.text)}{attribute}  ({span}, confidence {fact.confidence:.2f}{invalidated})"
    )


def _event_line(event: Event) -> str:
    return f"{event.id}  {_when(event.occurred_at)}  {event.speaker}: {_one_line(event.content)}"


def _print_rows(args: argparse.Namespace, rows: Sequence[Row], line: Callable[[Row], str], empty: str) -> None:
    if args.json:
        _print_json(_dump(list(rows)))
        return
    print("\n".join(line(row) for row in rows) if rows else empty)


def _relationship_line(rel: Relationship) -> str:
    span = (
        f"since {_when(rel.valid_from)}"
        if rel.valid_to is None
        else f"{_when(rel.valid_from)} -> {_when(rel.valid_to)}"
    )
    invalidated = ", invalidated" if rel.invalidated_at else ""
    return f"{rel.source_key} -[{rel.rel_type}]-> {rel.target_key}  (strength {rel.strength:.2f}, {span}{invalidated})"


def _print_result(result: WriteResult, *, calls: bool = False, indent: str = "  ") -> None:
    usage = result.tokens_used
    head = [
        f"path {result.extraction_path}",
        f"{result.llm_calls} LLM call{'s' if result.llm_calls != 1 else ''}",
        f"{usage.total_tokens} tokens ({usage.input_tokens} in / {usage.output_tokens} out)",
        f"{result.duration_ms:.0f} ms",
    ]
    if result.dry_run:
        head.append("dry run: nothing stored")
    elif result.event_id is not None:
        head.append(f"event {result.event_id}")
    print(indent + " | ".join(head))
    if result.entities_resolved:
        print(indent + "entities: " + ", ".join(_entity_text(e) for e in result.entities_resolved))
    superseded = {f.id: f for f in result.facts_superseded}
    for mark, label, facts in (
        ("+", "added", result.facts_added),
        ("~", "updated", result.facts_updated),
        ("=", "unchanged", result.facts_unchanged),
        ("-", "deleted", result.facts_deleted),
    ):
        for fact in facts:
            old = superseded.get(fact.supersedes_fact_id) if fact.supersedes_fact_id else None
            was = f"  (was: {_one_line(old.text)})" if old is not None else ""
            print(f"{indent}{mark} {label:<9} {fact.entity_key}: {_one_line(fact.text)}{was}")
    for rel in result.relationships:
        print(f"{indent}> relation  {rel.source_key} -[{rel.rel_type}]-> {rel.target_key} ({rel.strength:.2f})")
    if calls and result.pipeline is not None:
        for step in result.pipeline.steps:
            for call in step.llm_calls:
                if call.status == "failed":
                    print(f"{indent}! {call.purpose} failed: {_one_line(call.error or '')}")
    if result.error:
        print(f"{indent}error: {_one_line(result.error)}")


def _entity_text(entity: Any) -> str:
    details = [entity.phase, *(["created"] if entity.created and entity.phase != "new" else [])]
    if entity.score is not None:
        details.append(f"{entity.score:.2f}")
    return f"{entity.name} -> {entity.key} ({', '.join(details)})"


def _print_memory(agent: str, facts: list[Fact], relationships: list[Relationship]) -> None:
    print(f"current facts of {agent} ({len(facts)}):")
    for fact in facts:
        print("  " + _fact_line(fact))
    print(f"current relationships ({len(relationships)}):")
    for rel in relationships:
        print("  " + _relationship_line(rel))


def _print_trace(trace: PipelineTrace, indent: str = "  ") -> None:
    for step in trace.steps:
        print(f"{indent}{step.name:<18} {step.status:<8} {step.duration_ms:>9.1f} ms")
        for call in step.llm_calls:
            error = f": {_one_line(call.error)}" if call.error else ""
            print(
                f"{indent}    llm {call.purpose} {call.status}, {call.duration_ms:.0f} ms, "
                f"{call.usage.total_tokens} tokens{error}"
            )
        for key, value in step.data.items():
            text = json.dumps(value, ensure_ascii=False, default=str)
            if len(text) > _TRACE_VALUE_MAX_CHARS:
                text = text[: _TRACE_VALUE_MAX_CHARS - 3] + "..."
            print(f"{indent}    {key}: {text}")
        if step.error:
            print(f"{indent}    error: {_one_line(step.error)}")


def _summary(result: WriteResult) -> dict[str, Any]:
    """What a write produced, free of ids and timings: equal summaries mean a replay reproduced a run."""

    def texts(facts: list[Fact]) -> list[str]:
        return [f"{fact.entity_key}: {fact.text}" for fact in facts]

    return {
        "success": result.success,
        "extraction_path": result.extraction_path,
        "llm_calls": result.llm_calls,
        "tokens": result.tokens_used.total_tokens,
        "entities": [f"{e.key} ({e.phase})" for e in result.entities_resolved],
        "added": texts(result.facts_added),
        "updated": texts(result.facts_updated),
        "unchanged": texts(result.facts_unchanged),
        "deleted": texts(result.facts_deleted),
        "relationships": [f"{r.source_key} {r.rel_type} {r.target_key}" for r in result.relationships],
        "error": result.error,
    }


def _print_replay_check(recording: Recording, llm: ReplayLLM, summaries: list[dict[str, Any]]) -> None:
    def comparable(summary: dict[str, Any]) -> dict[str, Any]:
        return {key: value for key, value in summary.items() if key != "error"}

    if recording.results:
        differing = [
            str(number)
            for number, (now, then) in enumerate(zip(summaries, recording.results, strict=False), start=1)
            if comparable(now) != comparable(then)
        ]
        if len(summaries) != len(recording.results):
            differing.append(f"(recorded {len(recording.results)} messages, replayed {len(summaries)})")
        if differing:
            print(f"\nreplay differs from the recorded run for message(s) {', '.join(differing)}")
        else:
            print(f"\nreplay reproduced the recorded run: {len(summaries)}/{len(summaries)} messages identical")
    if llm.mismatches or llm.exhausted:
        print(
            f"note: {len(llm.mismatches)} answer(s) went to prompts that differ from the recorded ones and "
            f"{len(llm.exhausted)} call(s) had no recorded answer: the prompts or the pipeline changed since "
            f"{recording.recorded_at:%Y-%m-%d}; record again with `memory-sdk demo --record PATH`"
        )


def _dump(value: BaseModel | list[Any] | str) -> Any:
    """JSON-ready form of a result, or of a list of them."""
    if isinstance(value, list):
        return [_dump(item) for item in value]
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else value


def _print_json(value: Any) -> None:
    print(json.dumps(value, ensure_ascii=False, indent=2, default=str))


def _one_line(text: str) -> str:
    return " ".join(text.split())


if __name__ == "__main__":
    sys.exit(main())
