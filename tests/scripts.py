"""Scripted LLM answers shared by tests: the examples of the write-pipeline document (seeds/002)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from memory_sdk.llm.protocols import LLMRequest

CLARA_MESSAGE = (
    "Clara Rezende saiu da Vertix e foi pra Orion Tech como head de engenharia. "
    "O Thiago Nogueira a contratou pessoalmente."
)

CLARA_EXTRACTION: dict[str, Any] = {
    "entities": [
        {"name": "Clara Rezende", "type": "person"},
        {"name": "Vertix", "type": "organization"},
        {"name": "Orion Tech", "type": "organization"},
        {"name": "Thiago Nogueira", "type": "person"},
    ],
    "facts": [
        {
            "subject": "Clara Rezende",
            "text": "Clara Rezende left Vertix",
            "action": "NEW",
            "importance_category": "relationship_change",
        },
        {
            "subject": "Clara Rezende",
            "text": "Clara Rezende joined Orion Tech as head of engineering",
            "action": "NEW",
            "importance_category": "relationship_change",
        },
        {
            "subject": "Thiago Nogueira",
            "text": "Thiago Nogueira personally hired Clara Rezende",
            "action": "NEW",
            "importance_category": "specific_event",
        },
    ],
    "relations": [
        {"source": "Clara Rezende", "target": "Vertix", "type": "former_employee_of"},
        {"source": "Clara Rezende", "target": "Orion Tech", "type": "works_at"},
        {"source": "Thiago Nogueira", "target": "Clara Rezende", "type": "hired"},
    ],
    "updated_profiles": {
        "Clara Rezende": (
            "Former software engineer at Vertix. Now head of engineering at Orion Tech, "
            "hired personally by Thiago Nogueira."
        )
    },
    "emotion": {"label": "neutral", "intensity": 0.2, "energy": 0.4},
}


def extraction(
    *facts: tuple[str, str], entities: list[dict[str, Any]] | None = None, relations: list[dict[str, str]] | None = None
) -> dict[str, Any]:
    """A small informed-extraction answer: facts as (subject, text) pairs."""
    subjects = entities or [{"name": subject, "type": "person"} for subject in dict.fromkeys(s for s, _ in facts)]
    return {
        "entities": subjects,
        "facts": [
            {"subject": subject, "text": text, "action": "NEW", "importance_category": "stable_preference"}
            for subject, text in facts
        ],
        "relations": relations or [],
    }


_BATCHED_FACT = re.compile(r"^New fact (\d+) ", re.MULTILINE)


def each_fact(verdict: dict[str, Any]) -> Callable[[LLMRequest], dict[str, Any]]:
    """A `reconciliation_batch` responder that answers `verdict` for every new fact of the batch."""

    def respond(request: LLMRequest) -> dict[str, Any]:
        numbers = _BATCHED_FACT.findall(request.messages[-1]["content"])
        return {"decisions": [{"fact": number, **verdict} for number in numbers]}

    return respond
