"""Test doubles for the two outside services, shipped so users can test their own apps with them.

`ScriptedLLM` answers by purpose from a script and records every request; `HashEmbedder` turns texts into
deterministic vectors whose cosine tracks lexical overlap ("Carol" is close to "Carolina", unrelated texts are
far), with no model and no network.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import math
import re
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from pydantic import BaseModel

from memory_sdk.errors import InvalidResponse
from memory_sdk.llm.parsing import salvage_response
from memory_sdk.llm.protocols import AnswerCheck, ChatMessage, LLMRequest, LLMResult, Purpose
from memory_sdk.llm.tokens import estimate_tokens
from memory_sdk.results import TokenUsage
from memory_sdk.store.embedded import temporary_embedded_server  # a throwaway server for a test session
from memory_sdk.text import fold

__all__ = [
    "CutAtCap",
    "HashEmbedder",
    "ScriptedLLM",
    "ScriptedResponse",
    "UnscriptedPurposeError",
    "temporary_embedded_server",
]


@dataclass(frozen=True)
class CutAtCap:
    """A scripted answer the model did not finish: `text` is what it wrote before the output cap cut it off.

    ScriptedLLM answers it as a real provider answers a cut answer (OpenAIProvider on finish_reason "length"):
    its complete items, with `LLMResult.truncation` saying what was cut, or InvalidResponse when none fits.

    >>> ScriptedLLM({"fact_extraction": [CutAtCap('{"facts": [{"subject": "Ana", "text": "Ana sings"}, {"sub')]})
    """

    text: str


ScriptedResponse: TypeAlias = dict[str, Any] | str | CutAtCap | BaseException
_Responder: TypeAlias = Callable[[LLMRequest], "ScriptedResponse | Awaitable[ScriptedResponse]"]
ScriptEntry: TypeAlias = Sequence[ScriptedResponse] | _Responder


class UnscriptedPurposeError(AssertionError):
    """ScriptedLLM was asked for a purpose its script has no (more) answers for."""


class ScriptedLLM:
    """An LLMProvider that answers from a script, by purpose.

    >>> llm = ScriptedLLM({"informed_extraction": [{"entities": [], "facts": [], "relations": []}],
    ...                    "reconciliation": lambda request: {"action": "ADD", "target": None}})

    Each entry is a queue of responses (consumed in order) or a function of the `LLMRequest` (sync or async).
    A response is a dict (sent as JSON), a str (sent verbatim, to test bad JSON), a CutAtCap (an answer cut at
    the output cap) or an exception instance (raised, to test failures). Usage is reported from the text sizes.
    Every request lands in `requests`. A caller's `stop_when` is honoured as a streaming provider honours it: the
    answer is read up to each closing brace in turn, and where the check first fires only its complete items are
    returned, `stopped="off the message"`.
    """

    def __init__(self, script: Mapping[str, ScriptEntry] | None = None) -> None:
        self._queues: dict[str, deque[ScriptedResponse]] = {}
        self._functions: dict[str, _Responder] = {}
        for purpose, entry in (script or {}).items():
            if callable(entry):
                self._functions[purpose] = entry
            elif isinstance(entry, (str, dict, CutAtCap, BaseException)):
                raise TypeError(f"script for {purpose!r} must be a list of responses or a function")
            else:
                self._queues[purpose] = deque(entry)
        self.requests: list[LLMRequest] = []

    def add(self, purpose: str, *responses: ScriptedResponse) -> None:
        """Queue more responses for `purpose`."""
        self._queues.setdefault(purpose, deque()).extend(responses)

    def requests_for(self, purpose: str) -> list[LLMRequest]:
        """The recorded requests of one purpose, in order."""
        return [request for request in self.requests if request.purpose == purpose]

    def remaining(self, purpose: str) -> int:
        """How many queued responses `purpose` still has."""
        return len(self._queues.get(purpose, ()))

    async def complete(
        self,
        *,
        purpose: Purpose,
        messages: Sequence[ChatMessage],
        response_schema: type[BaseModel],
        stop_when: AnswerCheck | None = None,
    ) -> LLMResult:
        request = LLMRequest(purpose=purpose, messages=tuple(messages), response_schema=response_schema)
        self.requests.append(request)
        response = await self._next_response(request)
        if isinstance(response, BaseException):
            raise response
        prompt_tokens = sum(estimate_tokens(message["content"]) for message in messages)
        if isinstance(response, CutAtCap):
            usage = TokenUsage(input_tokens=prompt_tokens, output_tokens=estimate_tokens(response.text))
            try:
                salvaged, truncation = salvage_response(response.text, response_schema)
            except InvalidResponse as exc:
                raise InvalidResponse(f"scripted {purpose} answer cut at the output cap: {exc}", usage=usage) from exc
            return LLMResult(text=salvaged, usage=usage, truncation=truncation)
        text = response if isinstance(response, str) else json.dumps(response, ensure_ascii=False)
        read = _read_until(response, stop_when) if stop_when is not None and isinstance(response, dict) else None
        if read is not None:
            usage = TokenUsage(input_tokens=prompt_tokens, output_tokens=estimate_tokens(read))
            salvaged, truncation = salvage_response(read, response_schema)
            return LLMResult(text=salvaged, usage=usage, truncation=truncation, stopped="off the message")
        return LLMResult(text=text, usage=TokenUsage(input_tokens=prompt_tokens, output_tokens=estimate_tokens(text)))

    async def _next_response(self, request: LLMRequest) -> ScriptedResponse:
        function = self._functions.get(request.purpose)
        if function is not None:
            produced = function(request)
            if inspect.isawaitable(produced):
                produced = await produced
            return produced
        queue = self._queues.get(request.purpose)
        if not queue:
            scripted = sorted(set(self._queues) | set(self._functions))
            raise UnscriptedPurposeError(
                f"ScriptedLLM has no response left for purpose {request.purpose!r} (scripted: {scripted})"
            )
        return queue.popleft()


# A streaming provider stops reading a list at its cap (30 facts, llm/schemas.py); the double checks `stop_when`
# after each of the first this many items of each list, so an answer of ten thousand items stays quick.
_STOP_CHECKED_ITEMS = 50


def _read_until(response: Mapping[str, Any], stop_when: AnswerCheck) -> str | None:
    """The answer as far as a streaming provider reads it before `stop_when` fires, cut right after the item it
    fired on, or None when it never fires. The check sees what a stream shows it (llm/parsing.py, complete_part):
    the members written whole, then the whole items of the list being written."""
    read: dict[str, Any] = {}
    for key, value in response.items():
        if isinstance(value, list):
            for count in range(1, min(len(value), _STOP_CHECKED_ITEMS) + 1):
                read[key] = value[:count]
                if stop_when(dict(read)) is not None:
                    return json.dumps(read, ensure_ascii=False)[:-2]  # open: the list and the object go on
        read[key] = value
    return None


_WORD = re.compile(r"\w+", re.UNICODE)


class HashEmbedder:
    """A deterministic EmbeddingProvider whose cosine tracks lexical similarity.

    Features are the accent- and case-folded words, their character 2- and 3-grams and their 3+-letter prefixes,
    hashed with a sign into `dimensions` buckets (the hashing trick), then L2-normalised. Shared words and shared
    prefixes raise the cosine; unrelated texts land near 0. `overrides` pins the vector of exact texts, for tests
    that need a precise similarity.
    """

    def __init__(self, dimensions: int = 1536, overrides: Mapping[str, Sequence[float]] | None = None) -> None:
        if dimensions < 8:
            raise ValueError("HashEmbedder needs at least 8 dimensions")
        self._dimensions = dimensions
        self._overrides = {text: _normalise(list(vector)) for text, vector in (overrides or {}).items()}
        self.calls: list[list[str]] = []

    @property
    def dimensions(self) -> int:
        return self._dimensions

    @property
    def model_id(self) -> str:
        """A lexical hash, not a language model: its own vector space, never to be mixed with a real one."""
        return "hash:HashEmbedder"

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return [self.embed_one(text) for text in texts]

    def embed_one(self, text: str) -> list[float]:
        """The vector of one text, synchronously."""
        pinned = self._overrides.get(text)
        if pinned is not None:
            return pinned
        hits = _hits(fold(text), self._dimensions)
        norm = math.sqrt(sum([value * value for value in hits.values()]))
        vector = [0.0] * self._dimensions
        for bucket, value in hits.items():
            vector[bucket] = value / norm if norm else value
        return vector


def _hits(folded: str, dimensions: int) -> dict[int, float]:
    """The buckets a folded text's features hit, with their signed weight sums, added up word by word.

    Every weight is a multiple of 0.5 and every sign is +-1, so each bucket's sum and the sum of their squares are
    exact in binary floating point (for any text of fewer than millions of words): the order in which features,
    words and buckets are added changes no bit of the vector. That is what lets a word's features be summed once
    and cached (a write embeds the same names and words again and again; summing every feature of a message took
    ~0.5 ms). tests/test_hash_embedder_vectors.py holds the vectors to those of the feature loop.
    """
    words = _WORD.findall(folded)
    if not words:
        return _summed(_symbol_features(folded), dimensions)
    hits: dict[int, float] = {}
    for word in words:
        cached = len(word) <= _CACHED_WORD_CHARS
        for bucket, value in _cached_word_hits(word, dimensions) if cached else _word_hits(word, dimensions):
            hits[bucket] = hits.get(bucket, 0.0) + value
    return hits


def _word_hits(word: str, dimensions: int) -> tuple[tuple[int, float], ...]:
    """One word's buckets and their signed weight sums."""
    return tuple(_summed(_word_features(word), dimensions).items())


# Words of up to _CACHED_WORD_CHARS characters (nearly all) keep their sums, at most 16,384 words of a few hundred
# bytes each; a longer word's entry would grow with its length (its prefixes), so it is summed each time.
_CACHED_WORD_CHARS = 32
_cached_word_hits = functools.lru_cache(maxsize=1 << 14)(_word_hits)


def _summed(features: list[tuple[str, float]], dimensions: int) -> dict[int, float]:
    sums: dict[int, float] = {}
    for feature, weight in features:
        bucket, sign = _bucket(feature, dimensions)
        sums[bucket] = sums.get(bucket, 0.0) + sign * weight
    return sums


@functools.lru_cache(maxsize=1 << 16)
def _bucket(feature: str, dimensions: int) -> tuple[int, float]:
    """The hashing trick for one feature: its bucket and sign (cached: words and n-grams repeat across texts)."""
    digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
    return int.from_bytes(digest[:4], "little") % dimensions, 1.0 if digest[4] & 1 else -1.0


def _symbol_features(folded: str) -> list[tuple[str, float]]:
    """The features of a text with no word ("😀"): its symbols stand in for words, so that no non-blank text
    embeds to an all-zero vector."""
    return [("s:" + symbol, 1.0) for symbol in folded if not symbol.isspace()]


def _word_features(word: str) -> list[tuple[str, float]]:
    """One word's features: the word, its character 2- and 3-grams (padded with a space) and its prefixes."""
    padded = f" {word} "
    features = [("w:" + word, 2.0)]
    features.extend(("2:" + padded[i : i + 2], 1.0) for i in range(len(padded) - 1))
    features.extend(("3:" + padded[i : i + 3], 1.0) for i in range(len(padded) - 2))
    # Name prefixes ("carol" in "carolina") weigh extra: diminutives and short forms share them.
    features.extend(("p:" + word[:k], 1.5) for k in range(3, len(word) + 1))
    return features


def _normalise(vector: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector] if norm else vector
