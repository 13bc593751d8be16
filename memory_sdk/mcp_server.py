"""An agent's memory as Model Context Protocol tools, served over stdio with the official `mcp` package.

    $ memory-sdk mcp --agent user_123                  # read, remember and correct tools (TOOLS lists them)
    $ memory-sdk mcp --agent user_123 --allow-forget   # ... and forget

The agent id is the server's, fixed when it starts: no tool takes one, so a model (or a prompt injected into it)
cannot read or write another agent's memory. `forget` erases the agent and exists only with --allow-forget.
Without a model the read tools still work and `remember` answers a tool error saying why. Every failure is a tool
error (`isError`) naming the error type, its message stripped of URLs, keys and message text. See docs/mcp.md.
"""

from __future__ import annotations

import inspect
import logging
import os
import re
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Annotated, Any, NamedTuple, NoReturn

from pydantic import Field

from memory_sdk.client import MemoryClient
from memory_sdk.errors import InvalidInputError, MemorySDKError, UsageError
from memory_sdk.results import Fact, FactCorrection, WriteResult

__all__ = ["TOOLS", "WriteFailure", "build_server", "safe_reason", "serve_stdio", "write_failure"]

logger = logging.getLogger("memory_sdk")

_INSTRUCTIONS = (
    "Long-term memory of one user or agent. Call `recall` with the user's message to get the facts relevant to "
    "it, `remember` with each message worth keeping (the memory extracts, versions and reconciles facts), "
    "`facts` for what is known about an entity (or everything), `entity` for a person's or thing's profile. "
    "When the user says a fact is wrong, `correct_fact` or `forget_fact` it by id; `fact_history` shows its "
    "versions."
)
_NO_MODEL_INSTRUCTIONS = " This server has no model: `remember` is unavailable, every other tool works."
# Fields of a fact a model needs to use it; ids let a client link facts, the rest stays in the SDK.
_FACT_FIELDS = {"id", "entity_key", "text", "attribute", "confidence", "valid_from", "valid_to", "invalidated_at"}
# A reason longer than this is cut: a tool error is a line for the model, the detail is in the server's log.
_MAX_REASON_CHARS = 300
# A private text shorter than this (a one-letter speaker) is left in: replacing it would garble the reason.
_MIN_PRIVATE_CHARS = 3

_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.IGNORECASE)
_KEY = re.compile(
    r"\b(?:sk|pk|rk)-[A-Za-z0-9_-]{6,}"  # OpenAI-style secret keys
    r"|\bBearer\s+\S+"
    r"|\b(?:api[_-]?key|token|password|secret|authorization)\b\s*[=:]\s*\S+",
    re.IGNORECASE,
)
_HOST_PORT = re.compile(r"\b(?:\d{1,3}(?:\.\d{1,3}){3}|localhost|[\w-]+(?:\.[\w-]+)+):\d{2,5}\b")
_QUOTED = re.compile(r"'[^'\n]*'|\"[^\"\n]*\"")
_ERROR_TYPE = re.compile(r"\b[A-Z][A-Za-z]*(?:Error|Failure|Timeout|Unavailable|Mismatch|NotConfigured|TakenOver)\b")


def build_server(
    memory: MemoryClient, agent_id: str, *, allow_forget: bool = False, no_model_reason: str | None = None
) -> Any:
    """An MCPServer whose tools read and write `agent_id`'s memory through `memory` (open, owned by the caller).

    With `no_model_reason` (the server has no model) `remember` answers a tool error carrying it. Returns
    `mcp.server.mcpserver.MCPServer` (typed Any: `mcp` is an optional extra, imported here only).
    """
    try:
        from mcp.server.mcpserver import MCPServer
        from mcp.types import ToolAnnotations
    except ImportError as exc:
        raise UsageError("the MCP server needs the mcp package: pip install 'memory-sdk[mcp]'") from exc
    from memory_sdk import __version__

    instructions = _INSTRUCTIONS + (_NO_MODEL_INSTRUCTIONS if no_model_reason else "")
    server = MCPServer(name="memory-sdk", version=__version__, instructions=instructions)
    tools = MemoryTools(memory, agent_id, no_model_reason=no_model_reason)
    for name, hints in TOOLS:
        if name == "forget" and not allow_forget:
            continue
        method: Callable[..., Any] = getattr(tools, name)
        server.add_tool(
            method,
            name=name,
            description=_description(method.__doc__ or name),
            annotations=ToolAnnotations(**hints),
        )
    return server


async def serve_stdio(
    memory: MemoryClient, agent_id: str, *, allow_forget: bool = False, no_model_reason: str | None = None
) -> None:
    """Serve until the client closes stdin (`memory-sdk mcp`)."""
    server = build_server(memory, agent_id, allow_forget=allow_forget, no_model_reason=no_model_reason)
    logger.info("mcp serving agent=%s forget=%s model=%s", agent_id, allow_forget, no_model_reason is None)
    await server.run_stdio_async()


_READ = {"read_only_hint": True, "idempotent_hint": True, "open_world_hint": False}
_ADD = {"read_only_hint": False, "destructive_hint": False, "open_world_hint": False}  # closed versions stay
_ERASE = {"read_only_hint": False, "destructive_hint": True, "open_world_hint": False}
# The tools in the order a client lists them, with their MCP hints; `forget` only with allow_forget.
TOOLS: tuple[tuple[str, dict[str, bool]], ...] = (
    ("recall", _READ),
    ("facts", _READ),
    ("entity", _READ),
    ("fact_history", _READ),
    ("remember", _ADD),
    ("correct_fact", _ADD),
    ("forget_fact", _ERASE),
    ("forget", _ERASE),
)


class MemoryTools:
    """The tools, bound to one client and one agent. Their docstrings and argument descriptions are what the
    model reads."""

    def __init__(self, memory: MemoryClient, agent_id: str, *, no_model_reason: str | None = None) -> None:
        self._memory = memory
        self._agent_id = agent_id
        self._no_model_reason = no_model_reason

    async def recall(
        self,
        query: Annotated[str, Field(description="a question or the user's message, in their words")],
        k: Annotated[int, Field(description="how many facts at most (1-100)")] = 10,
    ) -> dict[str, Any]:
        """The facts most relevant to a query, best first, each with its score."""
        with _tool_errors(query):
            hits = await self._memory.search(self._agent_id, query, k=k)
        return {"hits": [{**_fact(hit.fact), "score": round(hit.score, 6)} for hit in hits]}

    async def facts(
        self,
        entity: Annotated[str | None, Field(description="a name, alias or entity key; omit for every entity")] = None,
        as_of: Annotated[
            str | None, Field(description="ISO 8601 date or time: what was true then (UTC if no zone)")
        ] = None,
        include_history: Annotated[bool, Field(description="true: every version, closed ones included")] = False,
    ) -> dict[str, Any]:
        """What is known: the current facts, about one entity when given, or what was true at a moment."""
        with _tool_errors():
            found = await self._memory.get_facts(
                self._agent_id, entity=entity, as_of=_moment("as_of", as_of), include_history=include_history
            )
        return {"facts": [_fact(fact) for fact in found]}

    async def entity(
        self, name: Annotated[str, Field(description="the person's, place's or thing's name or alias")]
    ) -> dict[str, Any]:
        """A person, place or thing: its key, type, aliases and profile (null when unknown)."""
        with _tool_errors():
            found = await self._memory.get_entity(self._agent_id, name)
        return {"entity": None if found is None else found.model_dump(mode="json")}

    async def fact_history(
        self, fact_id: Annotated[str, Field(description="the id of a fact, as recall or facts returned it")]
    ) -> dict[str, Any]:
        """Every version of one fact, oldest first: what it replaced and what replaced it, the user's corrections
        and retractions included."""
        with _tool_errors():
            versions = await self._memory.fact_history(self._agent_id, fact_id)
        return {"versions": [_fact(fact) for fact in versions]}

    async def remember(
        self,
        message: Annotated[str, Field(description="the message, as it was said")],
        speaker: Annotated[str, Field(description="who said it: a name, or 'user'")],
        occurred_at: Annotated[
            str | None, Field(description="ISO 8601 time it was said (default now; UTC if no zone)")
        ] = None,
        message_id: Annotated[
            str | None, Field(description="the message's id in the chat: a retry stores nothing twice")
        ] = None,
    ) -> dict[str, Any]:
        """Store a message in memory: its facts are extracted, dated and reconciled with what is known (a move
        closes the old address). Returns the facts added, updated and deleted."""
        if self._no_model_reason is not None:
            _raise_tool_error(
                f"ProviderNotConfigured: remember needs a model and this server has none: {self._no_model_reason}"
            )
        with _tool_errors(message, speaker):
            result = await self._memory.write(
                self._agent_id,
                message,
                speaker,
                occurred_at=_moment("occurred_at", occurred_at),
                message_id=message_id,
                verbose=True,  # the trace names the type of a failed stage
            )
        failure = None if result.success else write_failure(result, private=(message, speaker))
        if failure is not None:
            logger.warning("mcp remember failed: %s: %s", failure.kind, result.error)
            if failure.nothing_remembered:
                stored = "" if result.event_id is None else f" (the message is stored as event {result.event_id})"
                _raise_tool_error(f"{failure.kind}: {failure.reason}{stored}")
        return _write_summary(result, failure)

    async def correct_fact(
        self,
        fact_id: Annotated[str, Field(description="the id of the current fact that is wrong")],
        text: Annotated[str, Field(description="what is true instead, as a full sentence about the same subject")],
        attribute: Annotated[str | None, Field(description="the attribute it states (default: the fact's)")] = None,
        valid_from: Annotated[
            str | None,
            Field(description="ISO 8601: true since then, the old fact history until then; omit if it was never true"),
        ] = None,
    ) -> dict[str, Any]:
        """Replace a fact the user says is wrong by what they say instead: a new version that supersedes it, marked
        as the user's correction (the old one stays in its history)."""
        with _tool_errors(text):
            done = await self._memory.correct_fact(
                self._agent_id, fact_id, text, attribute=attribute, valid_from=_moment("valid_from", valid_from)
            )
        return _correction(done)

    async def forget_fact(
        self,
        fact_id: Annotated[str, Field(description="the id of the current fact to retract")],
        confirm: Annotated[bool, Field(description="must be true: the user asked for this fact to be removed")],
        reason: Annotated[str | None, Field(description="why, in the user's words (kept with the retraction)")] = None,
    ) -> dict[str, Any]:
        """Retract one fact the user says is wrong or wants removed: it stops being current, the relationships it
        backs end, its history stays. Pass confirm=true only when the user asked for it."""
        with _tool_errors(reason):
            if confirm is not True:
                raise InvalidInputError("forget_fact retracts a fact: call it with confirm=true to go ahead")
            done = await self._memory.delete_fact(self._agent_id, fact_id, reason=reason)
        return _correction(done)

    async def forget(
        self, confirm: Annotated[bool, Field(description="must be true: the user asked to erase their whole memory")]
    ) -> dict[str, Any]:
        """Erase this memory entirely, messages included. It cannot be undone: pass confirm=true only when the
        user asked for it."""
        with _tool_errors():
            if confirm is not True:
                raise InvalidInputError("forget erases the whole memory: call it with confirm=true to go ahead")
            erased = await self._memory.forget(self._agent_id)
        return {"erased": erased}


def safe_reason(text: str, private: Iterable[str] = (), *, quoted: bool = False) -> str:
    """`text` fit for a tool error: URLs, host:port pairs, keys (and the configured OPENAI_API_KEY) and the
    `private` texts (the call's message) replaced by placeholders; with `quoted`, every quoted string too (a
    runtime failure quotes data, never the fix); one line, cut at _MAX_REASON_CHARS.

    >>> safe_reason("connect to https://api.example.com/v1 failed (key sk-abcdef123)")
    'connect to [url] failed (key [key])'
    """
    secrets = [value for value in (*private, os.environ.get("OPENAI_API_KEY") or "") if value]
    for value in sorted(secrets, key=len, reverse=True):
        if len(value.strip()) >= _MIN_PRIVATE_CHARS:
            text = text.replace(value, "[text]").replace(repr(value)[1:-1], "[text]")
    text = _URL.sub("[url]", text)
    text = _KEY.sub("[key]", text)
    text = _HOST_PORT.sub("[host]", text)
    if quoted:
        text = _QUOTED.sub("[text]", text)
    text = " ".join(text.split())
    return text if len(text) <= _MAX_REASON_CHARS else text[: _MAX_REASON_CHARS - 1] + "…"


class WriteFailure(NamedTuple):
    """Why a write did not fully succeed, fit for a tool's answer."""

    kind: str  # an error type: ProviderError, StorageError, ...
    reason: str  # safe_reason of result.error
    nothing_remembered: bool  # a stage or the extraction failed: no fact of the message was stored


def write_failure(result: WriteResult, private: Iterable[str] = ()) -> WriteFailure:
    """The error type and safe reason of a write that did not succeed (write() reports failures, never raises).

    The type is a failed stage's (its trace error reads "Type: reason"); an extraction that failed on both paths is
    a ProviderError (the extraction stage catches only those); else the first error name in `result.error`.
    A failure the write survived (relations not extracted, the run record not finished) leaves its facts stored.
    """
    error = result.error or "the write did not succeed"
    kinds = [
        step.error.split(":", 1)[0]
        for step in (result.pipeline.steps if result.pipeline is not None else [])
        if step.status == "failed" and step.error
    ]
    failed = bool(kinds) or result.extraction_path == "failed"
    if not kinds and result.extraction_path == "failed":
        kinds = ["ProviderError"]
    if not kinds:
        kinds = _ERROR_TYPE.findall(error) or ["WriteFailed"]
    return WriteFailure(kinds[0], safe_reason(error, private, quoted=True), failed)


@contextmanager
def _tool_errors(*texts: str | None) -> Iterator[None]:
    """Every failure as an MCP tool error the model reads, its type first: a usage error's message (fix the call);
    a runtime failure's with quoted data stripped (the full detail goes to the server's log on stderr); anything
    else by its type only. `texts` are the call's own (a message), never repeated back."""
    private = [text for text in texts if text]
    try:
        yield
    except UsageError as exc:
        _raise_tool_error(f"{type(exc).__name__}: {safe_reason(str(exc), private)}", exc)
    except MemorySDKError as exc:
        logger.warning("mcp tool failed: %s: %s", type(exc).__name__, exc)
        reason = safe_reason(str(exc), private, quoted=True)
        _raise_tool_error(f"{type(exc).__name__}: {reason} (a failure outside the call: it may succeed later)", exc)
    except Exception as exc:
        logger.exception("mcp tool crashed")
        _raise_tool_error(f"{type(exc).__name__}: an unexpected failure; the server's log has the detail", exc)


def _raise_tool_error(message: str, cause: BaseException | None = None) -> NoReturn:
    from mcp.server.mcpserver.exceptions import ToolError

    raise ToolError(message) from cause


def _description(docstring: str) -> str:
    """A docstring as a tool description: no source indentation, each paragraph's wrapped lines joined."""
    return "\n\n".join(" ".join(paragraph.split()) for paragraph in inspect.cleandoc(docstring).split("\n\n"))


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


def _correction(done: FactCorrection) -> dict[str, Any]:
    return {
        "action": done.action,
        "fact_id": str(done.fact_id),
        "closed": [_fact(fact) for fact in done.closed],
        "added": None if done.added is None else _fact(done.added),
        "relationships_closed": [str(edge) for edge in done.relationships_closed],
    }


def _write_summary(result: WriteResult, failure: WriteFailure | None) -> dict[str, Any]:
    return {
        "success": result.success,
        "duplicate": result.duplicate,
        "event_id": None if result.event_id is None else str(result.event_id),
        "facts_added": [fact.text for fact in result.facts_added],
        "facts_updated": [fact.text for fact in result.facts_updated],
        "facts_deleted": [fact.text for fact in result.facts_deleted],
        "problem": None if failure is None else f"{failure.kind}: {failure.reason}",
    }
