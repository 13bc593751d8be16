"""Stage: embed the message and store it as an immutable event, committed before any LLM work."""

from __future__ import annotations

from memory_sdk.errors import ProviderError
from memory_sdk.pipeline.llm_calls import embed_texts
from memory_sdk.pipeline.state import Deps, WriteState
from memory_sdk.store import queries

__all__ = ["run"]


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
    async with deps.db.transaction(state.request.agent_id) as session:
        state.event_id = await queries.insert_event(
            session,
            agent_id=request.agent_id,
            speaker=request.speaker_name,
            content=request.message,
            occurred_at=request.occurred_at,
            embedding=state.message_embedding,
        )
        state.run_id = await queries.insert_run(session, agent_id=request.agent_id, event_id=state.event_id)
    state.step.data.update(persisted=True, event_id=str(state.event_id))
