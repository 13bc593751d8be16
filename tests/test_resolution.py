"""Entity resolution against the real database: each phase, its boundaries, the alias registry."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

from memory_sdk import MemoryConfig
from memory_sdk.errors import ProviderError
from memory_sdk.pipeline.resolution import MatchCandidate, fuzzy_verdict, prefix_match
from memory_sdk.testing import HashEmbedder, ScriptedLLM
from tests.conftest import ClientFactory

DIM = 1536


def vector_at(cosine: float, axis: int = 1) -> list[float]:
    """A unit vector whose cosine with `vector_at(1.0)` is exactly `cosine` (vectors on other axes are apart)."""
    v = [0.0] * DIM
    v[0], v[axis] = cosine, math.sqrt(1 - cosine * cosine)
    return v


def mention(
    *entities: tuple[str, str] | tuple[str, str, list[str]], facts: list[tuple[str, str]] = ()
) -> dict[str, Any]:  # type: ignore[assignment]
    return {
        "entities": [{"name": e[0], "type": e[1], "aliases": e[2] if len(e) > 2 else []} for e in entities],
        "facts": [{"subject": s, "text": t} for s, t in facts],
        "relations": [],
    }


def phases(result: Any) -> dict[str, tuple[str, str]]:
    return {e.name: (e.phase, e.key) for e in result.entities_resolved}


# --- pure phase-2 verdict and prefix rule ------------------------------------------------------------------


def test_fuzzy_verdict_boundaries() -> None:
    def cands(*scores: float) -> list[MatchCandidate]:
        return [MatchCandidate(f"person:c{i}", f"C{i}", "person", s) for i, s in enumerate(scores)]

    assert fuzzy_verdict(cands(0.87), 0.85)[0] == "fuzzy"
    assert fuzzy_verdict(cands(0.85), 0.85)[0] == "fuzzy"
    verdict, shown = fuzzy_verdict(cands(0.70, 0.60, 0.55, 0.52, 0.30), 0.85)
    assert verdict == "llm"
    assert [c.score for c in shown] == [0.70, 0.60, 0.55]  # top 3 only
    assert fuzzy_verdict(cands(0.49), 0.85) == ("new", [])
    assert fuzzy_verdict([], 0.85) == ("new", [])
    assert fuzzy_verdict(cands(0.60), 0.50)[0] == "fuzzy"  # lowering the threshold removes the ambiguous band


@pytest.mark.parametrize(
    ("name", "known", "expected"),
    [
        ("Carol", [("carolina", "person:carolina")], "person:carolina"),
        ("Carolina", [("carol", "person:carol")], "person:carol"),
        ("Jo", [("joao", "person:joao")], None),  # under 3 letters: never
        ("Bob", [("roberto", "person:roberto")], None),  # a diminutive that is no prefix needs an alias
        ("Ana", [("anastasia", "person:anastasia")], None),  # covers less than half of the name
        ("Carol", [("carolina", "person:a"), ("caroline", "person:b")], None),  # two candidates: not exact
    ],
)
def test_prefix_match(name: str, known: list[tuple[str, str]], expected: str | None) -> None:
    assert prefix_match(name, known) == expected


# --- phases against the database ----------------------------------------------------------------------------


async def test_exact_alias_match_skips_llm(make_client: ClientFactory, agent_id: str) -> None:
    llm = ScriptedLLM(
        {
            "informed_extraction": [
                mention(
                    ("Guilherme Maturana", "person", ["Guili"]),
                    facts=[("Guilherme Maturana", "Guilherme Maturana leads the project")],
                ),
                mention(("Guili", "person"), facts=[("Guili", "Guili says the project is on time")]),
            ]
        }
    )
    async with make_client(llm) as memory:
        await memory.write(agent_id, "Meu amigo Guili (Guilherme Maturana) lidera o projeto.", speaker_name="Rafael")
        second = await memory.write(agent_id, "O Guili disse que tá no prazo.", speaker_name="Rafael")
        assert phases(second) == {"Guili": ("alias", "person:guilherme_maturana")}
        assert llm.requests_for("entity_resolution") == []
        [fact] = second.facts_added
        assert fact.entity_key == "person:guilherme_maturana"


async def test_fuzzy_score_at_087_resolves_without_llm(make_client: ClientFactory, agent_id: str) -> None:
    embedder = HashEmbedder(overrides={"Guilherme": vector_at(1.0), "Guili": vector_at(0.87)})
    llm = ScriptedLLM({"informed_extraction": [mention(("Guilherme", "person")), mention(("Guili", "person"))]})
    async with make_client(llm, embedder=embedder) as memory:
        await memory.write(agent_id, "Guilherme chegou.", speaker_name="Rafael")
        result = await memory.write(agent_id, "Guili chegou.", speaker_name="Rafael", verbose=True)
        assert phases(result) == {"Guili": ("fuzzy", "person:guilherme")}
        assert result.entities_resolved[0].score == pytest.approx(0.87, abs=1e-3)
        assert llm.requests_for("entity_resolution") == []
        entity = await memory.get_entity(agent_id, "guili")  # the fuzzy match registered the alias
        assert entity is not None and entity.key == "person:guilherme"


async def test_fuzzy_score_at_070_asks_the_llm_with_the_top_three(make_client: ClientFactory, agent_id: str) -> None:
    embedder = HashEmbedder(
        overrides={
            "Guili": vector_at(1.0),
            "Guilherme": vector_at(0.70, axis=1),
            "Gustavo": vector_at(0.60, axis=2),
            "Giovana": vector_at(0.55, axis=3),
            "Gilberto": vector_at(0.52, axis=4),
        }
    )
    llm = ScriptedLLM(
        {
            "informed_extraction": [
                mention(("Guilherme", "person"), ("Gustavo", "person"), ("Giovana", "person"), ("Gilberto", "person")),
                mention(("Guili", "person"), facts=[("Guili", "Guili chegou")]),
            ],
            "entity_resolution": [{"reasoning": "nickname", "match": "1"}],
        }
    )
    async with make_client(llm, embedder=embedder) as memory:
        await memory.write(agent_id, "Guilherme, Gustavo, Giovana e Gilberto vieram.", speaker_name="Rafael")
        result = await memory.write(agent_id, "Guili chegou.", speaker_name="Rafael", verbose=True)
        [request] = llm.requests_for("entity_resolution")
        prompt = request.messages[1]["content"]
        assert "1. Guilherme (person)" in prompt
        assert prompt.count("(person)") == 3  # the top 3 candidates, not the 4 known people
        assert phases(result) == {"Guili": ("llm", "person:guilherme")}
        assert result.pipeline is not None
        [entry] = result.pipeline.step("entity_resolution").data["entities"]
        assert len(entry["candidates"]) == 3


async def test_fuzzy_score_at_040_creates_a_new_entity(make_client: ClientFactory, agent_id: str) -> None:
    embedder = HashEmbedder(overrides={"Guilherme": vector_at(1.0), "Gabriela": vector_at(0.40)})
    llm = ScriptedLLM({"informed_extraction": [mention(("Guilherme", "person")), mention(("Gabriela", "person"))]})
    async with make_client(llm, embedder=embedder) as memory:
        await memory.write(agent_id, "Guilherme chegou.", speaker_name="Rafael")
        result = await memory.write(agent_id, "Gabriela chegou.", speaker_name="Rafael")
        assert phases(result) == {"Gabriela": ("new", "person:gabriela")}
        assert llm.requests_for("entity_resolution") == []


async def test_llm_resolution_disabled_or_failing_makes_a_new_entity(make_client: ClientFactory, agent_id: str) -> None:
    embedder = HashEmbedder(overrides={"Guilherme": vector_at(1.0), "Guili": vector_at(0.70)})
    llm = ScriptedLLM(
        {
            "informed_extraction": [
                mention(("Guilherme", "person")),
                mention(("Guili", "person"), facts=[("Guili", "Guili chegou")]),
                mention(("Guili", "person"), facts=[("Guili", "Guili chegou")]),
            ],
            "entity_resolution": [ProviderError("down")],
        }
    )
    async with make_client(llm, embedder=embedder) as memory:
        await memory.write(agent_id, "Guilherme chegou.", speaker_name="Rafael")
        off = await memory.write(
            agent_id,
            "Guili chegou.",
            speaker_name="Rafael",
            dry_run=True,
            config_overrides={"enable_llm_resolution": False},
        )
        assert phases(off) == {"Guili": ("new", "person:guili")}
        assert llm.requests_for("entity_resolution") == []
        failed = await memory.write(agent_id, "Guili chegou.", speaker_name="Rafael", verbose=True)
        assert phases(failed) == {"Guili": ("new", "person:guili")}
        assert failed.pipeline is not None
        [entry] = failed.pipeline.step("entity_resolution").data["entities"]
        assert "LLM resolution failed" in entry["note"]


async def test_an_ambiguous_name_without_a_fact_or_relation_costs_no_llm_call(
    make_client: ClientFactory, agent_id: str
) -> None:
    """Truth benchmark (1.5B model): 17 relatives listed for "my mom" cost ten entity-resolution calls, though no
    fact or relation was about them. A name the write says nothing about is not registered rather than asked."""
    embedder = HashEmbedder(overrides={"Guilherme": vector_at(1.0), "Guili": vector_at(0.70)})
    named_only = mention(("Guili", "person"), ("Ana", "person"), facts=[("Ana", "Ana chegou com o Guili")])
    llm = ScriptedLLM({"informed_extraction": [mention(("Guilherme", "person")), named_only]})
    async with make_client(llm, embedder=embedder) as memory:
        await memory.write(agent_id, "Guilherme chegou.", speaker_name="Rafael")
        result = await memory.write(agent_id, "A Ana chegou com o Guili.", speaker_name="Rafael", verbose=True)
        assert result.success, result.error
        assert llm.requests_for("entity_resolution") == []
        assert result.pipeline is not None
        entries = {e["name"]: e for e in result.pipeline.step("entity_resolution").data["entities"]}
        assert entries["Guili"]["phase"] == "skipped" and "not registered" in entries["Guili"]["note"]
        assert entries["Ana"]["key"] == "person:ana"
        assert await memory.get_entity(agent_id, "Guili") is None
        assert [f.text for f in await memory.get_facts(agent_id, entity="Ana")] == ["Ana chegou com o Guili"]


async def test_jo_and_joao_stay_apart(make_client: ClientFactory, agent_id: str) -> None:
    llm = ScriptedLLM({"informed_extraction": [mention(("João", "person")), mention(("Jo", "person"))]})
    async with make_client(llm) as memory:
        await memory.write(agent_id, "João chegou.", speaker_name="Rafael")
        result = await memory.write(agent_id, "Jo chegou.", speaker_name="Rafael")
        assert phases(result) == {"Jo": ("new", "person:jo")}


async def test_person_prefix_resolves_carol_to_carolina(make_client: ClientFactory, agent_id: str) -> None:
    llm = ScriptedLLM({"informed_extraction": [mention(("Carolina Souza", "person")), mention(("Carol", "person"))]})
    async with make_client(llm) as memory:
        await memory.write(agent_id, "Carolina Souza chegou.", speaker_name="Rafael")
        result = await memory.write(agent_id, "Carol chegou.", speaker_name="Rafael")
        assert phases(result) == {"Carol": ("prefix", "person:carolina_souza")}
        assert llm.requests_for("entity_resolution") == []


@pytest.mark.parametrize("pronoun", ["I", "me", "my", "myself", "eu", "mim", "meu", "minha", "comigo"])
async def test_speaker_pronouns_resolve_to_the_speaker(make_client: ClientFactory, agent_id: str, pronoun: str) -> None:
    llm = ScriptedLLM({"informed_extraction": [mention((pronoun, "person"), facts=[(pronoun, "Rafael likes tea")])]})
    async with make_client(llm) as memory:
        result = await memory.write(agent_id, "I like tea", speaker_name="Rafael")
        assert {e.key for e in result.entities_resolved} == {"person:rafael"}
        assert [f.entity_key for f in result.facts_added] == ["person:rafael"]


async def test_relationship_term_is_a_speaker_relative_person_linked_later_by_name(
    make_client: ClientFactory, agent_id: str
) -> None:
    llm = ScriptedLLM(
        {
            "informed_extraction": [
                mention(("minha mãe", "person"), facts=[("minha mãe", "A mãe do Rafael mora em Curitiba")]),
                mention(("Helena", "person", ["my mom"]), facts=[("Helena", "Helena loves gardening")]),
            ]
        }
    )
    async with make_client(llm) as memory:
        first = await memory.write(agent_id, "Minha mãe mora em Curitiba.", speaker_name="Rafael")
        speaker = {"Rafael": ("speaker", "person:rafael")}  # the owner of the relative, with a parent_of relation
        assert phases(first) == {"Rafael's mom": ("new", "person:rafael.mom"), **speaker}
        assert first.facts_added[0].entity_key == "person:rafael.mom"  # never the speaker
        second = await memory.write(agent_id, "My mom Helena loves gardening.", speaker_name="Rafael")
        assert phases(second) == {"Helena": ("alias", "person:rafael.mom"), **speaker}
        mom = await memory.get_entity(agent_id, "Helena")
        assert mom is not None and mom.key == "person:rafael.mom"


async def test_relational_hint_is_dropped_and_forces_person(make_client: ClientFactory, agent_id: str) -> None:
    llm = ScriptedLLM({"informed_extraction": [mention(("Carol (namorada do Rafael)", "concept"))]})
    async with make_client(llm) as memory:
        result = await memory.write(agent_id, "A Carol, namorada do Rafael, chegou.", speaker_name="Rafael")
        assert phases(result) == {"Carol": ("new", "person:carol")}


async def test_types_are_lowercased_and_keys_are_unicode_slugs(make_client: ClientFactory, agent_id: str) -> None:
    llm = ScriptedLLM({"informed_extraction": [mention(("São Paulo", "PLACE"))]})
    async with make_client(llm) as memory:
        result = await memory.write(agent_id, "São Paulo é grande.", speaker_name="Rafael")
        assert phases(result) == {"São Paulo": ("new", "place:sao_paulo")}
        entity = await memory.get_entity(agent_id, "sao paulo")
        assert entity is not None and entity.type == "place"


async def test_concurrent_writers_registering_one_alias_first_write_wins(
    make_client: ClientFactory, agent_id: str
) -> None:
    def by_message(request: Any) -> dict[str, Any]:
        text = request.messages[1]["content"]
        name = "Guilherme" if "Guilherme" in text else "Guido"
        return mention((name, "person", ["Gui"]))

    async with (
        make_client(ScriptedLLM({"informed_extraction": by_message})) as a,
        make_client(ScriptedLLM({"informed_extraction": by_message})) as b,
    ):
        results = await asyncio.gather(
            a.write(agent_id, "Guilherme (Gui) chegou.", speaker_name="Rafael"),
            b.write(agent_id, "Guido (Gui) chegou.", speaker_name="Rafael"),
        )
        assert all(r.success for r in results), [r.error for r in results]
        gui = await a.get_entity(agent_id, "Gui")
        assert gui is not None and gui.key in {"person:guilherme", "person:guido"}
        assert (await b.get_entity(agent_id, "Gui")) == gui  # one registry, seen by both clients


async def test_same_alias_maps_to_different_entities_for_different_agents(
    make_client: ClientFactory, agent_id: str
) -> None:
    other = agent_id + "-b"
    llm = ScriptedLLM(
        {
            "informed_extraction": [
                mention(("Guilherme Maturana", "person", ["Guili"])),
                mention(("Guilherme Souza", "person", ["Guili"])),
            ]
        }
    )
    async with make_client(llm) as memory:
        await memory.write(agent_id, "Guili (Guilherme Maturana) chegou.", speaker_name="Rafael")
        await memory.write(other, "Guili (Guilherme Souza) chegou.", speaker_name="Rafael")
        first, second = await memory.get_entity(agent_id, "Guili"), await memory.get_entity(other, "Guili")
        assert first is not None and second is not None
        assert (first.key, second.key) == ("person:guilherme_maturana", "person:guilherme_souza")


async def test_alias_learned_by_another_client_is_seen(make_client: ClientFactory, agent_id: str) -> None:
    writer_llm = ScriptedLLM({"informed_extraction": [mention(("Guilherme Maturana", "person", ["Guili"]))]})
    reader_llm = ScriptedLLM({"informed_extraction": [mention(("Guili", "person"))]})
    async with make_client(reader_llm) as reader, make_client(writer_llm) as writer:
        await reader.get_facts(agent_id)  # the reader is open (and would have warmed any cache) first
        await writer.write(agent_id, "Guili (Guilherme Maturana) chegou.", speaker_name="Rafael")
        result = await reader.write(agent_id, "Guili voltou.", speaker_name="Rafael")
        assert phases(result) == {"Guili": ("alias", "person:guilherme_maturana")}


async def test_string_similarity_is_used_when_embedding_fails(make_client: ClientFactory, agent_id: str) -> None:
    class FailingNames(HashEmbedder):
        async def embed(self, texts: Any) -> list[list[float]]:
            if texts and any(t == "Guilhermo" for t in texts):
                raise ProviderError("embedder down")
            return await super().embed(texts)

    llm = ScriptedLLM(
        {
            "informed_extraction": [
                mention(("Guilherme", "person")),
                mention(("Guilhermo", "person"), facts=[("Guilhermo", "Guilhermo chegou")]),
            ],
            "entity_resolution": [{"match": None}],
        }
    )
    config = MemoryConfig(fuzzy_threshold=0.95)
    async with make_client(llm, embedder=FailingNames(), config=config) as memory:
        await memory.write(agent_id, "Guilherme chegou.", speaker_name="Rafael")
        result = await memory.write(agent_id, "Guilhermo chegou.", speaker_name="Rafael", verbose=True)
        assert result.pipeline is not None
        [entry] = result.pipeline.step("entity_resolution").data["entities"]
        assert entry["candidates"][0]["key"] == "person:guilherme"
        assert 0.8 < entry["candidates"][0]["score"] < 0.95  # rapidfuzz WRatio, between the floor and threshold
