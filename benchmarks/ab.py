"""Two trees of the SDK compared on one seeded agent, in interleaved pairs: a change measured against the noise.

On a shared 2-core machine the same tree's runs move by 10-20% from one minute to the next (docs/benchmarks.md),
so a scale.py run before a change and one after it compare the machine's hours, not the trees. This seeds
one agent once (scale.py's seed: one subject holding 60% of the facts, COPY, HashEmbedder vectors made dense) in an
embedded server whose data directory stays (`--dir`), then runs the same measured writes (scale.py's mix, instant
scripted LLM, or one whose calls wait `--llm-ms`) with each tree in turn, a fresh process and client each run, and
prints every pair and the median of the paired differences: p50 and p95 of the overhead (wall - LLM - embedder) and the
client thread's CPU per write.

    python benchmarks/ab.py seed --dir DIR --size 100000        # ~2 min at 100,000 facts
    python benchmarks/ab.py pairs --dir DIR --base HEAD~1 --pairs 6 --writes 60
    python benchmarks/ab.py run --dir DIR --writes 60            # one run of this tree, one JSON line
    python benchmarks/ab.py interleave --dir DIR --switches benchmarks/ab_shortlist.py --writes 120
    python benchmarks/ab.py seed --dir DIR --state STATE --size 100   # a second agent beside it
    python benchmarks/ab.py sizes --dir DIR --also STATE --writes 80  # growth, writes alternating

`interleave` compares settings that can be switched at run time within one process: the file's SWITCHES (name ->
function of the open client) take turns write by write, each called before its write, so the machine's drift,
which moves whole runs by 10-20% here, falls on all of them alike; it prints each switch's p50, p75, p95, mean and
client CPU. `sizes` does the same for two seeded agents of one database (`--also`: the other's state file): their
writes alternate, so the growth from the smaller to the larger compares sizes within the same minutes.

`pairs` checks `--base` out into a temporary git worktree and runs it with PYTHONPATH pointing there (the import
path is printed per run, so a tree that did not take is seen); this tree runs as installed. Both trees must share
the schema: the first to open the database migrates it. Each run adds its writes to the agent, so the pairs
alternate which tree goes first and the drift falls on both.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _common import SqlCounter, TimedEmbedder, bench_embedder, format_table, percentile
from scale import AgentSeed, Bench, Filler, WriteSample, build_agent, plan_write, seed, timed_write

import memory_sdk
from memory_sdk import MemoryClient, MemoryConfig
from memory_sdk.store.embedded import start_embedded_server

DIM = 1536
STATE_FILE = "ab-state.json"
FIGURES = ("p50", "p95", "cpu")
# The tree this process imported the SDK from (what `pairs` prints per run).
TREE = str(Path(memory_sdk.__file__).resolve().parent.parent)


def _url(args: argparse.Namespace) -> str:
    return str(args.database_url or start_embedded_server(Path(args.dir)))


def _state_path(args: argparse.Namespace) -> Path:
    return Path(args.state) if args.state else Path(args.dir) / STATE_FILE


async def seed_agent(args: argparse.Namespace) -> dict[str, Any]:
    """One agent of `--size` facts, as scale.py seeds it; what `run` needs to find it again is kept in the state
    file (the agent's id, size and seed, and how many runs have used it)."""
    url = _url(args)
    agent_id = f"ab-{args.size}"
    async with MemoryClient(url, llm=Bench().llm, embedder=bench_embedder(DIM), config=_config()):
        pass  # opening the client migrates the database
    await seed(url, [build_agent(agent_id, args.size, 20, 200, seed=args.size)], DIM)
    state = {"agent_id": agent_id, "size": args.size, "runs": 0}
    _state_path(args).write_text(json.dumps(state))
    return state


def _config() -> MemoryConfig:
    return MemoryConfig(embedding_dim=DIM)


# A switch for `interleave`: called with the open client before a measured write (may be a coroutine function).
Switch = Callable[[MemoryClient], Awaitable[None] | None]


async def measured_writes(args: argparse.Namespace, switches: dict[str, Switch]) -> dict[str, Samples]:
    """`--warmup` unmeasured and then, per switch, `--writes` measured writes of scale.py's mix on the seeded agent,
    one at a time: the switches take turns write by write (their order reversed every other round), each called just
    before its write. One switch that does nothing is `run`."""
    agent, rng, filler = _next_run(_state_path(args))
    bench = Bench(args.llm_ms / 1000)
    embedder = TimedEmbedder(bench_embedder(DIM))
    names = list(switches)
    samples = {name: Samples() for name in names}
    async with MemoryClient(_url(args), llm=bench.llm, embedder=embedder, config=_config()) as memory:
        counter = SqlCounter(memory.database.engine)
        for i in range(args.warmup + args.writes * len(names)):
            turn = i - args.warmup
            order = names if (turn // len(names)) % 2 == 0 else names[::-1]
            name = order[turn % len(names)]
            switched = switches[name](memory) if turn >= 0 else None  # the warm-up writes run as the client opened
            if switched is not None:
                await switched
            # The kind of write (plan_write: new / repeat / move / near-duplicate, by its number) goes by the round,
            # so every switch of a round gets the same kind: by the write's own number, two switches taking turns
            # a, b, b, a would split the kinds between them (a: new and near-duplicate, b: repeat and move).
            message = plan_write(bench, agent, i if turn < 0 else args.warmup + turn // len(names), rng, filler)
            sample = await timed_write(memory, embedder, counter, agent.agent_id, message)
            if turn >= 0:
                samples[name].add(sample)
    return samples


def _next_run(path: Path) -> tuple[AgentSeed, random.Random, Filler]:
    """The seeded agent of the state file at `path`, for one more run: its runs counted, its repeatable facts
    shuffled by that count (each run repeats other stored facts)."""
    state = json.loads(path.read_text())
    state["runs"] += 1
    path.write_text(json.dumps(state))
    agent = build_agent(state["agent_id"], state["size"], 20, 200, seed=state["size"])
    agent.release_rows()  # the seed's rows are not this process's to hold (scale.py AgentSeed.release_rows)
    rng = random.Random(state["runs"])
    rng.shuffle(agent.repeatable)
    return agent, rng, Filler(rng, agent.others)


async def sizes(args: argparse.Namespace) -> None:
    """The growth from one seeded agent to another (`--also`, a state file of the same database, e.g. a 100-fact
    agent beside the 100,000-fact one), writes alternating between them in one process, the order reversed every
    round: both sizes share every minute of the machine, which moves whole runs by 2x here (docs/benchmarks.md),
    so the ratio compares the sizes, not two minutes as scale.py's one-after-the-other runs do."""
    if not args.also:
        raise SystemExit("sizes needs --also STATE (the other agent's state file)")
    runs = [_next_run(Path(args.also)), _next_run(_state_path(args))]
    runs.sort(key=lambda run: run[0].size)
    bench = Bench(args.llm_ms / 1000)
    embedder = TimedEmbedder(bench_embedder(DIM))
    samples = {agent.size: Samples() for agent, _rng, _filler in runs}
    async with MemoryClient(_url(args), llm=bench.llm, embedder=embedder, config=_config()) as memory:
        counter = SqlCounter(memory.database.engine)
        for i in range(args.warmup + args.writes):
            for agent, rng, filler in runs if i % 2 == 0 else runs[::-1]:
                message = plan_write(bench, agent, i, rng, filler)
                sample = await timed_write(memory, embedder, counter, agent.agent_id, message)
                if i >= args.warmup:
                    samples[agent.size].add(sample)
    figures = {size: got.figures() for size, got in samples.items()}
    rows = [
        (f"{size:,}", f"{f['p50']:.1f}", f"{f['p95']:.1f}", f"{f['cpu']:.1f}", str(f["writes"]), str(f["failed"]))
        for size, f in figures.items()
    ]
    print(f"writes alternating between the agents on {args.dir} (overhead and client CPU, ms per write)")
    print(format_table(("facts/agent", "p50", "p95", "cpu", "writes", "failed"), rows))
    small, large = figures[runs[0][0].size], figures[runs[-1][0].size]
    print(f"growth p95 x{large['p95'] / small['p95']:.2f}, p50 x{large['p50'] / small['p50']:.2f}")


@dataclass
class Samples:
    """One switch's measured writes: overhead (wall - LLM - embedder) and client thread CPU, ms."""

    overheads: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    failed: int = 0

    def add(self, sample: WriteSample) -> None:
        self.overheads.append(sample.wall_ms - sample.llm_ms - sample.embed_ms)
        # timed_write's CPU measure, the embedder's time put back: ab.py's figure has always included it.
        self.cpu.append(sample.cpu_ms + sample.embed_ms)
        self.failed += not sample.result.success

    def figures(self) -> dict[str, Any]:
        return {
            "p50": round(statistics.median(self.overheads), 2),
            "p95": round(percentile(self.overheads, 95), 2),
            "cpu": round(statistics.median(self.cpu), 2),
            "writes": len(self.overheads),
            "failed": self.failed,
        }


async def run_writes(args: argparse.Namespace) -> dict[str, Any]:
    """`--warmup` unmeasured and `--writes` measured writes of this tree on the seeded agent: `run`'s JSON line."""
    samples = await measured_writes(args, {"this": lambda _memory: None})
    return {"tree": TREE, **samples["this"].figures()}


def load_switches(path: Path) -> dict[str, Switch]:
    """The SWITCHES dict of the Python file at `path` (name -> function of the client, run before each write)."""
    spec = importlib.util.spec_from_file_location("ab_switches", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    switches: dict[str, Switch] = module.SWITCHES
    return switches


async def interleave(args: argparse.Namespace) -> None:
    """One process, the switches of `--switches` taking turns write by write: a setting compared with itself off
    while the machine drifts under both alike (whole runs, even paired, resolve only large differences here)."""
    if not args.switches:
        raise SystemExit("interleave needs --switches FILE (a Python file defining SWITCHES)")
    samples = await measured_writes(args, load_switches(Path(args.switches)))
    rows = []
    for name, got in samples.items():
        figures = got.figures()
        p75 = percentile(got.overheads, 75)
        rows.append(
            (
                name,
                str(figures["writes"]),
                f"{figures['p50']:.1f}",
                f"{p75:.1f}",
                f"{figures['p95']:.1f}",
                f"{statistics.mean(got.overheads):.1f}",
                f"{figures['cpu']:.1f}",
                str(figures["failed"]),
            )
        )
    print(f"{args.writes} writes per switch, interleaved, on {args.dir} (overhead and client CPU, ms per write)")
    print(format_table(("switch", "writes", "p50", "p75", "p95", "mean", "cpu", "failed"), rows))


def paired_summary(pairs: Sequence[tuple[dict[str, float], dict[str, float]]]) -> list[tuple[str, ...]]:
    """Per figure: the base's and this tree's medians over the pairs, the median of (this - base) pair by pair,
    and in how many pairs this tree was lower."""
    rows: list[tuple[str, ...]] = []
    for figure in FIGURES:
        differences = [ours[figure] - base[figure] for base, ours in pairs]
        rows.append(
            (
                figure,
                f"{statistics.median(base[figure] for base, _ours in pairs):.1f}",
                f"{statistics.median(ours[figure] for _base, ours in pairs):.1f}",
                f"{statistics.median(differences):+.1f}",
                f"{sum(d < 0 for d in differences)} of {len(differences)}",
            )
        )
    return rows


def _one_run(args: argparse.Namespace, tree: Path | None) -> dict[str, Any]:
    """One `run` in a fresh process: this tree as installed, or `tree` first on the import path."""
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tree), env.get("PYTHONPATH", "")) if p)
    command = [sys.executable, str(Path(__file__).resolve()), "run", "--dir", args.dir, "--writes", str(args.writes)]
    command += ["--warmup", str(args.warmup), "--state", str(_state_path(args)), "--llm-ms", str(args.llm_ms)]
    if args.database_url:
        command += ["--database-url", args.database_url]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def compare(args: argparse.Namespace) -> None:
    """`--pairs` pairs of runs, the base tree (a git worktree of `--base`) and this one, alternating which goes
    first; every run printed as it ends, then the paired summary."""
    repo = Path(__file__).resolve().parent.parent
    if not args.database_url:
        # One embedded server for every run, started here and stopped when this process ends: a run that started its
        # own began with the server's shared buffers empty and read its pages from the OS again (the
        # pairs' spread fell once the server was kept running between runs).
        args.database_url = _url(args)
    with tempfile.TemporaryDirectory(prefix="memory-sdk-ab-") as scratch:
        base_tree = Path(scratch) / "base"
        subprocess.run(["git", "-C", str(repo), "worktree", "add", "--detach", str(base_tree), args.base], check=True)
        try:
            pairs: list[tuple[dict[str, float], dict[str, float]]] = []
            for number in range(args.pairs):
                order = [("base", base_tree), ("this", None)]
                if number % 2:
                    order.reverse()
                results = {name: _one_run(args, tree) for name, tree in order}
                for name, _tree in order:
                    got = results[name]
                    figures = "  ".join(f"{figure} {got[figure]:6.1f}" for figure in FIGURES)
                    print(f"pair {number + 1} {name:4}  {figures}  failed {got['failed']}  ({got['tree']})", flush=True)
                pairs.append((results["base"], results["this"]))
        finally:
            subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(base_tree)], check=False)
    print(f"\n{args.pairs} pairs of {args.writes} writes, base {args.base} against this tree (ms per write)")
    print(format_table(("figure", "base", "this", "median of differences", "this lower"), paired_summary(pairs)))


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("seed", "run", "pairs", "interleave", "sizes"))
    parser.add_argument("--dir", default=str(Path(tempfile.gettempdir()) / "memory-sdk-ab"), help="server data dir")
    parser.add_argument("--database-url", default=None, help="an existing database instead of the embedded one")
    parser.add_argument("--state", default=None, help=f"the state file (default: DIR/{STATE_FILE})")
    parser.add_argument("--size", type=int, default=100_000, help="seed: facts of the agent")
    parser.add_argument("--writes", type=int, default=60, help="measured writes per run")
    parser.add_argument("--warmup", type=int, default=5, help="unmeasured writes per run before them")
    parser.add_argument("--base", default="HEAD~1", help="pairs: the git revision to compare this tree with")
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--llm-ms", type=float, default=0.0, help="each scripted LLM call waits this long first")
    parser.add_argument("--switches", default=None, help="interleave: a Python file defining SWITCHES")
    parser.add_argument("--also", default=None, help="sizes: the state file of another agent of the same database")
    args = parser.parse_args(argv)
    Path(args.dir).mkdir(parents=True, exist_ok=True)
    return args


async def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.command == "seed":
        state = await seed_agent(args)
        print(f"seeded {state['agent_id']}: {state['size']:,} facts in {args.dir}")
    elif args.command == "run":
        print(json.dumps(await run_writes(args)))
    elif args.command == "interleave":
        await interleave(args)
    elif args.command == "sizes":
        await sizes(args)
    else:
        compare(args)


if __name__ == "__main__":
    asyncio.run(main())
