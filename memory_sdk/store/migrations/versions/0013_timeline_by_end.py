"""The attribute timeline read from where a new version starts: ix_memory_facts_attribute ordered by valid_to.

A new version of an attribute is placed by the versions that are open or end after it starts
(pipeline/temporal.bears_on): one that ended at or before then can neither hold that moment nor start after it.
store/queries.lock_timeline read and locked every version of the attribute instead, so a move cost grew with the
attribute's history: 2,070 versions of `lives_in` on the benchmark agent of 100,000 facts (ab.py's runs move the
speaker every fourth write) took 3-15 ms of server time and ~2,000 rows decoded by the client at each move, where one
row (the open version) is all a message about now needs. The index gains `valid_to` as its last column, so the
open versions (`valid_to IS NULL`) and those ending after a moment are two range scans of it; its other reader, by
(agent_id, entity_key, attribute), reads the same prefix as before.

Revision ID: 0013
"""

from __future__ import annotations

from alembic import op

revision = "0013"
down_revision: str | None = "0012"
branch_labels = None
depends_on = None


def _index(columns: str) -> str:
    return f"CREATE INDEX ix_memory_facts_attribute ON memory_facts ({columns}) WHERE attribute IS NOT NULL"


def upgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_memory_facts_attribute")
    op.execute(_index("agent_id, entity_key, attribute, valid_to"))


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_memory_facts_attribute")
    op.execute(_index("agent_id, entity_key, attribute"))
