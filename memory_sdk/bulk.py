"""Bulk import: many messages written through the ordinary write path, in time order per agent, resumable.

Each agent's messages are written one after another in `occurred_at` order (a later extraction must see the facts
of the earlier ones); different agents are written in parallel, at most `concurrency` at a time. Every message
carries a `message_id` (the caller's, or one derived from its content), and write() with a known id returns the
first outcome as a duplicate: running an interrupted import again skips what was written and finishes the rest.
See docs/import-export.md.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError

from memory_sdk.errors import InvalidInputError, MemorySDKError
from memory_sdk.results import Cost, ImportFailure, ImportProgress, ImportSummary, TokenUsage, WriteResult
from memory_sdk.validation import check_agent, check_message_id, check_moment

if TYPE_CHECKING:
    from memory_sdk.client import MemoryClient

__all__ = ["DEFAULT_IMPORT_CONCURRENCY", "ImportMessage", "derive_message_id", "import_messages"]

logger = logging.getLogger("memory_sdk")

# Agents written at once: each holds one connection while it writes and waits on the LLM in between, so eight
# keep a 10-connection pool busy without starving the client's reads.
DEFAULT_IMPORT_CONCURRENCY = 8

ProgressCallback = Callable[[ImportProgress], None]


class ImportMessage(BaseModel):
    """One message to import: what write() takes, with `occurred_at` required (the import orders by it).

    >>> ImportMessage(text="Moro em Curitiba", speaker="Rafael", occurred_at=datetime(2025, 1, 10, tzinfo=UTC))

    `agent_id` is needed only by the multi-agent form (`MemoryClient.import_messages`); `message_id` defaults to
    `derive_message_id(...)`, so importing the same file twice writes every message once. write()'s names are
    taken too: `message=` for `text=`, `speaker_name=` for `speaker=`.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str = Field(validation_alias=AliasChoices("text", "message"))
    speaker: str = Field(validation_alias=AliasChoices("speaker", "speaker_name"))
    occurred_at: datetime
    message_id: str | None = None
    agent_id: str | None = None
    recent_messages: tuple[str, ...] = ()
    participants: tuple[str, ...] = ()


def derive_message_id(occurred_at: datetime, speaker: str, text: str) -> str:
    """The id of a message that came without one: a hash of when, who and what (not of the agent: ids are per
    agent already, so the same file gives the same ids whichever agent it goes to). Two messages alike in all
    three are one message."""
    moment = check_moment("occurred_at", occurred_at)
    assert moment is not None  # occurred_at is required here
    digest = hashlib.sha256("\x1f".join((moment.isoformat(), speaker, text)).encode("utf-8", "surrogatepass"))
    return f"import:{digest.hexdigest()[:32]}"


@dataclass(frozen=True)
class _Item:
    """A message checked and placed: its position in the input, its agent and its id."""

    index: int
    agent_id: str
    message_id: str
    occurred_at: datetime
    message: ImportMessage


_FACT_KINDS = ("added", "updated", "unchanged", "deleted")


@dataclass
class _Tally:
    """The import's running figures, shared by the per-agent tasks (one event loop: no lock needed)."""

    total: int
    done: int = 0
    written: int = 0
    duplicates: int = 0
    facts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(_FACT_KINDS, 0))
    tokens: TokenUsage = field(default_factory=TokenUsage)
    llm_calls: int = 0
    costs: list[Cost | None] = field(default_factory=list)
    failures: list[ImportFailure] = field(default_factory=list)


async def import_messages(
    client: MemoryClient,
    messages: Iterable[ImportMessage | Mapping[str, Any]],
    *,
    agent_id: str | None,
    concurrency: int,
    progress: ProgressCallback | None,
) -> ImportSummary:
    """Write `messages` (all for `agent_id`, or each for its own `agent_id` when None); see the module doc."""
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise InvalidInputError(f"concurrency must be a positive int, got {concurrency!r}")
    if progress is not None and not callable(progress):
        raise InvalidInputError("progress must be a callable taking an ImportProgress")
    default_agent = None if agent_id is None else check_agent(agent_id)
    started = time.perf_counter()
    raw = list(messages)
    tally = _Tally(total=len(raw))
    queues: dict[str, list[_Item]] = {}
    for index, entry in enumerate(raw):
        try:
            item = _prepare(index, entry, default_agent)
        except InvalidInputError as exc:
            _record(tally, progress, _failure(index, entry, exc), None)
            continue
        queues.setdefault(item.agent_id, []).append(item)
    slots = asyncio.Semaphore(concurrency)
    async with asyncio.TaskGroup() as group:
        for items in queues.values():
            group.create_task(_import_agent(client, sorted(items, key=_order), slots, tally, progress))
    summary = _summary(tally, agents=len(queues), duration_ms=(time.perf_counter() - started) * 1000)
    logger.info(
        "import messages=%d written=%d duplicates=%d failed=%d agents=%d",
        summary.messages,
        summary.written,
        summary.duplicates,
        summary.failed,
        summary.agents,
    )
    return summary


def _order(item: _Item) -> tuple[datetime, int]:
    """Time order; messages of the same moment keep their input order."""
    return item.occurred_at, item.index


def _prepare(index: int, entry: ImportMessage | Mapping[str, Any], default_agent: str | None) -> _Item:
    """The message checked: its agent, its moment in UTC and its id, or InvalidInputError saying what is wrong
    (the failure carries `index`, so the message does not repeat it)."""
    if isinstance(entry, ImportMessage):
        message = entry
    elif isinstance(entry, Mapping):
        try:
            message = ImportMessage.model_validate(dict(entry))
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'message'}: {e['msg']}" for e in exc.errors())
            raise InvalidInputError(problems) from exc
    else:
        raise InvalidInputError(f"a message must be an ImportMessage or a mapping, got {type(entry).__name__}")
    agent = message.agent_id if message.agent_id is not None else default_agent
    if agent is None:
        raise InvalidInputError("the message has no agent_id (import_messages needs one per message)")
    if default_agent is not None and agent != default_agent:
        raise InvalidInputError(f"the message is for agent {agent!r}, not {default_agent!r}")
    moment = check_moment("occurred_at", message.occurred_at)
    assert moment is not None  # a required field
    message_id = check_message_id(message.message_id) or derive_message_id(moment, message.speaker, message.text)
    return _Item(index, check_agent(agent), message_id, moment, message)


async def _import_agent(
    client: MemoryClient,
    items: list[_Item],
    slots: asyncio.Semaphore,
    tally: _Tally,
    progress: ProgressCallback | None,
) -> None:
    """One agent's messages, strictly one after another: each write sees everything the earlier ones stored."""
    async with slots:
        for item in items:
            await _write_one(client, item, tally, progress)


async def _write_one(client: MemoryClient, item: _Item, tally: _Tally, progress: ProgressCallback | None) -> None:
    message = item.message
    try:
        result = await client.write(
            item.agent_id,
            message.text,
            message.speaker,
            occurred_at=item.occurred_at,
            recent_messages=message.recent_messages,
            message_id=item.message_id,
            participants=message.participants,
        )
    except MemorySDKError as exc:  # a bad message or an unavailable store: this message's failure, not the import's
        _record(tally, progress, _failure(item.index, item, exc), item)
        return
    tally.tokens += result.tokens_used
    tally.llm_calls += result.llm_calls
    tally.costs.append(result.cost)
    if result.duplicate:
        tally.duplicates += 1
    elif result.success:
        tally.written += 1
        _count_facts(tally, result)
    else:
        failure = ImportFailure(
            index=item.index,
            agent_id=item.agent_id,
            message_id=item.message_id,
            event_id=result.event_id,
            error_type="WriteFailed",
            error=result.error or "the write did not succeed",
        )
        _record(tally, progress, failure, item)
        return
    _record(tally, progress, None, item, duplicate=result.duplicate)


def _count_facts(tally: _Tally, result: WriteResult) -> None:
    tally.facts["added"] += len(result.facts_added)
    tally.facts["updated"] += len(result.facts_updated)
    tally.facts["unchanged"] += len(result.facts_unchanged)
    tally.facts["deleted"] += len(result.facts_deleted)


def _failure(index: int, entry: object, exc: MemorySDKError) -> ImportFailure:
    agent = entry.agent_id if isinstance(entry, _Item | ImportMessage) else None
    message_id = entry.message_id if isinstance(entry, _Item | ImportMessage) else None
    return ImportFailure(
        index=index, agent_id=agent, message_id=message_id, error_type=type(exc).__name__, error=str(exc)
    )


def _record(
    tally: _Tally,
    progress: ProgressCallback | None,
    failure: ImportFailure | None,
    item: _Item | None,
    *,
    duplicate: bool = False,
) -> None:
    """Count one message done and tell the progress callback how it went."""
    tally.done += 1
    if failure is not None:
        tally.failures.append(failure)
    if progress is None:
        return
    status = "failed" if failure is not None else "duplicate" if duplicate else "written"
    progress(
        ImportProgress(
            done=tally.done,
            total=tally.total,
            status=status,
            agent_id=item.agent_id if item is not None else failure.agent_id if failure is not None else None,
            message_id=item.message_id if item is not None else failure.message_id if failure is not None else None,
        )
    )


def _summary(tally: _Tally, *, agents: int, duration_ms: float) -> ImportSummary:
    return ImportSummary(
        messages=tally.total,
        written=tally.written,
        duplicates=tally.duplicates,
        failed=len(tally.failures),
        agents=agents,
        facts_added=tally.facts["added"],
        facts_updated=tally.facts["updated"],
        facts_unchanged=tally.facts["unchanged"],
        facts_deleted=tally.facts["deleted"],
        tokens_used=tally.tokens,
        llm_calls=tally.llm_calls,
        cost=Cost.total(tally.costs),
        failures=sorted(tally.failures, key=lambda failure: failure.index),
        duration_ms=duration_ms,
    )
