"""Plain-text and JSON output of the `memory-sdk` command: one line per fact, relationship or event, a write's
result, a trace, and the demo's replay check."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from pydantic import BaseModel

from memory_sdk.demo import Recording, ReplayLLM
from memory_sdk.pricing import format_cost
from memory_sdk.results import Event, Fact, PipelineTrace, Relationship, WriteResult

Row = TypeVar("Row", Fact, Relationship, Event)

# Trace data values longer than this are cut in text output (`--json` prints them whole).
TRACE_VALUE_MAX_CHARS = 240


def when(moment: datetime | None) -> str:
    if moment is None:
        return "now"
    moment = moment.astimezone(UTC)
    return (
        f"{moment:%Y-%m-%d}" if (moment.hour, moment.minute, moment.second) == (0, 0, 0) else f"{moment:%Y-%m-%d %H:%M}"
    )


def fact_line(fact: Fact) -> str:
    attribute = f" [{fact.attribute}]" if fact.attribute else ""
    span = f"{when(fact.valid_from)} -> {when(fact.valid_to)}" if fact.valid_to else f"since {when(fact.valid_from)}"
    invalidated = ", invalidated" if fact.invalidated_at else ""
    return (
        f"{fact.entity_key}: {one_line(fact.text)}{attribute}  ({span}, confidence {fact.confidence:.2f}{invalidated})"
    )


def event_line(event: Event) -> str:
    return f"{event.id}  {when(event.occurred_at)}  {event.speaker}: {one_line(event.content)}"


def print_rows(args: argparse.Namespace, rows: Sequence[Row], line: Callable[[Row], str], empty: str) -> None:
    if args.json:
        print_json(dump(list(rows)))
        return
    print("\n".join(line(row) for row in rows) if rows else empty)


def relationship_line(rel: Relationship) -> str:
    span = (
        f"since {when(rel.valid_from)}" if rel.valid_to is None else f"{when(rel.valid_from)} -> {when(rel.valid_to)}"
    )
    invalidated = ", invalidated" if rel.invalidated_at else ""
    return f"{rel.source_key} -[{rel.rel_type}]-> {rel.target_key}  (strength {rel.strength:.2f}, {span}{invalidated})"


def print_result(result: WriteResult, *, calls: bool = False, indent: str = "  ") -> None:
    usage = result.tokens_used
    head = [
        f"path {result.extraction_path}",
        f"{result.llm_calls} LLM call{'s' if result.llm_calls != 1 else ''}",
        f"{usage.total_tokens} tokens ({usage.input_tokens} in / {usage.output_tokens} out)",
        f"cost {format_cost(result.cost)}",
        f"{result.duration_ms:.0f} ms",
    ]
    if result.dry_run:
        head.append("dry run: nothing stored")
    elif result.event_id is not None:
        head.append(f"event {result.event_id}")
    print(indent + " | ".join(head))
    if result.entities_resolved:
        print(indent + "entities: " + ", ".join(entity_text(e) for e in result.entities_resolved))
    superseded = {f.id: f for f in result.facts_superseded}
    for mark, label, facts in (
        ("+", "added", result.facts_added),
        ("~", "updated", result.facts_updated),
        ("=", "unchanged", result.facts_unchanged),
        ("-", "deleted", result.facts_deleted),
    ):
        for fact in facts:
            old = superseded.get(fact.supersedes_fact_id) if fact.supersedes_fact_id else None
            was = f"  (was: {one_line(old.text)})" if old is not None else ""
            print(f"{indent}{mark} {label:<9} {fact.entity_key}: {one_line(fact.text)}{was}")
    for rel in result.relationships:
        print(f"{indent}> relation  {rel.source_key} -[{rel.rel_type}]-> {rel.target_key} ({rel.strength:.2f})")
    if calls and result.pipeline is not None:
        for step in result.pipeline.steps:
            for call in step.llm_calls:
                if call.status == "failed":
                    print(f"{indent}! {call.purpose} failed: {one_line(call.error or '')}")
    if result.error:
        print(f"{indent}error: {one_line(result.error)}")


def entity_text(entity: Any) -> str:
    details = [entity.phase, *(["created"] if entity.created and entity.phase != "new" else [])]
    if entity.score is not None:
        details.append(f"{entity.score:.2f}")
    return f"{entity.name} -> {entity.key} ({', '.join(details)})"


def print_memory(agent: str, facts: list[Fact], relationships: list[Relationship]) -> None:
    print(f"current facts of {agent} ({len(facts)}):")
    for fact in facts:
        print("  " + fact_line(fact))
    print(f"current relationships ({len(relationships)}):")
    for rel in relationships:
        print("  " + relationship_line(rel))


def print_trace(trace: PipelineTrace, indent: str = "  ") -> None:
    for step in trace.steps:
        print(f"{indent}{step.name:<18} {step.status:<8} {step.duration_ms:>9.1f} ms")
        for call in step.llm_calls:
            error = f": {one_line(call.error)}" if call.error else ""
            print(
                f"{indent}    llm {call.purpose} {call.status}, {call.duration_ms:.0f} ms, "
                f"{call.usage.total_tokens} tokens{error}"
            )
        for key, value in step.data.items():
            text = json.dumps(value, ensure_ascii=False, default=str)
            if len(text) > TRACE_VALUE_MAX_CHARS:
                text = text[: TRACE_VALUE_MAX_CHARS - 3] + "..."
            print(f"{indent}    {key}: {text}")
        if step.error:
            print(f"{indent}    error: {one_line(step.error)}")


def summary(result: WriteResult) -> dict[str, Any]:
    """What a write produced, free of ids and timings: equal summaries mean a replay reproduced a run."""

    def texts(facts: list[Fact]) -> list[str]:
        return [f"{fact.entity_key}: {fact.text}" for fact in facts]

    return {
        "success": result.success,
        "extraction_path": result.extraction_path,
        "llm_calls": result.llm_calls,
        "tokens": result.tokens_used.total_tokens,
        "entities": [f"{e.key} ({e.phase})" for e in result.entities_resolved],
        "added": texts(result.facts_added),
        "updated": texts(result.facts_updated),
        "unchanged": texts(result.facts_unchanged),
        "deleted": texts(result.facts_deleted),
        "relationships": [f"{r.source_key} {r.rel_type} {r.target_key}" for r in result.relationships],
        "error": result.error,
    }


def print_replay_check(recording: Recording, llm: ReplayLLM, summaries: list[dict[str, Any]]) -> None:
    def comparable(summary: dict[str, Any]) -> dict[str, Any]:
        return {key: value for key, value in summary.items() if key != "error"}

    if recording.results:
        differing = [
            str(number)
            for number, (now, then) in enumerate(zip(summaries, recording.results, strict=False), start=1)
            if comparable(now) != comparable(then)
        ]
        if len(summaries) != len(recording.results):
            differing.append(f"(recorded {len(recording.results)} messages, replayed {len(summaries)})")
        if differing:
            print(f"\nreplay differs from the recorded run for message(s) {', '.join(differing)}")
        else:
            print(f"\nreplay reproduced the recorded run: {len(summaries)}/{len(summaries)} messages identical")
    if llm.mismatches or llm.exhausted:
        print(
            f"note: {len(llm.mismatches)} answer(s) went to prompts that differ from the recorded ones and "
            f"{len(llm.exhausted)} call(s) had no recorded answer: the prompts or the pipeline changed since "
            f"{recording.recorded_at:%Y-%m-%d}; record again with `memory-sdk demo --record PATH`"
        )


def dump(value: BaseModel | list[Any] | str) -> Any:
    """JSON-ready form of a result, or of a list of them."""
    if isinstance(value, list):
        return [dump(item) for item in value]
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else value


def print_json(value: Any) -> None:
    print(json.dumps(value, ensure_ascii=False, indent=2, default=str))


def one_line(text: str) -> str:
    return " ".join(text.split())
