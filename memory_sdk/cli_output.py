"""What the `memory-sdk` command prints: rich tables of facts, relationships, events and an entity; a write's
result; a trace as a tree (stages, each entity's resolution, each fact's decision, cascades, failures, LLM calls);
the demo's replay check; and JSON (`--json`) for machines.

Text goes through rich: colour on a terminal only, plain text in a pipe or a file (rich turns colour off when stdout
is not a terminal, and NO_COLOR is honoured), with wide lines in a pipe so `grep` sees one row per line. Dates have
one format everywhere, `YYYY-MM-DD HH:MM` in UTC.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from memory_sdk.demo import Recording, ReplayLLM
from memory_sdk.pricing import format_cost
from memory_sdk.results import (
    Entity,
    Event,
    Fact,
    PipelineTrace,
    Relationship,
    ResolvedEntity,
    SearchHit,
    TraceStep,
    WriteResult,
)

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table
    from rich.tree import Tree

__all__ = [
    "console",
    "entity_text",
    "fact_status",
    "one_line",
    "print_counts",
    "print_entity",
    "print_events",
    "print_facts",
    "print_json",
    "print_memory",
    "print_relationships",
    "print_replay_check",
    "print_result",
    "print_search",
    "print_trace",
    "progress",
    "summary",
    "to_json",
    "when",
]

# Trace values longer than this are cut in text output (`--json` prints them whole).
TRACE_VALUE_MAX_CHARS = 240
# Line width when stdout is not a terminal: wide enough that a table row stays on one line for grep.
PIPE_WIDTH = 1000
# Below this width the facts table leaves out its `recorded at` and `conf.` columns (`--wide` shows them): seven
# columns, three of them dates, do not fit 80 columns beside a readable fact text.
FULL_TABLE_WIDTH = 120
# A date column is never narrower than a date: `YYYY-MM-DD HH:MM` wraps at its space, never cut to `2025-01-…`.
DATE_COLUMN_WIDTH = 10
# Columns whose values are copied or compared whole: kept on one line (a key or a text folds or wraps instead).
_ONE_LINE_COLUMNS = frozenset({"event id", "status", "conf.", "strength", "score"})
# What `path none` means on screen: the extraction stage ran no model.
_PATH_NONE = "path none (nothing to extract: small talk or an empty message, logged as an event only)"
ZERO_LENGTH_NOTE = (
    "a 'corrected' version ends the moment it began: a later message replaced it from that same moment, so it "
    "was never in force; it is kept for provenance"
)


def console(wide: bool = False) -> Console:
    """A rich console on the current stdout (so pytest's capture and pipes get it): colour on a terminal only.
    The terminal's width, or COLUMNS when set; a pipe gets wide lines (one row a line for grep), as does `--wide`."""
    from rich.console import Console

    fitted = sys.stdout.isatty() or os.environ.get("COLUMNS", "").isdigit()
    return Console(file=sys.stdout, width=None if fitted and not wide else PIPE_WIDTH, highlight=False)


def _wide(args: argparse.Namespace | None) -> bool:
    return bool(getattr(args, "wide", False))


@contextmanager
def progress(args: argparse.Namespace, label: str, total: int | None = None) -> Iterator[Callable[[int], None]]:
    """A progress bar on stderr for a command that can run for seconds (reembed, restore, consolidate, reprocess);
    yields advance(n). Drawn on a terminal only and never with --json: a pipe or a log gets the result line alone.
    Without a total it counts and shows the time spent."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    err = Console(stderr=True)
    if args.json or not err.is_terminal:
        yield lambda done: None
        return
    counted = [MofNCompleteColumn()] if total is not None else []
    bar = Progress(
        SpinnerColumn(), TextColumn(label), BarColumn(), *counted, TimeElapsedColumn(), console=err, transient=True
    )
    task = bar.add_task(label, total=total)
    with bar:
        yield lambda done: bar.advance(task, done)


def when(moment: datetime | None) -> str:
    """One date format for every column and line: UTC, to the minute."""
    return "" if moment is None else f"{moment.astimezone(UTC):%Y-%m-%d %H:%M}"


def one_line(text: str) -> str:
    return " ".join(text.split())


def to_json(value: BaseModel | list[Any] | str) -> Any:
    """JSON-ready form of a result, or of a list of them."""
    if isinstance(value, list):
        return [to_json(item) for item in value]
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else value


def print_json(value: Any) -> None:
    print(json.dumps(value, ensure_ascii=False, indent=2, default=str))


# -- tables -----------------------------------------------------------------------------------------------------


def _table(*columns: str, title: str | None = None, wide: bool = False) -> Table:
    """A table whose values are never cut short: a narrow column folds (a key) or wraps (a text, a date at its
    space), since `person:r…` or `2025-01-…` reads as another value; `wide` keeps every value on one line."""
    from rich import box
    from rich.table import Table

    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left", show_edge=False)
    for name in columns:
        dated = name.startswith(("valid ", "recorded", "occurred"))
        table.add_column(
            name,
            overflow="fold",
            no_wrap=wide or name in _ONE_LINE_COLUMNS,
            min_width=DATE_COLUMN_WIDTH if dated and not wide else None,
        )
    return table


def fact_status(fact: Fact) -> str:
    """Where a version stands: current, ended (by a newer version), corrected (zero-length), retracted or merged."""
    if fact.merged_into_fact_id is not None:
        return "merged"
    if fact.invalidated_at is not None:
        return "retracted"
    if fact.valid_to is None:
        return "current"
    return "corrected" if fact.valid_to == fact.valid_from else "ended"


def _facts_table(facts: Sequence[Fact], title: str | None = None, *, full: bool = True, wide: bool = False) -> Table:
    """Every column when `full`; else without `recorded at` and `conf.`, and a caption saying `--wide` shows them."""
    extra = ("recorded at", "conf.") if full else ()
    table = _table("entity", "fact", "valid from", "valid to", *extra, "status", title=title, wide=wide)
    if not full:
        table.caption, table.caption_justify = "recorded at, conf.: --wide or --json", "left"
    for fact in facts:
        attribute = f" [{fact.attribute}]" if fact.attribute else ""
        more = (when(fact.recorded_at), f"{fact.confidence:.2f}") if full else ()
        table.add_row(
            fact.entity_key,
            one_line(fact.text) + attribute,
            when(fact.valid_from),
            when(fact.valid_to),
            *more,
            fact_status(fact),
        )
    return table


def _print_facts_table(facts: Sequence[Fact], wide: bool, title: str | None = None) -> None:
    out = console(wide)
    out.print(_facts_table(facts, title, full=wide or out.width >= FULL_TABLE_WIDTH, wide=wide))


def _relationships_table(
    rels: Sequence[Relationship], title: str | None = None, *, full: bool = True, wide: bool = False
) -> Table:
    """Every column when `full`; else without `strength`, and a caption saying `--wide` shows it."""
    extra = ("strength",) if full else ()
    table = _table("source", "relation", "target", *extra, "valid from", "valid to", "status", title=title, wide=wide)
    if not full:
        table.caption, table.caption_justify = "strength: --wide or --json", "left"
    for rel in rels:
        status = "ended" if rel.invalidated_at or rel.valid_to else "current"
        table.add_row(
            rel.source_key,
            rel.rel_type,
            rel.target_key,
            *((f"{rel.strength:.2f}",) if full else ()),
            when(rel.valid_from),
            when(rel.valid_to),
            status,
        )
    return table


def print_facts(args: argparse.Namespace, facts: Sequence[Fact]) -> None:
    if args.json:
        print_json(to_json(list(facts)))
        return
    if not facts:
        print("(no facts)")
        return
    _print_facts_table(facts, _wide(args))
    if any(fact_status(fact) == "corrected" for fact in facts):
        print(f"note: {ZERO_LENGTH_NOTE}")


def print_relationships(args: argparse.Namespace, rels: Sequence[Relationship]) -> None:
    if args.json:
        print_json(to_json(list(rels)))
        return
    if not rels:
        print("(no relationships)")
        return
    out = console(_wide(args))
    out.print(_relationships_table(rels, full=_wide(args) or out.width >= FULL_TABLE_WIDTH, wide=_wide(args)))


def print_events(args: argparse.Namespace, events: Sequence[Event]) -> None:
    if args.json:
        print_json(to_json(list(events)))
        return
    if not events:
        print("(no events)")
        return
    out = console(_wide(args))
    full = _wide(args) or out.width >= FULL_TABLE_WIDTH
    table = _table(
        "event id", "occurred at", *(["recorded at"] if full else []), "speaker", "message", wide=_wide(args)
    )
    if not full:
        table.caption, table.caption_justify = "recorded at: --wide or --json", "left"
    for event in events:
        recorded = [when(event.recorded_at)] if full else []
        table.add_row(str(event.id), when(event.occurred_at), *recorded, event.speaker, one_line(event.content))
    out.print(table)


def print_entity(args: argparse.Namespace, entity: Entity, current_facts: int) -> None:
    if args.json:
        print_json({**to_json(entity), "current_facts": current_facts})
        return
    table = _table("", "", title=f"entity {entity.key}", wide=_wide(args))
    table.show_header = False
    for label, value in (
        ("key", entity.key),
        ("name", entity.name),
        ("type", entity.type),
        ("aliases", ", ".join(entity.aliases) or "(none)"),
        ("current facts", str(current_facts)),
        ("profile", one_line(entity.profile_text) if entity.profile_text else "(none yet)"),
    ):
        table.add_row(label, value)
    console(_wide(args)).print(table)


def print_search(args: argparse.Namespace, hits: Sequence[SearchHit]) -> None:
    """Search hits best first: score, the signals that found each (with their ranks), the fact."""
    if args.json:
        print_json(to_json(list(hits)))
        return
    if not hits:
        print("(no matching facts)")
        return
    table = _table("score", "signals", "entity", "fact", "valid from", "status", wide=_wide(args))
    for hit in hits:
        signals = " ".join(f"{name}#{rank}" for name, rank in hit.signals.items())
        fact = hit.fact
        attribute = f" [{fact.attribute}]" if fact.attribute else ""
        table.add_row(
            f"{hit.score:.4f}",
            signals,
            fact.entity_key,
            one_line(fact.text) + attribute,
            when(fact.valid_from),
            fact_status(fact),
        )
    console(_wide(args)).print(table)


def print_counts(args: argparse.Namespace, headline: str, counts: dict[str, int]) -> None:
    """Rows per table, as JSON or as one line: the headline, then each table's count."""
    if args.json:
        print_json(counts)
        return
    print(f"{headline}: " + ", ".join(f"{table} {count}" for table, count in counts.items()))


def print_memory(agent: str, facts: list[Fact], relationships: list[Relationship]) -> None:
    _print_facts_table(facts, False, title=f"current facts of {agent} ({len(facts)})")
    out = console()
    title = f"current relationships ({len(relationships)})"
    out.print(_relationships_table(relationships, title, full=out.width >= FULL_TABLE_WIDTH))


# -- a write's result -------------------------------------------------------------------------------------------


def print_result(result: WriteResult, *, calls: bool = False, indent: str = "  ", duration: str | None = None) -> None:
    """A write in a few lines: path, calls, tokens, time (`duration` replaces the time, e.g. for a replay), then
    the entities, each fact by what happened to it, the relationships, the SDK's adjustments to the model's answer,
    and failed LLM calls."""
    usage = result.tokens_used
    head = [
        _PATH_NONE if result.extraction_path == "none" else f"path {result.extraction_path}",
        f"{result.llm_calls} LLM call{'s' if result.llm_calls != 1 else ''}",
        f"{usage.total_tokens} tokens ({usage.input_tokens} in / {usage.output_tokens} out)",
        f"cost {format_cost(result.cost)}",
        duration or f"{result.duration_ms:.0f} ms",
    ]
    if result.dry_run:
        head.append("dry run: nothing stored")
    elif result.event_id is not None:
        head.append(f"event {result.event_id}")
    if result.duplicate:
        # The lists are the first write's outcome: shown as `+ added` again they would claim a second write.
        first = (len(result.facts_added), len(result.facts_updated), len(result.facts_unchanged))
        print(indent + " | ".join(["duplicate: this message id was written before, nothing stored again", *head[1:]]))
        print(f"{indent}the first write added {first[0]}, updated {first[1]} and left {first[2]} facts unchanged")
        return
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
    for adjustment in result.adjustments:  # every change the SDK made to the model's answer, never silent
        print(f"{indent}* {adjustment.rule}: {one_line(adjustment.item)} ({one_line(adjustment.why)})")
    if calls and result.pipeline is not None:
        for step in result.pipeline.steps:
            for call in step.llm_calls:
                if call.status == "failed":
                    print(f"{indent}! {call.purpose} failed: {one_line(call.error or '')}")
    if result.error:
        print(f"{indent}error: {one_line(result.error)}")


def entity_text(entity: ResolvedEntity) -> str:
    details = [entity.phase, *(["created"] if entity.created and entity.phase != "new" else [])]
    if entity.score is not None:
        details.append(f"{entity.score:.2f}")
    return f"{entity.name} -> {entity.key} ({', '.join(details)})"


# -- the trace as a tree ----------------------------------------------------------------------------------------


def print_trace(trace: PipelineTrace, title: str = "trace") -> None:
    """Each stage with its status and time; under it what it decided, its LLM calls and its error."""
    from rich.tree import Tree

    total = sum(step.duration_ms for step in trace.steps)
    root = Tree(f"{title}: {len(trace.steps)} stages, {total:.1f} ms")
    for step in trace.steps:
        _stage(root.add(_stage_label(step)), step)
    console().print(root)


_STATUS_STYLE = {"ok": "green", "partial": "yellow", "failed": "bold red", "skipped": "dim"}


def _stage_label(step: TraceStep) -> str:
    from rich.markup import escape

    style = _STATUS_STYLE.get(step.status, "")
    return f"{escape(step.name)}  [{style}]{step.status}[/]  {step.duration_ms:.1f} ms"


def _stage(node: Tree, step: TraceStep) -> None:
    from rich.markup import escape

    data = dict(step.data)
    if step.name == "entity_resolution":
        for entity in data.pop("entities", None) or []:
            node.add(escape(_resolution_text(entity)))
    elif step.name == "reconciliation":
        for decision in data.pop("decisions", None) or []:
            node.add(escape(_decision_text(decision)))
    elif step.name == "upsert":
        for applied in data.pop("facts", None) or []:
            node.add(escape(_applied_text(applied)))
    for key, value in data.items():
        if value in (None, [], {}, 0, False, ""):
            continue  # an empty list of drops says nothing worth a line
        text = json.dumps(value, ensure_ascii=False, default=str)
        if len(text) > TRACE_VALUE_MAX_CHARS:
            text = text[: TRACE_VALUE_MAX_CHARS - 3] + "..."
        node.add(escape(f"{key}: {text}"))
    for call in step.llm_calls:
        estimated = " (estimated)" if call.usage_estimated else ""
        error = f": {one_line(call.error)}" if call.error else ""
        node.add(
            escape(
                f"LLM {call.purpose} {call.status}, {call.duration_ms:.0f} ms, {call.usage.input_tokens} in / "
                f"{call.usage.output_tokens} out tokens{estimated}{error}"
            )
        )
    if step.error:
        node.add(f"[bold red]error:[/] {escape(one_line(step.error))}")


def _resolution_text(entity: dict[str, Any]) -> str:
    """`Guili -> person:guilherme_maturana (alias)`, with the match score and the nearest candidate of a new one."""
    details = [str(entity.get("phase", "?"))]
    if entity.get("score") is not None:
        details.append(f"score {entity['score']:.2f}")
    if entity.get("created"):
        details.append("created")
    candidates = entity.get("candidates") or []
    if candidates:
        nearest = candidates[0]
        details.append(f"nearest {nearest.get('key')} {nearest.get('score', 0):.2f}")
    return f"{entity.get('name')} -> {entity.get('key')} ({', '.join(details)})"


def _decision_text(decision: dict[str, Any]) -> str:
    """`UPDATE "Ricardo se mudou..." similarity 0.36, path llm: LLM: UPDATE #1`."""
    parts = [f"{decision.get('action', '?')} {one_line(str(decision.get('text', '')))!r}"]
    if decision.get("similarity") is not None:
        parts.append(f"similarity {decision['similarity']:.2f}")
    if decision.get("path"):
        parts.append(f"path {decision['path']}")
    reason = f": {decision['why']}" if decision.get("why") else ""
    return ", ".join(parts) + reason


def _applied_text(applied: dict[str, Any]) -> str:
    """What the upsert did with a decision, with the cascades it set off."""
    decided, done = applied.get("decided"), applied.get("applied")
    action = str(done) if decided in (None, done) else f"{decided} applied as {done}"
    line = f"{action} {one_line(str(applied.get('text', '')))!r}"
    extras = [f"{key.replace('_', ' ')}: {len(value)}" for key, value in applied.items() if key.startswith("cascade")]
    return line + (f" (cascade: {', '.join(extras)})" if extras else "")


# -- the demo's replay check ------------------------------------------------------------------------------------


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


def print_replay_check(
    recording: Recording, llm: ReplayLLM, summaries: list[dict[str, Any]], *, earlier_events: int = 0, agent: str = ""
) -> None:
    """Whether the replay reproduced the recorded run, and if not, the likely reason.

    An agent that already had memory gets other prompts (pre-retrieval shows what is known), so the recorded
    answers do not fit it: that is said first, before any talk of changed prompts or pipeline.
    """

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
    if earlier_events:
        print(
            f"note: agent {agent!r} already had memory ({earlier_events} events) before this run: the prompts showed "
            "it to the model, so the recorded answers (given to a fresh agent) cannot match; run `memory-sdk demo` "
            "without --agent, or with a new one, to reproduce the recording"
        )
    elif llm.mismatches or llm.exhausted:
        print(
            f"note: {len(llm.mismatches)} answer(s) went to prompts that differ from the recorded ones and "
            f"{len(llm.exhausted)} call(s) had no recorded answer: the prompts or the pipeline changed since "
            f"{recording.recorded_at:%Y-%m-%d}; record again with `memory-sdk demo --record PATH`"
        )
