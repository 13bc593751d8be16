"""Value objects the SDK returns: facts, entities, relationships, events, usage, trace, WriteResult,
ConsolidationResult, and search's SearchHit and Context."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

__all__ = [
    "ConsolidationResult",
    "Context",
    "Emotion",
    "Entity",
    "Event",
    "Fact",
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
    """Tokens spent by LLM calls; usages add up with `+`."""

    model_config = _FROZEN

    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
        )

    def __repr__(self) -> str:
        return (
            f"TokenUsage(input_tokens={self.input_tokens}, output_tokens={self.output_tokens}, "
            f"total_tokens={self.total_tokens})"
        )


class Fact(BaseModel):
    """One version of a fact. `id` is None for facts a dry run would write."""

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
    status: Literal["ok", "failed"]
    duration_ms: float
    usage: TokenUsage = TokenUsage()
    # True when the provider reported no usage for a failed call (a timeout): `usage` is then the SDK's estimate,
    # the prompt's size and the purpose's output cap.
    usage_estimated: bool = False
    error: str | None = None


class TraceStep(BaseModel):
    """One pipeline stage: what it did, how long it took, which LLM calls it made."""

    name: str
    status: Literal["ok", "partial", "failed", "skipped"] = "ok"
    duration_ms: float = 0.0
    data: dict[str, Any] = Field(default_factory=dict)
    llm_calls: list[LLMCall] = Field(default_factory=list)
    error: str | None = None


class PipelineTrace(BaseModel):
    """Every stage of one write, in order."""

    steps: list[TraceStep] = Field(default_factory=list)

    def step(self, name: str) -> TraceStep:
        """The step called `name` (KeyError if the stage did not run)."""
        for step in self.steps:
            if step.name == name:
                return step
        raise KeyError(name)


class WriteResult(BaseModel):
    """What one write() changed, what it cost, and (with verbose=True) how it went.

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
    emotion: Emotion | None = None
    tokens_used: TokenUsage = TokenUsage()
    llm_calls: int = 0
    duration_ms: float = 0.0
    pipeline: PipelineTrace | None = None
    error: str | None = None


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
