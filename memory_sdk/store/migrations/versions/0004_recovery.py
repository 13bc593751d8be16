"""Recovery and idempotency: message ids, run leases, cancelled runs, stored outcomes, edge reinforcement once per
event.

- `memory_events.message_id`: the caller's id of a message. At most one event per (agent, message id), so a retried
  write finds the first one instead of storing the message again; immutable like the rest of the event.
- `memory_pipeline_runs.heartbeat_at`: a running write renews it while it works (the runner's heartbeat). A run
  still `running` whose heartbeat is old belongs to a dead process, and `reprocess` may take its event over.
- `memory_pipeline_runs.result`: the finished write's WriteResult (without the trace), which a retried write with
  the same message id returns. `status` gains `cancelled` (the caller cancelled the write, or the process was
  interrupted) and `abandoned` (a run of a dead process that a later run took over).
- `memory_relationships.last_event_id`: the event that last created or reinforced the edge; the same event never
  reinforces it twice, so reprocessing a write does not strengthen its edges again.

Revision ID: 0004
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision: str | None = "0003"
branch_labels = None
depends_on = None

_GUARD = """
CREATE OR REPLACE FUNCTION memory_events_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' OR TG_OP = 'TRUNCATE' THEN
        IF coalesce(current_setting('memory_sdk.allow_event_erase', true), '') = 'on' THEN
            RETURN OLD;
        END IF;
        RAISE EXCEPTION 'memory_events is append-only: % refused', TG_OP
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF NEW.id IS DISTINCT FROM OLD.id
       OR NEW.agent_id IS DISTINCT FROM OLD.agent_id
       OR NEW.speaker IS DISTINCT FROM OLD.speaker
       OR NEW.content IS DISTINCT FROM OLD.content
       OR NEW.occurred_at IS DISTINCT FROM OLD.occurred_at
       OR NEW.recorded_at IS DISTINCT FROM OLD.recorded_at{extra} THEN
        RAISE EXCEPTION 'memory_events content is immutable: UPDATE refused'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END $$"""


def upgrade() -> None:
    op.execute("ALTER TABLE memory_events ADD COLUMN message_id text")
    op.execute(
        """
        CREATE UNIQUE INDEX uq_memory_events_message_id ON memory_events (agent_id, message_id)
            WHERE message_id IS NOT NULL"""
    )
    op.execute(_GUARD.format(extra="\n       OR NEW.message_id IS DISTINCT FROM OLD.message_id"))
    op.execute("ALTER TABLE memory_pipeline_runs ADD COLUMN heartbeat_at timestamptz")
    op.execute("ALTER TABLE memory_pipeline_runs ADD COLUMN result jsonb")
    op.execute("ALTER TABLE memory_pipeline_runs DROP CONSTRAINT memory_pipeline_runs_status_check")
    op.execute(
        """
        ALTER TABLE memory_pipeline_runs ADD CONSTRAINT memory_pipeline_runs_status_check
            CHECK (status IN ('running', 'succeeded', 'failed', 'cancelled', 'abandoned'))"""
    )
    # reprocess() looks for the unfinished runs of an agent.
    op.execute(
        """
        CREATE INDEX ix_memory_pipeline_runs_unfinished ON memory_pipeline_runs (agent_id, started_at)
            WHERE status IN ('running', 'failed', 'cancelled')"""
    )
    op.execute("ALTER TABLE memory_relationships ADD COLUMN last_event_id uuid")


def downgrade() -> None:
    op.execute("ALTER TABLE memory_relationships DROP COLUMN last_event_id")
    op.execute("DROP INDEX IF EXISTS ix_memory_pipeline_runs_unfinished")
    op.execute("UPDATE memory_pipeline_runs SET status = 'failed' WHERE status IN ('cancelled', 'abandoned')")
    op.execute("ALTER TABLE memory_pipeline_runs DROP CONSTRAINT memory_pipeline_runs_status_check")
    op.execute(
        """
        ALTER TABLE memory_pipeline_runs ADD CONSTRAINT memory_pipeline_runs_status_check
            CHECK (status IN ('running', 'succeeded', 'failed'))"""
    )
    op.execute("ALTER TABLE memory_pipeline_runs DROP COLUMN result")
    op.execute("ALTER TABLE memory_pipeline_runs DROP COLUMN heartbeat_at")
    op.execute(_GUARD.format(extra=""))
    op.execute("DROP INDEX IF EXISTS uq_memory_events_message_id")
    op.execute("ALTER TABLE memory_events DROP COLUMN message_id")
