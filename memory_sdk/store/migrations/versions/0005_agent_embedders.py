"""One vector space per agent: the embedder each agent's vectors come from.

`memory_agent_embedders` holds, per agent, the id of the embedder (`embedder_id` of memory_sdk.llm.protocols, e.g.
"openai:text-embedding-3-small") and the vector size. The client records it on the agent's first write and
refuses a write with another embedder (EmbedderMismatch); `reembed` replaces every vector of the agent and the
record. Agents written before this revision have no row: the first write after it records its embedder.
Tenant-scoped like every memory table (row-level security of 0002).

Revision ID: 0005
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision: str | None = "0004"
branch_labels = None
depends_on = None

_TENANT_ROLE = "memory_sdk_tenant"


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE memory_agent_embedders (
            agent_id text PRIMARY KEY,
            embedder text NOT NULL CHECK (embedder <> ''),
            dimensions integer NOT NULL CHECK (dimensions > 0),
            recorded_at timestamptz NOT NULL DEFAULT clock_timestamp()
        )"""
    )
    op.execute("ALTER TABLE memory_agent_embedders ENABLE ROW LEVEL SECURITY")
    op.execute("ALTER TABLE memory_agent_embedders FORCE ROW LEVEL SECURITY")
    op.execute(
        """
        CREATE POLICY memory_sdk_tenant_isolation ON memory_agent_embedders
            USING (agent_id = current_setting('memory_sdk.agent_id', true))
            WITH CHECK (agent_id = current_setting('memory_sdk.agent_id', true))"""
    )
    op.execute(
        f"""
        DO $$
        BEGIN
            IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{_TENANT_ROLE}') THEN
                GRANT SELECT, INSERT, UPDATE, DELETE ON memory_agent_embedders TO {_TENANT_ROLE};
            END IF;
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE NOTICE 'memory_sdk: cannot grant memory_agent_embedders to {_TENANT_ROLE}';
        END $$"""
    )


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS memory_agent_embedders")
