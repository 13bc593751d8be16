"""One vector space per agent: the guard that refuses a second embedder, and the re-embedding that switches.

An agent's vectors (events, facts, entity names) are compared with each other by cosine; vectors of two models
compare as noise, so the embedder of an agent's first write is recorded (store/embedders.py) and a write with
another embedder raises EmbedderMismatch before anything is stored. `reembed_agent` recomputes every vector of
the agent with a new embedder and records it.
"""

from __future__ import annotations

import logging
from uuid import UUID

from memory_sdk.errors import EmbedderMismatch, InvalidResponse, ProviderError
from memory_sdk.llm.protocols import EmbeddingProvider, embedder_id
from memory_sdk.pipeline.llm_calls import vector_problem
from memory_sdk.store import embedders
from memory_sdk.store.database import Database

__all__ = ["DEFAULT_REEMBED_BATCH", "check_embedder", "embed_texts", "reembed_agent"]

logger = logging.getLogger("memory_sdk")

# Rows re-embedded per transaction: one embedding request and one UPDATE each; small enough that a batch's
# transaction is short, large enough that OpenAI's per-request overhead is spread (LocalEmbedder: ~0.3 s a batch).
DEFAULT_REEMBED_BATCH = 64


async def check_embedder(db: Database, agent_id: str, embedder: EmbeddingProvider, *, record: bool) -> None:
    """Raise EmbedderMismatch when the agent's vectors come from another embedder; with `record`, an agent with
    none recorded gets this one (its first write). A dry run checks without recording: it stores nothing."""
    configured = embedder_id(embedder)
    recorded: embedders.RecordedEmbedder | None
    async with db.tenant(agent_id) as conn:
        if record:
            recorded = await embedders.claim_embedder(conn, agent_id, configured, embedder.dimensions)
        else:
            recorded = await embedders.recorded_embedder(conn, agent_id)
    if recorded is not None and recorded.embedder != configured:
        raise EmbedderMismatch(
            f"agent {agent_id!r}'s memory was embedded with {recorded.embedder}; this client embeds with "
            f"{configured}. Use {recorded.embedder}, or re-embed the agent with this one: "
            f"`await memory.reembed({agent_id!r})` or `memory-sdk reembed {agent_id}`",
            recorded=recorded.embedder,
            configured=configured,
        )


async def reembed_agent(
    db: Database, agent_id: str, embedder: EmbeddingProvider, *, batch_size: int = DEFAULT_REEMBED_BATCH
) -> dict[str, int]:
    """Recompute every vector of the agent with `embedder`; return the rows re-embedded per table.

    The new embedder is recorded first, so from then on a client with the old one is refused instead of adding
    old-space vectors behind the re-embedding. Each batch is read in one transaction and written in another,
    with the embedding call between them (no transaction waits on a provider). Interrupted, the agent holds
    vectors of both spaces under the new record: run it again, it redoes every row.
    """
    identity = embedder_id(embedder)
    async with db.tenant(agent_id) as conn:
        await embedders.record_embedder(conn, agent_id, identity, embedder.dimensions)
    counts: dict[str, int] = {}
    for table in embedders.EMBEDDED_TABLES:
        counts[table] = await _reembed_table(db, agent_id, embedder, table, batch_size)
    logger.info("reembed agent=%s embedder=%s rows=%d", agent_id, identity, sum(counts.values()))
    return counts


async def _reembed_table(
    db: Database, agent_id: str, embedder: EmbeddingProvider, table: embedders.EmbeddedTable, batch_size: int
) -> int:
    done = 0
    after: UUID | None = None
    while True:
        async with db.tenant(agent_id) as conn:
            rows = await embedders.texts_after(conn, agent_id, table, after, batch_size)
        if not rows:
            return done
        vectors = await embed_texts(embedder, [text for _, text in rows])
        async with db.tenant(agent_id) as conn:
            done += await embedders.update_vectors(conn, agent_id, table, [row_id for row_id, _ in rows], vectors)
        after = rows[-1][0]


async def embed_texts(embedder: EmbeddingProvider, texts: list[str], purpose: str = "reembed") -> list[list[float]]:
    """The batch's vectors, each fit to store (the write path's checks); any failure is a ProviderError naming
    `purpose` (reembed, restore)."""
    try:
        vectors = await embedder.embed(texts)
    except ProviderError:
        raise
    except Exception as exc:  # a custom provider may raise anything; one typed error for the caller
        raise ProviderError(f"{purpose}: {type(exc).__name__}: {exc}") from exc
    if len(vectors) != len(texts):
        raise InvalidResponse(f"{purpose}: {len(vectors)} vectors for {len(texts)} texts")
    for index, vector in enumerate(vectors):
        problem = vector_problem(vector, embedder.dimensions)
        if problem is not None:
            raise InvalidResponse(f"{purpose}: vector {index + 1} of {len(vectors)} {problem}")
    return vectors
