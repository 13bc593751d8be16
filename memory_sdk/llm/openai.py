"""OpenAI and OpenAI-compatible servers (vLLM, Ollama, llama.cpp) behind LLMProvider and EmbeddingProvider.

The `openai` client is called directly, not through instructor: instructor's retry loop validates into the
response model and hides the raw text the pipeline parses and the usage of each attempt, and its JSON-schema
handler cannot send `"strict": False`; building `response_format` here takes a few lines.
Retries belong to tenacity (the client's own are off) and cover 429, 5xx, connection errors and timeouts only.
Chat answers are streamed, so that one that runs away (a small model repeating its items) is stopped as soon as
it does, not at the output cap (docs/decisions.md, "Streamed answers, stopped when they loop").

    >>> async with OpenAIProvider(model="gpt-4o-mini") as llm:
    ...     result = await llm.complete(purpose="entity_scan", messages=messages, response_schema=EntityScan)
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Self, TypeVar

import openai
from openai import AsyncStream, omit
from openai.types import CompletionUsage
from openai.types.chat import ChatCompletion, ChatCompletionChunk, ChatCompletionMessageParam
from openai.types.chat.completion_create_params import ResponseFormat
from openai.types.create_embedding_response import CreateEmbeddingResponse
from pydantic import BaseModel
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential_jitter

from memory_sdk.errors import (
    ConfigError,
    InvalidResponse,
    ProviderError,
    ProviderNotConfigured,
    ProviderTimeout,
)
from memory_sdk.llm.parsing import parse_json_object, salvage_response, stop_reason
from memory_sdk.llm.protocols import AnswerCheck, ChatMessage, LLMResult, Purpose, StopReason
from memory_sdk.llm.tokens import OUTPUT_TOKEN_CAPS, estimate_tokens, output_cap
from memory_sdk.results import TokenUsage

__all__ = ["REPAIR_NUDGE", "OpenAIEmbedder", "OpenAIProvider", "StructuredOutput", "repeated_tail"]

_log = logging.getLogger("memory_sdk")

T = TypeVar("T")

StructuredOutput = Literal["json_schema", "json_object", "none"]

# Sent after an answer that holds no JSON object, with that answer, before giving up with InvalidResponse.
REPAIR_NUDGE = "Answer again with only the JSON object."
# Local OpenAI-compatible servers ignore the key, but the openai client refuses to start without one.
_PLACEHOLDER_API_KEY = "no-key-needed-for-local-server"
# Longest single wait between attempts; OpenAI's own client caps its backoff at 8 seconds too.
_MAX_BACKOFF_SEC = 8.0
# OpenAI's rule for json_schema names: letters, digits, '_' and '-', at most 64 characters.
_SCHEMA_NAME_FORBIDDEN = re.compile(r"[^a-zA-Z0-9_-]")
_SCHEMA_NAME_MAX_LENGTH = 64
# A loop: the answer's last LOOP_WINDOW characters occur LOOP_MIN_REPEATS times in it. 40 characters is about one
# repeated JSON item of the answers measured (issue 13: '{"subject": "Melanie", "text": "Melanie ...'); 3 copies
# tell a loop from a shared ending.
LOOP_WINDOW = 40
LOOP_MIN_REPEATS = 3
# Error bodies can be whole HTML pages from proxies; the message keeps the start.
_ERROR_DETAIL_MAX_LENGTH = 300


class _OpenAIClientOwner:
    """The client, its lifetime and the retry policy shared by the chat provider and the embedder."""

    def __init__(
        self,
        *,
        model: str,
        api_key: str | None,
        base_url: str | None,
        timeout_sec: float,
        max_attempts: int,
        backoff_base_sec: float,
        client: openai.AsyncOpenAI | None,
    ) -> None:
        if not model:
            raise ConfigError("model must be a non-empty model name")
        if timeout_sec <= 0:
            raise ConfigError(f"timeout_sec must be positive, got {timeout_sec}")
        if max_attempts < 1:
            raise ConfigError(f"max_attempts must be at least 1, got {max_attempts}")
        if backoff_base_sec < 0:
            raise ConfigError(f"backoff_base_sec must not be negative, got {backoff_base_sec}")
        self._model = model
        self._timeout_sec = timeout_sec
        self._max_attempts = max_attempts
        self._backoff_base_sec = backoff_base_sec
        self._owns_client = client is None
        if client is None:
            self._client = _build_client(
                api_key=api_key, base_url=base_url, timeout_sec=timeout_sec, owner=type(self).__name__
            )
        else:
            # A copy sharing the caller's connection pool; the caller keeps ownership and closes it.
            self._client = client.with_options(max_retries=0, timeout=timeout_sec)

    @property
    def model(self) -> str:
        return self._model

    async def aclose(self) -> None:
        """Close the HTTP client this provider created; a client passed in stays open for its owner."""
        if self._owns_client:
            await self._client.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def _with_retries(self, call: Callable[[], Awaitable[T]], *, action: str) -> T:
        """`call()` with retries on transient failures; every failure leaves as a ProviderError."""
        attempts = 0

        async def attempt() -> T:
            nonlocal attempts
            attempts += 1
            return await call()

        retrying = AsyncRetrying(
            stop=stop_after_attempt(self._max_attempts),
            wait=wait_exponential_jitter(
                multiplier=self._backoff_base_sec, max=_MAX_BACKOFF_SEC, jitter=self._backoff_base_sec
            ),
            retry=retry_if_exception(_is_transient),
            reraise=True,
        )
        try:
            return await retrying(attempt)
        except (openai.OpenAIError, TimeoutError) as exc:
            raise self._translate(exc, action=action, attempts=attempts) from exc

    def _translate(self, exc: Exception, *, action: str, attempts: int) -> ProviderError:
        tries = f"{attempts} attempt{'s' if attempts != 1 else ''}"
        if isinstance(exc, openai.APITimeoutError | TimeoutError):
            return ProviderTimeout(f"{action} got no answer within {self._timeout_sec}s ({tries})")
        if isinstance(exc, openai.AuthenticationError):
            return ProviderError(
                f"{action} failed: the API key was rejected (HTTP 401); check api_key or OPENAI_API_KEY"
            )
        if isinstance(exc, openai.APIStatusError):
            detail = exc.message[:_ERROR_DETAIL_MAX_LENGTH]
            return ProviderError(f"{action} failed with HTTP {exc.status_code} ({tries}): {detail}")
        if isinstance(exc, openai.APIConnectionError):
            return ProviderError(f"{action} could not reach {self._client.base_url} ({tries}): {exc}")
        return ProviderError(f"{action} failed: {exc}")


class OpenAIProvider(_OpenAIClientOwner):
    """LLMProvider for the OpenAI chat-completions API and servers that speak it.

    >>> llm = OpenAIProvider(model="qwen2.5:7b", base_url="http://localhost:11434/v1", structured="none")

    The key comes from `api_key` or OPENAI_API_KEY, the server from `base_url` or OPENAI_BASE_URL; a base URL
    alone is enough. `structured` picks the response_format sent: the purpose's JSON schema (not strict, so
    any pydantic schema is accepted), plain JSON mode, or none for servers that support neither.
    The returned text is the JSON object re-serialised, without fences or <think> blocks. `timeout_sec` bounds
    each request, the whole streamed answer included.
    """

    def __init__(
        self,
        *,
        model: str = "gpt-4o-mini",
        api_key: str | None = None,
        base_url: str | None = None,
        timeout_sec: float = 60.0,
        max_attempts: int = 3,
        backoff_base_sec: float = 0.5,
        temperature: float = 0.0,
        structured: StructuredOutput = "json_schema",
        max_output_tokens: int | Mapping[str, int] | None = OUTPUT_TOKEN_CAPS,
        client: openai.AsyncOpenAI | None = None,
    ) -> None:
        caps = max_output_tokens.values() if isinstance(max_output_tokens, Mapping) else [max_output_tokens]
        if any(cap is not None and (isinstance(cap, bool) or cap < 1) for cap in caps):
            raise ConfigError(f"max_output_tokens must be positive, a mapping of purpose to cap, or None, got {caps}")
        if structured not in ("json_schema", "json_object", "none"):
            raise ConfigError(f"structured must be 'json_schema', 'json_object' or 'none', got {structured!r}")
        super().__init__(
            model=model,
            api_key=api_key,
            base_url=base_url,
            timeout_sec=timeout_sec,
            max_attempts=max_attempts,
            backoff_base_sec=backoff_base_sec,
            client=client,
        )
        self._temperature = temperature
        self._structured: StructuredOutput = structured
        # A cap on the answer, per purpose by default (llm/tokens.py): a small model that starts repeating itself
        # stops here instead of at the timeout.
        self._max_output_tokens = max_output_tokens

    async def complete(
        self,
        *,
        purpose: Purpose,
        messages: Sequence[ChatMessage],
        response_schema: type[BaseModel],
        stop_when: AnswerCheck | None = None,
    ) -> LLMResult:
        """One JSON object for `purpose`; asks once more with REPAIR_NUDGE if the answer holds none.

        The answer is streamed and read only while it is worth reading: once one of `response_schema`'s lists runs
        past its cap or starts repeating its items, or `stop_when` finds a reason to stop in its whole members
        (llm/parsing.py, stop_reason), the stream is closed, and the
        complete items so far are the answer, `LLMResult.stopped` saying why. An answer cut at the output cap keeps
        its complete items too (salvage_response); either says what it lost in `LLMResult.truncation`, and with no
        item that fits `response_schema` is an InvalidResponse. No repair follows a cut or stopped answer or one
        caught repeating itself (the repair would run away the same way), nor one that took more than half of
        `timeout_sec` (the repair would not finish within it). Every failure carries the usage of the requests
        that were answered: the server's count, else the estimate of llm/tokens.py (an early stop closes the
        stream before the server's count comes).
        """
        started = time.perf_counter()
        spent = _Spent()
        status = "failed"
        try:
            conversation = [_to_openai_message(message) for message in messages]
            request = _Request(
                conversation, self._response_format(response_schema), self._cap(purpose), response_schema, stop_when
            )
            answer = await self._chat(request, spent)
            if not answer.cut_short:
                try:
                    parsed = parse_json_object(answer.text)
                except InvalidResponse as exc:
                    self._check_repair(purpose, answer.text, started, spent, exc)
                    conversation.append({"role": "assistant", "content": answer.text})
                    conversation.append({"role": "user", "content": REPAIR_NUDGE})
                    answer = await self._chat(request, spent)
                    if not answer.cut_short:
                        parsed = self._repaired(purpose, answer.text, spent)
            if answer.cut_short:
                salvaged = self._salvaged(purpose, answer, request.cap, spent)
                status = f"stopped ({answer.stopped})" if answer.stopped else "truncated"
                return salvaged
            status = "ok"
            return LLMResult(
                text=json.dumps(parsed, ensure_ascii=False), usage=spent.usage, usage_estimated=spent.estimated
            )
        finally:
            _log.info(
                "openai chat purpose=%s model=%s status=%s tokens=%d ms=%.0f",
                purpose,
                self._model,
                status,
                spent.usage.total_tokens if spent.usage else 0,
                (time.perf_counter() - started) * 1000,
            )

    def _repaired(self, purpose: str, text: str, spent: _Spent) -> dict[str, Any]:
        """The JSON object of the answer to REPAIR_NUDGE; a second answer without one is the end."""
        try:
            return parse_json_object(text)
        except InvalidResponse as again:
            raise InvalidResponse(
                f"{self._model} answered {purpose} without a JSON object, twice: {again}", usage=spent.usage
            ) from again

    def _salvaged(self, purpose: str, answer: _Answer, cap: int | None, spent: _Spent) -> LLMResult:
        """The complete items of an answer cut at `cap` or stopped early; InvalidResponse when none is left that
        fits the schema. Never repaired: a second answer would run away the same way."""
        try:
            salvaged, truncation = salvage_response(answer.text, answer.schema)
        except InvalidResponse as exc:
            if answer.stopped:
                how = f"until it was stopped ({answer.stopped})"
            else:
                loop = repeated_tail(answer.text)
                how = f"up to the cap of {cap} output tokens{f', repeating {loop!r}' if loop else ''}; cut off"
            raise InvalidResponse(
                f"{self._model} answered {purpose} {how}, not repaired: {exc}", usage=spent.usage
            ) from exc
        return LLMResult(
            text=salvaged,
            usage=spent.usage,
            truncation=truncation,
            stopped=answer.stopped,
            usage_estimated=spent.estimated,
        )

    def _cap(self, purpose: str) -> int | None:
        if isinstance(self._max_output_tokens, Mapping):
            return output_cap(purpose, self._max_output_tokens)
        return self._max_output_tokens

    def _check_repair(self, purpose: str, text: str, started: float, spent: _Spent, exc: InvalidResponse) -> None:
        """Raise instead of repairing when a repair cannot help: the answer looped, or no time is left for one."""
        loop = repeated_tail(text)
        if loop is not None:
            raise InvalidResponse(
                f"{self._model} answered {purpose} with a loop (repeats {loop!r}); not repaired: {exc}",
                usage=spent.usage,
            ) from exc
        elapsed = time.perf_counter() - started
        if elapsed * 2 > self._timeout_sec:
            raise InvalidResponse(
                f"{self._model} answered {purpose} without a JSON object after {elapsed:.0f}s; no repair, it would "
                f"not finish within {self._timeout_sec:g}s: {exc}",
                usage=spent.usage,
            ) from exc

    async def _chat(self, request: _Request, spent: _Spent) -> _Answer:
        """The streamed answer to `request` (_read_stream); what it cost is added to `spent`, and is on any error
        raised."""

        async def attempt() -> _Answer:
            async with asyncio.timeout(self._timeout_sec):  # the client's own timeout is per read of the stream
                stream = await self._client.chat.completions.create(
                    model=self._model,
                    messages=request.conversation,
                    temperature=self._temperature,
                    max_tokens=request.cap if request.cap is not None else omit,
                    response_format=request.response_format if request.response_format is not None else omit,
                    stream=True,
                    stream_options={"include_usage": True},
                )
                async with stream:  # leaving it closes the connection: the server stops generating
                    if stream.response.headers.get("content-type", "").startswith("application/json"):
                        # A server that ignores stream=True answers with the whole completion.
                        completion = ChatCompletion.model_validate_json(await stream.response.aread())
                        return _Answer.of_completion(completion, request.schema)
                    return await _read_stream(stream, request.schema, request.stop_when)

        try:
            answer = await self._with_retries(attempt, action=f"OpenAI chat completion ({self._model})")
        except ProviderError as exc:
            exc.usage = exc.usage or spent.usage  # the answers before this failed request still cost tokens
            raise
        if answer.usage is not None:
            details = answer.usage.prompt_tokens_details
            cached = (details.cached_tokens if details is not None else None) or 0
            spent.add(answer.usage.prompt_tokens, answer.usage.completion_tokens, cached)
        else:  # a server that counts nothing, or a stream closed before the count came
            spent.add(_prompt_tokens(request.conversation), estimate_tokens(answer.text), estimated=True)
        if not answer.answered:
            raise InvalidResponse(f"{self._model} returned no choices", usage=spent.usage)
        return answer

    def _response_format(self, schema: type[BaseModel]) -> ResponseFormat | None:
        if self._structured == "json_schema":
            name = _SCHEMA_NAME_FORBIDDEN.sub("_", schema.__name__)[:_SCHEMA_NAME_MAX_LENGTH]
            return {
                "type": "json_schema",
                "json_schema": {"name": name, "schema": schema.model_json_schema(), "strict": False},
            }
        if self._structured == "json_object":
            return {"type": "json_object"}
        return None


@dataclass
class _Spent:
    """The usage of one complete() call so far, across its requests (the first answer and the repair), and
    whether any of it is the SDK's estimate."""

    usage: TokenUsage | None = None
    estimated: bool = False

    def add(
        self, input_tokens: int, output_tokens: int, cached_input_tokens: int = 0, *, estimated: bool = False
    ) -> None:
        request = TokenUsage(
            input_tokens=input_tokens, output_tokens=output_tokens, cached_input_tokens=cached_input_tokens
        )
        self.usage = request if self.usage is None else self.usage + request
        self.estimated = self.estimated or estimated


@dataclass(frozen=True)
class _Request:
    """What each request of one complete() call sends (the repair appends to `conversation`)."""

    conversation: list[ChatCompletionMessageParam]
    response_format: ResponseFormat | None
    cap: int | None
    schema: type[BaseModel]
    stop_when: AnswerCheck | None = None


@dataclass(frozen=True)
class _Answer:
    """One request's answer: its text, the server's count of its tokens (None when it sent none) and how it
    ended: cut at the output cap, stopped early (stop_reason) or finished."""

    text: str
    schema: type[BaseModel]
    usage: CompletionUsage | None = None
    finish_reason: str | None = None
    stopped: StopReason | None = None
    answered: bool = True  # False when the server sent no choice at all

    @property
    def cut_short(self) -> bool:
        return self.finish_reason == "length" or self.stopped is not None

    @classmethod
    def of_completion(cls, completion: ChatCompletion, schema: type[BaseModel]) -> _Answer:
        if not completion.choices:
            return cls("", schema, completion.usage, answered=False)
        choice = completion.choices[0]
        return cls(choice.message.content or "", schema, completion.usage, choice.finish_reason)


async def _read_stream(
    stream: AsyncStream[ChatCompletionChunk], schema: type[BaseModel], stop_when: AnswerCheck | None = None
) -> _Answer:
    """The streamed answer, read until the model finishes or stop_reason finds its items not worth reading on.

    The answer is checked only when a chunk holds a "}": the items stop_reason counts are objects, whole only
    at their closing brace. An answer that finished comes with its count in a last chunk of its own
    (`stream_options.include_usage`).
    """
    text = ""
    finish_reason: str | None = None
    usage: CompletionUsage | None = None
    answered = False
    async for chunk in stream:
        usage = chunk.usage or usage
        for choice in chunk.choices[:1]:
            answered = True
            delta = choice.delta.content or ""
            text += delta
            finish_reason = choice.finish_reason or finish_reason
            if finish_reason is None and "}" in delta and (stopped := stop_reason(text, schema, stop_when)):
                return _Answer(text, schema, usage, stopped=stopped)
    return _Answer(text, schema, usage, finish_reason, answered=answered)


def repeated_tail(text: str) -> str | None:
    """The chunk an answer ends by repeating, or None: a model caught in a loop writes the same span over and over.

    The last LOOP_WINDOW characters must occur LOOP_MIN_REPEATS times in the answer. Only failed answers are
    checked (one cut at the cap, or with no JSON object), so a long valid list of similar items is never called a
    loop.
    """
    tail = text.rstrip()[-LOOP_WINDOW:]
    if len(tail) < LOOP_WINDOW:
        return None
    return tail if text.count(tail) >= LOOP_MIN_REPEATS else None


class OpenAIEmbedder(_OpenAIClientOwner):
    """EmbeddingProvider for the OpenAI embeddings API and servers that speak it.

    >>> async with OpenAIEmbedder(dimensions=512) as embedder:
    ...     vectors = await embedder.embed(["Carol lives in Lisbon"])

    `dimensions` is sent to text-embedding-3 models (which shorten their vectors to it) and checked against
    every vector returned, so a model of the wrong size fails here rather than in the vector column.
    """

    def __init__(
        self,
        *,
        model: str = "text-embedding-3-small",
        dimensions: int = 1536,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout_sec: float = 60.0,
        max_attempts: int = 3,
        backoff_base_sec: float = 0.5,
        batch_size: int = 256,
        client: openai.AsyncOpenAI | None = None,
    ) -> None:
        if dimensions < 1:
            raise ConfigError(f"dimensions must be at least 1, got {dimensions}")
        if batch_size < 1:
            raise ConfigError(f"batch_size must be at least 1, got {batch_size}")
        super().__init__(
            model=model,
            api_key=api_key,
            base_url=base_url,
            timeout_sec=timeout_sec,
            max_attempts=max_attempts,
            backoff_base_sec=backoff_base_sec,
            client=client,
        )
        self._dimensions = dimensions
        self._batch_size = batch_size

    @property
    def dimensions(self) -> int:
        return self._dimensions

    @property
    def model_id(self) -> str:
        """The vector space: "openai:" and the model name (the same name on any server that speaks the API)."""
        return f"openai:{self._model}"

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order, requested in batches of `batch_size`."""
        if not texts:
            return []
        started = time.perf_counter()
        vectors: list[list[float]] = []
        tokens = 0
        status = "failed"
        try:
            for start in range(0, len(texts), self._batch_size):
                batch_vectors, batch_tokens = await self._embed_batch(texts[start : start + self._batch_size])
                vectors.extend(batch_vectors)
                tokens += batch_tokens
            status = "ok"
            return vectors
        finally:
            _log.info(
                "openai embed model=%s status=%s texts=%d tokens=%d ms=%.0f",
                self._model,
                status,
                len(texts),
                tokens,
                (time.perf_counter() - started) * 1000,
            )

    async def _embed_batch(self, batch: Sequence[str]) -> tuple[list[list[float]], int]:
        action = f"OpenAI embeddings ({self._model})"

        async def request() -> CreateEmbeddingResponse:
            return await self._client.embeddings.create(
                model=self._model,
                input=list(batch),
                dimensions=self._dimensions if self._model.startswith("text-embedding-3") else omit,
                encoding_format="float",
            )

        response = await self._with_retries(request, action=action)
        if len(response.data) != len(batch):
            raise ProviderError(f"{action} returned {len(response.data)} vectors for {len(batch)} texts")
        vectors = [item.embedding for item in sorted(response.data, key=lambda item: item.index)]
        for vector in vectors:
            if len(vector) != self._dimensions:
                raise ProviderError(
                    f"{action} returned vectors of {len(vector)} dimensions, expected {self._dimensions}"
                )
        return vectors, response.usage.prompt_tokens if response.usage else 0


def _build_client(*, api_key: str | None, base_url: str | None, timeout_sec: float, owner: str) -> openai.AsyncOpenAI:
    key = api_key or os.environ.get("OPENAI_API_KEY")
    url = base_url or os.environ.get("OPENAI_BASE_URL")
    if not key and not url:
        raise ProviderNotConfigured(
            f"{owner} has no API key: pass api_key=... or set OPENAI_API_KEY, or point base_url "
            "(or OPENAI_BASE_URL) at an OpenAI-compatible server"
        )
    return openai.AsyncOpenAI(api_key=key or _PLACEHOLDER_API_KEY, base_url=url, timeout=timeout_sec, max_retries=0)


def _is_transient(exc: BaseException) -> bool:
    """Worth another attempt: rate limits, server errors, lost connections and timeouts; never 4xx."""
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code == 429 or exc.status_code >= 500
    return isinstance(exc, openai.APIConnectionError | TimeoutError)


def _prompt_tokens(conversation: Sequence[ChatCompletionMessageParam]) -> int:
    """The estimated tokens of the messages sent (llm/tokens.py), as the pipeline estimates an unreported prompt."""
    texts = [message.get("content") for message in conversation]
    return sum(estimate_tokens(text) for text in texts if isinstance(text, str))


def _to_openai_message(message: ChatMessage) -> ChatCompletionMessageParam:
    if message["role"] == "system":
        return {"role": "system", "content": message["content"]}
    if message["role"] == "assistant":
        return {"role": "assistant", "content": message["content"]}
    return {"role": "user", "content": message["content"]}
