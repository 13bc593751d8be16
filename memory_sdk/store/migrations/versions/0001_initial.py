"""Initial schema: events, pipeline runs, entities, aliases, facts, fact-entity links, relationships.

Revision ID: 0001
"""

from __future__ import annotations

from alembic import op

revision = "0001"
down_revision: str | None = None
branch_labels = None
depends_on = None

SCHEMA_VERSION = 1


def upgrade() -> None:
    dim = int(op.get_context().config.attributes["embedding_dim"])  # type: ignore[union-attr]
    for statement in _statements(dim):
        op.execute(statement)


def downgrade() -> None:
    for table in (
        "memory_relationships",
        "memory_fact_entities",
        "memory_facts",
        "memory_entity_aliases",
        "memory_entities",
        "memory_pipeline_runs",
        "memory_events",
        "memory_schema_info",
    ):
        op.execute(f"DROP TABLE IF EXISTS {table} CASCADE")
    op.execute("DROP FUNCTION IF EXISTS memory_events_guard() CASCADE")


def _statements(dim: int) -> list[str]:
    return [
        "CREATE EXTENSION IF NOT EXISTS vector",
        """
        CREATE TABLE memory_schema_info (
            key text PRIMARY KEY,
            value text NOT NULL
        )""",
        f"""
        INSERT INTO memory_schema_info (key, value)
        VALUES ('schema_version', '{SCHEMA_VERSION}'), ('embedding_dim', '{dim}')""",
        # --- events: the immutable log -----------------------------------------------------------------
        f"""
        CREATE TABLE memory_events (
            id uuid PRIMARY KEY,
            agent_id text NOT NULL CHECK (agent_id <> ''),
            speaker text NOT NULL,
            content text NOT NULL,
            occurred_at timestamptz NOT NULL,
            recorded_at timestamptz NOT NULL DEFAULT clock_timestamp(),
            embedding vector({dim}),
            emotion jsonb
        )""",
        "CREATE INDEX ix_memory_events_agent_occurred ON memory_events (agent_id, occurred_at)",
        # The database, not the SDK, keeps events immutable: content columns never change and rows are only
        # deleted through the explicit erase path, which sets memory_sdk.allow_event_erase for its transaction.
        """
        CREATE FUNCTION memory_events_guard() RETURNS trigger LANGUAGE plpgsql AS $$
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
               OR NEW.recorded_at IS DISTINCT FROM OLD.recorded_at THEN
                RAISE EXCEPTION 'memory_events content is immutable: UPDATE refused'
                    USING ERRCODE = 'insufficient_privilege';
            END IF;
            RETURN NEW;
        END $$""",
        """
        CREATE TRIGGER memory_events_immutable BEFORE UPDATE OR DELETE ON memory_events
            FOR EACH ROW EXECUTE FUNCTION memory_events_guard()""",
        """
        CREATE TRIGGER memory_events_no_truncate BEFORE TRUNCATE ON memory_events
            FOR EACH STATEMENT EXECUTE FUNCTION memory_events_guard()""",
        # --- pipeline runs: one per write attempt ---------------------------------------------------------
        """
        CREATE TABLE memory_pipeline_runs (
            id uuid PRIMARY KEY,
            agent_id text NOT NULL,
            event_id uuid REFERENCES memory_events (id),
            status text NOT NULL CHECK (status IN ('running', 'succeeded', 'failed')),
            extraction_path text,
            llm_calls integer NOT NULL DEFAULT 0,
            input_tokens integer NOT NULL DEFAULT 0,
            output_tokens integer NOT NULL DEFAULT 0,
            error text,
            trace jsonb,
            started_at timestamptz NOT NULL DEFAULT clock_timestamp(),
            finished_at timestamptz
        )""",
        "CREATE INDEX ix_memory_pipeline_runs_agent ON memory_pipeline_runs (agent_id, started_at)",
        "CREATE INDEX ix_memory_pipeline_runs_event ON memory_pipeline_runs (event_id)",
        # --- entities and their aliases -------------------------------------------------------------------
        f"""
        CREATE TABLE memory_entities (
            id uuid PRIMARY KEY,
            agent_id text NOT NULL,
            entity_key text NOT NULL,
            display_name text NOT NULL,
            entity_type text NOT NULL,
            profile_text text,
            name_embedding vector({dim}),
            mention_count integer NOT NULL DEFAULT 1,
            created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
            updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
            CONSTRAINT uq_memory_entities_agent_key UNIQUE (agent_id, entity_key)
        )""",
        """
        CREATE INDEX ix_memory_entities_name_embedding ON memory_entities
            USING hnsw (name_embedding vector_cosine_ops)""",
        """
        CREATE TABLE memory_entity_aliases (
            agent_id text NOT NULL,
            alias_norm text NOT NULL,
            alias text NOT NULL,
            entity_key text NOT NULL,
            source text NOT NULL,
            created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
            PRIMARY KEY (agent_id, alias_norm),
            FOREIGN KEY (agent_id, entity_key) REFERENCES memory_entities (agent_id, entity_key)
                ON DELETE CASCADE
        )""",
        "CREATE INDEX ix_memory_entity_aliases_entity ON memory_entity_aliases (agent_id, entity_key)",
        # Prefix probes for person diminutives ("carol%"), whatever the database's collation.
        """
        CREATE INDEX ix_memory_entity_aliases_prefix
            ON memory_entity_aliases (agent_id, alias_norm text_pattern_ops)""",
        # --- facts: versioned, with valid time and transaction time ---------------------------------------
        f"""
        CREATE TABLE memory_facts (
            id uuid PRIMARY KEY,
            agent_id text NOT NULL,
            entity_key text NOT NULL,
            fact_text text NOT NULL CHECK (fact_text <> ''),
            attribute text,
            single_valued boolean NOT NULL DEFAULT false,
            confidence double precision NOT NULL CHECK (confidence >= 0 AND confidence <= 1),
            importance double precision NOT NULL CHECK (importance >= 0 AND importance <= 1),
            importance_category text NOT NULL,
            speaker text,
            source_event_id uuid REFERENCES memory_events (id),
            source_context text NOT NULL DEFAULT 'extracted',
            valid_from timestamptz NOT NULL,
            valid_to timestamptz,
            recorded_at timestamptz NOT NULL DEFAULT clock_timestamp(),
            closed_at timestamptz,
            invalidated_at timestamptz,
            supersedes_fact_id uuid REFERENCES memory_facts (id),
            last_confirmed_at timestamptz,
            embedding vector({dim}),
            schema_version integer NOT NULL,
            prompt_version text,
            -- [valid_from, valid_to): an empty interval (valid_from = valid_to) marks a corrected fact that was
            -- never true; closed_at is the transaction time valid_to was set, for "believed at T" reads.
            CONSTRAINT ck_memory_facts_interval CHECK (valid_to IS NULL OR valid_from <= valid_to),
            CONSTRAINT ck_memory_facts_closed CHECK ((valid_to IS NULL) = (closed_at IS NULL)),
            FOREIGN KEY (agent_id, entity_key) REFERENCES memory_entities (agent_id, entity_key)
        )""",
        """
        CREATE INDEX ix_memory_facts_current ON memory_facts (agent_id, entity_key)
            WHERE valid_to IS NULL AND invalidated_at IS NULL""",
        "CREATE INDEX ix_memory_facts_valid ON memory_facts (agent_id, entity_key, valid_from)",
        "CREATE INDEX ix_memory_facts_event ON memory_facts (source_event_id)",
        # At most one open fact per (agent, subject, attribute) for single-valued attributes (DESIGN.md).
        """
        CREATE UNIQUE INDEX uq_memory_facts_open_single_valued ON memory_facts (agent_id, entity_key, attribute)
            WHERE single_valued AND attribute IS NOT NULL AND valid_to IS NULL AND invalidated_at IS NULL""",
        "CREATE INDEX ix_memory_facts_embedding ON memory_facts USING hnsw (embedding vector_cosine_ops)",
        """
        CREATE TABLE memory_fact_entities (
            fact_id uuid NOT NULL REFERENCES memory_facts (id) ON DELETE CASCADE,
            agent_id text NOT NULL,
            entity_key text NOT NULL,
            is_primary boolean NOT NULL DEFAULT false,
            PRIMARY KEY (fact_id, entity_key)
        )""",
        "CREATE INDEX ix_memory_fact_entities_entity ON memory_fact_entities (agent_id, entity_key)",
        # --- relationships: directed edges, each linked to its evidence fact -----------------------------
        """
        CREATE TABLE memory_relationships (
            id uuid PRIMARY KEY,
            agent_id text NOT NULL,
            source_key text NOT NULL,
            target_key text NOT NULL,
            rel_type text NOT NULL,
            strength double precision NOT NULL DEFAULT 0.8 CHECK (strength >= 0 AND strength <= 1),
            mention_count integer NOT NULL DEFAULT 1,
            evidence_fact_id uuid REFERENCES memory_facts (id),
            valid_from timestamptz,
            valid_to timestamptz,
            invalidated_at timestamptz,
            created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
            updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
            CONSTRAINT ck_memory_relationships_not_self CHECK (source_key <> target_key)
        )""",
        """
        CREATE UNIQUE INDEX uq_memory_relationships_current
            ON memory_relationships (agent_id, source_key, target_key, rel_type)
            WHERE invalidated_at IS NULL""",
        "CREATE INDEX ix_memory_relationships_evidence ON memory_relationships (evidence_fact_id)",
        "CREATE INDEX ix_memory_relationships_target ON memory_relationships (agent_id, target_key)",
    ]
