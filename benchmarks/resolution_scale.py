"""Entity resolution cost per name as an agent's registry grows: 100, 10,000 and 100,000 entities.

Loads N person entities (with aliases and name embeddings) for one agent into a fresh embedded PostgreSQL, then
times the entity_resolution and alias_lookup stages (from the trace) of dry-run writes that mention one name:
an exact alias hit, and an unknown name that goes through the pgvector fuzzy search. Prints a table.

    python benchmarks/resolution_scale.py [--sizes 100 10000 100000] [--repeats 20] [--dim 256]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid

from sqlalchemy import insert, text

from memory_sdk import MemoryClient, MemoryConfig
from memory_sdk.store import tables as t
from memory_sdk.store.embedded import temporary_embedded_server
from memory_sdk.testing import HashEmbedder, ScriptedLLM
from memory_sdk.text import entity_key, normalise_alias

SYLLABLES = ["ka", "ri", "lo", "ma", "te", "su", "no", "vi", "da", "ghe", "ran", "zo", "bel", "tor", "mi", "sa"]


def person_name(n: int) -> str:
    first = "".join(SYLLABLES[(n >> (4 * i)) % 16] for i in range(3)).capitalize()
    last = "".join(SYLLABLES[(n >> (4 * i + 12)) % 16] for i in range(3)).capitalize()
    return f"{first} {last}{n}"


async def load_people(memory: MemoryClient, agent_id: str, count: int, embedder: HashEmbedder) -> None:
    batch = 2000
    for start in range(0, count, batch):
        names = [person_name(n) for n in range(start, min(count, start + batch))]
        vectors = await embedder.embed(names)
        async with memory.database.transaction() as session:
            await session.execute(
                insert(t.entities),
                [
                    {
                        "id": uuid.uuid4(),
                        "agent_id": agent_id,
                        "entity_key": entity_key("person", name),
                        "display_name": name,
                        "entity_type": "person",
                        "name_embedding": vector,
                    }
                    for name, vector in zip(names, vectors, strict=True)
                ],
            )
            await session.execute(
                insert(t.aliases),
                [
                    {
                        "agent_id": agent_id,
                        "alias_norm": normalise_alias(name),
                        "alias": name,
                        "entity_key": entity_key("person", name),
                        "source": "benchmark",
                    }
                    for name in names
                ],
            )


# The scripted extraction mentions whichever name the benchmark is timing.
MENTIONED = {"name": ""}
LLM = ScriptedLLM(
    {
        "informed_extraction": lambda request: {
            "entities": [{"name": MENTIONED["name"], "type": "person"}],
            "facts": [],
            "relations": [],
        }
    }
)


async def time_stage(memory: MemoryClient, agent_id: str, name: str, repeats: int) -> tuple[float, float]:
    MENTIONED["name"] = name
    resolution, lookup = [], []
    for _ in range(repeats):
        result = await memory.write(
            agent_id, f"{name} came by today.", speaker_name="Bench", dry_run=True, verbose=True
        )
        assert result.pipeline is not None
        resolution.append(result.pipeline.step("entity_resolution").duration_ms)
        lookup.append(result.pipeline.step("alias_lookup").duration_ms)
    return statistics.median(resolution), statistics.median(lookup)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 10_000, 100_000])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--dim", type=int, default=256)
    args = parser.parse_args()
    embedder = HashEmbedder(dimensions=args.dim)
    rows = []
    with temporary_embedded_server("memory-sdk-bench-") as url:
        async with MemoryClient(
            url, llm=ScriptedLLM(), embedder=embedder, config=MemoryConfig(embedding_dim=args.dim)
        ) as memory:
            for size in args.sizes:
                agent_id = f"bench-{size}"
                started = time.perf_counter()
                await load_people(memory, agent_id, size, embedder)
                load_s = time.perf_counter() - started
                # Noise: another agent of the same size shares the index, as in a multi-tenant database.
                await load_people(memory, f"noise-{size}", min(size, 10_000), embedder)
                async with memory.database.transaction() as session:
                    await session.execute(text("ANALYZE"))  # the statistics autovacuum would keep in steady state
                known = person_name(size // 2)
                exact_ms, exact_lookup = await time_stage(memory, agent_id, known, args.repeats)
                fuzzy_ms, _ = await time_stage(memory, agent_id, "Zyxwv Qqqq", args.repeats)
                rows.append((size, load_s, exact_ms, exact_lookup, fuzzy_ms))
    print(f"embedding dim {args.dim}, median of {args.repeats} dry-run writes, one name per write\n")
    header = ("entities/agent", "load s", "exact name ms", "alias lookup ms", "fuzzy (new) name ms")
    print(f"{header[0]:>15} {header[1]:>8} {header[2]:>14} {header[3]:>16} {header[4]:>20}")
    for size, load_s, exact_ms, lookup_ms, fuzzy_ms in rows:
        print(f"{size:>15,} {load_s:>8.1f} {exact_ms:>14.2f} {lookup_ms:>16.2f} {fuzzy_ms:>20.2f}")


if __name__ == "__main__":
    asyncio.run(main())
