"""`memory-sdk migrate` and MemoryConfig.migrate_on_open, on fresh databases of the real test server; and the
production page's SQL (docs/production.md) run as written: an owner role migrates, an app role with only the
grants the page lists opens a MemoryClient and writes."""

from __future__ import annotations

import asyncio
import json
import os
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from memory_sdk import MemoryClient, MemoryConfig
from memory_sdk.cli import main
from memory_sdk.errors import SchemaMismatch
from memory_sdk.store.database import HEAD_REVISION, to_async_url
from memory_sdk.testing import HashEmbedder, ScriptedLLM
from tests.conftest import downgrade

pytestmark = pytest.mark.integration

PRODUCTION_PAGE = Path(__file__).parent.parent / "docs" / "production.md"


async def _revision(url: str) -> str | None:
    engine = create_async_engine(to_async_url(url))
    try:
        async with engine.connect() as conn:
            if not (await conn.execute(text("SELECT to_regclass('alembic_version') IS NOT NULL"))).scalar_one():
                return None
            return (await conn.execute(text("SELECT version_num FROM alembic_version"))).scalar_one_or_none()
    finally:
        await engine.dispose()


async def _cli(argv: list[str]) -> int:
    """The `memory-sdk` command in a thread of its own: main() runs its own event loop (asyncio.run)."""
    return await asyncio.to_thread(main, argv)


async def _migrate_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    code = await _cli(["migrate", *args, "--json"])
    return code, json.loads(capsys.readouterr().out)


async def test_migrate_brings_a_fresh_database_to_head(
    fresh_database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, report = await _migrate_json(capsys, "--database-url", fresh_database_url)
    assert code == 0
    assert report["previous"] is None and report["revision"] == HEAD_REVISION and report["pending"] == []
    assert await _revision(fresh_database_url) == HEAD_REVISION


async def test_check_on_head_exits_0(fresh_database_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert await _cli(["migrate", "--database-url", fresh_database_url]) == 0
    capsys.readouterr()
    code, report = await _migrate_json(capsys, "--database-url", fresh_database_url, "--check")
    assert code == 0 and report["revision"] == HEAD_REVISION


async def test_check_on_an_older_revision_exits_1_and_changes_nothing(
    fresh_database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await _cli(["migrate", "--database-url", fresh_database_url]) == 0
    engine = create_async_engine(fresh_database_url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(downgrade, "0012")
    finally:
        await engine.dispose()
    capsys.readouterr()
    code, report = await _migrate_json(capsys, "--database-url", fresh_database_url, "--check")
    assert code == 1
    assert report["revision"] == "0012" and report["pending"] == ["0013", "0014"]
    assert await _revision(fresh_database_url) == "0012"


async def test_migrate_to_a_revision_stops_there_and_never_downgrades(
    fresh_database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, report = await _migrate_json(capsys, "--database-url", fresh_database_url, "--to", "0005")
    assert code == 0 and report["revision"] == "0005"
    assert await _cli(["migrate", "--database-url", fresh_database_url, "--to", "0003"]) == 2
    assert "does not downgrade" in capsys.readouterr().err
    assert await _revision(fresh_database_url) == "0005"


async def test_migrate_on_open_off_refuses_a_database_behind_head_and_opens_one_at_head(
    fresh_database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    no_migrations = MemoryConfig(embedding_dim=HashEmbedder().dimensions, migrate_on_open=False)
    client = MemoryClient(fresh_database_url, llm=ScriptedLLM(), embedder=HashEmbedder(), config=no_migrations)
    with pytest.raises(SchemaMismatch, match="memory-sdk migrate"):
        await client.open()
    assert await _revision(fresh_database_url) is None  # nothing was created
    dim = str(HashEmbedder().dimensions)
    assert await _cli(["migrate", "--database-url", fresh_database_url, "--embedding-dim", dim]) == 0
    async with MemoryClient(fresh_database_url, llm=ScriptedLLM(), embedder=HashEmbedder(), config=no_migrations) as m:
        assert m.schema_version > 0


# --- the production page's SQL, run as written -----------------------------------------------------------------


def _page_sql(name: str) -> str:
    """The ```sql block that follows `<!-- production-sql: NAME -->` in docs/production.md."""
    page = PRODUCTION_PAGE.read_text()
    found = re.search(rf"<!-- production-sql: {name} -->\s*```sql\n(.*?)```", page, re.DOTALL)
    assert found is not None, f"docs/production.md has no production-sql block {name!r}"
    return found.group(1)


@pytest.fixture
async def dedicated_roles(database_url: str) -> AsyncIterator[dict[str, str]]:
    """The page's owner and app roles and database, under names of this test's own, on the embedded server.

    The embedded server admits only the OS user's own database user over its socket (peer authentication with an
    ident map); this test maps the OS user to the two roles too, for its length. Production connects with
    passwords over TCP instead: the grants tested are the same."""
    if os.environ.get("MEMORY_SDK_TEST_DATABASE_URL"):
        pytest.skip("needs the embedded server (its ident map is edited)")
    suffix = uuid.uuid4().hex[:8]
    names = {
        "memory_owner": f"memory_owner_{suffix}",
        "memory_app": f"memory_app_{suffix}",
        "memory": f"memory_{suffix}",
    }
    admin_url = make_url(to_async_url(database_url))
    superuser = await asyncpg.connect(
        host=admin_url.query["host"], user=admin_url.username, database=admin_url.database
    )
    ident = Path(await superuser.fetchval("SHOW ident_file"))
    original = ident.read_text()  # noqa: ASYNC240 (a small local file)
    os_user, _ = original.strip().splitlines()[-1].split()[1:3]
    mapping = "".join(f"memory_sdk {os_user} {names[role]}\n" for role in ("memory_owner", "memory_app"))
    ident.write_text(original + mapping)  # noqa: ASYNC240
    await superuser.fetchval("SELECT pg_reload_conf()")
    try:
        yield {**names, "host": str(admin_url.query["host"]), "superuser": str(admin_url.username)}
    finally:
        ident.write_text(original)  # noqa: ASYNC240
        await superuser.fetchval("SELECT pg_reload_conf()")
        await superuser.execute(f"DROP DATABASE IF EXISTS {names['memory']} WITH (FORCE)")
        for role in ("memory_app", "memory_owner"):
            await superuser.execute(f"DROP ROLE IF EXISTS {names[role]}")
        await superuser.close()


def _named(sql: str, names: dict[str, str]) -> str:
    return re.sub(r"\b(memory_owner|memory_app|memory)\b", lambda found: names[found.group(1)], sql)


async def test_the_pages_sql_gives_an_app_role_enough_to_write_and_nothing_more(
    dedicated_roles: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    names, host = dedicated_roles, dedicated_roles["host"]
    superuser = await asyncpg.connect(host=host, user=names["superuser"], database="postgres")
    try:
        for statement in _named(_page_sql("cluster"), names).split(";\n"):
            if statement.strip():
                await superuser.execute(statement)  # CREATE DATABASE cannot run inside a multi-statement string
    finally:
        await superuser.close()
    in_database = await asyncpg.connect(host=host, user=names["superuser"], database=names["memory"])
    try:
        await in_database.execute(_named(_page_sql("database"), names))
    finally:
        await in_database.close()

    def url(role: str) -> str:
        return f"postgresql://{names[role]}@/{names['memory']}?host={host}"

    assert await _cli(["migrate", "--database-url", url("memory_owner")]) == 0
    owner = await asyncpg.connect(host=host, user=names["memory_owner"], database=names["memory"])
    try:
        await owner.execute(_named(_page_sql("grants"), names))
    finally:
        await owner.close()
    in_database = await asyncpg.connect(host=host, user=names["superuser"], database=names["memory"])
    try:
        await in_database.execute(_named(_page_sql("pgbouncer"), names))
    finally:
        await in_database.close()
    capsys.readouterr()

    # The demo (a replayed model) writes its conversation as the app role, migrate_on_open left on: at head it
    # takes the migration lock and changes nothing, which needs no privilege.
    assert await _cli(["demo", "--database-url", url("memory_app"), "--agent", "prod-check", "--embedder", "hash"]) == 0
    config = MemoryConfig(embedding_dim=HashEmbedder().dimensions, migrate_on_open=False)
    async with MemoryClient(url("memory_app"), llm=ScriptedLLM(), embedder=HashEmbedder(), config=config) as memory:
        assert await memory.get_facts("prod-check")
        assert (await memory.check("prod-check")).ok
        assert sum((await memory.forget("prod-check")).values()) > 0

    app = await asyncpg.connect(host=host, user=names["memory_app"], database=names["memory"])
    try:
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await app.execute("CREATE TABLE memory_extra (id int)")
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await app.execute("ALTER TABLE memory_facts NO FORCE ROW LEVEL SECURITY")
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await app.execute("UPDATE alembic_version SET version_num = '0001'")
        assert await app.fetchval("SELECT current_setting('plan_cache_mode')") == "force_custom_plan"
    finally:
        await app.close()
