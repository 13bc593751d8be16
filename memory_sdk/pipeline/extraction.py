"""Stage: extraction. One informed LLM call; on failure (or when disabled) the blind path of three calls.

Informed: message + speaker + message date + existing context -> entities, facts, relations, profiles, emotion.
Blind: entity scan, then fact extraction and relation extraction concurrently (asyncio.gather), with one relation
retry when 0 relations come back for 2+ entities. Both paths share one time budget (`_Budget`). If both paths
fail, the write keeps its event and reports the failure: "extraction failed" is never confused with "nothing to
extract".
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from memory_sdk.chatter import is_chatter
from memory_sdk.errors import ProviderError
from memory_sdk.llm.prompts import (
    EntityScanContext,
    FactExtractionContext,
    InformedExtractionContext,
    RelationExtractionContext,
    load_prompt,
)
from memory_sdk.llm.protocols import AnswerCheck, ChatMessage
from memory_sdk.llm.schemas import (
    EntityScanResponse,
    ExtractedEntity,
    ExtractedFact,
    FactExtractionResponse,
    InformedExtractionResponse,
    RelationExtractionResponse,
)
from memory_sdk.pipeline.fact_checks import FactContext, drop_reason, memory_words
from memory_sdk.pipeline.guards import EVIDENCE_MIN_SCORE, Known, all_from_memory, evidence_score, names_of
from memory_sdk.pipeline.llm_calls import call_llm
from memory_sdk.pipeline.participants import participants_of
from memory_sdk.pipeline.post_extraction import fact_context
from memory_sdk.pipeline.state import Deps, Extraction, WriteState
from memory_sdk.text import normalise_alias

__all__ = ["EXTRACTION_STAGE_TIMEOUTS", "STOP_AFTER_DROPPED", "describe_date", "off_the_message", "run"]

# The extraction stage takes at most this many extraction timeouts: one for the informed call, and half of one left
# for the blind path if it fails. Under 2, so no write waits two full timeouts in extraction.
EXTRACTION_STAGE_TIMEOUTS = 1.5
# What a call gets once the stage's time is spent: it fails at once as a timeout, and the trace says so.
_NO_TIME_LEFT_SEC = 0.001
# seeds/002: "se o LLM retornar 0 relations mas 2+ entities foram encontradas, o SDK repete a chamada uma vez".
_RELATION_RETRY_MIN_ENTITIES = 2
Item = TypeVar("Item", bound=BaseModel)


# An informed answer whose last this many facts would each be dropped by a fact check (fact_checks.FACT_CHECKS) is
# read no further (`off_the_message`). Measured with the 1.5B model on LoCoMo session 1 (conv-30, conv-41,
# conv-50): a model that starts writing chat lines nobody said, or questions, keeps on (11 of 11 facts dropped at
# conv-30 D1:1, 907 output tokens; 10 of 10 at conv-50 D1:16); a capable answer has no dropped fact (the probe
# suite), so it is never stopped.
STOP_AFTER_DROPPED = 3


def off_the_message(state: WriteState) -> AnswerCheck:
    """The informed call's `stop_when`: why an answer still coming in is not worth reading on, or None.

    It fires when the last STOP_AFTER_DROPPED facts of the answer so far each fail a check of
    `fact_checks.FACT_CHECKS`, read with the same context post-extraction gives them (`fact_context`, on the
    answer's entities so far). Those facts would be dropped anyway; what the stop costs is whatever the answer
    would have said after them, and it is reported as a cut answer.
    """
    people = participants_of(state.request.recent_messages, state.request.participants, state.request.speaker_name)

    def check(answer: dict[str, Any]) -> str | None:
        facts = answer.get("facts")
        if not isinstance(facts, list) or len(facts) < STOP_AFTER_DROPPED:
            return None
        last = [_valid(ExtractedFact, item) for item in facts[-STOP_AFTER_DROPPED:]]
        read = [fact for fact in last if fact is not None]
        if len(read) < STOP_AFTER_DROPPED:
            return None
        entities = answer.get("entities")
        named = [_valid(ExtractedEntity, item) for item in (entities if isinstance(entities, list) else [])]
        context = fact_context(state, [entity for entity in named if entity is not None], people)
        whys = [drop_reason(fact, context) for fact in read]
        if any(why is None for why in whys):
            return None
        return f"its last {STOP_AFTER_DROPPED} facts would be dropped, e.g. {whys[-1]}"

    return check


def _valid(schema: type[Item], value: Any) -> Item | None:
    try:
        return schema.model_validate(value)
    except ValidationError:
        return None


@dataclass(frozen=True)
class _Budget:
    """The extraction stage's time: each call gets at most one extraction timeout, all of them together at most
    EXTRACTION_STAGE_TIMEOUTS, so a failed informed call leaves the blind path time and no write waits two full
    timeouts (issue 13 measured writes of 848, 707 and 638 s behind runaway informed answers)."""

    per_call: float
    deadline: float

    @classmethod
    def start(cls, timeout_sec: float) -> _Budget:
        return cls(timeout_sec, time.monotonic() + timeout_sec * EXTRACTION_STAGE_TIMEOUTS)

    def left(self) -> float:
        """Seconds the next call may take (a tiny positive number once the stage's time is spent)."""
        return max(min(self.per_call, self.deadline - time.monotonic()), _NO_TIME_LEFT_SEC)


async def run(state: WriteState, deps: Deps) -> None:
    data = state.step.data
    if is_chatter(state.request.message, state.request.recent_messages, state.lexicon):
        data.update(path="none", chatter=True)  # logged as an event, nothing to extract (memory_sdk/chatter.py)
        return
    budget = _Budget.start(state.config.extraction_timeout_sec)
    if state.config.enable_informed_extraction:
        try:
            state.extraction = await _informed(state, deps, budget)
            state.extraction_path = "informed"
        except ProviderError as exc:
            data["informed_error"] = str(exc)
            data["fallback_reason"] = f"informed extraction failed: {exc}"
    else:
        data["fallback_reason"] = "informed extraction disabled by config"
    if state.extraction_path == "informed":
        await _ask_without_memory(state, deps, budget)
    else:
        try:
            state.extraction = await _blind(state, deps, budget)
            state.extraction_path = "blind"
        except ProviderError as exc:
            state.extraction_path = "failed"
            state.fail(f"extraction failed on both paths: {data.get('informed_error', 'disabled')}; blind: {exc}")
    data.update(
        path=state.extraction_path,
        entities=len(state.extraction.entities),
        facts=len(state.extraction.facts),
        relations=len(state.extraction.relations),
        relation_retry_triggered=data.get("relation_retry_triggered", False),
    )


async def _ask_without_memory(state: WriteState, deps: Deps, budget: _Budget) -> None:
    """When the informed answer only repeats the known memory, ask once more without it; when every fact of it
    would be dropped and one comes from the recent messages or the memory (`_all_taken_elsewhere`), ask once more
    without both.

    A small model may answer the memory back instead of the message (guards.all_from_memory). The second answer's
    facts are new to the call, so reconciliation judges them against memory; on their texts alone they end nothing
    (`state.reasked`, guards.guard_decision). If that call fails, the first answer
    stays (the guards drop its copies) and the write reports the failure.
    """
    copied = _all_from_memory(state)
    taken = None if copied is not None else _all_taken_elsewhere(state)
    if copied is None and taken is None:
        return
    without = "the known memory" if taken is None else "the known memory and the recent messages"
    state.step.data["reasked_without_memory"] = copied or taken
    state.adjust("reasked", "informed answer", f"{copied or taken}: asked once more without {without}")
    shown = state.existing_context, state.shown_facts
    state.existing_context, state.shown_facts = "", {}
    try:
        state.extraction = await _informed(state, deps, budget, recent=taken is None)
        state.reasked = True
    except ProviderError as exc:
        state.existing_context, state.shown_facts = shown
        state.fail(f"informed extraction without {without} failed, the first answer kept: {exc}")


def _all_taken_elsewhere(state: WriteState) -> str | None:
    """Why every fact of the informed answer would be dropped, one at least said in the recent messages or the
    known memory and not in the message (`_said_elsewhere`), or None.

    Measured with the 1.5B model on LoCoMo: 41 of 166 turns of five conversations stored nothing, many because the
    model wrote the recent messages' lines instead of the message's ("My mother also passed away last year" went
    unstored, every fact of its answer from the turns before it). Asked again without them (conv-43 and conv-48
    session 1: 6 of 38 turns), those turns stored facts, and QA evidence recall@5 rose from 0.25 to 0.62 for 0.16
    more calls per write (docs/decisions.md). A capable answer has no dropped fact (the probe suite), so it is never
    asked again; an answer of the message's own questions and greetings is not either: asking again would not
    change it."""
    facts = state.extraction.facts
    if not facts or (not state.request.recent_messages and not state.existing_context.strip()):
        return None
    people = participants_of(state.request.recent_messages, state.request.participants, state.request.speaker_name)
    context = fact_context(state, state.extraction.entities, people)
    drops = [drop_reason(fact, context) for fact in facts]
    if any(drop is None for drop in drops):
        return None
    others = [*state.request.recent_messages, state.existing_context]
    elsewhere = [fact for fact in facts if _said_elsewhere(fact, state.request.message, others)]
    if not elsewhere:
        return None
    return (
        f"all {len(facts)} facts would be dropped, {len(elsewhere)} said in the recent messages or the memory "
        f"and not in the message, e.g. {elsewhere[0].text!r}"
    )


def _said_elsewhere(fact: ExtractedFact, message: str, others: list[str]) -> bool:
    """Whether the fact's evidence (else its text) is found in one of `others` and not in the message (grounding's
    `evidence_score` at EVIDENCE_MIN_SCORE): the model wrote another line than the message's."""
    said = fact.evidence or fact.text
    if not normalise_alias(said) or evidence_score(said, message) >= EVIDENCE_MIN_SCORE:
        return False
    return any(other and evidence_score(said, other) >= EVIDENCE_MIN_SCORE for other in others)


def _all_from_memory(state: WriteState) -> str | None:
    """Why the informed answer holds nothing but the known memory (guards.all_from_memory), or None."""
    if not state.shown_facts and not state.existing_context.strip():
        return None
    request = state.request
    known = Known.shown(state.known_entities.values(), request.speaker_name)
    said = [request.message, *request.recent_messages]
    copied = all_from_memory(state.extraction.facts, said, known, request.speaker_name, state.lexicon)
    if copied is not None or not state.extraction.facts:
        return copied
    context = FactContext(
        message=request.message,
        recent=request.recent_messages,
        known_text=state.existing_context,
        known=known,
        names=names_of(state.extraction.entities, request.speaker_name),
        people=frozenset(),
        lexicon=state.lexicon,
    )
    whys = [memory_words(fact, context) for fact in state.extraction.facts]
    if any(why is None for why in whys):
        return None
    return f"all {len(whys)} facts restate the known memory, e.g. {whys[0]}"


def describe_date(moment: datetime) -> str:
    """'Sunday, June 15, 2025 (2025-06-15, 14:30 UTC)': the anchor relative dates resolve against."""
    return f"{moment:%A, %B} {moment.day}, {moment.year} ({moment:%Y-%m-%d, %H:%M %Z})"


def _recent(state: WriteState) -> str:
    limit = state.config.recent_messages_limit
    recent = state.request.recent_messages[-limit:] if limit else ()
    return "\n".join(f"- {message}" for message in recent) or "(none)"


async def _informed(state: WriteState, deps: Deps, budget: _Budget, *, recent: bool = True) -> Extraction:
    request = state.request
    prompt = load_prompt("informed_extraction")
    messages = prompt.render(
        InformedExtractionContext(
            speaker=request.speaker_name,
            occurred_at=describe_date(request.occurred_at),
            existing_context=state.existing_context or "(nothing known yet)",
            recent_messages=_recent(state) if recent else "(none)",
            message=request.message,
        )
    )
    answer = await call_llm(
        state,
        deps.llm,
        "informed_extraction",
        messages,
        InformedExtractionResponse,
        within_sec=budget.left(),
        stop_when=off_the_message(state),
    )
    return Extraction(
        entities=answer.entities,
        facts=answer.facts,
        relations=answer.relations,
        updated_profiles=answer.updated_profiles,
        emotion=answer.emotion,
        prompt_version=prompt.version,
    )


async def _blind(state: WriteState, deps: Deps, budget: _Budget) -> Extraction:
    request = state.request
    when, recent = describe_date(request.occurred_at), _recent(state)
    scan_prompt = load_prompt("entity_scan")
    scan = await call_llm(
        state,
        deps.llm,
        "entity_scan",
        scan_prompt.render(
            EntityScanContext(
                speaker=request.speaker_name,
                occurred_at=when,
                recent_messages=recent,
                message=request.message,
            )
        ),
        EntityScanResponse,
        within_sec=budget.left(),
    )
    listed = "\n".join(f"- {entity.name} ({entity.type})" for entity in scan.entities) or "(none found)"
    fact_prompt = load_prompt("fact_extraction")
    fact_messages = fact_prompt.render(
        FactExtractionContext(
            speaker=request.speaker_name,
            occurred_at=when,
            entities=listed,
            recent_messages=recent,
            message=request.message,
        )
    )
    facts, relations = await asyncio.gather(
        call_llm(state, deps.llm, "fact_extraction", fact_messages, FactExtractionResponse, within_sec=budget.left()),
        _relations(state, deps, listed, len(scan.entities), budget),
        return_exceptions=True,  # both calls finish before we look: none is left running unobserved
    )
    if isinstance(facts, BaseException):
        raise facts
    if isinstance(relations, BaseException):
        if not isinstance(relations, ProviderError):
            raise relations
        # The facts are worth keeping; the missing relations are reported, not hidden.
        state.fail(f"relation extraction failed, facts kept without relations: {relations}")
        relations = RelationExtractionResponse(relations=[])
    return Extraction(
        entities=scan.entities,
        facts=facts.facts,
        relations=relations.relations,
        prompt_version=fact_prompt.version,
    )


async def _relations(
    state: WriteState, deps: Deps, listed: str, retry_needed_for: int, budget: _Budget
) -> RelationExtractionResponse:
    prompt = load_prompt("relation_extraction")

    def messages(retry_note: str) -> list[ChatMessage]:
        return prompt.render(
            RelationExtractionContext(
                speaker=state.request.speaker_name,
                entities=listed,
                message=state.request.message,
                retry_note=retry_note,
            )
        )

    answer = await call_llm(
        state, deps.llm, "relation_extraction", messages(""), RelationExtractionResponse, within_sec=budget.left()
    )
    retry = not answer.relations and retry_needed_for >= _RELATION_RETRY_MIN_ENTITIES
    state.step.data["relation_retry_triggered"] = retry
    if retry:
        note = (
            f"A first reading found no relations although {retry_needed_for} entities are listed. "
            "Look again for how they are connected; answer an empty list only if they truly are not."
        )
        answer = await call_llm(
            state, deps.llm, "relation_extraction", messages(note), RelationExtractionResponse, within_sec=budget.left()
        )
    return answer
