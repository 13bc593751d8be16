"""Two trees of the SDK compared on one seeded agent, in interleaved pairs: a change measured against the noise.

On a shared 2-core machine the same tree's runs move by 10-20% from one minute to the next (docs/benchmarks.md,
sessions 25 and 26), so a scale.py run before a change and one after it compare the machine's hours, not the trees.
This seeds one agent once (scale.py's seed: one subject holding 60% of the facts, COPY, HashEmbedder vectors) in an
embedded server whose data directory stays (`--dir`), then runs the same measured writes (scale.py's mix, instant
scripted LLM, or one whose calls wait `--llm-ms`) with each tree in turn, a fresh process and client each run, and
prints every pair and the median of the paired differences: p50 and p95 of the overhead (wall - LLM - embedder) and
the client thread's CPU per write.

    python benchmarks/ab.py seed --dir /tmp/ab-100k --size 100000        # ~2 min at 100,000 facts
    python benchmarks/ab.py pairs --dir /tmp/ab-100k --base HEAD~1 --pairs 6 --writes 60
    python benchmarks/ab.py run --dir /tmp/ab-100k --writes 60            # one run of this tree, one JSON line

`pairs` checks `--base` out into a temporary git worktree and runs it with PYTHONPATH pointing there (the import
path is printed per run, so a tree that did not take is seen); this tree runs as installed. Both trees must share
the schema: the first to open the database migrates it. Each run adds its writes to the agent, so the pairs
alternate which tree goes first and the drift falls on both.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _common import SqlCounter, TimedEmbedder, format_table, percentile
from scale import Bench, Filler, build_agent, plan_write, seed, timed_write

import memory_sdk
from memory_sdk import MemoryClient, MemoryConfig
from memory_sdk.store.embedded import start_embedded_server
from memory_sdk.testing import HashEmbedder

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
    async with MemoryClient(url, llm=Bench().llm, embedder=HashEmbedder(dimensions=DIM), config=_config()):
        pass  # opening the client migrates the database
    await seed(url, [build_agent(agent_id, args.size, 20, 200, seed=args.size)], DIM)
    state = {"agent_id": agent_id, "size": args.size, "runs": 0}
    _state_path(args).write_text(json.dumps(state))
    return state


def _config() -> MemoryConfig:
    return MemoryConfig(embedding_dim=DIM)


async def run_writes(args: argparse.Namespace) -> dict[str, Any]:
    """`--warmup` unmeasured and `--writes` measured writes of scale.py's mix on the seeded agent, one at a time."""
    path = _state_path(args)
    state = json.loads(path.read_text())
    state["runs"] += 1
    path.write_text(json.dumps(state))
    agent = build_agent(state["agent_id"], state["size"], 20, 200, seed=state["size"])
    agent.release_rows()  # the seed's rows are not this process's to hold (scale.py AgentSeed.release_rows)
    rng = random.Random(state["runs"])
    rng.shuffle(agent.repeatable)  # each run repeats other stored facts
    bench = Bench(args.llm_ms / 1000)
    embedder = TimedEmbedder(HashEmbedder(dimensions=DIM))
    filler = Filler(rng, agent.others)
    overheads: list[float] = []
    cpu: list[float] = []
    failed = 0
    async with MemoryClient(_url(args), llm=bench.llm, embedder=embedder, config=_config()) as memory:
        counter = SqlCounter(memory.database.engine)
        for i in range(args.warmup + args.writes):
            message = plan_write(bench, agent, i, rng, filler)
            started = time.thread_time()
            sample = await timed_write(memory, embedder, counter, agent.agent_id, message)
            if i >= args.warmup:
                cpu.append((time.thread_time() - started) * 1000)
                overheads.append(sample.wall_ms - sample.llm_ms - sample.embed_ms)
                failed += not sample.result.success
    return {
        "tree": TREE,
        "p50": round(statistics.median(overheads), 2),
        "p95": round(percentile(overheads, 95), 2),
        "cpu": round(statistics.median(cpu), 2),
        "writes": len(overheads),
        "failed": failed,
    }


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
        # own began with the server's shared buffers empty and read its pages from the OS again (session 27: the
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
    parser.add_argument("command", choices=("seed", "run", "pairs"))
    parser.add_argument("--dir", default=str(Path(tempfile.gettempdir()) / "memory-sdk-ab"), help="server data dir")
    parser.add_argument("--database-url", default=None, help="an existing database instead of the embedded one")
    parser.add_argument("--state", default=None, help=f"the state file (default: DIR/{STATE_FILE})")
    parser.add_argument("--size", type=int, default=100_000, help="seed: facts of the agent")
    parser.add_argument("--writes", type=int, default=60, help="measured writes per run")
    parser.add_argument("--warmup", type=int, default=5, help="unmeasured writes per run before them")
    parser.add_argument("--base", default="HEAD~1", help="pairs: the git revision to compare this tree with")
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--llm-ms", type=float, default=0.0, help="each scripted LLM call waits this long first")
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
    else:
        compare(args)


if __name__ == "__main__":
    asyncio.run(main())
