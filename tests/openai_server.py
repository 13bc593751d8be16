"""A tiny local server that speaks the OpenAI chat-completions and embeddings protocol, scripted per test.

The real `openai` client talks to it over HTTP, so the provider code is tested down to the socket without
mocking the client. Each route answers from its own queue of `Reply`s and records every JSON body it receives.
A chat request with `"stream": true` is answered with server-sent events, as OpenAI does: the content in chunks
(`Reply.chunk_chars`), the usage in a last chunk of its own when `stream_options.include_usage` asks for it, then
`data: [DONE]`; `streams` records how many chunks each answer sent and whether the client hung up first.

    >>> with FakeOpenAIServer() as server:
    ...     server.script_chat(Reply.error(429), Reply.chat({"entities": []}))
    ...     provider = OpenAIProvider(base_url=server.base_url, api_key="test-key")
"""

from __future__ import annotations

import json
import threading
import time
import zlib
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

__all__ = ["FakeOpenAIServer", "RecordedRequest", "Reply", "StreamRecord"]

CHAT_PATH = "/v1/chat/completions"
EMBEDDINGS_PATH = "/v1/embeddings"
# Status for a request the test did not script: a 4xx the providers do not retry, so the test fails at once.
UNSCRIPTED_STATUS = 418
SHUTDOWN_POLL_SEC = 0.01


@dataclass(frozen=True)
class Reply:
    """One scripted answer: an HTTP status, the chat content (or embeddings for 200 on /v1/embeddings),
    the usage to report (`cached_input_tokens` of the input served from the prompt cache) and how long to wait
    before answering."""

    status: int = 200
    content: str | None = None
    input_tokens: int = 10
    output_tokens: int = 5
    cached_input_tokens: int = 0
    delay_sec: float = 0.0
    error_message: str = "scripted failure"
    finish_reason: str = "stop"
    # Streamed: the content in chunks of this many characters, each after `chunk_delay_sec` (None: one chunk,
    # carrying the finish_reason as the last chunk does).
    chunk_chars: int | None = None
    chunk_delay_sec: float = 0.0
    # A server that counts no tokens (some local ones), or one that answers stream=True with a plain completion.
    reports_usage: bool = True
    ignores_stream: bool = False

    @classmethod
    def chat(
        cls,
        content: str | dict[str, Any],
        *,
        input_tokens: int = 10,
        output_tokens: int = 5,
        cached_input_tokens: int = 0,
        finish_reason: str = "stop",
        delay_sec: float = 0.0,
        chunk_chars: int | None = None,
        chunk_delay_sec: float = 0.0,
        reports_usage: bool = True,
        ignores_stream: bool = False,
    ) -> Reply:
        """A 200 chat completion whose message content is `content` (a dict is sent as JSON); "length" as the
        finish_reason says the answer was cut at max_tokens."""
        text = content if isinstance(content, str) else json.dumps(content)
        return cls(
            content=text,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cached_input_tokens=cached_input_tokens,
            finish_reason=finish_reason,
            delay_sec=delay_sec,
            chunk_chars=chunk_chars,
            chunk_delay_sec=chunk_delay_sec,
            reports_usage=reports_usage,
            ignores_stream=ignores_stream,
        )

    @classmethod
    def error(cls, status: int, message: str = "scripted failure") -> Reply:
        """An OpenAI-style error body with `status`."""
        return cls(status=status, error_message=message)

    @classmethod
    def slow(cls, delay_sec: float, content: str = "{}") -> Reply:
        """A 200 answer sent only after `delay_sec` (longer than the client timeout to test timeouts)."""
        return cls(content=content, delay_sec=delay_sec)

    @classmethod
    def embeddings(cls, *, input_tokens: int = 3) -> Reply:
        """A 200 embeddings answer with the vectors of `FakeOpenAIServer.vector_for`."""
        return cls(input_tokens=input_tokens)


@dataclass(frozen=True)
class RecordedRequest:
    """One request the server received."""

    path: str
    body: dict[str, Any]
    authorization: str | None


@dataclass
class StreamRecord:
    """One streamed answer: how many of its chunks (content, finish, usage) the server wrote, and whether the
    client closed the connection before the last."""

    chunks: int
    sent: int = 0
    hung_up: bool = False


class FakeOpenAIServer:
    """The server on 127.0.0.1 with an ephemeral port, in a background thread, for the `with` block."""

    def __init__(self, *, default_dimensions: int = 8) -> None:
        self.default_dimensions = default_dimensions
        self.requests: list[RecordedRequest] = []
        self.streams: list[StreamRecord] = []
        self._queues: dict[str, deque[Reply]] = {CHAT_PATH: deque(), EMBEDDINGS_PATH: deque()}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._http = _Server(("127.0.0.1", 0), _Handler, fake=self)
        self._thread = threading.Thread(target=self._serve, name="fake-openai", daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stopping.set()  # wakes replies still sleeping so no handler outlives the test for long
        self._http.shutdown()
        self._http.server_close()
        self._thread.join()

    def _serve(self) -> None:
        # A short poll so that leaving the `with` block (shutdown) takes milliseconds, not the default 0.5s.
        self._http.serve_forever(poll_interval=SHUTDOWN_POLL_SEC)

    @property
    def base_url(self) -> str:
        host, port = self._http.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def script_chat(self, *replies: Reply) -> None:
        """Queue answers for POST /v1/chat/completions, used in order."""
        with self._lock:
            self._queues[CHAT_PATH].extend(replies)

    def script_embeddings(self, *replies: Reply) -> None:
        """Queue answers for POST /v1/embeddings; once empty, every request gets `Reply.embeddings()`."""
        with self._lock:
            self._queues[EMBEDDINGS_PATH].extend(replies)

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        with self._lock:
            return [request for request in self.requests if request.path == CHAT_PATH]

    @property
    def embedding_requests(self) -> list[RecordedRequest]:
        with self._lock:
            return [request for request in self.requests if request.path == EMBEDDINGS_PATH]

    @staticmethod
    def vector_for(text: str, dimensions: int) -> list[float]:
        """The deterministic vector the server returns for `text`: its length, then a checksum, then zeros."""
        return [float(len(text)), float(zlib.crc32(text.encode()) % 1000)] + [0.0] * (dimensions - 2)

    def _receive(self, path: str, body: dict[str, Any], authorization: str | None) -> Reply | None:
        with self._lock:
            self.requests.append(RecordedRequest(path=path, body=body, authorization=authorization))
            queue = self._queues.get(path)
            if queue is None:
                return None
            if queue:
                return queue.popleft()
            return Reply.embeddings() if path == EMBEDDINGS_PATH else None

    def _answer(self, path: str, body: dict[str, Any], reply: Reply | None) -> tuple[int, dict[str, Any]]:
        if reply is None:
            message = f"no scripted reply left for {path}"
            return UNSCRIPTED_STATUS, {"error": {"message": message, "type": "invalid_request_error"}}
        if reply.status != 200:
            error = {"message": reply.error_message, "type": "scripted_error", "code": None}
            return reply.status, {"error": error}
        if path == EMBEDDINGS_PATH:
            return 200, self._embeddings(body, reply)
        message = {"role": "assistant", "content": reply.content}
        completion = self._completion(
            body, "chat.completion", [{"message": message, "finish_reason": reply.finish_reason}]
        )
        return 200, {**completion, "usage": self._usage(reply)} if reply.reports_usage else completion

    def _completion(self, body: dict[str, Any], kind: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": f"chatcmpl-fake-{len(self.requests)}",
            "object": kind,
            "created": int(time.time()),
            "model": body.get("model", ""),
            "choices": [{"index": 0, **choice} for choice in choices],
        }

    @staticmethod
    def _usage(reply: Reply) -> dict[str, Any]:
        return {
            "prompt_tokens": reply.input_tokens,
            "completion_tokens": reply.output_tokens,
            "total_tokens": reply.input_tokens + reply.output_tokens,
            "prompt_tokens_details": {"cached_tokens": reply.cached_input_tokens},
        }

    def _chunks(self, body: dict[str, Any], reply: Reply) -> list[dict[str, Any]]:
        """The chunks of a streamed answer: the content in pieces (the last with the finish_reason), then the
        usage when the request asked for it and the reply reports it."""
        content = reply.content or ""
        size = reply.chunk_chars or max(len(content), 1)
        pieces = [content[start : start + size] for start in range(0, max(len(content), 1), size)]
        chunks = [
            self._completion(
                body,
                "chat.completion.chunk",
                [{"delta": {"content": piece}, "finish_reason": reply.finish_reason if last else None}],
            )
            for last, piece in ((number == len(pieces) - 1, piece) for number, piece in enumerate(pieces))
        ]
        if reply.reports_usage and (body.get("stream_options") or {}).get("include_usage"):
            chunks.append({**self._completion(body, "chat.completion.chunk", []), "usage": self._usage(reply)})
        return chunks

    def _embeddings(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        dimensions = int(body.get("dimensions", self.default_dimensions))
        return {
            "object": "list",
            "model": body.get("model", ""),
            "data": [
                {"object": "embedding", "index": index, "embedding": self.vector_for(text, dimensions)}
                for index, text in enumerate(texts)
            ],
            "usage": {"prompt_tokens": reply.input_tokens, "total_tokens": reply.input_tokens},
        }


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], *, fake: FakeOpenAIServer
    ) -> None:
        super().__init__(address, handler)
        self.fake = fake


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        fake = self.server.fake
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        reply = fake._receive(self.path, body, self.headers.get("Authorization"))
        if reply is not None and reply.delay_sec and fake._stopping.wait(reply.delay_sec):
            return  # the server is shutting down; nobody waits for this answer any more
        if reply is not None and reply.status == 200 and body.get("stream") and not reply.ignores_stream:
            self._stream(fake._chunks(body, reply), reply.chunk_delay_sec)
            return
        status, payload = fake._answer(self.path, body, reply)
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            return  # the client stopped waiting (a timeout test); there is no one to answer

    def _stream(self, chunks: list[dict[str, Any]], delay_sec: float) -> None:
        """Write `chunks` as server-sent events, flushing each, until the last or until the client hangs up."""
        fake = self.server.fake
        record = StreamRecord(chunks=len(chunks))
        with fake._lock:
            fake.streams.append(record)
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for chunk in chunks:
                if delay_sec and fake._stopping.wait(delay_sec):
                    return
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
                record.sent += 1
            self.wfile.write(b"data: [DONE]\n\n")
        except (BrokenPipeError, ConnectionResetError):
            record.hung_up = True

    def log_message(self, format: str, *args: Any) -> None:
        """Keep the test output quiet; the requests are in `FakeOpenAIServer.requests`."""
