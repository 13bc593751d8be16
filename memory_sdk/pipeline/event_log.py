"""Stage: embed the message and store it as an immutable event, committed before any LLM work.

The event and its pipeline run go in in one statement, in a transaction that first makes alias lookup's read
(`_log_with_read`; the event never depends on it: a read that fails is dropped). A transient database failure
(lost connection, serialization failure, server overload) is retried, so that a write under load keeps its event;
anything else fails the write before any LLM work, and nothing is half-written.

The same stage starts the runs that do not log a new event (docs/recovery.md):
- a write whose `message_id` the agent already has: if a run of that event succeeded, the write ends here with
  that run's stored outcome; if a live run is still working on it, the write waits for it; if the event's runs
  failed, were cancelled or died, this write takes the event over;
- a reprocess of a stored event: it takes the event over unless a run succeeded or a live one holds it.
Taking over (queries.claim_event) locks the event row, marks dead runs `abandoned` and opens a new run, in one
transaction, so two writers never run one event at once.
"""

from __future__ import annotations

import asyncio
from uuid import UUID

from memory_sdk.errors import InvalidInputError, ProviderError, StorageError
from memory_sdk.pipeline import alias_lookup
from memory_sdk.pipeline.llm_calls import embed_texts
from memory_sdk.pipeline.state import Deps, KnownRead, WriteState
from memory_sdk.store import queries
from memory_sdk.store.database import Connection, error_reason

__all__ = ["EVENT_INSERT_ATTEMPTS", "run"]

# Three tries with 0.1 s and 0.2 s pauses ride out a restarted connection or a deadlock victim; a longer outage
# is the caller's to see.
EVENT_INSERT_ATTEMPTS = 3
_RETRY_PAUSE_SEC = 0.1
# A retried write polls the run it waits for with growing pauses, up to this one.
_MAX_POLL_SEC = 1.0


async def run(state: WriteState, deps: Deps) -> None:
    request = state.request
    try:
        [state.message_embedding] = await embed_texts(state, deps.embedder, [request.message])
    except ProviderError as exc:
        # The event must not wait on the embedder: it is stored without a vector and the failure is reported.
        state.fail(f"event_log: message embedding failed, event stored without it: {exc}")
    if request.event_id is None and await _insert(state, deps):
        state.step.data.update(persisted=True, event_id=str(state.event_id))
        return
    await _take_over(state, deps)


class _ReadFailed(Exception):
    """Alias lookup's read failed inside the event's transaction: it is rolled back, and the event goes in alone."""


async def _insert(state: WriteState, deps: Deps) -> bool:
    """Log the event and open its run; False when the agent already has an event with this message_id."""
    for attempt in range(1, EVENT_INSERT_ATTEMPTS + 1):
        try:
            ids, known = await _log_with_read(state, deps)
            break
        except StorageError as exc:
            if attempt == EVENT_INSERT_ATTEMPTS or not exc.transient:
                raise
            state.step.data["retries"] = attempt
            await asyncio.sleep(_RETRY_PAUSE_SEC * attempt)
    if ids is None:
        return False
    state.event_id, state.run_id = ids
    state.known_read = known
    return True


async def _log_with_read(state: WriteState, deps: Deps) -> tuple[tuple[UUID, UUID] | None, KnownRead | None]:
    """The event's transaction, which first makes alias lookup's read (alias_lookup.read_known): nothing comes
    between the two but the stage boundary, and it is one transaction fewer per write. The event must never depend
    on that read: if it fails, the transaction is rolled back and the event goes in alone (alias_lookup then reads
    in a transaction of its own, and reports its own failure)."""
    try:
        return await _log(state, deps, read_ahead=True)
    except _ReadFailed as failed:
        state.step.data["read_failed"] = str(failed)
        return await _log(state, deps, read_ahead=False)


async def _log(state: WriteState, deps: Deps, *, read_ahead: bool) -> tuple[tuple[UUID, UUID] | None, KnownRead | None]:
    """One transaction: alias lookup's read first when `read_ahead`, then the event and its run."""
    request = state.request
    async with deps.db.tenant(request.agent_id) as conn:
        known = await _read_known(conn, state) if read_ahead else None
        ids = await queries.insert_event_and_run(
            conn,
            agent_id=request.agent_id,
            speaker=request.speaker_name,
            content=request.message,
            occurred_at=request.occurred_at,
            embedding=state.message_embedding,
            message_id=request.message_id,
        )
    return ids, known


async def _read_known(conn: Connection, state: WriteState) -> KnownRead:
    """Alias lookup's read; whatever makes it fail (a database error, raw inside the transaction, or a bug) is
    recorded in this step's trace and met again by alias_lookup, which reads alone and reports it."""
    try:
        return await alias_lookup.read_known(conn, state, "event_log")
    except Exception as exc:
        raise _ReadFailed(f"{type(exc).__name__}: {error_reason(exc)}") from exc


async def _take_over(state: WriteState, deps: Deps) -> None:
    """Start another run of a stored event, or end the write with the outcome of one that finished it."""
    request, config = state.request, state.config
    # A retried write waits for a live first attempt, as long as it stays alive (its heartbeat); reprocess moves
    # on. A caller who wants a bound wraps write() in asyncio.timeout().
    waits = request.event_id is None
    pause = _RETRY_PAUSE_SEC
    while True:
        async with deps.db.tenant(request.agent_id) as conn:
            claim = await queries.claim_event(
                conn,
                agent_id=request.agent_id,
                event_id=request.event_id,
                message_id=request.message_id,
                stale_after_sec=config.run_stale_after_sec,
                max_attempts=request.max_attempts,
            )
            if claim is None:
                raise InvalidInputError(f"agent {request.agent_id!r} has no event {request.event_id}")
            if request.event_id is None and (claim.event.content, claim.event.speaker) != (
                request.message,
                request.speaker_name,
            ):
                # Raised inside the transaction: a run this claim opened is rolled back with it.
                raise InvalidInputError(
                    f"message_id {request.message_id!r} was already used for a different message of this agent"
                )
        state.event_id = claim.event.id
        data = state.step.data
        data.update(event_id=str(claim.event.id), earlier_runs=claim.attempts, persisted=False)
        if claim.run_id is not None:
            state.run_id = claim.run_id
            data["taken_over"] = True
            return
        if claim.done is not None:
            state.earlier_outcome = claim.done
            data["duplicate"] = True
            return
        if not claim.busy:
            state.fail(f"event_log: event {claim.event.id} left alone after {claim.attempts} runs (max_attempts)")
            return
        if not waits:
            state.fail(f"event_log: event {claim.event.id} is being written by another live run; not run again")
            return
        await asyncio.sleep(pause)
        pause = min(pause * 2, _MAX_POLL_SEC)
