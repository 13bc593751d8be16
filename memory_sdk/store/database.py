"""Engine, migrations and transactions. The pipeline owns transactions; queries only flush."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.util.exc import CommandError as AlembicCommandError
from sqlalchemy import text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import (
    AsyncConnection,
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from memory_sdk.errors import ConfigError, SchemaMismatch, StorageError

__all__ = ["Database", "error_reason", "to_async_url"]

logger = logging.getLogger("memory_sdk")

_MIGRATIONS = Path(__file__).parent / "migrations"
# Any constant works; it only has to be the same in every process that migrates this database.
_MIGRATION_LOCK_ID = 0x6D656D5F73646B  # "mem_sdk"
_TENANT_ROLE = "memory_sdk_tenant"  # created by migration 0002


def to_async_url(url: str) -> str:
    """Accept postgres://, postgresql:// or postgresql+asyncpg:// and return the asyncpg form."""
    try:
        parsed = make_url(url)
    except Exception as exc:
        raise ConfigError(f"database_url is not a valid URL: {exc}") from exc
    if parsed.get_backend_name() not in ("postgresql", "postgres"):
        raise ConfigError(f"database_url must point to PostgreSQL, got {parsed.get_backend_name()!r}")
    return parsed.set(drivername="postgresql+asyncpg").render_as_string(hide_password=False)


class Database:
    """One connection pool to one PostgreSQL database holding memory_sdk's schema."""

    def __init__(self, url: str, *, pool_size: int = 5) -> None:
        self.url = to_async_url(url)
        self.engine: AsyncEngine = create_async_engine(
            self.url, pool_size=pool_size, max_overflow=pool_size, pool_pre_ping=True
        )
        # (no asyncpg vector codec: pgvector.sqlalchemy.Vector converts to and from the text form)
        self._sessions = async_sessionmaker(self.engine, expire_on_commit=False)
        self._switch_to_tenant_role = False

    async def migrate(self, embedding_dim: int) -> int:
        """Apply pending migrations (idempotent, serialised by an advisory lock); return the schema version."""
        try:
            async with self.engine.connect() as conn:
                await conn.execute(text("SELECT pg_advisory_lock(:id)"), {"id": _MIGRATION_LOCK_ID})
                try:
                    await conn.run_sync(_upgrade_to_head, embedding_dim)
                    await conn.commit()
                    self._switch_to_tenant_role = await _needs_tenant_role(conn)
                    return await _check_schema(conn, embedding_dim)
                finally:
                    await conn.execute(text("SELECT pg_advisory_unlock(:id)"), {"id": _MIGRATION_LOCK_ID})
                    await conn.commit()
        except (SchemaMismatch, ConfigError):
            raise
        except AlembicCommandError as exc:
            raise SchemaMismatch(f"the database schema is not one this SDK version knows (newer SDK?): {exc}") from exc
        except (SQLAlchemyError, OSError) as exc:
            raise StorageError(f"could not open or migrate the database: {exc}") from exc

    @asynccontextmanager
    async def transaction(self, agent_id: str | None = None) -> AsyncIterator[AsyncSession]:
        """A session inside one transaction: committed on success, rolled back on any exception.

        With `agent_id`, the transaction is a tenant's: row-level security shows and accepts only that agent's rows
        (and, for a superuser connection, the transaction runs as the unprivileged tenant role so the policies
        bind). Without it (migrations, operator statistics) the connection's own rights apply.
        """
        async with self._sessions() as session, session.begin():
            if agent_id is not None:
                await session.execute(
                    text("SELECT set_config('memory_sdk.agent_id', :agent_id, true)"), {"agent_id": agent_id}
                )
                if self._switch_to_tenant_role:
                    await session.execute(text(f"SET LOCAL ROLE {_TENANT_ROLE}"))
            yield session

    async def dispose(self) -> None:
        await self.engine.dispose()


def _upgrade_to_head(connection: Connection, embedding_dim: int) -> None:
    config = AlembicConfig()
    config.set_main_option("script_location", str(_MIGRATIONS))
    config.attributes["connection"] = connection
    config.attributes["embedding_dim"] = embedding_dim
    command.upgrade(config, "head")


async def _needs_tenant_role(conn: AsyncConnection) -> bool:
    """Superusers bypass row-level security: they must switch to the tenant role, when it exists and is granted."""
    result = await conn.execute(
        text(
            "SELECT rolsuper OR rolbypassrls, pg_has_role(current_user, t.oid, 'MEMBER') "
            "FROM pg_roles r, (SELECT oid FROM pg_roles WHERE rolname = :role) t "
            "WHERE r.rolname = current_user"
        ),
        {"role": _TENANT_ROLE},
    )
    row = result.first()
    return bool(row is not None and row[0] and row[1])


async def _check_schema(conn: AsyncConnection, embedding_dim: int) -> int:
    result = await conn.execute(text("SELECT key, value FROM memory_schema_info"))
    rows: dict[str, str] = {str(key): str(value) for key, value in result.all()}
    stored_dim = int(rows["embedding_dim"])
    if stored_dim != embedding_dim:
        raise SchemaMismatch(
            f"this database stores {stored_dim}-dimensional embeddings but the config asks for {embedding_dim}; "
            "use an embedder and MemoryConfig(embedding_dim=...) that match, or another database"
        )
    return int(rows["schema_version"])


def error_reason(exc: BaseException) -> str:
    """The first line of what went wrong: the driver's own message for a database error (without the SQL
    statement SQLAlchemy appends), else the exception's message, else its type name."""
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
