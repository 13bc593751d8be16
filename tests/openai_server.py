"""A tiny local server that speaks the OpenAI chat-completions and embeddings protocol, scripted per test.

The real `openai` client talks to it over HTTP, so the provider code is tested down to the socket without
mocking the client. Each route answers from its own queue of `Reply`s and records every JSON body it receives.

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

__all__ = ["FakeOpenAIServer", "RecordedRequest", "Reply"]

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


class FakeOpenAIServer:
    """The server on 127.0.0.1 with an ephemeral port, in a background thread, for the `with` block."""

    def __init__(self, *, default_dimensions: int = 8) -> None:
        self.default_dimensions = default_dimensions
        self.requests: list[RecordedRequest] = []
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
        return 200, {
            "id": f"chatcmpl-fake-{len(self.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", ""),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": reply.content},
                    "finish_reason": reply.finish_reason,
                }
            ],
            "usage": {
                "prompt_tokens": reply.input_tokens,
                "completion_tokens": reply.output_tokens,
                "total_tokens": reply.input_tokens + reply.output_tokens,
                "prompt_tokens_details": {"cached_tokens": reply.cached_input_tokens},
            },
        }

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

    def log_message(self, format: str, *args: Any) -> None:
        """Keep the test output quiet; the requests are in `FakeOpenAIServer.requests`."""
