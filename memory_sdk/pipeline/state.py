"""The explicit state one write carries through the stages, and the dependencies stages may use."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal
from uuid import UUID

from memory_sdk.config import MemoryConfig
from memory_sdk.lexicons import Lexicon, detect_language, lexicon_for
from memory_sdk.llm.protocols import EmbeddingProvider, LLMProvider
from memory_sdk.llm.schemas import ExtractedEmotion, ExtractedEntity, ExtractedFact, ExtractedRelation
from memory_sdk.results import (
    Adjustment,
    AdjustmentRule,
    Cost,
    Emotion,
    Fact,
    PipelineTrace,
    Relationship,
    ResolvedEntity,
    TokenUsage,
    TraceStep,
    WriteResult,
)
from memory_sdk.store.database import Tenants
from memory_sdk.text import clean_strings, normalise_alias

if TYPE_CHECKING:
    from memory_sdk.pipeline.guards import Candidate

__all__ = [
    "CHAT_LINE_CONTEXT",
    "MIRROR_CONTEXT",
    "CandidateFact",
    "Deps",
    "Extraction",
    "FactDecision",
    "KnownEntity",
    "PreparedFact",
    "ShownFact",
    "WriteRequest",
    "WriteState",
]

# The facts the SDK makes itself, beside the model's: a mirror of a relation no fact supports (seeds/002,
# "Fatos-espelho"), and a chat line the model copied, kept as said (fact_checks.chat_line).
MIRROR_CONTEXT = "inferred_from_relation"
CHAT_LINE_CONTEXT = "chat_line"


@dataclass(frozen=True)
class WriteRequest:
    """A validated write() call."""

    agent_id: str
    message: str
    speaker_name: str
    occurred_at: datetime
    recent_messages: tuple[str, ...]
    dry_run: bool
    verbose: bool
    # The caller's id of the message: a second write with it returns the first's outcome (idempotent writes).
    message_id: str | None = None
    # Reprocess: run the pipeline again for this stored event instead of logging a new one.
    event_id: UUID | None = None
    # Reprocess: leave an event alone once it has had this many runs.
    max_attempts: int | None = None
    # People the caller says take part in the conversation (write(participants=...)), besides the speaker.
    participants: tuple[str, ...] = ()
    # The message's language as the caller gave it (write(language=...)); None: detected from the message.
    language: str | None = None


@dataclass(frozen=True)
class Deps:
    """What stages may talk to. Stages never construct these themselves."""

    # The client's Database, or for a dry run the RolledBack view over it (runner.run_write): stages only open
    # tenant() transactions and cannot tell the two apart.
    db: Tenants
    llm: LLMProvider
    resolution_llm: LLMProvider
    embedder: EmbeddingProvider
    config: MemoryConfig
    schema_version: int


@dataclass(frozen=True)
class KnownEntity:
    """An entity of the agent's memory that the message mentions (found by alias lookup)."""

    key: str
    name: str
    type: str
    # None also when its stored profile is stale (built before its latest fact change): never fed to a prompt.
    profile_text: str | None
    matched_alias: str
    # Without a usable profile: its current facts nearest to the message, (text, similarity), for pre-retrieval.
    facts: tuple[tuple[str, float], ...] = ()
    # The stored ids of `facts`, in the same order: the informed extraction may name them as a decision's target.
    fact_ids: tuple[UUID, ...] = ()


@dataclass(frozen=True)
class ShownFact:
    """A stored fact the informed extraction was shown under a short id ("1", "2", ...): never its real id, so a
    model cannot invent or leak one, and the id maps back only to what it saw."""

    id: UUID
    entity_key: str
    text: str


@dataclass
class Extraction:
    """What the LLM extracted from the message, before resolution."""

    entities: list[ExtractedEntity] = field(default_factory=list)
    facts: list[ExtractedFact] = field(default_factory=list)
    relations: list[ExtractedRelation] = field(default_factory=list)
    updated_profiles: dict[str, str] = field(default_factory=dict)
    emotion: ExtractedEmotion | None = None
    prompt_version: str | None = None


@dataclass
class CandidateFact:
    """An extracted or mirror fact after post-extraction, with its embedding (None if embedding failed)."""

    fact: ExtractedFact
    source_context: str
    embedding: list[float] | None


@dataclass
class PreparedFact:
    """An extracted (or mirror) fact with its subject resolved, its valid time and its embedding."""

    subject_name: str
    entity_key: str
    text: str
    attribute: str | None
    single_valued: bool
    confidence: float
    importance: float
    importance_category: str
    valid_from: datetime
    action_hint: Literal["NEW", "UPDATE"]
    source_context: str
    embedding: list[float] | None
    prompt_version: str | None
    # The informed extraction's decision (ExtractedFact.action/target) when it gave one: reconciliation decides
    # from it through the guards, without a call, when the call saw every similar fact.
    informed_action: Literal["ADD", "UPDATE", "NOOP", "DELETE"] | None = None
    informed_target: str | None = None


@dataclass
class FactDecision:
    """What reconciliation decided for one prepared fact."""

    fact: PreparedFact
    action: Literal["ADD", "UPDATE", "NOOP", "DELETE"]
    target_id: UUID | None = None
    similarity: float | None = None
    reason: str = ""
    # Why the LLM's verdict could not be used and the fallback was taken (None when it was used or not needed):
    # a fallback may leave a near-duplicate, so the write reports it.
    failure: str | None = None
    # Where the decision came from: the fast path (no LLM), the informed extraction's answer, or a reconciliation
    # call. A guard that changed it says so in `reason`.
    source: Literal["fast", "informed", "reconciliation"] = "reconciliation"
    # The model said ADD, and the fact's single-valued attribute has an open value: UPDATEd, since the database keeps
    # one open value (reported as an adjustment).
    single_valued_fallback: bool = False


@dataclass(frozen=True)
class KnownRead:
    """What alias lookup found (alias_lookup.read_known): the known entities the message names, with their facts
    nearest to it, and what the trace shows of the lookup."""

    entities: dict[str, KnownEntity]
    ngrams_checked: int
    stale_profiles: list[str]
    # The stage whose transaction read them: event_log when the event went in with them, else alias_lookup.
    read_by: str


@dataclass(frozen=True)
class CandidateRead:
    """What reconciliation decides from (reconciliation.read_candidates): each fact whose subject resolved, its
    candidates (the subject's current facts), the valid times chosen (for the trace), the facts skipped."""

    facts: list[PreparedFact]
    candidates: list[list[Candidate]]
    valid_from: list[dict[str, Any]]
    unresolved: list[str]  # subjects of the facts skipped: they did not resolve
    # The stage whose transaction read them: entity_resolution when no LLM call came between, else reconciliation.
    read_by: str


@dataclass
class WriteState:
    """Everything one write knows so far. Each stage reads it and extends it."""

    request: WriteRequest
    config: MemoryConfig
    schema_version: int
    event_id: UUID | None = None
    run_id: UUID | None = None
    run_recorded: bool = False  # the run row was finished in the apply transaction
    # The stored outcome of an earlier run of the same event (a retried write whose first run succeeded).
    earlier_outcome: dict[str, Any] | None = None
    message_embedding: list[float] | None = None
    # Alias lookup's read, when the event's transaction made it (event_log).
    known_read: KnownRead | None = None
    known_entities: dict[str, KnownEntity] = field(default_factory=dict)
    existing_context: str = ""
    # The known facts shown in existing_context, by the short id the informed prompt gives them.
    shown_facts: dict[str, ShownFact] = field(default_factory=dict)
    extraction: Extraction = field(default_factory=Extraction)
    extraction_path: Literal["informed", "blind", "none", "failed"] = "none"
    # The extraction is the second answer, asked without the known memory (extraction._ask_without_memory).
    reasked: bool = False
    candidate_facts: list[CandidateFact] = field(default_factory=list)
    resolved: dict[str, ResolvedEntity] = field(default_factory=dict)
    aliases_to_register: dict[str, set[str]] = field(default_factory=dict)
    name_embeddings: dict[str, list[float]] = field(default_factory=dict)
    # Reconciliation's read, when entity resolution's transaction made it (no LLM call between the two).
    candidate_read: CandidateRead | None = None
    decisions: list[FactDecision] = field(default_factory=list)
    facts_added: list[Fact] = field(default_factory=list)
    facts_updated: list[Fact] = field(default_factory=list)
    facts_superseded: list[Fact] = field(default_factory=list)
    facts_unchanged: list[Fact] = field(default_factory=list)
    facts_deleted: list[Fact] = field(default_factory=list)
    relationships: list[Relationship] = field(default_factory=list)
    usage: TokenUsage = field(default_factory=TokenUsage)
    llm_calls: int = 0
    errors: list[str] = field(default_factory=list)
    adjustments: list[Adjustment] = field(default_factory=list)
    steps: list[TraceStep] = field(default_factory=list)

    @functools.cached_property
    def language(self) -> str | None:
        """The message's language: the caller's, else detected (lexicons.detect_language); None when no lexicon
        knows it, and then only the language-neutral rules run."""
        return self.request.language or detect_language(self.request.message)

    @functools.cached_property
    def lexicon(self) -> Lexicon:
        """The word rules of the message's language (lexicons.NEUTRAL, with no words, when it has none)."""
        return lexicon_for(self.language)

    @property
    def step(self) -> TraceStep:
        """The trace step of the stage running now."""
        return self.steps[-1]

    @property
    def cost(self) -> Cost | None:
        """What the write's LLM calls cost so far, summed from the trace (memory_sdk.pricing priced each call)."""
        return Cost.total(call.cost for step in self.steps for call in step.llm_calls)

    def fail(self, message: str) -> None:
        """Record a failure that the write survives: it lands in result.error and the current step."""
        self.errors.append(message)
        self.step.data.setdefault("errors", []).append(message)
        if self.step.status == "ok":
            self.step.status = "partial"

    def adjust(
        self, rule: AdjustmentRule, item: str, why: str, *, before: str | None = None, after: str | None = None
    ) -> None:
        """Record a change to the model's answer: on the result, and in the current step's trace."""
        adjustment = Adjustment(rule=rule, item=item, before=before, after=after, why=why)
        self.adjustments.append(adjustment)
        self.step.data.setdefault("adjustments", []).append(adjustment.model_dump(exclude_none=True))

    def outcome(self, duration_ms: float = 0.0) -> WriteResult:
        """The WriteResult of what the write did so far (with the full trace)."""
        emotion = self.extraction.emotion
        resolved: dict[int, ResolvedEntity] = {}
        for entity in self.resolved.values():
            resolved.setdefault(id(entity), entity)
        return WriteResult(
            success=not self.errors,
            dry_run=self.request.dry_run,
            event_id=self.event_id,
            facts_added=self.facts_added,
            facts_updated=self.facts_updated,
            facts_superseded=self.facts_superseded,
            facts_unchanged=self.facts_unchanged,
            facts_deleted=self.facts_deleted,
            entities_resolved=list(resolved.values()),
            relationships=self.relationships,
            extraction_path=self.extraction_path,
            adjustments=self.adjustments,
            language=self.language,
            emotion=Emotion(**emotion.model_dump()) if emotion else None,
            tokens_used=self.usage,
            cost=self.cost,
            llm_calls=self.llm_calls,
            duration_ms=duration_ms,
            pipeline=PipelineTrace(steps=self.steps),
            error="; ".join(self.errors) or None,
        )

    def run_record(self, status: str | None = None) -> dict[str, Any]:
        """The pipeline-run row's final values, from what the write did so far (the outcome without its trace,
        which has its own column, is what a retried write with the same message_id returns).

        Its strings are cleaned (no NUL, no lone surrogate): an error message may quote a provider's raw answer,
        and a row PostgreSQL refuses would leave the run 'running' with no trace.
        """
        record = {
            "result": self.outcome().model_dump(mode="json", exclude={"pipeline"}),
            "status": status or ("failed" if self.errors else "succeeded"),
            "extraction_path": self.extraction_path,
            "llm_calls": self.llm_calls,
            "input_tokens": self.usage.input_tokens,
            "output_tokens": self.usage.output_tokens,
            "error": "; ".join(self.errors) or None,
            "trace": PipelineTrace(steps=self.steps).model_dump(mode="json"),
        }
        cleaned: dict[str, Any] = clean_strings(record)
        return cleaned

    def resolve_name(self, name: str) -> ResolvedEntity | None:
        """The entity an extracted name (or one of its aliases) resolved to, if any."""
        return self.resolved.get(normalise_alias(name))
