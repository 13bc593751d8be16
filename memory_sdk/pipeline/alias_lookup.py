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
        found = await queries.find_entities(session, request.agent_id, aliases=grams)
    matched = {key: alias for alias, key in found.by_alias.items()}
    for key, alias in matched.items():
        entity = found.entities[key]
        state.known_entities[key] = KnownEntity(
            key=key, name=entity.name, type=entity.type, profile_text=entity.profile_text, matched_alias=alias
        )
    state.step.data.update(
        ngrams_checked=len(grams),
        matched={key: entity.matched_alias for key, entity in state.known_entities.items()},
    )
