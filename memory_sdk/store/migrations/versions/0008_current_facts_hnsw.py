"""The facts' HNSW index: current facts only, as half-precision vectors.

0001 indexed every fact version's full-precision vector (`embedding vector_cosine_ops`). This index holds
`embedding::halfvec(dim)` of the current facts (open and not retracted) only:

- partial (`WHERE valid_to IS NULL AND invalidated_at IS NULL`): closing or retracting a fact is an UPDATE of the
  predicate's columns, never a HOT update, so under 0001 every close inserted the closed row's 1536-dimensional
  vector into the graph again. A row outside the predicate adds no index tuple, so a close costs no HNSW insert, and
  the scans that look for candidates walk a graph of current facts only (store/candidates.py: its WHERE implies
  the predicate, so the planner can use the index). A search of a past view (`as_of`, `known_at`) reaches closed
  facts too: store/search.py walks this index for the current ones and ranks the closed ones exactly.
- halfvec (pgvector >= 0.7): half the bytes per graph node, so inserts and scans touch half the memory. The index
  only orders candidates; every query re-ranks what it returns by the full-precision distance of the stored
  vectors, which stay `vector(dim)`.

- fillfactor 90 on memory_facts: a NOOP confirms a fact (last_confirmed_at, in no index), which can be a HOT
  update, touching no index at all, only when the row's page has room for the new version; pages filled to 100%
  (bulk loads, steady appends) made every confirm a non-HOT update that inserted the fact into every index again,
  this one included. Applies to pages written from now on.

Upgrading rebuilds the index in the migration's transaction: about 70-110 s per 110,000 facts measured here
(benchmarks/fact_index.py), during which writes wait on the table lock.

Measured in benchmarks/scale.py (docs/benchmarks.md, "The write path as memory grows").

Revision ID: 0008
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import text

revision = "0008"
down_revision: str | None = "0007"
branch_labels = None
depends_on = None

CURRENT_FACTS = "valid_to IS NULL AND invalidated_at IS NULL"


def upgrade() -> None:
    dim = op.get_bind().execute(text("SELECT value FROM memory_schema_info WHERE key = 'embedding_dim'")).scalar_one()
    op.execute("DROP INDEX IF EXISTS ix_memory_facts_embedding")
    op.execute(
        f"""
        CREATE INDEX ix_memory_facts_embedding ON memory_facts
            USING hnsw ((embedding::halfvec({int(dim)})) halfvec_cosine_ops) WHERE {CURRENT_FACTS}"""
    )
    op.execute("ALTER TABLE memory_facts SET (fillfactor = 90)")


def downgrade() -> None:
    op.execute("ALTER TABLE memory_facts RESET (fillfactor)")
    op.execute("DROP INDEX IF EXISTS ix_memory_facts_embedding")
    op.execute("CREATE INDEX ix_memory_facts_embedding ON memory_facts USING hnsw (embedding vector_cosine_ops)")
