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
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from memory_sdk.errors import InvalidResponse
from memory_sdk.llm.protocols import Truncation
from memory_sdk.text import clean_strings

__all__ = ["Salvage", "parse_json_object", "parse_response", "salvage_json_object", "salvage_response"]

Model = TypeVar("Model", bound=BaseModel)

_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)
_THINK_OPEN = re.compile(r"<think>", re.IGNORECASE)
_BLANK = " \t\r\n"


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


@dataclass(frozen=True)
class Salvage:
    """The complete parts of an answer cut at the output cap: `answer` holds only values the text holds whole, its
    strings cleaned (clean_text) as parse_json_object cleans them."""

    answer: dict[str, Any]
    items_kept: int  # elements of the top-level arrays kept, repeats not counted
    repeats_dropped: int  # exact repeats of an element earlier in its array (a model caught in a loop)


def salvage_json_object(text: str, keep_repeats: Collection[str] = ()) -> Salvage | None:
    """The JSON object made of the complete parts of `text`, an answer cut off mid-way; None if no item is complete.

    A member of the top-level object is kept when its value is whole. The member the cut fell in is kept only when
    its value is an array with complete elements (an object or array ends at its closing mark, a string at its
    closing quote, a number only at the comma or bracket after it, so no cut value is kept): those elements, the
    array closed after them. A partial element, a partial key, an open object and a value whose end the cut hid
    are dropped. Exact repeats of an element in its array are dropped too, except in the arrays named in
    `keep_repeats` (read by position: two equal verdicts are two facts' verdicts). Items are the elements of the
    top-level arrays: an answer with none (a verdict, a profile) is never salvaged, so no default stands in for a
    value the cut took.
    Pure: the text is only read, nothing is invented.
    """
    unwrapped = _THINK.sub("", text)
    unclosed = _THINK_OPEN.search(unwrapped)
    if unclosed:  # cut while thinking: only what came before the thinking can be an answer
        unwrapped = unwrapped[: unclosed.start()]
    start = unwrapped.find("{")
    if start < 0:
        return None
    answer: dict[str, Any] = {}
    kept = repeats = 0
    try:
        for key, value in _complete_members(unwrapped, start + 1):
            if isinstance(value, list):
                value, dropped = (value, 0) if key in keep_repeats else _without_repeats(value)
                kept, repeats = kept + len(value), repeats + dropped
            answer[key] = clean_strings(value)
    except RecursionError:  # json and clean_strings recurse once per nesting level
        return None
    return Salvage(answer, kept, repeats) if kept else None


def salvage_response(text: str, schema: type[BaseModel]) -> tuple[str, Truncation]:
    """The salvaged JSON text of an answer cut at the output cap that still fits `schema`, and what the cut cost.

    Required lists the answer never reached count as empty only when `schema` names them in
    `unreached_when_cut` (the informed extraction's relations, after its facts); any other gap fails validation
    as usual. Repeats stay in the lists `schema` names in `positional_lists`. Raises InvalidResponse when no
    complete item is left or the complete part does not fit.
    """
    salvage = salvage_json_object(text, getattr(schema, "positional_lists", ()))
    if salvage is None:
        raise InvalidResponse(f"no complete item before the cut: {_preview(text)}")
    answer = dict(salvage.answer)
    unreached = tuple(name for name in getattr(schema, "unreached_when_cut", ()) if name not in answer)
    answer.update({name: [] for name in unreached})
    try:
        schema.model_validate(answer)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(part) for part in err["loc"])
        raise InvalidResponse(
            f"the complete part before the cut does not fit {schema.__name__}: {where}: {err['msg']}"
        ) from exc
    truncation = Truncation(
        items_kept=salvage.items_kept, repeats_dropped=salvage.repeats_dropped, not_reached=unreached
    )
    return json.dumps(answer, ensure_ascii=False), truncation


def _complete_members(text: str, position: int) -> list[tuple[str, Any]]:
    """The members of the object opened before `position` that `text` holds whole, in order, plus the complete
    elements of an array member the text ends in."""
    decoder = json.JSONDecoder()
    members: list[tuple[str, Any]] = []
    while True:
        position = _skip_blank(text, position)
        if text.startswith("}", position):
            return members
        try:
            key, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError:
            return members  # a key the cut split, or no key at all
        position = _skip_blank(text, position)
        if not isinstance(key, str) or not text.startswith(":", position):
            return members
        position = _skip_blank(text, position + 1)
        try:
            value, end = decoder.raw_decode(text, position)
        except json.JSONDecodeError:
            if text.startswith("[", position):
                elements = _complete_elements(text, position + 1, decoder)
                if elements:
                    members.append((key, elements))
            return members
        position = _skip_blank(text, end)
        if _may_go_on(value, text, position, "}"):
            return members
        members.append((key, value))
        if not text.startswith(",", position):
            return members  # the object's end, or the cut
        position += 1


def _complete_elements(text: str, position: int, decoder: json.JSONDecoder) -> list[Any]:
    """The elements of the array opened before `position` that end before the cut."""
    elements: list[Any] = []
    while True:
        try:
            element, end = decoder.raw_decode(text, _skip_blank(text, position))
        except json.JSONDecodeError:
            return elements
        position = _skip_blank(text, end)
        if _may_go_on(element, text, position, "]"):
            return elements
        elements.append(element)
        if not text.startswith(",", position):
            return elements
        position += 1


def _may_go_on(value: Any, text: str, position: int, closer: str) -> bool:
    """True when the cut may have split `value`: a number the text ends in ("0.9" of "0.95"). A string, object or
    array ends at its own closing mark; a number only at the comma or closer after it."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    return number and not text.startswith((",", closer), position)


def _without_repeats(values: list[Any]) -> tuple[list[Any], int]:
    """`values` without exact repeats of an earlier value (compared as canonical JSON), and how many went."""
    seen: set[str] = set()
    kept: list[Any] = []
    for value in values:
        canonical = json.dumps(value, sort_keys=True, ensure_ascii=False)
        if canonical not in seen:
            seen.add(canonical)
            kept.append(value)
    return kept, len(values) - len(kept)


def _skip_blank(text: str, position: int) -> int:
    while position < len(text) and text[position] in _BLANK:
        position += 1
    return position


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
