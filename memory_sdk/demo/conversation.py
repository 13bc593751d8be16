"""The demo conversation: the examples of the write-pipeline design (docs/write-pipeline.md), as one user's chat
in 2025.

Each message exercises a stage: a first fact about the speaker, an alias in parentheses, an alias resolved
across messages, a four-entity message with relations, a move that updates a third party's city, a preference
that takes the reconciliation fast path, the speaker's own move ("ontem" resolves against the message date)
and a retraction.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

__all__ = ["CONVERSATION", "DEMO_SPEAKER", "DemoMessage"]

DEMO_SPEAKER = "Rafael"


@dataclass(frozen=True)
class DemoMessage:
    """One message of the demo, with the moment it was sent."""

    text: str
    occurred_at: datetime


def _at(month: int, day: int) -> datetime:
    return datetime(2025, month, day, 12, 0, tzinfo=UTC)


CONVERSATION: tuple[DemoMessage, ...] = (
    DemoMessage("Moro em Curitiba e trabalho na Acme como engenheiro de dados.", _at(1, 10)),
    DemoMessage("Meu amigo Guili (Guilherme Maturana) está liderando o projeto novo.", _at(2, 3)),
    DemoMessage("Falei com o Guili sobre o projeto. O Guilherme disse que tá no prazo.", _at(2, 17)),
    DemoMessage(
        "Clara Rezende saiu da Vertix e foi pra Orion Tech como head de engenharia. "
        "O Thiago Nogueira a contratou pessoalmente.",
        _at(3, 5),
    ),
    DemoMessage("O Ricardo Gomes mora em São Paulo.", _at(4, 12)),
    DemoMessage("Ricardo se mudou pra Austin, Texas.", _at(5, 20)),
    DemoMessage("Ricardo gosta de jazz.", _at(5, 28)),
    DemoMessage("Me mudei pra São Paulo ontem.", _at(6, 15)),
    DemoMessage("Não trabalho mais na Acme.", _at(7, 1)),
)
