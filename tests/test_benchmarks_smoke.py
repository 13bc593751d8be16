"""Smoke tests: the benchmark scripts' quick forms run against the session's database and print their tables."""

from __future__ import annotations

import importlib
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from memory_sdk.pipeline import runner
from tests.openai_server import FakeOpenAIServer, Reply

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not (BENCHMARKS / "scale.py").exists(), reason="benchmarks/ is not in this tree"),
]


@pytest.fixture(scope="module")
def benchmarks() -> Iterator[dict[str, ModuleType]]:
    """The scripts as modules (they import their helpers from benchmarks/_common.py)."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        names = (
            "scale",
            "throughput",
            "faults",
            "truth",
            "search_scale",
            "retrieval",
            "chat",
            "write_cpu",
            "insert_cost",
            "server_time",
            "ab",
            "reconciliation_judgement",
        )
        yield {name: importlib.import_module(name) for name in names}
    finally:
        sys.path.remove(str(BENCHMARKS))


async def test_scale_quick_reports_overhead_stages_and_recall(
    benchmarks: dict[str, ModuleType], database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    await benchmarks["scale"].main(["--quick", "--database-url", database_url])
    out = capsys.readouterr().out
    for column in ("facts/agent", "p50 overhead", "p95 overhead", "SQL stmts", "of which SAVEPOINT", "transactions"):
        assert column in out
    assert re.search(r"^\s+2,000\s+\d+\.\d\s+\d+\.\d", out, re.MULTILINE)  # a row for the largest quick size
    for stage in ("event_log", "reconciliation", "upsert"):
        assert re.search(rf"^{stage}\s+\d", out, re.MULTILINE)
    assert "near-dup fresh" in out and "identical pooled" in out
    assert re.search(r"recall at 2,000 facts: [01]\.\d\d", out)


async def test_write_cpu_reports_each_stage_and_puts_the_stages_back(
    benchmarks: dict[str, ModuleType], database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    stages = runner.STAGES
    await benchmarks["write_cpu"].main(["--size", "100", "--writes", "3", "--database-url", database_url])
    out = capsys.readouterr().out
    for stage in (*(name for name, _stage in stages), "whole write"):
        assert re.search(rf"^\s*{stage}\s+\d+\.\d\d\s+\d+\.\d\d$", out, re.MULTILINE), stage
    assert stages == runner.STAGES  # the timing wrappers do not outlive the run


async def test_ab_seeds_once_and_measures_runs_of_writes_on_the_same_agent(
    benchmarks: dict[str, ModuleType],
    database_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ab = benchmarks["ab"]
    where = ["--database-url", database_url, "--dir", str(tmp_path), "--state", str(tmp_path / "state.json")]
    await ab.main(["seed", "--size", "300", *where])
    assert "seeded ab-300: 300 facts" in capsys.readouterr().out
    for runs in (1, 2):
        await ab.main(["run", "--writes", "4", "--warmup", "1", *where])
        got = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert got["writes"] == 4 and got["failed"] == 0 and 0 < got["p50"] <= got["p95"] and got["cpu"] > 0
        assert json.loads((tmp_path / "state.json").read_text())["runs"] == runs
    # interleave: the switches take turns write by write, the order reversed every other round, each called with
    # the open client just before its write (a coroutine function awaited); a row of figures per switch.
    switches = tmp_path / "switches.py"
    switches.write_text(
        "CALLS = []\n"
        "def a(memory):\n    CALLS.append(('a', memory.database is not None))\n"
        "async def b(memory):\n    CALLS.append(('b', memory.database is not None))\n"
        "SWITCHES = {'a': a, 'b': b}\n"
    )
    loaded = ab.load_switches(switches)
    monkeypatch.setattr(ab, "load_switches", lambda _path: loaded)  # the same module, so its CALLS can be read after
    calls = loaded["a"].__globals__["CALLS"]
    planned, kinds_of_write = ab.plan_write, benchmarks["scale"].WRITE_KINDS

    def plan_write(bench: object, agent: object, i: int, *rest: object) -> str:
        calls.append(("kind", i % len(kinds_of_write)))  # after the switch of its turn
        return planned(bench, agent, i, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(ab, "plan_write", plan_write)
    await ab.main(["interleave", "--writes", "4", "--warmup", "1", "--switches", str(switches), *where])
    turns = [name for name, _open in calls if name != "kind"]
    assert turns == ["a", "b", "b", "a", "a", "b", "b", "a"]
    assert all(ok for name, ok in calls if name != "kind")  # each switch saw the open client
    # Every switch gets each kind of write alike (new, repeat, move, near-duplicate: one a round).
    kinds: dict[str, list[int]] = {"a": [], "b": []}
    for (name, _open), (_kind, kind) in zip(calls[1::2], calls[2::2], strict=True):
        kinds[str(name)].append(int(kind))
    assert kinds["a"] == kinds["b"] and sorted(kinds["a"]) == [0, 1, 2, 3]
    out = capsys.readouterr().out
    for name in ("a", "b"):
        assert re.search(rf"^\s*{name}\s+4\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+0$", out, re.MULTILINE), out
    # The paired summary: medians per tree, the median of the pairs' differences, how often this tree was lower.
    pairs = [({"p50": 10.0, "p95": 20.0, "cpu": 5.0}, {"p50": 8.0, "p95": 21.0, "cpu": 4.0})] * 2 + [
        ({"p50": 12.0, "p95": 30.0, "cpu": 6.0}, {"p50": 13.0, "p95": 25.0, "cpu": 5.0})
    ]
    assert ab.paired_summary(pairs) == [
        ("p50", "10.0", "8.0", "-2.0", "2 of 3"),
        ("p95", "20.0", "21.0", "+1.0", "1 of 3"),
        ("cpu", "5.0", "4.0", "-1.0", "3 of 3"),
    ]


async def test_server_time_reads_each_statements_duration_from_the_servers_log(
    benchmarks: dict[str, ModuleType], capsys: pytest.CaptureFixture[str]
) -> None:
    server_time = benchmarks["server_time"]
    log = (
        "2026-12-02 00:08:25.537 UTC [3136] LOG:  duration: 0.068 ms  statement: BEGIN; SELECT 1\n"
        "2026-12-02 00:08:25.538 UTC [3136] LOG:  duration: 1.500 ms  bind __asyncpg_stmt_1__: SELECT *\n"
        "\t  FROM memory_facts\n"
        "2026-12-02 00:08:25.538 UTC [3136] DETAIL:  Parameters: $1 = 'a'\n"
        "2026-12-02 00:08:25.539 UTC [3136] LOG:  duration: 2.250 ms  execute __asyncpg_stmt_1__: "
        "SELECT * FROM memory_facts\n"
        "2026-12-02 00:08:25.540 UTC [3137] LOG:  duration: 0.100 ms  statement: SELECT pg_reload_conf()\n"
        "2026-12-02 00:08:25.541 UTC [3136] LOG:  checkpoint starting: time\n"
    )
    assert server_time.parse_durations(log) == [
        ("simple", "BEGIN; SELECT 1", 0.068),
        ("bind", "SELECT * FROM memory_facts", 1.5),
        ("execute", "SELECT * FROM memory_facts", 2.25),
    ]
    # Its own embedded server (it reads that server's log file), 100 facts, 3 measured writes.
    await server_time.main(["--size", "100", "--writes", "3"])
    out = capsys.readouterr().out
    for phase in ("parse", "bind", "execute", "simple", "all"):
        assert re.search(rf"^{phase}\s+\d+\.\d\d$", out, re.MULTILINE), phase
    assert re.search(
        r"^execute\s+WITH new_facts AS \( INSERT INTO memory_facts .*\s\d+\.\d\d\s+1\.0$", out, re.MULTILINE
    )


async def test_throughput_quick_reports_rate_and_integrity(
    benchmarks: dict[str, ModuleType], database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    await benchmarks["throughput"].main(["--quick", "--database-url", database_url])
    out = capsys.readouterr().out
    for column in ("agents", "writes/s", "p50 ms", "p95 ms", "errors", "lost events", "runs running", "dup facts"):
        assert column in out
    assert "orphan edges" in out and "open lives_in" in out
    rows = re.findall(r"^\s+(1|8)\s+(5|40)\s+0\s+1\s+\d+\.\d", out, re.MULTILINE)
    assert len(rows) == 2


async def test_faults_quick_on_a_documented_seed_is_green_with_faults_in_every_purpose(
    benchmarks: dict[str, ModuleType], database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The short form of docs/benchmarks.md's seed 1: every purpose the pipeline can call, the batched
    reconciliation included, is called and hit by faults, and every figure is at its bound (no FAIL line)."""
    faults = benchmarks["faults"]
    await faults.main(["--quick", "--seed", "1", "--database-url", database_url])
    out = capsys.readouterr().out
    for column in ("figure", "value", "must be", "writes", "cancelled", "untyped", "lost", "runs running"):
        assert column in out
    per_purpose = out.split("\ncalls per purpose, and the faults injected into them\n", 1)[1].split("\n\n", 1)[0]
    rows = re.findall(r"^(\w+)\s+(\d+)\s+(\d+)$", per_purpose, re.MULTILINE)
    calls = {name: (int(n), int(hit)) for name, n, hit in rows}
    assert set(calls) == {*faults.PURPOSES, "embedding"}
    assert all(n > 0 and hit > 0 for n, hit in calls.values()), calls
    figures = dict(re.findall(r"^([a-z][a-z_()' ]+?)\s{2,}(\d+)\b", out.split("\nsummary\n", 1)[1], re.MULTILINE))
    assert int(figures["bad inputs tried"]) >= 15
    for figure in ("events never finished", "runs left running after reprocess", "purposes never called"):
        assert figures[figure] == "0", figure
    assert "FAIL" not in out, [line for line in out.splitlines() if "FAIL" in line]


async def test_truth_with_ideal_answers_scores_100_percent(
    benchmarks: dict[str, ModuleType], database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The whole corpus, not the quick set: two regressions of this corpus showed only in conversations outside it."""
    passed = await benchmarks["truth"].main(["--scripted", "--database-url", database_url])
    out = capsys.readouterr().out
    summary = out.split("\nsummary (", 1)[1]
    for metric in ("end state", "dates", "speaker", "aliases"):
        assert re.search(rf"^{metric}\s+(\d+)/\1 100%\s+100%\s+ok$", summary, re.MULTILINE), metric
    for metric in ("wrong closures", "stale", "ungrounded", "duplicates", "noise", "retract edges"):
        assert re.search(rf"^{metric}\s+0\s+0\s+ok$", summary, re.MULTILINE), metric
    assert "FAIL" not in summary and "WRONG" not in out
    assert passed


async def test_search_scale_quick_reports_latency_per_size(
    benchmarks: dict[str, ModuleType], database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    await benchmarks["search_scale"].main(["--quick", "--database-url", database_url])
    out = capsys.readouterr().out
    for column in ("facts/agent", "p50 ms", "p95 ms", "p95 w/o embed", "p95 named", "planted recall@10"):
        assert column in out
    assert re.search(r"^\s+1,000\s+\d+\.\d\s+\d+\.\d", out, re.MULTILINE)  # a row for the largest quick size
    assert re.search(r"\s10\.0\s+[01]\.\d\d$", out, re.MULTILINE)  # every search returned its 10 hits


async def test_retrieval_quick_scores_each_signal_and_the_hybrid(
    benchmarks: dict[str, ModuleType], database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    await benchmarks["retrieval"].main(["--quick", "--database-url", database_url])
    out = capsys.readouterr().out
    assert "retrieval: 10 questions over 60 labelled facts" in out
    for mode in ("vector", "keyword", "graph", "vector+keyword", "hybrid"):
        assert re.search(rf"^hash\s+{re.escape(mode)}\s+[01]\.\d{{3}}\s+[01]\.\d{{3}}$", out, re.MULTILINE)
    assert re.search(r"hash: hybrid recall@5 [01]\.\d{3} vs best single", out)


async def test_fact_index_compares_the_index_definitions_and_leaves_the_migrations_one(
    database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        fact_index = importlib.import_module("fact_index")
        await fact_index.main(
            ["--sizes", "100", "600", "--ops", "3", "--recall-k", "3", "--database-url", database_url]
        )
    finally:
        sys.path.remove(str(BENCHMARKS))
    out = capsys.readouterr().out
    assert re.search(r"^\s*before\s+\d+\s+\d+\s+yes", out, re.MULTILINE)
    assert re.search(r"^\s*after\s+\d+\s+\d+\s+yes", out, re.MULTILINE)  # the candidate scan uses each index
    conn = await fact_index.asyncpg.connect(fact_index.asyncpg_dsn(database_url))
    try:
        definition = await conn.fetchval(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_memory_facts_embedding'"
            " AND schemaname = current_schema()"
        )
    finally:
        await conn.close()
    assert "halfvec" in definition and "WHERE" in definition  # the database keeps the migration's index


async def test_chat_quick_reports_calls_per_write_and_why_a_write_paid_more(
    benchmarks: dict[str, ModuleType], database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    await benchmarks["chat"].main(["--quick", "--embedder", "hash", "--database-url", database_url])
    out = capsys.readouterr().out
    assert re.search(r"^priya_jon\s+6\s+1\.00$", out, re.MULTILINE)  # the stand-in: one informed call per write
    assert "LLM calls by purpose: informed_extraction 6" in out
    assert "writes over 1 call 0, re-asked without memory 0, blind path 0, reconciliation call 0" in out
    assert "writes reporting a failure: 0" in out


async def test_insert_cost_reports_every_variant_and_leaves_the_schema_as_migrated(
    benchmarks: dict[str, ModuleType], database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each variant of the facts' HNSW index and trigger runs in a transaction that is rolled back: the database
    keeps the migration's index (pgvector's default m and ef_construction) and the enabled trigger."""
    insert_cost = benchmarks["insert_cost"]
    await insert_cost.main(["--quick", "--database-url", database_url])
    out = capsys.readouterr().out
    number = r"\s+(?:\d+\.\d\d|n/a)\s+\d+\.\d\d\s+\d+"
    for variant in insert_cost.ORDER:
        assert re.search(rf"^{re.escape(variant)}{number}$", out, re.MULTILINE), variant
    assert re.search(rf"^1-6{number}$", out, re.MULTILINE)  # the first batch after the checkpoint
    conn = await insert_cost.asyncpg.connect(insert_cost.asyncpg_dsn(database_url))
    try:
        definition, trigger = await conn.fetchrow(
            "SELECT (SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_memory_facts_embedding'"
            " AND schemaname = current_schema()),"
            " (SELECT tgenabled::text FROM pg_trigger WHERE tgname = 'memory_facts_insert_stamps_seq')"
        )
    finally:
        await conn.close()
    assert definition is not None and "halfvec" in definition and "WHERE" in definition  # the migration's index
    assert "m=" not in definition.replace(" ", "") and "ef_construction" not in definition
    assert trigger == "O"  # enabled


async def test_ab_sizes_alternates_writes_between_two_agents_and_prints_the_growth(
    benchmarks: dict[str, ModuleType],
    database_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ab = benchmarks["ab"]
    where = ["--database-url", database_url, "--dir", str(tmp_path)]
    large, small = tmp_path / "large.json", tmp_path / "small.json"
    await ab.main(["seed", "--size", "310", "--state", str(large), *where])  # ab-300 is the other test's
    await ab.main(["seed", "--size", "130", "--state", str(small), *where])
    capsys.readouterr()
    written: list[str] = []
    timed = ab.timed_write

    async def timed_write(memory: object, embedder: object, counter: object, agent_id: str, message: str) -> object:
        written.append(agent_id)
        return await timed(memory, embedder, counter, agent_id, message)  # type: ignore[arg-type]

    monkeypatch.setattr(ab, "timed_write", timed_write)
    await ab.main(["sizes", "--writes", "3", "--warmup", "1", "--state", str(large), "--also", str(small), *where])
    # Smaller first, then the order reversed every round: both sizes meet the same minutes alike.
    assert written == ["ab-130", "ab-310", "ab-310", "ab-130", "ab-130", "ab-310", "ab-310", "ab-130"]
    assert [json.loads(path.read_text())["runs"] for path in (large, small)] == [1, 1]
    out = capsys.readouterr().out
    for size in ("130", "310"):
        assert re.search(rf"^\s*{size}\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+3\s+0$", out, re.MULTILINE), out
    assert re.search(r"^growth p95 x\d+\.\d\d, p50 x\d+\.\d\d$", out, re.MULTILINE), out


async def test_reconciliation_judgement_counts_right_answers_and_closures_of_true_facts(
    benchmarks: dict[str, ModuleType], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Against the fake OpenAI server: every pair answered right but the first, which closes its distractor (the
    1.5B model's habit), under both hints; the variant prompt is read from --prompt."""
    module = benchmarks["reconciliation_judgement"]
    pairs = json.loads(module.PAIRS.read_text(encoding="utf-8"))
    replies = [Reply.chat({"action": "UPDATE", "target": "2"})] * 2
    for pair in pairs[1:]:
        target = None if pair["expect"] == "ADD" else str(pair["target"])
        replies += [Reply.chat({"action": pair["expect"], "target": target})] * 2
    variant = tmp_path / "variant.md"
    variant.write_text((BENCHMARKS.parent / "prompts" / "reconciliation.md").read_text(encoding="utf-8"))
    with FakeOpenAIServer() as server:
        server.script_chat(*replies)
        await module.main(["--base-url", server.base_url, "--model", "m", "--api-key", "k", "--prompt", str(variant)])
    out = capsys.readouterr().out
    total = 2 * len(pairs)
    assert re.search(rf"^\s*total\s+{total}\s+{total - 2}\s+2\s*$", out, re.MULTILINE), out
    assert "(variant.md)" in out
