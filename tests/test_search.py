"""search() and context(): each signal, their fusion, graph expansion, point-in-time filters, tenancy, the
confidence floor, bad arguments and the token budget, against the real database."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import pytest

from memory_sdk import Context, EmbedderMismatch, Fact, InvalidInputError, MemoryClient, SearchHit
from memory_sdk.cli import main
from memory_sdk.llm.tokens import estimate_tokens
from memory_sdk.store import search as search_store
from memory_sdk.testing import HashEmbedder, ScriptedLLM
from tests.conftest import ClientFactory

T1 = datetime(2025, 3, 1, 10, 0, tzinfo=UTC)
T2 = datetime(2025, 6, 15, 10, 0, tzinfo=UTC)


def fact(
    subject: str,
    text: str,
    *,
    action: str = "NEW",
    attribute: str | None = None,
    confidence: float = 0.95,
    category: str = "stable_preference",
) -> dict[str, Any]:
    return {
        "subject": subject,
        "text": text,
        "action": action,
        "importance_category": category,
        "confidence": confidence,
        "attribute": attribute,
    }


def answer(
    entities: list[tuple[str, str]],
    facts: list[dict[str, Any]],
    relations: tuple[tuple[str, str, str], ...] = (),
    profiles: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "entities": [{"name": name, "type": kind} for name, kind in entities],
        "facts": facts,
        "relations": [{"source": s, "type": r, "target": t} for s, r, t in relations],
        "updated_profiles": profiles or {},
    }


def scripted(*answers: dict[str, Any]) -> ScriptedLLM:
    """Extraction answers in order; every reconciliation keeps both facts (ADD)."""
    return ScriptedLLM({"informed_extraction": list(answers), "reconciliation": lambda _request: {"action": "ADD"}})


# Rafael dates Clara; Clara works at Orion Tech. Nothing in "girlfriend's job" names Clara or Orion Tech.
PEOPLE = answer(
    [("Rafael", "person"), ("Clara Rezende", "person"), ("Orion Tech", "organization")],
    [
        fact("Rafael", "Rafael adora feijoada"),
        fact("Rafael", "Rafael plays the guitar on weekends"),
        fact("Clara Rezende", "Clara Rezende works at Orion Tech as head of engineering"),
        fact("Clara Rezende", "Clara Rezende is Rafael's girlfriend", category="relationship_change"),
    ],
    relations=(("Clara Rezende", "girlfriend_of", "Rafael"), ("Clara Rezende", "works_at", "Orion Tech")),
    profiles={"Clara Rezende": "Head of engineering at Orion Tech; Rafael's girlfriend."},
)


async def write_people(memory: MemoryClient, agent_id: str) -> None:
    said = ". ".join(f["text"] for f in PEOPLE["facts"])  # the facts are the message's: no guard drops them
    result = await memory.write(agent_id, said, speaker_name="Rafael", occurred_at=T1)
    assert result.success, result.error


def texts(hits: list[SearchHit]) -> list[str]:
    return [hit.fact.text for hit in hits]


# -- each signal ---------------------------------------------------------------------------------------------


async def test_keyword_signal_folds_accents_and_case(make_client: ClientFactory, agent_id: str) -> None:
    llm = scripted(answer([("Rafael", "person")], [fact("Rafael", "Rafael mora em São Paulo"), fact("Rafael", "X")]))
    async with make_client(llm) as memory:
        await memory.write(agent_id, "Moro em São Paulo", speaker_name="Rafael", occurred_at=T1)
        [top, *_] = await memory.search(agent_id, "SAO PAULO")
    assert top.fact.text == "Rafael mora em São Paulo"
    assert top.signals["keyword"] == 1


async def test_keyword_prefix_matches_another_form_of_the_word(make_client: ClientFactory, agent_id: str) -> None:
    llm = scripted(answer([("Rafael", "person")], [fact("Rafael", "Rafael moved to Lisbon"), fact("Rafael", "Y")]))
    async with make_client(llm) as memory:
        await memory.write(agent_id, "I moved to Lisbon", speaker_name="Rafael", occurred_at=T1)
        hits = await memory.search(agent_id, "when did he move?")
    keyword = [hit.fact.text for hit in hits if "keyword" in hit.signals]
    assert keyword == ["Rafael moved to Lisbon"]


async def test_keyword_ranks_the_named_entitys_fact_first(make_client: ClientFactory, agent_id: str) -> None:
    llm = scripted(
        answer(
            [("Rafael", "person"), ("Lúcia", "person")],
            [
                fact("Lúcia", "Lúcia throws a big birthday party every September"),
                fact("Rafael", "Rafael's birthday is on March 14"),
            ],
        )
    )
    async with make_client(llm) as memory:
        said = "My birthday is on March 14, and Lúcia throws a big birthday party every September"
        await memory.write(agent_id, said, speaker_name="Rafael", occurred_at=T1)
        hits = await memory.search(agent_id, "When is Rafael's birthday?")
    keyword = sorted((hit.signals["keyword"], hit.fact.text) for hit in hits if "keyword" in hit.signals)
    # "birthday" selects both facts; "Rafael" ranks his first.
    assert keyword == [
        (1, "Rafael's birthday is on March 14"),
        (2, "Lúcia throws a big birthday party every September"),
    ]


async def test_vector_signal_finds_a_fact_that_shares_no_word(make_client: ClientFactory, agent_id: str) -> None:
    # The query's vector is pinned to the fact's: a synonym an embedding model would see, and full text cannot.
    embedder = HashEmbedder()
    pinned = HashEmbedder(overrides={"favourite dish?": embedder.embed_one("Rafael adora feijoada")})
    async with make_client(scripted(PEOPLE), embedder=pinned) as memory:
        await write_people(memory, agent_id)
        [top, *_] = await memory.search(agent_id, "favourite dish?")
    assert top.fact.text == "Rafael adora feijoada"
    assert top.signals == {"vector": 1}


async def test_graph_signal_reaches_a_named_entitys_neighbour(make_client: ClientFactory, agent_id: str) -> None:
    async with make_client(scripted(PEOPLE)) as memory:
        await write_people(memory, agent_id)
        hits = await memory.search(agent_id, "Rafael girlfriend job")
    by_text = {hit.fact.text: hit for hit in hits}
    # Clara is one hop from Rafael (girlfriend_of): her facts come in through the graph.
    assert "graph" in by_text["Clara Rezende works at Orion Tech as head of engineering"].signals
    assert by_text["Clara Rezende works at Orion Tech as head of engineering"].entity_name == "Clara Rezende"


async def test_a_first_name_names_the_person(make_client: ClientFactory, agent_id: str) -> None:
    async with make_client(scripted(PEOPLE)) as memory:
        await write_people(memory, agent_id)
        hits = await memory.search(agent_id, "what does clara do?")
    graph = {hit.fact.text for hit in hits if "graph" in hit.signals}
    assert "Clara Rezende works at Orion Tech as head of engineering" in graph
    assert "Rafael plays the guitar on weekends" in graph  # one hop: Rafael is her boyfriend


async def test_without_a_named_entity_the_graph_is_silent(make_client: ClientFactory, agent_id: str) -> None:
    async with make_client(scripted(PEOPLE)) as memory:
        await write_people(memory, agent_id)
        hits = await memory.search(agent_id, "guitar weekends")
    assert hits and all("graph" not in hit.signals for hit in hits)
    assert hits[0].fact.text == "Rafael plays the guitar on weekends"


# -- fusion (pure) ---------------------------------------------------------------------------------------------


def stored(text: str, importance: float = 0.5, valid_from: datetime = T1) -> Fact:
    return Fact(
        id=uuid4(),
        agent_id="a",
        entity_key="person:x",
        text=text,
        confidence=0.9,
        importance=importance,
        importance_category="stable_preference",
        valid_from=valid_from,
    )


def by_id(*facts: Fact) -> dict[UUID, Fact]:
    return {f.id: f for f in facts if f.id is not None}


def test_fusion_prefers_a_fact_two_signals_agree_on() -> None:
    first_once, second_twice, third = stored("a"), stored("b"), stored("c")
    assert first_once.id and second_twice.id and third.id
    fused = search_store.fuse(
        {"vector": [first_once.id, second_twice.id], "keyword": [third.id, second_twice.id]},
        by_id(first_once, second_twice, third),
    )
    assert fused[0].fact.text == "b"
    assert fused[0].ranks == {"vector": 2, "keyword": 2}
    assert fused[0].score == pytest.approx(2 / (search_store.RRF_K + 2))


def test_fusion_counts_the_graph_at_its_weight() -> None:
    by_graph, by_vector = stored("graph"), stored("vector")
    assert by_graph.id and by_vector.id
    fused = search_store.fuse({"graph": [by_graph.id], "vector": [by_vector.id]}, by_id(by_graph, by_vector))
    assert [hit.fact.text for hit in fused] == ["vector", "graph"]
    assert fused[1].score == pytest.approx(search_store.SIGNAL_WEIGHTS["graph"] / (search_store.RRF_K + 1))


def test_fusion_ties_go_to_importance_then_recency() -> None:
    plain, important = stored("plain", importance=0.3), stored("important", importance=0.9)  # the others: 0.5
    old, recent = stored("old", valid_from=T1), stored("recent", valid_from=T2)
    facts = by_id(plain, important, old, recent)
    ids = {f.text: f.id for f in facts.values()}
    # Each fact is first in a signal of the same weight: equal scores, so only the tie-breakers order them.
    fused = search_store.fuse(
        {"vector": [ids["plain"], ids["recent"]], "keyword": [ids["important"], ids["old"]]}, facts
    )
    assert [hit.fact.text for hit in fused] == ["important", "plain", "recent", "old"]
    fused = search_store.fuse({"vector": [ids["old"]], "keyword": [ids["recent"]]}, facts)
    assert [hit.fact.text for hit in fused] == ["recent", "old"]


def test_keyword_query_drops_stop_words_of_both_languages() -> None:
    assert search_store.keyword_query("Where does Clara work?") == "'clara':* | 'work':*"
    assert search_store.keyword_query("Onde a Clara trabalha?") == "'clara':* | 'trabalha':*"
    assert search_store.keyword_query("o que é isso?") is None
    assert search_store.keyword_query("rio & (sp) | !x:* 7") == "'rio' | 'sp' | '7'"  # no tsquery syntax gets through
    assert search_store.keyword_query("Rafael's birthday") == "'rafael':* | 'birthday':*"  # not the "s"
    assert search_store.keyword_query("Rafael's birthday", skip=frozenset({"rafael"})) == "'birthday':*"


# -- point in time ---------------------------------------------------------------------------------------------


async def test_as_of_and_known_at_return_the_facts_of_then(make_client: ClientFactory, agent_id: str) -> None:
    llm = ScriptedLLM(
        {
            "informed_extraction": [
                answer([("Rafael", "person")], [fact("Rafael", "Rafael mora em Curitiba", attribute="lives_in")]),
                answer(
                    [("Rafael", "person")],
                    [fact("Rafael", "Rafael mora em São Paulo", action="UPDATE", attribute="lives_in")],
                ),
            ],
            "reconciliation": [{"action": "UPDATE", "target": "1"}],
        }
    )
    async with make_client(llm) as memory:
        await memory.write(agent_id, "Moro em Curitiba", speaker_name="Rafael", occurred_at=T1)
        between = datetime.now(UTC)
        await memory.write(agent_id, "Me mudei pra São Paulo", speaker_name="Rafael", occurred_at=T2)
        query = "onde Rafael mora?"
        assert texts(await memory.search(agent_id, query)) == ["Rafael mora em São Paulo"]
        assert texts(await memory.search(agent_id, query, as_of=T1 + timedelta(days=1))) == ["Rafael mora em Curitiba"]
        assert texts(await memory.search(agent_id, query, as_of=T2)) == ["Rafael mora em São Paulo"]
        assert texts(await memory.search(agent_id, query, as_of=T1 - timedelta(days=1))) == []
        # Believed before the second write: Curitiba was the current home then.
        assert texts(await memory.search(agent_id, query, known_at=between)) == ["Rafael mora em Curitiba"]
        assert texts(await memory.search(agent_id, "Curitiba", known_at=between, as_of=T2)) == [
            "Rafael mora em Curitiba"
        ]


# -- tenancy, filters ------------------------------------------------------------------------------------------


async def test_another_agents_facts_are_never_found(make_client: ClientFactory, agent_id: str) -> None:
    other = agent_id + "-other"
    secret = answer([("Clara Rezende", "person")], [fact("Clara Rezende", "Clara Rezende's password is hunter2")])
    async with make_client(scripted(PEOPLE, secret)) as memory:
        await write_people(memory, agent_id)
        await memory.write(other, "Clara's password is hunter2", speaker_name="Clara", occurred_at=T1)
        hits = await memory.search(agent_id, "Clara Rezende password hunter2", k=100)
        theirs = await memory.search(other, "Clara Rezende password hunter2", k=100)
    assert hits and all(hit.fact.agent_id == agent_id for hit in hits)
    assert "Clara Rezende's password is hunter2" not in texts(hits)
    assert texts(theirs) == ["Clara Rezende's password is hunter2"]


async def test_min_confidence_leaves_out_less_confident_facts(make_client: ClientFactory, agent_id: str) -> None:
    llm = scripted(
        answer(
            [("Rafael", "person")],
            [fact("Rafael", "Rafael likes jazz", confidence=0.6), fact("Rafael", "Rafael likes jazz fusion")],
        )
    )
    async with make_client(llm) as memory:
        await memory.write(agent_id, "jazz", speaker_name="Rafael", occurred_at=T1)
        assert sorted(texts(await memory.search(agent_id, "jazz"))) == ["Rafael likes jazz", "Rafael likes jazz fusion"]
        assert texts(await memory.search(agent_id, "jazz", min_confidence=0.9)) == ["Rafael likes jazz fusion"]


async def test_entity_filter_keeps_that_entitys_facts(make_client: ClientFactory, agent_id: str) -> None:
    async with make_client(scripted(PEOPLE)) as memory:
        await write_people(memory, agent_id)
        hits = await memory.search(agent_id, "Rafael", entity="Clara Rezende", k=20)
        unknown = await memory.search(agent_id, "Rafael", entity="Nobody")
    # Clara's facts only: Rafael's own facts match the query but are not about her.
    assert hits and {hit.entity_key for hit in hits} == {"person:clara_rezende"}
    assert unknown == []


async def test_k_caps_the_hits(make_client: ClientFactory, agent_id: str) -> None:
    async with make_client(scripted(PEOPLE)) as memory:
        await write_people(memory, agent_id)
        assert len(await memory.search(agent_id, "Rafael Clara", k=2)) == 2
        assert len(await memory.search(agent_id, "Rafael Clara", k=100)) == 4


async def test_index_walk_and_exact_scan_agree(
    make_client: ClientFactory, agent_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with make_client(scripted(PEOPLE)) as memory:
        await write_people(memory, agent_id)
        exact = await memory.search(agent_id, "feijoada", k=1)
        # Every agent now counts as large: the vector signal walks the HNSW index with the iterative scan.
        monkeypatch.setattr(search_store, "EXACT_SCAN_MAX_FACTS", 1)
        monkeypatch.setattr(search_store, "SIGNAL_POOL", 1)
        walked = await memory.search(agent_id, "feijoada", k=1)
    assert texts(walked) == texts(exact) == ["Rafael adora feijoada"]
    assert walked[0].signals["vector"] == 1


async def test_search_with_another_embedder_is_refused(
    make_client: ClientFactory, agent_id: str, database_url: str
) -> None:
    async with make_client(scripted(PEOPLE)) as memory:
        await write_people(memory, agent_id)

    class OtherEmbedder(HashEmbedder):
        @property
        def model_id(self) -> str:
            return "hash:other"

    async with MemoryClient(database_url, llm=ScriptedLLM(), embedder=OtherEmbedder()) as other:
        with pytest.raises(EmbedderMismatch):
            await other.search(agent_id, "Rafael")


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"query": ""}, "query"),
        ({"query": "   "}, "query"),
        ({"query": None}, "query"),
        ({"query": "a\x00b"}, "query"),
        ({"query": "x" * 10_001}, "query"),
        ({"k": 0}, "k"),
        ({"k": 101}, "k"),
        ({"k": "5"}, "k"),
        ({"k": True}, "k"),
        ({"entity": ""}, "entity"),
        ({"as_of": datetime(2025, 1, 1)}, "as_of"),  # naive on purpose
        ({"known_at": "2025-01-01"}, "known_at"),
        ({"min_confidence": 1.5}, "min_confidence"),
    ],
)
async def test_bad_search_arguments_raise_invalid_input(
    make_client: ClientFactory, agent_id: str, arguments: dict[str, Any], named: str
) -> None:
    embedder = HashEmbedder()
    async with make_client(embedder=embedder) as memory:
        call = {"query": "jazz", **arguments}
        with pytest.raises(InvalidInputError, match=named):
            await memory.search(agent_id, **call)
        with pytest.raises(InvalidInputError, match="agent_id"):
            await memory.search("", "jazz")
    assert embedder.calls == []  # refused at the door: nothing embedded


# -- context ---------------------------------------------------------------------------------------------------


async def test_context_fits_its_budget(make_client: ClientFactory, agent_id: str) -> None:
    async with make_client(scripted(PEOPLE)) as memory:
        await write_people(memory, agent_id)
        message = "How is Clara Rezende doing at Orion Tech?"
        contexts: list[Context] = [await memory.context(agent_id, message, budget_tokens=b) for b in (5, 60, 130, 4000)]
    for ctx in contexts:
        assert estimate_tokens(ctx.text) == ctx.tokens <= ctx.budget_tokens
    tiny, small, medium, roomy = contexts
    assert tiny.text == "" and tiny.hits == [] and tiny.entities == []
    # The profile of the entity the message names comes first, then facts as they fit.
    assert [entity.name for entity in small.entities] == ["Clara Rezende"]
    assert "Head of engineering at Orion Tech" in small.text
    assert small.hits == [] and 0 < len(medium.hits) < len(roomy.hits) == 4
    assert roomy.text.index("Head of engineering") < roomy.text.index('- "Clara Rezende works at Orion Tech')
    assert "since 2025-03-01" in roomy.text


async def test_context_leaves_out_a_stale_profile(make_client: ClientFactory, agent_id: str) -> None:
    later = answer([("Clara Rezende", "person")], [fact("Clara Rezende", "Clara Rezende left Orion Tech")])
    async with make_client(scripted(PEOPLE, later)) as memory:
        await write_people(memory, agent_id)
        await memory.write(agent_id, "Clara saiu da Orion", speaker_name="Rafael", occurred_at=T2)
        ctx = await memory.context(agent_id, "Clara Rezende", budget_tokens=4000)
    # The profile predates her last fact: it may say what is no longer true, her facts stand in for it.
    assert ctx.entities == []
    assert "Clara Rezende left Orion Tech" in ctx.text


@pytest.mark.parametrize("budget", [0, -5, 1.5, True, 10**7])
async def test_bad_budget_raises_invalid_input(make_client: ClientFactory, agent_id: str, budget: Any) -> None:
    async with make_client() as memory:
        with pytest.raises(InvalidInputError, match="budget_tokens"):
            await memory.context(agent_id, "hello", budget_tokens=budget)


# -- command line ----------------------------------------------------------------------------------------------


def test_search_command_prints_the_hits(
    make_client: ClientFactory, agent_id: str, database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    async def seed() -> None:
        async with make_client(scripted(PEOPLE)) as memory:
            await write_people(memory, agent_id)

    asyncio.run(seed())
    where = ["--database-url", database_url, "--embedder", "hash"]
    assert main(["search", agent_id, "feijoada", "-k", "2", *where, "--json"]) == 0
    hits = json.loads(capsys.readouterr().out)
    assert len(hits) == 2
    assert hits[0]["fact"]["text"] == "Rafael adora feijoada" and hits[0]["entity_name"] == "Rafael"
    assert main(["search", agent_id, "feijoada", "--entity", "Clara Rezende", "--as-of", "2025-01-01", *where]) == 0
    assert capsys.readouterr().out.strip() == "(no matching facts)"  # Clara's facts date from March 2025
    assert main(["search", agent_id, "guitar", *where]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if "person:" in line]
    assert "person:rafael" in rows[0] and "Rafael plays the guitar on weekends" in rows[0]
