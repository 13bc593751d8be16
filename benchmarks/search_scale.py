"""search() as an agent's memory grows: 100, 10,000 and 100,000 facts per agent.

The memory is benchmarks/scale.py's (reused, not rebuilt): one database, one agent per size, realistic templated
facts with HashEmbedder vectors, 60% of them about the subject "Rafael", up to 200 other entities with aliases and
edges, closed and retracted versions, bulk-loaded with COPY and the HNSW index rebuilt, then ANALYZE. The
generated full-text column (migration 0007) is filled by PostgreSQL during the COPY.

Per size, `--queries` searches (after `--warmup` unmeasured ones) through `memory.search(agent, query, k=10)`,
cycling through four kinds:
- planted: a near-duplicate of one of the subject's planted facts ("Rafael ainda guarda ..."); its recall@10 is
  whether the planted fact is among the hits (the ANN index at work in a large subject);
- named: "what do I know about {person}?" for one of the agent's other entities (graph expansion, keyword, vector);
- subject: a question about the subject, who holds 60% of the facts (the largest graph neighbourhood);
- free: a fact-like sentence from the same templates, naming nothing in particular.

Printed per size: p50 / p95 wall time and p95 without the embedder (the SDK's own cost), per kind p95, and the
planted recall@10.

    python benchmarks/search_scale.py [--sizes 100 10000 100000] [--queries 80] [--dim 1536]
    python benchmarks/search_scale.py --quick      # sizes 100 1000, 12 queries: a smoke run
    python benchmarks/search_scale.py --database-url postgresql://user:pw@host/db
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from _common import TimedEmbedder, database, format_table, percentile
from scale import SUBJECT_TEMPLATES, AgentSeed, Filler, build_agent, near_duplicate, seed

from memory_sdk import MemoryClient, MemoryConfig
from memory_sdk.testing import HashEmbedder, ScriptedLLM

KINDS = ("planted", "named", "subject", "free")
SUBJECT_QUESTIONS = (
    "where does Rafael live now?",
    "where does Rafael work?",
    "what did Rafael eat with friends?",
    "how many km did Rafael run?",
    "which books did Rafael read?",
)


@dataclass
class Sample:
    kind: str
    wall_ms: float
    embed_ms: float
    hits: int
    found_planted: bool | None = None


@dataclass
class SizeReport:
    size: int
    samples: list[Sample] = field(default_factory=list)

    def wall(self, kind: str | None = None) -> list[float]:
        return [s.wall_ms for s in self.samples if kind is None or s.kind == kind]

    def own(self) -> list[float]:
        return [s.wall_ms - s.embed_ms for s in self.samples]

    @property
    def planted_recall(self) -> float:
        found = [s.found_planted for s in self.samples if s.found_planted is not None]
        return sum(found) / len(found) if found else float("nan")


def plan_query(agent: AgentSeed, kind: str, i: int, rng: random.Random, filler: Filler) -> tuple[str, str | None]:
    """The query text, and the planted fact's text it should find (planted kind only)."""
    if kind == "planted":
        planted = agent.planted[i % len(agent.planted)]
        return near_duplicate(planted.text), planted.text
    if kind == "named":
        other = rng.choice(agent.others)
        return f"what do I know about {other.name}?", None
    if kind == "subject":
        return SUBJECT_QUESTIONS[i % len(SUBJECT_QUESTIONS)], None
    text, _mentions = filler.fill(rng.choice(SUBJECT_TEMPLATES), agent.facts[i % len(agent.facts)].valid_from)
    return text.replace("Rafael ", "someone ", 1), None


async def measure(
    memory: MemoryClient, embedder: TimedEmbedder, agent: AgentSeed, queries: int, warmup: int
) -> SizeReport:
    rng = random.Random(agent.size)
    filler = Filler(rng, agent.others)
    report = SizeReport(agent.size)
    for i in range(warmup + queries):
        kind = KINDS[i % len(KINDS)]
        query, planted = plan_query(agent, kind, i // len(KINDS), rng, filler)
        embedded = embedder.seconds
        started = time.perf_counter()
        hits = await memory.search(agent.agent_id, query, k=10)
        wall_ms = (time.perf_counter() - started) * 1000
        if i < warmup:
            continue
        found = None if planted is None else any(hit.fact.text == planted for hit in hits)
        report.samples.append(Sample(kind, wall_ms, (embedder.seconds - embedded) * 1000, len(hits), found))
    return report


def print_report(reports: Sequence[SizeReport], load_s: float) -> None:
    print(f"seeded in {load_s:.1f} s (COPY, HNSW rebuild, ANALYZE)")
    header = ["facts/agent", "p50 ms", "p95 ms", "p95 w/o embed", *(f"p95 {kind}" for kind in KINDS)]
    header += ["hits", "planted recall@10"]
    rows = []
    for r in reports:
        per_kind = [f"{percentile(r.wall(kind), 95):.1f}" for kind in KINDS]
        mean_hits = sum(s.hits for s in r.samples) / len(r.samples)
        rows.append(
            [
                f"{r.size:,}",
                f"{percentile(r.wall(), 50):.1f}",
                f"{percentile(r.wall(), 95):.1f}",
                f"{percentile(r.own(), 95):.1f}",
                *per_kind,
                f"{mean_hits:.1f}",
                f"{r.planted_recall:.2f}",
            ]
        )
    print(format_table(header, rows))
    first, last = reports[0], reports[-1]
    growth = percentile(last.wall(), 95) / percentile(first.wall(), 95)
    print(f"growth {first.size:,} -> {last.size:,} facts: p95 x{growth:.2f}")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 10_000, 100_000])
    parser.add_argument("--queries", type=int, default=80, help="measured searches per size")
    parser.add_argument("--warmup", type=int, default=8, help="unmeasured searches per size before them")
    parser.add_argument("--dim", type=int, default=1536)
    parser.add_argument("--others", type=int, default=200, help="other entities per agent (at most)")
    parser.add_argument("--database-url", default=None, help="an existing database instead of a new embedded one")
    parser.add_argument("--quick", action="store_true", help="sizes 100 1000, 12 queries")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.queries, args.warmup = [100, 1000], 12, 2
    return args


async def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    run = uuid.uuid4().hex[:8]
    planted = 10
    agents = [build_agent(f"search-{size}-{run}", size, planted, args.others, seed=size) for size in sorted(args.sizes)]
    embedder = TimedEmbedder(HashEmbedder(dimensions=args.dim))
    with database(args.database_url) as url:
        config = MemoryConfig(embedding_dim=args.dim)
        async with MemoryClient(url, llm=ScriptedLLM(), embedder=embedder, config=config) as memory:
            started = time.perf_counter()
            await seed(url, agents, args.dim)
            load_s = time.perf_counter() - started
            reports = [await measure(memory, embedder, agent, args.queries, args.warmup) for agent in agents]
    print_report(reports, load_s)


if __name__ == "__main__":
    asyncio.run(main())
