"""Consolidation (seeds/002's consolidate_entity_profiles): rebuild stale profiles from current facts, and merge
near-duplicate current facts of a subject, keeping their provenance.

A write only seeds a profile where there is none, so a profile says what was true when it was written; once the
entity's facts change (store/profiles.py counts the changes) it is stale, and pre-retrieval stops feeding it to
extractions. `consolidate` brings each stale entity back, one at a time:

1. merge (one transaction, under the entity's write-path advisory locks, so it queues behind any write about the
   entity instead of deciding on facts that write is changing): read its current facts with their vectors, plan the
   merges (`plan_merges`, pure), close each merged fact into its survivor, move its current edges and entity links
   to the survivor;
2. ask the LLM for a profile of the facts left (`profile_consolidation`, one call, no transaction open);
3. store the profile stamped with the facts version it was built from: a write that changed the facts meanwhile
   leaves it stale, for the next run.

One entity's failure (provider, storage) is recorded in the result and the trace; the others go on.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from memory_sdk.config import MemoryConfig
from memory_sdk.errors import ProviderError, StorageError
from memory_sdk.lexicons import denied
from memory_sdk.llm.prompts import ProfileConsolidationContext, load_prompt
from memory_sdk.llm.protocols import LLMProvider
from memory_sdk.llm.schemas import ProfileConsolidationResponse
from memory_sdk.pipeline.llm_calls import call_llm
from memory_sdk.pipeline.upsert import entity_lock_names
from memory_sdk.results import ConsolidationResult, MergedFact, TokenUsage, TraceStep
from memory_sdk.store import profiles, queries
from memory_sdk.store.database import Database
from memory_sdk.store.profiles import CurrentFact, EntityToConsolidate, FactMerge
from memory_sdk.text import fold
from memory_sdk.vectors import cosine

__all__ = ["PlannedMerge", "consolidate_agent", "merge_closing", "plan_merges", "same_claim"]

logger = logging.getLogger("memory_sdk")

_WORD = re.compile(r"\w+", re.UNICODE)
_NUMBER = re.compile(r"\d+")


@dataclass(frozen=True)
class PlannedMerge:
    """A current fact to close into its survivor, and how similar the two are."""

    fact: CurrentFact
    survivor: CurrentFact
    similarity: float


def same_claim(a: CurrentFact, b: CurrentFact, threshold: float) -> float | None:
    """The cosine of two facts when they say the same thing, else None.

    Conservative, because a wrong merge loses a truth and a missed one only leaves a duplicate: the vectors must be
    above `threshold` (config.semantic_dedup_threshold, the write path's near-duplicate cut), the attribute the
    same (both none included), and the texts must agree on what embeddings blur: the numbers, the polarity
    (negated or not) and the capitalised words (names, places), case and accents ignored.
    """
    if a.attribute != b.attribute or a.embedding is None or b.embedding is None:
        return None
    similarity = cosine(a.embedding, b.embedding)
    if similarity <= threshold or _claim_marks(a.text) != _claim_marks(b.text):
        return None
    return similarity


def _claim_marks(text: str) -> tuple[frozenset[str], bool, frozenset[str]]:
    """What two texts must share to say the same: numbers, negation, capitalised words."""
    folded = fold(text)
    names = frozenset(fold(word) for word in _WORD.findall(text) if word[:1].isupper())
    # "Ana likes jazz" and "Ana doesn't like jazz" embed close, and merging them would lose the truth.
    return frozenset(_NUMBER.findall(folded)), denied(text), names


def plan_merges(facts: Sequence[CurrentFact], threshold: float) -> list[PlannedMerge]:
    """Which current facts of one subject to close into which: each fact is compared with the survivors chosen so
    far (highest confidence first, then the earliest to become true), never through a chain of merges."""
    ranked = sorted(facts, key=lambda f: (-f.confidence, f.valid_from, f.recorded_at))
    survivors: list[CurrentFact] = []
    planned: list[PlannedMerge] = []
    for fact in ranked:
        match = _best_survivor(fact, survivors, threshold)
        if match is None:
            survivors.append(fact)
        else:
            planned.append(PlannedMerge(fact, *match))
    return planned


def _best_survivor(
    fact: CurrentFact, survivors: Sequence[CurrentFact], threshold: float
) -> tuple[CurrentFact, float] | None:
    scored = [(survivor, same_claim(fact, survivor, threshold)) for survivor in survivors]
    matches = [(survivor, score) for survivor, score in scored if score is not None]
    return max(matches, key=lambda match: match[1]) if matches else None


def merge_closing(merge: PlannedMerge) -> FactMerge:
    """Where the merged fact's validity ends: where its survivor's begins, so any valid-time read shows one of the
    two, never both (a merged fact that became true later ends where it began: it was never separately true)."""
    ends = max(merge.fact.valid_from, merge.survivor.valid_from)
    return FactMerge(merge.fact.id, merge.survivor.id, ends)


@dataclass
class _Run:
    """One consolidate() call: a CallLedger for call_llm, and what the result reports."""

    config: MemoryConfig
    usage: TokenUsage = field(default_factory=TokenUsage)
    llm_calls: int = 0
    steps: list[TraceStep] = field(default_factory=list)
    consolidated: list[str] = field(default_factory=list)
    merged: list[MergedFact] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)

    @property
    def step(self) -> TraceStep:
        return self.steps[-1]

    def fail(self, message: str) -> None:
        self.step.data.setdefault("errors", []).append(message)
        self.step.status = "partial"


async def consolidate_agent(
    db: Database, llm: LLMProvider, config: MemoryConfig, agent_id: str, entity_key: str | None
) -> ConsolidationResult:
    """Consolidate every entity of the agent whose profile is older than its facts (or only `entity_key`)."""
    started = time.perf_counter()
    async with db.tenant(agent_id) as conn:
        targets = await profiles.entities_to_consolidate(conn, agent_id, only=entity_key)
    run = _Run(config)
    for target in targets:
        run.steps.append(TraceStep(name=f"consolidate {target.key}"))
        entity_started = time.perf_counter()
        try:
            await _consolidate_entity(run, db, llm, agent_id, target)
        except (ProviderError, StorageError) as exc:
            run.failures[target.key] = f"{type(exc).__name__}: {exc}"
            run.step.status, run.step.error = "failed", run.failures[target.key]
        run.step.duration_ms = round((time.perf_counter() - entity_started) * 1000, 2)
    logger.info(
        "consolidate agent=%s entities=%d merged=%d failed=%d llm_calls=%d",
        agent_id,
        len(run.consolidated),
        len(run.merged),
        len(run.failures),
        run.llm_calls,
    )
    return ConsolidationResult(
        success=not run.failures,
        entities_consolidated=run.consolidated,
        facts_merged=run.merged,
        failures=run.failures,
        tokens_used=run.usage,
        llm_calls=run.llm_calls,
        duration_ms=round((time.perf_counter() - started) * 1000, 2),
        steps=run.steps,
    )


async def _consolidate_entity(
    run: _Run, db: Database, llm: LLMProvider, agent_id: str, target: EntityToConsolidate
) -> None:
    facts, version = await _merge_duplicates(run, db, agent_id, target)
    shown = [fact for fact in facts if fact.confidence >= run.config.min_confidence]
    run.step.data["facts_sent"] = len(shown)
    if not shown:
        run.step.status = "skipped"
        return
    template = load_prompt("profile_consolidation")
    context = ProfileConsolidationContext(name=target.name, entity_type=target.type, facts=_render(shown))
    answer = await call_llm(run, llm, "profile_consolidation", template.render(context), ProfileConsolidationResponse)
    async with db.tenant(agent_id) as conn:
        now = await profiles.write_profile(conn, agent_id, target.key, answer.profile, version)
    run.consolidated.append(target.key)
    run.step.data.update(profile=answer.profile, facts_version=version)
    if now != version:
        run.step.data["stale_again"] = "its facts changed while the profile was built: the next run rebuilds it"


async def _merge_duplicates(
    run: _Run, db: Database, agent_id: str, target: EntityToConsolidate
) -> tuple[list[CurrentFact], int]:
    """Merge the entity's near-duplicate current facts under its locks; return the facts left and the facts
    version they are at."""
    async with db.tenant(agent_id) as conn:
        await queries.lock_names(conn, agent_id, entity_lock_names(target.key, target.name))
        facts, version = await profiles.current_facts(conn, agent_id, target.key)
        planned = plan_merges(facts, run.config.semantic_dedup_threshold)
        if planned:
            await profiles.merge_facts(conn, agent_id, [merge_closing(merge) for merge in planned])
            facts, version = await profiles.current_facts(conn, agent_id, target.key)
    run.merged.extend(
        MergedFact(
            entity_key=target.key,
            fact_id=merge.fact.id,
            text=merge.fact.text,
            survivor_id=merge.survivor.id,
            survivor_text=merge.survivor.text,
            similarity=round(merge.similarity, 4),
        )
        for merge in planned
    )
    if planned:
        run.step.data["merged"] = [{"text": m.fact.text, "into": m.survivor.text} for m in planned]
    return facts, version


def _render(facts: Sequence[CurrentFact]) -> str:
    return "\n".join(f"- {fact.text} (since {fact.valid_from.date().isoformat()})" for fact in facts)
