"""Writes per second under concurrent load, and what concurrency does to the memory's integrity.

For each LLM latency (`--llm-ms`, default 0 and 300) and agent count (`--agents`, default 1, 8, 32), every agent's
`--writes-per-agent` writes (default 20) are launched at once (asyncio.gather) through the public API. The
ScriptedLLM's responders are async: they sleep the latency, then answer (2-3 facts, 2-3 entities and 1 relation per
write; each agent's messages are its own; reconciliation answers ADD). The embedder is HashEmbedder(--dim).

Then "50 on one agent": 50 concurrent writes for ONE agent (after one write that sets where the speaker lives), each
saying the speaker moved to another city (a lives_in fact, a lives_in relation; reconciliation answers UPDATE of
candidate "1" whenever it is shown candidates).

Reported per configuration: writes/s, p50/p95 latency, errors (results with success False plus exceptions raised by
write()), lost events (writes that returned minus events stored for the agent), pipeline runs left 'running',
duplicate current facts (extra current rows with the same agent, subject and text), orphaned current edges (a current
relationship whose evidence fact is closed or retracted); for "50 on one agent" also the speaker's open lives_in
facts (must be 1) and current lives_in edges.

`--processes 2` runs the same load split across 2 OS processes (this script re-invoked with --worker) against one
database (started by the parent), and reports the combined writes/s. MemoryClient gets `pool_size=` and
`max_concurrent_writes=` only when its constructor accepts them; the pool settings used are printed.

    python benchmarks/throughput.py [--agents 1 8 32] [--writes-per-agent 20] [--llm-ms 0 300] [--processes 1]
    python benchmarks/throughput.py --processes 2
    python benchmarks/throughput.py --quick        # 1 and 8 agents, 5 writes each, llm 0 ms, one process
    python benchmarks/throughput.py --database-url postgresql://user:pw@host/db
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import re
import sys
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from _common import CITIES, database, format_table, percentile, prompt_message
from sqlalchemy import text

from memory_sdk import MemoryClient, MemoryConfig
from memory_sdk.llm.protocols import LLMRequest
from memory_sdk.testing import HashEmbedder, ScriptedLLM

SPEAKER = "Rafael"
FRIENDS = ["Marina Duarte", "Carlos Moreira", "Beatriz Teixeira", "Joana Cardoso", "Thiago Barros"]
CAFES = ["the corner bakery", "Café Lisboa", "the market stall", "Padaria Central", "the bookshop café"]
ITEMS = ["a bicycle lock", "running shoes", "a coffee grinder", "a desk lamp", "a rain jacket", "a chess set"]
HOME = "Curitiba"


@dataclass(frozen=True)
class Job:
    agent_id: str
    index: int
    scenario: str  # "distinct" | "move"


def plan(job: Job) -> tuple[str, dict[str, Any]]:
    """The message of one write and what the scripted model extracts from it (unique per agent and index)."""
    if job.scenario == "move":
        city = HOME if job.index < 0 else CITIES[1 + job.index % (len(CITIES) - 1)]
        suffix = "" if job.index < len(CITIES) - 1 else f" (move {job.index})"
        message = f"I just moved to {city}!{suffix}"
        return message, {
            "entities": [{"name": SPEAKER, "type": "person"}, {"name": city, "type": "place"}],
            "facts": [
                {
                    "subject": SPEAKER,
                    "text": f"{SPEAKER} lives in {city}",
                    "attribute": "lives_in",
                    "action": "UPDATE",
                    "importance_category": "biographical_milestone",
                }
            ],
            "relations": [{"source": SPEAKER, "target": city, "type": "lives_in"}],
        }
    agent_no = sum(map(ord, job.agent_id)) % 97
    friend = FRIENDS[(agent_no + job.index) % len(FRIENDS)]
    cafe = CAFES[(agent_no * 3 + job.index) % len(CAFES)]
    order = f"{agent_no:02d}{job.index:03d}-{job.agent_id[-6:]}"
    day = (datetime(2025, 1, 1, tzinfo=UTC) + timedelta(days=job.index * 3 + agent_no)).strftime("%Y-%m-%d")
    facts = [
        {"subject": SPEAKER, "text": f"{SPEAKER} had coffee with {friend} at {cafe} on {day}"},
        {"subject": friend, "text": f"{friend} is training for a half marathon, week {job.index + 1} of the plan"},
    ]
    message = f"Had coffee with {friend} at {cafe} today (order {order}). She is in week {job.index + 1} of training."
    if job.index % 2 == 0:
        item = ITEMS[(agent_no + job.index) % len(ITEMS)]
        facts.append({"subject": SPEAKER, "text": f"{SPEAKER} bought {item} on {day}, order {order}"})
        message += f" I also bought {item}."
    return message, {
        "entities": [{"name": SPEAKER, "type": "person"}, {"name": friend, "type": "person"}],
        "facts": [{**fact, "importance_category": "specific_event"} for fact in facts],
        "relations": [{"source": SPEAKER, "target": friend, "type": "friend_of"}],
    }


def scripted_llm(jobs: Sequence[Job], latency_s: float) -> ScriptedLLM:
    plans = dict(plan(job) for job in jobs)

    async def extract(request: LLMRequest) -> dict[str, Any]:
        await asyncio.sleep(latency_s)
        return plans.get(prompt_message(request)) or {"entities": [], "facts": [], "relations": []}

    async def reconcile(request: LLMRequest) -> dict[str, Any]:
        await asyncio.sleep(latency_s)
        content = request.messages[-1]["content"]
        if "lives in" in content and "\n1. " in content:
            return {"reasoning": "moved", "action": "UPDATE", "target": "1"}
        return {"reasoning": "new information", "action": "ADD", "target": None}

    async def reconcile_batch(request: LLMRequest) -> dict[str, Any]:
        """Several facts of one write with similar candidates (one call for all): each is new information."""
        await asyncio.sleep(latency_s)
        numbers = _BATCHED_FACT.findall(request.messages[-1]["content"])
        return {"decisions": [{"fact": number, "action": "ADD", "target": None} for number in numbers]}

    async def resolve(request: LLMRequest) -> dict[str, Any]:
        await asyncio.sleep(latency_s)
        return {"reasoning": "none of these", "match": None}

    return ScriptedLLM(
        {
            "informed_extraction": extract,
            "reconciliation": reconcile,
            "reconciliation_batch": reconcile_batch,
            "entity_resolution": resolve,
        }
    )


_BATCHED_FACT = re.compile(r"^New fact (\d+) ", re.MULTILINE)


def client_options(pool_size: int, max_concurrent_writes: int) -> tuple[dict[str, Any], str]:
    """The keyword arguments this SDK's MemoryClient accepts, and a line saying what was passed."""
    accepted = inspect.signature(MemoryClient.__init__).parameters
    wanted = {"pool_size": pool_size, "max_concurrent_writes": max_concurrent_writes}
    passed = {name: value for name, value in wanted.items() if value > 0 and name in accepted}
    missing = [name for name in wanted if name not in accepted]
    line = "MemoryClient(" + ", ".join(f"{k}={v}" for k, v in passed.items()) + ")"
    if missing:
        line += f"; this SDK's MemoryClient has no {' / '.join(missing)}: its defaults apply"
    return passed, line


def pool_description(memory: MemoryClient) -> str:
    pool: Any = memory.database.engine.pool
    size = pool.size() if hasattr(pool, "size") else "?"
    overflow = getattr(pool, "_max_overflow", "?")
    timeout = getattr(pool, "_timeout", "?")
    return f"engine pool: size={size} max_overflow={overflow} timeout={timeout}s"


# --- running writes (in this process, or in a worker process) ------------------------------------------------------


@dataclass
class RunOutcome:
    latencies_ms: list[float] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # result.error of results with success False
    raised: list[str] = field(default_factory=list)  # exceptions out of write()
    accepted: dict[str, int] = field(default_factory=dict)  # agent -> writes that returned
    started: float = 0.0  # epoch seconds
    finished: float = 0.0
    pool: str = ""

    def merge(self, other: RunOutcome) -> None:
        self.latencies_ms += other.latencies_ms
        self.failed += other.failed
        self.raised += other.raised
        for agent, count in other.accepted.items():
            self.accepted[agent] = self.accepted.get(agent, 0) + count
        self.started = min(self.started, other.started) if self.started else other.started
        self.finished = max(self.finished, other.finished)
        self.pool = self.pool or other.pool

    def to_json(self) -> str:
        return json.dumps(self.__dict__)

    @classmethod
    def from_json(cls, line: str) -> RunOutcome:
        return cls(**json.loads(line))


async def run_jobs(
    url: str, jobs: Sequence[Job], latency_s: float, dim: int, options: dict[str, Any], ready: Any = None
) -> RunOutcome:
    """Open a client, (signal ready and wait for the go), launch every job at once, collect what happened."""
    outcome = RunOutcome()
    llm = scripted_llm(jobs, latency_s)
    embedder = HashEmbedder(dimensions=dim)
    async with MemoryClient(
        url, llm=llm, embedder=embedder, config=MemoryConfig(embedding_dim=dim), **options
    ) as memory:
        outcome.pool = pool_description(memory)
        if ready is not None:
            await ready()

        async def one(job: Job) -> None:
            message, _ = plan(job)
            started = time.perf_counter()
            try:
                result = await memory.write(job.agent_id, message, speaker_name=SPEAKER)
            except Exception as exc:  # noqa: BLE001 - counted and reported, that is the benchmark's job
                outcome.raised.append(f"{type(exc).__name__}: {exc}")
                return
            outcome.latencies_ms.append((time.perf_counter() - started) * 1000)
            outcome.accepted[job.agent_id] = outcome.accepted.get(job.agent_id, 0) + 1
            if not result.success:
                outcome.failed.append(result.error or "success False without an error")

        outcome.started = time.time()
        await asyncio.gather(*(one(job) for job in jobs))
        outcome.finished = time.time()
    return outcome


async def worker() -> None:
    """--worker: read a spec line, open the client, print READY, wait for GO, run, print the outcome as JSON."""
    loop = asyncio.get_running_loop()
    spec = json.loads(await loop.run_in_executor(None, sys.stdin.readline))
    jobs = [Job(*job) for job in spec["jobs"]]

    async def ready() -> None:
        print("READY", flush=True)
        await loop.run_in_executor(None, sys.stdin.readline)

    outcome = await run_jobs(spec["url"], jobs, spec["latency_s"], spec["dim"], spec["options"], ready)
    print("OUTCOME " + outcome.to_json(), flush=True)


async def run_in_processes(
    url: str, jobs: Sequence[Job], processes: int, latency_s: float, dim: int, options: dict[str, Any]
) -> RunOutcome:
    """Split the jobs over worker processes (by agent when there are enough agents, else by write), start them
    together, and merge what they report."""
    agents = list(dict.fromkeys(job.agent_id for job in jobs))
    shares: list[list[Job]] = [[] for _ in range(processes)]
    for n, job in enumerate(jobs):
        slot = agents.index(job.agent_id) % processes if len(agents) >= processes else n % processes
        shares[slot].append(job)
    children = []
    for share in (s for s in shares if s):
        child = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--worker", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
        )
        assert child.stdin is not None
        spec = {
            "url": url,
            "jobs": [[j.agent_id, j.index, j.scenario] for j in share],
            "latency_s": latency_s,
            "dim": dim,
            "options": options,
        }
        child.stdin.write((json.dumps(spec) + "\n").encode())
        await child.stdin.drain()
        children.append(child)
    for child in children:
        assert child.stdout is not None
        line = await child.stdout.readline()
        if line.strip() != b"READY":
            raise RuntimeError(f"worker did not start: {line!r}")
    for child in children:
        assert child.stdin is not None
        child.stdin.write(b"GO\n")
        await child.stdin.drain()
    merged = RunOutcome()
    for child in children:
        assert child.stdout is not None
        out, _ = await child.communicate()
        lines = [line for line in out.decode().splitlines() if line.startswith("OUTCOME ")]
        if child.returncode != 0 or not lines:
            raise RuntimeError(f"worker failed with exit code {child.returncode}")
        merged.merge(RunOutcome.from_json(lines[-1].removeprefix("OUTCOME ")))
    return merged


# --- what ended up in the database ----------------------------------------------------------------------------------


@dataclass
class Integrity:
    lost_events: int
    runs_running: int
    duplicate_facts: int
    orphaned_edges: int
    open_lives_in: int = 0
    lives_in_edges: int = 0


async def integrity(memory: MemoryClient, outcome: RunOutcome, agents: Sequence[str]) -> Integrity:
    stored = {agent: len(await memory.get_events(agent)) for agent in agents}
    lost = sum(outcome.accepted.get(agent, 0) - stored[agent] for agent in agents)
    ids = {"ids": list(agents), "speaker": f"person:{SPEAKER.lower()}"}
    async with memory.database.transaction() as session:  # the operator's view: no tenant, every agent's rows
        running = await session.scalar(
            text("SELECT count(*) FROM memory_pipeline_runs WHERE agent_id = ANY(:ids) AND status = 'running'"), ids
        )
        duplicates = await session.scalar(
            text(
                "SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM memory_facts"
                " WHERE agent_id = ANY(:ids) AND valid_to IS NULL AND invalidated_at IS NULL"
                " GROUP BY agent_id, entity_key, fact_text HAVING count(*) > 1) d"
            ),
            ids,
        )
        orphans = await session.scalar(
            text(
                "SELECT count(*) FROM memory_relationships r JOIN memory_facts f ON f.id = r.evidence_fact_id"
                " WHERE r.agent_id = ANY(:ids) AND r.invalidated_at IS NULL"
                " AND (f.valid_to IS NOT NULL OR f.invalidated_at IS NOT NULL)"
            ),
            ids,
        )
        open_lives_in = await session.scalar(
            text(
                "SELECT count(*) FROM memory_facts WHERE agent_id = ANY(:ids) AND entity_key = :speaker"
                " AND attribute = 'lives_in' AND valid_to IS NULL AND invalidated_at IS NULL"
            ),
            ids,
        )
        lives_in_edges = await session.scalar(
            text(
                "SELECT count(*) FROM memory_relationships WHERE agent_id = ANY(:ids) AND source_key = :speaker"
                " AND rel_type = 'lives_in' AND invalidated_at IS NULL"
            ),
            ids,
        )
    return Integrity(
        lost,
        int(running or 0),
        int(duplicates or 0),
        int(orphans or 0),
        int(open_lives_in or 0),
        int(lives_in_edges or 0),
    )


# --- scenarios and report ------------------------------------------------------------------------------------------


@dataclass
class Row:
    scenario: str
    agents: int
    writes: int
    llm_ms: int
    processes: int
    outcome: RunOutcome
    checks: Integrity

    @property
    def writes_per_s(self) -> float:
        seconds = self.outcome.finished - self.outcome.started
        return self.writes / seconds if seconds > 0 else float("nan")

    @property
    def errors(self) -> int:
        return len(self.outcome.failed) + len(self.outcome.raised)


async def run_scenario(
    url: str, jobs: list[Job], args: argparse.Namespace, llm_ms: int, options: dict[str, Any]
) -> RunOutcome:
    if args.processes > 1:
        return await run_in_processes(url, jobs, args.processes, llm_ms / 1000, args.dim, options)
    return await run_jobs(url, jobs, llm_ms / 1000, args.dim, options)


async def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker:
        await worker()
        return
    options, passed = client_options(args.pool_size, args.max_concurrent_writes)
    run = uuid.uuid4().hex[:6]
    rows: list[Row] = []
    moves: list[Row] = []
    with database(args.database_url) as url:
        async with MemoryClient(
            url,
            llm=ScriptedLLM(),
            embedder=HashEmbedder(dimensions=args.dim),
            config=MemoryConfig(embedding_dim=args.dim),
        ) as reader:
            for llm_ms in args.llm_ms:
                for agents in args.agents:
                    ids = [f"tp-{run}-{llm_ms}ms-{agents}a-{n:02d}" for n in range(agents)]
                    jobs = [Job(agent, i, "distinct") for agent in ids for i in range(args.writes_per_agent)]
                    outcome = await run_scenario(url, jobs, args, llm_ms, options)
                    checks = await integrity(reader, outcome, ids)
                    rows.append(Row("distinct", agents, len(jobs), llm_ms, args.processes, outcome, checks))
                if args.move_writes:
                    agent = f"tp-{run}-{llm_ms}ms-move"
                    home = await run_jobs(url, [Job(agent, -1, "move")], llm_ms / 1000, args.dim, options)
                    jobs = [Job(agent, i, "move") for i in range(args.move_writes)]
                    outcome = await run_scenario(url, jobs, args, llm_ms, options)
                    outcome.accepted[agent] = outcome.accepted.get(agent, 0) + home.accepted.get(agent, 0)
                    outcome.failed += home.failed
                    checks = await integrity(reader, outcome, [agent])
                    moves.append(Row("move", 1, len(jobs), llm_ms, args.processes, outcome, checks))
    report(rows, moves, args, passed)


def report(rows: list[Row], moves: list[Row], args: argparse.Namespace, passed: str) -> None:
    pools = sorted({row.outcome.pool for row in rows + moves})
    print(f"embedding dim {args.dim}; {passed}; {'; '.join(pools)}")
    print(f"{args.processes} process(es); all writes of a configuration launched at once\n")
    header = (
        "agents",
        "writes",
        "llm ms",
        "procs",
        "writes/s",
        "p50 ms",
        "p95 ms",
        "errors",
        "lost events",
        "runs running",
        "dup facts",
        "orphan edges",
    )
    table: list[tuple[object, ...]] = [
        (
            r.agents,
            r.writes,
            r.llm_ms,
            r.processes,
            f"{r.writes_per_s:.1f}",
            f"{percentile(r.outcome.latencies_ms, 50):.0f}",
            f"{percentile(r.outcome.latencies_ms, 95):.0f}",
            r.errors,
            r.checks.lost_events,
            r.checks.runs_running,
            r.checks.duplicate_facts,
            r.checks.orphaned_edges,
        )
        for r in rows
    ]
    print(format_table(header, table))
    if moves:
        print(
            f"\n{args.move_writes} concurrent writes on one agent, each a move to another city (after one write "
            "that sets the first city)"
        )
        header = (
            "llm ms",
            "procs",
            "writes/s",
            "p50 ms",
            "p95 ms",
            "errors",
            "open lives_in",
            "lives_in edges",
            "orphan edges",
            "lost events",
            "runs running",
            "dup facts",
        )
        table = [
            (
                r.llm_ms,
                r.processes,
                f"{r.writes_per_s:.1f}",
                f"{percentile(r.outcome.latencies_ms, 50):.0f}",
                f"{percentile(r.outcome.latencies_ms, 95):.0f}",
                r.errors,
                r.checks.open_lives_in,
                r.checks.lives_in_edges,
                r.checks.orphaned_edges,
                r.checks.lost_events,
                r.checks.runs_running,
                r.checks.duplicate_facts,
            )
            for r in moves
        ]
        print(format_table(header, table))
    problems: Counter[str] = Counter()
    for r in rows + moves:
        for message in r.outcome.failed + r.outcome.raised:
            problems[f"[{r.scenario}, {r.agents} agents, {r.llm_ms} ms] {message.splitlines()[0][:300]}"] += 1
    if problems:
        print("\nerrors, most frequent first:")
        for message, count in problems.most_common(12):
            print(f"  {count:>4} x {message}")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--agents", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--writes-per-agent", type=int, default=20)
    parser.add_argument("--llm-ms", type=int, nargs="+", default=[0, 300])
    parser.add_argument("--move-writes", type=int, default=50, help="the one-agent scenario's writes (0: skip it)")
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--dim", type=int, default=1536)
    parser.add_argument("--pool-size", type=int, default=10, help="passed if MemoryClient accepts it (0: never)")
    parser.add_argument(
        "--max-concurrent-writes", type=int, default=64, help="passed if MemoryClient accepts it (0: never)"
    )
    parser.add_argument("--database-url", default=None, help="an existing database instead of a new embedded one")
    parser.add_argument("--quick", action="store_true", help="1 and 8 agents, 5 writes each, llm 0 ms, one process")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.agents, args.writes_per_agent, args.llm_ms, args.processes, args.move_writes = [1, 8], 5, [0], 1, 10
    return args


if __name__ == "__main__":
    asyncio.run(main())
