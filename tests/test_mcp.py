"""`memory-sdk mcp`: the server spawned as a subprocess (`python -m memory_sdk mcp ...`) and driven over stdio by
the `mcp` package's own client, on the test database, with answers from a scripted-LLM file and HashEmbedder; and
build_server() driven in-process by the same client (its in-memory transport) where a double must fail on cue."""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import memory_sdk
from memory_sdk.errors import ProviderError
from memory_sdk.llm.protocols import PURPOSES
from memory_sdk.results import PipelineTrace, TraceStep, WriteResult
from memory_sdk.testing import HashEmbedder, ScriptedLLM
from tests.conftest import ClientFactory

mcp_client = pytest.importorskip("mcp.client", reason="the mcp extra is not installed")
from mcp.client.stdio import StdioServerParameters  # noqa: E402

from memory_sdk.mcp_server import build_server, safe_reason, write_failure  # noqa: E402

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


# Every tool a server without --allow-forget lists.
TOOLS = {"recall", "facts", "entity", "fact_history", "remember", "correct_fact", "forget_fact"}
# What a provider failure may carry that a tool error must not: its URL, a key, the user's message.
PROVIDER_URL = "https://llm.internal.example:8443/v1/chat/completions"
API_KEY = "sk-test-0123456789abcdef"
PRIVATE_MESSAGE = "Meu CPF é 123.456.789-00 e moro em Recife"


@asynccontextmanager
async def served(
    database_url: str, agent_id: str, tmp_path: Path, *flags: str, scripted: bool = True
) -> AsyncIterator[Any]:
    """An MCP client session with `memory-sdk mcp --agent agent_id` running as a subprocess; `scripted=False`
    starts it with no model configured at all (the test environment has no OPENAI_API_KEY)."""
    script = tmp_path / "answers.json"
    script.write_text(json.dumps({"informed_extraction": [EXTRACTION]}))
    command = ["-m", "memory_sdk", "mcp", "--agent", agent_id, "--database-url", database_url, "--embedder", "hash"]
    model = ["--scripted-llm", str(script)] if scripted else []
    server = StdioServerParameters(
        command=sys.executable,
        args=[*command, *model, *flags],
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
        assert {tool.name for tool in listed.tools} == TOOLS
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


async def test_without_a_model_the_server_starts_reads_work_and_remember_says_why(
    make_client: ClientFactory, database_url: str, agent_id: str, tmp_path: Path
) -> None:
    async with make_client(ScriptedLLM({"informed_extraction": [EXTRACTION]})) as memory:
        await memory.write(agent_id, "Moro em Recife", "Rafael", occurred_at=_moment("2025-03-01"))
    async with served(database_url, agent_id, tmp_path, scripted=False) as client:
        assert client.server_info.version == memory_sdk.__version__
        assert {tool.name for tool in (await client.list_tools()).tools} == TOOLS
        known = await call(client, "facts", entity="Rafael")
        assert [fact["text"] for fact in known["facts"]] == ["Rafael mora em Recife"]
        found = await call(client, "recall", query="Onde o Rafael mora?", k=3)
        assert found["hits"][0]["text"] == "Rafael mora em Recife"

        refused = await client.call_tool("remember", {"message": "Moro em Porto", "speaker": "Rafael"})
        assert refused.is_error
        said = _text(refused)
        assert "ProviderNotConfigured" in said and "OPENAI_API_KEY" in said
    async with make_client() as memory:  # the refused write stored nothing
        assert len(await memory.get_events(agent_id)) == 1
        await memory.forget(agent_id)


async def test_an_unreachable_model_is_a_tool_error_with_the_type_and_not_its_url(
    make_client: ClientFactory, database_url: str, agent_id: str, tmp_path: Path
) -> None:
    with socket.socket() as probe:  # a port nothing listens on: the real OpenAI client fails to connect
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    flags = ("--base-url", f"http://127.0.0.1:{port}/v1", "--model", "gpt-4o-mini")
    async with served(database_url, agent_id, tmp_path, *flags, scripted=False) as client:
        failed = await client.call_tool("remember", {"message": PRIVATE_MESSAGE, "speaker": "Rafael"})
        assert failed.is_error
        said = _text(failed)
        assert "ProviderError" in said
        for secret in ("http://", "127.0.0.1", str(port), PRIVATE_MESSAGE):
            assert secret not in said, (secret, said)
    async with make_client() as memory:
        await memory.forget(agent_id)


async def test_every_tool_and_argument_has_a_clean_description(make_client: ClientFactory, agent_id: str) -> None:
    async with make_client() as memory, mcp_client.Client(build_server(memory, agent_id, allow_forget=True)) as client:
        assert client.server_info.version == memory_sdk.__version__
        tools = (await client.list_tools()).tools
        assert {tool.name for tool in tools} == {*TOOLS, "forget"}
        for tool in tools:
            assert tool.description, tool.name
            assert tool.description == tool.description.strip(), tool.name
            assert all(not line.startswith((" ", "\t")) for line in tool.description.splitlines()), tool.name
            for name, argument in tool.input_schema["properties"].items():
                description = argument.get("description", "")
                assert description and description == description.strip(), f"{tool.name}.{name}"
        hints = {tool.name: tool.annotations for tool in tools}
        assert hints["recall"].read_only_hint and hints["facts"].read_only_hint
        assert hints["forget"].destructive_hint and hints["forget_fact"].destructive_hint


async def test_a_failed_remember_is_a_tool_error_with_the_type_and_no_url_key_or_message(
    make_client: ClientFactory, agent_id: str
) -> None:
    failure = ProviderError(f"connection to {PROVIDER_URL} failed (Authorization: Bearer {API_KEY})")
    llm = ScriptedLLM({purpose: lambda request: failure for purpose in PURPOSES})
    async with make_client(llm) as memory, mcp_client.Client(build_server(memory, agent_id)) as client:
        failed = await client.call_tool("remember", {"message": PRIVATE_MESSAGE, "speaker": "Rafael"})
        assert failed.is_error
        said = _text(failed)
        assert "ProviderError" in said
        for secret in ("https://", "llm.internal.example", API_KEY, "123.456.789-00", PRIVATE_MESSAGE):
            assert secret not in said, (secret, said)
        await memory.forget(agent_id)


async def test_a_raised_runtime_failure_is_a_tool_error_with_the_type_and_no_url(
    make_client: ClientFactory, agent_id: str
) -> None:
    async with (
        make_client(embedder=_UnreachableEmbedder()) as memory,
        mcp_client.Client(build_server(memory, agent_id)) as client,
    ):
        failed = await client.call_tool("recall", {"query": PRIVATE_MESSAGE})
        assert failed.is_error
        said = _text(failed)
        assert "ProviderError" in said and "may succeed later" in said
        for secret in ("https://", "llm.internal.example", "8443", API_KEY, PRIVATE_MESSAGE):
            assert secret not in said, (secret, said)


async def test_correct_fact_history_and_confirmed_forget_fact(make_client: ClientFactory, agent_id: str) -> None:
    async with (
        make_client(ScriptedLLM({"informed_extraction": [EXTRACTION]})) as memory,
        mcp_client.Client(build_server(memory, agent_id)) as client,
    ):
        await call(client, "remember", message="Moro em Recife", speaker="Rafael", occurred_at="2025-03-01")
        (wrong,) = (await call(client, "facts", entity="Rafael"))["facts"]

        fixed = await call(client, "correct_fact", fact_id=wrong["id"], text="Rafael mora em Olinda")
        assert fixed["action"] == "corrected" and fixed["added"]["text"] == "Rafael mora em Olinda"
        versions = (await call(client, "fact_history", fact_id=wrong["id"]))["versions"]
        assert [version["text"] for version in versions] == ["Rafael mora em Recife", "Rafael mora em Olinda"]

        current = fixed["added"]["id"]
        unconfirmed = await client.call_tool("forget_fact", {"fact_id": current, "confirm": False})
        assert unconfirmed.is_error and "confirm=true" in _text(unconfirmed)
        assert [fact["text"] for fact in (await call(client, "facts"))["facts"]] == ["Rafael mora em Olinda"]
        retracted = await call(client, "forget_fact", fact_id=current, confirm=True, reason="não mora mais lá")
        assert retracted["action"] == "deleted"
        assert (await call(client, "facts"))["facts"] == []

        unknown = await client.call_tool("fact_history", {"fact_id": "not-a-uuid"})
        assert unknown.is_error and "InvalidInputError" in _text(unknown)
        await memory.forget(agent_id)


@pytest.mark.parametrize(
    ("text", "private", "expected"),
    [
        (f"POST {PROVIDER_URL} refused", (), "POST [url] refused"),
        (f"api_key={API_KEY} rejected", (), "[key] rejected"),
        ("connect to 10.0.0.7:5432 failed", (), "connect to [host] failed"),
        (f"could not read {PRIVATE_MESSAGE!r}", (PRIVATE_MESSAGE,), "could not read '[text]'"),
        ("x" * 400, (), "x" * 299 + "…"),
    ],
)
def test_safe_reason_strips_urls_keys_hosts_and_the_calls_own_text(
    text: str, private: tuple[str, ...], expected: str
) -> None:
    assert safe_reason(text, private) == expected


def test_safe_reason_of_a_runtime_failure_strips_quoted_data() -> None:
    assert safe_reason("subject 'Rafael' did not resolve", quoted=True) == "subject [text] did not resolve"


def test_write_failure_names_the_failed_stages_type() -> None:
    trace = PipelineTrace(steps=[TraceStep(name="apply", status="failed", error="StorageError: deadlock detected")])
    result = WriteResult(success=False, error="apply: StorageError: deadlock detected", pipeline=trace)
    assert write_failure(result) == ("StorageError", "apply: StorageError: deadlock detected", True)


def test_write_failure_the_write_survived_keeps_its_facts() -> None:
    result = WriteResult(
        success=False, extraction_path="informed", error=f"relation extraction failed: {PROVIDER_URL} timed out"
    )
    failure = write_failure(result)
    assert not failure.nothing_remembered
    assert failure.kind == "WriteFailed" and PROVIDER_URL not in failure.reason


class _UnreachableEmbedder:
    """An embedder whose service is down, failing the way a provider does: its URL in the message."""

    model_id = HashEmbedder().model_id
    dimensions = HashEmbedder().dimensions

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        raise ProviderError(f"embeddings at {PROVIDER_URL} unreachable with key {API_KEY}")


def _text(result: Any) -> str:
    return " ".join(getattr(part, "text", "") for part in result.content)


def _moment(day: str) -> datetime:
    return datetime.fromisoformat(day).replace(tzinfo=UTC)
