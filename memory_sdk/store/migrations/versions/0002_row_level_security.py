"""Row-level security: the second tenancy wall.

Every memory table gets a policy that shows and accepts only rows whose agent_id equals the transaction-local
setting `memory_sdk.agent_id`, which the SDK sets at the start of every tenant transaction. A query that forgets its
agent_id predicate then returns nothing instead of another tenant's rows. FORCE makes the policy apply to the
tables' owner too. Superusers bypass row-level security in PostgreSQL, so the migration also creates a NOLOGIN role,
`memory_sdk_tenant`, that the SDK switches to inside tenant transactions when it connects as a superuser (the
embedded server does); where the connecting user may not create roles, the policies still hold for it as long as it
is not a superuser.

Revision ID: 0002
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision: str | None = "0001"
branch_labels = None
depends_on = None

TENANT_TABLES = (
    "memory_events",
    "memory_pipeline_runs",
    "memory_entities",
    "memory_entity_aliases",
    "memory_facts",
    "memory_fact_entities",
    "memory_relationships",
)
TENANT_ROLE = "memory_sdk_tenant"


def upgrade() -> None:
    for table in TENANT_TABLES:
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        op.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")
        op.execute(
            f"""
            CREATE POLICY memory_sdk_tenant_isolation ON {table}
                USING (agent_id = current_setting('memory_sdk.agent_id', true))
                WITH CHECK (agent_id = current_setting('memory_sdk.agent_id', true))"""
        )
    tables = ", ".join(TENANT_TABLES)
    op.execute(
        f"""
        DO $$
        BEGIN
            IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{TENANT_ROLE}') THEN
                CREATE ROLE {TENANT_ROLE} NOLOGIN NOBYPASSRLS;
            END IF;
            EXECUTE format('GRANT {TENANT_ROLE} TO %I', current_user);
            GRANT SELECT, INSERT, UPDATE, DELETE ON {tables} TO {TENANT_ROLE};
            GRANT SELECT ON memory_schema_info TO {TENANT_ROLE};
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE NOTICE 'memory_sdk: cannot create role {TENANT_ROLE}; RLS binds non-superusers only';
        END $$"""
    )


def downgrade() -> None:
    for table in TENANT_TABLES:
        op.execute(f"DROP POLICY IF EXISTS memory_sdk_tenant_isolation ON {table}")
        op.execute(f"ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY")
        op.execute(f"ALTER TABLE {table} DISABLE ROW LEVEL SECURITY")
