"""A user's corrections of one fact: retract it (delete_fact), replace it (correct_fact), read its versions
(fact_history).

Both writes run in one tenant transaction under the advisory locks of the fact's subject (upsert.entity_lock_names),
so they queue behind, never interleave with, a write about the same entity, and they reuse the write path's own
code: a correction is an UPDATE decision applied by fact_writes.apply_decisions (temporal.plan_version_write places
it in the attribute's timeline, each close runs the invalidation cascade); a retraction closes the fact with
queries.close_fact(invalidate=True), the statement that closes a DELETE decision's target and its edges, and keeps
a record of who retracted it and why as the fact's successor, stored as history (docs/decisions.md, "User
corrections").

Neither calls the LLM. An unknown fact id and another agent's fact id are refused with the same message.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from uuid import UUID, uuid4

from memory_sdk.config import MemoryConfig
from memory_sdk.errors import InvalidInputError
from memory_sdk.llm.protocols import EmbeddingProvider
from memory_sdk.pipeline.fact_writes import apply_decisions
from memory_sdk.pipeline.llm_calls import embed_checked
from memory_sdk.pipeline.state import FactDecision, PreparedFact, WriteRequest, WriteState
from memory_sdk.pipeline.upsert import entity_lock_names
from memory_sdk.results import Fact, FactCorrection
from memory_sdk.store import queries
from memory_sdk.store.candidates import current_facts_with_identity
from memory_sdk.store.database import Connection, Database
from memory_sdk.store.rows import fact_from_record
from memory_sdk.text import fact_identity_key
from memory_sdk.validation import check_stored_text, check_uuid

__all__ = [
    "USER_CORRECTION",
    "USER_RETRACTION",
    "check_fact_id",
    "correct_fact",
    "delete_fact",
    "fact_history",
]

logger = logging.getLogger("memory_sdk")

# source_context of the versions a user's call stores (the pipeline's are "extracted" and the inference kinds).
USER_CORRECTION = "user_correction"
USER_RETRACTION = "user_retraction"
# What the user says is taken as said: the confidence of a corrected version.
USER_CONFIDENCE = 1.0
# Longest correction text and deletion reason (the write path's message limit is larger; a fact is one sentence).
MAX_FACT_CHARS = 2_000
# The speaker recorded on the versions a user's call stores.
USER_SPEAKER = "user"

_COLUMNS = ", ".join(column.name for column in queries.FACT_COLUMNS)


def check_fact_id(fact_id: object) -> UUID:
    return check_uuid("fact_id", fact_id)


def _unknown(fact_id: UUID) -> InvalidInputError:
    # One message for an id that does not exist and one that is another agent's: no oracle.
    return InvalidInputError(f"no fact {fact_id} in this agent's memory")


@dataclass(frozen=True)
class _Subject:
    """The fact to change, locked, with what the write path needs of it that the public Fact does not carry."""

    fact: Fact
    single_valued: bool


async def _lock_current(conn: Connection, agent_id: str, fact_id: UUID) -> _Subject:
    """Take the subject's write-path locks, then lock the fact; refuse an unknown fact or one no longer current."""
    row = await conn.fetchrow(
        """
        SELECT f.entity_key, e.display_name FROM memory_facts f
        JOIN memory_entities e ON e.agent_id = f.agent_id AND e.entity_key = f.entity_key
        WHERE f.agent_id = $1 AND f.id = $2
        """,
        agent_id,
        fact_id,
    )
    if row is None:
        raise _unknown(fact_id)
    await queries.lock_names(conn, agent_id, entity_lock_names(row["entity_key"], row["display_name"]))
    locked = await conn.fetchrow(
        f"SELECT {_COLUMNS} FROM memory_facts WHERE agent_id = $1 AND id = $2 FOR UPDATE",  # noqa: S608
        agent_id,
        fact_id,
    )
    if locked is None:  # erased meanwhile
        raise _unknown(fact_id)
    fact = fact_from_record(locked)
    if fact.merged_into_fact_id is not None:
        raise InvalidInputError(
            f"fact {fact_id} is no longer current: consolidation merged it into {fact.merged_into_fact_id}"
        )
    if fact.valid_to is not None or fact.invalidated_at is not None:
        raise InvalidInputError(
            f"fact {fact_id} is no longer current (closed {fact.valid_to:%Y-%m-%d %H:%M}): "
            "only a current fact can be deleted or corrected; fact_history() shows its versions"
            if fact.valid_to is not None
            else f"fact {fact_id} is no longer current: only a current fact can be deleted or corrected"
        )
    return _Subject(fact, bool(locked["single_valued"]))


async def delete_fact(
    db: Database, agent_id: str, fact_id: UUID, reason: str | None, schema_version: int
) -> FactCorrection:
    """Retract a current fact now: closed and invalidated, with the edges it is evidence for, its history kept,
    and a record of the retraction (who, why) stored as its successor."""
    reason = None if reason is None else check_stored_text("reason", reason, MAX_FACT_CHARS, blank=True).strip() or None
    async with db.tenant(agent_id) as conn:
        subject = await _lock_current(conn, agent_id, fact_id)
        fact = subject.fact
        # Now, or the fact's own start when it is dated later: then it was never true (an empty interval).
        at = max(datetime.now(UTC), fact.valid_from)
        closed, ended = await queries.close_fact(conn, agent_id, fact_id, at, invalidate=True)
        record = queries.FactRow(
            id=uuid4(),
            entity_key=fact.entity_key,
            fact_text=f"Retracted by the user: {fact.text}" + (f" (reason: {reason})" if reason else ""),
            attribute=None,  # never in the attribute's timeline
            single_valued=False,
            confidence=fact.confidence,
            importance=fact.importance,
            importance_category=fact.importance_category,
            speaker=USER_SPEAKER,
            source_event_id=None,
            source_context=USER_RETRACTION,
            valid_from=at,
            valid_to=at,  # history from the start: a record, never a current fact
            supersedes_fact_id=fact_id,
            embedding=None,  # never searched: a current-facts search skips it, and so does the HNSW index
            schema_version=schema_version,
            prompt_version=None,
            identity_key=None,
        )
        [added] = await queries.insert_facts(conn, agent_id, [record], [(record.id, fact.entity_key, True)])
    logger.info("delete_fact agent=%s fact=%s edges_closed=%d", agent_id, fact_id, len(ended))
    return FactCorrection(
        action="deleted", fact_id=fact_id, closed=[closed], added=added, relationships_closed=ended, reason=reason
    )


async def correct_fact(
    db: Database,
    embedder: EmbeddingProvider,
    config: MemoryConfig,
    schema_version: int,
    agent_id: str,
    fact_id: UUID,
    text: str,
    *,
    attribute: str | None,
    valid_from: datetime | None,
) -> FactCorrection:
    """Replace a current fact by the user's text: an UPDATE decision on it, applied by the write path's own code."""
    text = check_stored_text("text", text, MAX_FACT_CHARS).strip()  # blank refused: delete_fact removes a fact
    if attribute is not None:
        attribute = check_stored_text("attribute", attribute, 100, blank=True).strip() or None
    [embedding] = await embed_checked(embedder, [text], config)  # before any lock: a provider error stores nothing
    now = datetime.now(UTC)
    async with db.tenant(agent_id) as conn:
        subject = await _lock_current(conn, agent_id, fact_id)
        fact = subject.fact
        identical = await current_facts_with_identity(conn, agent_id, [(fact.entity_key, fact_identity_key(text))])
        existing = next(iter(identical.values()), None)
        if existing == fact_id:
            raise InvalidInputError(f"fact {fact_id} already says that: nothing to correct")
        if existing is not None:
            raise InvalidInputError(
                f"the memory already holds that as fact {existing}: delete_fact({fact_id}) removes the wrong one"
            )
        prepared = PreparedFact(
            subject_name=fact.entity_key,
            entity_key=fact.entity_key,
            text=text,
            attribute=attribute if attribute is not None else fact.attribute,
            single_valued=subject.single_valued,
            confidence=USER_CONFIDENCE,
            importance=fact.importance,
            importance_category=fact.importance_category,
            # Without a date the correction takes the fact's place from its start: it was wrong, not changed.
            valid_from=fact.valid_from if valid_from is None else valid_from,
            action_hint="UPDATE",
            source_context=USER_CORRECTION,
            embedding=embedding,
            prompt_version=None,
        )
        state = WriteState(
            request=WriteRequest(
                agent_id=agent_id,
                message=text,
                speaker_name=USER_SPEAKER,
                occurred_at=now,
                recent_messages=(),
                dry_run=False,
                verbose=False,
            ),
            config=config,
            schema_version=schema_version,
        )
        decision = FactDecision(prepared, "UPDATE", fact_id, reason="user correction", source="fast")
        [applied] = await apply_decisions(state, conn, [decision], {})
    added = applied.updated or applied.added
    closed = [version for version in (applied.deleted, *applied.superseded) if version is not None]
    logger.info(
        "correct_fact agent=%s fact=%s new=%s edges_closed=%d",
        agent_id,
        fact_id,
        None if added is None else added.id,
        len(applied.invalidated_relationships),
    )
    return FactCorrection(
        action="corrected",
        fact_id=fact_id,
        closed=sorted(closed, key=lambda version: version.id != fact_id),
        added=added,
        relationships_closed=applied.invalidated_relationships,
    )


_HISTORY_SQL = f"""
    WITH RECURSIVE earlier(id) AS (
        SELECT $2::uuid
        UNION
        SELECT f.supersedes_fact_id FROM memory_facts f JOIN earlier ON f.id = earlier.id
        WHERE f.agent_id = $1 AND f.supersedes_fact_id IS NOT NULL
    ), later(id) AS (
        SELECT $2::uuid
        UNION
        SELECT f.id FROM memory_facts f JOIN later ON f.supersedes_fact_id = later.id
        WHERE f.agent_id = $1
    )
    SELECT {_COLUMNS} FROM memory_facts
    WHERE agent_id = $1 AND id IN (SELECT id FROM earlier UNION SELECT id FROM later)
    ORDER BY recorded_at, valid_from, id
    """  # noqa: S608 - the column list is the store's constant


async def fact_history(db: Database, agent_id: str, fact_id: UUID) -> list[Fact]:
    """Every version of the fact's chain (what it superseded, what superseded it, transitively), oldest first."""
    async with db.tenant(agent_id) as conn:
        rows = await conn.fetch(_HISTORY_SQL, agent_id, fact_id)
    if not rows:
        raise _unknown(fact_id)
    return [fact_from_record(row) for row in rows]
