"""SQLAlchemy Core descriptions of the tables, for building queries. The DDL lives in migrations/.

Nullability, unique keys and foreign keys are described as the migrations leave them (a test compares them with
the database): a restore checks a document against them before anything is inserted (memory_sdk/export.py).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    Boolean,
    Column,
    DateTime,
    Float,
    ForeignKeyConstraint,
    Integer,
    MetaData,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlalchemy.types import UserDefinedType

__all__ = [
    "aliases",
    "entities",
    "events",
    "fact_entities",
    "facts",
    "metadata",
    "pipeline_runs",
    "relationships",
]

metadata = MetaData()


class Vector(UserDefinedType[list[float]]):
    """A pgvector column sent and read in pgvector's binary form.

    Database registers pgvector's asyncpg codec on every connection, so a list of floats is bound as is (no
    decimal text built on our side and parsed on the server's) and a stored vector is read back as a list.
    """

    cache_ok = True

    def get_col_spec(self, **kw: Any) -> str:
        return "VECTOR"

    def bind_processor(self, dialect: Any) -> None:
        return None

    def result_processor(self, dialect: Any, coltype: Any) -> Any:
        def to_list(value: Any) -> list[float] | None:
            return None if value is None else list(value.to_list())

        return to_list

    class Comparator(UserDefinedType.Comparator[list[float]]):
        def cosine_distance(self, other: Any) -> Any:
            return self.op("<=>", return_type=Float)(other)

    comparator_factory = Comparator


def _ts(name: str, nullable: bool = True) -> Column[object]:
    return Column(name, DateTime(timezone=True), nullable=nullable)


def _agent_reference(column: str, referenced: str, name: str, ondelete: str | None = None) -> ForeignKeyConstraint:
    """A reference to a row of the same agent: (agent_id, column) -> referenced (agent_id, id) (migration 0014).
    A row can never name another agent's row, whatever ids it is given."""
    return ForeignKeyConstraint(
        ["agent_id", column], [f"{referenced}.agent_id", f"{referenced}.id"], name=name, ondelete=ondelete
    )


def _entity_reference(name: str, ondelete: str | None = None) -> ForeignKeyConstraint:
    return ForeignKeyConstraint(
        ["agent_id", "entity_key"],
        ["memory_entities.agent_id", "memory_entities.entity_key"],
        name=name,
        ondelete=ondelete,
    )


events = Table(
    "memory_events",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("agent_id", Text, nullable=False),
    Column("speaker", Text, nullable=False),
    Column("content", Text, nullable=False),
    _ts("occurred_at", nullable=False),
    _ts("recorded_at", nullable=False),
    Column("embedding", Vector()),
    Column("emotion", JSONB),
    Column("message_id", Text),
    UniqueConstraint("agent_id", "id", name="uq_memory_events_agent_id"),
)

pipeline_runs = Table(
    "memory_pipeline_runs",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("agent_id", Text, nullable=False),
    Column("event_id", UUID(as_uuid=True)),
    Column("status", Text, nullable=False),
    Column("extraction_path", Text),
    Column("llm_calls", Integer, nullable=False),
    Column("input_tokens", Integer, nullable=False),
    Column("output_tokens", Integer, nullable=False),
    Column("error", Text),
    Column("trace", JSONB),
    _ts("started_at", nullable=False),
    _ts("finished_at"),
    _ts("heartbeat_at"),
    Column("result", JSONB),
    _agent_reference("event_id", "memory_events", "fk_memory_pipeline_runs_event_id"),
)

entities = Table(
    "memory_entities",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("agent_id", Text, nullable=False),
    Column("entity_key", Text, nullable=False),
    Column("display_name", Text, nullable=False),
    Column("entity_type", Text, nullable=False),
    Column("profile_text", Text),
    Column("name_embedding", Vector()),
    Column("facts_version", Integer, nullable=False),
    Column("profile_facts_version", Integer),
    _ts("profile_built_at"),
    Column("mention_count", Integer, nullable=False),
    _ts("created_at", nullable=False),
    _ts("updated_at", nullable=False),
    UniqueConstraint("agent_id", "entity_key", name="uq_memory_entities_agent_key"),
)

aliases = Table(
    "memory_entity_aliases",
    metadata,
    Column("agent_id", Text, primary_key=True),
    Column("alias_norm", Text, primary_key=True),
    Column("alias", Text, nullable=False),
    Column("entity_key", Text, nullable=False),
    Column("source", Text, nullable=False),
    _ts("created_at", nullable=False),
    _entity_reference("memory_entity_aliases_agent_id_entity_key_fkey", ondelete="CASCADE"),
)

facts = Table(
    "memory_facts",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("agent_id", Text, nullable=False),
    Column("entity_key", Text, nullable=False),
    Column("fact_text", Text, nullable=False),
    Column("attribute", Text),
    Column("single_valued", Boolean, nullable=False),
    Column("confidence", Float, nullable=False),
    Column("importance", Float, nullable=False),
    Column("importance_category", Text, nullable=False),
    Column("speaker", Text),
    Column("source_event_id", UUID(as_uuid=True)),
    Column("source_context", Text, nullable=False),
    _ts("valid_from", nullable=False),
    _ts("valid_to"),
    _ts("recorded_at", nullable=False),
    _ts("closed_at"),
    _ts("invalidated_at"),
    Column("supersedes_fact_id", UUID(as_uuid=True)),
    _ts("last_confirmed_at"),
    Column("embedding", Vector()),
    Column("schema_version", Integer, nullable=False),
    Column("prompt_version", Text),
    Column("identity_key", Text),
    Column("merged_into_fact_id", UUID(as_uuid=True)),
    # In the facts' HNSW index yet (migration 0012; store/indexing.py).
    Column("indexed", Boolean, nullable=False),
    UniqueConstraint("agent_id", "id", name="uq_memory_facts_agent_id"),
    _entity_reference("memory_facts_agent_id_entity_key_fkey"),
    _agent_reference("source_event_id", "memory_events", "fk_memory_facts_source_event_id"),
    _agent_reference("supersedes_fact_id", "memory_facts", "fk_memory_facts_supersedes_fact_id"),
    _agent_reference("merged_into_fact_id", "memory_facts", "fk_memory_facts_merged_into_fact_id"),
)

fact_entities = Table(
    "memory_fact_entities",
    metadata,
    Column("fact_id", UUID(as_uuid=True), primary_key=True),
    Column("agent_id", Text, nullable=False),
    Column("entity_key", Text, primary_key=True),
    Column("is_primary", Boolean, nullable=False),
    _agent_reference("fact_id", "memory_facts", "fk_memory_fact_entities_fact_id", ondelete="CASCADE"),
)

relationships = Table(
    "memory_relationships",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True),
    Column("agent_id", Text, nullable=False),
    Column("source_key", Text, nullable=False),
    Column("target_key", Text, nullable=False),
    Column("rel_type", Text, nullable=False),
    Column("strength", Float, nullable=False),
    Column("mention_count", Integer, nullable=False),
    Column("evidence_fact_id", UUID(as_uuid=True)),
    _ts("valid_from"),
    _ts("valid_to"),
    _ts("invalidated_at"),
    _ts("created_at", nullable=False),
    _ts("updated_at", nullable=False),
    Column("last_event_id", UUID(as_uuid=True)),
    _agent_reference("evidence_fact_id", "memory_facts", "fk_memory_relationships_evidence_fact_id"),
    _agent_reference("last_event_id", "memory_events", "fk_memory_relationships_last_event_id"),
)
