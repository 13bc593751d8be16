"""Binary codes of the facts' vectors, readable per subject from one index: the exact candidate ranking of a large
subject (store/candidates.py).

`memory_facts.embedding_bits` is `binary_quantize(embedding)::bit(dim)` (pgvector >= 0.7: one bit per dimension,
set where the value is positive; 192 bytes for 1536 dimensions against the vector's 6 KB), kept by PostgreSQL
itself (GENERATED ... STORED: every writer, the raw asyncpg write path and COPY included, gets it without naming it).

`ix_memory_facts_current_bits` replaces the current facts' index on `(agent_id, entity_key, identity_key)` (0003:
the identity lookup, which it still serves) and carries `id` and the codes too (INCLUDE), so one subject's current
codes are read by an index-only scan of it, never touching the table's pages or the vectors' TOAST. The candidate
read ranks a subject of 500 current facts or more by Hamming distance over these codes and re-ranks the best few
hundred by the full-precision cosine distance; the facts' HNSW index (0008) missed near-duplicates in such subjects
(a 60,000-fact subject at 100,000 facts: 0.69-0.79 of the exact top 5 with e5 geometry, docs/benchmarks.md), an
exact scan of the full vectors costs ~1.5 s. Measured in benchmarks/recall.py (docs/benchmarks.md, "Exact ranking of
large subjects over binary codes").

Adding a stored generated column rewrites memory_facts and rebuilds each of its indexes, the HNSW index included:
the migration's time per 110,000 facts is in docs/benchmarks.md (the same section); writes wait on the table lock
meanwhile.

Revision ID: 0009
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import text

revision = "0009"
down_revision: str | None = "0008"
branch_labels = None
depends_on = None

CURRENT_FACTS = "valid_to IS NULL AND invalidated_at IS NULL"


def upgrade() -> None:
    dim_sql = text("SELECT value FROM memory_schema_info WHERE key = 'embedding_dim'")
    dim = int(op.get_bind().execute(dim_sql).scalar_one())
    # Dropped before the rewrite, which rebuilds every index the table still has.
    op.execute("DROP INDEX IF EXISTS ix_memory_facts_current_identity")
    op.execute(
        f"""
        ALTER TABLE memory_facts ADD COLUMN embedding_bits bit({dim})
            GENERATED ALWAYS AS (binary_quantize(embedding)::bit({dim})) STORED"""
    )
    op.execute(
        f"""
        CREATE INDEX ix_memory_facts_current_bits ON memory_facts (agent_id, entity_key, identity_key)
            INCLUDE (id, embedding_bits) WHERE {CURRENT_FACTS}"""
    )


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_memory_facts_current_bits")
    op.execute("ALTER TABLE memory_facts DROP COLUMN IF EXISTS embedding_bits")
    op.execute(
        f"""
        CREATE INDEX ix_memory_facts_current_identity ON memory_facts (agent_id, entity_key, identity_key)
            WHERE {CURRENT_FACTS}"""
    )
