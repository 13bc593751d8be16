"""Response models of the LLM contract (DESIGN.md, "The LLM contract"): public, lenient on extras.

Extra keys are ignored and missing optional keys default, so a custom provider or a small model that adds
chatter around the shape still fits; a missing required key (a fact without text, an extraction without its
entities/facts/relations lists) is an InvalidResponse.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "IMPORTANCE_BY_CATEGORY",
    "EntityResolutionResponse",
    "EntityScanResponse",
    "ExtractedEmotion",
    "ExtractedEntity",
    "ExtractedFact",
    "ExtractedRelation",
    "FactExtractionResponse",
    "InformedExtractionResponse",
    "ReconciliationResponse",
    "RelationExtractionResponse",
]

# seeds/002, "Importancia Semantica": the category the LLM picks maps to the fact's importance.
IMPORTANCE_BY_CATEGORY: dict[str, float] = {
    "biographical_milestone": 0.95,
    "relationship_change": 0.90,
    "stable_preference": 0.75,
    "specific_event": 0.65,
    "routine_activity": 0.50,
    "conversational": 0.30,
}
DEFAULT_IMPORTANCE_CATEGORY = "conversational"
# seeds/002, "Cada fato inclui um nível de confiança": explicit statement.
DEFAULT_CONFIDENCE = 0.95

_LENIENT = ConfigDict(extra="ignore")


# Bounds advertised in the JSON schema sent to the model, not enforced when parsing: servers that constrain decoding
# with the schema (llama.cpp, vLLM) then cannot loop forever. A 1.5B model at temperature 0 repeated one alias
# until max_tokens in our benchmark run; these caps end such a loop early with valid JSON.
def _at_most(items: int) -> Any:
    return {"maxItems": items}


def _short(chars: int) -> Any:
    return {"maxLength": chars}


class ExtractedEntity(BaseModel):
    model_config = _LENIENT

    name: str = Field(min_length=1, json_schema_extra=_short(80))
    type: str = Field(default="concept", json_schema_extra=_short(30))
    aliases: list[str] = Field(default_factory=list, json_schema_extra=_at_most(4))

    @field_validator("aliases", mode="before")
    @classmethod
    def _aliases_list(cls, value: Any) -> Any:
        if value is None:
            return []
        return [value] if isinstance(value, str) else value


class ExtractedFact(BaseModel):
    model_config = _LENIENT

    subject: str = Field(min_length=1, json_schema_extra=_short(80))
    text: str = Field(min_length=1, json_schema_extra=_short(300))
    action: Literal["NEW", "UPDATE"] = "NEW"
    importance_category: str = DEFAULT_IMPORTANCE_CATEGORY
    confidence: float = DEFAULT_CONFIDENCE
    attribute: str | None = None
    valid_from: date | datetime | None = None

    @field_validator("action", mode="before")
    @classmethod
    def _action_upper(cls, value: Any) -> Any:
        return value.strip().upper() if isinstance(value, str) else value

    @field_validator("importance_category", mode="before")
    @classmethod
    def _known_category(cls, value: Any) -> Any:
        if value is None:
            return DEFAULT_IMPORTANCE_CATEGORY
        if isinstance(value, str):
            folded = value.strip().lower()
            return folded if folded in IMPORTANCE_BY_CATEGORY else DEFAULT_IMPORTANCE_CATEGORY
        return value

    @field_validator("confidence", mode="before")
    @classmethod
    def _clamped(cls, value: Any) -> Any:
        if value is None:
            return DEFAULT_CONFIDENCE
        if isinstance(value, int | float):
            return min(1.0, max(0.0, float(value)))
        return value

    @field_validator("attribute", mode="before")
    @classmethod
    def _blank_attribute(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("valid_from", mode="before")
    @classmethod
    def _blank_date(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip().lower() in ("", "null", "none", "unknown"):
            return None
        return value


class ExtractedRelation(BaseModel):
    model_config = _LENIENT

    source: str = Field(min_length=1, json_schema_extra=_short(80))
    target: str = Field(min_length=1, json_schema_extra=_short(80))
    type: str = Field(min_length=1, json_schema_extra=_short(40))


class ExtractedEmotion(BaseModel):
    model_config = _LENIENT

    label: str = "neutral"
    intensity: float = Field(default=0.0, ge=0, le=1)
    energy: float = Field(default=0.0, ge=0, le=1)


class InformedExtractionResponse(BaseModel):
    """entities, facts and relations are required (empty lists are fine): an object with none of them is an
    off-shape answer, which must fail over to the blind path, not pass as "nothing to remember"."""

    model_config = _LENIENT

    entities: list[ExtractedEntity] = Field(json_schema_extra=_at_most(20))
    facts: list[ExtractedFact] = Field(json_schema_extra=_at_most(30))
    relations: list[ExtractedRelation] = Field(json_schema_extra=_at_most(20))
    updated_profiles: dict[str, str] = Field(default_factory=dict, json_schema_extra={"maxProperties": 10})
    emotion: ExtractedEmotion | None = None

    @field_validator("updated_profiles", mode="before")
    @classmethod
    def _profiles_dict(cls, value: Any) -> Any:
        return {} if value is None else value


class EntityScanResponse(BaseModel):
    model_config = _LENIENT

    entities: list[ExtractedEntity] = Field(json_schema_extra=_at_most(20))


class FactExtractionResponse(BaseModel):
    model_config = _LENIENT

    facts: list[ExtractedFact] = Field(json_schema_extra=_at_most(30))


class RelationExtractionResponse(BaseModel):
    model_config = _LENIENT

    relations: list[ExtractedRelation] = Field(json_schema_extra=_at_most(20))


class EntityResolutionResponse(BaseModel):
    model_config = _LENIENT

    reasoning: str | None = None
    match: str | int | None = None


class ReconciliationResponse(BaseModel):
    model_config = _LENIENT

    reasoning: str | None = None
    action: Literal["ADD", "UPDATE", "NOOP", "DELETE"]
    target: str | int | None = None

    @field_validator("action", mode="before")
    @classmethod
    def _action_upper(cls, value: Any) -> Any:
        return value.strip().upper() if isinstance(value, str) else value
