"""Fact identity key, and the alias first-word index.

Fact identity key: an indexed fingerprint of what a current fact says, for the apply-time re-check.

`identity_key` is the md5 of the fact text with case, accents and punctuation ignored (post_extraction's
fact_identity_text), written by the SDK with every new fact. Under the subject's lock, a write looks its facts up
by it before inserting, so identical concurrent writes leave one current fact whatever the vector index returned.
The index replaces ix_memory_facts_current, whose (agent_id, entity_key) prefix it keeps. Rows written before this
revision have no key; they are still found by the similarity candidates.

Revision ID: 0003
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision: str | None = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE memory_facts ADD COLUMN identity_key text")
    op.execute(
        """
        CREATE INDEX ix_memory_facts_current_identity ON memory_facts (agent_id, entity_key, identity_key)
            WHERE valid_to IS NULL AND invalidated_at IS NULL"""
    )
    op.execute("DROP INDEX IF EXISTS ix_memory_facts_current")
    op.execute(
        """
        CREATE INDEX ix_memory_entity_aliases_first_word
            ON memory_entity_aliases (agent_id, split_part(alias_norm, ' ', 1))"""
    )


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_memory_entity_aliases_first_word")
    op.execute(
        """
        CREATE INDEX ix_memory_facts_current ON memory_facts (agent_id, entity_key)
            WHERE valid_to IS NULL AND invalidated_at IS NULL"""
    )
    op.execute("DROP INDEX IF EXISTS ix_memory_facts_current_identity")
    op.execute("ALTER TABLE memory_facts DROP COLUMN identity_key")
