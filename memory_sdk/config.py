"""MemoryConfig: every tunable of the write pipeline, frozen, with the defaults of the design."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from memory_sdk.errors import ConfigError
from memory_sdk.pricing import ModelPrice
from memory_sdk.store.subject_codes import DEFAULT_CACHE_MB

__all__ = ["DEFAULT_SINGLE_VALUED_ATTRIBUTES", "MAX_EMBEDDING_DIM", "MemoryConfig"]

logger = logging.getLogger("memory_sdk")

# The longest vectors the schema can index: pgvector's HNSW index over `vector` (the entities' names) takes at most
# 2,000 dimensions; past it the first migration failed halfway. A model of more (text-embedding-3-large: 3,072) can
# be asked for fewer.
MAX_EMBEDDING_DIM = 2000

# Attributes that hold one value at a time for a subject: a second open fact with the same attribute is a
# contradiction, so the database keeps at most one open fact per (agent, subject, attribute) for these.
DEFAULT_SINGLE_VALUED_ATTRIBUTES: frozenset[str] = frozenset(
    {
        "lives_in",
        "employer",
        "job_title",
        "age",
        "birth_date",
        "relationship_status",
        "spouse",
        "passport_deadline",
        "nationality",
        "current_project",
    }
)


class MemoryConfig(BaseModel):
    """Tunables of the write pipeline. Frozen: derive a new one with `config.with_overrides({...})`.

    >>> MemoryConfig(fuzzy_threshold=0.9).fuzzy_threshold
    0.9
    """

    model_config = ConfigDict(frozen=True, strict=True, extra="forbid")

    # Extraction (seeds/002: "Configuração" of stage 1).
    extraction_timeout_sec: float = Field(default=30.0, gt=0)
    enable_informed_extraction: bool = True
    informed_extraction_topk: int = Field(default=10, ge=0)
    informed_extraction_context_budget_tokens: int = Field(default=800, ge=0)
    recent_messages_limit: int = Field(default=5, ge=0)
    # Entity resolution (seeds/002: stage 2).
    fuzzy_threshold: float = Field(default=0.85, ge=0, le=1)
    enable_llm_resolution: bool = True
    # Retrieval filter on confidence (seeds/002: "padrão 0.55").
    min_confidence: float = Field(default=0.55, ge=0, le=1)
    # Facts whose embedding cosine is above this are near-duplicates within one message (seeds/002: "> 0.85").
    semantic_dedup_threshold: float = Field(default=0.85, ge=0, le=1)
    # Reconciliation: below this similarity to every current fact, a fact is ADDed without an LLM call.
    reconciliation_fast_path_below: float = Field(default=0.50, ge=0, le=1)
    # Guard (pipeline/guards.py): an UPDATE, DELETE or NOOP may only touch a fact at least this similar, unless both
    # carry the same attribute. seeds/002 puts UPDATE at similarity 0.50-0.85+; the wrong UPDATEs measured with a
    # 1.5B model (issue 13) targeted facts at 0.27-0.44.
    reconciliation_target_min_similarity: float = Field(default=0.50, ge=0, le=1)
    # Guard: an UPDATE, DELETE or NOOP of a fact with no attribute shared with its target (decided on the texts
    # alone) needs at least this similarity, and a fact whose similar facts are all below it asks no reconciliation
    # call. None: the embedder's own `closure_min_similarity` (LocalEmbedder declares one, see
    # memory_sdk/llm/local.py), else no floor beyond the one above.
    reconciliation_closure_min_similarity: float | None = Field(default=None, ge=0, le=1)
    # Guard: a fact that shares a single-valued attribute whose value the SDK does not check (not lives_in or
    # employer) with its open value needs at least this similarity to it to end or replace it; below, the fact is
    # stored without the attribute. None: the embedder's own `attribute_min_similarity` (LocalEmbedder declares
    # one), else no floor.
    reconciliation_attribute_min_similarity: float | None = Field(default=None, ge=0, le=1)
    single_valued_attributes: frozenset[str] = DEFAULT_SINGLE_VALUED_ATTRIBUTES
    # Storage: vector columns are created with this size; the embedder must produce it. At most MAX_EMBEDDING_DIM.
    embedding_dim: int = Field(default=1536, gt=0)
    # Storage (docs/decisions.md, "Large subjects' codes cached in the client"): memory for the binary codes of
    # large subjects (500+ current facts), from which the candidate read picks its Hamming shortlist in the client
    # instead of scanning every code on the server; about 12.5 MB per 60,000-fact subject at 1536 dimensions,
    # least recently used subjects evicted past it. 0 turns the cache off (every read ranks on the server).
    subject_code_cache_mb: float = Field(default=DEFAULT_CACHE_MB, ge=0)
    # Guard: a message longer than this is refused with InvalidInputError rather than silently cut.
    max_message_chars: int = Field(default=32_000, gt=0)
    # Recovery (docs/recovery.md): a running write renews its run's heartbeat this often; a run whose heartbeat is
    # older than run_stale_after_sec belongs to a dead process, and reprocess() or a retried write (same
    # message_id) may take its event over. The gap leaves room for an event loop stalled by a long CPU step.
    run_heartbeat_sec: float = Field(default=20.0, gt=0)
    run_stale_after_sec: float = Field(default=120.0, gt=0)
    # Cost (docs/cost.md): prices per model name, USD per million tokens, looked up before the shipped table
    # (memory_sdk.pricing.DEFAULT_PRICES). A model in neither has no price: its calls cost None.
    prices: Mapping[str, ModelPrice] = Field(default_factory=dict)
    # Observability (docs/observability.md): put the message text on the write's OpenTelemetry span. Off by
    # default: a message is the user's words, and spans go to whatever backend the application exports to.
    trace_message_text: bool = False
    # Storage (docs/production.md): open() applies pending migrations. False leaves them to `memory-sdk migrate`
    # (run once per release, before the app servers start): open() then only checks the schema is at head, and
    # the app's database role needs no right to create or alter tables.
    migrate_on_open: bool = True

    @field_validator("embedding_dim")
    @classmethod
    def _indexable(cls, value: int) -> int:
        if value > MAX_EMBEDDING_DIM:
            raise ValueError(
                f"at most {MAX_EMBEDDING_DIM} dimensions, the most pgvector's HNSW index takes; ask the model for "
                "fewer (OpenAIEmbedder(dimensions=1536) for text-embedding-3-large)"
            )
        return value

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise ConfigError(f"MemoryConfig: {_first_error(exc)}") from exc

    def with_overrides(self, overrides: Mapping[str, Any] | None) -> MemoryConfig:
        """Return a copy with `overrides` applied: unknown keys warn and are ignored, a wrong type raises.

        Storage-shaping keys (`embedding_dim`) cannot change per call and are refused like unknown keys.
        """
        if not overrides:
            return self
        if not isinstance(overrides, Mapping):
            raise ConfigError(
                f"config_overrides must be a mapping of field names to values, got {type(overrides).__name__}"
            )
        known: dict[str, Any] = {}
        for key, value in overrides.items():
            if key not in type(self).model_fields or key in _PER_CLIENT_ONLY:
                warnings.warn(f"config_overrides: unknown or per-client key {key!r} ignored", stacklevel=3)
                logger.warning("config_overrides: ignored key %r", key)
                continue
            known[key] = value
        if not known:
            return self
        try:
            return type(self)(**{**self.model_dump(), **known})
        except ConfigError as exc:
            raise ConfigError(f"config_overrides: {str(exc).removeprefix('MemoryConfig: ')}") from exc


_PER_CLIENT_ONLY = frozenset({"embedding_dim", "subject_code_cache_mb", "migrate_on_open"})


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(part) for part in err["loc"])
    return f"{where}: {err['msg']} (got {err.get('input')!r})"
