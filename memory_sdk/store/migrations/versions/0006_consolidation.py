"""Consolidation: which profiles are stale, and where a merged fact went.

- `memory_entities.facts_version`: a counter of the entity's fact changes. A trigger on memory_facts bumps it when
  a fact of the entity is inserted, closed, retracted or moved to another entity, whoever wrote it (the write
  path, consolidation's merge, a future merge of entities), so staleness needs no scan of the entity's facts.
- `memory_entities.profile_facts_version`: the `facts_version` the profile was built from; the profile is stale
  when the two differ (docs/consolidation.md). Consolidation sets it to the version it read the facts at. A
  profile seeded by a write (NULL -> text, the write path sets no version) is stamped by a trigger with the version
  at that moment: the write seeds after its facts, so its own facts are in the stamp.
- `memory_entities.profile_built_at`: when the profile text was last written (seeded or consolidated).
- `memory_facts.merged_into_fact_id`: a near-duplicate closed by consolidation points at the fact it was merged
  into (its survivor), so its provenance (source event, speaker, text) stays readable.

Profiles stored before this revision have no version: they count as stale until consolidated.

Revision ID: 0006
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision: str | None = "0005"
branch_labels = None
depends_on = None

_BUMP_FACTS_VERSION = """
CREATE OR REPLACE FUNCTION memory_facts_bump_entity_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE memory_entities SET facts_version = facts_version + 1
    WHERE agent_id = NEW.agent_id AND entity_key = NEW.entity_key;
    IF TG_OP = 'UPDATE' AND OLD.entity_key IS DISTINCT FROM NEW.entity_key THEN
        UPDATE memory_entities SET facts_version = facts_version + 1
        WHERE agent_id = OLD.agent_id AND entity_key = OLD.entity_key;
    END IF;
    RETURN NULL;
END $$"""

_STAMP_SEEDED_PROFILE = """
CREATE OR REPLACE FUNCTION memory_entities_stamp_seeded_profile() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.profile_facts_version := NEW.facts_version;
    NEW.profile_built_at := clock_timestamp();
    RETURN NEW;
END $$"""


def upgrade() -> None:
    op.execute("ALTER TABLE memory_entities ADD COLUMN facts_version bigint NOT NULL DEFAULT 0")
    op.execute("ALTER TABLE memory_entities ADD COLUMN profile_facts_version bigint")
    op.execute("ALTER TABLE memory_entities ADD COLUMN profile_built_at timestamptz")
    op.execute("ALTER TABLE memory_facts ADD COLUMN merged_into_fact_id uuid REFERENCES memory_facts (id)")
    op.execute(_BUMP_FACTS_VERSION)
    op.execute(
        """
        CREATE TRIGGER memory_facts_insert_bumps_version AFTER INSERT ON memory_facts
            FOR EACH ROW EXECUTE FUNCTION memory_facts_bump_entity_version()"""
    )
    op.execute(
        """
        CREATE TRIGGER memory_facts_change_bumps_version AFTER UPDATE ON memory_facts
            FOR EACH ROW
            WHEN (OLD.valid_to IS DISTINCT FROM NEW.valid_to
                  OR OLD.invalidated_at IS DISTINCT FROM NEW.invalidated_at
                  OR OLD.entity_key IS DISTINCT FROM NEW.entity_key)
            EXECUTE FUNCTION memory_facts_bump_entity_version()"""
    )
    op.execute(_STAMP_SEEDED_PROFILE)
    op.execute(
        """
        CREATE TRIGGER memory_entities_seeded_profile_stamp BEFORE UPDATE OF profile_text ON memory_entities
            FOR EACH ROW
            WHEN (OLD.profile_text IS NULL AND NEW.profile_text IS NOT NULL
                  AND NEW.profile_facts_version IS NOT DISTINCT FROM OLD.profile_facts_version)
            EXECUTE FUNCTION memory_entities_stamp_seeded_profile()"""
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS memory_entities_seeded_profile_stamp ON memory_entities")
    op.execute("DROP FUNCTION IF EXISTS memory_entities_stamp_seeded_profile()")
    op.execute("DROP TRIGGER IF EXISTS memory_facts_change_bumps_version ON memory_facts")
    op.execute("DROP TRIGGER IF EXISTS memory_facts_insert_bumps_version ON memory_facts")
    op.execute("DROP FUNCTION IF EXISTS memory_facts_bump_entity_version()")
    op.execute("ALTER TABLE memory_facts DROP COLUMN merged_into_fact_id")
    op.execute("ALTER TABLE memory_entities DROP COLUMN profile_built_at")
    op.execute("ALTER TABLE memory_entities DROP COLUMN profile_facts_version")
    op.execute("ALTER TABLE memory_entities DROP COLUMN facts_version")
