"""Reconciliation, versioned upserts, evidence-linked relationships and the invalidation cascade, replayed as
conversations against the real database; the stored ledger is checked after each message."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from memory_sdk import MemoryConfig
from memory_sdk.errors import ProviderError
from memory_sdk.store import queries
from memory_sdk.testing import HashEmbedder, ScriptedLLM
from tests.conftest import ClientFactory
from tests.scripts import each_fact

T1 = datetime(2025, 3, 1, 10, 0, tzinfo=UTC)
T2 = datetime(2025, 6, 15, 10, 0, tzinfo=UTC)
T3 = datetime(2025, 9, 1, 10, 0, tzinfo=UTC)


def fact(subject: str, text: str, *, action: str = "NEW", attribute: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "subject": subject,
        "text": text,
        "action": action,
        "importance_category": "relationship_change",
        "confidence": 0.95,
        "attribute": attribute,
        **extra,
    }


def answer(entities: list[tuple[str, str]], facts: list[dict[str, Any]], relations: list[tuple[str, str, str]] = ()):  # type: ignore[assignment]
    return {
        "entities": [{"name": name, "type": kind} for name, kind in entities],
        "facts": facts,
        "relations": [{"source": s, "type": r, "target": t} for s, r, t in relations],
    }


async def test_move_leaves_one_current_home_and_cascades_the_old_edge(
    make_client: ClientFactory, agent_id: str
) -> None:
    llm = ScriptedLLM(
        {
            "informed_extraction": [
                answer(
                    [("Rafael", "person"), ("Curitiba", "place")],
                    [fact("Rafael", "Rafael mora em Curitiba", attribute="lives_in")],
                    [("Rafael", "lives_in", "Curitiba")],
                ),
                answer(
                    [("Rafael", "person"), ("São Paulo", "place")],
                    [fact("Rafael", "Rafael mora em São Paulo", action="UPDATE", attribute="lives_in")],
                    [("Rafael", "lives_in", "São Paulo")],
                ),
            ],
            "reconciliation": [{"action": "UPDATE", "target": "1", "reasoning": "moved"}],
        }
    )
    async with make_client(llm) as memory:
        first = await memory.write(agent_id, "Moro em Curitiba", speaker_name="Rafael", occurred_at=T1)
        assert first.success, first.error
        assert [f.text for f in first.facts_added] == ["Rafael mora em Curitiba"]
        assert llm.requests_for("reconciliation") == []  # nothing known yet: fast path

        second = await memory.write(agent_id, "Me mudei pra São Paulo", speaker_name="Rafael", occurred_at=T2)
        assert second.success, second.error
        [new] = second.facts_updated
        [old] = second.facts_superseded
        assert new.text == "Rafael mora em São Paulo"
        assert new.supersedes_fact_id == first.facts_added[0].id
        assert old.valid_to == T2  # closed at the new information's valid time, not the wall clock
        assert old.invalidated_at is None  # it was true until T2: history, not a retraction

        current = await memory.get_facts(agent_id, entity="Rafael")
        assert [f.text for f in current] == ["Rafael mora em São Paulo"]
        history = await memory.get_facts(agent_id, entity="Rafael", include_history=True)
        assert [(f.text, f.valid_to) for f in history] == [
            ("Rafael mora em Curitiba", T2),
            ("Rafael mora em São Paulo", None),
        ]
        assert [
            f.text for f in await memory.get_facts(agent_id, entity="Rafael", as_of=datetime(2025, 5, 1, tzinfo=UTC))
        ] == ["Rafael mora em Curitiba"]

        edges = await memory.get_relationships(agent_id, entity="Rafael")
        assert [(e.rel_type, e.target_key, e.evidence_fact_id) for e in edges] == [
            ("lives_in", "place:sao_paulo", new.id)
        ]
        every = await memory.get_relationships(agent_id, entity="Rafael", include_invalidated=True)
        curitiba = next(e for e in every if e.target_key == "place:curitiba")
        assert curitiba.invalidated_at is not None
        assert curitiba.valid_to == T2
        rels_in_march = await memory.get_relationships(agent_id, as_of=datetime(2025, 4, 1, tzinfo=UTC))
        assert [e.target_key for e in rels_in_march] == ["place:curitiba"]


async def test_similar_fact_takes_the_slow_path_and_unrelated_fact_the_fast_path(
    make_client: ClientFactory, agent_id: str
) -> None:
    llm = ScriptedLLM(
        {
            "informed_extraction": [
                answer([("Ricardo Gomes", "person")], [fact("Ricardo Gomes", "Ricardo Gomes lives in São Paulo")]),
                answer([("Ricardo Gomes", "person")], [fact("Ricardo Gomes", "Ricardo Gomes moved to Austin, Texas")]),
                answer([("Ricardo Gomes", "person")], [fact("Ricardo Gomes", "Ricardo gosta de jazz")]),
            ],
            "reconciliation": [{"action": "UPDATE", "target": "1"}],
        }
    )
    async with make_client(llm) as memory:
        await memory.write(agent_id, "O Ricardo Gomes mora em São Paulo.", speaker_name="Rafael", occurred_at=T1)
        moved = await memory.write(
            agent_id, "Ricardo se mudou pra Austin, Texas.", speaker_name="Rafael", occurred_at=T2, verbose=True
        )
        assert moved.pipeline is not None
        [decision] = moved.pipeline.step("reconciliation").data["decisions"]
        assert decision["path"] == "reconciliation"
        assert decision["action"] == "UPDATE"
        assert decision["similarity"] >= 0.5
        prompt = llm.requests_for("reconciliation")[0].messages[1]["content"]
        assert "1. Ricardo Gomes lives in São Paulo" in prompt
        assert [f.text for f in moved.facts_updated] == ["Ricardo Gomes moved to Austin, Texas"]

        jazz = await memory.write(
            agent_id, "Ricardo gosta de jazz.", speaker_name="Rafael", occurred_at=T3, verbose=True
        )
        assert jazz.pipeline is not None
        [decision] = jazz.pipeline.step("reconciliation").data["decisions"]
        assert (decision["path"], decision["action"]) == ("fast", "ADD")
        assert len(llm.requests_for("reconciliation")) == 1  # no LLM for the jazz fact
        assert jazz.llm_calls == 1  # the extraction only
        current = sorted(f.text for f in await memory.get_facts(agent_id, entity="Ricardo Gomes"))
        assert current == ["Ricardo Gomes moved to Austin, Texas", "Ricardo gosta de jazz"]


async def test_delayed_older_message_becomes_history_without_closing_the_current_value(
    make_client: ClientFactory, agent_id: str
) -> None:
    def deadline(value: str) -> dict[str, Any]:
        return answer(
            [("Mira", "person")],
            [fact("Mira", f"Mira's passport deadline is {value}", attribute="passport_deadline")],
        )

    llm = ScriptedLLM(
        {
            "informed_extraction": [deadline("2026-07-15"), deadline("2026-06-30"), deadline("2026-08-01")],
            "reconciliation": lambda request: {"action": "UPDATE", "target": "1"},
        }
    )
    e1, e2, e0 = (
        datetime(2026, 6, 1, 9, 0, tzinfo=UTC),
        datetime(2026, 6, 3, 10, 0, tzinfo=UTC),
        datetime(2026, 5, 30, 8, 0, tzinfo=UTC),
    )
    async with make_client(llm) as memory:
        for moment, value in ((e1, "2026-07-15"), (e2, "2026-06-30"), (e0, "2026-08-01")):
            result = await memory.write(agent_id, f"Passport deadline {value}", speaker_name="Mira", occurred_at=moment)
            assert result.success, result.error

        def value_at(facts: list[Any]) -> list[str]:
            return [f.text.rsplit(" ", 1)[1] for f in facts]

        assert value_at(await memory.get_facts(agent_id, entity="Mira")) == ["2026-06-30"]
        on = {
            day: value_at(await memory.get_facts(agent_id, entity="Mira", as_of=datetime(2026, 6, day, 12, tzinfo=UTC)))
            for day in (2, 4)
        }
        assert on == {2: ["2026-07-15"], 4: ["2026-06-30"]}
        may_31 = await memory.get_facts(agent_id, entity="Mira", as_of=datetime(2026, 5, 31, 12, tzinfo=UTC))
        assert value_at(may_31) == ["2026-08-01"]
        history = await memory.get_facts(agent_id, entity="Mira", include_history=True)
        intervals = sorted((f.valid_from, f.valid_to) for f in history)
        assert intervals == [(e0, e1), (e1, e2), (e2, None)]  # half-open, no overlap, no gap


async def test_repeating_a_known_fact_is_a_noop_that_moves_last_confirmed_at(
    make_client: ClientFactory, agent_id: str
) -> None:
    said = answer([("Ana", "person")], [fact("Ana", "Ana loves jazz")])
    llm = ScriptedLLM({"informed_extraction": [said, said]})
    async with make_client(llm) as memory:
        first = await memory.write(agent_id, "Ana loves jazz", speaker_name="Rafael", occurred_at=T1)
        again = await memory.write(agent_id, "Ana loves jazz!", speaker_name="Rafael", occurred_at=T2)
        assert again.facts_added == [] and again.facts_deleted == []
        [unchanged] = again.facts_unchanged
        assert unchanged.id == first.facts_added[0].id
        assert unchanged.last_confirmed_at is not None
        assert llm.requests_for("reconciliation") == []  # identical text needs no LLM
        history = await memory.get_facts(agent_id, include_history=True)
        assert [(f.text, f.valid_to, f.invalidated_at) for f in history] == [("Ana loves jazz", None, None)]


async def test_retraction_deletes_the_fact_and_invalidates_its_relationships(
    make_client: ClientFactory, agent_id: str
) -> None:
    llm = ScriptedLLM(
        {
            "informed_extraction": [
                answer(
                    [("Rafael", "person"), ("Acme", "organization")],
                    [fact("Rafael", "Rafael trabalha na Acme", attribute="employer")],
                    [("Rafael", "works_at", "Acme")],
                ),
                # The model answers the retraction as a DELETE: an UPDATE by negation stays an UPDATE now.
                answer(
                    [("Rafael", "person"), ("Acme", "organization")],
                    [fact("Rafael", "Rafael não trabalha mais na Acme", action="DELETE")],
                ),
            ],
        }
    )
    async with make_client(llm) as memory:
        hired = await memory.write(agent_id, "Trabalho na Acme", speaker_name="Rafael", occurred_at=T1)
        quit_ = await memory.write(agent_id, "Não trabalho mais na Acme", speaker_name="Rafael", occurred_at=T2)
        assert quit_.success, quit_.error
        [deleted] = quit_.facts_deleted
        assert deleted.id == hired.facts_added[0].id
        assert deleted.valid_to == T2
        assert deleted.invalidated_at is not None
        # The retraction itself is the current statement, linked to what it retracts: nothing is lost.
        [statement] = quit_.facts_added
        assert statement.supersedes_fact_id == deleted.id
        current = await memory.get_facts(agent_id, entity="Rafael")
        assert [f.text for f in current] == ["Rafael não trabalha mais na Acme"]
        assert await memory.get_relationships(agent_id) == []
        [edge] = await memory.get_relationships(agent_id, include_invalidated=True)
        assert edge.rel_type == "works_at"
        assert edge.invalidated_at is not None
        # The retracted fact stays in history, true until T2.
        in_april = await memory.get_facts(agent_id, as_of=datetime(2025, 4, 1, tzinfo=UTC))
        assert [f.text for f in in_april] == ["Rafael trabalha na Acme"]


async def test_preference_flip_leaves_exactly_one_current_preference(make_client: ClientFactory, agent_id: str) -> None:
    llm = ScriptedLLM(
        {
            "informed_extraction": [
                answer([("Rafael", "person")], [fact("Rafael", "Rafael loves Chinese food")]),
                answer([("Rafael", "person")], [fact("Rafael", "Rafael hates Chinese food", action="UPDATE")]),
            ],
            "reconciliation": [{"action": "UPDATE", "target": "1"}],
        }
    )
    async with make_client(llm) as memory:
        await memory.write(agent_id, "I love Chinese food", speaker_name="Rafael", occurred_at=T1)
        await memory.write(agent_id, "Actually I hate Chinese food now", speaker_name="Rafael", occurred_at=T2)
        assert [f.text for f in await memory.get_facts(agent_id)] == ["Rafael hates Chinese food"]


async def test_invented_target_is_rejected_and_treated_as_add(make_client: ClientFactory, agent_id: str) -> None:
    llm = ScriptedLLM(
        {
            "informed_extraction": [
                answer([("Ana", "person")], [fact("Ana", "Ana visited Porto")]),
                # No decision in the answer (an older prompt's "NEW"): the reconciliation call decides.
                answer([("Ana", "person")], [fact("Ana", "Ana visited Porto Alegre")]),
            ],
            "reconciliation": [{"action": "UPDATE", "target": "7f3c9a1e-0000-0000-0000-000000000000"}],
        }
    )
    async with make_client(llm) as memory:
        await memory.write(agent_id, "Ana visited Porto", speaker_name="Rafael", occurred_at=T1)
        result = await memory.write(
            agent_id, "Ana visited Porto Alegre", speaker_name="Rafael", occurred_at=T2, verbose=True
        )
        assert not result.success  # an unusable verdict is a fallback that may leave a near-duplicate: reported
        assert result.error is not None and "reconciliation: 'Ana visited Porto Alegre'" in result.error
        assert [f.text for f in result.facts_added] == ["Ana visited Porto Alegre"]
        assert result.pipeline is not None
        [decision] = result.pipeline.step("reconciliation").data["decisions"]
        assert decision["action"] == "ADD"
        assert "not one shown: rejected" in decision["why"]


async def test_reconciliation_llm_failure_defaults_to_add(make_client: ClientFactory, agent_id: str) -> None:
    llm = ScriptedLLM(
        {
            "informed_extraction": [
                answer([("Ana", "person")], [fact("Ana", "Ana visited Porto")]),
                answer([("Ana", "person")], [fact("Ana", "Ana visited Porto Alegre")]),
            ],
            "reconciliation": [ProviderError("rate limited")],
        }
    )
    async with make_client(llm) as memory:
        await memory.write(agent_id, "Ana visited Porto", speaker_name="Rafael", occurred_at=T1)
        result = await memory.write(agent_id, "Ana visited Porto Alegre", speaker_name="Rafael", occurred_at=T2)
        assert [f.text for f in result.facts_added] == ["Ana visited Porto Alegre"]
        assert len(await memory.get_facts(agent_id)) == 2


async def test_relation_without_supporting_fact_gets_a_mirror_fact_as_evidence(
    make_client: ClientFactory, agent_id: str
) -> None:
    llm = ScriptedLLM(
        {
            "informed_extraction": [
                answer(
                    [("Rafael", "person"), ("Rafael's mom", "person"), ("Curitiba", "place")],
                    [fact("Rafael", "Rafael vai pra Curitiba no sábado")],
                    [("Rafael's mom", "lives_in", "Curitiba")],
                )
            ]
        }
    )
    async with make_client(llm) as memory:
        result = await memory.write(agent_id, "Vou pra Curitiba ver minha mãe", speaker_name="Rafael", occurred_at=T1)
        assert result.success, result.error
        mirror = next(f for f in result.facts_added if f.source_context == "inferred_from_relation")
        assert mirror.text == "Rafael's mom lives in Curitiba"
        assert mirror.confidence == 0.60
        assert mirror.speaker == "Rafael"
        edges = {edge.rel_type: edge for edge in await memory.get_relationships(agent_id)}
        assert edges["lives_in"].evidence_fact_id == mirror.id
        assert edges["parent_of"].target_key == "person:rafael"  # the relative's kin relation, on the same fact


async def test_one_failing_fact_rolls_back_alone(
    make_client: ClientFactory, agent_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    texts = ["Ana plays tennis", "Ana collects stamps", "Ana broke her wrist", "Ana speaks French", "Ana owns a cat"]
    facts = [fact("Ana", text) for text in texts]
    insert_facts = queries.insert_facts

    async def refused_by_the_database(conn: Any, agent_id: str, rows: list[queries.FactRow], links: Any) -> Any:
        # The CHECK on confidence refuses the third fact for real.
        rows = [replace(row, confidence=2.0) if row.fact_text == "Ana broke her wrist" else row for row in rows]
        return await insert_facts(conn, agent_id, rows, links)

    monkeypatch.setattr(queries, "insert_facts", refused_by_the_database)
    llm = ScriptedLLM({"informed_extraction": [answer([("Ana", "person")], facts)]})
    async with make_client(llm) as memory:
        result = await memory.write(
            agent_id,
            "Ana plays tennis, collects stamps, broke her wrist, speaks French and owns a cat",
            speaker_name="Rafael",
            occurred_at=T1,
            verbose=True,
        )
        assert not result.success
        assert result.error is not None and "rolled back alone" in result.error
        stored = sorted(f.text for f in await memory.get_facts(agent_id))
        assert stored == sorted(text for text in texts if text != "Ana broke her wrist")
        assert len(result.facts_added) == 4


async def test_repeated_relationship_reinforces_strength_towards_one(make_client: ClientFactory, agent_id: str) -> None:
    said = answer(
        [("Ana", "person"), ("Acme", "organization")],
        [fact("Ana", "Ana works at Acme")],
        [("Ana", "works_at", "Acme")],
    )
    llm = ScriptedLLM({"informed_extraction": [said] * 6})
    async with make_client(llm) as memory:
        strengths = []
        for _ in range(6):
            await memory.write(agent_id, "Ana works at Acme", speaker_name="Rafael")
            [edge] = await memory.get_relationships(agent_id)
            strengths.append(round(edge.strength, 2))
        assert strengths == [0.8, 0.85, 0.9, 0.95, 1.0, 1.0]
        [edge] = await memory.get_relationships(agent_id)
        assert edge.evidence_fact_id is not None  # the NOOP'd fact stays the evidence


async def test_profiles_are_seeded_once_and_never_overwritten(make_client: ClientFactory, agent_id: str) -> None:
    first = answer([("Ana", "person")], [fact("Ana", "Ana works at Acme")])
    first["updated_profiles"] = {"Ana": "Works at Acme."}
    second = answer([("Ana", "person")], [fact("Ana", "Ana plays chess")])
    second["updated_profiles"] = {"Ana": "Plays chess."}
    llm = ScriptedLLM({"informed_extraction": [first, second]})
    async with make_client(llm) as memory:
        await memory.write(agent_id, "Ana works at Acme", speaker_name="Rafael")
        await memory.write(agent_id, "Ana plays chess", speaker_name="Rafael")
        ana = await memory.get_entity(agent_id, "Ana")
        assert ana is not None and ana.profile_text == "Works at Acme."


async def test_known_at_reads_what_the_memory_believed_then(make_client: ClientFactory, agent_id: str) -> None:
    llm = ScriptedLLM(
        {
            "informed_extraction": [
                answer(
                    [("Rafael", "person"), ("Curitiba", "place")],
                    [fact("Rafael", "Rafael mora em Curitiba", attribute="lives_in")],
                ),
                answer(
                    [("Rafael", "person"), ("São Paulo", "place")],
                    [fact("Rafael", "Rafael mora em São Paulo", attribute="lives_in")],
                ),
            ],
            "reconciliation": [{"action": "UPDATE", "target": "1"}],
        }
    )
    async with make_client(llm) as memory:
        await memory.write(agent_id, "Moro em Curitiba", speaker_name="Rafael", occurred_at=T1)
        [believed] = await memory.get_facts(agent_id)
        between = believed.recorded_at
        assert between is not None
        await memory.write(agent_id, "Me mudei pra São Paulo", speaker_name="Rafael", occurred_at=T2)
        then = await memory.get_facts(agent_id, known_at=between)
        assert [f.text for f in then] == ["Rafael mora em Curitiba"]  # believed current before the move was told
        now = await memory.get_facts(agent_id, known_at=datetime.now(UTC))
        assert [f.text for f in now] == ["Rafael mora em São Paulo"]
        # Valid time and transaction time together: at T2+, as believed before the move was told.
        assert [f.text for f in await memory.get_facts(agent_id, as_of=T3, known_at=between)] == [
            "Rafael mora em Curitiba"
        ]


async def test_concurrent_moves_leave_one_open_home(make_client: ClientFactory, agent_id: str) -> None:
    home = answer(
        [("Rafael", "person"), ("Curitiba", "place")], [fact("Rafael", "Rafael mora em Curitiba", attribute="lives_in")]
    )

    def moved(request: Any) -> dict[str, Any]:
        city = "Recife" if "Recife" in request.messages[1]["content"] else "Natal"
        return answer(
            [("Rafael", "person"), (city, "place")], [fact("Rafael", f"Rafael mora em {city}", attribute="lives_in")]
        )

    setup = ScriptedLLM({"informed_extraction": [home]})
    async with make_client(setup) as memory:
        await memory.write(agent_id, "Moro em Curitiba", speaker_name="Rafael", occurred_at=T1)
    scripts = [
        ScriptedLLM(
            {"informed_extraction": moved, "reconciliation": lambda request: {"action": "UPDATE", "target": "1"}}
        )
        for _ in range(2)
    ]
    async with make_client(scripts[0]) as a, make_client(scripts[1]) as b:
        results = await asyncio.gather(
            a.write(agent_id, "Me mudei pra Recife", speaker_name="Rafael", occurred_at=T2),
            b.write(agent_id, "Me mudei pra Natal", speaker_name="Rafael", occurred_at=T3),
        )
        assert all(r.success for r in results), [r.error for r in results]
        current = await a.get_facts(agent_id)
        assert [f.text for f in current] == ["Rafael mora em Natal"]  # the later valid time is current
        history = await a.get_facts(agent_id, include_history=True)
        intervals = sorted((f.valid_from, f.valid_to) for f in history)
        assert intervals == [(T1, T2), (T2, T3), (T3, None)]


async def test_update_aimed_at_a_fact_about_something_else_closes_only_the_attributes_open_value(
    make_client: ClientFactory, agent_id: str
) -> None:
    llm = ScriptedLLM(
        {
            "informed_extraction": [
                answer(
                    [("Rafael", "person"), ("Curitiba", "place")],
                    [
                        fact("Rafael", "Rafael mora em Curitiba", attribute="lives_in"),
                        fact("Rafael", "Rafael tem um apartamento alugado"),
                    ],
                ),
                answer(
                    [("Rafael", "person"), ("São Paulo", "place")],
                    [fact("Rafael", "Rafael mora em São Paulo", attribute="lives_in")],
                ),
            ],
            # The model would pick the apartment fact (another attribute) as what the move replaces, were it shown;
            # it is not (no decision may touch it), so it can only UPDATE the home, shown first.
            "reconciliation": lambda request: {
                "action": "UPDATE",
                "target": next(
                    (
                        line.split(".")[0]
                        for line in request.messages[1]["content"].splitlines()
                        if "apartamento" in line
                    ),
                    "1",
                ),
            },
        }
    )
    async with make_client(llm) as memory:
        await memory.write(agent_id, "Moro em Curitiba num apartamento alugado", speaker_name="Rafael", occurred_at=T1)
        moved = await memory.write(agent_id, "Me mudei pra São Paulo", speaker_name="Rafael", occurred_at=T2)
        assert moved.success, moved.error
        # The apartment fact is not about where he lives (guards.py: similarity below the floor): it stays true.
        assert [f.text for f in moved.facts_superseded] == ["Rafael mora em Curitiba"]
        assert all("apartamento" not in r.messages[1]["content"] for r in llm.requests_for("reconciliation"))
        assert sorted(f.text for f in await memory.get_facts(agent_id)) == [
            "Rafael mora em São Paulo",
            "Rafael tem um apartamento alugado",
        ]


async def test_retraction_carrying_a_single_valued_attribute_never_blocks_on_the_open_value(
    make_client: ClientFactory, agent_id: str
) -> None:
    llm = ScriptedLLM(
        {
            "informed_extraction": [
                answer(
                    [("Rafael", "person")],
                    [
                        fact("Rafael", "Rafael trabalha na Acme", attribute="employer"),
                        fact("Rafael", "Rafael é voluntário na ONG Sol"),
                    ],
                ),
                # A small model labels the retraction with the employer attribute, which Acme holds open.
                answer(
                    [("Rafael", "person")],
                    [fact("Rafael", "Rafael não é mais voluntário na ONG Sol", attribute="employer")],
                ),
            ],
            "reconciliation": lambda request: {
                "action": "DELETE",
                "target": next(
                    line.split(".")[0] for line in request.messages[1]["content"].splitlines() if "ONG" in line
                ),
            },
        }
    )
    async with make_client(llm) as memory:
        await memory.write(
            agent_id, "Trabalho na Acme e sou voluntário na ONG Sol", speaker_name="Rafael", occurred_at=T1
        )
        result = await memory.write(
            agent_id, "Não sou mais voluntário na ONG Sol", speaker_name="Rafael", occurred_at=T2
        )
        assert result.success, result.error
        assert [f.text for f in result.facts_deleted] == ["Rafael é voluntário na ONG Sol"]
        current = sorted(f.text for f in await memory.get_facts(agent_id))
        assert current == ["Rafael não é mais voluntário na ONG Sol", "Rafael trabalha na Acme"]


async def test_two_new_values_of_one_attribute_in_one_message_leave_one_open(
    make_client: ClientFactory, agent_id: str
) -> None:
    llm = ScriptedLLM(
        {
            "informed_extraction": [
                answer(
                    [("Rafael", "person"), ("Acme", "organization")],
                    [fact("Rafael", "Rafael trabalha na Acme", attribute="employer")],
                ),
                answer(
                    [("Rafael", "person"), ("Acme", "organization"), ("Orion Tech", "organization")],
                    [
                        fact("Rafael", "Rafael trabalhou na Acme", action="UPDATE", attribute="employer"),
                        fact("Rafael", "Rafael está na Orion Tech", action="UPDATE", attribute="employer"),
                    ],
                ),
            ],
            # Both facts need a verdict: one batched call answers for both (docs/decisions.md, "One call per write").
            "reconciliation_batch": each_fact({"action": "UPDATE", "target": "1"}),
        }
    )
    async with make_client(llm) as memory:
        await memory.write(agent_id, "Trabalho na Acme", speaker_name="Rafael", occurred_at=T1)
        result = await memory.write(
            agent_id, "Não trabalho mais na Acme. Agora estou na Orion Tech.", speaker_name="Rafael", occurred_at=T2
        )
        assert result.success, result.error
        # The later statement of the same instant holds the one open value; the earlier one is kept as said, without
        # the attribute, so that no version of this write is closed at its own start (guards.one_value_per_moment).
        current = {f.text: f.attribute for f in await memory.get_facts(agent_id)}
        assert current == {"Rafael trabalhou na Acme": None, "Rafael está na Orion Tech": "employer"}
        history = await memory.get_facts(agent_id, include_history=True)
        assert len(history) == 3 and all(f.valid_to is None or f.valid_to > f.valid_from for f in history)


class _FlooredEmbedder(HashEmbedder):
    """HashEmbedder declaring a closure floor above any similarity it makes (EmbeddingProvider's optional
    closure_min_similarity), so that every closure on the texts alone is refused."""

    closure_min_similarity = 0.999


@pytest.mark.parametrize("configured", [None, 0.0])
@pytest.mark.parametrize("informed", [False, True])
async def test_a_closure_below_the_embedders_floor_is_an_add_unless_configured_off(
    make_client: ClientFactory, agent_id: str, configured: float | None, informed: bool
) -> None:
    """LoCoMo conv-30 with the 1.5B model: "Jon wants to go to a dance class" UPDATEd "Jon wants to start a dance
    studio", and a true plan was closed. Below the embedder's closure floor no decision may touch the old fact: no
    reconciliation call is asked, and the informed answer's own UPDATE is an ADD, reported.
    `reconciliation_closure_min_similarity=0.0` turns the floor off and the model's UPDATE closes the fact."""
    extra = {"action": "UPDATE", "target": "1"} if informed else {}
    llm = ScriptedLLM(
        {
            "informed_extraction": [
                answer([("Jon", "person")], [fact("Jon", "Jon wants to start a dance studio")]),
                answer([("Jon", "person")], [fact("Jon", "Jon wants to go to a dance class", **extra)]),
            ],
            "reconciliation_batch": each_fact({"action": "UPDATE", "target": "1"}),
            "reconciliation": lambda _request: {"reasoning": "replaces it", "action": "UPDATE", "target": "1"},
        }
    )
    config = MemoryConfig(reconciliation_closure_min_similarity=configured)
    async with make_client(llm, config, embedder=_FlooredEmbedder()) as memory:
        await memory.write(agent_id, "I want to start a dance studio", speaker_name="Jon", occurred_at=T1)
        result = await memory.write(agent_id, "I want to go to a dance class", speaker_name="Jon", occurred_at=T2)
        current = sorted(f.text for f in await memory.get_facts(agent_id))
    assert result.success, result.error
    asked = len(llm.requests_for("reconciliation")) + len(llm.requests_for("reconciliation_batch"))
    if configured is None:
        assert current == ["Jon wants to go to a dance class", "Jon wants to start a dance studio"]
        assert asked == 0
        if informed:
            [adjusted] = result.adjustments
            assert (adjusted.rule, adjusted.before.split()[0], adjusted.after) == ("decision_safer", "UPDATE", "ADD")
            assert "similarity" in adjusted.why
        else:
            assert result.adjustments == []  # no model decision was changed: none was asked
    else:
        assert current == ["Jon wants to go to a dance class"]
        assert asked == (0 if informed else 1)
