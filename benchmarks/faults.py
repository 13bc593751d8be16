"""Faults injected, what survives: the SDK's honesty under a chaotic model and embedder, cancelled writes, a killed
process and bad input.

1. Chaos: `--agents` x `--writes-per-agent` writes (default 8 x 25), each with its own message_id, launched at once
   (`--stagger` seconds apart per agent: 0.3 with --quick, so its few writes still meet each other's facts and
   names) through MemoryClient (extraction_timeout_sec 0.5, run_heartbeat_sec 0.2, run_stale_after_sec 1.0); every
   4th write runs with informed extraction off (the blind path's three calls). Then consolidate() of every agent
   under the same chaos. A seeded ScriptedLLM answers every purpose of `PURPOSES` well (2-3 facts, 2-3 entities,
   1 relation; reconciliation, per fact or batched, ADD or UPDATE of "1"; no entity match; a profile of the facts
   shown) or, with probability `--fault-rate` and always on a purpose's first call, with a fault: ProviderError,
   RuntimeError, a sleep past the timeout, text that is not JSON, or JSON with malformed items (NaN confidence,
   blank subject, name or profile, valid_from 2025-13-45, a NUL in a text, target "²" or NaN, a batched answer
   missing a verdict or naming fact "99", a list nested 10,000 deep). The embedder (HashEmbedder) is wrapped to
   return, with probability `--embed-fault-rate`, vectors of the wrong size, NaN, +inf, no vectors, empty vectors,
   or to raise. `--cancel-rate` of the write tasks are cancelled after a random short delay.
2. Retry: every write that did not return success=True is written again with its message_id (healthy providers).
3. Reprocess: after run_stale_after_sec, `reprocess(agent)` for every agent (healthy providers).
4. Integrity after each phase (SQL): events per message_id (lost, duplicated), runs left 'running', each event's
   latest run status, duplicate current facts, orphaned current edges. Without --quick also a killed process: this
   script re-invoked with --worker writes 20 messages (LLM 0.2 s per call) and is SIGKILLed after `--kill-after`
   seconds; the parent then reprocesses and retries its messages.
5. Bad input: write() and read calls with bad arguments; held = raised a MemorySDKError subclass.

Exit code 0 always (a benchmark); violated invariants are printed as "FAIL:" lines, among them a purpose of
`PURPOSES` the chaos phase never called or never hit with a fault.

    python benchmarks/faults.py [--agents 8] [--writes-per-agent 25] [--fault-rate 0.3] [--seed 9]
    python benchmarks/faults.py --quick        # 2 agents x 12 writes 0.3 s apart, no killed process
    python benchmarks/faults.py --database-url postgresql://user:pw@host/db
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import signal
import sys
import time
import uuid
import zlib
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from _common import database, format_table, prompt_message, reconciliation_prompt
from sqlalchemy import text

from memory_sdk import MemoryClient, MemoryConfig
from memory_sdk.errors import MemorySDKError, ProviderError
from memory_sdk.llm.protocols import PURPOSES, LLMRequest
from memory_sdk.results import ConsolidationResult, WriteResult
from memory_sdk.testing import HashEmbedder, ScriptedLLM, ScriptedResponse

SPEAKER = "Rafael"
FRIENDS = ["Marina Duarte", "Carlos Moreira", "Beatriz Teixeira", "Joana Cardoso", "Thiago Barros"]
# Odd writes name one of six people whose names are near one another's (HashEmbedder name cosines 0.69-0.84, under
# fuzzy_threshold 0.85, none a prefix of another): each one new to the agent goes to an entity_resolution call.
NEAR_NAMES = ("Marina Duarte", "Mariana Duarte", "Mariane Duarte", "Marinha Duarte", "Marine Duarte", "Marita Duarte")
CAFES = ["Café Lisboa", "Padaria Central", "the bookshop café", "the market stall"]
ITEMS = ["a bicycle lock", "running shoes", "a coffee grinder", "a desk lamp", "a rain jacket"]
TIMEOUT_SEC = 0.5  # extraction_timeout_sec: a "timeout" fault sleeps past it
FAST_LEASE = {"extraction_timeout_sec": TIMEOUT_SEC, "run_heartbeat_sec": 0.2, "run_stale_after_sec": 1.0}
BLIND_EVERY = 4  # every 4th write runs with informed extraction off: the blind path's purposes are called
DEEP = "[" * 10_000 + "]" * 10_000  # a list nested 10,000 deep: json.loads raises RecursionError on it

# The write (message_id) the current task works for: the LLM and embedder charge their faults to it.
CURRENT_WRITE: ContextVar[str | None] = ContextVar("CURRENT_WRITE", default=None)


# --- messages and what a good model extracts from them -------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    agent_id: str
    index: int

    @property
    def message_id(self) -> str:
        return f"{self.agent_id}/m{self.index:03d}"

    @property
    def blind(self) -> bool:
        """Whether this write takes the blind path (entity_scan, fact_extraction, relation_extraction)."""
        return self.index % BLIND_EVERY == BLIND_EVERY - 1

    @property
    def message(self) -> str:
        friend, cafe, item = self._picks()
        return f"Met {friend} at {cafe} today (note {self.index} of {self.agent_id}). I bought {item} there."

    def answer(self) -> dict[str, Any]:
        friend, cafe, item = self._picks()
        facts = [
            {"subject": SPEAKER, "text": f"{SPEAKER} met {friend} at {cafe} (note {self.index} of {self.agent_id})"},
            {"subject": SPEAKER, "text": f"{SPEAKER} likes {cafe}", "importance_category": "stable_preference"},
        ]
        if self.index % 2 == 0:
            facts.append({"subject": SPEAKER, "text": f"{SPEAKER} bought {item} at {cafe}, note {self.index}"})
        return {
            "entities": [
                {"name": SPEAKER, "type": "person"},
                {"name": friend, "type": "person"},
                {"name": cafe, "type": "place"},
            ],
            "facts": facts,
            "relations": [{"source": SPEAKER, "target": friend, "type": "friend_of"}],
        }

    def _picks(self) -> tuple[str, str, str]:
        # The agent's number, not the run's id: a run's messages, and so the names that meet, are the same each time.
        n = zlib.crc32(f"{self.agent_id.rsplit('-', 1)[-1]}/{self.index}".encode())
        friend = NEAR_NAMES[self.index // 2 % len(NEAR_NAMES)] if self.index % 2 else FRIENDS[n % len(FRIENDS)]
        return friend, CAFES[(n >> 8) % len(CAFES)], ITEMS[(n >> 16) % len(ITEMS)]


EMPTY: dict[str, Any] = {"entities": [], "facts": [], "relations": []}


_BATCH_BLOCK = re.compile(r"^New fact (\d+) \([^\n]*\):\n.*\nExisting facts:\n((?:\d+\. .*\n?)*)", re.MULTILINE)
_PROFILE_FACT = re.compile(r"^- (.*) \(since \d{4}-\d{2}-\d{2}\)$", re.MULTILINE)


def verdict(has_candidates: bool, rng: random.Random) -> dict[str, Any]:
    """A good reconciliation verdict: UPDATE of "1" half the time when there is a candidate, else ADD."""
    if has_candidates and rng.random() < 0.5:
        return {"reasoning": "the new fact replaces it", "action": "UPDATE", "target": "1"}
    return {"reasoning": "new information", "action": "ADD", "target": None}


def good_answer(purpose: str, request: LLMRequest, answers: dict[str, dict[str, Any]], rng: random.Random) -> Any:
    """What a capable model answers for `purpose` (every purpose in PURPOSES; an unknown one raises KeyError)."""
    content = request.messages[-1]["content"]
    if purpose == "reconciliation":
        _, candidates = reconciliation_prompt(request)
        return verdict(bool(candidates), rng)
    if purpose == "reconciliation_batch":
        blocks = _BATCH_BLOCK.findall(content)
        return {"decisions": [{"fact": number, **verdict(bool(listed.strip()), rng)} for number, listed in blocks]}
    if purpose == "entity_resolution":
        return {"reasoning": "none of these", "match": None}
    if purpose == "profile_consolidation":
        facts = _PROFILE_FACT.findall(content)[:3]  # the profile says what its facts say, nothing more
        return {"profile": " ".join(f"{fact}." for fact in facts) or "Nothing is known about it yet."}
    answer = answers.get(prompt_message(request), EMPTY)
    if purpose == "informed_extraction":
        return json.loads(json.dumps(answer))  # a copy the faults may spoil
    key = {"entity_scan": "entities", "fact_extraction": "facts", "relation_extraction": "relations"}[purpose]
    return {key: json.loads(json.dumps(answer[key]))}


# --- the faults ----------------------------------------------------------------------------------------------------

LLM_FAULTS = ("provider_error", "runtime_error", "timeout", "not_json")
MALFORMED: dict[str, tuple[str, ...]] = {
    "informed_extraction": ("nan_confidence", "blank_subject", "bad_valid_from", "nul_in_text", "blank_name", "deep"),
    "fact_extraction": ("nan_confidence", "blank_subject", "bad_valid_from", "nul_in_text", "deep"),
    "entity_scan": ("blank_name", "nul_in_name", "deep"),
    "relation_extraction": ("blank_source", "deep"),
    "entity_resolution": ("superscript_id", "nan_id", "deep"),
    "reconciliation": ("superscript_id", "nan_id", "deep"),
    "reconciliation_batch": ("superscript_id", "nan_id", "deep", "missing_verdict", "unknown_fact"),
    "profile_consolidation": ("blank_profile", "nul_in_profile", "deep"),
}
if set(MALFORMED) != set(PURPOSES):  # a purpose the pipeline gained must get answers and faults here
    raise RuntimeError(f"faults.py scripts {sorted(MALFORMED)}, the pipeline calls {sorted(PURPOSES)}")
EMBED_FAULTS = ("wrong_dim", "nan_vector", "inf_vector", "no_vectors", "empty_vectors", "embed_raise")
NAN = "@NaN@"  # replaced by a bare NaN in the JSON text


def malformed(purpose: str, answer: dict[str, Any], kind: str) -> str:
    """The good answer spoiled by one malformed item, as raw JSON text."""
    facts, entities = answer.get("facts") or [{}], answer.get("entities") or [{}, {}]
    if kind == "nan_confidence":
        facts[0]["confidence"] = NAN
    elif kind == "blank_subject":
        facts[0]["subject"] = "   "
    elif kind == "bad_valid_from":
        facts[0]["valid_from"] = "2025-13-45"
    elif kind == "nul_in_text":
        facts[0]["text"] = facts[0].get("text", "x") + "\u0000 (a NUL)"
    elif kind == "blank_name":
        entities[0]["name"] = " \t "
    elif kind == "nul_in_name":
        entities[-1]["name"] = "Mar\u0000ina"
    elif kind == "blank_source":
        answer["relations"][0]["source"] = "  "
    elif kind in ("superscript_id", "nan_id") and purpose == "reconciliation_batch":
        answer["decisions"][0].update({"action": "UPDATE", "target": "²" if kind == "superscript_id" else NAN})
    elif kind in ("superscript_id", "nan_id"):
        key = "match" if purpose == "entity_resolution" else "target"
        answer.update({"action": "UPDATE", key: "²" if kind == "superscript_id" else NAN})
    elif kind == "missing_verdict":
        answer["decisions"].pop()  # the last new fact gets no verdict: it takes the fallback
    elif kind == "unknown_fact":
        answer["decisions"][0]["fact"] = "99"  # a fact number the prompt never showed
    elif kind == "blank_profile":
        answer["profile"] = " \t "
    elif kind == "nul_in_profile":
        answer["profile"] += " \u0000 (a NUL)"
    elif kind == "deep" and purpose == "reconciliation_batch":
        answer["decisions"][0]["target"] = "@DEEP@"
    elif kind == "deep":
        key = {"entity_resolution": "match", "reconciliation": "target"}.get(purpose) or next(iter(answer))
        answer[key] = "@DEEP@"
    return json.dumps(answer, ensure_ascii=False).replace(f'"{NAN}"', "NaN").replace('"@DEEP@"', DEEP)


@dataclass
class Chaos:
    """The seeded dice, and every fault they injected, charged to the write it hit."""

    rng: random.Random
    fault_rate: float
    embed_fault_rate: float
    latency_s: float = 0.0
    answers: dict[str, dict[str, Any]] = field(default_factory=dict)
    injected: Counter[str] = field(default_factory=Counter)
    calls: Counter[str] = field(default_factory=Counter)  # per purpose ("embedding" for the embedder)
    injected_into: Counter[str] = field(default_factory=Counter)  # faults per purpose
    hits: dict[str, list[str]] = field(default_factory=dict)  # message_id -> fault kinds (None: outside a write)

    def roll(self, rate: float, kinds: Sequence[str], purpose: str) -> str | None:
        """A fault kind with probability `rate`, else None; a purpose's first call always gets one, so every
        purpose called is hit whatever the dice say."""
        self.calls[purpose] += 1
        if rate <= 0 or (self.calls[purpose] > 1 and self.rng.random() >= rate):
            return None
        kind = self.rng.choice(kinds)
        self.injected[kind] += 1
        self.injected_into[purpose] += 1
        self.hits.setdefault(CURRENT_WRITE.get() or "(outside a write)", []).append(kind)
        return kind

    def llm(self) -> ScriptedLLM:
        def responder(purpose: str) -> Callable[[LLMRequest], Awaitable[ScriptedResponse]]:
            async def answer(request: LLMRequest) -> ScriptedResponse:
                await asyncio.sleep(self.latency_s)
                kind = self.roll(self.fault_rate, LLM_FAULTS + MALFORMED[purpose], purpose)
                good = good_answer(purpose, request, self.answers, self.rng)
                if kind is None:
                    return good  # type: ignore[no-any-return]
                if kind == "provider_error":
                    return ProviderError(f"chaos: {purpose} provider is down")
                if kind == "runtime_error":
                    return RuntimeError(f"chaos: connection reset during {purpose}")
                if kind == "timeout":
                    await asyncio.sleep(TIMEOUT_SEC + 0.3)
                    return good  # type: ignore[no-any-return]
                if kind == "not_json":
                    return '{"facts": ['
                return malformed(purpose, good, kind)

            return answer

        return ScriptedLLM({purpose: responder(purpose) for purpose in PURPOSES})


class ChaoticEmbedder:
    """HashEmbedder, except when the dice say otherwise."""

    def __init__(self, chaos: Chaos, dimensions: int) -> None:
        self.chaos = chaos
        self.inner = HashEmbedder(dimensions=dimensions)

    @property
    def dimensions(self) -> int:
        return self.inner.dimensions

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors = await self.inner.embed(texts)
        kind = self.chaos.roll(self.chaos.embed_fault_rate, EMBED_FAULTS, "embedding")
        if kind == "wrong_dim":
            return [vector[:-1] for vector in vectors]
        if kind in ("nan_vector", "inf_vector"):
            vectors[0][0] = float("nan") if kind == "nan_vector" else float("inf")
        elif kind == "no_vectors":
            return []
        elif kind == "empty_vectors":
            return [[] for _ in texts]
        elif kind == "embed_raise":
            raise ConnectionError("chaos: embedding service unreachable")
        return vectors


def make_client(url: str, chaos: Chaos, dim: int) -> MemoryClient:
    return MemoryClient(
        url,
        llm=chaos.llm(),
        embedder=ChaoticEmbedder(chaos, dim),
        config=MemoryConfig(embedding_dim=dim, **FAST_LEASE),
    )


def healthy(jobs: Sequence[Job], latency_s: float = 0.0) -> Chaos:
    return Chaos(random.Random(0), 0.0, 0.0, latency_s, {job.message: job.answer() for job in jobs})


# --- phases 1-3: chaos, retry, reprocess ---------------------------------------------------------------------------


@dataclass
class Outcome:
    """How one write call ended: ok / failed (success False) / cancelled / sdk_error / untyped / hung."""

    ended: str
    detail: str = ""
    duplicate: bool = False


WRITE_LIMIT_SEC = 60.0  # a write still going after this long is hung (set by --write-timeout)


class Hung(Exception):
    """The benchmark gave up on a write that had not returned after WRITE_LIMIT_SEC."""


async def write(memory: MemoryClient, job: Job) -> WriteResult:
    CURRENT_WRITE.set(job.message_id)
    bound = asyncio.timeout(WRITE_LIMIT_SEC)
    try:
        async with bound:
            overrides = {"enable_informed_extraction": False} if job.blind else None
            return await memory.write(
                job.agent_id, job.message, SPEAKER, message_id=job.message_id, config_overrides=overrides
            )
    except TimeoutError as exc:
        if bound.expired():
            raise Hung(f"no answer within {WRITE_LIMIT_SEC:g} s") from exc
        raise


def classify(result: WriteResult | ConsolidationResult | BaseException, cancelled_by_us: bool) -> Outcome:
    if isinstance(result, WriteResult):
        if result.success:
            return Outcome("ok", duplicate=result.duplicate)
        return Outcome("failed", (result.error or "success False without an error").splitlines()[0][:200])
    if isinstance(result, ConsolidationResult):
        if result.success and not result.failures:
            return Outcome("ok")
        return Outcome("failed", "; ".join(f"{key}: {why}" for key, why in result.failures.items())[:200])
    if isinstance(result, asyncio.CancelledError) and cancelled_by_us:
        return Outcome("cancelled")
    if isinstance(result, Hung):
        return Outcome("hung", str(result))
    if isinstance(result, MemorySDKError):
        return Outcome("sdk_error", f"{type(result).__name__}: {result}"[:200])
    return Outcome("untyped", f"{type(result).__name__}: {str(result)[:200]}")


async def staggered(memory: MemoryClient, job: Job, stagger_sec: float) -> WriteResult:
    """The write, started `stagger_sec` per index after its agent's first: later writes meet earlier ones' facts."""
    await asyncio.sleep(stagger_sec * job.index)
    return await write(memory, job)


async def chaos_phase(
    memory: MemoryClient, jobs: Sequence[Job], rng: random.Random, cancel_rate: float, stagger_sec: float
) -> list[Outcome]:
    tasks = [asyncio.create_task(staggered(memory, job, stagger_sec)) for job in jobs]
    cancelled = set()
    loop = asyncio.get_running_loop()
    for n, task in enumerate(tasks):
        if rng.random() < cancel_rate:
            cancelled.add(n)
            loop.call_later(stagger_sec * jobs[n].index + rng.uniform(0.0, 0.6), task.cancel)  # after it started
    results = await asyncio.gather(*tasks, return_exceptions=True)
    return [classify(result, n in cancelled) for n, result in enumerate(results)]


async def consolidate(memory: MemoryClient, agent_id: str) -> ConsolidationResult:
    CURRENT_WRITE.set(f"{agent_id}/consolidate")
    bound = asyncio.timeout(WRITE_LIMIT_SEC)
    try:
        async with bound:
            return await memory.consolidate(agent_id)
    except TimeoutError as exc:
        if bound.expired():
            raise Hung(f"no answer within {WRITE_LIMIT_SEC:g} s") from exc
        raise


async def consolidation_phase(memory: MemoryClient, agents: Sequence[str]) -> list[Outcome]:
    """consolidate() of every agent under the same chaos: the profile_consolidation purpose gets its faults."""
    results = await asyncio.gather(*(consolidate(memory, agent) for agent in agents), return_exceptions=True)
    return [classify(result, False) for result in results]


async def retry_phase(memory: MemoryClient, jobs: Sequence[Job]) -> list[Outcome]:
    results = await asyncio.gather(*(write(memory, job) for job in jobs), return_exceptions=True)
    return [classify(result, False) for result in results]


# --- phase 4: what ended up in the database ------------------------------------------------------------------------


@dataclass
class Integrity:
    events: int = 0
    lost: int = 0  # message_ids whose write returned (or that were retried) with no event stored
    duplicate_events: int = 0  # events beyond one per (agent, message_id)
    runs_running: int = 0
    latest: Counter[str] = field(default_factory=Counter)  # each event's latest run status ("no run" if none)
    unfinished: int = 0  # events with no succeeded run
    duplicate_facts: int = 0
    orphaned_edges: int = 0
    duplicated: list[str] = field(default_factory=list)  # the duplicated current facts, for the report
    suspect_rows: int = 0  # facts with confidence 0 or a blank subject, entities or edges with a blank name or key
    cross_tenant: int = 0  # rows linked to another agent's rows, plus rows a tenant read returned for another agent


# Every link between rows must stay inside one agent: a fact's event, a link's fact, an edge's evidence, a run's
# event, an alias's entity.
_CROSS_TENANT = """
    SELECT (SELECT count(*) FROM memory_facts f JOIN memory_events e ON e.id = f.source_event_id
            WHERE f.agent_id = ANY(:ids) AND e.agent_id <> f.agent_id)
         + (SELECT count(*) FROM memory_fact_entities l JOIN memory_facts f ON f.id = l.fact_id
            WHERE l.agent_id = ANY(:ids) AND f.agent_id <> l.agent_id)
         + (SELECT count(*) FROM memory_relationships r JOIN memory_facts f ON f.id = r.evidence_fact_id
            WHERE r.agent_id = ANY(:ids) AND f.agent_id <> r.agent_id)
         + (SELECT count(*) FROM memory_pipeline_runs r JOIN memory_events e ON e.id = r.event_id
            WHERE r.agent_id = ANY(:ids) AND e.agent_id <> r.agent_id)
"""


async def tenant_reads_leak(memory: MemoryClient, agents: Sequence[str]) -> int:
    """Rows the public reads return for one agent that belong to another."""
    leaked = 0
    for agent in agents:
        rows: list[Any] = [
            *await memory.get_events(agent),
            *await memory.get_facts(agent, include_history=True, min_confidence=0.0),
            *await memory.get_relationships(agent, include_invalidated=True),
        ]
        leaked += sum(row.agent_id != agent for row in rows)
    return leaked


async def integrity(memory: MemoryClient, agents: Sequence[str], returned: set[str]) -> Integrity:
    ids = {"ids": list(agents)}
    async with memory.database.transaction() as session:  # the operator's view: no tenant, every agent's rows
        per_id = (
            await session.execute(
                text(
                    "SELECT message_id, count(*) FROM memory_events WHERE agent_id = ANY(:ids) GROUP BY agent_id,"
                    " message_id"
                ),
                ids,
            )
        ).all()
        latest = (
            await session.execute(
                text(
                    "SELECT coalesce(r.status, 'no run'), count(*) FROM memory_events e LEFT JOIN LATERAL"
                    " (SELECT status FROM memory_pipeline_runs WHERE event_id = e.id ORDER BY started_at DESC"
                    " LIMIT 1) r ON true WHERE e.agent_id = ANY(:ids) GROUP BY 1"
                ),
                ids,
            )
        ).all()
        unfinished = await session.scalar(
            text(
                "SELECT count(*) FROM memory_events e WHERE e.agent_id = ANY(:ids) AND NOT EXISTS (SELECT 1 FROM"
                " memory_pipeline_runs r WHERE r.event_id = e.id AND r.status = 'succeeded')"
            ),
            ids,
        )
        running = await session.scalar(
            text("SELECT count(*) FROM memory_pipeline_runs WHERE agent_id = ANY(:ids) AND status = 'running'"), ids
        )
        duplicated = (
            await session.execute(
                text(
                    "SELECT agent_id, entity_key, fact_text, count(*) FROM memory_facts"
                    " WHERE agent_id = ANY(:ids) AND valid_to IS NULL AND invalidated_at IS NULL"
                    " GROUP BY agent_id, entity_key, fact_text HAVING count(*) > 1"
                ),
                ids,
            )
        ).all()
        orphans = await session.scalar(
            text(
                "SELECT count(*) FROM memory_relationships r JOIN memory_facts f ON f.id = r.evidence_fact_id"
                " WHERE r.agent_id = ANY(:ids) AND r.invalidated_at IS NULL"
                " AND (f.valid_to IS NOT NULL OR f.invalidated_at IS NOT NULL)"
            ),
            ids,
        )
        suspect = await session.scalar(
            text(
                "SELECT (SELECT count(*) FROM memory_facts WHERE agent_id = ANY(:ids)"
                " AND (confidence = 0 OR btrim(entity_key) = ''))"
                " + (SELECT count(*) FROM memory_entities WHERE agent_id = ANY(:ids)"
                " AND (btrim(display_name) = '' OR btrim(entity_key) = ''))"
                " + (SELECT count(*) FROM memory_relationships WHERE agent_id = ANY(:ids)"
                " AND (btrim(source_key) = '' OR btrim(target_key) = ''))"
            ),
            ids,
        )
        linked_across = await session.scalar(text(_CROSS_TENANT), ids)
    stored = {message_id for message_id, _ in per_id}
    return Integrity(
        events=sum(n for _, n in per_id),
        lost=len(returned - stored),
        duplicate_events=sum(n - 1 for _, n in per_id),
        runs_running=int(running or 0),
        latest=Counter({status: int(n) for status, n in latest}),
        unfinished=int(unfinished or 0),
        duplicate_facts=sum(int(n) - 1 for *_, n in duplicated),
        duplicated=[f"{n} x {agent} {key}: {fact}" for agent, key, fact, n in duplicated],
        orphaned_edges=int(orphans or 0),
        suspect_rows=int(suspect or 0),
        cross_tenant=int(linked_across or 0) + await tenant_reads_leak(memory, agents),
    )


# --- the killed process --------------------------------------------------------------------------------------------

KILLED_WRITES = 20


def killed_jobs(agent_id: str) -> list[Job]:
    return [Job(agent_id, i) for i in range(KILLED_WRITES)]


async def worker() -> None:
    """--worker: read a spec line, open the client, print READY, write (staggered) until killed."""
    loop = asyncio.get_running_loop()
    spec = json.loads(await loop.run_in_executor(None, sys.stdin.readline))
    jobs = killed_jobs(spec["agent_id"])
    async with make_client(spec["url"], healthy(jobs, latency_s=0.2), spec["dim"]) as memory:
        print("READY", flush=True)

        async def staggered(job: Job) -> None:
            await asyncio.sleep(0.05 * job.index)
            await write(memory, job)

        await asyncio.gather(*(staggered(job) for job in jobs), return_exceptions=True)
    print("DONE", flush=True)


@dataclass
class Killed:
    events: int
    running_before: int
    reprocessed: int
    reprocess_succeeded: int
    retried_duplicate: int
    retried_finished: int
    retried_other: int
    after: Integrity


async def killed_process(url: str, memory: MemoryClient, agent_id: str, dim: int, kill_after: float) -> Killed:
    child = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--worker", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
    )
    assert child.stdin is not None and child.stdout is not None
    child.stdin.write((json.dumps({"url": url, "agent_id": agent_id, "dim": dim}) + "\n").encode())
    await child.stdin.drain()
    line = await asyncio.wait_for(child.stdout.readline(), 120)
    if line.strip() != b"READY":
        raise RuntimeError(f"worker did not start: {line!r}")
    await asyncio.sleep(kill_after)
    child.send_signal(signal.SIGKILL)
    await child.wait()
    jobs = killed_jobs(agent_id)
    before = await integrity(memory, [agent_id], set())
    await asyncio.sleep(memory.config.run_stale_after_sec + 0.5)
    results = await memory.reprocess(agent_id)
    retried = await retry_phase(memory, jobs)
    after = await integrity(memory, [agent_id], {job.message_id for job in jobs})
    return Killed(
        events=before.events,
        running_before=before.runs_running,
        reprocessed=len(results),
        reprocess_succeeded=sum(r.success and not r.duplicate for r in results),
        retried_duplicate=sum(o.ended == "ok" and o.duplicate for o in retried),
        retried_finished=sum(o.ended == "ok" and not o.duplicate for o in retried),
        retried_other=sum(o.ended != "ok" for o in retried),
        after=after,
    )


# --- phase 5: bad input --------------------------------------------------------------------------------------------

USAGE = ("InvalidInputError", "ConfigError", "UsageError")  # the UsageError family: "fix the call"
BadCall = Callable[[MemoryClient, str], Awaitable[object]]
PLUS5 = timezone(timedelta(hours=5))


def bad_inputs() -> list[tuple[str, BadCall]]:
    hello, me = "Hello there", SPEAKER
    return [
        ("write agent_id='\\ud800' (lone surrogate)", lambda m, a: m.write("ag\ud800", hello, me)),
        ("write message with '\\ud800'", lambda m, a: m.write(a, "I live in Curitiba \ud800", me)),
        ("write speaker_name with '\\ud800'", lambda m, a: m.write(a, hello, "Ra\ud800fael")),
        ("write message with NUL", lambda m, a: m.write(a, "I live in\x00 Curitiba", me)),
        ("write speaker_name with NUL", lambda m, a: m.write(a, hello, "Ra\x00fael")),
        ("write agent_id with NUL", lambda m, a: m.write(a + "\x00", hello, me)),
        ("write agent_id='   '", lambda m, a: m.write("   ", hello, me)),
        ("write message=None", lambda m, a: m.write(a, None, me)),  # type: ignore[arg-type]
        ("write speaker_name=123", lambda m, a: m.write(a, hello, 123)),  # type: ignore[arg-type]
        ("write occurred_at naive", lambda m, a: m.write(a, hello, me, occurred_at=datetime(2025, 1, 1))),
        (
            "write occurred_at year 1 +05:00",
            lambda m, a: m.write(a, hello, me, occurred_at=datetime(1, 1, 1, tzinfo=PLUS5)),
        ),
        ("write occurred_at='2025-01-01'", lambda m, a: m.write(a, hello, me, occurred_at="2025-01-01")),  # type: ignore[arg-type]
        ("write recent_messages='abc'", lambda m, a: m.write(a, hello, me, recent_messages="abc")),
        ("write message of 40,000 chars", lambda m, a: m.write(a, "x" * 40_000, me)),
        ("write message_id=''", lambda m, a: m.write(a, hello, me, message_id="")),
        ("write message_id=123", lambda m, a: m.write(a, hello, me, message_id=123)),  # type: ignore[arg-type]
        ("write message_id with '\\ud800'", lambda m, a: m.write(a, hello, me, message_id="m-\ud800")),
        (
            "write config_overrides timeout -1",
            lambda m, a: m.write(a, hello, me, config_overrides={"extraction_timeout_sec": -1}),
        ),
        ("get_events limit=-1", lambda m, a: m.get_events(a, limit=-1)),
        ("get_events limit='10'", lambda m, a: m.get_events(a, limit="10")),  # type: ignore[arg-type]
        ("get_facts min_confidence='x'", lambda m, a: m.get_facts(a, min_confidence="x")),  # type: ignore[arg-type]
        ("get_facts min_confidence=NaN", lambda m, a: m.get_facts(a, min_confidence=float("nan"))),
        ("get_facts entity=123", lambda m, a: m.get_facts(a, entity=123)),  # type: ignore[arg-type]
        ("get_facts as_of naive", lambda m, a: m.get_facts(a, as_of=datetime(2025, 1, 1))),
        ("get_facts as_of year 1 +05:00", lambda m, a: m.get_facts(a, as_of=datetime(1, 1, 1, tzinfo=PLUS5))),
        ("get_entity name=None", lambda m, a: m.get_entity(a, None)),  # type: ignore[arg-type]
        ("get_entity name with '\\ud800'", lambda m, a: m.get_entity(a, "Ra\ud800")),
        ("get_trace event_id='abc'", lambda m, a: m.get_trace(a, "abc")),  # type: ignore[arg-type]
        ("reprocess event_id='abc'", lambda m, a: m.reprocess(a, "abc")),
        ("reprocess limit=-1", lambda m, a: m.reprocess(a, limit=-1)),
        ("get_facts agent_id='\\ud800'", lambda m, a: m.get_facts("\ud800")),
    ]


async def bad_input_phase(memory: MemoryClient, agent_id: str) -> list[tuple[str, str, str]]:
    """(case, outcome, what happened) per bad call; outcome is held / NOT HELD / accepted."""
    rows = []
    for case, call in bad_inputs():
        try:
            value = await asyncio.wait_for(call(memory, agent_id), 30)
        except MemorySDKError as exc:
            rows.append((case, "held", f"{type(exc).__name__}: {exc}"))
        except Exception as exc:  # noqa: BLE001 - an untyped error is what this phase looks for
            rows.append((case, "NOT HELD", f"{type(exc).__name__}: {exc}"))
        else:
            if isinstance(value, WriteResult):
                said = f"returned success={value.success}" + (f": {value.error}" if value.error else "")
            else:
                said = f"returned {type(value).__name__}"
            rows.append((case, "accepted", said))
    return [(case, outcome, " ".join(said.split())[:110]) for case, outcome, said in rows]


# --- report --------------------------------------------------------------------------------------------------------


def count(outcomes: Sequence[Outcome], ended: str) -> int:
    return sum(o.ended == ended for o in outcomes)


async def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker:
        await worker()
        return
    run = uuid.uuid4().hex[:6]
    agents = [f"faults-{run}-{n:02d}" for n in range(args.agents)]
    jobs = [Job(agent, i) for agent in agents for i in range(args.writes_per_agent)]
    rng = random.Random(args.seed)
    chaos = Chaos(rng, args.fault_rate, args.embed_fault_rate, answers={job.message: job.answer() for job in jobs})
    killed_agent = f"faults-{run}-killed"
    started = time.perf_counter()
    with database(args.database_url) as url:
        async with make_client(url, healthy([*jobs, *killed_jobs(killed_agent)]), args.dim) as memory:
            async with make_client(url, chaos, args.dim) as chaotic:
                first = await chaos_phase(chaotic, jobs, rng, args.cancel_rate, args.stagger)
                consolidated = await consolidation_phase(chaotic, agents)
            returned = {job.message_id for job, o in zip(jobs, first, strict=True) if o.ended in ("ok", "failed")}
            checks = {"after chaos": await integrity(memory, agents, returned)}
            again = [job for job, o in zip(jobs, first, strict=True) if o.ended != "ok"]
            retried = await retry_phase(memory, again)
            checks["after retry"] = await integrity(memory, agents, {job.message_id for job in jobs})
            await asyncio.sleep(memory.config.run_stale_after_sec + 0.5)
            reprocessed = []
            for agent in agents:
                try:
                    async with asyncio.timeout(WRITE_LIMIT_SEC * 2):
                        reprocessed += await memory.reprocess(agent)
                except TimeoutError:
                    print(f"FAIL: reprocess({agent!r}) did not return within {WRITE_LIMIT_SEC * 2:g} s", flush=True)
            final = checks["after reprocess"] = await integrity(memory, agents, {job.message_id for job in jobs})
            killed = None
            if not args.quick:
                killed = await killed_process(url, memory, killed_agent, args.dim, args.kill_after)
            bad = await bad_input_phase(memory, f"faults-{run}-bad")
    print(
        f"{len(agents)} agents x {args.writes_per_agent} writes, seed {args.seed}, fault rate {args.fault_rate}, "
        f"embed fault rate {args.embed_fault_rate}, cancel rate {args.cancel_rate}; "
        f"{time.perf_counter() - started:.0f} s\n"
    )
    report(jobs, agents, chaos, first, consolidated, again, retried, reprocessed, checks, final, killed, bad)


def report(
    jobs: Sequence[Job],
    agents: Sequence[str],
    chaos: Chaos,
    first: Sequence[Outcome],
    consolidated: Sequence[Outcome],
    again: Sequence[Job],
    retried: Sequence[Outcome],
    reprocessed: Sequence[WriteResult],
    checks: dict[str, Integrity],
    final: Integrity,
    killed: Killed | None,
    bad: Sequence[tuple[str, str, str]],
) -> None:
    ended = ("ok", "failed", "cancelled", "sdk_error", "untyped", "hung")
    print("phase 1, chaos: how each write() call ended")
    print(
        format_table(
            ("writes", "success", "success False", "cancelled", "MemorySDKError", "untyped", "hung"),
            [(len(first), *(count(first, e) for e in ended))],
        )
    )
    errors = Counter(o.detail for o in first if o.ended in ("failed", "sdk_error"))
    if errors:
        print("  failures reported, most frequent first:")
        for message, n in errors.most_common(10):
            print(f"  {n:>4} x {message[:160]}")

    print("\nphase 1, chaos: how each agent's consolidate() ended (success False: some entity failed)")
    print(
        format_table(
            ("consolidations", "success", "success False", "MemorySDKError", "untyped", "hung"),
            [(len(consolidated), *(count(consolidated, e) for e in ended if e != "cancelled"))],
        )
    )
    untyped = [o.detail for o in [*first, *consolidated, *retried] if o.ended == "untyped"]
    for detail in untyped[:5]:
        print(f"  untyped: {detail}")

    print("\ncalls per purpose, and the faults injected into them")
    purposes = (*PURPOSES, "embedding")
    print(
        format_table(
            ("purpose", "calls", "faults injected"),
            [(purpose, chaos.calls[purpose], chaos.injected_into[purpose]) for purpose in purposes],
            left=1,
        )
    )

    outcome_of = {job.message_id: o for job, o in zip(jobs, first, strict=True)}
    outcome_of.update({f"{agent}/consolidate": o for agent, o in zip(agents, consolidated, strict=True)})
    survived: Counter[str] = Counter()
    by_kind: dict[str, Counter[str]] = {}
    for message_id, kinds in chaos.hits.items():
        o = outcome_of.get(message_id)
        for kind in kinds:
            by_kind.setdefault(kind, Counter())[o.ended if o else "outside a write"] += 1
            survived[kind] += o is not None and o.ended not in ("untyped", "hung")
    print("\nfaults injected, and how the write (or consolidation) they hit ended (it can be hit by several)")
    rows = [(kind, chaos.injected[kind], *(by_kind[kind][e] for e in ended)) for kind in sorted(chaos.injected)]
    rows.append(("total", sum(chaos.injected.values()), *(sum(c[e] for c in by_kind.values()) for e in ended)))
    print(
        format_table(
            ("fault", "injected", "success", "success False", "cancelled", "MemorySDKError", "untyped", "hung"),
            rows,
            left=1,
        )
    )

    print("\nphase 2, retry with the same message_id (healthy providers)")
    duplicate = sum(o.ended == "ok" and o.duplicate for o in retried)
    print(
        format_table(
            ("retried", "finished now", "duplicate (first had finished)", "still failed", "raised", "hung"),
            [
                (
                    len(again),
                    count(retried, "ok") - duplicate,
                    duplicate,
                    count(retried, "failed"),
                    count(retried, "sdk_error") + count(retried, "untyped"),
                    count(retried, "hung"),
                )
            ],
        )
    )

    print("\nphase 3, reprocess every agent (healthy providers)")
    print(
        format_table(
            ("events taken up", "succeeded", "not succeeded"),
            [(len(reprocessed), sum(r.success for r in reprocessed), sum(not r.success for r in reprocessed))],
        )
    )

    print("\nphase 4, integrity (events' latest run status: ok = succeeded)")
    header = (
        "after",
        "events",
        "lost",
        "dup events",
        "runs running",
        "ok",
        "failed",
        "cancelled",
        "abandoned",
        "no run",
        "unfinished",
        "dup facts",
        "orphan edges",
        "suspect rows",
    )
    if killed is not None:
        checks = {**checks, "killed process, retried": killed.after}
    rows = [
        (
            phase,
            c.events,
            c.lost,
            c.duplicate_events,
            c.runs_running,
            c.latest["succeeded"],
            c.latest["failed"],
            c.latest["cancelled"],
            c.latest["abandoned"],
            c.latest["no run"],
            c.unfinished,
            c.duplicate_facts,
            c.orphaned_edges,
            c.suspect_rows,
        )
        for phase, c in checks.items()
    ]
    print(format_table(header, rows, left=1))
    print("(suspect rows: facts with confidence 0 or a blank subject key, entities or edges with a blank name or key)")
    for phase, c in checks.items():
        for duplicate in c.duplicated[:5]:
            print(f"  duplicate current fact {phase}: {duplicate}")

    if killed is not None:
        print(f"\nkilled process: {KILLED_WRITES} writes (LLM 0.2 s per call), SIGKILL after the given delay")
        print(
            format_table(
                (
                    "events stored",
                    "runs running at kill",
                    "reprocessed",
                    "reprocess ok",
                    "retry duplicate",
                    "retry finished",
                    "retry other",
                    "runs running after",
                ),
                [
                    (
                        killed.events,
                        killed.running_before,
                        killed.reprocessed,
                        killed.reprocess_succeeded,
                        killed.retried_duplicate,
                        killed.retried_finished,
                        killed.retried_other,
                        killed.after.runs_running,
                    )
                ],
            )
        )

    print("\nphase 5, bad input (held = raised a MemorySDKError subclass)")
    print(format_table(("case", "outcome", "what happened"), bad, left=3))

    checked = [final] + ([killed.after] if killed else [])
    summary = [
        ("bad inputs tried", len(bad), ""),
        ("bad inputs held", sum(outcome == "held" for _, outcome, _ in bad), len(bad)),
        ("of which as UsageError", sum(outcome == "held" and said.startswith(USAGE) for _, outcome, said in bad), ""),
        ("faults injected", sum(chaos.injected.values()), ""),
        ("faults survived", sum(survived.values()), sum(chaos.injected.values())),
        ("events lost", sum(c.lost for c in checked), 0),
        ("runs left running after reprocess", sum(c.runs_running for c in checked), 0),
        ("duplicate events per message_id", sum(c.duplicate_events for c in checked), 0),
        ("duplicate current facts", sum(c.duplicate_facts for c in checked), 0),
        ("orphaned current edges", sum(c.orphaned_edges for c in checked), 0),
        ("cross-tenant rows seen", sum(c.cross_tenant for c in checked), 0),
        ("events never finished", sum(c.unfinished for c in checked), 0),
        ("untyped exceptions escaping write() or consolidate()", len(untyped), 0),
        ("purposes never called", sum(chaos.calls[p] == 0 for p in (*PURPOSES, "embedding")), 0),
        ("purposes called with no fault injected", sum(chaos.injected_into[p] == 0 for p in chaos.calls), 0),
        (
            "writes hung (no answer within --write-timeout)",
            sum(o.ended == "hung" for o in [*first, *consolidated, *retried]),
            0,
        ),
    ]
    print("\nsummary")
    print(format_table(("figure", "value", "must be"), summary, left=1))
    for figure, value, wanted in summary:
        if wanted != "" and value != wanted:
            print(f"FAIL: {figure}: {value}, must be {wanted}")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--writes-per-agent", type=int, default=25)
    parser.add_argument("--fault-rate", type=float, default=0.3, help="per LLM call")
    parser.add_argument("--embed-fault-rate", type=float, default=0.05, help="per embedding call")
    parser.add_argument("--cancel-rate", type=float, default=0.1, help="share of write tasks cancelled")
    parser.add_argument("--kill-after", type=float, default=1.0, help="seconds before the writer process is killed")
    parser.add_argument("--seed", type=int, default=9)
    parser.add_argument("--stagger", type=float, default=None, help="seconds between an agent's writes' starts")
    parser.add_argument("--write-timeout", type=float, default=60.0, help="seconds before a write counts as hung")
    parser.add_argument("--dim", type=int, default=1536)
    parser.add_argument("--database-url", default=None, help="an existing database instead of a new embedded one")
    parser.add_argument("--quick", action="store_true", help="2 agents x 12 writes 0.3 s apart, no killed process")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    global WRITE_LIMIT_SEC  # one knob read by write(); the script runs one configuration per process
    WRITE_LIMIT_SEC = args.write_timeout
    if args.quick:
        args.agents, args.writes_per_agent = 2, 12
    if args.stagger is None:
        args.stagger = 0.3 if args.quick else 0.0
    return args


if __name__ == "__main__":
    asyncio.run(main())
