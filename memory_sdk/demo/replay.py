"""Record a real model's answers once, replay them offline: the demo runs on a fresh machine with no key.

    >>> recorder = RecordingLLM(OpenAIProvider(base_url="http://127.0.0.1:8088/v1", model="qwen2.5-coder-1.5b"))
    >>> ...  # writes through MemoryClient(llm=recorder, ...)
    >>> recorder.save("recorded.json", model="qwen2.5-coder-1.5b")
    >>> llm = ReplayLLM("recorded.json")          # answers each purpose from the recording, in call order

A failed call (timeout, provider error, cancelled by the pipeline's timeout) is recorded as an error entry and
replays as the same kind of exception, so a replay takes the same fallbacks as the recorded run. Each call also
keeps a digest of the prompt it answered: a replay counts prompts that differ (the prompts or the pipeline
changed since the recording) instead of refusing them.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections import deque
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from memory_sdk.errors import ConfigError, InvalidResponse, ProviderError, ProviderTimeout
from memory_sdk.llm.protocols import (
    AnswerCheck,
    ChatMessage,
    LLMProvider,
    LLMResult,
    Purpose,
    StopReason,
    Truncation,
    complete_reading_until,
)
from memory_sdk.pricing import provider_model
from memory_sdk.results import TokenUsage

__all__ = [
    "RECORDING_FORMAT",
    "RecordedCall",
    "Recording",
    "RecordingLLM",
    "ReplayExhausted",
    "ReplayLLM",
    "bundled_recording",
    "load_recording",
]

# Bump when the file's shape changes incompatibly; loading refuses other formats with a clear error.
RECORDING_FORMAT = 1

# Exceptions a recorded error entry replays as; any other recorded type replays as ProviderError.
_REPLAYED_ERRORS: dict[str, type[ProviderError]] = {
    "ProviderTimeout": ProviderTimeout,
    "InvalidResponse": InvalidResponse,
    "ProviderError": ProviderError,
}


class ReplayExhausted(ProviderError):
    """The replay was asked for more answers of a purpose than the recording holds."""


class RecordedCall(BaseModel):
    """One LLM call as recorded: its answer and usage, or the error it ended with."""

    purpose: Purpose
    segment: str | None = None
    text: str | None = None
    usage: TokenUsage | None = None
    error_type: str | None = None
    error: str | None = None
    duration_ms: float = 0.0
    prompt_sha256: str = ""
    # Set for an answer cut at the output cap whose complete items were kept: the replay is truncated too.
    truncation: Truncation | None = None
    # Why the provider stopped reading it early, when it did (LLMResult.stopped).
    stopped: StopReason | None = None


class Recording(BaseModel):
    """A recorded run: where the answers came from, the calls in the order they were made, and what it produced."""

    format: int = RECORDING_FORMAT
    model: str
    base_url: str | None = None
    recorded_at: datetime
    memory_sdk_version: str = ""
    embedder: str = ""
    settings: dict[str, Any] = Field(default_factory=dict)
    notes: str = ""
    calls: list[RecordedCall] = Field(default_factory=list)
    # Summaries of what each write produced in the recorded run, so a replay can say whether it reproduced them.
    results: list[dict[str, Any]] = Field(default_factory=list)

    @property
    def usage(self) -> TokenUsage:
        """Tokens the recorded calls cost, summed."""
        total = TokenUsage()
        for call in self.calls:
            total = total + (call.usage or TokenUsage())
        return total


def prompt_digest(messages: Sequence[ChatMessage]) -> str:
    """A short fingerprint of a prompt, to notice a replay answering a prompt it was not recorded for."""
    payload = json.dumps([[m["role"], m["content"]] for m in messages], ensure_ascii=False)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def load_recording(path: str | Path) -> Recording:
    """Read a recording file; a missing, unreadable or foreign file is a ConfigError naming the path."""
    try:
        raw = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read recording {path}: {exc.strerror or exc}") from exc
    return _parse_recording(raw, str(path))


def bundled_recording() -> Recording:
    """The recording shipped with the package (memory_sdk/demo/recorded.json)."""
    resource = resources.files("memory_sdk.demo").joinpath("recorded.json")
    try:
        raw = resource.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"the package's demo recording is missing ({resource}): reinstall memory-sdk") from exc
    return _parse_recording(raw, "memory_sdk/demo/recorded.json")


def _parse_recording(raw: str, name: str) -> Recording:
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{name} is not JSON: {exc}") from exc
    if not isinstance(data, dict) or data.get("format") != RECORDING_FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise ConfigError(f"{name} is not a memory_sdk recording of format {RECORDING_FORMAT} (found {found!r})")
    try:
        return Recording.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{name} is not a valid recording: {exc.errors()[0]['msg']}") from exc


class RecordingLLM:
    """An LLMProvider that forwards to `inner` and records every call, in the order the calls were made.

    Set `segment` (e.g. the message number) before each write so a replay can be aligned per write. A call is
    given its slot when it starts, so concurrent calls keep their request order whatever order they finish in.
    """

    def __init__(self, inner: LLMProvider) -> None:
        self.inner = inner
        self.calls: list[RecordedCall] = []
        self.segment: str | None = None
        # The wrapped provider's model, so calls are priced as the model's (memory_sdk/pricing.py).
        self.model = provider_model(inner)

    async def complete(
        self,
        *,
        purpose: Purpose,
        messages: Sequence[ChatMessage],
        response_schema: type[BaseModel],
        stop_when: AnswerCheck | None = None,
    ) -> LLMResult:
        """The inner provider's answer, recorded; `stop_when` is passed on when the inner `complete` takes it, so
        the recorded run reads its answers as a run without the recorder would."""
        call = RecordedCall(purpose=purpose, segment=self.segment, prompt_sha256=prompt_digest(messages))
        slot = len(self.calls)
        self.calls.append(call)
        started = time.perf_counter()

        def finish(**fields: Any) -> None:
            fields["duration_ms"] = round((time.perf_counter() - started) * 1000, 1)
            self.calls[slot] = call.model_copy(update=fields)

        try:
            result = await complete_reading_until(
                self.inner, purpose=purpose, messages=messages, response_schema=response_schema, stop_when=stop_when
            )
        except asyncio.CancelledError:
            # The pipeline's timeout cancels the call; the replay raises what the pipeline then reported.
            elapsed = time.perf_counter() - started
            finish(error_type="ProviderTimeout", error=f"{purpose}: no answer within {elapsed:.0f}s")
            raise
        except ProviderError as exc:
            finish(error_type=type(exc).__name__, error=str(exc), usage=exc.usage)  # a failed call still costs
            raise
        except Exception as exc:
            # Recorded the way the pipeline wraps a custom provider's exception, so the replay reads the same.
            finish(error_type="ProviderError", error=f"{purpose}: {type(exc).__name__}: {exc}")
            raise
        finish(text=result.text, usage=result.usage, truncation=result.truncation, stopped=result.stopped)
        return result

    def recording(
        self,
        *,
        model: str,
        base_url: str | None = None,
        embedder: str = "",
        settings: dict[str, Any] | None = None,
        notes: str = "",
        results: Iterable[dict[str, Any]] = (),
    ) -> Recording:
        """The calls so far, with where they came from."""
        from memory_sdk import __version__

        return Recording(
            model=model,
            base_url=base_url,
            recorded_at=datetime.now(UTC).replace(microsecond=0),
            memory_sdk_version=__version__,
            embedder=embedder,
            settings=dict(settings or {}),
            notes=notes,
            calls=list(self.calls),
            results=list(results),
        )

    def save(self, path: str | Path, **metadata: Any) -> Recording:
        """Write the recording to `path` as JSON (UTF-8, one key per line) and return it."""
        recording = self.recording(**metadata)
        text = json.dumps(recording.model_dump(mode="json"), ensure_ascii=False, indent=1)
        Path(path).write_text(text + "\n", encoding="utf-8")
        return recording


class ReplayLLM:
    """An LLMProvider that answers each purpose from a recording, in recorded order, with the recorded usage.

    >>> llm = ReplayLLM("recorded.json")     # or ReplayLLM(bundled_recording())
    >>> llm.use_segment("3")                 # optional: only the answers recorded for write number 3

    Running out of answers for a purpose raises ReplayExhausted, which the pipeline treats like any provider
    failure. `mismatches` counts answers given to a prompt that differs from the recorded one.
    """

    def __init__(self, recording: str | Path | Recording) -> None:
        self.recording = recording if isinstance(recording, Recording) else load_recording(recording)
        self.segment: str | None = None
        # The recorded model: a replayed call is priced as that model's call was (memory_sdk/pricing.py).
        self.model: str | None = self.recording.model
        self.mismatches: list[str] = []
        self.exhausted: list[str] = []
        self._queues = self._build_queues(None)

    def use_segment(self, segment: str | None) -> None:
        """Serve only the calls recorded under `segment` (None: every call, in order); unused answers are dropped."""
        self.segment = segment
        self._queues = self._build_queues(segment)

    def remaining(self) -> int:
        """Answers not yet used in the current segment."""
        return sum(len(queue) for queue in self._queues.values())

    def _build_queues(self, segment: str | None) -> dict[str, deque[RecordedCall]]:
        queues: dict[str, deque[RecordedCall]] = {}
        for call in self.recording.calls:
            if segment is None or call.segment == segment:
                queues.setdefault(call.purpose, deque()).append(call)
        return queues

    async def complete(
        self,
        *,
        purpose: Purpose,
        messages: Sequence[ChatMessage],
        response_schema: type[BaseModel],
        stop_when: AnswerCheck | None = None,
    ) -> LLMResult:
        """The next recorded answer of `purpose`. `stop_when` is not applied: a recorded answer is already read as
        far as the recorded run read it."""
        queue = self._queues.get(purpose)
        if not queue:
            where = f" for write {self.segment}" if self.segment is not None else ""
            self.exhausted.append(f"{purpose}{where}")
            raise ReplayExhausted(
                f"{purpose}: the recording from {self.recording.model} has no more {purpose} answers{where}; "
                "the pipeline now makes calls the recorded run did not: record again with `memory-sdk demo --record`"
            )
        call = queue.popleft()
        if call.prompt_sha256 and call.prompt_sha256 != prompt_digest(messages):
            self.mismatches.append(f"{purpose}{f' (write {call.segment})' if call.segment else ''}")
        if call.error_type is not None:
            raise _REPLAYED_ERRORS.get(call.error_type, ProviderError)(call.error or call.error_type, usage=call.usage)
        return LLMResult(text=call.text or "", usage=call.usage, truncation=call.truncation, stopped=call.stopped)
