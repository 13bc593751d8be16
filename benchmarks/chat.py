"""Chat: LLM calls, tokens and seconds per write on unlabelled two-speaker chat, as an app would write it.

The truth corpus measures whether the memory ends right; this measures what a write costs on a longer, casual
chat (issue 11: at most 1.2 LLM calls per write). The conversations are `benchmarks/chat_corpus/*.json` (the truth
corpus's format without ideal answers or expectations); every message is written with the chat lines before it as
`recent_messages` ("Name: text"), as truth.py does. Per write (--verbose): calls, tokens, seconds and what was
stored; then calls per write, calls by purpose, re-asks and blind fallbacks, prompt tokens read and cached.

Without --base-url a scripted stand-in answers (one fact per message, every decision ADD): that only checks that
the script runs (CI); the figures mean something with a real model:
    python benchmarks/chat.py --base-url http://127.0.0.1:8088/v1 --model qwen2.5-coder-1.5b-instruct --verbose
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from _common import database, format_table, prompt_message
from truth import (
    Conversation,
    Written,
    calls_by_purpose,
    cost,
    embedder_kind,
    load_conversation,
    make_embedder,
    reading,
    real_model,
    write_conversation,
)

from memory_sdk import MemoryClient, MemoryConfig
from memory_sdk.llm.protocols import LLMProvider, LLMRequest
from memory_sdk.results import WriteResult
from memory_sdk.testing import ScriptedLLM

CORPUS = Path(__file__).resolve().parent / "chat_corpus"


def stand_in() -> ScriptedLLM:
    """A scripted model for the smoke run: the speaker said the message; every reconciliation verdict is ADD."""

    def informed(request: LLMRequest) -> dict[str, Any]:
        content = request.messages[-1]["content"]
        speaker = content.split("Speaker: ", 1)[1].split(".", 1)[0]
        message = prompt_message(request)
        said = {"subject": speaker, "text": f"{speaker} said: {message}", "evidence": message}
        fact = {**said, "action": "ADD", "importance_category": "conversational", "confidence": 0.95}
        return {"entities": [{"name": speaker, "type": "person"}], "facts": [fact], "relations": []}

    return ScriptedLLM(
        {
            "informed_extraction": informed,
            "reconciliation": lambda _: {"action": "ADD", "target": None},
            "reconciliation_batch": lambda _: {"decisions": []},
        }
    )


def providers(args: argparse.Namespace) -> tuple[LLMProvider, str]:
    if args.base_url is None:
        return stand_in(), "scripted stand-in (smoke run: the figures mean nothing)"
    return real_model(args)


def extra_calls(results: Sequence[WriteResult]) -> dict[str, int]:
    """Writes that paid more than one call, by why: a re-ask without memory, the blind path, a reconciliation call."""
    counts = {"writes over 1 call": 0, "re-asked without memory": 0, "blind path": 0, "reconciliation call": 0}
    for result in results:
        counts["writes over 1 call"] += result.llm_calls > 1
        steps = {step.name: step for step in result.pipeline.steps} if result.pipeline else {}
        extraction = steps.get("extraction")
        if extraction is not None:
            counts["re-asked without memory"] += "reasked_without_memory" in extraction.data
            counts["blind path"] += extraction.data.get("path") == "blind"
        reconciliation = steps.get("reconciliation")
        if reconciliation is not None:
            counts["reconciliation call"] += bool(reconciliation.data.get("reconciliation_calls"))
    return counts


def print_summary(conversations: Sequence[Conversation], written: Sequence[Written], label: str) -> None:
    results = [r for w in written for r in w.results]
    calls, tokens, seconds = cost(written)
    print(f"\nsummary ({label})")
    rows = [[c.id, str(len(w.results)), f"{cost([w])[0]:.2f}"] for c, w in zip(conversations, written, strict=True)]
    print(format_table(["conversation", "writes", "calls/write"], rows, left=1))
    print(f"writes {len(results)}; per write: {calls:.2f} LLM calls, {tokens:.0f} tokens, {seconds:.2f} s")
    print(reading(written))
    print(f"LLM calls by purpose: {calls_by_purpose(written)}")
    print(", ".join(f"{why} {count}" for why, count in extra_calls(results).items()))
    failed = [r for r in results if not r.success]
    print(f"writes reporting a failure: {len(failed)}")


async def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    kind = embedder_kind(args.embedder)
    paths = sorted(CORPUS.glob("*.json"))
    conversations = [load_conversation(path, kind) for path in paths]
    if args.only:
        conversations = [c for c in conversations if c.id in args.only]
    if args.quick:
        conversations = [replace(c, messages=c.messages[:6]) for c in conversations]
    llm, label = providers(args)
    label += ", LocalEmbedder" if kind == "local" else ", HashEmbedder"
    print(f"chat: {len(conversations)} conversations, {sum(len(c.messages) for c in conversations)} messages; {label}")
    config = MemoryConfig(extraction_timeout_sec=args.timeout)
    run, written_all = f"{int(time.time() * 1000) % 10**9}", []
    with database(args.database_url) as url:
        async with contextlib.AsyncExitStack() as stack:
            if hasattr(llm, "aclose"):
                stack.push_async_callback(llm.aclose)
            memory = await stack.enter_async_context(
                MemoryClient(url, llm=llm, embedder=make_embedder(kind), config=config)
            )
            for conversation in conversations:
                if args.verbose:
                    print(f"\n{conversation.id}: writing")
                written = await write_conversation(
                    memory, conversation, f"chat-{conversation.id}-{run}", verbose=args.verbose, traces=args.traces
                )
                written_all.append(written)
    print_summary(conversations, written_all, label)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--base-url", default=None, help="an OpenAI-compatible server (else a scripted stand-in)")
    parser.add_argument("--model", default=None, help="the model's name on that server")
    parser.add_argument("--api-key", default=None, help="the server's key (a local server needs none)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per LLM call (extraction_timeout_sec)")
    parser.add_argument(
        "--embedder", choices=("auto", "local", "hash"), default="auto", help="auto: local if installed"
    )
    parser.add_argument("--only", nargs="+", default=(), help="conversation ids")
    parser.add_argument("--quick", action="store_true", help="the first 6 messages of each conversation")
    parser.add_argument("--database-url", default=None, help="an existing database instead of a new embedded one")
    parser.add_argument("--verbose", action="store_true", help="print every write's calls and stored facts")
    parser.add_argument("--traces", type=Path, default=None, help="a directory to save every write's trace")
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main())
