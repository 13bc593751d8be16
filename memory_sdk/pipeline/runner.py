"""The runner: owns the write's state and trace, runs the stages in order, records the run.

Each stage gets its own trace step (duration, status, data, LLM calls). A stage that raises stops the stages
after it (they depend on its output), but the event, committed by the first stage before any LLM work, stays;
the failure lands in the trace, in `result.error` and in the pipeline-run row. Transactions are opened by the
stages around their reads and writes only, never across an LLM call.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from memory_sdk.errors import MemorySDKError, StorageError
from memory_sdk.pipeline import (
    alias_lookup,
    event_log,
    extraction,
    post_extraction,
    pre_retrieval,
    reconciliation,
    resolution,
    upsert,
)
from memory_sdk.pipeline.state import Deps, WriteRequest, WriteState
from memory_sdk.results import Emotion, PipelineTrace, TraceStep, WriteResult
from memory_sdk.store import queries
from memory_sdk.store.database import error_reason

__all__ = ["STAGES", "run_write"]

logger = logging.getLogger("memory_sdk")

Stage = Callable[[WriteState, Deps], Awaitable[None]]

STAGES: tuple[tuple[str, Stage], ...] = (
    ("event_log", event_log.run),
    ("alias_lookup", alias_lookup.run),
    ("pre_retrieval", pre_retrieval.run),
    ("extraction", extraction.run),
    ("post_extraction", post_extraction.run),
    ("entity_resolution", resolution.run),
    ("reconciliation", reconciliation.run),
    ("upsert", upsert.run),
)


async def run_write(request: WriteRequest, deps: Deps) -> WriteResult:
    """Run every stage for one validated request and build its WriteResult."""
    started = time.perf_counter()
    state = WriteState(request=request, config=deps.config, schema_version=deps.schema_version)
    stopped = False
    for name, stage in STAGES:
        step = TraceStep(name=name)
        state.steps.append(step)
        if stopped:
            step.status = "skipped"
            continue
        step_started = time.perf_counter()
        try:
            await stage(state, deps)
        except Exception as exc:  # noqa: BLE001 - recorded in trace, result and run row; never swallowed
            stopped = True
            _stage_failed(state, step, name, exc)
        finally:
            step.duration_ms = round((time.perf_counter() - step_started) * 1000, 2)
        if name == "event_log" and state.event_id is None and not request.dry_run:
            stopped = True
        if name == "extraction" and state.extraction_path == "failed":
            step.status = "failed"
    duration_ms = round((time.perf_counter() - started) * 1000, 2)
    result = _result(state, duration_ms)
    if not request.dry_run and state.run_id is not None and not state.run_recorded:
        await _record_run(state, deps, result)
    logger.info(
        "write agent=%s path=%s added=%d updated=%d unchanged=%d deleted=%d tokens=%d llm_calls=%d ms=%.0f%s",
        request.agent_id,
        state.extraction_path,
        len(result.facts_added),
        len(result.facts_updated),
        len(result.facts_unchanged),
        len(result.facts_deleted),
        result.tokens_used.total_tokens,
        result.llm_calls,
        duration_ms,
        " dry_run" if request.dry_run else "",
    )
    if not request.verbose:
        result.pipeline = None
    return result


def _stage_failed(state: WriteState, step: TraceStep, name: str, exc: BaseException) -> None:
    reason = error_reason(exc)
    step.status = "failed"
    step.error = f"{type(exc).__name__}: {reason}"
    state.errors.append(f"{name}: {step.error}")
    expected = isinstance(exc, MemorySDKError)
    logger.warning(
        "write agent=%s stage %s failed: %s", state.request.agent_id, name, step.error, exc_info=not expected
    )


def _result(state: WriteState, duration_ms: float) -> WriteResult:
    emotion = state.extraction.emotion
    return WriteResult(
        success=not state.errors,
        dry_run=state.request.dry_run,
        event_id=state.event_id,
        facts_added=state.facts_added,
        facts_updated=state.facts_updated,
        facts_superseded=state.facts_superseded,
        facts_unchanged=state.facts_unchanged,
        facts_deleted=state.facts_deleted,
        entities_resolved=_unique(list(state.resolved.values())),
        relationships=state.relationships,
        extraction_path=state.extraction_path,
        emotion=Emotion(**emotion.model_dump()) if emotion else None,
        tokens_used=state.usage,
        llm_calls=state.llm_calls,
        duration_ms=duration_ms,
        pipeline=PipelineTrace(steps=state.steps),
        error="; ".join(state.errors) or None,
    )


def _unique(items: list[Any]) -> list[Any]:
    seen: dict[int, Any] = {}
    for item in items:
        seen.setdefault(id(item), item)
    return list(seen.values())


async def _record_run(state: WriteState, deps: Deps, result: WriteResult) -> None:
    """Finish the pipeline-run row when the apply transaction did not (a stage failed or stopped the write); a
    failure here is reported in the result, the write itself stands."""
    assert state.run_id is not None
    values = state.run_record()
    try:
        async with deps.db.tenant(state.request.agent_id) as conn:
            await queries.finish_run(conn, agent_id=state.request.agent_id, run_id=state.run_id, values=values)
    except StorageError as exc:
        message = f"pipeline run record failed: {exc}"
        result.success = False
        result.error = f"{result.error}; {message}" if result.error else message
