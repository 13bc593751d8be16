"""The server's side of a write: how long PostgreSQL itself spends on each statement a write sends.

benchmarks/write_cpu.py times the client; this times the server. One agent of `--size` facts is seeded as
benchmarks/scale.py seeds it (a fresh embedded PostgreSQL, COPY, HashEmbedder vectors), 10 unmeasured writes run,
then the server logs the duration of every statement (`log_min_duration_statement = 0`, set with ALTER SYSTEM and a
reload, reset after) while `--writes` of scale.py's writes run one at a time with its instant scripted LLM. The log
is read back and each statement's durations are summed by phase: `parse`, `bind` (for asyncpg's prepared statements
this is where a custom plan is made: the planning time) and `execute`, or `simple` for a simple-protocol query
(Database.tenant's BEGIN with the tenant settings, COMMIT, the fact indexer's batch, which runs after a write in the
background). Printed per write: the total per phase and the statements that cost most, each with its calls per
write. Durations are the server's own (no network, no client), so they add up to less than the write's wall time.

    python benchmarks/server_time.py [--size 100] [--writes 60] [--top 15]
    python benchmarks/server_time.py --size 100000 --writes 60      # seeds 100,000 facts first (~3 min)
"""

from __future__ import annotations

import argparse
import asyncio
import re
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import asyncpg  # type: ignore[import-untyped, unused-ignore]
from _common import asyncpg_dsn, format_table
from scale import SUBJECT
from write_cpu import warmed_agent

# A server log line: "... LOG:  duration: 0.123 ms  execute __asyncpg_stmt_4__: SELECT ..." (or "statement: ...").
_DURATION = re.compile(r"duration: ([\d.]+) ms\s+(parse|bind|execute|statement)[^:]*:\s*(.*)", re.DOTALL)
_ENTRY_START = re.compile(r"\n(?=\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+ \w+ \[)")
_LABEL_CHARS = 100
# This script's own statements, on its own connection: not the writes'.
_OWN = ("ALTER SYSTEM SET log_min_duration_statement", "SELECT pg_reload_conf()", "SHOW data_directory")


def parse_durations(log: str) -> list[tuple[str, str, float]]:
    """(phase, statement, ms) for each duration entry of a PostgreSQL log: phase is parse, bind, execute or simple;
    the statement's whitespace is collapsed."""
    found: list[tuple[str, str, float]] = []
    for entry in _ENTRY_START.split(log):
        match = _DURATION.search(entry)
        if match is None:
            continue
        ms, phase, statement = float(match.group(1)), match.group(2), match.group(3)
        statement = " ".join(statement.split("\nDETAIL:")[0].split())
        if statement.startswith(_OWN):
            continue
        found.append(("simple" if phase == "statement" else phase, statement, ms))
    return found


def summarise(entries: Sequence[tuple[str, str, float]], writes: int, top: int) -> str:
    """Per write: the total per phase, then the `top` (phase, statement) pairs by time."""
    phases: dict[str, float] = defaultdict(float)
    pairs: dict[tuple[str, str], list[float]] = defaultdict(list)
    for phase, statement, ms in entries:
        phases[phase] += ms
        pairs[(phase, statement[:_LABEL_CHARS])].append(ms)
    totals = [(phase, f"{phases[phase] / writes:.2f}") for phase in ("parse", "bind", "execute", "simple")]
    totals.append(("all", f"{sum(phases.values()) / writes:.2f}"))
    ranked = sorted(pairs.items(), key=lambda item: -sum(item[1]))[:top]
    rows = [
        (phase, statement, f"{sum(times) / writes:.2f}", f"{len(times) / writes:.1f}")
        for (phase, statement), times in ranked
    ]
    return "\n\n".join(
        [
            format_table(("phase", "ms per write"), totals, left=1),
            format_table(("phase", "statement", "ms per write", "calls per write"), rows, left=2),
        ]
    )


async def set_statement_logging(url: str, enabled: bool) -> Path:
    """Turn the server's logging of every statement's duration on or off; the server's log file."""
    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        setting = "0" if enabled else "DEFAULT"
        await conn.execute(f"ALTER SYSTEM SET log_min_duration_statement = {setting}")
        await conn.execute("SELECT pg_reload_conf()")
        data_directory = Path(await conn.fetchval("SHOW data_directory"))
    finally:
        await conn.close()
    await asyncio.sleep(0.5)  # the backends read the reloaded setting at their next command
    return data_directory / "log"


async def measure(args: argparse.Namespace) -> None:
    async with warmed_agent("server", args.size, args.writes, None) as (url, memory, agent_id, messages):
        log_file = await set_statement_logging(url, True)
        if not log_file.exists():
            raise SystemExit(f"no server log at {log_file}: this needs the embedded server's own log file")
        start = log_file.stat().st_size
        try:
            for message in messages:
                await memory.write(agent_id, message, speaker_name=SUBJECT)
            await memory.database.indexer.drain()  # the last write's batch, logged with the others
        finally:
            await set_statement_logging(url, False)
        with log_file.open("rb") as log:
            log.seek(start)
            text = log.read().decode("utf-8", errors="replace")
    print(f"the server's own time per write (ms), {args.writes} writes at {args.size:,} facts")
    print(summarise(parse_durations(text), args.writes, args.top))


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=100, help="facts of the agent")
    parser.add_argument("--writes", type=int, default=60, help="measured writes")
    parser.add_argument("--top", type=int, default=15, help="statements listed")
    return parser.parse_args(argv)


async def main(argv: Sequence[str] | None = None) -> None:
    await measure(parse_args(argv))


if __name__ == "__main__":
    asyncio.run(main())
