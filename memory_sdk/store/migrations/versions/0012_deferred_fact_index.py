"""The facts' HNSW index filled after the write, not in it: `memory_facts.indexed`.

The write's fact insert, measured (docs/benchmarks.md, "The fact insert"): 2-3 ms of server
CPU per fact is pgvector's HNSW insert, ~6-8 ms of every write of three facts, the largest single statement of the
write. Nothing on the write's own path reads the index (store/candidates.py ranks subjects exactly or over binary
codes); search does. So a fact is now inserted outside the index and added to it right after its write commits:

- `memory_facts.indexed` (default true): the HNSW index (0008) holds current facts that are `indexed`. The write
  path inserts its facts with `indexed = false`; store/indexing.py (FactIndexer, run by the client's Database in the
  background once a transaction that inserted facts commits) sets it in batches, and that UPDATE is what inserts
  them into the graph. Rows written any other way (bulk loads, older code) are indexed as they are inserted.
- `ix_memory_facts_unindexed`: the agent's current facts not yet in the graph, the few that search ranks exactly
  beside its walk of the graph (store/search.py) and the indexer picks up, whichever process inserted them.

The subject-sequence trigger (0011) fires on changes of validity, subject or vector only: setting `indexed`
changes nothing a cache of codes or a profile holds.

Upgrading rebuilds the HNSW index with the new predicate in the migration's transaction (as 0008 did: ~30 s per
100,000 current facts measured here), during which writes wait on the table lock.

Revision ID: 0012
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import text

revision = "0012"
down_revision: str | None = "0011"
branch_labels = None
depends_on = None

CURRENT_FACTS = "valid_to IS NULL AND invalidated_at IS NULL"


def _hnsw(dim: int, predicate: str) -> str:
    return f"""
        CREATE INDEX ix_memory_facts_embedding ON memory_facts
            USING hnsw ((embedding::halfvec({dim})) halfvec_cosine_ops) WHERE {predicate}"""


def _dim() -> int:
    value = op.get_bind().execute(text("SELECT value FROM memory_schema_info WHERE key = 'embedding_dim'"))
    return int(value.scalar_one())


def upgrade() -> None:
    op.execute("ALTER TABLE memory_facts ADD COLUMN indexed boolean NOT NULL DEFAULT true")
    op.execute("DROP INDEX IF EXISTS ix_memory_facts_embedding")
    op.execute(_hnsw(_dim(), f"{CURRENT_FACTS} AND indexed"))
    op.execute(
        f"CREATE INDEX ix_memory_facts_unindexed ON memory_facts (agent_id) WHERE {CURRENT_FACTS} AND NOT indexed"
    )


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_memory_facts_unindexed")
    op.execute("DROP INDEX IF EXISTS ix_memory_facts_embedding")
    op.execute(_hnsw(_dim(), CURRENT_FACTS))
    op.execute("ALTER TABLE memory_facts DROP COLUMN indexed")
