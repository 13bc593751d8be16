"""A per-subject change sequence, ordered by commit: what keeps a client's cache of a large subject's binary codes
exact (store/subject_codes.py, store/candidates.py).

- `memory_entities.change_seq`: bumped by every change of one of the entity's facts that a cache of its codes
  holds: a fact inserted, closed (valid_to), retracted (invalidated_at), moved to or from the entity (entity_key,
  both entities bumped), re-embedded (embedding: its code changes).
- `memory_entities.moved_out_seq`: the change_seq at which a fact last left the entity (moved to another). The
  moved row is stamped with its new entity's sequence only, so no delta of the old entity shows it: a cache of the
  old entity older than this value is loaded again instead.
- `memory_entities.changed_by`: the (top-level) transaction that last bumped change_seq. A reader whose own
  transaction did sees uncommitted facts of the entity, which may yet be rolled back and their sequence values
  handed out again: it must not teach a cache. Any other reader sees the entity's committed state, whatever else
  its transaction wrote (the write path reads in the transaction that logged the event).
- `memory_facts.subject_seq`: the entity's change_seq that the row's last such change was given. NULL for rows
  older than this revision: they changed before any cache existed, and a cache loads them whole.

Why it is exact: the trigger stamps the row from `UPDATE memory_entities ... RETURNING change_seq`, and that UPDATE
holds the entity row's lock until the transaction ends, so one subject's values are handed out in commit order. A
statement whose snapshot sees the entity at V therefore sees every fact row stamped <= V and none stamped > V: a
cache valid at V plus the current rows stamped > V (the delta, read through ix_memory_facts_subject_seq) is the
subject's current state, in one snapshot. The facts' FK to memory_entities is not deferrable, so a fact row never
exists without its entity row (an insert without one fails the FK check right after this trigger ran).

The 0006 bump of `facts_version` moves into the same trigger (one UPDATE of the entity row, BEFORE the fact row is
written, since the stamp goes into it) with its meaning unchanged: insert, close, retract and move bump it; a
re-embedding bumps only change_seq (profiles read text, not vectors).

Revision ID: 0011
"""

from __future__ import annotations

from alembic import op

revision = "0011"
down_revision: str | None = "0010"
branch_labels = None
depends_on = None

# A fact change that matters to profiles (facts_version, 0006) or to a cache of codes (change_seq): always both,
# but for a re-embedding, which only a cache sees.
_STAMP_SUBJECT_SEQ = """
CREATE OR REPLACE FUNCTION memory_facts_stamp_subject_seq() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    counted integer := 1;
    moved boolean := false;
BEGIN
    IF TG_OP = 'UPDATE' THEN
        moved := OLD.entity_key IS DISTINCT FROM NEW.entity_key;
        IF NOT (moved OR OLD.valid_to IS DISTINCT FROM NEW.valid_to
                OR OLD.invalidated_at IS DISTINCT FROM NEW.invalidated_at) THEN
            counted := 0;
        END IF;
    END IF;
    UPDATE memory_entities
    SET change_seq = change_seq + 1, facts_version = facts_version + counted, changed_by = pg_current_xact_id()
    WHERE agent_id = NEW.agent_id AND entity_key = NEW.entity_key
    RETURNING change_seq INTO NEW.subject_seq;
    IF moved THEN
        UPDATE memory_entities
        SET change_seq = change_seq + 1, moved_out_seq = change_seq + 1, facts_version = facts_version + 1,
            changed_by = pg_current_xact_id()
        WHERE agent_id = OLD.agent_id AND entity_key = OLD.entity_key;
    END IF;
    RETURN NEW;
END $$"""

_CACHED_CHANGE = """(OLD.valid_to IS DISTINCT FROM NEW.valid_to
                  OR OLD.invalidated_at IS DISTINCT FROM NEW.invalidated_at
                  OR OLD.entity_key IS DISTINCT FROM NEW.entity_key
                  OR OLD.embedding IS DISTINCT FROM NEW.embedding)"""

# 0006's triggers, restored by the downgrade (their function stays: 0006 owns it).
_VERSION_CHANGE = """(OLD.valid_to IS DISTINCT FROM NEW.valid_to
                  OR OLD.invalidated_at IS DISTINCT FROM NEW.invalidated_at
                  OR OLD.entity_key IS DISTINCT FROM NEW.entity_key)"""


def upgrade() -> None:
    op.execute("ALTER TABLE memory_entities ADD COLUMN change_seq bigint NOT NULL DEFAULT 0")
    op.execute("ALTER TABLE memory_entities ADD COLUMN moved_out_seq bigint NOT NULL DEFAULT 0")
    op.execute("ALTER TABLE memory_entities ADD COLUMN changed_by xid8")
    op.execute("ALTER TABLE memory_facts ADD COLUMN subject_seq bigint")
    op.execute(
        """
        CREATE INDEX ix_memory_facts_subject_seq ON memory_facts (agent_id, entity_key, subject_seq)
            WHERE subject_seq IS NOT NULL"""
    )
    op.execute("DROP TRIGGER IF EXISTS memory_facts_change_bumps_version ON memory_facts")
    op.execute("DROP TRIGGER IF EXISTS memory_facts_insert_bumps_version ON memory_facts")
    op.execute(_STAMP_SUBJECT_SEQ)
    op.execute(
        """
        CREATE TRIGGER memory_facts_insert_stamps_seq BEFORE INSERT ON memory_facts
            FOR EACH ROW EXECUTE FUNCTION memory_facts_stamp_subject_seq()"""
    )
    op.execute(
        f"""
        CREATE TRIGGER memory_facts_change_stamps_seq BEFORE UPDATE ON memory_facts
            FOR EACH ROW WHEN {_CACHED_CHANGE}
            EXECUTE FUNCTION memory_facts_stamp_subject_seq()"""
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS memory_facts_change_stamps_seq ON memory_facts")
    op.execute("DROP TRIGGER IF EXISTS memory_facts_insert_stamps_seq ON memory_facts")
    op.execute("DROP FUNCTION IF EXISTS memory_facts_stamp_subject_seq()")
    op.execute(
        """
        CREATE TRIGGER memory_facts_insert_bumps_version AFTER INSERT ON memory_facts
            FOR EACH ROW EXECUTE FUNCTION memory_facts_bump_entity_version()"""
    )
    op.execute(
        f"""
        CREATE TRIGGER memory_facts_change_bumps_version AFTER UPDATE ON memory_facts
            FOR EACH ROW WHEN {_VERSION_CHANGE}
            EXECUTE FUNCTION memory_facts_bump_entity_version()"""
    )
    op.execute("DROP INDEX IF EXISTS ix_memory_facts_subject_seq")
    op.execute("ALTER TABLE memory_facts DROP COLUMN IF EXISTS subject_seq")
    op.execute("ALTER TABLE memory_entities DROP COLUMN IF EXISTS changed_by")
    op.execute("ALTER TABLE memory_entities DROP COLUMN IF EXISTS moved_out_seq")
    op.execute("ALTER TABLE memory_entities DROP COLUMN IF EXISTS change_seq")
