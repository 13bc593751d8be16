"""Extraction quality with a real model: realistic messages (English and Portuguese, relative dates, aliases,
corrections) written through `MemoryClient.write()` against any OpenAI-compatible server.

Prints, per message: extraction path, entities, facts (with decisions), relations, LLM calls, tokens, seconds,
and a summary with the valid-JSON rate (LLM calls that parsed / all LLM calls).

    python benchmarks/extraction_quality.py --base-url http://127.0.0.1:8088/v1 --model qwen2.5-coder-1.5b-instruct
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from datetime import UTC, datetime

from _common import decided_facts

from memory_sdk import MemoryClient, MemoryConfig, WriteResult
from memory_sdk.llm.openai import OpenAIProvider
from memory_sdk.store.embedded import temporary_embedded_server
from memory_sdk.testing import HashEmbedder

# (speaker, occurred_at, message): one agent, in order, so later messages see what earlier ones stored.
MESSAGES: list[tuple[str, datetime, str]] = [
    ("Rafael", datetime(2025, 3, 2, 10, tzinfo=UTC), "Moro em Curitiba e trabalho na Acme como engenheiro de dados."),
    (
        "Rafael",
        datetime(2025, 3, 9, 18, tzinfo=UTC),
        "Meu amigo Guili (Guilherme Maturana) está liderando o projeto novo.",
    ),
    ("Rafael", datetime(2025, 3, 10, 9, tzinfo=UTC), "Falei com o Guili ontem. O Guilherme disse que tá no prazo."),
    (
        "Rafael",
        datetime(2025, 4, 1, 12, tzinfo=UTC),
        "Clara Rezende saiu da Vertix e foi pra Orion Tech como head de engenharia. "
        "O Thiago Nogueira a contratou pessoalmente.",
    ),
    ("Rafael", datetime(2025, 5, 20, 20, tzinfo=UTC), "My sister Julia started a PhD in Lisbon last week."),
    ("Rafael", datetime(2025, 6, 15, 8, tzinfo=UTC), "Yesterday I moved to a new apartment in São Paulo."),
    ("Rafael", datetime(2025, 6, 20, 21, tzinfo=UTC), "Não trabalho mais na Acme. Agora estou na Orion Tech."),
    ("Rafael", datetime(2025, 7, 1, 13, tzinfo=UTC), "Actually Julia's PhD is in Porto, not Lisbon."),
]


def summarise(result: WriteResult) -> tuple[int, int]:
    """(calls, parsed calls) of one write, from its trace."""
    assert result.pipeline is not None
    calls = [call for step in result.pipeline.steps for call in step.llm_calls]
    return len(calls), sum(call.status == "ok" for call in calls)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--timeout", type=float, default=180.0, help="extraction_timeout_sec for a slow local model")
    args = parser.parse_args()
    llm = OpenAIProvider(model=args.model, base_url=args.base_url, api_key=args.api_key, timeout_sec=args.timeout)
    config = MemoryConfig(extraction_timeout_sec=args.timeout)
    agent = f"quality-{int(time.time())}"
    total_calls = total_ok = total_tokens = 0
    total_seconds = 0.0
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(llm.aclose)
        url = stack.enter_context(temporary_embedded_server("memory-sdk-quality-"))
        memory = await stack.enter_async_context(MemoryClient(url, llm=llm, embedder=HashEmbedder(), config=config))
        for n, (speaker, when, message) in enumerate(MESSAGES, start=1):
            started = time.perf_counter()
            result = await memory.write(agent, message, speaker_name=speaker, occurred_at=when, verbose=True)
            seconds = time.perf_counter() - started
            calls, ok = summarise(result)
            total_calls, total_ok = total_calls + calls, total_ok + ok
            total_tokens += result.tokens_used.total_tokens
            total_seconds += seconds
            print(f"\n[{n}] {when:%Y-%m-%d} {speaker}: {message}")
            print(
                f"    path={result.extraction_path} calls={calls} ok={ok} tokens={result.tokens_used.total_tokens} "
                f"seconds={seconds:.1f}" + (f" error={result.error}" if result.error else "")
            )
            for entity in result.entities_resolved:
                print(f"    entity   {entity.name!r} -> {entity.key} ({entity.phase})")
            for label, facts in decided_facts(result):
                for fact in facts:
                    since = f" since {fact.valid_from:%Y-%m-%d}" if fact.valid_from.date() != when.date() else ""
                    print(f"    {label:<8} [{fact.entity_key}] {fact.text}{since}")
            for rel in result.relationships:
                print(f"    relation {rel.source_key} -{rel.rel_type}-> {rel.target_key}")
        print("\nCurrent facts at the end:")
        for fact in await memory.get_facts(agent):
            print(f"    [{fact.entity_key}] {fact.text}")
    rate = total_ok / total_calls if total_calls else 0.0
    print(
        f"\nmodel={args.model} messages={len(MESSAGES)} llm_calls={total_calls} valid_json_rate={rate:.0%} "
        f"tokens={total_tokens} seconds_per_write={total_seconds / len(MESSAGES):.1f}"
    )


if __name__ == "__main__":
    asyncio.run(main())
