"""Stage: embed the message and store it as an immutable event, committed before any LLM work.

The event and its pipeline run go in in one statement. A transient database failure (lost connection,
serialization failure, server overload) is retried, so that a write under load keeps its event; anything else
fails the write before any LLM work, and nothing is half-written.
"""

from __future__ import annotations

import asyncio

from memory_sdk.errors import ProviderError, StorageError
from memory_sdk.pipeline.llm_calls import embed_texts
from memory_sdk.pipeline.state import Deps, WriteState
from memory_sdk.store import queries

__all__ = ["EVENT_INSERT_ATTEMPTS", "run"]

# Three tries with 0.1 s and 0.2 s pauses ride out a restarted connection or a deadlock victim; a longer outage
# is the caller's to see.
EVENT_INSERT_ATTEMPTS = 3
_RETRY_PAUSE_SEC = 0.1


async def run(state: WriteState, deps: Deps) -> None:
    request = state.request
    try:
        [state.message_embedding] = await embed_texts(state, deps.embedder, [request.message])
    except ProviderError as exc:
        # The event must not wait on the embedder: it is stored without a vector and the failure is reported.
        state.fail(f"event_log: message embedding failed, event stored without it: {exc}")
    if request.dry_run:
        state.step.data["persisted"] = False
        return
    for attempt in range(1, EVENT_INSERT_ATTEMPTS + 1):
        try:
            async with deps.db.tenant(request.agent_id) as conn:
                state.event_id, state.run_id = await queries.insert_event_and_run(
                    conn,
                    agent_id=request.agent_id,
                    speaker=request.speaker_name,
                    content=request.message,
                    occurred_at=request.occurred_at,
                    embedding=state.message_embedding,
                )
            break
        except StorageError as exc:
            if attempt == EVENT_INSERT_ATTEMPTS or not exc.transient:
                raise
            state.step.data["retries"] = attempt
            await asyncio.sleep(_RETRY_PAUSE_SEC * attempt)
    state.step.data.update(persisted=True, event_id=str(state.event_id))
