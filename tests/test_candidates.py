"""Candidate retrieval against the real pgvector index: the same top-k as an exact search whatever the path
(exact scan, HNSW iterative scan, fallback) and however many times one connection has run the statement."""

from __future__ import annotations

import math
import uuid
from datetime import UTC, datetime

import pytest
from sqlalchemy import insert, text

from memory_sdk.store import tables as t
from memory_sdk.store.candidates import CandidateProbe, nearest_current_facts
from memory_sdk.testing import HashEmbedder
from tests.conftest import ClientFactory

pytestmark = pytest.mark.integration

WHEN = datetime(2025, 6, 15, tzinfo=UTC)
TOPICS = ["jazz", "futebol", "viagem", "cachorro", "trabalho", "cozinha", "livros", "corrida", "música", "praia"]


def fact_texts(count: int, seed: str) -> list[str]:
    return [
        f"{seed} gosta de {TOPICS[n % len(TOPICS)]} número {n} com {TOPICS[(n * 7) % len(TOPICS)]}"
        for n in range(count)
    ]


async def seed_subject(client_db: object, agent_id: str, key: str, texts: list[str], embedder: HashEmbedder) -> None:
    vectors = await embedder.embed(texts)
    async with client_db.transaction() as session:  # type: ignore[attr-defined]
        await session.execute(
            insert(t.entities).values(
                id=uuid.uuid4(), agent_id=agent_id, entity_key=key, display_name=key, entity_type="person"
            )
        )
        await session.execute(
            insert(t.facts),
            [
                {
                    "id": uuid.uuid4(),
                    "agent_id": agent_id,
                    "entity_key": key,
                    "fact_text": text_,
                    "confidence": 0.9,
                    "importance": 0.5,
                    "importance_category": "routine_activity",
                    "valid_from": WHEN,
                    "embedding": vector,
                    "schema_version": 1,
                }
                for text_, vector in zip(texts, vectors, strict=True)
            ],
        )


def exact_top(vectors: list[list[float]], query: list[float], k: int) -> list[float]:
    """The k best cosine similarities, computed here from the stored vectors (ties make ids ambiguous)."""

    def cos(a: list[float], b: list[float]) -> float:
        return sum(x * y for x, y in zip(a, b, strict=True)) / (
            math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
        )

    return sorted((cos(vector, query) for vector in vectors), reverse=True)[:k]


@pytest.mark.parametrize("exact_below", [1_000, 10], ids=["exact-scan", "hnsw-iterative-scan"])
async def test_candidates_match_an_exact_search_past_the_sixth_execution_on_one_connection(
    make_client: ClientFactory, agent_id: str, exact_below: int
) -> None:
    embedder = HashEmbedder()
    texts = fact_texts(120, "Rafael")
    async with make_client(pool_size=1) as memory:  # one connection: its prepared statements are reused
        await seed_subject(memory.database, agent_id, "person:rafael", texts, embedder)
        # Another subject and another agent share the index: the filters must not starve the scan.
        await seed_subject(memory.database, agent_id, "person:ana", fact_texts(150, "Ana"), embedder)
        await seed_subject(memory.database, agent_id + "-other", "person:rafael", fact_texts(150, "Rafael"), embedder)
        async with memory.database.transaction() as session:
            await session.execute(text("ANALYZE memory_facts"))
        vectors = await embedder.embed(texts)
        queries = [f"Rafael gosta de {topic} número {n}" for n, topic in enumerate(TOPICS[:8])]
        for query in queries:  # eight executions of each statement on the same connection
            [query_vector] = await embedder.embed([query])
            async with memory.database.tenant(agent_id) as conn:
                [found] = await nearest_current_facts(
                    conn, agent_id, [CandidateProbe("person:rafael", query_vector)], 5, exact_below=exact_below
                )
            found_similarities = [c.similarity or 0.0 for c in found]
            assert found_similarities == pytest.approx(exact_top(vectors, query_vector, 5), abs=1e-4), query
            assert all(c.entity_key == "person:rafael" for c in found)


async def test_candidates_of_several_subjects_come_from_one_call_in_probe_order(
    make_client: ClientFactory, agent_id: str
) -> None:
    embedder = HashEmbedder()
    async with make_client() as memory:
        await seed_subject(memory.database, agent_id, "person:rafael", fact_texts(30, "Rafael"), embedder)
        await seed_subject(memory.database, agent_id, "person:ana", fact_texts(30, "Ana"), embedder)
        [query] = await embedder.embed(["gosta de jazz"])
        probes = [
            CandidateProbe("person:ana", query),
            CandidateProbe("person:nobody", query),
            CandidateProbe("person:rafael", None),
        ]
        async with memory.database.tenant(agent_id) as conn:
            ana, nobody, rafael = await nearest_current_facts(conn, agent_id, probes, 3)
    assert [c.entity_key for c in ana] == ["person:ana"] * 3 and all("jazz" in c.text for c in ana)
    assert nobody == []
    assert len(rafael) == 3 and all(c.similarity is None for c in rafael)  # no vector: most recent first
