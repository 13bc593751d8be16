"""Engine, migrations and transactions. The pipeline owns transactions; queries only flush."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from pathlib import Path
from typing import Any, Protocol, TypeAlias

import asyncpg
from pgvector.asyncpg import register_vector
from sqlalchemy import event, text
from sqlalchemy.engine import Connection as SyncConnection
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.ext.asyncio import (
    AsyncConnection,
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from memory_sdk.errors import ConfigError, DatabaseUnavailable, SchemaMismatch, StorageError, UsageError
from memory_sdk.store.indexing import FactIndexer, take_marks
from memory_sdk.store.subject_codes import DEFAULT_CACHE_MB, SubjectCodes, attach

__all__ = [
    "DEFAULT_POOL_SIZE",
    "DEFAULT_POOL_TIMEOUT_SEC",
    "HEAD_REVISION",
    "LOCK_IDS_SQL",
    "Connection",
    "Database",
    "RolledBack",
    "Tenants",
    "error_reason",
    "generic_plans",
    "is_transient",
    "is_unavailable",
    "known_revisions",
    "plans_back",
    "quote_literal",
    "storage_error",
    "to_async_url",
]

logger = logging.getLogger("memory_sdk")

_MIGRATIONS = Path(__file__).parent / "migrations"
# The newest migration in migrations/versions: a database at it is opened without importing alembic. A test checks
# it against alembic's own head, so a new migration cannot be left out of it.
HEAD_REVISION = "0014"
# Any constant works; it only has to be the same in every process that migrates this database.
_MIGRATION_LOCK_ID = 0x6D656D5F73646B  # "mem_sdk"
_TENANT_ROLE = "memory_sdk_tenant"  # created by migration 0002
# A write holds at most one connection at a time, so 10 connections carry dozens of writes whose time is mostly
# spent waiting on the LLM; PostgreSQL's own default limit is 100 connections for every client together.
DEFAULT_POOL_SIZE = 10
# A transaction that finds every connection busy waits this long for one (back-pressure), then StorageError.
DEFAULT_POOL_TIMEOUT_SEC = 300.0
# Session settings of every pooled connection. Custom plans: the fact-candidate queries must be planned for the
# subject and vector they run with (a generic plan filtered an HNSW scan down to nothing, or sorted a whole
# subject); JIT compiles in tens of ms what these short queries run in one. HNSW scans (pgvector >= 0.8) go on
# past the candidate list until enough rows pass the agent and subject filters (store/candidates.py), with a
# candidate list of 100 instead of 40 for recall when a subject is a small share of the index.
_SERVER_SETTINGS = {
    "plan_cache_mode": "force_custom_plan",
    "jit": "off",
    "hnsw.iterative_scan": "relaxed_order",
    "hnsw.ef_search": "100",
}
# generic_plans(): the transaction's setting read and force_generic_plan set in one statement (the materialized
# CTE is read before the set_config beside it runs).
_GENERIC_ON = (
    "WITH prior AS MATERIALIZED (SELECT current_setting('plan_cache_mode') AS mode) "
    "SELECT prior.mode, set_config('plan_cache_mode', 'force_generic_plan', true) FROM prior"
)
# A savepoint's commands. Savepoints nest under one name: RELEASE and ROLLBACK TO act on the latest of that name.
_SAVEPOINT = "SAVEPOINT memory_sdk"
_RELEASE = "RELEASE SAVEPOINT memory_sdk"
_ROLLBACK_TO = "ROLLBACK TO SAVEPOINT memory_sdk; RELEASE SAVEPOINT memory_sdk"
# A transaction's advisory locks (ids from store/queries.advisory_lock_ids, sorted), taken one by one in that order.
LOCK_IDS_SQL = "SELECT pg_advisory_xact_lock(id) FROM unnest($1::bigint[]) WITH ORDINALITY AS l(id, n) ORDER BY n"
# The write path's connection: asyncpg's own, inside a Database.tenant() transaction.
Connection: TypeAlias = asyncpg.Connection
# What the driver raises. OSError: the socket is gone or refuses (FileNotFoundError, ConnectionRefusedError), raw
# from a pool connect. InternalClientError: asyncpg's protocol left mid-state by a server that went away.
_DATABASE_ERRORS = (
    SQLAlchemyError,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    OSError,
)
# SQLSTATE classes worth a retry: connection failures (08), serialization failure and deadlock (40),
# too many connections / server shutting down (53, 57P0x).
_TRANSIENT_SQLSTATES = ("08", "40001", "40P01", "53", "57P01", "57P02", "57P03")
# The database cannot be reached: connection exceptions (08), admin or crash shutdown, cannot connect now (57P0x).
_UNAVAILABLE_SQLSTATES = ("08", "57P01", "57P02", "57P03")


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

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = DEFAULT_POOL_SIZE,
        pool_timeout: float = DEFAULT_POOL_TIMEOUT_SEC,
        subject_code_cache_mb: float = DEFAULT_CACHE_MB,
    ) -> None:
        self.url = to_async_url(url)
        # No overflow and no pre-ping: a fixed pool whose waiters queue (bounded by pool_timeout), and no extra
        # round trip per transaction. A connection found dead fails its statement once and the pool replaces it;
        # the event insert retries such transient failures (event_log).
        self.engine: AsyncEngine = create_async_engine(
            self.url,
            pool_size=pool_size,
            max_overflow=0,
            pool_timeout=pool_timeout,
            pool_pre_ping=False,
            connect_args={"server_settings": dict(_SERVER_SETTINGS)},
        )
        event.listen(self.engine.sync_engine, "connect", _register_vector_codec)
        # Large subjects' binary codes (store/subject_codes.py), found by the candidate read from its connection.
        self.subject_codes = SubjectCodes(int(subject_code_cache_mb * 2**20), tenant=self.tenant)
        event.listen(self.engine.sync_engine, "connect", self._attach_subject_codes)
        self._sessions = async_sessionmaker(self.engine, expire_on_commit=False)
        self._set_tenant(switch_role=False)
        # A dry run holds its connection for its whole length (RolledBack): at most half the pool, so real
        # writes always find connections however many dry runs wait on their models.
        self.dry_run_slots = asyncio.Semaphore(max(1, pool_size // 2))
        # The facts a committed transaction inserted go into the HNSW index after it (store/indexing.py).
        self.indexer = FactIndexer(self.tenant_script)

    async def migrate(self, embedding_dim: int, *, apply: bool = True, to: str = "head") -> int:
        """Apply pending migrations up to `to` (idempotent, serialised by an advisory lock); return the schema
        version. With `apply=False` nothing is changed: a database behind HEAD_REVISION raises SchemaMismatch
        (an application that leaves migrations to `memory-sdk migrate`, MemoryConfig.migrate_on_open)."""
        target = HEAD_REVISION if to == "head" else _known_revision(to)
        try:
            async with self.engine.connect() as conn:
                if not apply:
                    revision = await _schema_revision(conn)
                    if revision != HEAD_REVISION:
                        raise SchemaMismatch(
                            f"the database schema is at revision {revision or 'none (never migrated)'}, this SDK "
                            f"needs {HEAD_REVISION}; run `memory-sdk migrate` (migrate_on_open is off)"
                        )
                    self._set_tenant(switch_role=await _needs_tenant_role(conn))
                    version = await _check_schema(conn, embedding_dim)
                    await conn.rollback()
                    return version
                await conn.execute(text("SELECT pg_advisory_lock(:id)"), {"id": _MIGRATION_LOCK_ID})
                try:
                    revision = await _schema_revision(conn)
                    # A revision this SDK does not ship is a newer SDK's: alembic's refusal says so below.
                    if revision is not None and revision in known_revisions() and revision > target:
                        raise UsageError(
                            f"the database is at revision {revision}, past {target}: migrate does not downgrade"
                        )
                    if revision != target:
                        await conn.run_sync(_upgrade, embedding_dim, target)
                    await conn.commit()
                    self._set_tenant(switch_role=await _needs_tenant_role(conn))
                    version = await _check_schema(conn, embedding_dim)
                except BaseException:
                    # The error raised is the failed statement's own: the transaction it aborted is rolled back
                    # before the unlock (which alone would fail with "current transaction is aborted" and hide it),
                    # and a cleanup that fails too (the connection lost) ends the session, which drops the lock.
                    with suppress(*_DATABASE_ERRORS):
                        await conn.rollback()
                        await _migration_unlock(conn)
                    raise
                await _migration_unlock(conn)
            # Connections opened before the migration created the vector type carry no binary codec for it.
            await self.engine.dispose()
            return version
        except (SchemaMismatch, UsageError):
            raise
        except _DATABASE_ERRORS as exc:
            message = f"could not open or migrate the database: {type(exc).__name__}: {error_reason(exc)}"
            if is_unavailable(exc):
                raise DatabaseUnavailable(message) from exc
            raise StorageError(message, transient=is_transient(exc)) from exc

    async def schema_state(self) -> tuple[str | None, int | None]:
        """The revision the database is at and the embedding size it stores (None, None when never migrated):
        read only, for `memory-sdk migrate --check`."""
        try:
            async with self.engine.connect() as conn:
                revision = await _schema_revision(conn)
                dim = None
                if (await conn.execute(text("SELECT to_regclass('memory_schema_info') IS NOT NULL"))).scalar_one():
                    stored = await conn.execute(
                        text("SELECT value FROM memory_schema_info WHERE key = 'embedding_dim'")
                    )
                    value = stored.scalar_one_or_none()
                    dim = int(value) if value is not None else None
                await conn.rollback()
                return revision, dim
        except _DATABASE_ERRORS as exc:
            raise storage_error(exc) from exc

    def _attach_subject_codes(self, _dbapi_connection: Any, record: Any) -> None:
        attach(record.driver_connection, self.subject_codes)

    def _set_tenant(self, *, switch_role: bool) -> None:
        """The statement that opens a tenant transaction: the agent setting, and the tenant role when the
        connection's user would bypass row-level security; raw (asyncpg) and SQLAlchemy forms of one text."""
        self._role_sql = f", set_config('role', '{_TENANT_ROLE}', true)" if switch_role else ""
        self._tenant_statement = text(f"SELECT set_config('memory_sdk.agent_id', :agent_id, true){self._role_sql}")

    def _begin_sql(self, agent_id: str, lock_ids: Sequence[int]) -> str:
        """BEGIN and the tenant statement as one simple query (one round trip where asyncpg's transaction() sends
        BEGIN alone): the agent setting and role, and the transaction's advisory locks taken in order, so every
        later statement's snapshot is taken after the locks are held (a statement's own snapshot predates the
        locks it takes). A simple query takes no parameters: the agent id goes in as a quoted literal."""
        sql = f"BEGIN; SELECT set_config('memory_sdk.agent_id', {quote_literal(agent_id)}, true){self._role_sql}"
        if not lock_ids:
            return sql
        ids = f"ARRAY[{','.join(str(int(lock_id)) for lock_id in lock_ids)}]::bigint[]"
        # Its statements are planned for their values at every run, like every other statement here but the cached
        # read: a generic plan estimates a row or so for any (agent, subject, ...) prefix in a database of many agents,
        # so every index of such a prefix looks as good, and one that reads a whole subject was picked (docs/
        # decisions.md, "Custom plans always").
        return f"{sql}, (SELECT count(*) FROM ({LOCK_IDS_SQL.replace('$1', ids)}) locked)"  # noqa: S608 (integers and quote_literal only)

    @asynccontextmanager
    async def transaction(self, agent_id: str | None = None) -> AsyncIterator[AsyncSession]:
        """A session inside one transaction: committed on success, rolled back on any exception.

        With `agent_id`, the transaction is a tenant's: row-level security shows and accepts only that agent's rows
        (and, for a superuser connection, the transaction runs as the unprivileged tenant role so the policies
        bind). Without it (migrations, operator statistics) the connection's own rights apply.
        """
        try:
            async with self._sessions() as session, session.begin():
                if agent_id is not None:
                    # Tenant setting and role in one statement, once per transaction.
                    await session.execute(self._tenant_statement, {"agent_id": agent_id})
                yield session
        except _DATABASE_ERRORS as exc:
            raise storage_error(exc) from exc

    @asynccontextmanager
    async def tenant(self, agent_id: str, lock_ids: Sequence[int] = ()) -> AsyncIterator[Connection]:
        """A tenant transaction driven by asyncpg directly, on a connection of the pool: the write path's.

        The same tenant setting and role as transaction(agent_id), sent with BEGIN in one round trip
        (`_begin_sql`), which also takes the transaction-scoped advisory locks `lock_ids` (sorted:
        store/queries.advisory_lock_ids) before anything else runs: the write's apply transaction. The write path
        runs fixed SQL on it
        (store/queries.py): about 90 µs of client CPU per statement where a SQLAlchemy session and Core statement
        cost 620 µs. A connection that turns out dead is dropped from the pool. Nested work uses savepoint(), not
        asyncpg's transaction(), which refuses to nest in a transaction it did not begin.

        A transaction cancelled part-way (task cancellation, KeyboardInterrupt) may have been cut inside BEGIN,
        ROLLBACK or COMMIT: the server may still hold it open, so the connection is closed (the server then rolls
        back what it held) and never returns to the pool. A caller's error rolls the transaction back; a
        connection still inside a transaction after that is closed too.
        """
        begin = self._begin_sql(agent_id, lock_ids)  # a bad agent id fails here, before a connection is taken
        try:
            async with self.engine.connect() as pooled:
                conn: Connection = (await pooled.get_raw_connection()).driver_connection
                if conn.is_closed() or _unsettled(conn):
                    await pooled.invalidate()
                    conn = (await pooled.get_raw_connection()).driver_connection
                take_marks(conn)  # a mark left by a rolled-back transaction of this connection's
                try:
                    async with _ended(conn, begin, "COMMIT", "ROLLBACK"):
                        yield conn
                    for marked in take_marks(conn):
                        self.indexer.schedule(marked)  # committed: its new facts go into the index next
                except _DATABASE_ERRORS as exc:
                    lost = conn.is_closed() or is_unavailable(exc)
                    if not lost and not _unsettled(conn):
                        raise  # a statement failed and was rolled back: the connection is fine
                    conn.terminate()  # lost, or still in a transaction: it leaves the pool; a retry gets a new one
                    await pooled.invalidate()
                    if not lost:
                        raise
                    raise DatabaseUnavailable(f"database connection lost: {error_reason(exc)}") from exc
                except BaseException as exc:
                    if isinstance(exc, Exception) and not _unsettled(conn):
                        raise  # an error of the caller's: the transaction was rolled back, the connection is fine
                    conn.terminate()  # synchronous: done even if this task is cancelled again
                    await pooled.invalidate()
                    raise
        except _DATABASE_ERRORS as exc:
            raise storage_error(exc) from exc

    async def tenant_script(self, agent_id: str, script: str) -> str:
        """`script` (fixed SQL, no parameters, no transaction control) run as the tenant in one implicit transaction
        of its own: the tenant setting and role sent before it in the same simple query, one round trip in all.
        Returns the status of its last statement ("UPDATE 3"). For background work (store/indexing.py)."""
        sql = f"{self._begin_sql(agent_id, ()).removeprefix('BEGIN; ')}; {script}"
        try:
            async with self.engine.connect() as pooled:
                conn: Connection = (await pooled.get_raw_connection()).driver_connection
                try:
                    return str(await conn.execute(sql))
                except BaseException:
                    if conn.is_closed() or _unsettled(conn):
                        conn.terminate()
                        await pooled.invalidate()
                    raise
        except _DATABASE_ERRORS as exc:
            raise storage_error(exc) from exc

    @staticmethod
    @asynccontextmanager
    async def savepoint(conn: Connection) -> AsyncIterator[None]:
        """A savepoint inside a tenant() transaction: a database error inside rolls back just it and comes out as
        StorageError. A cancellation inside leaves the rest to the transaction's owner (tenant() closes the
        connection)."""
        try:
            async with _ended(conn, _SAVEPOINT, _RELEASE, _ROLLBACK_TO):
                yield
        except _DATABASE_ERRORS as exc:
            raise storage_error(exc) from exc

    async def dispose(self) -> None:
        """Index what the writes left unindexed (a failure is logged by the indexer), stop loading subjects' codes,
        then close the pool."""
        await self.indexer.drain()
        if self.subject_codes.loader is not None:
            await self.subject_codes.loader.close()
        await self.engine.dispose()


class Tenants(Protocol):
    """What the write path asks of a database: tenant transactions. A Database gives each its own pooled
    connection and commits it; a dry run's RolledBack nests them all in one transaction that is never committed."""

    # Bounds how many dry runs hold a connection at once (each holds one for its whole length).
    dry_run_slots: asyncio.Semaphore

    def tenant(self, agent_id: str, lock_ids: Sequence[int] = ()) -> AbstractAsyncContextManager[Connection]: ...


class _RollBack(Exception):
    """Thrown into a dry run's outer transaction at its end: Database.tenant rolls back on any exception."""


class RolledBack:
    """A dry run's database: every tenant() transaction of one write becomes a savepoint of ONE outer tenant
    transaction on ONE connection, and close() rolls that outer transaction back. The stages run exactly as in a
    real write (each sees what the earlier ones wrote, a failing one rolls back alone), and nothing is ever
    committed: no code path of a dry run differs from the real one but this class.

    The connection is taken at the first tenant() (the event insert, after the message is embedded) and held,
    idle in its transaction between stages and across the LLM calls, until close(). Savepoints are released into
    the outer transaction, so every row and lock they took is held until then: the advisory locks and rows of
    the upsert stage (as a real write, and only for its last moments), and the rows written before it, which
    nobody else can wait for except a write of the same message_id (docs/write-pipeline.md, "Dry runs").
    tenant() calls are serialised on the one connection (a connection runs one statement at a time). Before it
    takes its connection, a dry run takes one of the source's `dry_run_slots` (half the pool), and gives it back
    at close(): dry runs waiting on their models can never take every connection from the real writes.
    """

    def __init__(self, source: Tenants, agent_id: str) -> None:
        self._source, self._agent_id = source, agent_id
        self.dry_run_slots = source.dry_run_slots
        self._slot_taken = False
        self._outer: AbstractAsyncContextManager[Connection] | None = None
        self._conn: Connection | None = None
        self._serial = asyncio.Lock()
        self._closed: str | None = None

    @asynccontextmanager
    async def tenant(self, agent_id: str, lock_ids: Sequence[int] = ()) -> AsyncIterator[Connection]:
        """A savepoint of the outer transaction, its advisory locks taken first: released on success (its work
        stays for the later stages), rolled back alone on an exception; a database error comes out as
        StorageError, as from Database.tenant."""
        if agent_id != self._agent_id:
            raise UsageError(f"a dry run of agent {self._agent_id!r} cannot open a transaction of {agent_id!r}")
        async with self._serial:
            conn = await self._connection()
            try:
                async with _ended(conn, _SAVEPOINT, _RELEASE, _ROLLBACK_TO):
                    if lock_ids:
                        await conn.execute(LOCK_IDS_SQL, list(lock_ids))
                    yield conn
            except _DATABASE_ERRORS as exc:
                raise storage_error(exc) from exc
            except BaseException as exc:
                if not isinstance(exc, Exception):
                    # Cancelled inside a statement or a savepoint command: the connection's state is unknown;
                    # no later statement may use it, and close() drops it.
                    self._closed = f"the dry run's connection was interrupted ({type(exc).__name__})"
                raise

    async def _connection(self) -> Connection:
        if self._closed is not None:
            raise StorageError(self._closed)
        if self._conn is None:
            if not self._slot_taken:
                await self.dry_run_slots.acquire()
                self._slot_taken = True
            outer = self._source.tenant(self._agent_id)
            self._conn = await outer.__aenter__()
            self._outer = outer
        return self._conn

    async def close(self, error: BaseException | None = None) -> None:
        """Roll the outer transaction back and give the connection back (or, after an interruption, drop it:
        Database.tenant terminates a connection left inside a transaction). Nothing was ever committed."""
        outer, self._outer, self._conn = self._outer, None, None
        self._closed = "the dry run is over"
        try:
            if outer is not None:
                thrown = error if error is not None else _RollBack()
                # The source's context re-raises what it is given (and rolls back on it): returns False.
                await outer.__aexit__(type(thrown), thrown, thrown.__traceback__)
        finally:
            if self._slot_taken:
                self._slot_taken = False
                self.dry_run_slots.release()


async def _migration_unlock(conn: AsyncConnection) -> None:
    await conn.execute(text("SELECT pg_advisory_unlock(:id)"), {"id": _MIGRATION_LOCK_ID})
    await conn.commit()


async def generic_plans(conn: Connection) -> str:
    """Switch the transaction to generic plans for the one statement sent next, and return the setting it had: that
    statement puts it back itself, as it starts (`plans_back(n)` in its WHERE clause, the returned setting as its
    parameter $n), so the switch costs one round trip and no statement after it runs on a generic plan.

    Only for a statement whose result cannot depend on its plan: no approximate index may serve it (store/
    candidates.py's cached read, whose rankings are exact sorts), so the plan changes its speed, never its rows; it
    then keeps one plan per connection (~2.5 ms of planning saved a read at 100,000 facts). If the statement fails
    before it starts, the transaction is aborted (nothing runs in it until a rollback, and a rollback to a
    savepoint undoes the switch with everything else done after it)."""
    prior: str = await conn.fetchval(_GENERIC_ON)
    return prior


def plans_back(param: int) -> str:
    """The condition that puts the plan setting in parameter $`param` back: true, and evaluated once as the
    statement starts (an uncorrelated sub-select: a one-time filter, whatever rows the statement returns)."""
    return f"(SELECT set_config('plan_cache_mode', ${param}::text, true)) IS NOT NULL"


def _unsettled(conn: Connection) -> bool:
    """True when the connection is inside a transaction, by the server's last word or by asyncpg's own record of
    a transaction() (set before BEGIN is even sent): outside tenant() a pooled connection must be neither."""
    return bool(conn.is_in_transaction() or getattr(conn, "_top_xact", None) is not None)


@asynccontextmanager
async def _ended(conn: Connection, start: str, commit: str, rollback: str) -> AsyncIterator[None]:
    """A transaction or savepoint block: `start` sent, then `commit` when the block succeeds, `rollback` when it
    raises an error while the server still holds a transaction. On a cancellation nothing more is sent (the
    connection's state is unknown: its owner closes it)."""
    try:
        await conn.execute(start)
        yield
    except Exception:
        if conn.is_in_transaction():
            await conn.execute(rollback)
        raise
    await conn.execute(commit)


def quote_literal(value: str) -> str:
    """`value` as a PostgreSQL string literal, for the one statement that cannot take parameters (`_begin_sql`).

    An escape string (E'...') with backslashes and quotes doubled reads the same whatever
    standard_conforming_strings says; asyncpg always speaks UTF-8, whose multi-byte characters never contain a
    quote or backslash byte. NUL cannot be in PostgreSQL text at all: refused (validation.py refuses it earlier)."""
    if "\x00" in value:
        raise UsageError("a PostgreSQL string cannot contain a NUL byte")
    return "E'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


def _register_vector_codec(dbapi_connection: Any, _record: Any) -> None:
    """pgvector's binary codec on every new connection: a 1536-float vector travels as 6 KB of floats, not as
    ~20 KB of decimal text parsed on both ends. Before the first migration the type does not exist yet."""
    try:
        schema = dbapi_connection.run_async(_vector_schema)
        if schema is not None:
            dbapi_connection.run_async(lambda conn: register_vector(conn, schema=schema))
    except ValueError:  # unknown type: the extension is not installed yet (the migration creates it)
        return


async def _vector_schema(conn: Any) -> str | None:
    schema: str | None = await conn.fetchval(
        "SELECT n.nspname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace WHERE t.typname = 'vector'"
    )
    return schema


def storage_error(exc: BaseException) -> StorageError:
    """The SDK's error for a database failure: the driver's first line, and whether a retry may cure it; a
    database that cannot be reached at all is DatabaseUnavailable, so callers can tell an outage from a bad
    statement without reading driver exceptions."""
    if isinstance(exc, StorageError):
        return exc
    reason = f"{type(exc).__name__}: {error_reason(exc)}"
    if is_unavailable(exc):
        return DatabaseUnavailable(f"database unavailable: {reason}")
    return StorageError(reason, transient=is_transient(exc))


def is_unavailable(exc: BaseException) -> bool:
    """A failure to reach the database at all (stopped server, missing socket, refused or dropped connection,
    shutdown), anywhere in the chain SQLAlchemy and asyncpg wrap around it."""
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    for link in _error_chain(exc):
        if isinstance(link, OSError | asyncpg.InternalClientError):
            return True
        sqlstate = getattr(link, "sqlstate", None)
        if isinstance(sqlstate, str) and sqlstate.startswith(_UNAVAILABLE_SQLSTATES):
            return True
    return False


def _error_chain(exc: BaseException) -> Iterator[BaseException]:
    """The error, the driver error SQLAlchemy wraps (`orig`), and their causes (asyncpg's under the adapter's)."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        yield link
        orig = getattr(link, "orig", None)
        link = orig if isinstance(orig, BaseException) else link.__cause__


def is_transient(exc: BaseException) -> bool:
    """A database failure that a retry may cure: lost connection, serialization failure, deadlock, overload."""
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    if isinstance(exc, OSError):
        return True
    sqlstate = getattr(getattr(exc, "orig", None), "sqlstate", None) or getattr(exc, "sqlstate", None)
    return isinstance(sqlstate, str) and sqlstate.startswith(_TRANSIENT_SQLSTATES)


async def _schema_revision(conn: AsyncConnection) -> str | None:
    """The migration the database is at (alembic's version table), None for a database never migrated."""
    if (await conn.execute(text("SELECT to_regclass('alembic_version') IS NOT NULL"))).scalar_one():
        return (await conn.execute(text("SELECT version_num FROM alembic_version"))).scalar_one_or_none()
    return None


def known_revisions() -> list[str]:
    """The migrations this SDK ships, oldest first, read from the file names (no alembic import)."""
    return sorted(path.name.split("_", 1)[0] for path in (_MIGRATIONS / "versions").glob("[0-9][0-9][0-9][0-9]_*.py"))


def _known_revision(revision: str) -> str:
    if revision not in known_revisions():
        raise UsageError(f"unknown revision {revision!r}: this SDK has {', '.join(known_revisions())} (or 'head')")
    return revision


def _upgrade(connection: SyncConnection, embedding_dim: int, target: str) -> None:
    """Run the pending migrations up to `target`. Alembic is imported here, only when the schema is behind: with
    Mako and Pygments it is ~22,000 objects that CPython's garbage collector would walk at every full collection of
    the application's process for as long as it runs."""
    from alembic import command
    from alembic.config import Config as AlembicConfig
    from alembic.util.exc import CommandError as AlembicCommandError

    config = AlembicConfig()
    config.set_main_option("script_location", str(_MIGRATIONS))
    config.attributes["connection"] = connection
    config.attributes["embedding_dim"] = embedding_dim
    try:
        command.upgrade(config, target)
    except AlembicCommandError as exc:
        raise SchemaMismatch(f"the database schema is not one this SDK version knows (newer SDK?): {exc}") from exc


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
            f"this database stores {stored_dim}-dimensional embeddings but the config asks for {embedding_dim}: "
            "its vector columns have one size for every agent, so re-embedding cannot change it. Use an embedder "
            f"of {stored_dim} dimensions (LocalEmbedder(dimensions={stored_dim}) pads to it when {stored_dim} >= 384, "
            "OpenAIEmbedder(dimensions=...) shortens text-embedding-3 vectors), or another database "
            "(database_url / data_dir) for this one"
        )
    return int(rows["schema_version"])


def error_reason(exc: BaseException) -> str:
    """The first line of what went wrong: the driver's own message for a database error (without the SQL
    statement SQLAlchemy appends), else the exception's message, else its type name."""
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
