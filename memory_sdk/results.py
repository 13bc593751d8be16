"""Value objects the SDK returns: facts, entities, relationships, events, usage, trace, WriteResult,
ConsolidationResult, ImportSummary, and search's SearchHit and Context."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, computed_field

__all__ = [
    "ConsolidationResult",
    "Context",
    "Cost",
    "Emotion",
    "Entity",
    "Event",
    "Fact",
    "FactCorrection",
    "ImportFailure",
    "ImportProgress",
    "ImportSummary",
    "LLMCall",
    "MergedFact",
    "PipelineTrace",
    "Relationship",
    "ResolvedEntity",
    "SearchHit",
    "SearchSignal",
    "TokenUsage",
    "TraceStep",
    "WriteResult",
]

_FROZEN = ConfigDict(frozen=True)


def _aware(moment: datetime) -> datetime:
    """Every moment the SDK returns is timezone-aware. The driver reads PostgreSQL's -infinity / infinity as the
    naive datetime.min / datetime.max (the input guard keeps new ones out; older rows may hold them)."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


_AwareMoment = Annotated[datetime, AfterValidator(_aware)]


class TokenUsage(BaseModel):
    """Tokens spent by LLM calls; usages add up with `+`.

    `cached_input_tokens` is the part of `input_tokens` the provider served from its prompt cache (OpenAI's
    `prompt_tokens_details.cached_tokens`), billed at the cached-input price where the model has one.
    """

    model_config = _FROZEN

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cached_input_tokens=self.cached_input_tokens + other.cached_input_tokens,
        )

    def __repr__(self) -> str:
        cached = f", cached_input_tokens={self.cached_input_tokens}" if self.cached_input_tokens else ""
        return (
            f"TokenUsage(input_tokens={self.input_tokens}, output_tokens={self.output_tokens}{cached}, "
            f"total_tokens={self.total_tokens})"
        )


class Cost(BaseModel):
    """What LLM calls cost in money (memory_sdk.pricing has the prices); costs add up with `+`.

    `estimated` is True when some of the tokens priced were the SDK's estimate rather than the provider's count
    (a call that timed out unreported, a server that reports no usage).
    """

    model_config = _FROZEN

    amount: Decimal
    currency: Literal["USD"] = "USD"
    estimated: bool = False

    def __add__(self, other: Cost) -> Cost:
        return Cost(amount=self.amount + other.amount, estimated=self.estimated or other.estimated)

    @staticmethod
    def total(costs: Iterable[Cost | None]) -> Cost | None:
        """The sum of `costs`: None if any is None (a partial sum would understate the bill), zero for none."""
        summed = Cost(amount=Decimal(0))
        for cost in costs:
            if cost is None:
                return None
            summed = summed + cost
        return summed


def _costs_by_purpose(calls: Iterable[LLMCall]) -> dict[str, Cost | None]:
    grouped: dict[str, list[Cost | None]] = {}
    for call in calls:
        grouped.setdefault(call.purpose, []).append(call.cost)
    return {purpose: Cost.total(costs) for purpose, costs in grouped.items()}


class Fact(BaseModel):
    """One version of a fact. `id` is None for facts a dry run would write.

    `source_context` says where it came from: "extracted" (the model's fact), "chat_line" (the model copied a chat
    line in the speaker's own voice: kept as said, it ends no other fact), "inferred_from_relation" (a mirror fact
    the SDK built for a relation no fact supports), "user_correction" or "user_retraction" (the user's calls).
    """

    model_config = _FROZEN

    id: UUID | None = None
    agent_id: str
    entity_key: str
    text: str
    attribute: str | None = None
    confidence: float
    importance: float
    importance_category: str
    speaker: str | None = None
    source_event_id: UUID | None = None
    source_context: str = "extracted"
    valid_from: _AwareMoment
    valid_to: _AwareMoment | None = None
    recorded_at: _AwareMoment | None = None
    invalidated_at: _AwareMoment | None = None
    supersedes_fact_id: UUID | None = None
    last_confirmed_at: _AwareMoment | None = None
    prompt_version: str | None = None
    schema_version: int | None = None
    # Set when consolidation closed this fact as a near-duplicate of another current fact: the one it became.
    merged_into_fact_id: UUID | None = None


class Entity(BaseModel):
    """A person, place, organisation or thing the agent's memory knows."""

    model_config = _FROZEN

    key: str
    name: str
    type: str
    aliases: tuple[str, ...] = ()
    profile_text: str | None = None


ResolutionPhase = Literal["speaker", "participant", "alias", "exact", "prefix", "fuzzy", "llm", "new"]


class ResolvedEntity(BaseModel):
    """How one extracted name was resolved to an entity key during a write."""

    model_config = _FROZEN

    name: str
    key: str
    display_name: str
    type: str
    phase: ResolutionPhase
    score: float | None = None
    created: bool = False


class Relationship(BaseModel):
    """A directed, evidence-linked edge between two entities, with its validity."""

    model_config = _FROZEN

    id: UUID | None = None
    agent_id: str
    source_key: str
    target_key: str
    rel_type: str
    strength: float
    evidence_fact_id: UUID | None = None
    valid_from: _AwareMoment | None = None
    valid_to: _AwareMoment | None = None
    invalidated_at: _AwareMoment | None = None


class Event(BaseModel):
    """A message as it was received: immutable."""

    model_config = _FROZEN

    id: UUID
    agent_id: str
    speaker: str
    content: str
    occurred_at: _AwareMoment
    recorded_at: _AwareMoment
    message_id: str | None = None  # the caller's id, when the write gave one


class Emotion(BaseModel):
    """The emotion of a message, read in the extraction call."""

    model_config = _FROZEN

    label: str
    intensity: float = Field(ge=0, le=1)
    energy: float = Field(ge=0, le=1)


class LLMCall(BaseModel):
    """One LLM call made during a write, as the trace shows it."""

    purpose: str
    # "truncated": the answer was cut at the output cap and only its complete items were kept (`items_kept`;
    # `error` says what the cut lost).
    status: Literal["ok", "truncated", "failed"]
    duration_ms: float
    usage: TokenUsage = TokenUsage()
    # True when the provider reported no usage for a failed call (a timeout): `usage` is then the SDK's estimate,
    # the prompt's size and the purpose's output cap.
    usage_estimated: bool = False
    error: str | None = None
    items_kept: int | None = None
    # The model the provider named (its `model` attribute), and what the call cost at that model's price: None
    # when the model has no price (memory_sdk.pricing), estimated when `usage_estimated` is.
    model: str | None = None
    cost: Cost | None = None


class TraceStep(BaseModel):
    """One pipeline stage: what it did, how long it took, which LLM calls it made."""

    name: str
    status: Literal["ok", "partial", "failed", "skipped"] = "ok"
    duration_ms: float = 0.0
    data: dict[str, Any] = Field(default_factory=dict)
    llm_calls: list[LLMCall] = Field(default_factory=list)
    error: str | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def cost(self) -> Cost | None:
        """What this stage's LLM calls cost (zero without a call; None if one has no price)."""
        return Cost.total(call.cost for call in self.llm_calls)


class PipelineTrace(BaseModel):
    """Every stage of one write, in order."""

    steps: list[TraceStep] = Field(default_factory=list)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def cost_by_purpose(self) -> dict[str, Cost | None]:
        """What the write's LLM calls cost per purpose (informed_extraction, reconciliation, ...)."""
        return _costs_by_purpose(call for step in self.steps for call in step.llm_calls)

    def step(self, name: str) -> TraceStep:
        """The step called `name` (KeyError if the stage did not run)."""
        for step in self.steps:
            if step.name == name:
                return step
        raise KeyError(name)


AdjustmentRule = Literal[
    "not_grounded",
    "copied",
    "question",
    "greeting",
    "wrong_speaker",
    "entity_not_named",
    "alias_not_said",
    "alias_added",
    "possession",
    "attribute_refused",
    "decision_safer",
    "single_valued_update",
    "date",
    "duplicate",
    "reasked",
    "instruction",
    "chat_line",
]


class Adjustment(BaseModel):
    """One change the SDK made to the model's answer, and why: every change is one (docs/write-pipeline.md,
    "The guard contract"). A correct answer gets none.

        >>> [a.rule for a in result.adjustments]
        ['not_grounded']

    `rule` names the guard; `item` is the fact text, entity or alias it touched; `before` and `after` what the
    model said and what the SDK kept (`after` is None for a drop); `why` the evidence, in words.
    """

    model_config = _FROZEN

    rule: AdjustmentRule
    item: str
    before: str | None = None
    after: str | None = None
    why: str


class WriteResult(BaseModel):
    """What one write() changed, what it cost (tokens and `cost` in money), and (with verbose=True) how it went.

    `duplicate` is True when a write with the same `message_id` had already been stored: the fact, entity and
    relationship lists are that first write's outcome, nothing was stored again, and `tokens_used`, `llm_calls`
    and `duration_ms` are this call's own (no LLM call).
    """

    success: bool
    dry_run: bool = False
    duplicate: bool = False
    event_id: UUID | None = None
    facts_added: list[Fact] = Field(default_factory=list)
    facts_updated: list[Fact] = Field(default_factory=list)
    facts_superseded: list[Fact] = Field(default_factory=list)
    facts_unchanged: list[Fact] = Field(default_factory=list)
    facts_deleted: list[Fact] = Field(default_factory=list)
    entities_resolved: list[ResolvedEntity] = Field(default_factory=list)
    relationships: list[Relationship] = Field(default_factory=list)
    extraction_path: Literal["informed", "blind", "none", "failed"] = "none"
    # Every change the SDK made to the model's answer (a dropped fact, a safer decision, a date read from the words).
    adjustments: list[Adjustment] = Field(default_factory=list)
    language: str | None = None  # the message's language, given or detected; None: only language-neutral rules ran
    emotion: Emotion | None = None
    tokens_used: TokenUsage = TokenUsage()
    # What the write's LLM calls cost (zero without a call); None when a model called has no price.
    cost: Cost | None = None
    llm_calls: int = 0
    duration_ms: float = 0.0
    pipeline: PipelineTrace | None = None
    error: str | None = None


class FactCorrection(BaseModel):
    """What delete_fact() or correct_fact() changed: a user's retraction or correction of one fact.

    `closed` are the versions it ended (the fact first; a correction of a single-valued attribute may end others of
    its timeline), `added` the version it stored: the correction, now current, or for a deletion the record of the
    retraction (history from the start, source_context "user_retraction", never current). `relationships_closed`
    are the edges the closed versions were evidence for (the invalidation cascade).
    """

    model_config = _FROZEN

    action: Literal["deleted", "corrected"]
    fact_id: UUID
    closed: list[Fact] = Field(default_factory=list)
    added: Fact | None = None
    relationships_closed: list[UUID] = Field(default_factory=list)
    reason: str | None = None


class MergedFact(BaseModel):
    """A near-duplicate current fact that consolidation closed into another (its survivor)."""

    model_config = _FROZEN

    entity_key: str
    fact_id: UUID
    text: str
    survivor_id: UUID
    survivor_text: str
    similarity: float


class ConsolidationResult(BaseModel):
    """What consolidate() did: the profiles it rebuilt, the facts it merged, what it cost, what failed.

    `failures` maps an entity key to why its consolidation failed; the other entities were consolidated all the
    same. `steps` holds one trace step per entity looked at (merges, facts sent, the LLM call, errors).
    """

    success: bool
    entities_consolidated: list[str] = Field(default_factory=list)
    facts_merged: list[MergedFact] = Field(default_factory=list)
    failures: dict[str, str] = Field(default_factory=dict)
    tokens_used: TokenUsage = TokenUsage()
    llm_calls: int = 0
    duration_ms: float = 0.0
    steps: list[TraceStep] = Field(default_factory=list)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def cost(self) -> Cost | None:
        """What the consolidation's LLM calls cost (zero without a call; None if a model called has no price)."""
        return Cost.total(call.cost for step in self.steps for call in step.llm_calls)


class ImportFailure(BaseModel):
    """One message a bulk import could not write: where it was in the input, whose it was, and why.

    `event_id` is set when the message was logged but its write failed (reprocess, or the same import run again,
    finishes it); otherwise nothing of it was stored.
    """

    model_config = _FROZEN

    index: int
    agent_id: str | None = None
    message_id: str | None = None
    event_id: UUID | None = None
    error_type: str
    error: str


class ImportProgress(BaseModel):
    """What a bulk import's progress callback hears after each message."""

    model_config = _FROZEN

    done: int
    total: int
    status: Literal["written", "duplicate", "failed"]
    agent_id: str | None = None
    message_id: str | None = None


class ImportSummary(BaseModel):
    """What write_many() / import_messages() did: messages written now, skipped as already written (`duplicates`,
    an earlier import's), failed (with why), the facts the new writes changed, and what they cost."""

    model_config = _FROZEN

    messages: int
    written: int
    duplicates: int
    failed: int
    agents: int
    facts_added: int = 0
    facts_updated: int = 0
    facts_unchanged: int = 0
    facts_deleted: int = 0
    tokens_used: TokenUsage = TokenUsage()
    llm_calls: int = 0
    cost: Cost | None = None  # None when a model called has no price (memory_sdk/pricing.py)
    failures: list[ImportFailure] = Field(default_factory=list)
    duration_ms: float = 0.0

    @property
    def success(self) -> bool:
        """Every message is in memory (written now or before)."""
        return not self.failures


SearchSignal = Literal["vector", "keyword", "graph"]


class SearchHit(BaseModel):
    """One fact search() found: the fact, its entity, its fused score and how each signal ranked it.

    `signals` maps each signal that found the fact (vector: embedding similarity, keyword: full text, graph: a
    fact of an entity the query names or of its neighbours) to the fact's 1-based rank in it; `score` is the
    reciprocal rank fusion of those ranks (docs/search.md), comparable within one search only.
    """

    model_config = _FROZEN

    fact: Fact
    entity_key: str
    entity_name: str
    score: float
    signals: dict[SearchSignal, int]


class Context(BaseModel):
    """What context() found for a message, fitted to a token budget: `text` is ready to put into a prompt.

    `entities` are the entities the message names whose profile is in the text; `hits` the facts in the text, in
    search()'s order; `tokens` the SDK's estimate of `text` (llm/tokens.py), never above `budget_tokens`.
    """

    model_config = _FROZEN

    text: str
    entities: list[Entity] = Field(default_factory=list)
    hits: list[SearchHit] = Field(default_factory=list)
    tokens: int = 0
    budget_tokens: int
