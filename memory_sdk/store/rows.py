"""Stored rows as the public value objects."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Row

from memory_sdk.results import Fact, Relationship

__all__ = ["fact_from_record", "fact_from_row", "relationship_from_record", "relationship_from_row"]


def fact_from_row(row: Row[Any]) -> Fact:
    """A stored fact row (SQLAlchemy) as the public Fact."""
    return fact_from_record(row._mapping)


def fact_from_record(row: Any) -> Fact:
    """A stored fact as the public Fact, from any mapping of its columns (an asyncpg Record, a row mapping)."""
    return Fact(
        id=row["id"],
        agent_id=row["agent_id"],
        entity_key=row["entity_key"],
        text=row["fact_text"],
        attribute=row["attribute"],
        confidence=row["confidence"],
        importance=row["importance"],
        importance_category=row["importance_category"],
        speaker=row["speaker"],
        source_event_id=row["source_event_id"],
        source_context=row["source_context"],
        valid_from=row["valid_from"],
        valid_to=row["valid_to"],
        recorded_at=row["recorded_at"],
        invalidated_at=row["invalidated_at"],
        supersedes_fact_id=row["supersedes_fact_id"],
        last_confirmed_at=row["last_confirmed_at"],
        prompt_version=row["prompt_version"],
        schema_version=row["schema_version"],
        merged_into_fact_id=row["merged_into_fact_id"],
    )


def relationship_from_row(row: Row[Any]) -> Relationship:
    """A stored relationship row (SQLAlchemy) as the public Relationship."""
    return relationship_from_record(row._mapping)


def relationship_from_record(row: Any) -> Relationship:
    """A stored relationship as the public Relationship, from any mapping of its columns."""
    return Relationship(
        id=row["id"],
        agent_id=row["agent_id"],
        source_key=row["source_key"],
        target_key=row["target_key"],
        rel_type=row["rel_type"],
        strength=row["strength"],
        evidence_fact_id=row["evidence_fact_id"],
        valid_from=row["valid_from"],
        valid_to=row["valid_to"],
        invalidated_at=row["invalidated_at"],
    )
