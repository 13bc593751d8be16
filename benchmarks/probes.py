"""Probes: does a correct answer pass through the SDK untouched, in every language of the suite?

Each probe (`benchmarks/probes/<language>.json`, format in `benchmarks/probes/README.md`) is a message, the earlier
writes it needs, and the answer a capable model gives to each of them. A scripted model answers exactly that: the
informed extraction with the probe's answer (a decision's `target_text` becomes the short id the prompt shows),
reconciliation with the answer's own decision for that fact (else NOOP of an identical candidate, else ADD), entity
resolution only for the same name. Then the memory is read back and every way the SDK could have changed the answer
is a problem:

  altered     a fact of the answer is not stored current with its text, subject, attribute and start as given
  collateral  an earlier true fact was closed, retracted or merged without the answer targeting it, or a target the
              answer closes (UPDATE/DELETE) is still current, or one it confirms (NOOP) is not
  adjusted    the write reported an adjustment (result.adjustments) or failed
  calls       a write cost more than its one informed extraction call (re-asked, or the blind path)

Target: no problem at all. The same checks run in CI as tests (tests/test_probes.py, one test per probe).

    python benchmarks/probes.py [--only de fr] [--verbose] [--database-url postgresql://...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time
from pathlib import Path
from typing import Any

from _common import database, format_table, prompt_message

from memory_sdk import MemoryClient
from memory_sdk.lexicons import LANGUAGES, lexicon_for
from memory_sdk.llm.local import LocalEmbedder
from memory_sdk.llm.protocols import EmbeddingProvider, LLMRequest
from memory_sdk.pipeline.relatives import canonical_name, relative_of
from memory_sdk.results import Fact, WriteResult
from memory_sdk.testing import HashEmbedder, ScriptedLLM
from memory_sdk.text import fold

PROBES = Path(__file__).resolve().parent / "probes"
DEFAULT_DAY = date(2025, 6, 15)
# Earlier writes happen before the probe: an UPDATE at the very moment its target began would be a retraction.
PRIOR_DAY = date(2025, 6, 1)
FACT_DEFAULTS: dict[str, Any] = {
    "action": "ADD",
    "importance_category": "specific_event",
    "confidence": 0.95,
    "attribute": None,
}
PROBLEM_KINDS = ("altered", "collateral", "adjusted", "calls")

_KNOWN_HEADER = re.compile(r"^- (.*) \([^)]*\):$")
_KNOWN_FACT = re.compile(r"^  \[(\d+)\] (.*)$")
_BATCH_BLOCK = re.compile(r"^New fact (\d+) \([^\n]*\):\n(.*)\nExisting facts:\n((?:\d+\. .*\n?)*)", re.MULTILINE)
_CANDIDATE = re.compile(r"^(\d+)\. (.*) \(true since [^)]*\)$", re.MULTILINE)
_NEW_FACT = re.compile(r"New fact[^:\n]*:\n(.*)")
_RESOLUTION_NAME = re.compile(r"^Name in the message: (.*) \(type: [^)]*\)$", re.MULTILINE)
_RESOLUTION_CANDIDATE = re.compile(r"^(\d+)\. (.*) \([^)]*\)$", re.MULTILINE)


@dataclass(frozen=True)
class Turn:
    """One write of a probe: who says what, when, and the answer a capable model gives."""

    speaker: str
    message: str
    answer: dict[str, Any]
    occurred_at: datetime
    recent: tuple[str, ...] = ()
    participants: tuple[str, ...] = ()


@dataclass(frozen=True)
class Probe:
    id: str
    language: str
    covers: str
    turns: tuple[Turn, ...]  # the earlier writes, then the probe's own message last


@dataclass
class Outcome:
    """What running one probe found: each problem by kind, and the LLM calls of each write."""

    probe: Probe
    problems: list[tuple[str, str]] = field(default_factory=list)
    calls: list[int] = field(default_factory=list)
    facts: int = 0

    def add(self, kind: str, what: str) -> None:
        self.problems.append((kind, what))


def _moment(day: str | None, default: date = DEFAULT_DAY) -> datetime:
    return datetime.combine(date.fromisoformat(day) if day else default, time(10, 0), tzinfo=UTC)


def load_probes(only: Sequence[str] = ()) -> list[Probe]:
    """Every probe of `benchmarks/probes/*.json` (only the languages in `only`, when given)."""
    probes = []
    for path in sorted(PROBES.glob("*.json")):
        if only and path.stem not in only:
            continue
        for raw in json.loads(path.read_text(encoding="utf-8")):
            at = _moment(raw.get("occurred_at"))
            prior = [
                Turn(p["speaker"], p["message"], p["answer"], _moment(p.get("occurred_at"), PRIOR_DAY))
                for p in raw.get("prior", [])
            ]
            own = Turn(
                raw["speaker"],
                raw["message"],
                raw["answer"],
                at,
                tuple(raw.get("recent", [])),
                tuple(raw.get("participants", [])),
            )
            probes.append(Probe(raw["id"], raw["language"], raw.get("covers", ""), (*prior, own)))
    return probes


def _known_facts(content: str) -> list[tuple[str, str]]:
    """(short id, text) of each known fact an informed prompt shows."""
    section = content.split("Known memory", 1)[-1].split("Recent messages", 1)[0]
    return [(m.group(1), m.group(2)) for line in section.splitlines() if (m := _KNOWN_FACT.match(line))]


class CapableModel:
    """Answers every call of a probe's writes as the probe says a capable model does."""

    def __init__(self, probe: Probe) -> None:
        self.turns = {turn.message: turn for turn in probe.turns}
        self.facts = {fold(f["text"]): f for turn in probe.turns for f in turn.answer.get("facts", [])}
        self.people = {fold(e["name"]) for turn in probe.turns for e in turn.answer.get("entities", [])}

    def llm(self) -> ScriptedLLM:
        return ScriptedLLM(
            {
                "informed_extraction": self.extraction,
                "reconciliation": self.reconciliation,
                "reconciliation_batch": self.reconciliation_batch,
                "entity_resolution": self.resolution,
            }
        )

    def extraction(self, request: LLMRequest) -> dict[str, Any]:
        turn = self.turns[prompt_message(request)]
        shown = _known_facts(request.messages[-1]["content"])
        facts = []
        for raw in turn.answer.get("facts", []):
            fact = {**FACT_DEFAULTS, **{k: v for k, v in raw.items() if k != "target_text"}}
            if raw.get("target_text"):
                short = next((s for s, text in shown if fold(text) == fold(raw["target_text"])), None)
                # Not shown: a capable model cannot name it; it says ADD and reconciliation decides.
                fact.update(target=short) if short else fact.update(action="ADD", target=None)
            facts.append(fact)
        return {
            "entities": [{"aliases": [], **e} for e in turn.answer.get("entities", [])],
            "facts": facts,
            "relations": turn.answer.get("relations", []),
            "updated_profiles": turn.answer.get("updated_profiles", {}),
        }

    def verdict(self, new_fact: str, candidates: Sequence[str]) -> dict[str, Any]:
        raw = self.facts.get(fold(new_fact), {})
        target = fold(raw.get("target_text") or "")
        for n, candidate in enumerate(candidates, start=1):
            if target and fold(candidate) == target:
                return {"reasoning": "as the answer says", "action": raw["action"], "target": str(n)}
        for n, candidate in enumerate(candidates, start=1):
            if fold(candidate) == fold(new_fact):
                return {"reasoning": "the same fact", "action": "NOOP", "target": str(n)}
        return {"reasoning": "new information", "action": "ADD", "target": None}

    def reconciliation(self, request: LLMRequest) -> dict[str, Any]:
        content = request.messages[-1]["content"]
        found = _NEW_FACT.search(content)
        section = content.split("Existing facts:\n", 1)[-1].split("\n\n", 1)[0]
        return self.verdict(found.group(1).strip() if found else "", [m.group(2) for m in _CANDIDATE.finditer(section)])

    def reconciliation_batch(self, request: LLMRequest) -> dict[str, Any]:
        blocks = _BATCH_BLOCK.findall(request.messages[-1]["content"])
        return {
            "decisions": [
                {"fact": number, **self.verdict(text, [m.group(2) for m in _CANDIDATE.finditer(listed)])}
                for number, text, listed in blocks
            ]
        }

    def resolution(self, request: LLMRequest) -> dict[str, Any]:
        """The same name only: two people called "my mother" by two speakers are two people."""
        content = request.messages[-1]["content"]
        found = _RESOLUTION_NAME.search(content)
        name = fold(found.group(1)) if found else ""
        for m in _RESOLUTION_CANDIDATE.finditer(content.split("Known entities:", 1)[-1]):
            if fold(m.group(2)) == name:
                return {"reasoning": "the same name", "match": m.group(1)}
        return {"reasoning": "none of these", "match": None}


async def run_probe(memory: MemoryClient, llm: ScriptedLLM, probe: Probe, agent_id: str) -> Outcome:
    """Write the probe's turns in order and list every way the stored memory differs from the answers."""
    outcome = Outcome(probe)
    targeted: dict[str, str] = {}  # folded target text -> the action that targets it
    for turn in probe.turns:
        before = len(llm.requests)
        result = await memory.write(
            agent_id,
            turn.message,
            turn.speaker,
            occurred_at=turn.occurred_at,
            recent_messages=list(turn.recent),
            participants=list(turn.participants) or None,
        )
        purposes = Counter(request.purpose for request in llm.requests[before:])
        outcome.calls.append(sum(purposes.values()))
        if purposes["informed_extraction"] != 1 or set(purposes) - {"informed_extraction", "reconciliation_batch"}:
            outcome.add("calls", f"{turn.message!r}: {dict(purposes)}")
        _check_result(outcome, turn, result)
        for raw in turn.answer.get("facts", []):
            if raw.get("target_text"):
                targeted[fold(raw["target_text"])] = raw.get("action", "ADD")
        await _check_memory(outcome, memory, agent_id, turn, targeted)
    return outcome


def _resolved_label(subject: str, turn: Turn) -> str:
    """The entity name the SDK resolves a first-person label to: "my niece" said by Priya is "Priya's niece", as "I"
    is Priya (resolution of the model's label, not a change to its answer: docs/decisions.md)."""
    first, _, rest = subject.strip().partition(" ")
    possessives = frozenset().union(*(lexicon_for(code).possessives for code in LANGUAGES))
    if rest and fold(first) in possessives and relative_of(subject, turn.speaker) is None:
        return f"{turn.speaker}'s {rest.strip()}"
    return subject


def _check_result(outcome: Outcome, turn: Turn, result: WriteResult) -> None:
    if not result.success or result.error:
        outcome.add("adjusted", f"{turn.message!r} failed: {result.error}")
    for adjustment in getattr(result, "adjustments", []):
        outcome.add("adjusted", f"{turn.message!r}: {adjustment}")


async def _check_memory(
    outcome: Outcome, memory: MemoryClient, agent_id: str, turn: Turn, targeted: dict[str, str]
) -> None:
    facts = await memory.get_facts(agent_id, include_history=True, min_confidence=0.0)
    current = [f for f in facts if f.valid_to is None and f.invalidated_at is None and f.merged_into_fact_id is None]
    by_text: dict[str, list[Fact]] = {}
    for fact in current:
        by_text.setdefault(fold(fact.text), []).append(fact)
    for raw in turn.answer.get("facts", []):
        action = raw.get("action", "ADD")
        if action in ("NOOP", "DELETE"):
            continue
        outcome.facts += 1
        stored = by_text.get(fold(raw["text"]))
        if not stored:
            outcome.add("altered", f"{raw['text']!r} is not stored current")
            continue
        fact = stored[0]
        subject = await memory.get_entity(agent_id, canonical_name(_resolved_label(raw["subject"], turn), turn.speaker))
        speaker = await memory.get_entity(agent_id, turn.speaker)
        if subject is None or fact.entity_key != subject.key:
            outcome.add("altered", f"{raw['text']!r} is on {fact.entity_key}, not {raw['subject']!r}")
        elif speaker is not None and fold(raw["subject"]) != fold(turn.speaker) and fact.entity_key == speaker.key:
            outcome.add("altered", f"{raw['text']!r} moved onto the speaker")
        if fact.text != raw["text"]:
            outcome.add("altered", f"{raw['text']!r} stored as {fact.text!r}")
        if raw.get("attribute") != fact.attribute:
            outcome.add("altered", f"{raw['text']!r}: attribute {fact.attribute!r}, not {raw.get('attribute')!r}")
        start = date.fromisoformat(raw["valid_from"]) if raw.get("valid_from") else turn.occurred_at.date()
        if fact.valid_from.date() != start:
            outcome.add("altered", f"{raw['text']!r}: valid from {fact.valid_from.date()}, not {start}")
    said = {fold(f["text"]) for t in outcome.probe.turns for f in t.answer.get("facts", [])}
    for fact in facts:
        if fact in current or fold(fact.text) not in said:
            continue
        action = targeted.get(fold(fact.text))
        if action not in ("UPDATE", "DELETE") and fold(fact.text) not in by_text:
            outcome.add("collateral", f"{fact.text!r} was closed ({_closed_how(fact)})")
    for text, action in targeted.items():
        if action in ("UPDATE", "DELETE") and text in by_text:
            outcome.add("collateral", f"the {action} target {by_text[text][0].text!r} is still current")
        if action == "NOOP" and text not in by_text:
            outcome.add("collateral", f"the NOOP target {text!r} is not current")


def _closed_how(fact: Fact) -> str:
    if fact.merged_into_fact_id:
        return "merged"
    return "retracted" if fact.invalidated_at else f"ended {fact.valid_to:%Y-%m-%d}"


async def run_all(
    database_url: str, probes: Sequence[Probe], embedder: EmbeddingProvider | None = None
) -> list[Outcome]:
    outcomes = []
    for probe in probes:
        llm = CapableModel(probe).llm()
        async with MemoryClient(database_url, llm=llm, embedder=embedder or HashEmbedder()) as memory:
            outcomes.append(await run_probe(memory, llm, probe, f"probe-{uuid.uuid4().hex[:10]}"))
    return outcomes


def print_tables(outcomes: Sequence[Outcome], *, verbose: bool) -> bool:
    languages = sorted({o.probe.language for o in outcomes})
    rows = []
    for language in [*languages, "total"]:
        mine = [o for o in outcomes if language in ("total", o.probe.language)]
        kinds = Counter(kind for o in mine for kind, _ in o.problems)
        writes = [c for o in mine for c in o.calls]
        rows.append(
            [
                language,
                len(mine),
                sum(o.facts for o in mine),
                *(kinds[kind] for kind in PROBLEM_KINDS),
                sum(1 for o in mine if not o.problems),
                f"{sum(writes) / max(1, len(writes)):.2f}",
            ]
        )
    print(format_table(["language", "probes", "facts", *PROBLEM_KINDS, "untouched", "calls/write"], rows))
    for outcome in outcomes:
        if outcome.problems and (verbose or len(outcomes) <= 400):
            print(f"\n{outcome.probe.id} ({outcome.probe.covers}):")
            for kind, what in outcome.problems:
                print(f"  {kind}: {what}")
    return all(not o.problems for o in outcomes)


async def main(argv: Sequence[str] | None = None) -> bool:
    args = parse_args(argv)
    probes = load_probes(args.only)
    with database(args.database_url) as url:
        embedder = LocalEmbedder() if args.embedder == "local" else None
        outcomes = await run_all(url, probes, embedder)
    return print_tables(outcomes, verbose=args.verbose)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--only", nargs="*", default=(), help="languages to run (file stems of benchmarks/probes/)")
    parser.add_argument(
        "--embedder",
        choices=("hash", "local"),
        default="hash",
        help="hash (as in CI's full run) or local (LocalEmbedder: its similarity floors, e.g. closure_min_similarity)",
    )
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--database-url", default=None)
    return parser.parse_args(argv)


if __name__ == "__main__":
    raise SystemExit(0 if asyncio.run(main()) else 1)
