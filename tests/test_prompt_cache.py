"""Prompts are cache-friendly: the system part is the same bytes for every speaker, agent and date, so a server's
prompt cache reuses it across writes (issue 13: with `$speaker` in the system prompt, alternating speakers shared
only ~40 tokens of prefix and every write re-read ~1,250 prompt tokens)."""

from __future__ import annotations

import pytest

from memory_sdk.llm.prompts import _CONTEXT_MODELS, load_prompt
from memory_sdk.llm.protocols import PURPOSES, Purpose


def context_values(variant: int, fields: list[str]) -> dict[str, str]:
    """Every field of a context, different in each variant (as two speakers' writes on two days would be)."""
    speaker, day = ("Caroline", "Monday, May 8, 2023") if variant == 0 else ("Melanie", "Sunday, June 15, 2025")
    return {name: f"{speaker} {day} {name} {variant}" for name in fields}


@pytest.mark.parametrize("purpose", PURPOSES)
def test_system_part_is_identical_across_speakers_agents_and_dates(purpose: Purpose) -> None:
    prompt = load_prompt(purpose)
    model = _CONTEXT_MODELS[purpose]
    fields = list(model.model_fields)
    first, second = (prompt.render(model(**context_values(v, fields))) for v in (0, 1))
    assert first[0]["role"] == "system"
    assert first[0]["content"].encode() == second[0]["content"].encode()
    assert first[1]["content"] != second[1]["content"]  # every variable part is in the user message
    for value in context_values(0, fields).values():
        assert value not in first[0]["content"]
