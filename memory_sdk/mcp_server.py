"""An agent's memory as Model Context Protocol tools, served over stdio with the official `mcp` package.

    $ memory-sdk mcp --agent user_123                  # tools: remember, recall, facts, entity
    $ memory-sdk mcp --agent user_123 --allow-forget   # ... and forget

The agent id is the server's, fixed when it starts: no tool takes one, so a model (or a prompt injected into it)
cannot read or write another agent's memory. `forget` erases the agent and exists only with --allow-forget.
Moments are ISO 8601 strings; one without a time zone is UTC, as on the command line. See docs/mcp.md.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from memory_sdk.client import MemoryClient
from memory_sdk.errors import InvalidInputError, MemorySDKError, UsageError
from memory_sdk.results import Fact, WriteResult

__all__ = ["build_server", "serve_stdio"]

logger = logging.getLogger("memory_sdk")

_INSTRUCTIONS = (
    "Long-term memory of one user or agent. Call `recall` with the user's message to get the facts relevant to "
    "it, `remember` with each message worth keeping (the memory extracts, versions and reconciles facts), "
    "`facts` for what is known about an entity (or everything), `entity` for a person's or thing's profile."
)
# Fields of a fact a model needs to use it; ids let a client link facts, the rest stays in the SDK.
_FACT_FIELDS = {"id", "entity_key", "text", "attribute", "confidence", "valid_from", "valid_to", "invalidated_at"}


def build_server(memory: MemoryClient, agent_id: str, *, allow_forget: bool = False) -> Any:
    """An MCPServer whose tools read and write `agent_id`'s memory through `memory` (open, owned by the caller).

    Returns `mcp.server.mcpserver.MCPServer` (typed Any: `mcp` is an optional extra, imported here only).
    """
    try:
        from mcp.server.mcpserver import MCPServer
    except ImportError as exc:
        raise UsageError("the MCP server needs the mcp package: pip install 'memory-sdk[mcp]'") from exc
    server = MCPServer(name="memory-sdk", instructions=_INSTRUCTIONS)
    tools = MemoryTools(memory, agent_id)
    server.add_tool(tools.remember, name="remember", description=MemoryTools.remember.__doc__)
    server.add_tool(tools.recall, name="recall", description=MemoryTools.recall.__doc__)
    server.add_tool(tools.facts, name="facts", description=MemoryTools.facts.__doc__)
    server.add_tool(tools.entity, name="entity", description=MemoryTools.entity.__doc__)
    if allow_forget:
        server.add_tool(tools.forget, name="forget", description=MemoryTools.forget.__doc__)
    return server


async def serve_stdio(memory: MemoryClient, agent_id: str, *, allow_forget: bool = False) -> None:
    """Serve until the client closes stdin (`memory-sdk mcp`)."""
    server = build_server(memory, agent_id, allow_forget=allow_forget)
    logger.info("mcp serving agent=%s forget=%s", agent_id, allow_forget)
    await server.run_stdio_async()


class MemoryTools:
    """The tools, bound to one client and one agent. Their docstrings are what the model reads."""

    def __init__(self, memory: MemoryClient, agent_id: str) -> None:
        self._memory = memory
        self._agent_id = agent_id

    async def remember(
        self, message: str, speaker: str, occurred_at: str | None = None, message_id: str | None = None
    ) -> dict[str, Any]:
        """Store a message in memory: its facts are extracted, dated and reconciled with what is known (a move
        closes the old address). `speaker` is who said it; `occurred_at` an ISO 8601 time (default now);
        `message_id` makes a retry store nothing twice."""
        with _tool_errors():
            result = await self._memory.write(
                self._agent_id, message, speaker, occurred_at=_moment("occurred_at", occurred_at), message_id=message_id
            )
        return _write_summary(result)

    async def recall(self, query: str, k: int = 10) -> dict[str, Any]:
        """The facts most relevant to `query` (a question or the user's message), best first, at most `k`."""
        with _tool_errors():
            search = getattr(self._memory, "search", None)
            if search is None:  # MemoryClient.search lands with issue 12's search work
                raise UsageError("this memory_sdk has no search yet: use the facts tool")
            hits = await search(self._agent_id, query, k=k)
        return {"hits": [{**_fact(hit.fact), "score": round(hit.score, 6)} for hit in hits]}

    async def facts(
        self, entity: str | None = None, as_of: str | None = None, include_history: bool = False
    ) -> dict[str, Any]:
        """What is known: current facts (about `entity`, a name, alias or key, when given); with `as_of` (ISO
        8601) what was true then; with `include_history` every version, closed ones included."""
        with _tool_errors():
            found = await self._memory.get_facts(
                self._agent_id, entity=entity, as_of=_moment("as_of", as_of), include_history=include_history
            )
        return {"facts": [_fact(fact) for fact in found]}

    async def entity(self, name: str) -> dict[str, Any]:
        """A person, place or thing by name or alias: its key, type, aliases and profile (null when unknown)."""
        with _tool_errors():
            found = await self._memory.get_entity(self._agent_id, name)
        return {"entity": None if found is None else found.model_dump(mode="json")}

    async def forget(self, confirm: bool) -> dict[str, Any]:
        """Erase this memory entirely, messages included. It cannot be undone: pass confirm=true only when the
        user asked for it."""
        with _tool_errors():
            if confirm is not True:
                raise InvalidInputError("forget erases the whole memory: call it with confirm=true to go ahead")
            erased = await self._memory.forget(self._agent_id)
        return {"erased": erased}


@contextmanager
def _tool_errors() -> Iterator[None]:
    """The SDK's errors as MCP tool errors the model reads: a usage error's message (fix the call), only the type
    of a runtime failure (its detail, which may name the database, stays in the server's log)."""
    from mcp.server.mcpserver.exceptions import ToolError

    try:
        yield
    except UsageError as exc:
        raise ToolError(f"{type(exc).__name__}: {exc}") from exc
    except MemorySDKError as exc:
        logger.warning("mcp tool failed: %s: %s", type(exc).__name__, exc)
        raise ToolError(f"{type(exc).__name__}: the memory could not do it now; try again later") from exc


def _moment(name: str, text: str | None) -> datetime | None:
    """An ISO 8601 moment from a tool argument; without a zone it is UTC (write() refuses naive datetimes)."""
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise InvalidInputError(f"{name} must be an ISO 8601 date or time, got {text!r}") from exc
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _fact(fact: Fact) -> dict[str, Any]:
    return fact.model_dump(mode="json", include=_FACT_FIELDS)


def _write_summary(result: WriteResult) -> dict[str, Any]:
    return {
        "success": result.success,
        "duplicate": result.duplicate,
        "event_id": None if result.event_id is None else str(result.event_id),
        "facts_added": [fact.text for fact in result.facts_added],
        "facts_updated": [fact.text for fact in result.facts_updated],
        "facts_deleted": [fact.text for fact in result.facts_deleted],
        "error": result.error,
    }
