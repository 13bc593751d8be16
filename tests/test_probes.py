"""Correct answers pass untouched: every probe of benchmarks/probes/ (a message and the answer a capable model gives,
in many languages) is written through MemoryClient.write on the real database, and the memory must hold exactly what
the answer says: no fact dropped or altered, no true fact closed, no adjustment, one LLM call per write."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import pytest

from memory_sdk.testing import HashEmbedder
from tests.conftest import ClientFactory

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not (BENCHMARKS / "probes.py").exists(), reason="benchmarks/ is not in this tree"),
]


def _module() -> ModuleType:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import probes

        return probes
    finally:
        sys.path.remove(str(BENCHMARKS))


PROBES = _module()


@pytest.mark.parametrize("probe", PROBES.load_probes(), ids=lambda probe: probe.id)
async def test_correct_answer_passes_untouched(make_client: ClientFactory, agent_id: str, probe: object) -> None:
    model = PROBES.CapableModel(probe)
    llm = model.llm()
    async with make_client(llm) as memory:
        outcome = await PROBES.run_probe(memory, llm, probe, agent_id)
    assert not outcome.problems, "\n".join(f"{kind}: {what}" for kind, what in outcome.problems)


def test_the_suite_covers_six_languages_and_150_probes() -> None:
    probes = PROBES.load_probes()
    assert len({probe.language for probe in probes}) >= 6
    assert len(probes) >= 150


class _OneDirection(HashEmbedder):
    """Every text the same vector: to this embedder every two facts are near-duplicates (cosine 1.0)."""

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [[1.0] + [0.0] * (self.dimensions - 1) for _ in texts]


def _several_facts_of_one_subject(probe: object) -> bool:
    turns = probe.turns  # type: ignore[attr-defined]
    subjects = [fact["subject"] for fact in turns[-1].answer["facts"]]
    return len(turns) == 1 and len(subjects) > len(set(subjects))


@pytest.mark.parametrize(
    "probe", [p for p in PROBES.load_probes() if _several_facts_of_one_subject(p)], ids=lambda probe: probe.id
)
async def test_two_facts_of_one_answer_are_no_duplicates_to_an_embedder_that_sees_no_difference(
    make_client: ClientFactory, agent_id: str, probe: object
) -> None:
    """The near-duplicate check of one answer (post_extraction.drop_near_duplicates) drops a fact only when it
    holds no word of the message its twin lacks (`says_more`): with LocalEmbedder two allergies said in one French
    sentence scored above semantic_dedup_threshold and the second was dropped. Here no vector tells two facts apart,
    so only the words keep them."""
    model = PROBES.CapableModel(probe)
    llm = model.llm()
    async with make_client(llm, embedder=_OneDirection()) as memory:
        outcome = await PROBES.run_probe(memory, llm, probe, agent_id)
    assert not outcome.problems, "\n".join(f"{kind}: {what}" for kind, what in outcome.problems)
