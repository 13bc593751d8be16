"""Stage: find the agent's known entities mentioned in the message, and what memory holds about them; no LLM.

Instead of looping over aliases with a regex, the message's word n-grams (folded, 1..6 words) are looked up
in the alias registry's primary key: word-bounded, case- and accent-insensitive, and independent of how many
aliases the agent has. In the same short transaction (the event's, when event_log logged the message: its
`read_known` runs there), each known entity gets its current facts nearest to the message (store/candidates.py,
one statement for all): top-K for an entity without a usable profile, the PROFILED_TOP_K nearest next to a usable
profile. pre_retrieval then fits them into the token budget. A profiled entity still gets a few facts because the
informed extraction decides UPDATE / NOOP / DELETE only against facts it was shown by id (docs/decisions.md, "One
call per write"); with the profile alone, every fact about it that has a similar stored fact costs a
reconciliation call.

A profile is usable only when it was built from the entity's facts as they are now. One built before the latest
change of its facts (a move, a job left, a fact retracted or merged: store/profiles.py) may say what is no longer
true, and the extraction would take it as known memory; such a profile is left out, as if the entity had none,
and its current facts stand in for it until `consolidate` rebuilds it (docs/consolidation.md).
"""

from __future__ import annotations

from memory_sdk.pipeline.state import Deps, KnownEntity, KnownRead, WriteState
from memory_sdk.store import registry
from memory_sdk.store.candidates import CandidateProbe, Shortlists, nearest_current_facts, while_running
from memory_sdk.store.database import Connection
from memory_sdk.text import entity_key, message_ngrams, normalise_alias

__all__ = ["PROFILED_TOP_K", "read_known", "run"]

# Facts shown next to a usable profile: the nearest to the message, the ones a new fact would update or repeat.
PROFILED_TOP_K = 3


async def run(state: WriteState, deps: Deps) -> None:
    read = state.known_read
    if read is None:  # the event was not logged by this write (a retry or reprocess takes it over), or its read failed
        async with deps.db.tenant(state.request.agent_id) as conn:
            read = await read_known(conn, state, "alias_lookup")
    state.known_read = None
    state.known_entities = dict(read.entities)
    state.step.data.update(
        ngrams_checked=read.ngrams_checked,
        matched={key: entity.matched_alias for key, entity in read.entities.items()},
        stale_profiles=read.stale_profiles,
        read_by=read.read_by,
    )


async def read_known(conn: Connection, state: WriteState, read_by: str) -> KnownRead:
    """The whole read of this stage, in the caller's transaction: the known entities the message names and their
    facts nearest to it. event_log runs it in the event's transaction (one transaction fewer per write), this stage
    in one of its own when event_log did not; the same code either way."""
    request = state.request
    grams = message_ngrams(request.message)
    top_k = state.config.informed_extraction_topk
    # The speaker too: "I", "eu" name them in most of their messages, and their own facts are the ones a
    # first-person fact updates (the informed call decides against what it sees: docs/decisions.md).
    speaker = entity_key("person", request.speaker_name)
    # The speaker's shortlist (a large subject's, when the client holds its codes) is picked while the server looks
    # the names up: the two run at once.
    shortlists = Shortlists()
    found = await while_running(
        registry.find_entities(conn, request.agent_id, aliases=grams, keys=[speaker]),
        lambda: shortlists.pick(conn, request.agent_id, [CandidateProbe(speaker, state.message_embedding)], top_k),
    )
    matched = {key: alias for alias, key in found.by_alias.items()}
    if speaker in found.entities:
        matched.setdefault(speaker, normalise_alias(request.speaker_name))
    with_profile = [key for key in matched if found.entities[key].profile_text]
    stale = {key for key in with_profile if found.entities[key].profile_stale}  # read with the entities
    profiled = {key for key in with_profile if key not in stale}
    keys = list(matched)
    probes = [
        CandidateProbe(key, state.message_embedding, limit=min(top_k, PROFILED_TOP_K) if key in profiled else None)
        for key in keys
    ]
    nearest = await nearest_current_facts(conn, request.agent_id, probes, top_k, shortlists=shortlists)
    found_facts = dict(zip(keys, nearest, strict=True))
    known: dict[str, KnownEntity] = {}
    for key, alias in matched.items():
        entity = found.entities[key]
        known[key] = KnownEntity(
            key=key,
            name=entity.name,
            type=entity.type,
            profile_text=None if key in stale else entity.profile_text,
            matched_alias=alias,
            facts=tuple((c.text, c.similarity or 0.0) for c in found_facts.get(key, ())),
            fact_ids=tuple(c.id for c in found_facts.get(key, ())),
        )
    return KnownRead(known, len(grams), sorted(stale), read_by)
