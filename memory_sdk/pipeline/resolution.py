"""Stage: resolve each extracted entity to an entity key of the agent's memory.

Phase 1 (exact, no LLM): the speaker and their pronouns, the alias registry (display names are registered as
aliases too), then the entity key itself. Names that match nothing become new entities. Fuzzy and LLM phases
come next (issue 4); the stage already records, per name, the phase that resolved it.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Row

from memory_sdk.llm.schemas import ExtractedEntity
from memory_sdk.pipeline.state import Deps, WriteState
from memory_sdk.results import ResolutionPhase, ResolvedEntity
from memory_sdk.store import queries
from memory_sdk.text import entity_key, normalise_alias

__all__ = ["run"]


async def run(state: WriteState, deps: Deps) -> None:
    request = state.request
    speaker_key = entity_key("person", request.speaker_name)
    entities = state.extraction.entities
    wanted = {normalise_alias(name) for entity in entities for name in (entity.name, *entity.aliases)}
    keys_by_type = [entity_key(entity.type, entity.name) for entity in entities]
    async with deps.db.transaction() as session:
        alias_rows = await queries.lookup_aliases(session, request.agent_id, sorted(wanted))
        alias_hits: dict[str, str] = {row.alias_norm: row.entity_key for row in alias_rows}
        existing = {
            row.entity_key: row
            for row in await queries.load_entities(
                session, request.agent_id, sorted({*alias_hits.values(), *keys_by_type, speaker_key})
            )
        }
    trace: list[dict[str, object]] = []
    for entity, typed_key in zip(entities, keys_by_type, strict=True):
        resolved = _resolve_one(entity, typed_key, speaker_key, request.speaker_name, alias_hits, existing)
        for name in (entity.name, *entity.aliases):
            state.resolved[normalise_alias(name)] = resolved
        known_norms = {norm for norm, key in alias_hits.items() if key == resolved.key}
        new_aliases = {
            normalise_alias(name): name
            for name in (resolved.display_name, entity.name, *entity.aliases)
            if normalise_alias(name) and normalise_alias(name) not in known_norms
        }
        state.aliases_to_register.setdefault(resolved.key, set()).update(new_aliases.values())
        trace.append({"name": entity.name, "key": resolved.key, "phase": resolved.phase, "created": resolved.created})
    state.step.data["entities"] = trace


def _resolve_one(
    entity: ExtractedEntity,
    typed_key: str,
    speaker_key: str,
    speaker_name: str,
    alias_hits: dict[str, str],
    existing: dict[str, Row[Any]],
) -> ResolvedEntity:
    def found(key: str, phase: ResolutionPhase) -> ResolvedEntity:
        row = existing[key]
        return ResolvedEntity(
            name=entity.name,
            key=key,
            display_name=row.display_name,
            type=row.entity_type,
            phase=phase,
        )

    if entity.name == speaker_name:
        if speaker_key in existing:
            return found(speaker_key, "speaker")
        return ResolvedEntity(
            name=entity.name,
            key=speaker_key,
            display_name=speaker_name,
            type="person",
            phase="speaker",
            created=True,
        )
    for name in (entity.name, *entity.aliases):
        key = alias_hits.get(normalise_alias(name))
        if key is not None and key in existing:
            return found(key, "alias")
    if typed_key in existing:
        return found(typed_key, "exact")
    return ResolvedEntity(
        name=entity.name, key=typed_key, display_name=entity.name, type=entity.type, phase="new", created=True
    )
