"""The client CPU of a write, per pipeline stage: where the SDK's own time goes when neither the LLM nor the database
is waited for.

One agent of `--size` facts is seeded as benchmarks/scale.py seeds it (a fresh embedded PostgreSQL, COPY, HashEmbedder
vectors), then `--writes` of scale.py's writes (after 10 unmeasured ones) run one at a time through
`MemoryClient.write` with its instant scripted LLM. Each stage of `runner.STAGES` is timed with `time.thread_time`:
the CPU the write's thread spent in it, not the time it waited, so the figures move much less with the machine's
load than wall times do (the event loop's handling of the stage's database replies is in them). Printed: the median
and mean per stage and for the whole write. With `--profile FILE`, the measured writes also run under cProfile and
its statistics are written to FILE (read them with `python -m pstats FILE`); the profiler inflates pure-Python code
about 1.5-2x, so take its figures as shares.

    python benchmarks/write_cpu.py [--size 100] [--writes 200]
    python benchmarks/write_cpu.py --size 10000 --profile writes.prof
    python benchmarks/write_cpu.py --size 100 --writes 3 --database-url postgresql://...   # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import random
import statistics
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

from _common import SqlCounter, TimedEmbedder, database, format_table
from scale import SUBJECT, Bench, Filler, build_agent, plan_write, seed, timed_write

from memory_sdk import MemoryClient, MemoryConfig
from memory_sdk.pipeline import runner
from memory_sdk.pipeline.state import Deps, WriteState
from memory_sdk.testing import HashEmbedder

DIM = 1536
UNMEASURED = 10

Stage = Callable[[WriteState, Deps], Awaitable[None]]


class StageClock:
    """Thread CPU per stage of the write being measured (writes run one at a time)."""

    def __init__(self) -> None:
        self.current: dict[str, float] = {}
        self.per_stage: dict[str, list[float]] = {}

    def wrap(self, name: str, stage: Stage) -> Stage:
        async def timed(state: WriteState, deps: Deps) -> None:
            started = time.thread_time()
            try:
                await stage(state, deps)
            finally:
                self.current[name] = self.current.get(name, 0.0) + (time.thread_time() - started) * 1000

        return timed

    def keep(self) -> None:
        for name, ms in self.current.items():
            self.per_stage.setdefault(name, []).append(ms)
        self.current.clear()


async def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    clock = StageClock()
    stages = runner.STAGES
    runner.STAGES = tuple((name, clock.wrap(name, stage)) for name, stage in stages)
    try:
        await measure(args, clock)
    finally:
        runner.STAGES = stages


@asynccontextmanager
async def warmed_agent(
    name: str, size: int, writes: int, database_url: str | None
) -> AsyncIterator[tuple[str, MemoryClient, str, list[str]]]:
    """A database (`database_url`, else a fresh embedded server) with one agent of `size` facts seeded as
    benchmarks/scale.py seeds it and UNMEASURED of scale.py's writes done: (url, client, agent id, the `writes`
    messages to measure), the client's model scripted for them."""
    agent = build_agent(f"{name}-{size}-{uuid.uuid4().hex[:8]}", size, 20, 200, seed=size)
    embedder = TimedEmbedder(HashEmbedder(dimensions=DIM))
    bench = Bench()
    with database(database_url) as url:
        async with MemoryClient(
            url, llm=bench.llm, embedder=embedder, config=MemoryConfig(embedding_dim=DIM)
        ) as memory:
            await seed(url, [agent], DIM)
            agent.release_rows()  # the loaded rows are the benchmark's memory, not the SDK's (scale.py)
            counter = SqlCounter(memory.database.engine)
            rng = random.Random(size)
            filler = Filler(rng, agent.others)
            for i in range(UNMEASURED):
                await timed_write(memory, embedder, counter, agent.agent_id, plan_write(bench, agent, i, rng, filler))
            messages = [plan_write(bench, agent, i, rng, filler) for i in range(UNMEASURED, UNMEASURED + writes)]
            yield url, memory, agent.agent_id, messages


async def measure(args: argparse.Namespace, clock: StageClock) -> None:
    async with warmed_agent("cpu", args.size, args.writes, args.database_url) as (_url, memory, agent_id, messages):
        clock.current.clear()
        profiler = cProfile.Profile() if args.profile else None
        whole: list[float] = []
        for message in messages:
            started = time.thread_time()
            if profiler:
                profiler.enable()
            await memory.write(agent_id, message, speaker_name=SUBJECT, verbose=True)
            if profiler:
                profiler.disable()
            whole.append((time.thread_time() - started) * 1000)
            clock.keep()
    if profiler:
        profiler.dump_stats(args.profile)
    rows = [
        (name, f"{statistics.median(values):.2f}", f"{statistics.fmean(values):.2f}")
        for name, values in clock.per_stage.items()
    ]
    rows.append(("whole write", f"{statistics.median(whole):.2f}", f"{statistics.fmean(whole):.2f}"))
    print(f"thread CPU per write (ms), {args.writes} writes at {args.size:,} facts")
    print(format_table(("stage", "median", "mean"), rows))
    if profiler:
        print(f"\ncProfile statistics of the measured writes: {args.profile}")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=100, help="facts of the agent")
    parser.add_argument("--writes", type=int, default=200, help="measured writes")
    parser.add_argument("--profile", type=Path, default=None, help="also profile the measured writes into this file")
    parser.add_argument("--database-url", default=None, help="an existing database instead of a new embedded one")
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main())
