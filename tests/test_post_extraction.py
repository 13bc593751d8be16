"""Post-extraction guards that need no database."""

from __future__ import annotations

from memory_sdk.llm.schemas import ExtractedEntity, ExtractedFact
from memory_sdk.pipeline.post_extraction import normalise_rel_type
from memory_sdk.pipeline.state import Extraction


def test_relation_types_are_snake_case_with_synonyms_folded() -> None:
    assert normalise_rel_type("Works For") == "works_at"
    assert normalise_rel_type("mora em") == "lives_in"
    assert normalise_rel_type("married_to") == "spouse_of"
    assert normalise_rel_type("Mentored By") == "mentored_by"


def test_job_titles_and_dates_listed_as_entities_are_dropped_unless_used() -> None:
    from memory_sdk.pipeline.post_extraction import canonicalise

    extraction = Extraction(
        entities=[
            ExtractedEntity(name="Rafael", type="person"),
            ExtractedEntity(name="engenheiro de dados", type="job_title"),
            ExtractedEntity(name="2025-06-14", type="date"),
            ExtractedEntity(name="CEO", type="role"),
        ],
        facts=[
            ExtractedFact(subject="Rafael", text="Rafael trabalha como engenheiro de dados"),
            ExtractedFact(subject="CEO", text="CEO is a demanding role"),
        ],
    )
    names = [e.name for e in canonicalise(extraction, "Rafael").entities]
    assert names == ["Rafael", "CEO"]


def test_aliases_the_message_never_used_are_dropped() -> None:
    from memory_sdk.pipeline.post_extraction import drop_unsaid_aliases

    extraction = Extraction(
        entities=[
            ExtractedEntity(name="Guilherme Maturana", type="person", aliases=["Guili", "Guilherme M. M.", "Gui"]),
            ExtractedEntity(name="Curitiba", type="place", aliases=["Curitiba, PR"]),
            ExtractedEntity(name="Helena", type="person", aliases=["my mom"]),
        ]
    )
    kept = drop_unsaid_aliases(extraction, ["Meu amigo GUILI (Guilherme Maturana) e my mom Helena, em Curitiba."])
    assert [e.aliases for e in kept.entities] == [["Guili"], [], ["my mom"]]


def test_repeated_relations_in_one_message_collapse_to_one_edge() -> None:
    from memory_sdk.llm.schemas import ExtractedRelation
    from memory_sdk.pipeline.post_extraction import canonicalise

    relation = ExtractedRelation(source="Julia", target="Lisbon", type="lives_in")
    extraction = Extraction(
        entities=[ExtractedEntity(name="Julia", type="person"), ExtractedEntity(name="Lisbon", type="place")],
        relations=[relation, relation, ExtractedRelation(source="julia", target="Lisbon", type="Lives In")],
    )
    assert canonicalise(extraction, "Rafael").relations == [relation]
