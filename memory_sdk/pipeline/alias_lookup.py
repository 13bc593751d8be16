"""Stage: find the agent's known entities mentioned in the message, with no LLM.

Instead of looping over aliases with a regex, the message's word n-grams (folded, 1..6 words) are looked up
in the alias registry's primary key: word-bounded, case- and accent-insensitive, and independent of how many
aliases the agent has.
"""

from __future__ import annotations

from memory_sdk.pipeline.state import Deps, KnownEntity, WriteState
from memory_sdk.store import queries
from memory_sdk.text import message_ngrams

__all__ = ["run"]


async def run(state: WriteState, deps: Deps) -> None:
    request = state.request
    grams = message_ngrams(request.message)
    async with deps.db.transaction(state.request.agent_id) as session:
        hits = await queries.lookup_aliases(session, request.agent_id, grams)
        matched = {row.entity_key: row.alias_norm for row in hits}
        rows = await queries.load_entities(session, request.agent_id, list(matched))
    for row in rows:
        state.known_entities[row.entity_key] = KnownEntity(
            key=row.entity_key,
            name=row.display_name,
            type=row.entity_type,
            profile_text=row.profile_text,
            matched_alias=matched[row.entity_key],
        )
    state.step.data.update(
        ngrams_checked=len(grams),
        matched={key: entity.matched_alias for key, entity in state.known_entities.items()},
    )
