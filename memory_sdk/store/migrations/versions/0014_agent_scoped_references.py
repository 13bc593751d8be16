"""References inside one agent: every foreign key between memory rows carries `agent_id`.

Before this revision the references between rows named `id` alone (`memory_pipeline_runs.event_id`,
`memory_facts.source_event_id`, `.supersedes_fact_id`, `.merged_into_fact_id`, `memory_fact_entities.fact_id`,
`memory_relationships.evidence_fact_id`), and PostgreSQL checks foreign keys without row-level security. A row of
agent A could therefore name a row of agent V (a crafted `restore()` document did, issue 39): the insert told A
whether V's id existed, V's `forget()` then failed on A's reference for good, and V's forget cascaded into A's fact
links. Each reference is now a composite key `(agent_id, <column>) -> (agent_id, id)`: a row can only name a row of
its own agent, whatever another agent's ids are, and the refusal reads the same whether the foreign id exists or not.

- `memory_events` and `memory_facts` gain UNIQUE (agent_id, id), the referenced key (id alone stays the primary key:
  ids are unique across agents, which restore's remapping relies on).
- The six keys are replaced with the same ON DELETE behaviour (CASCADE for fact links, NO ACTION for the others);
  `memory_relationships.last_event_id` (0004), which had no key, gets one too.
- The references with no index on their column get a partial one on (agent_id, column): a delete of the referenced
  rows (forget) checks each of them, which without an index read every row of the agent per deleted row.
- Rows that already name another agent's row (or, for last_event_id, no row) would fail the new keys, and the
  database could not be opened: such a reference is cleared (set NULL; a fact link is deleted), counted in the log.

Revision ID: 0014
"""

from __future__ import annotations

import logging

from alembic import op
from sqlalchemy import text

revision = "0014"
down_revision: str | None = "0013"
branch_labels = None
depends_on = None

logger = logging.getLogger("memory_sdk")

# (table, column, referenced table, ON DELETE, the key it replaces or None, partial index to add or None)
REFERENCES = (
    ("memory_pipeline_runs", "event_id", "memory_events", "NO ACTION", "memory_pipeline_runs_event_id_fkey", None),
    ("memory_facts", "source_event_id", "memory_events", "NO ACTION", "memory_facts_source_event_id_fkey", None),
    (
        "memory_facts",
        "supersedes_fact_id",
        "memory_facts",
        "NO ACTION",
        "memory_facts_supersedes_fact_id_fkey",
        "ix_memory_facts_supersedes",
    ),
    (
        "memory_facts",
        "merged_into_fact_id",
        "memory_facts",
        "NO ACTION",
        "memory_facts_merged_into_fact_id_fkey",
        "ix_memory_facts_merged_into",
    ),
    ("memory_fact_entities", "fact_id", "memory_facts", "CASCADE", "memory_fact_entities_fact_id_fkey", None),
    (
        "memory_relationships",
        "evidence_fact_id",
        "memory_facts",
        "NO ACTION",
        "memory_relationships_evidence_fact_id_fkey",
        None,
    ),
    ("memory_relationships", "last_event_id", "memory_events", "NO ACTION", None, "ix_memory_relationships_last_event"),
)
REFERENCED = ("memory_events", "memory_facts")


def agent_key(table: str) -> str:
    return f"uq_{table}_agent_id"


def foreign_key(table: str, column: str) -> str:
    return f"fk_{table}_{column}"


def upgrade() -> None:
    for table in REFERENCED:
        op.execute(f"ALTER TABLE {table} ADD CONSTRAINT {agent_key(table)} UNIQUE (agent_id, id)")
    _clear_foreign_references()
    for table, column, referenced, on_delete, old, index in REFERENCES:
        if old is not None:
            op.execute(f"ALTER TABLE {table} DROP CONSTRAINT IF EXISTS {old}")
        op.execute(
            f"""
            ALTER TABLE {table} ADD CONSTRAINT {foreign_key(table, column)}
                FOREIGN KEY (agent_id, {column}) REFERENCES {referenced} (agent_id, id) ON DELETE {on_delete}"""
        )
        if index is not None:
            op.execute(f"CREATE INDEX {index} ON {table} (agent_id, {column}) WHERE {column} IS NOT NULL")


def _clear_foreign_references() -> None:
    """Clear what the new keys would refuse. Row-level security is forced on these tables (0002) and would hide
    every row from a migrating owner that is not a superuser: lifted for this transaction's statements only."""
    bind = op.get_bind()
    touched = sorted({table for table, *_ in REFERENCES} | set(REFERENCED))  # the referenced ones are read too
    for table in touched:
        op.execute(f"ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY")
    for table, column, referenced, _, _, _ in REFERENCES:
        outside = (
            f"{column} IS NOT NULL AND NOT EXISTS "
            f"(SELECT 1 FROM {referenced} r WHERE r.agent_id = {table}.agent_id AND r.id = {table}.{column})"
        )
        if table == "memory_fact_entities":
            cleared = bind.execute(text(f"DELETE FROM {table} WHERE {outside}"))
        else:
            cleared = bind.execute(text(f"UPDATE {table} SET {column} = NULL WHERE {outside}"))
        if cleared.rowcount:
            logger.warning(
                "migration 0014: cleared %d references of %s.%s outside their agent", cleared.rowcount, table, column
            )
    for table in touched:
        op.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")


def downgrade() -> None:
    for table, column, referenced, on_delete, old, index in REFERENCES:
        if index is not None:
            op.execute(f"DROP INDEX IF EXISTS {index}")
        op.execute(f"ALTER TABLE {table} DROP CONSTRAINT IF EXISTS {foreign_key(table, column)}")
        if old is not None:
            op.execute(
                f"ALTER TABLE {table} ADD CONSTRAINT {old} FOREIGN KEY ({column}) REFERENCES {referenced} (id) "
                f"ON DELETE {on_delete}"
            )
    for table in REFERENCED:
        op.execute(f"ALTER TABLE {table} DROP CONSTRAINT IF EXISTS {agent_key(table)}")
