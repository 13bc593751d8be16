"""Rebuild the facts' HNSW index with a wider construction search (ef_construction 200 instead of 64).

With the default build, some facts were unreachable in the graph: an unfiltered nearest-neighbour search for a
near-duplicate of a stored fact (cosine 0.97) did not return it, so reconciliation never saw it. On the 120,000-fact
database of benchmarks/scale.py, 6 of 40 planted near-duplicates were missed with m=16, ef_construction=64 and none
with ef_construction=200 (build 106 s instead of about 60 s; every insert searches wider too). m stays 16: 32 built
slower (170 s) and missed one.

Revision ID: 0004
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision: str | None = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_memory_facts_embedding")
    op.execute(
        """
        CREATE INDEX ix_memory_facts_embedding ON memory_facts
            USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 200)"""
    )


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_memory_facts_embedding")
    op.execute("CREATE INDEX ix_memory_facts_embedding ON memory_facts USING hnsw (embedding vector_cosine_ops)")
