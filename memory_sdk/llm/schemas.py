"""Response models of the LLM contract (DESIGN.md, "The LLM contract"): public, lenient on extras.

Extra keys are ignored and missing optional keys default, so a custom provider or a small model that adds
chatter around the shape still fits. Strings are stripped. An answer without its required lists (an extraction
without entities/facts/relations) is an InvalidResponse; a malformed item inside a list (a fact without text, a
blank name, a date that is no date, a NaN confidence) is dropped alone and described in `LLMAnswer.dropped`, and so
are the items past a list's cap.
"""

from __future__ import annotations

import math
from datetime import UTC, date, datetime
from typing import Annotated, Any, ClassVar, Literal, Self, get_args, get_origin

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo

__all__ = [
    "IMPORTANCE_BY_CATEGORY",
    "MAX_ALIASES",
    "MAX_EVIDENCE_CHARS",
    "MAX_PROFILE_CHARS",
    "BatchVerdict",
    "EntityResolutionResponse",
    "EntityScanResponse",
    "ExtractedEmotion",
    "ExtractedEntity",
    "ExtractedFact",
    "ExtractedRelation",
    "FactExtractionResponse",
    "InformedExtractionResponse",
    "LLMAnswer",
    "ProfileConsolidationResponse",
    "ReconciliationBatchResponse",
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

# Strings are stripped, so a blank name fails its min_length and its item is dropped instead of breaking
# post-extraction.
_LENIENT = ConfigDict(extra="ignore", str_strip_whitespace=True)

# An entity keeps at most this many aliases (more are ignored, not reported: they are hints, and aliases the
# message does not use are dropped anyway).
MAX_ALIASES = 4
# A fact's evidence is a short span of the message, not the message: longer evidence is cut to this many characters.
MAX_EVIDENCE_CHARS = 200
# seeds/002 puts a profile at ~100-300 tokens; 1,500 characters is about 300-400 tokens. A longer answer is cut
# there (the schema advertises the cap), so one chatty model cannot fill every later extraction prompt.
MAX_PROFILE_CHARS = 1500
# How many reasons a "dropped as malformed" message quotes; the count covers the rest.
_REASONS_QUOTED = 3
# Answers that mean "none" for an id the model picks from a list.
_NULL_WORDS = frozenset({"", "none", "null", "nil", "n/a"})


# List caps, advertised in the JSON schema sent to the model and enforced when parsing: servers that constrain
# decoding with the schema (llama.cpp, vLLM) then cannot loop forever, and an answer from one that does not (a
# 1.5B model at temperature 0 repeated one alias until max_tokens in our benchmark run) cannot make a write store
# or compare thousands of items. Items past the cap are dropped and reported (LLMAnswer.dropped).
def _at_most(items: int) -> Any:
    return {"maxItems": items}


def _short(chars: int) -> Any:
    return {"maxLength": chars}


def _null_word(value: Any) -> Any:
    """ "none", "null", "" for a picked id mean no pick, as JSON null does; a boolean is no id (JSON `true` would
    read as id 1 and pick the first fact shown)."""
    if isinstance(value, bool):
        raise ValueError("a boolean is not an id")
    return None if isinstance(value, str) and value.strip().lower() in _NULL_WORDS else value


class ExtractedEntity(BaseModel):
    model_config = _LENIENT

    name: str = Field(min_length=1, max_length=80, json_schema_extra=_short(80))
    type: str = Field(default="concept", max_length=30, json_schema_extra=_short(30))
    aliases: list[str] = Field(default_factory=list, json_schema_extra=_at_most(4))

    @field_validator("aliases", mode="before")
    @classmethod
    def _aliases_list(cls, value: Any) -> Any:
        if value is None:
            return []
        if isinstance(value, str):
            return [value]
        return value[:MAX_ALIASES] if isinstance(value, list) else value


class ExtractedFact(BaseModel):
    model_config = _LENIENT

    subject: str = Field(min_length=1, max_length=80, json_schema_extra=_short(80))
    text: str = Field(min_length=1, max_length=300, json_schema_extra=_short(300))
    # The informed extraction's decision for the fact: ADD, or UPDATE / NOOP / DELETE of the known fact whose short
    # id ("1", "2", ...) is `target` (pipeline/reconciliation.py decides from it through the guards). "NEW" is the
    # vocabulary of older prompts and of the blind path: no decision, reconciliation decides.
    action: Literal["NEW", "ADD", "UPDATE", "NOOP", "DELETE"] = "NEW"
    target: Annotated[str | int | None, BeforeValidator(_null_word)] = None
    importance_category: str = DEFAULT_IMPORTANCE_CATEGORY
    confidence: float = DEFAULT_CONFIDENCE
    attribute: str | None = None
    valid_from: date | datetime | None = None
    # The span of the current message the fact comes from: the SDK keeps the fact only when it finds the span in
    # the message (pipeline/guards.py, grounding). Optional, so answers without it still fit.
    evidence: str | None = Field(default=None, json_schema_extra=_short(MAX_EVIDENCE_CHARS))

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
            # A bare NaN in the JSON would clamp to 0.0 and hide its fact from every read: the fact is malformed.
            if not math.isfinite(value):
                raise ValueError(f"confidence must be a finite number, got {value}")
            return min(1.0, max(0.0, float(value)))
        return value

    @field_validator("attribute", mode="before")
    @classmethod
    def _blank_attribute(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("evidence", mode="before")
    @classmethod
    def _short_evidence(cls, value: Any) -> Any:
        """A blank span is none and a long one is cut (a model that copies the whole message still placed it); a
        span that is not a string is ignored, not a reason to lose the fact: its words then ground it."""
        return (value.strip()[:MAX_EVIDENCE_CHARS] or None) if isinstance(value, str) else None

    @field_validator("valid_from", mode="before")
    @classmethod
    def _blank_date(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip().lower() in ("", "null", "none", "unknown"):
            return None
        return value

    @field_validator("valid_from")
    @classmethod
    def _representable_in_utc(cls, value: date | datetime | None) -> date | datetime | None:
        """'9999-12-31T23:00:00-14:00' is a valid datetime that overflows when stored as UTC."""
        if isinstance(value, datetime) and value.tzinfo is not None:
            try:
                value.astimezone(UTC)
            except OverflowError as exc:
                raise ValueError(f"{value.isoformat()} is out of range in UTC") from exc
        return value


class ExtractedRelation(BaseModel):
    model_config = _LENIENT

    source: str = Field(min_length=1, max_length=80, json_schema_extra=_short(80))
    target: str = Field(min_length=1, max_length=80, json_schema_extra=_short(80))
    type: str = Field(min_length=1, max_length=40, json_schema_extra=_short(40))


class ExtractedEmotion(BaseModel):
    model_config = _LENIENT

    label: str = "neutral"
    intensity: float = Field(default=0.0, ge=0, le=1)
    energy: float = Field(default=0.0, ge=0, le=1)


class LLMAnswer(BaseModel):
    """An answer whose items are read one at a time, so that one malformed item does not cost the others.

    Every list of models, dict of strings and optional model field is an item field: an item that does not
    validate, and every item past the field's advertised cap (`maxItems` / `maxProperties`), is left out, and
    `dropped` says how many and why. Whatever else is wrong (not an object, a required list missing or not a
    list) still fails the whole answer.
    """

    model_config = _LENIENT
    # Required lists an answer cut at the output cap may not have reached: they then count as empty and the call
    # says so (llm/parsing.py, salvage_response). Only lists that come last and that the write can do without.
    unreached_when_cut: ClassVar[tuple[str, ...]] = ()
    # Lists whose items may be read by position: a cut answer keeps their exact repeats (llm/parsing.py).
    positional_lists: ClassVar[tuple[str, ...]] = ()
    _dropped: list[str] = PrivateAttr(default_factory=list)

    @property
    def dropped(self) -> list[str]:
        """One line per item field that lost items: how many, and why."""
        return self._dropped

    @model_validator(mode="wrap")
    @classmethod
    def _items_one_by_one(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        if not isinstance(data, dict):
            return handler(data)
        dropped: list[str] = []
        kept = {
            name: _keep_valid_items(name, cls.model_fields.get(name), value, dropped) for name, value in data.items()
        }
        answer = handler(kept)
        answer._dropped = dropped
        return answer


def _keep_valid_items(name: str, field: FieldInfo | None, value: Any, dropped: list[str]) -> Any:
    """`value` of item field `name` without its malformed or over-cap items; any other value unchanged."""
    if field is None:
        return value
    origin, args = get_origin(field.annotation), get_args(field.annotation)
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    if origin is list and isinstance(value, list) and args and _is_model(args[0]):
        cap = extra.get("maxItems")
        return _valid_list(name, args[0], value, cap if isinstance(cap, int) else None, dropped)
    if origin is dict and isinstance(value, dict):
        cap = extra.get("maxProperties")
        return _valid_profiles(name, value, cap if isinstance(cap, int) else None, dropped)
    models = [arg for arg in args if _is_model(arg)]
    if len(models) == 1 and type(None) in args and value is not None:
        try:
            return models[0].model_validate(value)
        except ValidationError as exc:
            dropped.append(f"{name} dropped as malformed ({_reason(name, exc)})")
            return None
    return value


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _valid_list(
    name: str, item: type[BaseModel], values: list[Any], cap: int | None, dropped: list[str]
) -> list[BaseModel]:
    """The valid items, at most `cap` of them; items past the cap are not even validated."""
    kept: list[BaseModel] = []
    reasons: list[str] = []
    malformed = over_cap = 0
    for index, value in enumerate(values):
        if cap is not None and len(kept) == cap:
            over_cap = len(values) - index
            break
        try:
            kept.append(item.model_validate(value))
        except ValidationError as exc:
            malformed += 1
            reasons.append(_reason(f"{name}[{index}]", exc))
    if malformed:
        dropped.append(f"{malformed} {name} dropped as malformed ({'; '.join(reasons[:_REASONS_QUOTED])})")
    if over_cap:
        dropped.append(f"{over_cap} {name} beyond the cap of {cap} dropped")
    return kept


def _valid_profiles(name: str, values: dict[Any, Any], cap: int | None, dropped: list[str]) -> dict[str, str]:
    """Profile texts keyed by a non-blank name; at most `cap` of them."""
    kept: dict[str, str] = {}
    malformed: list[str] = []
    for index, (key, text) in enumerate(values.items()):
        if cap is not None and len(kept) == cap:
            dropped.append(f"{len(values) - index} {name} beyond the cap of {cap} dropped")
            break
        if isinstance(key, str) and key.strip() and isinstance(text, str):
            kept[key.strip()] = text.strip()
        else:
            malformed.append(f"{name}[{key!r}]: a profile needs a name and a text")
    if malformed:
        dropped.append(f"{len(malformed)} {name} dropped as malformed ({'; '.join(malformed[:_REASONS_QUOTED])})")
    return kept


def _reason(where: str, exc: ValidationError) -> str:
    err = exc.errors()[0]
    inner = ".".join(str(part) for part in err["loc"])
    return f"{where}{'.' + inner if inner else ''}: {err['msg']}"


class InformedExtractionResponse(LLMAnswer):
    """entities, facts and relations are required (empty lists are fine): an object with none of them is an
    off-shape answer, which must fail over to the blind path, not pass as "nothing to remember".

    A cut answer whose facts ran to the cap (a small model repeating them) never reaches its relations: its facts
    are still worth one call instead of the blind path's three, the relations are reported lost. An answer cut
    before its facts is not kept (entities alone are not worth a write).
    """

    unreached_when_cut = ("relations",)

    entities: list[ExtractedEntity] = Field(json_schema_extra=_at_most(20))
    facts: list[ExtractedFact] = Field(json_schema_extra=_at_most(30))
    relations: list[ExtractedRelation] = Field(json_schema_extra=_at_most(20))
    updated_profiles: dict[str, str] = Field(default_factory=dict, json_schema_extra={"maxProperties": 10})
    emotion: ExtractedEmotion | None = None

    @field_validator("updated_profiles", mode="before")
    @classmethod
    def _profiles_dict(cls, value: Any) -> Any:
        return {} if value is None else value


class EntityScanResponse(LLMAnswer):
    entities: list[ExtractedEntity] = Field(json_schema_extra=_at_most(20))


class FactExtractionResponse(LLMAnswer):
    facts: list[ExtractedFact] = Field(json_schema_extra=_at_most(30))


class RelationExtractionResponse(LLMAnswer):
    relations: list[ExtractedRelation] = Field(json_schema_extra=_at_most(20))


class EntityResolutionResponse(BaseModel):
    model_config = _LENIENT

    reasoning: str | None = None
    match: Annotated[str | int | None, BeforeValidator(_null_word)] = None


class ReconciliationResponse(BaseModel):
    model_config = _LENIENT

    reasoning: str | None = None
    action: Literal["ADD", "UPDATE", "NOOP", "DELETE"]
    target: Annotated[str | int | None, BeforeValidator(_null_word)] = None

    @field_validator("action", mode="before")
    @classmethod
    def _action_upper(cls, value: Any) -> Any:
        return value.strip().upper() if isinstance(value, str) else value


class BatchVerdict(ReconciliationResponse):
    """One fact's verdict in a batched reconciliation answer; `fact` is the new fact's number as shown."""

    fact: Annotated[str | int | None, BeforeValidator(_null_word)] = None


class ReconciliationBatchResponse(LLMAnswer):
    """The verdicts for several new facts at once, one per fact (pipeline/reconciliation.py maps them back by
    `fact`, else by position). A malformed verdict is dropped alone: its fact takes the fallback."""

    positional_lists = ("decisions",)

    decisions: list[BatchVerdict] = Field(json_schema_extra=_at_most(30))


class ProfileConsolidationResponse(BaseModel):
    """The entity's profile rebuilt from its current facts. A blank profile is an InvalidResponse (the entity keeps
    its old one); a long one is cut to MAX_PROFILE_CHARS."""

    model_config = _LENIENT

    profile: str = Field(min_length=1, json_schema_extra=_short(MAX_PROFILE_CHARS))

    @field_validator("profile", mode="before")
    @classmethod
    def _capped(cls, value: Any) -> Any:
        return value.strip()[:MAX_PROFILE_CHARS].strip() if isinstance(value, str) else value
