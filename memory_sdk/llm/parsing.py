"""Tolerant reading of an LLM's JSON answer.

OpenAI-compatible servers and small models wrap the object in ```json fences, prefix it with <think> blocks or
trailing chatter. We accept those wrappings and nothing looser: the answer must still hold one JSON object that
validates against the purpose's response model, or the call fails with InvalidResponse (never an empty result).
Whatever goes wrong reading the answer (bad JSON, nesting too deep for the parser, a shape that does not fit)
comes out as InvalidResponse, so callers have one error to fall back on. Every string of the answer is cleaned
(clean_text: no NUL, no lone surrogate) before anything can store it.
"""

from __future__ import annotations

import json
import re
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from memory_sdk.errors import InvalidResponse
from memory_sdk.text import clean_strings

__all__ = ["parse_json_object", "parse_response"]

Model = TypeVar("Model", bound=BaseModel)

_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)


def parse_json_object(text: str) -> dict[str, Any]:
    """The one JSON object in `text`, after removing <think> blocks and code fences, its strings cleaned."""
    unwrapped = _THINK.sub("", text).strip()
    fenced = _FENCE.search(unwrapped)
    if fenced:
        unwrapped = fenced.group(1).strip()
    try:
        try:
            value = json.loads(unwrapped)
        except json.JSONDecodeError:
            value = _first_object(unwrapped)
        value = clean_strings(value)
    except RecursionError as exc:  # json and clean_strings recurse once per nesting level
        raise InvalidResponse(f"answer nested too deeply to read: {_preview(text)}") from exc
    if not isinstance(value, dict):
        raise InvalidResponse(f"expected one JSON object, got {type(value).__name__}: {_preview(text)}")
    return value


def parse_response(text: str, schema: type[Model]) -> Model:
    """Parse `text` into `schema`, raising InvalidResponse with a short reason when it does not fit."""
    data = parse_json_object(text)
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(part) for part in err["loc"])
        raise InvalidResponse(f"response does not fit {schema.__name__}: {where}: {err['msg']}") from exc
    except RecursionError as exc:
        raise InvalidResponse(f"response too deeply nested for {schema.__name__}: {_preview(text)}") from exc


def _first_object(text: str) -> Any:
    start = text.find("{")
    if start < 0:
        raise InvalidResponse(f"no JSON object in the answer: {_preview(text)}")
    try:
        value, _end = json.JSONDecoder().raw_decode(text[start:])
    except json.JSONDecodeError as exc:
        raise InvalidResponse(f"invalid JSON ({exc.msg} at {exc.pos}): {_preview(text)}") from exc
    return value


def _preview(text: str, limit: int = 120) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit] + "..."
