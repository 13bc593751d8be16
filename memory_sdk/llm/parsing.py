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
from dataclasses import dataclass
from functools import cache
from typing import Any, TypeVar, cast, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import from_json

from memory_sdk.errors import InvalidResponse
from memory_sdk.llm.protocols import AnswerCheck, StopReason, Truncation
from memory_sdk.text import clean_strings

__all__ = ["REPEATS_TO_STOP", "complete_part", "parse_json_object", "parse_response", "salvage_response", "stop_reason"]

Model = TypeVar("Model", bound=BaseModel)

_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)
_THINK_OPEN = re.compile(r"<think>", re.IGNORECASE)
# What a cut leaves after the last whole value of an object or array: a comma, then perhaps a key (half-written or
# with its colon) and the start of a number or literal ("0.9", "tru"). Dropped before closing the text to test it.
_OPEN_TAIL = re.compile(r',\s*(?:"(?:[^"\\]|\\.)*"?\s*:?)?\s*[-+.\w]*$')
# Repeats in one list that make an answer still coming in a loop (stop_reason). The recorded answers of the demo
# (memory_sdk/demo/recorded.json, 36 lists) repeat no item; a loop repeats without end, so the second repeat tells
# it from one slip (an entity named twice) at the price of one more item.
REPEATS_TO_STOP = 2


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


def complete_part(text: str) -> dict[str, Any] | None:
    """The members of the answer's JSON object that `text`, an answer cut off mid-way, holds whole, and the whole
    elements of the array the cut fell in; None when it holds no object or unreadable JSON.

    pydantic_core's partial parsing reads the cut text; whether the value the text ends in is whole is settled by
    a strict parse of the text closed right there (a number only counts as whole once a comma follows it: "0.9"
    of "0.95"). An open array with no whole element, a half-written key or value, or an answer cut while thinking
    leave nothing behind. Pure: the text is only read, nothing is invented. Strings are cleaned (clean_text) as
    parse_json_object cleans them.
    """
    unwrapped = _THINK.sub("", text)
    unclosed = _THINK_OPEN.search(unwrapped)
    if unclosed:  # cut while thinking: only what came before the thinking can be an answer
        unwrapped = unwrapped[: unclosed.start()]
    start = unwrapped.find("{")
    if start < 0:
        return None
    try:
        return parse_json_object(unwrapped)  # the object is whole: the cut fell in what came after it
    except InvalidResponse:
        body = unwrapped[start:].rstrip()
    # A number the text ends in may go on ("0.9" of "0.95"): only one a comma followed is whole.
    stems = [stem for stem in (body, _OPEN_TAIL.sub("", body, count=1)) if stem != body or not body[-1].isdigit()]
    for stem, closer in ((stem, closer) for stem in stems for closer in ("}", "]}")):
        try:
            value = from_json(stem + closer)
        except (ValueError, TypeError):  # TypeError: a lone surrogate, which pydantic_core cannot encode
            continue
        if closer == "]}" and not list(value.values())[-1]:
            value.popitem()  # the array the cut fell in has no whole element
        return cast(dict[str, Any], clean_strings(value))
    try:  # the cut fell inside a value: the last member, or the last element of the array it is
        value = from_json(body, allow_partial="trailing-strings")
    except (ValueError, TypeError):  # broken JSON before the cut, nested deeper than pydantic_core reads, a surrogate
        return None
    if not isinstance(value, dict) or not value:
        return {} if isinstance(value, dict) else None
    *whole, (key, last) = value.items()
    if isinstance(last, list) and len(last) > 1:
        whole.append((key, last[:-1]))
    return cast(dict[str, Any], clean_strings(dict(whole)))


def salvage_response(text: str, schema: type[BaseModel]) -> tuple[str, Truncation]:
    """The salvaged JSON text of an answer cut off that still fits `schema`, and what the cut cost.

    Items are the elements of the schema's lists of models: an answer with none whole (or a schema with none: a
    verdict, a profile) is never salvaged, so no default stands in for a value the cut took. Repeats of an item
    (same_item) are dropped, except in the lists `schema` names in `positional_lists` (two equal verdicts are two
    facts' verdicts). Required lists the answer never reached count as empty only when `schema` names them in
    `unreached_when_cut` (the informed extraction's relations, after its facts); any other gap fails validation
    as usual. Raises InvalidResponse when no complete item is left or the complete part does not fit.
    """
    answer = complete_part(text) or {}
    kept = repeats = 0
    for items in _item_lists(schema):
        values = answer.get(items.name)
        if isinstance(values, list):
            distinct = values if items.positional else _without_repeats(values, items.identity)
            answer[items.name] = distinct
            kept, repeats = kept + len(distinct), repeats + len(values) - len(distinct)
    if not kept:
        raise InvalidResponse(f"no complete item before the cut: {_preview(text)}")
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
    truncation = Truncation(items_kept=kept, repeats_dropped=repeats, not_reached=unreached)
    return json.dumps(answer, ensure_ascii=False), truncation


def stop_reason(text: str, schema: type[BaseModel], stop_when: AnswerCheck | None = None) -> StopReason | None:
    """Why to stop reading an answer still coming in, or None: one of the schema's lists holds more whole items
    than its cap ("item cap"), or REPEATS_TO_STOP repeats of earlier items ("repeating"), or the caller's
    `stop_when` finds a reason in the whole members so far ("off the message"). Positional lists are never called
    repeating; a schema without lists of models is never stopped for its lists.
    """
    lists = _item_lists(schema)
    answer = complete_part(text) if lists or stop_when else None
    if answer and stop_when is not None and stop_when(answer) is not None:
        return "off the message"
    for items in lists if answer else ():
        values = answer.get(items.name) if answer else None
        if not isinstance(values, list):
            continue
        if items.cap is not None and len(values) > items.cap:
            return "item cap"
        if not items.positional and len(values) - len(_without_repeats(values, items.identity)) >= REPEATS_TO_STOP:
            return "repeating"
    return None


@dataclass(frozen=True)
class _ItemList:
    """A list of models in a response schema: its cap (`maxItems`), the fields that say two items are the same
    (the item's required ones) and whether its items are read by position."""

    name: str
    cap: int | None
    identity: tuple[str, ...]
    positional: bool


@cache
def _item_lists(schema: type[BaseModel]) -> tuple[_ItemList, ...]:
    positional = getattr(schema, "positional_lists", ())
    lists: list[_ItemList] = []
    for name, field in schema.model_fields.items():
        args = get_args(field.annotation)
        item = args[0] if get_origin(field.annotation) is list and args else None
        if not (isinstance(item, type) and issubclass(item, BaseModel)):
            continue
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        cap = extra.get("maxItems")
        identity = tuple(key for key, item_field in item.model_fields.items() if item_field.is_required())
        lists.append(_ItemList(name, cap if isinstance(cap, int) else None, identity, name in positional))
    return tuple(lists)


def _without_repeats(values: list[Any], identity: tuple[str, ...]) -> list[Any]:
    """`values` without the items that are the same as an earlier one: equal `identity` fields, casefolded and
    with their spaces collapsed (a fact by subject and text), or, for an item without them, equal JSON."""
    seen: set[str] = set()
    kept: list[Any] = []
    for value in values:
        if isinstance(value, dict) and identity and all(isinstance(value.get(key), str) for key in identity):
            same = "\x1f".join(" ".join(value[key].split()).casefold() for key in identity)
        else:
            same = json.dumps(value, sort_keys=True, ensure_ascii=False)
        if same not in seen:
            seen.add(same)
            kept.append(value)
    return kept


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
