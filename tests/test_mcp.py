"""`memory-sdk mcp`: the server spawned as a subprocess (`python -m memory_sdk mcp ...`) and driven over stdio by
the `mcp` package's own client, on the test database, with answers from a scripted-LLM file and HashEmbedder."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from memory_sdk import MemoryClient
from tests.conftest import ClientFactory

mcp_client = pytest.importorskip("mcp.client", reason="the mcp extra is not installed")
from mcp.client.stdio import StdioServerParameters  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXTRACTION = {
    "entities": [{"name": "Rafael", "type": "person"}, {"name": "Recife", "type": "place"}],
    "facts": [
        {
            "subject": "Rafael",
            "text": "Rafael mora em Recife",
            "action": "NEW",
            "importance_category": "relationship_change",
            "attribute": "lives_in",
        }
    ],
    "relations": [{"source": "Rafael", "target": "Recife", "type": "lives_in"}],
    "updated_profiles": {"Rafael": "Lives in Recife."},
}


@asynccontextmanager
async def served(database_url: str, agent_id: str, tmp_path: Path, *flags: str) -> AsyncIterator[Any]:
    """An MCP client session with `memory-sdk mcp --agent agent_id` running as a subprocess."""
    script = tmp_path / "answers.json"
    script.write_text(json.dumps({"informed_extraction": [EXTRACTION]}))
    command = ["-m", "memory_sdk", "mcp", "--agent", agent_id, "--database-url", database_url, "--embedder", "hash"]
    server = StdioServerParameters(
        command=sys.executable,
        args=[*command, "--scripted-llm", str(script), *flags],
        env={"PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])},
        cwd=str(ROOT),
    )
    async with mcp_client.Client(server, read_timeout_seconds=120) as client:
        yield client


async def call(client: Any, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, f"{tool} failed: {result.content}"
    structured: dict[str, Any] = result.structured_content
    return structured


async def test_remember_then_facts_and_entity_over_stdio(
    make_client: ClientFactory, database_url: str, agent_id: str, tmp_path: Path
) -> None:
    async with served(database_url, agent_id, tmp_path) as client:
        listed = await client.list_tools()
        assert {tool.name for tool in listed.tools} == {"remember", "recall", "facts", "entity"}
        for tool in listed.tools:  # the agent is the server's: no tool lets the model pick one
            assert "agent_id" not in json.dumps(tool.input_schema), tool.name

        stored = await call(client, "remember", message="Moro em Recife", speaker="Rafael", occurred_at="2025-03-01")
        assert stored["success"] and stored["facts_added"] == ["Rafael mora em Recife"]
        known = await call(client, "facts", entity="Rafael")
        assert [fact["text"] for fact in known["facts"]] == ["Rafael mora em Recife"]
        assert known["facts"][0]["valid_from"].startswith("2025-03-01")
        person = await call(client, "entity", name="Rafael")
        assert person["entity"]["key"] == "person:rafael"
        assert person["entity"]["profile_text"] == "Lives in Recife."
        assert (await call(client, "entity", name="Nobody"))["entity"] is None

        refused = await client.call_tool("facts", {"as_of": "last tuesday"})
        assert refused.is_error and "ISO 8601" in str(refused.content)
        assert (await client.call_tool("forget", {"confirm": True})).is_error  # not offered without the flag

    async with make_client() as memory:  # what the server stored is the configured agent's
        assert [fact.text for fact in await memory.get_facts(agent_id)] == ["Rafael mora em Recife"]
        await memory.forget(agent_id)


@pytest.mark.skipif(not hasattr(MemoryClient, "search"), reason="needs MemoryClient.search (issue 12 search work)")
async def test_recall_finds_what_was_remembered(
    make_client: ClientFactory, database_url: str, agent_id: str, tmp_path: Path
) -> None:
    async with served(database_url, agent_id, tmp_path) as client:
        await call(client, "remember", message="Moro em Recife", speaker="Rafael", occurred_at="2025-03-01")
        found = await call(client, "recall", query="Onde o Rafael mora?", k=3)
        assert found["hits"][0]["text"] == "Rafael mora em Recife"
        assert found["hits"][0]["score"] > 0
    async with make_client() as memory:
        await memory.forget(agent_id)


async def test_forget_is_offered_only_with_the_flag_and_asks_for_confirmation(
    make_client: ClientFactory, database_url: str, agent_id: str, tmp_path: Path
) -> None:
    async with served(database_url, agent_id, tmp_path, "--allow-forget") as client:
        assert "forget" in {tool.name for tool in (await client.list_tools()).tools}
        await call(client, "remember", message="Moro em Recife", speaker="Rafael", occurred_at="2025-03-01")
        unconfirmed = await client.call_tool("forget", {"confirm": False})
        assert unconfirmed.is_error and "confirm=true" in str(unconfirmed.content)
        erased = await call(client, "forget", confirm=True)
        assert erased["erased"]["events"] == 1
        assert (await call(client, "facts"))["facts"] == []
    async with make_client() as memory:
        assert await memory.get_events(agent_id) == []
