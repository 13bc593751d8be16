"""Entities that hold up under a small model's answers (issue 13): possessives and relatives of anyone, the
conversation's participants and their nicknames, merging, grounded names, possessions, typed mirror facts.

The scripted answers are shaped like what a 1.5B model answered on a two-speaker English chat."""

from __future__ import annotations

from typing import Any

import pytest

from memory_sdk.errors import InvalidInputError
from memory_sdk.llm.schemas import ExtractedEntity, ExtractedFact, ExtractedRelation
from memory_sdk.pipeline.guards import ground_entities, mirror_allowed
from memory_sdk.pipeline.participants import is_nickname, nickname_of, participants_of, vocative_nicknames
from memory_sdk.pipeline.post_extraction import canonicalise, drop_possessed
from memory_sdk.pipeline.relatives import Relative, possessed_thing, relative_of
from memory_sdk.pipeline.resolution import prefix_match
from memory_sdk.pipeline.state import Extraction
from memory_sdk.testing import ScriptedLLM
from tests.conftest import ClientFactory
from tests.invariants import assert_memory_invariants


def answer(
    *entities: tuple[str, str] | tuple[str, str, list[str]],
    facts: tuple[tuple[str, str], ...] = (),
    relations: tuple[tuple[str, str, str], ...] = (),
) -> dict[str, Any]:
    """An informed-extraction answer: entities (name, type[, aliases]), facts (subject, text), relations."""
    return {
        "entities": [{"name": e[0], "type": e[1], "aliases": e[2] if len(e) > 2 else []} for e in entities],
        "facts": [{"subject": s, "text": t, "confidence": 0.95} for s, t in facts],
        "relations": [{"source": s, "type": r, "target": t} for s, r, t in relations],
    }


def keys(result: Any) -> dict[str, str]:
    return {e.name: e.key for e in result.entities_resolved}


# --- 1. possessives and relatives of anyone ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("Melanie's mom", Relative("Melanie", "mom")),
        ("Melanie’s Dad", Relative("Melanie", "dad")),
        ("a irmã da Ana", Relative("Ana", "sister")),
        ("mãe do Rafael", Relative("Rafael", "mom")),
        ("the sister of Ana", Relative("Ana", "sister")),
        ("a friend of mine", Relative("Caroline", "friend")),
        ("Ana's sister Julia", Relative("Ana", "sister", "Julia")),
        ("my mom", Relative("Caroline", "mom")),
        ("minha irmã", Relative("Caroline", "sister")),
        ("my kids", Relative("Caroline", "children")),
        ("Caroline's brother", Relative("Caroline", "brother")),
        ("Melanie", None),
        ("Rafael's favourite", None),
        ("my violin", None),
    ],
)
def test_relative_of_reads_possessives_of_anyone(name: str, expected: Relative | None) -> None:
    assert relative_of(name, "Caroline") == expected


def test_prefix_rule_compares_whole_names_never_a_possessive() -> None:
    assert prefix_match("Caroline's mom", [("caroline", "person:caroline")]) is None  # issue 13's collapse
    assert prefix_match("Carol", [("caroline s mom", "person:caroline.mom")]) is None
    assert prefix_match("Carol Souza", [("carolina souza", "person:a"), ("carolina lima", "person:b")]) == "person:a"
    assert prefix_match("Carol", [("carolina souza", "person:a")]) == "person:a"


async def test_possessives_of_the_other_speaker_become_her_relatives(make_client: ClientFactory, agent_id: str) -> None:
    message = "Melanie's mom and Melanie's dad came, and a irmã da Melanie too. Ana's sister Julia stayed home."
    llm = ScriptedLLM(
        {
            "informed_extraction": [
                answer(("Melanie", "person")),
                answer(
                    ("Melanie's mom", "person"),
                    ("Melanie's dad", "person"),
                    ("a irmã da Melanie", "person"),
                    ("Ana's sister Julia", "person"),
                    facts=(("Melanie's mom", "Melanie's mom came to the party"),),
                ),
            ]
        }
    )
    async with make_client(llm) as memory:
        await memory.write(agent_id, "Melanie is here", speaker_name="Caroline")
        # A mixed message reads one language's kinship words: the caller says which ("Melanie's mom" is the
        # pipeline's own canonical form, read in every language).
        result = await memory.write(agent_id, message, speaker_name="Caroline", verbose=True, language="pt")
        assert result.success, result.error
        resolved = keys(result)
        assert resolved["Melanie's mom"] == "person:melanie.mom"
        assert resolved["Melanie's dad"] == "person:melanie.dad"
        assert resolved["Melanie's sister"] == "person:melanie.sister"
        assert resolved["Julia"] == "person:julia"
        assert resolved["Melanie"] == "person:melanie"
        melanie = await memory.get_entity(agent_id, "Melanie")
        assert melanie is not None and not any("mom" in alias for alias in melanie.aliases)
        julia = await memory.get_entity(agent_id, "Ana's sister")
        assert julia is not None and julia.key == "person:julia"
        # read by any form of the relative, not only the canonical one the write registered
        for name in ("a irmã da Melanie", "the mother of Melanie", "Melanie's mother"):
            found = await memory.get_entity(agent_id, name)
            assert found is not None and found.key in ("person:melanie.sister", "person:melanie.mom"), name
        [came] = await memory.get_facts(agent_id, entity="Melanie's mother")
        assert came.text == "Melanie's mom came to the party"
        edges = {(e.source_key, e.rel_type, e.target_key) for e in await memory.get_relationships(agent_id)}
        assert ("person:melanie.mom", "parent_of", "person:melanie") in edges  # the fact names both
        assert result.pipeline is not None
        assert result.pipeline.step("post_extraction").data["mirror_facts"] == ["Julia sibling of Ana"]
        await assert_memory_invariants(memory, agent_id)


# --- 2. participants, nicknames and merges -----------------------------------------------------------------


def test_participants_are_the_speaker_the_declared_and_the_chat_labels() -> None:
    recent = ["Caroline: Hey Mel!", "Melanie: Hi Caroline!", "just a line", "caroline: lower case is no label"]
    assert participants_of(recent, ["Guilherme"], "Caroline") == ["Caroline", "Guilherme", "Melanie"]


@pytest.mark.parametrize(
    ("short", "full", "expected"),
    [
        ("Mel", "Melanie", True),
        ("Guili", "Guilherme", True),
        ("Gabi", "Gabriela Souza", True),
        ("Jo", "João", False),  # under 3 letters
        ("Bob", "Robert", False),  # no shared prefix
        ("Melanie", "Mel", False),  # longer than the name
        ("Melody", "Melanie", False),  # adds too much of its own
    ],
)
def test_nickname_rule(short: str, full: str, expected: bool) -> None:
    assert is_nickname(short, full) is expected


def test_a_nickname_fitting_two_participants_is_nobody() -> None:
    assert nickname_of("Mel", ["Caroline", "Melanie"]) == "Melanie"
    assert nickname_of("Mel", ["Melanie", "Melissa"]) is None


async def test_vocative_of_the_other_speaker_resolves_to_her(make_client: ClientFactory, agent_id: str) -> None:
    llm = ScriptedLLM({"informed_extraction": [answer(("Mel", "person"), facts=(("Mel", "Mel adopted a dog"),))]})
    async with make_client(llm) as memory:
        result = await memory.write(
            agent_id, "Hey Mel! I heard Mel adopted a dog", speaker_name="Caroline", recent_messages=["Melanie: hi!"]
        )
        assert result.success, result.error
        assert [(e.name, e.phase, e.key) for e in result.entities_resolved] == [
            ("Mel", "participant", "person:melanie")
        ]
        assert [f.entity_key for f in result.facts_added] == ["person:melanie"]
        mel = await memory.get_entity(agent_id, "Mel")
        assert mel is not None and mel.key == "person:melanie"


def test_vocatives_are_nicknames_only_in_address() -> None:
    people = ["Caroline", "Melanie", "Guilherme"]
    for message, expected in [
        ("That's great, Mel!", {"Mel": "Melanie"}),
        ("Hey Mel! How are you?", {"Mel": "Melanie"}),
        ("Mel, are you there?", {"Mel": "Melanie"}),
        ("Valeu, Guili.", {"Guili": "Guilherme"}),
        ("Melt the butter", {}),  # no address
        ("I saw Mel yesterday", {}),  # a mention, left to the model and resolution
        ("Hi Caroline!", {}),  # the speaker's own name, and no nickname
    ]:
        assert vocative_nicknames(message, people, "Caroline") == expected, message


async def test_a_vocative_nickname_becomes_the_participants_alias_when_the_model_names_her_in_full(
    make_client: ClientFactory, agent_id: str
) -> None:
    """Truth benchmark, melanie_caroline (1.5B model): "That's great, Mel!" was answered with "Melanie", so "Mel"
    was never registered."""
    llm = ScriptedLLM({"informed_extraction": [answer(("Melanie", "person"))]})
    async with make_client(llm) as memory:
        result = await memory.write(
            agent_id,
            "That's great, Mel! I went to a support group yesterday.",
            speaker_name="Caroline",
            recent_messages=["Melanie: Hi Caroline!"],
            verbose=True,
        )
        assert result.success, result.error
        mel = await memory.get_entity(agent_id, "Mel")
        assert mel is not None and mel.key == "person:melanie"
        assert result.pipeline is not None
        assert result.pipeline.step("post_extraction").data["nicknames_aliased"] == {"Mel": "Melanie"}


async def test_participants_argument_resolves_a_diminutive(make_client: ClientFactory, agent_id: str) -> None:
    llm = ScriptedLLM({"informed_extraction": [answer(("Guili", "person"))]})
    async with make_client(llm) as memory:
        result = await memory.write(agent_id, "Valeu, Guili!", speaker_name="Rafael", participants=["Guilherme"])
        assert keys(result) == {"Guili": "person:guilherme"}
        with pytest.raises(InvalidInputError, match="participants"):
            await memory.write(agent_id, "oi", speaker_name="Rafael", participants="Guilherme")


async def test_nickname_entity_is_merged_when_the_full_name_speaks(make_client: ClientFactory, agent_id: str) -> None:
    llm = ScriptedLLM(
        {
            "informed_extraction": [
                answer(("Mel", "person"), facts=(("Mel", "Mel went to the support group"),)),
                answer(("Melanie", "person"), facts=(("Melanie", "Melanie paints sunsets"),)),
                answer(("Melanie", "person"), facts=(("Melanie", "Melanie paints sunsets"),)),
            ]
        }
    )
    async with make_client(llm) as memory:
        first = await memory.write(agent_id, "Hey Mel! Mel went to the support group", speaker_name="Caroline")
        assert keys(first) == {"Mel": "person:mel"}  # nobody called Melanie has spoken yet
        dry = await memory.write(agent_id, "I paint sunsets", speaker_name="Melanie", dry_run=True, verbose=True)
        assert dry.pipeline is not None
        # Done in the dry run's transaction and rolled back with it.
        assert dry.pipeline.step("entity_resolution").data["merged"][0]["moved"]["facts"] == 1
        assert (await memory.get_entity(agent_id, "person:mel")) is not None
        later = await memory.write(
            agent_id, "I paint sunsets", speaker_name="Melanie", recent_messages=["Caroline: Hey Mel!"], verbose=True
        )
        assert later.success, later.error
        assert later.pipeline is not None
        [merge] = later.pipeline.step("entity_resolution").data["merged"]
        assert (merge["from"], merge["into"], merge["moved"]["facts"]) == ("person:mel", "person:melanie", 1)
        facts = await memory.get_facts(agent_id, entity="Mel")
        assert sorted(f.text for f in facts) == ["Mel went to the support group", "Melanie paints sunsets"]
        assert {f.entity_key for f in facts} == {"person:melanie"}
        tombstone = await memory.get_entity(agent_id, "person:mel")  # the merge is recorded as an alias
        assert tombstone is not None and tombstone.key == "person:melanie"
        await assert_memory_invariants(memory, agent_id)


async def test_merge_entities_moves_everything_and_closes_what_would_collide(
    make_client: ClientFactory, agent_id: str
) -> None:
    llm = ScriptedLLM(
        {
            "informed_extraction": [
                {
                    **answer(("Mel", "person"), ("Porto", "place")),
                    "facts": [
                        {"subject": "Mel", "text": "Mel lives in Porto", "attribute": "lives_in", "confidence": 0.95},
                        {"subject": "Mel", "text": "Melanie and Mel like jazz", "confidence": 0.95},
                    ],
                    "relations": [{"source": "Mel", "target": "Porto", "type": "lives_in"}],
                },
                {
                    **answer(("Melanie", "person"), ("Lisbon", "place")),
                    "facts": [
                        {"subject": "Melanie", "text": "Melanie lives in Lisbon", "attribute": "lives_in"},
                        {"subject": "Melanie", "text": "Melanie and Mel like jazz", "confidence": 0.95},
                    ],
                },
            ]
        }
    )
    async with make_client(llm) as memory:
        await memory.write(agent_id, "Mel lives in Porto. Melanie and Mel like jazz", speaker_name="Rafael")
        await memory.write(agent_id, "Melanie lives in Lisbon now. Melanie and Mel like jazz", speaker_name="Rafael")
        moved = await memory.merge_entities(agent_id, "person:mel", "person:melanie")
        assert moved["facts"] == 2 and moved["aliases"] >= 1 and moved["relationships"] == 1
        assert moved["facts_closed"] == 2  # the older lives_in, and Mel's copy of the jazz fact
        current = await memory.get_facts(agent_id, entity="Melanie")
        assert sorted(f.text for f in current) == ["Melanie and Mel like jazz", "Melanie lives in Lisbon"]
        assert await memory.get_entity(agent_id, "Mel") is not None
        await assert_memory_invariants(memory, agent_id)
        with pytest.raises(InvalidInputError, match="no entity"):
            await memory.merge_entities(agent_id, "person:mel", "person:melanie")


# --- 3. grounded entities and possessions ------------------------------------------------------------------


def test_entities_named_nowhere_are_dropped_with_their_facts() -> None:
    extraction = Extraction(
        entities=[ExtractedEntity(name=n, type="person") for n in ("Ana Souza", "Melany", "Caroline", "Mel's mom")],
        facts=[ExtractedFact(subject="Ana Souza", text="Ana Souza is a person")],
        relations=[ExtractedRelation(source="Ana Souza", target="Caroline", type="friend_of")],
    )
    texts = ["Caroline: my mom says hi", "Hey Mel! How is your mom?", "Melanie paints"]
    grounded, dropped = ground_entities(extraction, texts, "Caroline")
    assert [e.name for e in grounded.entities] == ["Melany", "Caroline", "Mel's mom"]  # a misspelling is found
    assert [d["name"] for d in dropped] == ["Ana Souza"]
    assert grounded.facts == [] and grounded.relations == []


def test_relatives_the_message_does_not_name_are_dropped_though_their_owner_is_named() -> None:
    """Truth benchmark (1.5B model): "My mom came to stay with us last week" gave 17 relatives of Melanie, each found
    by her name alone; nine became her aliases and four new entities."""
    names = ("Melanie's mom", "Melanie's niece", "Melanie's cousin", "Melanie's great-great-grandchild", "Ana's dad")
    extraction = Extraction(entities=[ExtractedEntity(name=n, type="person") for n in names], facts=[], relations=[])
    texts = ["Proud of you! My mom came to stay with us last week.", "Caroline: Ana said hi"]
    grounded, dropped = ground_entities(extraction, texts, "Melanie")
    assert [e.name for e in grounded.entities] == ["Melanie's mom"]
    assert [d["name"] for d in dropped] == list(names[1:])


def test_possessions_are_no_entities_and_their_facts_are_the_speakers() -> None:
    assert possessed_thing("my violin") and possessed_thing("minha bicicleta")
    assert not possessed_thing("my kids") and not possessed_thing("Melanie")
    extraction = Extraction(
        entities=[ExtractedEntity(name="my violin", type="product"), ExtractedEntity(name="Melanie", type="person")],
        facts=[ExtractedFact(subject="my violin", text="Melanie's violin is old")],
        relations=[ExtractedRelation(source="Melanie", target="my violin", type="hired")],
    )
    kept, dropped = drop_possessed(extraction, "Melanie")
    assert dropped == ["my violin"]
    assert [e.name for e in kept.entities] == ["Melanie"]
    assert [f.subject for f in kept.facts] == ["Melanie"]
    assert kept.relations == []


async def test_prompt_example_name_never_becomes_a_person(make_client: ClientFactory, agent_id: str) -> None:
    llm = ScriptedLLM(
        {
            "informed_extraction": [
                answer(
                    ("Ana Souza", "person", ["Aninha"]),
                    ("my violin", "product"),
                    ("Melanie", "person"),
                    facts=(("Melanie", "Melanie plays the violin"), ("Ana Souza", "Ana Souza likes music")),
                    relations=(("Melanie", "hired", "my violin"),),
                )
            ]
        }
    )
    async with make_client(llm) as memory:
        result = await memory.write(agent_id, "I play my violin every day", speaker_name="Melanie", verbose=True)
        assert keys(result) == {"Melanie": "person:melanie"}
        assert [f.text for f in result.facts_added] == ["Melanie plays the violin"]
        # Each drop is reported: the unnamed person (with her fact and alias), the speaker's violin as no entity.
        assert [(a.rule, a.item) for a in result.adjustments] == [
            ("alias_not_said", "Aninha"),
            ("possession", "my violin"),
            ("entity_not_named", "Ana Souza"),
        ]
        assert result.success, result.error  # a guard doing its job is no failure


# --- 6. mirror facts only between entities of fitting types -------------------------------------------------


@pytest.mark.parametrize(
    ("relation", "source", "target", "allowed"),
    [
        ("spouse_of", "person", "concept", False),  # "Melanie spouse of adoption"
        ("spouse_of", "person", "person", True),
        ("lives_in", "person", "place", True),
        ("lives_in", "person", "person", False),
        ("works_at", "person", "organization", True),
        ("works_at", "person", "place", False),
        ("pet_of", "pet", "person", True),
        ("likes", "person", "concept", False),
        ("conversation", "person", "person", False),  # "Gina conversation Jon" (LoCoMo, 1.5B model)
        ("volunteers_at", "person", "organization", True),
        ("owns", "person", "product", True),
    ],
)
def test_mirror_allowed_by_relation_and_types(relation: str, source: str, target: str, allowed: bool) -> None:
    assert mirror_allowed(relation, source, target) is allowed


async def test_junk_relation_makes_no_mirror_fact(make_client: ClientFactory, agent_id: str) -> None:
    llm = ScriptedLLM(
        {
            "informed_extraction": [
                answer(
                    ("Melanie", "person"),
                    ("adoption", "concept"),
                    relations=(("Melanie", "spouse_of", "adoption"),),
                )
            ]
        }
    )
    async with make_client(llm) as memory:
        result = await memory.write(agent_id, "I am thinking about adoption", speaker_name="Melanie", verbose=True)
        assert result.facts_added == []
        assert result.pipeline is not None
        data = result.pipeline.step("post_extraction").data
        assert data["mirror_facts"] == []
        assert data["mirror_facts_refused"] == ["Melanie (person) spouse_of adoption (concept)"]


def test_kin_relations_come_with_relatives() -> None:
    extraction = Extraction(entities=[ExtractedEntity(name="Melanie's mom", type="person")])
    canonical = canonicalise(extraction, "Caroline")
    assert [(r.source, r.type, r.target) for r in canonical.relations] == [("Melanie's mom", "parent_of", "Melanie")]
    assert {e.name: e.type for e in canonical.entities} == {"Melanie's mom": "person", "Melanie": "person"}
