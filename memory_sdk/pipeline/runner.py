"""The runner: owns the write's state and trace, runs the stages in order, records the run.

Each stage gets its own trace step (duration, status, data, LLM calls). A stage that raises stops the stages
after it (they depend on its output), but the event, committed by the first stage before any LLM work, stays;
the failure lands in the trace, in `result.error` and in the pipeline-run row. Transactions are opened by the
stages around their reads and writes only, never across an LLM call.

A dry run is the same write on a RolledBack database (store/database.py): the stages' transactions become
savepoints of one transaction that is rolled back at the end, so a dry run decides, writes and reports exactly
as the real write would, and stores nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace

from memory_sdk import telemetry
from memory_sdk.errors import MemorySDKError, RunTakenOver, StorageError, UsageError
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
from memory_sdk.results import PipelineTrace, TraceStep, WriteResult
from memory_sdk.store import queries
from memory_sdk.store.database import RolledBack, error_reason

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
    """Run every stage for one validated request and build its WriteResult, inside the write's OpenTelemetry span
    (memory_sdk/telemetry.py: a no-op without opentelemetry or a tracer provider)."""
    with telemetry.write_span(request, deps.config) as span:
        result = await _run_real_or_dry(request, deps)
        span.finish(result)
        return result


async def _run_real_or_dry(request: WriteRequest, deps: Deps) -> WriteResult:
    """Run every stage for one validated request and build its WriteResult; a dry run does the same on a
    database view whose one transaction is rolled back at the end, also on an error or a cancellation.

    A write cancelled mid-way (task cancellation, KeyboardInterrupt) ends its run as `cancelled` before the
    cancellation goes on; `reprocess` can finish it later. While the run is open, a heartbeat renews its lease.
    """
    if not request.dry_run:
        return await _run_stages(request, deps)
    rolled_back = RolledBack(deps.db, request.agent_id)
    try:
        result = await _run_stages(request, replace(deps, db=rolled_back))
    except BaseException as exc:
        await rolled_back.close(exc)
        raise
    try:
        await rolled_back.close()
    except StorageError as exc:  # nothing was committed: the server rolls back what a lost connection held
        _add_error(result, f"dry run rollback failed: {exc}")
    return result


async def _run_stages(request: WriteRequest, deps: Deps) -> WriteResult:
    started = time.perf_counter()
    state = WriteState(request=request, config=deps.config, schema_version=deps.schema_version)
    heartbeat: asyncio.Task[None] | None = None
    stop_heartbeat = asyncio.Event()
    try:
        stopped = False
        for name, stage in STAGES:
            step = TraceStep(name=name)
            state.steps.append(step)
            if stopped:
                step.status = "skipped"
                continue
            step_started = time.perf_counter()
            try:
                with telemetry.stage_span(name, step, deps.config):
                    await stage(state, deps)
            except Exception as exc:  # recorded in trace, result and run row; never swallowed
                stopped = True
                _stage_failed(state, step, name, exc)
                if name == "event_log" and isinstance(exc, UsageError):
                    raise  # a message_id reused for another message: the caller's mistake, nothing stored
            finally:
                step.duration_ms = round((time.perf_counter() - step_started) * 1000, 2)
            if name == "event_log":
                if state.earlier_outcome is not None:
                    return _earlier_outcome(state, started)
                if state.run_id is None:
                    stopped = True
                elif not request.dry_run:  # a dry run's run row is seen by nobody: no lease to renew
                    heartbeat = asyncio.create_task(_heartbeat(state, deps, stop_heartbeat))
            if name == "extraction" and state.extraction_path == "failed":
                step.status = "failed"
    except (asyncio.CancelledError, KeyboardInterrupt, SystemExit) as exc:
        if state.run_id is not None and not state.run_recorded:
            await _record_cancelled(state, deps, exc)
        raise
    finally:
        if heartbeat is not None:
            await _stop(heartbeat, stop_heartbeat)
    duration_ms = round((time.perf_counter() - started) * 1000, 2)
    result = state.outcome(duration_ms)
    if state.run_id is not None and not state.run_recorded:
        await _record_run(state, deps, result)
    logger.info(
        "write agent=%s path=%s added=%d updated=%d unchanged=%d deleted=%d adjustments=%d tokens=%d llm_calls=%d"
        " ms=%.0f%s",
        request.agent_id,
        state.extraction_path,
        len(result.facts_added),
        len(result.facts_updated),
        len(result.facts_unchanged),
        len(result.facts_deleted),
        len(result.adjustments),
        result.tokens_used.total_tokens,
        result.llm_calls,
        duration_ms,
        " dry_run" if request.dry_run else "",
    )
    if not request.verbose:
        result.pipeline = None
    return result


def _earlier_outcome(state: WriteState, started: float) -> WriteResult:
    """A retried write whose first run succeeded: that run's outcome, flagged duplicate, with this call's cost."""
    assert state.earlier_outcome is not None
    result = WriteResult.model_validate(state.earlier_outcome)
    return result.model_copy(
        update={
            "duplicate": True,
            "dry_run": state.request.dry_run,
            "tokens_used": state.usage,
            "cost": state.cost,
            "llm_calls": state.llm_calls,
            "duration_ms": round((time.perf_counter() - started) * 1000, 2),
            "pipeline": PipelineTrace(steps=state.steps) if state.request.verbose else None,
        }
    )


async def _heartbeat(state: WriteState, deps: Deps, stop: asyncio.Event) -> None:
    """Renew the run's lease until told to stop; a failed renewal is logged (the lease then simply ages)."""
    assert state.run_id is not None
    while True:
        try:
            await asyncio.wait_for(stop.wait(), state.config.run_heartbeat_sec)
            return
        except TimeoutError:
            pass
        try:
            async with deps.db.tenant(state.request.agent_id) as conn:
                await queries.heartbeat(conn, agent_id=state.request.agent_id, run_id=state.run_id)
        except StorageError as exc:
            logger.warning("write agent=%s run heartbeat failed: %s", state.request.agent_id, exc)


async def _stop(heartbeat: asyncio.Task[None], stop: asyncio.Event) -> None:
    """Let the heartbeat finish a renewal in flight (a task cancelled inside a transaction costs its connection),
    cancelling it only if that takes more than a moment."""
    stop.set()
    try:
        await asyncio.wait_for(asyncio.shield(heartbeat), _HEARTBEAT_STOP_SEC)
    except TimeoutError:
        heartbeat.cancel()


# A heartbeat renewal is one short UPDATE; one still running after this is stuck behind a lock or a dead server.
_HEARTBEAT_STOP_SEC = 2.0


# A cancelled write gets this long to mark its run; then the cancellation goes on regardless.
_CANCEL_RECORD_TIMEOUT_SEC = 5.0


async def _record_cancelled(state: WriteState, deps: Deps, exc: BaseException) -> None:
    """Mark the run `cancelled`, shielded from a second cancellation, within a short timeout."""
    assert state.run_id is not None
    state.errors.append(f"cancelled: {type(exc).__name__}")
    values = state.run_record(status="cancelled")

    async def record() -> None:
        assert state.run_id is not None
        async with deps.db.tenant(state.request.agent_id) as conn:
            await queries.finish_run(conn, agent_id=state.request.agent_id, run_id=state.run_id, values=values)

    task = asyncio.ensure_future(asyncio.wait_for(record(), _CANCEL_RECORD_TIMEOUT_SEC))
    try:
        await asyncio.shield(task)
    except (asyncio.CancelledError, TimeoutError, MemorySDKError) as failure:
        logger.warning("write agent=%s: cancelled run not recorded: %r", state.request.agent_id, failure)


def _stage_failed(state: WriteState, step: TraceStep, name: str, exc: BaseException) -> None:
    reason = error_reason(exc)
    step.status = "failed"
    step.error = f"{type(exc).__name__}: {reason}"
    state.errors.append(f"{name}: {step.error}")
    expected = isinstance(exc, MemorySDKError)
    logger.warning(
        "write agent=%s stage %s failed: %s", state.request.agent_id, name, step.error, exc_info=not expected
    )


async def _record_run(state: WriteState, deps: Deps, result: WriteResult) -> None:
    """Finish the pipeline-run row when the apply transaction did not (a stage failed or stopped the write); a
    failure here is reported in the result, the write itself stands."""
    assert state.run_id is not None
    values = state.run_record()
    try:
        async with deps.db.tenant(state.request.agent_id) as conn:
            await queries.finish_run(conn, agent_id=state.request.agent_id, run_id=state.run_id, values=values)
    except (StorageError, RunTakenOver) as exc:
        _add_error(result, f"pipeline run record failed: {exc}")


def _add_error(result: WriteResult, message: str) -> None:
    """A failure after the stages: the write's outcome stands, and says what went wrong after it."""
    result.success = False
    result.error = f"{result.error}; {message}" if result.error else message
