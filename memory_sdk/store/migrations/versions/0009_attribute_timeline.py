"""An index for a subject's attribute timeline: every version of one single-valued attribute.

A fact that changes a single-valued attribute (lives_in, employer, job_title) locks and reads that attribute's
versions, current and closed, to fit itself into the timeline (store/queries.lock_timeline, run by
pipeline/fact_writes.py), filtering on (agent_id, entity_key, attribute). The only index with the attribute holds
open values alone (uq_memory_facts_open_single_valued, which serves store/candidates.open_single_valued_facts), so
the planner walked the subject's whole history in ix_memory_facts_valid (agent_id, entity_key,
valid_from) and filtered, 41.7 ms median per timeline at 100,000 facts for a subject of 64,000 versions
(benchmarks/scale.py's speaker; a quarter of its writes are moves), where a timeline holds a few rows.

Partial (`attribute IS NOT NULL`): facts without an attribute, most of them, add no index tuple. Closed versions are
in it, as the timeline needs them.

Revision ID: 0009
"""

from __future__ import annotations

from alembic import op

revision = "0009"
down_revision: str | None = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "CREATE INDEX ix_memory_facts_attribute ON memory_facts (agent_id, entity_key, attribute) "
        "WHERE attribute IS NOT NULL"
    )


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_memory_facts_attribute")
