"""Binary codes of the facts' vectors, readable per subject from one index: how the candidate read ranks a large
subject (store/candidates.py).

`memory_facts.embedding_bits` is `binary_quantize(embedding)::bit(dim)` (pgvector >= 0.7: one bit per dimension,
set where the value is positive; 192 bytes for 1536 dimensions against the vector's 6 KB), kept by PostgreSQL
itself (GENERATED ... STORED: every writer, the raw asyncpg write path and COPY included, gets it without naming it).

`ix_memory_facts_current_bits` replaces the current facts' index on `(agent_id, entity_key, identity_key)` (0003:
the identity lookup, which it still serves) and carries `id` and the codes too (INCLUDE), so one subject's current
codes are read by an index-only scan of it, never touching the vectors' TOAST (nor the table's pages, once vacuum
has marked them all-visible).

Why: the candidate read (store/candidates.py) ranks a subject of 500 current facts or more by Hamming distance over
these codes and re-ranks the best 400 by the full-precision cosine distance. The facts' HNSW index (0008) missed
planted near-duplicates in such subjects however it was searched (a 60,000-fact subject at 100,000 facts: 0.55-0.79
of the exact top 5 with e5 geometry, targets found 0.15-1.00 by kind and build), and an exact scan of the full
vectors costs ~1.5 s; the codes' shortlist found every target with e5 geometry (top 5: 0.935). Measured in
benchmarks/recall.py and benchmarks/fact_index.py (docs/benchmarks.md, "Exact ranking of large subjects over binary
codes").

Upgrading rewrites memory_facts (a stored generated column) and rebuilds every index on it, the HNSW index
included. The migration raises maintenance_work_mem for its own transaction so the rebuilt graph fits in memory
(its size and a quarter, at most 2 GB, never lowered): 54.5 s for 110,100 facts on the idle 2-core machine, against
155 s at the embedded server's default 64 MB (428 s under load ~7.5); the downgrade takes under 1 s. Writes wait
on the table lock meanwhile.

Revision ID: 0010
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import text

revision = "0010"
down_revision: str | None = "0009"
branch_labels = None
depends_on = None

CURRENT_FACTS = "valid_to IS NULL AND invalidated_at IS NULL"
_MB = 2**20
# The rewrite rebuilds the facts' HNSW index: a build whose graph does not fit in maintenance_work_mem goes on
# on disk, several times slower (155 s for 110,100 facts at the embedded server's default 64 MB, idle).
_BUILD_MEMORY_CAP_MB = 2048


def build_memory_mb(index_bytes: int, current_bytes: int) -> int | None:
    """The maintenance_work_mem (MB) that holds the rebuilt HNSW graph (its current size and a quarter, plus 64 MB),
    at most 2 GB; None when the setting already holds it (it is never lowered)."""
    wanted = min(_BUILD_MEMORY_CAP_MB, index_bytes * 5 // 4 // _MB + 64)
    return wanted if wanted * _MB > current_bytes else None


def upgrade() -> None:
    bind = op.get_bind()
    dim_sql = text("SELECT value FROM memory_schema_info WHERE key = 'embedding_dim'")
    dim = int(bind.execute(dim_sql).scalar_one())
    sizes = bind.execute(
        text(
            "SELECT coalesce(pg_relation_size(to_regclass('ix_memory_facts_embedding')), 0), "
            "pg_size_bytes(current_setting('maintenance_work_mem'))"
        )
    ).one()
    memory_mb = build_memory_mb(int(sizes[0]), int(sizes[1]))
    if memory_mb is not None:  # for this transaction only
        op.execute(f"SET LOCAL maintenance_work_mem = '{memory_mb}MB'")
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
