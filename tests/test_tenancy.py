"""Row-level security, the second tenancy wall: a query that forgets its agent_id predicate sees only its tenant."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from sqlalchemy import text

from memory_sdk.errors import StorageError
from memory_sdk.testing import ScriptedLLM
from tests.conftest import ClientFactory
from tests.scripts import extraction


async def test_query_without_agent_predicate_sees_only_its_tenant(make_client: ClientFactory, agent_id: str) -> None:
    other = agent_id + "-other"
    llm = ScriptedLLM(
        {"informed_extraction": [extraction(("Ana", "Ana loves jazz")), extraction(("Bia", "Bia loves rock"))]}
    )
    async with make_client(llm) as memory:
        await memory.write(agent_id, "Ana loves jazz", speaker_name="Rafael")
        await memory.write(other, "Bia loves rock", speaker_name="Rafael")
        async with memory.database.transaction(agent_id) as session:
            # Deliberately no WHERE agent_id = ...: the policy is what filters.
            texts = (await session.execute(text("SELECT fact_text FROM memory_facts"))).scalars().all()
            events = (await session.execute(text("SELECT count(*) FROM memory_events"))).scalar_one()
        assert texts == ["Ana loves jazz"]
        assert events == 1


async def test_tenant_transaction_cannot_write_another_tenants_rows(make_client: ClientFactory, agent_id: str) -> None:
    async with make_client(ScriptedLLM()) as memory:
        with pytest.raises(StorageError, match="row-level security"):
            async with memory.database.transaction(agent_id) as session:
                await session.execute(
                    text(
                        "INSERT INTO memory_events (id, agent_id, speaker, content, occurred_at) "
                        "VALUES (:id, 'somebody-else', 'x', 'y', :at)"
                    ),
                    {"id": uuid.uuid4(), "at": datetime.now(UTC)},
                )


async def test_transaction_without_tenant_setting_sees_nothing_as_tenant_role(
    make_client: ClientFactory, agent_id: str
) -> None:
    llm = ScriptedLLM({"informed_extraction": [extraction(("Ana", "Ana loves jazz"))]})
    async with make_client(llm) as memory:
        await memory.write(agent_id, "Ana loves jazz", speaker_name="Rafael")
        async with memory.database.transaction() as session:
            await session.execute(text("SET LOCAL ROLE memory_sdk_tenant"))  # as an app role would connect
            seen = (await session.execute(text("SELECT count(*) FROM memory_facts"))).scalar_one()
        assert seen == 0  # no agent set: the forgotten predicate returns nothing, not everything
