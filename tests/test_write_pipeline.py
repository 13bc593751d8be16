"""End-to-end write() against the real embedded PostgreSQL + pgvector, with the scripted LLM."""

from __future__ import annotations

from datetime import UTC, datetime

from memory_sdk import MemoryConfig
from memory_sdk.errors import ProviderError
from memory_sdk.testing import ScriptedLLM
from tests.conftest import ClientFactory
from tests.scripts import CLARA_EXTRACTION, CLARA_MESSAGE, extraction

WHEN = datetime(2025, 6, 15, 12, 0, tzinfo=UTC)


async def test_clara_message_yields_four_entities_three_facts_three_relationships(
    make_client: ClientFactory, agent_id: str
) -> None:
    llm = ScriptedLLM({"informed_extraction": [CLARA_EXTRACTION]})
    async with make_client(llm) as memory:
        result = await memory.write(agent_id, CLARA_MESSAGE, speaker_name="Rafael", occurred_at=WHEN, verbose=True)

        assert result.success, result.error
        assert result.extraction_path == "informed"
        assert result.llm_calls == 1
        assert sorted(e.key for e in result.entities_resolved) == [
            "organization:orion_tech",
            "organization:vertix",
            "person:clara_rezende",
            "person:thiago_nogueira",
        ]
        assert [f.text for f in result.facts_added] == [
            "Clara Rezende left Vertix",
            "Clara Rezende joined Orion Tech as head of engineering",
            "Thiago Nogueira personally hired Clara Rezende",
        ]
        by_text = {f.text: f for f in result.facts_added}
        assert by_text["Clara Rezende left Vertix"].importance == 0.90
        assert by_text["Thiago Nogueira personally hired Clara Rezende"].entity_key == "person:thiago_nogueira"
        assert all(f.source_event_id == result.event_id and f.valid_from == WHEN for f in result.facts_added)

        rels = {(r.source_key, r.rel_type, r.target_key): r for r in await memory.get_relationships(agent_id)}
        assert set(rels) == {
            ("person:clara_rezende", "former_employee_of", "organization:vertix"),
            ("person:clara_rezende", "works_at", "organization:orion_tech"),
            ("person:thiago_nogueira", "hired", "person:clara_rezende"),
        }
        works_at = rels[("person:clara_rezende", "works_at", "organization:orion_tech")]
        assert works_at.evidence_fact_id == by_text["Clara Rezende joined Orion Tech as head of engineering"].id
        assert works_at.strength == 0.8

        # Fact-entity links: the Orion Tech fact is found from Orion Tech too.
        orion_facts = await memory.get_facts(agent_id, entity="Orion Tech")
        assert [f.text for f in orion_facts] == ["Clara Rezende joined Orion Tech as head of engineering"]
        clara = await memory.get_entity(agent_id, "clara rezende")
        assert clara is not None and clara.profile_text is not None and "Orion Tech" in clara.profile_text
        assert result.tokens_used.total_tokens > 0
        assert result.pipeline is not None
        assert [s.name for s in result.pipeline.steps] == [
            "event_log",
            "alias_lookup",
            "pre_retrieval",
            "extraction",
            "post_extraction",
            "entity_resolution",
            "reconciliation",
            "upsert",
        ]
        assert result.pipeline.step("extraction").llm_calls[0].purpose == "informed_extraction"


async def test_event_survives_extraction_exception(make_client: ClientFactory, agent_id: str) -> None:
    llm = ScriptedLLM(
        {
            "informed_extraction": [ProviderError("model down")],
            "entity_scan": [ProviderError("still down")],
        }
    )
    async with make_client(llm) as memory:
        result = await memory.write(agent_id, "Moro em Curitiba", speaker_name="Rafael", verbose=True)
        assert not result.success
        assert result.extraction_path == "failed"
        assert result.error is not None and "extraction failed" in result.error
        assert result.event_id is not None
        events = await memory.get_events(agent_id)
        assert [e.content for e in events] == ["Moro em Curitiba"]
        assert await memory.get_facts(agent_id) == []
        assert result.pipeline is not None and result.pipeline.step("extraction").status == "failed"


async def test_second_mention_is_found_by_alias_lookup_without_new_entity(
    make_client: ClientFactory, agent_id: str
) -> None:
    llm = ScriptedLLM(
        {
            "informed_extraction": [
                extraction(("Ana", "Ana loves jazz")),
                extraction(("Ana", "Ana plays the piano")),
            ]
        }
    )
    async with make_client(llm) as memory:
        await memory.write(agent_id, "Ana loves jazz", speaker_name="Rafael")
        second = await memory.write(agent_id, "ANA plays the piano", speaker_name="Rafael", verbose=True)
        assert second.pipeline is not None
        assert second.pipeline.step("alias_lookup").data["matched"] == {"person:ana": "ana"}
        assert "Ana loves jazz" in second.pipeline.step("pre_retrieval").data["items_sent"][0]["text"]
        [ana] = second.entities_resolved
        assert ana.phase == "alias" and not ana.created
        prompt = llm.requests_for("informed_extraction")[1].messages[1]["content"]
        assert "Ana loves jazz" in prompt


async def test_agents_share_nothing(make_client: ClientFactory, agent_id: str) -> None:
    other = agent_id + "-other"
    llm = ScriptedLLM(
        {"informed_extraction": [extraction(("Ana", "Ana lives in Porto")), extraction(("Ana", "Ana lives in Lima"))]}
    )
    async with make_client(llm) as memory:
        await memory.write(agent_id, "Ana lives in Porto", speaker_name="Rafael")
        second = await memory.write(other, "Ana lives in Lima", speaker_name="Rafael", verbose=True)
        assert second.entities_resolved[0].created  # same name, other tenant: a new entity
        assert second.pipeline is not None and second.pipeline.step("alias_lookup").data["matched"] == {}
        assert [f.text for f in await memory.get_facts(agent_id)] == ["Ana lives in Porto"]
        assert [f.text for f in await memory.get_facts(other)] == ["Ana lives in Lima"]
        assert len(await memory.get_events(agent_id)) == 1


async def test_config_override_disables_informed_path_for_one_call(make_client: ClientFactory, agent_id: str) -> None:
    llm = ScriptedLLM(
        {
            "entity_scan": [{"entities": [{"name": "Ana", "type": "person"}]}],
            "fact_extraction": [{"facts": [{"subject": "Ana", "text": "Ana loves jazz"}]}],
            "relation_extraction": [{"relations": []}],
        }
    )
    async with make_client(llm, config=MemoryConfig()) as memory:
        result = await memory.write(
            agent_id, "Ana loves jazz", speaker_name="Rafael", config_overrides={"enable_informed_extraction": False}
        )
        assert result.extraction_path == "blind"
        assert [f.text for f in result.facts_added] == ["Ana loves jazz"]
        assert memory.config.enable_informed_extraction  # the client's config is untouched
