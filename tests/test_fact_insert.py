"""benchmarks/insert_cost.py: it measures the real fact insert under each variant of the facts' indexes and trigger,
and leaves the database's schema as the migrations made it (every variant's transaction is rolled back)."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not (BENCHMARKS / "insert_cost.py").exists(), reason="benchmarks/ is not in this tree"),
]

_SCHEMA = """
    SELECT (SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_memory_facts_embedding'
            AND schemaname = current_schema()) AS indexdef,
           (SELECT tgenabled::text FROM pg_trigger WHERE tgname = 'memory_facts_insert_stamps_seq') AS tgenabled
"""


async def test_insert_cost_reports_every_variant_and_leaves_the_schema_as_migrated(
    database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        insert_cost = importlib.import_module("insert_cost")
        await insert_cost.main(["--quick", "--database-url", database_url])
        conn = await insert_cost.asyncpg.connect(insert_cost.asyncpg_dsn(database_url))
        try:
            schema = await conn.fetchrow(_SCHEMA)
        finally:
            await conn.close()
    finally:
        sys.path.remove(str(BENCHMARKS))
    out = capsys.readouterr().out
    number = r"\s+(?:\d+\.\d\d|n/a)\s+\d+\.\d\d\s+\d+"
    for variant in insert_cost.ORDER:
        assert re.search(rf"^{re.escape(variant)}{number}$", out, re.MULTILINE), variant
    assert re.search(rf"^1-6{number}$", out, re.MULTILINE)  # the first batch after the checkpoint
    definition = schema["indexdef"]
    assert definition is not None and "halfvec" in definition and "WHERE" in definition  # the migration's index
    assert "m=" not in definition.replace(" ", "") and "ef_construction" not in definition  # pgvector's defaults
    assert schema["tgenabled"] == "O"  # the trigger enabled
