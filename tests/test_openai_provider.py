"""OpenAIProvider and OpenAIEmbedder driven through the real openai client against a local HTTP server."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from pydantic import BaseModel

from memory_sdk.errors import InvalidResponse, ProviderError, ProviderNotConfigured, ProviderTimeout
from memory_sdk.llm.openai import REPAIR_NUDGE, OpenAIEmbedder, OpenAIProvider
from memory_sdk.llm.protocols import ChatMessage, EmbeddingProvider, LLMProvider
from memory_sdk.llm.tokens import OUTPUT_TOKEN_CAPS
from memory_sdk.results import TokenUsage
from tests.openai_server import FakeOpenAIServer, Reply

# Small enough that a test with retries waits milliseconds, not seconds.
FAST_BACKOFF_SEC = 0.01
TEST_KEY = "sk-test-key"
MESSAGES: list[ChatMessage] = [
    {"role": "system", "content": "Extract the people mentioned. Answer with JSON."},
    {"role": "user", "content": "Carol moved to Lisbon."},
]
ANSWER = {"people": [{"name": "Carol", "city": "Lisbon"}]}


class Person(BaseModel):
    name: str
    city: str | None = None


class PeopleScan(BaseModel):
    people: list[Person]


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as fake:
        yield fake


def make_provider(server: FakeOpenAIServer, **overrides: Any) -> OpenAIProvider:
    options: dict[str, Any] = {
        "base_url": server.base_url,
        "api_key": TEST_KEY,
        "backoff_base_sec": FAST_BACKOFF_SEC,
    }
    return OpenAIProvider(**(options | overrides))


def make_embedder(server: FakeOpenAIServer, **overrides: Any) -> OpenAIEmbedder:
    options: dict[str, Any] = {
        "base_url": server.base_url,
        "api_key": TEST_KEY,
        "backoff_base_sec": FAST_BACKOFF_SEC,
        "dimensions": 4,
    }
    return OpenAIEmbedder(**(options | overrides))


async def scan(provider: OpenAIProvider) -> Any:
    return await provider.complete(purpose="entity_scan", messages=MESSAGES, response_schema=PeopleScan)


async def test_providers_satisfy_the_protocols(server: FakeOpenAIServer) -> None:
    async with make_provider(server) as provider, make_embedder(server) as embedder:
        assert isinstance(provider, LLMProvider)
        assert isinstance(embedder, EmbeddingProvider)


async def test_complete_returns_text_and_usage_and_sends_the_json_schema(server: FakeOpenAIServer) -> None:
    server.script_chat(Reply.chat(ANSWER, input_tokens=40, output_tokens=12))

    async with make_provider(server, model="gpt-test", temperature=0.0) as provider:
        result = await scan(provider)

    assert json.loads(result.text) == ANSWER
    assert result.usage == TokenUsage(input_tokens=40, output_tokens=12)
    [request] = server.chat_requests
    assert request.authorization == f"Bearer {TEST_KEY}"
    assert request.body["model"] == "gpt-test"
    assert request.body["temperature"] == 0.0
    assert request.body["max_tokens"] == OUTPUT_TOKEN_CAPS["entity_scan"]  # a runaway answer stops at the cap
    assert request.body["messages"] == MESSAGES
    assert request.body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "PeopleScan", "schema": PeopleScan.model_json_schema(), "strict": False},
    }


@pytest.mark.parametrize(
    ("structured", "expected_format"),
    [("json_object", {"type": "json_object"}), ("none", None)],
)
async def test_structured_mode_picks_the_response_format(
    server: FakeOpenAIServer, structured: str, expected_format: dict[str, str] | None
) -> None:
    server.script_chat(Reply.chat(ANSWER))

    async with make_provider(server, structured=structured) as provider:
        await scan(provider)

    assert server.chat_requests[0].body.get("response_format") == expected_format


async def test_rate_limit_is_retried_then_succeeds(server: FakeOpenAIServer) -> None:
    server.script_chat(Reply.error(429, "slow down"), Reply.chat(ANSWER, input_tokens=30, output_tokens=7))

    async with make_provider(server) as provider:
        result = await scan(provider)

    assert json.loads(result.text) == ANSWER
    # The 429 reported no usage, so the sum over both attempts is the answered one.
    assert result.usage == TokenUsage(input_tokens=30, output_tokens=7)
    assert len(server.chat_requests) == 2


async def test_server_errors_raise_provider_error_after_max_attempts(server: FakeOpenAIServer) -> None:
    server.script_chat(*[Reply.error(500, "upstream broke")] * 3)

    async with make_provider(server, max_attempts=3) as provider:
        with pytest.raises(ProviderError, match="HTTP 500") as raised:
            await scan(provider)

    assert "3 attempts" in str(raised.value)
    assert isinstance(raised.value.__cause__, openai.InternalServerError)
    assert len(server.chat_requests) == 3


async def test_bad_request_is_not_retried(server: FakeOpenAIServer) -> None:
    server.script_chat(Reply.error(400, "unknown parameter"), Reply.chat(ANSWER))

    async with make_provider(server) as provider:
        with pytest.raises(ProviderError, match="HTTP 400"):
            await scan(provider)

    assert len(server.chat_requests) == 1


async def test_rejected_key_raises_provider_error_saying_so(server: FakeOpenAIServer) -> None:
    server.script_chat(Reply.error(401, "invalid api key"), Reply.chat(ANSWER))

    async with make_provider(server) as provider:
        with pytest.raises(ProviderError, match="API key was rejected") as raised:
            await scan(provider)

    assert TEST_KEY not in str(raised.value)
    assert len(server.chat_requests) == 1


async def test_slow_server_raises_provider_timeout_after_each_attempt_timed_out(
    server: FakeOpenAIServer,
) -> None:
    server.script_chat(Reply.slow(1.0), Reply.slow(1.0))

    async with make_provider(server, timeout_sec=0.2, max_attempts=2) as provider:
        with pytest.raises(ProviderTimeout, match=r"0\.2s \(2 attempts\)") as raised:
            await scan(provider)

    # The client's read timeout or the provider's deadline on the whole request, whichever fires first.
    assert isinstance(raised.value.__cause__, openai.APITimeoutError | TimeoutError)
    assert len(server.chat_requests) == 2


async def test_unreachable_server_raises_provider_error_after_retries() -> None:
    with FakeOpenAIServer() as stopped:
        base_url = stopped.base_url  # the port is free again once the server stops

    async with OpenAIProvider(
        base_url=base_url, api_key=TEST_KEY, backoff_base_sec=FAST_BACKOFF_SEC, max_attempts=2
    ) as provider:
        with pytest.raises(ProviderError, match=r"could not reach .*\(2 attempts\)"):
            await scan(provider)


@pytest.mark.parametrize(
    "wrapped",
    [
        f"```json\n{json.dumps(ANSWER)}\n```",
        f"<think>Carol is a person; Lisbon a city.</think>\n{json.dumps(ANSWER)}",
        f"<think>plan</think>Here it is:\n```\n{json.dumps(ANSWER)}\n```\nAnything else?",
    ],
    ids=["code-fence", "think-block", "think-and-fence-with-chatter"],
)
async def test_wrapped_json_is_accepted_and_returned_clean(server: FakeOpenAIServer, wrapped: str) -> None:
    server.script_chat(Reply.chat(wrapped))

    async with make_provider(server) as provider:
        result = await scan(provider)

    assert json.loads(result.text) == ANSWER
    assert len(server.chat_requests) == 1


async def test_malformed_json_is_repaired_with_a_nudge(server: FakeOpenAIServer) -> None:
    malformed = '{"people": [{"name": "Carol",'
    server.script_chat(
        Reply.chat(malformed, input_tokens=50, output_tokens=9),
        Reply.chat(ANSWER, input_tokens=70, output_tokens=11),
    )

    async with make_provider(server) as provider:
        result = await scan(provider)

    assert json.loads(result.text) == ANSWER
    assert result.usage == TokenUsage(input_tokens=120, output_tokens=20)
    first, repair = server.chat_requests
    assert repair.body["messages"] == [
        *first.body["messages"],
        {"role": "assistant", "content": malformed},
        {"role": "user", "content": REPAIR_NUDGE},
    ]
    assert repair.body["response_format"] == first.body["response_format"]


async def test_malformed_json_twice_raises_invalid_response(server: FakeOpenAIServer) -> None:
    server.script_chat(
        Reply.chat("I think Carol moved.", input_tokens=40, output_tokens=6),
        Reply.chat("Sorry, Carol moved to Lisbon.", input_tokens=55, output_tokens=8),
    )

    async with make_provider(server) as provider:
        with pytest.raises(InvalidResponse, match="twice") as failure:
            await scan(provider)

    assert len(server.chat_requests) == 2
    # The failed answers still cost tokens: the error carries them so the write's tokens_used counts them.
    assert failure.value.usage == TokenUsage(input_tokens=95, output_tokens=14)


@pytest.mark.parametrize("provider_class", [OpenAIProvider, OpenAIEmbedder])
def test_missing_key_and_base_url_raise_provider_not_configured(
    monkeypatch: pytest.MonkeyPatch, provider_class: type[OpenAIProvider | OpenAIEmbedder]
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)

    with pytest.raises(ProviderNotConfigured, match="OPENAI_API_KEY"):
        provider_class()


async def test_base_url_alone_is_enough_for_a_local_server(
    server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    server.script_chat(Reply.chat(ANSWER))

    async with OpenAIProvider() as provider:
        result = await scan(provider)

    assert json.loads(result.text) == ANSWER
    assert server.chat_requests[0].authorization is not None


async def test_client_passed_in_stays_open_and_gets_no_retries_of_its_own(server: FakeOpenAIServer) -> None:
    server.script_chat(Reply.error(500))
    async with openai.AsyncOpenAI(base_url=server.base_url, api_key=TEST_KEY) as client:
        async with OpenAIProvider(client=client, max_attempts=1) as provider:
            with pytest.raises(ProviderError, match="HTTP 500"):
                await scan(provider)

        assert not client.is_closed()
    assert len(server.chat_requests) == 1


async def test_each_call_logs_one_info_line_without_bodies_or_key(
    server: FakeOpenAIServer, caplog: pytest.LogCaptureFixture
) -> None:
    server.script_chat(Reply.chat(ANSWER, input_tokens=40, output_tokens=12))

    async with make_provider(server, model="gpt-test") as provider:
        with caplog.at_level(logging.INFO, logger="memory_sdk"):
            await scan(provider)

    [record] = [record for record in caplog.records if record.name == "memory_sdk"]
    line = record.getMessage()
    assert "purpose=entity_scan" in line
    assert "model=gpt-test" in line
    assert "tokens=52" in line
    assert "Carol" not in line
    assert TEST_KEY not in line


async def test_embedder_batches_in_order_and_sends_dimensions(server: FakeOpenAIServer) -> None:
    texts = ["Carol", "Lisbon", "moved", "Carolina", "a cat"]

    async with make_embedder(server, model="text-embedding-3-small", batch_size=2) as embedder:
        vectors = await embedder.embed(texts)

    assert vectors == [FakeOpenAIServer.vector_for(text, 4) for text in texts]
    requests = server.embedding_requests
    assert [request.body["input"] for request in requests] == [texts[0:2], texts[2:4], texts[4:5]]
    assert all(request.body["dimensions"] == 4 for request in requests)
    assert all(request.body["model"] == "text-embedding-3-small" for request in requests)


async def test_embedder_empty_input_makes_no_request(server: FakeOpenAIServer) -> None:
    async with make_embedder(server) as embedder:
        assert await embedder.embed([]) == []

    assert server.requests == []


async def test_embedder_retries_rate_limits_and_server_errors(server: FakeOpenAIServer) -> None:
    server.script_embeddings(Reply.error(429), Reply.error(503), Reply.embeddings())

    async with make_embedder(server, max_attempts=3) as embedder:
        vectors = await embedder.embed(["Carol"])

    assert vectors == [FakeOpenAIServer.vector_for("Carol", 4)]
    assert len(server.embedding_requests) == 3


async def test_embedder_rejects_vectors_of_another_size(server: FakeOpenAIServer) -> None:
    # Models other than text-embedding-3 get no `dimensions`; this server then answers with 8 dimensions.
    async with make_embedder(server, model="nomic-embed-text", dimensions=4) as embedder:
        with pytest.raises(ProviderError, match="8 dimensions, expected 4"):
            await embedder.embed(["Carol"])

    assert "dimensions" not in server.embedding_requests[0].body
