"""Model output is bounded where it is parsed: names and types past their advertised caps are dropped and
reported, a date outside the years the SDK accepts is dropped and reported, a boolean is never an id."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memory_sdk.testing import ScriptedLLM
from tests.conftest import ClientFactory

pytestmark = pytest.mark.integration

AT = datetime(2025, 6, 15, 12, tzinfo=UTC)


def answer(name: str = "Ana", kind: str = "person", valid_from: str | None = None, **fact: object) -> dict[str, object]:
    return {
        "entities": [{"name": name, "type": kind}],
        "facts": [{"subject": "Ana", "text": "Ana loves jazz", "valid_from": valid_from, **fact}],
        "relations": [],
    }


@pytest.mark.parametrize(("name", "kind"), [("A" * 81, "person"), ("Ana", "t" * 31), ("Ana" * 1000, "person")])
async def test_a_name_or_type_past_its_cap_is_dropped_and_reported(
    make_client: ClientFactory, agent_id: str, name: str, kind: str
) -> None:
    async with make_client(ScriptedLLM({"informed_extraction": [answer(name, kind)]})) as memory:
        result = await memory.write(agent_id, "Ana loves jazz", "Rafael", occurred_at=AT)
        entities = [entity.name for entity in result.entities_resolved]
    assert not result.success and "entities" in (result.error or "") and "dropped as malformed" in (result.error or "")
    assert all(len(entity) <= 80 for entity in entities)


@pytest.mark.parametrize("when", ["0001-01-01", "2500-01-01"])
async def test_a_model_date_outside_the_accepted_years_is_dropped_and_reported(
    make_client: ClientFactory, agent_id: str, when: str
) -> None:
    async with make_client(ScriptedLLM({"informed_extraction": [answer(valid_from=when)]})) as memory:
        result = await memory.write(agent_id, "Ana loves jazz", "Rafael", occurred_at=AT)
        [stored] = await memory.get_facts(agent_id)
    assert result.success, result.error
    assert stored.valid_from == AT
    [adjustment] = result.adjustments
    assert adjustment.rule == "date" and adjustment.before == when and "outside 1900-2200" in adjustment.why


async def test_a_date_inside_the_accepted_years_stands(make_client: ClientFactory, agent_id: str) -> None:
    async with make_client(ScriptedLLM({"informed_extraction": [answer(valid_from="1990-05-01")]})) as memory:
        result = await memory.write(agent_id, "Ana loves jazz", "Rafael", occurred_at=AT)
        [stored] = await memory.get_facts(agent_id)
    assert result.success and result.adjustments == []
    assert stored.valid_from == datetime(1990, 5, 1, tzinfo=UTC)


async def test_a_boolean_target_deletes_nothing(make_client: ClientFactory, agent_id: str) -> None:
    first = answer()
    retraction = answer(action="DELETE", target=True)
    retraction["facts"][0]["text"] = "Ana no longer loves jazz"  # type: ignore[index]
    llm = ScriptedLLM({"informed_extraction": [first, retraction], "reconciliation": [{"action": "ADD"}]})
    async with make_client(llm) as memory:
        await memory.write(agent_id, "Ana loves jazz", "Rafael", occurred_at=AT)
        result = await memory.write(agent_id, "Ana no longer loves jazz", "Rafael", occurred_at=AT)
        current = [fact.text for fact in await memory.get_facts(agent_id)]
    assert "Ana loves jazz" in current
    assert "a boolean is not an id" in (result.error or "")
