"""Candidate retrieval against the real database: the same top-k as an exact search whatever the path (exact scan,
binary codes re-ranked by full precision) and however many times one connection has run the statement."""

from __future__ import annotations

import math
import uuid
from datetime import UTC, datetime

import pytest
from sqlalchemy import insert, text

from memory_sdk import MemoryClient, MemoryConfig
from memory_sdk.store import tables as t
from memory_sdk.store.candidates import MID_SHARE, CandidateProbe, nearest_current_facts
from memory_sdk.testing import HashEmbedder
from memory_sdk.text import fact_identity_key
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
                    "identity_key": fact_identity_key(text_),
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


@pytest.mark.parametrize(
    ("large_from", "shortlist"), [(1_000, 400), (10, 30)], ids=["exact-scan", "binary-codes-re-ranked"]
)
async def test_candidates_match_an_exact_search_past_the_sixth_execution_on_one_connection(
    make_client: ClientFactory, agent_id: str, large_from: int, shortlist: int
) -> None:
    embedder = HashEmbedder()
    texts = fact_texts(120, "Rafael")
    async with make_client(pool_size=1) as memory:  # one connection: its prepared statements are reused
        await seed_subject(memory.database, agent_id, "person:rafael", texts, embedder)
        # Another subject and another agent share the index: the filters must keep them out.
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
                    conn,
                    agent_id,
                    [CandidateProbe("person:rafael", query_vector)],
                    5,
                    large_from=large_from,
                    shortlist=shortlist,
                )
            found_similarities = [c.similarity or 0.0 for c in found]
            assert found_similarities == pytest.approx(exact_top(vectors, query_vector, 5), abs=1e-4), query
            assert all(c.entity_key == "person:rafael" for c in found)


# Vectors whose binary codes (the sign of each dimension) disagree with their cosine: the probe is positive in
# every dimension; the "near" facts point its way in the first dimension and are slightly negative in all others
# (code 1000..., cosine 0.88-0.92), the "far" ones are positive nearly everywhere but in the first dimension
# (a code 1 to 20 bits from the probe's, cosine about 0.36 and below).
DIM = 1536
PROBE = [1.0] + [0.01] * (DIM - 1)
NEAR = {f"Rafael toca {n} instrumentos": [1.0] + [-0.001 * n] * (DIM - 1) for n in (1, 2, 3)}
FAR = {f"Rafael gosta de jazz número {n}": [0.0] + [0.02] * (DIM - 1 - n) + [-0.02] * n for n in range(20)}


async def _seed_codes_against_cosine(memory: MemoryClient, agent_id: str) -> dict[str, uuid.UUID]:
    embedder = HashEmbedder(overrides={**NEAR, **FAR})
    await seed_subject(memory.database, agent_id, "person:rafael", [*NEAR, *FAR], embedder)
    async with memory.database.tenant(agent_id) as conn:
        rows = await conn.fetch("SELECT id, fact_text FROM memory_facts WHERE agent_id = $1", agent_id)
    return {row["fact_text"]: row["id"] for row in rows}


async def test_a_large_subjects_shortlist_is_ranked_by_full_precision_not_by_its_codes(
    make_client: ClientFactory, agent_id: str
) -> None:
    async with make_client() as memory:
        ids = await _seed_codes_against_cosine(memory, agent_id)
        async with memory.database.tenant(agent_id) as conn:
            [found] = await nearest_current_facts(
                conn, agent_id, [CandidateProbe("person:rafael", PROBE)], 5, large_from=10, shortlist=30
            )
    # Every fact is shortlisted (30 > 23); by their codes the "far" ones come first, by cosine the "near" ones.
    expected = [*NEAR, "Rafael gosta de jazz número 0", "Rafael gosta de jazz número 1"]
    assert [c.id for c in found] == [ids[t] for t in expected]
    expected_similarities = exact_top([*NEAR.values(), *FAR.values()], PROBE, 5)
    assert [c.similarity for c in found] == pytest.approx(expected_similarities, abs=1e-4)  # float32 stored


async def test_a_large_subjects_fact_of_the_probes_identity_key_is_ranked_even_when_its_code_is_far(
    make_client: ClientFactory, agent_id: str
) -> None:
    async with make_client() as memory:
        ids = await _seed_codes_against_cosine(memory, agent_id)
        same_text = "RAFAEL toca 1 instrumentos!"  # the first "near" fact but for case and punctuation
        probe = CandidateProbe("person:rafael", PROBE, identity_key=fact_identity_key(same_text))
        async with memory.database.tenant(agent_id) as conn:
            [found] = await nearest_current_facts(conn, agent_id, [probe], 5, large_from=10, shortlist=5)
    # The 5 shortlisted by code are "far" ones; the identity key's fact joins them and ranks first by cosine.
    expected = ["Rafael toca 1 instrumentos", *(f"Rafael gosta de jazz número {n}" for n in range(4))]
    assert [c.id for c in found] == [ids[t] for t in expected]


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


async def test_a_large_subject_probed_without_a_vector_gets_its_most_recent_facts(
    make_client: ClientFactory, agent_id: str
) -> None:
    texts = fact_texts(30, "Rafael")
    async with make_client() as memory:
        await seed_subject(memory.database, agent_id, "person:rafael", texts, HashEmbedder())
        async with memory.database.tenant(agent_id) as conn:
            [found] = await nearest_current_facts(
                conn, agent_id, [CandidateProbe("person:rafael", None)], 3, large_from=10
            )
    # A code ranks nothing without a vector: the whole subject is ordered by when it was recorded.
    assert [c.text for c in found] == texts[::-1][:3]
    assert all(c.similarity is None for c in found)


# A mid-size subject (from exact_below up to large_from current facts): its `mid_shortlist` facts nearest by the
# Hamming distance of their codes, picked on the server, ranked by full precision. The seed's 23 facts make it
# visible: the 5 nearest by code are all "far" ones, so the "near" ones (first by cosine) are not ranked.
MID = {"exact_below": 10, "large_from": 1_000}


async def test_a_mid_size_subject_is_ranked_over_its_hamming_shortlist(
    make_client: ClientFactory, agent_id: str
) -> None:
    async with make_client() as memory:
        ids = await _seed_codes_against_cosine(memory, agent_id)
        probe = CandidateProbe("person:rafael", PROBE)
        async with memory.database.tenant(agent_id) as conn:
            [short] = await nearest_current_facts(conn, agent_id, [probe], 5, mid_shortlist=5, **MID)
            [whole] = await nearest_current_facts(conn, agent_id, [probe], 5, mid_shortlist=30, **MID)
            [exact] = await nearest_current_facts(conn, agent_id, [probe], 5)  # 23 facts: under MID_SIZE_FROM
    far = [f"Rafael gosta de jazz número {n}" for n in range(5)]
    assert [c.id for c in short] == [ids[t] for t in far]
    expected = [*NEAR, "Rafael gosta de jazz número 0", "Rafael gosta de jazz número 1"]
    assert [c.id for c in whole] == [c.id for c in exact] == [ids[t] for t in expected]


async def test_a_mid_size_subjects_identity_fact_is_ranked_and_a_probe_without_a_vector_gets_the_newest(
    make_client: ClientFactory, agent_id: str
) -> None:
    async with make_client() as memory:
        ids = await _seed_codes_against_cosine(memory, agent_id)
        identity = fact_identity_key("Rafael toca 1 instrumentos")
        with_vector = CandidateProbe("person:rafael", PROBE, identity_key=identity)
        async with memory.database.tenant(agent_id) as conn:
            [with_key] = await nearest_current_facts(conn, agent_id, [with_vector], 6, mid_shortlist=5, **MID)
            [without_vector] = await nearest_current_facts(
                conn, agent_id, [CandidateProbe("person:rafael", None, identity_key=identity)], 30, **MID
            )
    # The identity key's fact joins the 5 shortlisted by code and ranks first by cosine.
    assert [c.id for c in with_key] == [ids["Rafael toca 1 instrumentos"]] + [
        ids[f"Rafael gosta de jazz número {n}"] for n in range(5)
    ]
    # No vector, no code: the whole subject, most recent first, each fact once (the identity key's included).
    assert len(without_vector) == 23 and len({c.id for c in without_vector}) == 23
    assert all(c.similarity is None for c in without_vector)


async def test_a_mid_size_subject_beside_a_cached_large_one_is_ranked_over_its_hamming_shortlist(
    make_client: ClientFactory, agent_id: str
) -> None:
    config = MemoryConfig(embedding_dim=HashEmbedder().dimensions, subject_code_cache_mb=8)
    async with make_client(config=config) as memory:
        ids = await _seed_codes_against_cosine(memory, agent_id)
        await seed_subject(memory.database, agent_id, "person:ana", fact_texts(40, "Ana"), HashEmbedder())
        probes = [CandidateProbe("person:ana", PROBE), CandidateProbe("person:rafael", PROBE)]
        tiers = {"exact_below": 10, "large_from": 30, "mid_shortlist": 5}  # Ana (40) is large, Rafael (23) mid-size
        async with memory.database.tenant(agent_id) as conn:
            first = await nearest_current_facts(conn, agent_id, probes, 5, **tiers)
        assert memory.database.subject_codes.loader is not None
        await memory.database.subject_codes.loader.drain()
        assert memory.database.subject_codes.get(agent_id, "person:ana") is not None  # asked for by the first read
        async with memory.database.tenant(agent_id) as conn:
            second = await nearest_current_facts(conn, agent_id, probes, 5, **tiers)  # the cached read
    far = [ids[f"Rafael gosta de jazz número {n}"] for n in range(5)]
    assert [c.id for c in first[1]] == [c.id for c in second[1]] == far
    assert len(second[0]) == 5 and all(c.entity_key == "person:ana" for c in second[0])


# Codes against cosine, graded: fact n is n + 1 bits from the probe's code and nearer by cosine the larger n is, so
# the best of a shortlist of the K nearest by code is fact K - 1.
GRADED_PROBE = [1.0, 1.0] + [0.01] * (DIM - 2)
GRADED = {
    f"Rafael visitou {n} museus": [-0.01, 1.0] + [r] * (DIM - 2 - n) + [-r] * n
    for n, r in ((n, 0.01 + 0.002 * (22 - n)) for n in range(23))  # cosine 0.530 at n = 0 up to 0.723 at 22
}


async def test_a_mid_size_subjects_shortlist_is_a_quarter_of_the_subject_when_that_is_more(
    make_client: ClientFactory, agent_id: str
) -> None:
    assert MID_SHARE == 4
    async with make_client() as memory:
        embedder = HashEmbedder(overrides=GRADED)
        await seed_subject(memory.database, agent_id, "person:rafael", list(GRADED), embedder)
        probe = CandidateProbe("person:rafael", GRADED_PROBE)
        async with memory.database.tenant(agent_id) as conn:
            [quarter] = await nearest_current_facts(conn, agent_id, [probe], 1, mid_shortlist=2, **MID)
            [listed] = await nearest_current_facts(conn, agent_id, [probe], 1, mid_shortlist=15, **MID)
            [exact] = await nearest_current_facts(conn, agent_id, [probe], 1)
    # 23 facts: a quarter is 5 (more than 2), so fact 4 is the best ranked; 15 shortlisted: fact 14; all: fact 22.
    assert [c.text for c in (*quarter, *listed, *exact)] == [f"Rafael visitou {n} museus" for n in (4, 14, 22)]
