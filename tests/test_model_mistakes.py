"""The mistakes a 1.5B model made in our measurements (issues 10 and 13), scripted and written through
MemoryClient.write against the real database: each test asserts that memory kept the truth."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from memory_sdk.results import WriteResult
from memory_sdk.testing import HashEmbedder, ScriptedLLM
from tests.conftest import ClientFactory
from tests.invariants import assert_memory_invariants
from tests.test_resolution import vector_at
from tests.test_stays_true import answer, fact

T1 = datetime(2025, 3, 1, 10, 0, tzinfo=UTC)
T2 = datetime(2025, 6, 15, 10, 0, tzinfo=UTC)

HOME = answer(
    [("Rafael", "person"), ("Curitiba", "place")],
    [fact("Rafael", "Rafael mora em Curitiba", attribute="lives_in")],
    [("Rafael", "lives_in", "Curitiba")],
)


def with_aliases(extraction: dict[str, Any], **aliases: list[str]) -> dict[str, Any]:
    """`extraction` with aliases given to its entities by name (keyword: the name with '_' for ' ')."""
    for entity in extraction["entities"]:
        entity["aliases"] = aliases.get(entity["name"].replace(" ", "_"), [])
    return extraction


def always(action: str) -> Any:
    """A reconciliation script that answers `action` on the first fact shown, whatever it is asked."""
    return lambda request: {"action": action, "target": "1", "reasoning": "scripted mistake"}


def scripted(
    extractions: list[dict[str, Any]], verdict: str, cosines: dict[str, float]
) -> tuple[ScriptedLLM, HashEmbedder]:
    """A model that extracts `extractions` in turn and answers `verdict` to every reconciliation, and an embedder
    that pins each text of `cosines` at that cosine to `vector_at(1.0)`."""
    llm = ScriptedLLM({"informed_extraction": extractions, "reconciliation": always(verdict)})
    return llm, HashEmbedder(overrides={text: vector_at(cosine) for text, cosine in cosines.items()})


async def current_texts(memory: Any, agent_id: str, entity: str) -> list[str]:
    return sorted(f.text for f in await memory.get_facts(agent_id, entity=entity))


def adjusted(result: WriteResult) -> list[tuple[str, str]]:
    """(rule, item) of every change the SDK made to the model's answer, in order."""
    return [(a.rule, a.item) for a in result.adjustments]


async def test_update_into_a_fact_about_another_attribute_leaves_the_home_current(
    make_client: ClientFactory, agent_id: str
) -> None:
    """Message 3 of the measured chat: the model UPDATEd "Rafael mora em Curitiba" (lives_in) into a fact about a
    conversation (job_title), and the home was gone."""
    talk = "Rafael falou com Guilherme Maturana sobre o projeto"
    third = with_aliases(
        answer(
            [("Rafael", "person"), ("Guilherme Maturana", "person")],
            [fact("Rafael", talk, action="UPDATE", attribute="job_title")],
        ),
        Guilherme_Maturana=["Guili"],
    )
    llm, embedder = scripted([HOME, third], "UPDATE", {"Rafael mora em Curitiba": 1.0, talk: 0.6})
    async with make_client(llm, embedder=embedder) as memory:
        await memory.write(agent_id, "Moro em Curitiba", speaker_name="Rafael", occurred_at=T1)
        result = await memory.write(
            agent_id, "Falei com o Guili sobre o projeto", speaker_name="Rafael", occurred_at=T2, verbose=True
        )
        assert result.success, result.error
        # Similarity 0.6, but about another attribute: the model was asked and erred; no decision may touch the
        # home, so it is no longer asked.
        assert llm.requests_for("reconciliation") == []
        assert result.pipeline is not None
        [decision] = result.pipeline.step("reconciliation").data["decisions"]
        assert decision["action"] == "ADD" and "no similar fact a decision may touch" in decision["why"]
        assert await current_texts(memory, agent_id, "Rafael") == [
            "Rafael falou com Guilherme Maturana sobre o projeto",
            "Rafael mora em Curitiba",
        ]
        edges = await memory.get_relationships(agent_id, entity="Rafael")
        assert [(e.rel_type, e.target_key) for e in edges] == [("lives_in", "place:curitiba")]
        await assert_memory_invariants(memory, agent_id)


async def test_extractor_update_hint_on_an_unrelated_fact_asks_no_one(
    make_client: ClientFactory, agent_id: str
) -> None:
    """Issue 13: an UPDATE hint sent facts of similarity 0.27-0.44 to the model, which closed true facts."""
    tennis, move = "Rafael joga tênis às terças", "Rafael mora em São Paulo"
    first = answer([("Rafael", "person")], [fact("Rafael", tennis)])
    second = answer([("Rafael", "person")], [fact("Rafael", move, action="UPDATE")])
    llm, embedder = scripted([first, second], "UPDATE", {tennis: 1.0, move: 0.35})
    async with make_client(llm, embedder=embedder) as memory:
        await memory.write(agent_id, "Jogo tênis às terças", speaker_name="Rafael", occurred_at=T1)
        result = await memory.write(agent_id, "Me mudei pra São Paulo", speaker_name="Rafael", occurred_at=T2)
        assert result.success, result.error
        assert llm.requests_for("reconciliation") == []
        assert await current_texts(memory, agent_id, "Rafael") == [tennis, move]


async def test_third_person_statement_given_to_the_speaker_is_dropped(
    make_client: ClientFactory, agent_id: str
) -> None:
    """ "O Ricardo Gomes mora em São Paulo" was stored as "Rafael mora em São Paulo": the fact is dropped and
    reported (wrong_speaker), not moved to Ricardo Gomes, and Rafael's home stays current."""
    ricardo = with_aliases(
        answer(
            [("Ricardo Gomes", "person"), ("São Paulo", "place")],
            [fact("Rafael", "Rafael mora em São Paulo", attribute="lives_in")],
            [("Rafael", "lives_in", "São Paulo")],
        ),
    )
    llm = ScriptedLLM({"informed_extraction": [HOME, ricardo], "reconciliation": always("UPDATE")})
    async with make_client(llm) as memory:
        await memory.write(agent_id, "Moro em Curitiba", speaker_name="Rafael", occurred_at=T1)
        result = await memory.write(
            agent_id, "O Ricardo Gomes mora em São Paulo.", speaker_name="Rafael", occurred_at=T2, verbose=True
        )
        assert result.success, result.error
        assert await current_texts(memory, agent_id, "Rafael") == ["Rafael mora em Curitiba"]
        assert await current_texts(memory, agent_id, "Ricardo Gomes") == []
        edges = await memory.get_relationships(agent_id, entity="Rafael")
        assert [(e.rel_type, e.target_key) for e in edges] == [("lives_in", "place:curitiba")]
        assert adjusted(result) == [("wrong_speaker", "Rafael mora em São Paulo")]
        assert "is about 'Ricardo Gomes'" in result.adjustments[0].why
        assert result.pipeline is not None
        post = result.pipeline.step("post_extraction").data
        assert post["relations_not_in_message"] == ["Rafael lives_in São Paulo"]
        await assert_memory_invariants(memory, agent_id)


async def test_retraction_with_a_relation_leaves_no_current_edge(make_client: ClientFactory, agent_id: str) -> None:
    """After "Não trabalho mais na Acme" the model's works_at relation opened a current edge on the retraction."""
    works, quits = "Rafael trabalha na Acme", "Rafael não trabalha mais na Acme"
    entities = [("Rafael", "person"), ("Acme", "organization")]
    first = answer(entities, [fact("Rafael", works, attribute="employer")], [("Rafael", "works_at", "Acme")])
    second = answer(entities, [fact("Rafael", quits)], [("Rafael", "works_at", "Acme")])
    llm, embedder = scripted([first, second], "DELETE", {works: 1.0, quits: 0.8})
    async with make_client(llm, embedder=embedder) as memory:
        await memory.write(agent_id, "Trabalho na Acme", speaker_name="Rafael", occurred_at=T1)
        result = await memory.write(agent_id, "Não trabalho mais na Acme", speaker_name="Rafael", occurred_at=T2)
        assert result.success, result.error
        assert [f.text for f in result.facts_deleted] == [works]
        assert await memory.get_relationships(agent_id, entity="Rafael") == []
        history = await memory.get_relationships(agent_id, entity="Rafael", include_invalidated=True)
        assert [(e.rel_type, e.valid_to) for e in history] == [("works_at", T2)]
        await assert_memory_invariants(memory, agent_id)


async def test_mirror_fact_does_not_supersede_the_stated_fact(make_client: ClientFactory, agent_id: str) -> None:
    """ "Ricardo Gomes lives in Austin" (a mirror fact, 0.60) superseded "Ricardo se mudou pra Austin, Texas" (0.95)."""
    stated, mirror = "Ricardo se mudou pra Austin, Texas", "Ricardo Gomes lives in Austin"
    entities = [("Ricardo Gomes", "person"), ("Austin", "place")]
    first = with_aliases(answer(entities, [fact("Ricardo Gomes", stated)]), Ricardo_Gomes=["Ricardo"])
    second = with_aliases(answer(entities, [], [("Ricardo Gomes", "lives_in", "Austin")]), Ricardo_Gomes=["Ricardo"])
    llm, embedder = scripted([first, second], "UPDATE", {stated: 1.0, mirror: 0.7})
    async with make_client(llm, embedder=embedder) as memory:
        await memory.write(agent_id, "Ricardo se mudou pra Austin, Texas.", speaker_name="Rafael", occurred_at=T1)
        result = await memory.write(agent_id, "O Ricardo adora Austin.", speaker_name="Rafael", occurred_at=T2)
        assert result.success, result.error
        assert result.facts_superseded == []
        current = await memory.get_facts(agent_id, entity="Ricardo Gomes")
        assert sorted((f.text, f.source_context) for f in current) == [
            (mirror, "inferred_from_relation"),
            (stated, "extracted"),
        ]
        [edge] = await memory.get_relationships(agent_id, entity="Ricardo Gomes")
        assert edge.evidence_fact_id in {f.id for f in current}
        await assert_memory_invariants(memory, agent_id)


RECENT = ("Caroline: I went to the LGBT support group yesterday and it was so powerful.",)


async def test_facts_of_the_recent_messages_are_not_stored_as_the_current_messages(
    make_client: ClientFactory, agent_id: str
) -> None:
    """Two-speaker chat: the model re-extracted the other speaker's recent line, with or without evidence."""
    painting = "Melanie painted a lake sunrise last year"
    entities = [("Melanie", "person"), ("Caroline", "person"), ("LGBT support group", "organization")]
    copied = [
        fact("Caroline", "Caroline went to the LGBT support group"),
        fact("Caroline", "Caroline found the support group powerful", evidence="it was so powerful"),
        fact("Melanie", painting, evidence="I painted a lake sunrise last year"),
    ]
    llm = ScriptedLLM({"informed_extraction": [answer(entities, copied)]})
    async with make_client(llm) as memory:
        result = await memory.write(
            agent_id,
            "That's amazing, Caroline! I painted a lake sunrise last year.",
            speaker_name="Melanie",
            recent_messages=list(RECENT),
            occurred_at=T1,
            verbose=True,
        )
        assert result.success, result.error  # a dropped ungrounded fact is the guard working, not a failure
        assert [f.text for f in result.facts_added] == [painting]
        assert adjusted(result) == [
            ("not_grounded", copied[0]["text"]),
            ("not_grounded", copied[1]["text"]),
            ("date", painting),  # "last year", read by the SDK
        ]
        await assert_memory_invariants(memory, agent_id)


async def test_first_person_words_given_to_the_other_speaker_are_dropped(
    make_client: ClientFactory, agent_id: str
) -> None:
    """ "Melanie: The support group has made me feel accepted..." for Caroline's words; "Melanie lives in LGBT
    support group": the fact is dropped and reported (wrong_speaker), not moved to Caroline, and no edge is made."""
    words = "The support group has made me feel accepted"
    extraction = answer(
        [("Melanie", "person"), ("LGBT support group", "organization")],
        [fact("Melanie", words)],
        [("Melanie", "lives_in", "LGBT support group")],
    )
    async with make_client(ScriptedLLM({"informed_extraction": [extraction]})) as memory:
        result = await memory.write(
            agent_id,
            "The support group has made me feel accepted and given me courage.",
            speaker_name="Caroline",
            recent_messages=["Melanie: How have you been?"],
            occurred_at=T1,
        )
        assert result.success, result.error
        assert result.facts_added == []
        assert adjusted(result) == [("wrong_speaker", words)]
        assert await memory.get_facts(agent_id, entity="Melanie") == []
        assert await memory.get_facts(agent_id, entity="Caroline") == []
        assert await memory.get_relationships(agent_id) == []
        await assert_memory_invariants(memory, agent_id)


async def test_first_person_sentence_given_to_the_addressee_is_stored_once_for_the_speaker(
    make_client: ClientFactory, agent_id: str
) -> None:
    """Truth benchmark, melanie_caroline write 2 (1.5B model, prompt v8): "That's great, Mel! I went to an LGBTQ
    support group yesterday" gave the same fact to Caroline and to Melanie, the person addressed."""
    extraction = answer(
        [("Caroline", "person"), ("Melanie", "person")],
        [
            # the model's evidence, for both: one word of the sentence
            fact("Caroline", "Caroline went to an LGBTQ support group yesterday", evidence="Yesterday"),
            fact("Melanie", "Melanie went to an LGBTQ support group yesterday", evidence="Yesterday"),
        ],
    )
    async with make_client(ScriptedLLM({"informed_extraction": [extraction]})) as memory:
        result = await memory.write(
            agent_id,
            "That's great, Mel! I went to an LGBTQ support group yesterday and it was so powerful.",
            speaker_name="Caroline",
            recent_messages=["Melanie: Hi Caroline! I just got back from camping with my kids."],
            occurred_at=T1,
            verbose=True,
        )
        assert result.success, result.error
        assert [(f.entity_key, f.text) for f in result.facts_added] == [
            ("person:caroline", "Caroline went to an LGBTQ support group yesterday")
        ]
        assert await memory.get_facts(agent_id, entity="Melanie") == []
        assert adjusted(result) == [
            ("alias_added", "Mel"),
            ("wrong_speaker", "Melanie went to an LGBTQ support group yesterday"),
            ("date", "Caroline went to an LGBTQ support group yesterday"),
        ]


async def test_known_facts_of_the_speaker_are_not_copied_onto_the_person_named(
    make_client: ClientFactory, agent_id: str
) -> None:
    """The demo re-recorded with prompt v8 (1.5B model): "O Ricardo Gomes mora em São Paulo" was stored with
    Rafael's known home, "Ricardo Gomes mora em Curitiba"; the name Ricardo Gomes is in the message, so grounding
    alone let it through."""
    copied = answer(
        [("Rafael", "person"), ("Ricardo Gomes", "person"), ("São Paulo", "place"), ("Curitiba", "place")],
        [
            fact("Ricardo Gomes", "Ricardo Gomes mora em São Paulo", attribute="lives_in"),
            fact("Ricardo Gomes", "Ricardo Gomes mora em Curitiba", attribute="lives_in"),
        ],
    )
    async with make_client(ScriptedLLM({"informed_extraction": [HOME, copied]})) as memory:
        await memory.write(agent_id, "Moro em Curitiba", speaker_name="Rafael", occurred_at=T1)
        result = await memory.write(
            agent_id, "O Ricardo Gomes mora em São Paulo.", speaker_name="Rafael", occurred_at=T2, verbose=True
        )
        assert result.success, result.error
        assert await current_texts(memory, agent_id, "Ricardo Gomes") == ["Ricardo Gomes mora em São Paulo"]
        assert await current_texts(memory, agent_id, "Rafael") == ["Rafael mora em Curitiba"]
        assert adjusted(result) == [("copied", "Ricardo Gomes mora em Curitiba")]
        assert "known memory of 'Rafael'" in result.adjustments[0].why
        await assert_memory_invariants(memory, agent_id)


async def test_the_profile_of_an_entity_whose_facts_were_all_dropped_is_not_seeded(
    make_client: ClientFactory, agent_id: str
) -> None:
    """The model's profile of Clara says what its copied fact said ("Mora em Curitiba", Rafael's home): with the fact
    dropped, the profile would have fed the copy to every later extraction through pre-retrieval."""
    copied = answer(
        [("Rafael", "person"), ("Clara Rezende", "person"), ("Curitiba", "place")],
        [
            fact("Rafael", "Rafael falou com Clara Rezende"),
            fact("Clara Rezende", "Clara Rezende mora em Curitiba", attribute="lives_in"),
        ],
    )
    copied["updated_profiles"] = {"Clara Rezende": "Mora em Curitiba.", "Rafael": "Mora em Curitiba."}
    async with make_client(ScriptedLLM({"informed_extraction": [HOME, copied]})) as memory:
        await memory.write(agent_id, "Moro em Curitiba", speaker_name="Rafael", occurred_at=T1)
        result = await memory.write(
            agent_id, "Falei com a Clara Rezende.", speaker_name="Rafael", occurred_at=T2, verbose=True
        )
        assert result.success, result.error
        assert adjusted(result) == [
            ("not_grounded", "Clara Rezende mora em Curitiba"),
            ("not_grounded", "profile of Clara Rezende"),
        ]
        clara, rafael = await memory.get_entity(agent_id, "Clara Rezende"), await memory.get_entity(agent_id, "Rafael")
        assert clara is not None and clara.profile_text is None
        assert rafael is not None and rafael.profile_text == "Mora em Curitiba."


async def test_a_move_the_model_gave_no_attribute_is_stored_as_given(make_client: ClientFactory, agent_id: str) -> None:
    """Truth benchmark (1.5B model, prompt v8): "Me mudei pra São Paulo ontem" and "Tom moved to Denver yesterday"
    came with no attribute. No attribute is read from the fact's words any more (it retyped correct answers): the
    fact is stored as the model gave it, beside the old home, and only its date ("ontem") is the SDK's."""
    moved = answer(
        [("Rafael", "person"), ("São Paulo", "place")], [fact("Rafael", "Rafael mudeu pra São Paulo", action="ADD")]
    )
    async with make_client(ScriptedLLM({"informed_extraction": [HOME, moved]})) as memory:
        await memory.write(agent_id, "Moro em Curitiba", speaker_name="Rafael", occurred_at=T1)
        result = await memory.write(
            agent_id, "Me mudei pra São Paulo ontem.", speaker_name="Rafael", occurred_at=T2, verbose=True
        )
        assert result.success, result.error
        assert result.facts_superseded == [] and result.facts_deleted == []
        [moved_fact] = result.facts_added
        assert (moved_fact.text, moved_fact.attribute) == ("Rafael mudeu pra São Paulo", None)
        assert moved_fact.valid_from.date() == datetime(2025, 6, 14).date()  # "ontem", resolved by the SDK
        assert await current_texts(memory, agent_id, "Rafael") == [
            "Rafael mora em Curitiba",
            "Rafael mudeu pra São Paulo",
        ]
        assert adjusted(result) == [("date", "Rafael mudeu pra São Paulo")]
        await assert_memory_invariants(memory, agent_id)


async def test_a_relation_of_the_person_addressed_makes_no_fact_about_her(
    make_client: ClientFactory, agent_id: str
) -> None:
    """Truth benchmark, melanie_caroline (1.5B model): the answer also related Melanie, whom the message only
    addresses ("That's great, Mel!"), to the support group, and once "Mel" was her alias the mirror fact
    "Melanie participates in LGBTQ support group" was stored."""
    extraction = answer(
        [("Caroline", "person"), ("Melanie", "person"), ("LGBTQ support group", "organization")],
        [fact("Caroline", "Caroline went to an LGBTQ support group yesterday", evidence="Yesterday")],
        [("Caroline", "participates_in", "LGBTQ support group"), ("Melanie", "participates_in", "LGBTQ support group")],
    )
    async with make_client(ScriptedLLM({"informed_extraction": [extraction]})) as memory:
        result = await memory.write(
            agent_id,
            "That's great, Mel! I went to an LGBTQ support group yesterday and it was so powerful.",
            speaker_name="Caroline",
            recent_messages=["Melanie: Hi Caroline! I just got back from camping with my kids."],
            occurred_at=T1,
            verbose=True,
        )
        assert result.success, result.error
        assert await memory.get_facts(agent_id, entity="Melanie") == []
        mel = await memory.get_entity(agent_id, "Mel")
        assert mel is not None and mel.key == "person:melanie"  # the nickname is still hers
        await assert_memory_invariants(memory, agent_id)


async def test_a_place_or_company_defined_from_what_the_model_knows_is_not_stored(
    make_client: ClientFactory, agent_id: str
) -> None:
    """Truth benchmark (1.5B model): "We moved to Denver yesterday" gave "Denver is a city in Colorado", and "Two
    weeks ago I joined Initech" "Initech é uma empresa de tecnologia": the message says neither. The first is dropped
    (not_grounded: none of its words is said) and kept when the message says it; the second, in another language
    than the message, is not judged word by word (docs/write-pipeline.md, "The guard contract")."""
    definition = "Denver is a city in Colorado"
    moved = answer(
        [("Ana", "person"), ("Denver", "place")],
        [fact("Ana", "Ana moved to Denver yesterday", attribute="lives_in"), fact("Denver", definition)],
    )
    said = answer([("Denver", "place")], [fact("Denver", definition)])
    async with make_client(ScriptedLLM({"informed_extraction": [moved, said]})) as memory:
        result = await memory.write(
            agent_id, "We moved to Denver yesterday.", speaker_name="Ana", occurred_at=T1, verbose=True
        )
        assert result.success, result.error
        assert [f.text for f in result.facts_added] == ["Ana moved to Denver yesterday"]
        assert adjusted(result) == [("not_grounded", definition), ("date", "Ana moved to Denver yesterday")]
        assert "said nowhere (city, colorado)" in result.adjustments[0].why
        # Said in the message, the same fact is kept, untouched.
        kept = await memory.write(agent_id, "Denver is a city in Colorado.", speaker_name="Ana", occurred_at=T2)
        assert [f.text for f in kept.facts_added] == [definition]
        assert kept.adjustments == []


async def test_what_the_memory_says_of_the_speaker_is_not_given_to_the_person_named(
    make_client: ClientFactory, agent_id: str
) -> None:
    """Truth benchmark (1.5B model, bia_chatter): after Beatriz's guitar lessons, "Meu irmão Pedro mora em Belo
    Horizonte" also gave "Pedro começou a fazer aulas de violão", copied from her known fact with no capitalised
    word to betray it. Its evidence is found, but none of its words is said: dropped (not_grounded)."""
    lessons = answer([("Beatriz", "person")], [fact("Beatriz", "Beatriz começou a fazer aulas de violão")])
    brother = answer(
        [("Beatriz", "person"), ("Pedro", "person"), ("Belo Horizonte", "place")],
        [
            fact("Pedro", "Pedro mora em Belo Horizonte", attribute="lives_in"),
            # The model's evidence is a span of the message, so grounding keeps the fact.
            fact("Pedro", "Pedro começou a fazer aulas de violão", evidence="Meu irmão Pedro"),
        ],
    )
    async with make_client(ScriptedLLM({"informed_extraction": [lessons, brother]})) as memory:
        await memory.write(agent_id, "Comecei a fazer aulas de violão.", speaker_name="Beatriz", occurred_at=T1)
        result = await memory.write(
            agent_id, "Meu irmão Pedro mora em Belo Horizonte.", speaker_name="Beatriz", occurred_at=T2, verbose=True
        )
        assert result.success, result.error
        assert await current_texts(memory, agent_id, "Pedro") == ["Pedro mora em Belo Horizonte"]
        assert await current_texts(memory, agent_id, "Beatriz") == ["Beatriz começou a fazer aulas de violão"]
        assert adjusted(result) == [("not_grounded", "Pedro começou a fazer aulas de violão")]
        assert "are said nowhere" in result.adjustments[0].why


async def test_a_sentence_about_a_relative_given_to_the_speaker_is_kept_as_given(
    make_client: ClientFactory, agent_id: str
) -> None:
    """Truth benchmark (1.5B model, final code): asked again without memory, "Meu irmão Pedro mora em Belo
    Horizonte" came back as that sentence with subject Beatriz, and was stored as "Beatriz meu irmão Pedro mora em
    Belo Horizonte", her home. The sentence is hers ("Meu irmão"), so no check drops it: the fact is kept as the
    model gave it, not moved to Pedro, its text not rewritten and no lives_in read from it to close her home. It
    copies the message without naming Beatriz, so it is marked a chat line (fact_checks.chat_line), reported."""
    brother = answer(
        [("Beatriz", "person"), ("Pedro", "person"), ("Belo Horizonte", "place")],
        [fact("Beatriz", "Meu irmão Pedro mora em Belo Horizonte", evidence="Meu irmão Pedro mora em Belo Horizonte")],
    )
    async with make_client(ScriptedLLM({"informed_extraction": [brother]})) as memory:
        result = await memory.write(
            agent_id, "Meu irmão Pedro mora em Belo Horizonte.", speaker_name="Beatriz", occurred_at=T1, verbose=True
        )
        assert result.success, result.error
        [stored] = await memory.get_facts(agent_id, entity="Beatriz")
        assert (stored.text, stored.attribute) == ("Meu irmão Pedro mora em Belo Horizonte", None)
        # About Beatriz, as the model said; linked to Pedro, whom it names.
        linked = await memory.get_facts(agent_id, entity="Pedro")
        assert [(f.id, f.entity_key) for f in linked] == [(stored.id, "person:beatriz")]
        assert [a.rule for a in result.adjustments] == ["chat_line"] and stored.source_context == "chat_line"


async def test_a_chat_line_is_stored_marked_and_ends_no_fact(make_client: ClientFactory, agent_id: str) -> None:
    """LoCoMo conv-30, 1.5B model: "Wow, they look great! Can't wait to see them rock the festival" (a chat line
    kept as written) closed "They're the ones performing at the festival!". A line in the speaker's own voice is
    stored as said, marked, and closes nothing."""
    show = "Gina's students are performing at the festival"
    line = "I can't wait to see them rock the festival!"
    first = answer([("Gina", "person")], [fact("Gina", show)])
    second = answer([("Gina", "person")], [fact("Gina", line, action="UPDATE")])
    llm, embedder = scripted([first, second], "UPDATE", {show: 1.0, line: 0.8})
    async with make_client(llm, embedder=embedder) as memory:
        await memory.write(agent_id, "My students are performing at the festival", speaker_name="Gina", occurred_at=T1)
        result = await memory.write(
            agent_id, "Wow, I can't wait to see them rock the festival!", speaker_name="Gina", occurred_at=T2
        )
        stored = {f.text: f.source_context for f in await memory.get_facts(agent_id, entity="Gina")}
        assert result.success, result.error
        assert stored == {show: "extracted", line: "chat_line"}
        assert ("chat_line", line) in adjusted(result)
        [safer] = [a for a in result.adjustments if a.rule == "decision_safer"]
        assert "never ends any fact" in safer.why
        await assert_memory_invariants(memory, agent_id)
