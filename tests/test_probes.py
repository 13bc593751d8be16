"""Correct answers pass untouched: every probe of benchmarks/probes/ (a message and the answer a capable model gives,
in many languages) is written through MemoryClient.write on the real database, and the memory must hold exactly what
the answer says: no fact dropped or altered, no true fact closed, no adjustment, one LLM call per write."""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

import pytest

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
