"""MemoryClient: wiring and the public API. The pipeline lives in memory_sdk.pipeline; this file only connects
the database, the providers and the config, validates input, and exposes the reads."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any
from uuid import UUID

from memory_sdk import corrections, erasure
from memory_sdk.bulk import DEFAULT_IMPORT_CONCURRENCY, ImportMessage, import_messages
from memory_sdk.config import MemoryConfig
from memory_sdk.errors import ConfigError, InvalidInputError, ProviderNotConfigured, StorageError, UsageError
from memory_sdk.export import export_agent, restore_agent
from memory_sdk.llm.protocols import EmbeddingProvider, LLMProvider
from memory_sdk.pipeline.consolidation import consolidate_agent
from memory_sdk.pipeline.llm_calls import embed_checked
from memory_sdk.pipeline.relatives import relative_of
from memory_sdk.pipeline.runner import run_write
from memory_sdk.pipeline.state import Deps, WriteRequest
from memory_sdk.prompt_context import fit_context
from memory_sdk.results import (
    ConsolidationResult,
    Context,
    Entity,
    Event,
    Fact,
    FactCorrection,
    ImportProgress,
    ImportSummary,
    PipelineTrace,
    Relationship,
    SearchHit,
    TraceStep,
    WriteResult,
)
from memory_sdk.store import queries, reads, registry
from memory_sdk.store.database import DEFAULT_POOL_SIZE, DEFAULT_POOL_TIMEOUT_SEC, Database
from memory_sdk.store.embedded import default_data_dir, start_embedded_server
from memory_sdk.store.integrity import IntegrityReport, check_integrity
from memory_sdk.store.search import SearchOutcome, SearchRequest, current_profiles, search_facts
from memory_sdk.validation import (
    check_agent,
    check_budget,
    check_confidence,
    check_event_id,
    check_flag,
    check_k,
    check_limit,
    check_moment,
    check_name,
    check_query,
    validate_write,
)
from memory_sdk.vector_space import DEFAULT_REEMBED_BATCH, check_embedder, reembed_agent

__all__ = ["MemoryClient"]

logger = logging.getLogger("memory_sdk")

# Writes in flight per client: enough to keep a 10-connection pool busy while most writes wait on the LLM.
DEFAULT_MAX_CONCURRENT_WRITES = 64
# Facts context() ranks before fitting its budget: more than an 800-token budget holds (~40 tokens a fact line).
CONTEXT_CANDIDATES = 40


class MemoryClient:
    """The SDK's entry point: an async context manager around one database.

    >>> async with MemoryClient(llm=OpenAIProvider(), embedder=OpenAIEmbedder()) as memory:
    ...     result = await memory.write("user_123", "Moro em Curitiba", speaker_name="Rafael")
    ...     facts = await memory.get_facts("user_123", entity="Rafael")

    With no `database_url` (and no MEMORY_SDK_DATABASE_URL) it starts, or reuses, an embedded PostgreSQL with
    pgvector in `data_dir` (MEMORY_SDK_DATA_DIR, else a per-user data directory).

    Load: `pool_size` connections (default 10) serve every write and read of the client; a transaction that finds
    them all busy waits up to `pool_timeout` seconds (default 300) for one, then raises StorageError. At most
    `max_concurrent_writes` writes (default 64) run at once; more wait their turn, they never fail for it.
    """

    def __init__(
        self,
        database_url: str | None = None,
        *,
        data_dir: str | Path | None = None,
        llm: LLMProvider | None = None,
        embedder: EmbeddingProvider | None = None,
        config: MemoryConfig | None = None,
        resolution_llm: LLMProvider | None = None,
        pool_size: int = DEFAULT_POOL_SIZE,
        pool_timeout: float = DEFAULT_POOL_TIMEOUT_SEC,
        max_concurrent_writes: int = DEFAULT_MAX_CONCURRENT_WRITES,
    ) -> None:
        for name, value in (("pool_size", pool_size), ("max_concurrent_writes", max_concurrent_writes)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be a positive int, got {value!r}")
        if isinstance(pool_timeout, bool) or not isinstance(pool_timeout, int | float) or pool_timeout <= 0:
            raise ConfigError(f"pool_timeout must be a positive number of seconds, got {pool_timeout!r}")
        self._pool_size = pool_size
        self._pool_timeout = float(pool_timeout)
        self._write_slots = asyncio.Semaphore(max_concurrent_writes)
        if embedder is not None and not isinstance(embedder, EmbeddingProvider):
            raise ConfigError("embedder must implement EmbeddingProvider (dimensions, async embed(texts))")
        for name, provider in (("llm", llm), ("resolution_llm", resolution_llm)):
            if provider is not None and not isinstance(provider, LLMProvider):
                raise ConfigError(f"{name} must implement LLMProvider (async complete(purpose, messages, ...))")
        if config is None:
            config = MemoryConfig(embedding_dim=embedder.dimensions) if embedder is not None else MemoryConfig()
        if embedder is not None and embedder.dimensions != config.embedding_dim:
            raise ConfigError(
                f"embedder produces {embedder.dimensions}-dimensional vectors but "
                f"config.embedding_dim is {config.embedding_dim}"
            )
        self.config = config
        self._database_url = database_url or os.environ.get("MEMORY_SDK_DATABASE_URL") or None
        self._data_dir = Path(data_dir).expanduser() if data_dir is not None else None
        self._llm = llm
        self._resolution_llm = resolution_llm
        self._embedder = embedder
        self._owned: list[Any] = []
        self._db: Database | None = None
        self._schema_version = 0
        # Agents whose recorded embedder this client has matched (or recorded): checked once per client. The lock
        # of an agent being checked makes the writes that arrive meanwhile wait for that check instead of each
        # running its own (a burst of first writes: 640 checks for 32 agents in benchmarks/throughput.py).
        self._embedder_checked: set[str] = set()
        self._embedder_checking: dict[str, asyncio.Lock] = {}

    # -- lifecycle -------------------------------------------------------------------------------------------

    async def __aenter__(self) -> MemoryClient:
        await self.open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def open(self) -> None:
        """Connect (starting the embedded server if needed) and apply pending migrations."""
        if self._db is not None:
            return
        url = self._database_url
        if url is None:
            url = await asyncio.to_thread(start_embedded_server, self._data_dir or default_data_dir())
        database = Database(
            url,
            pool_size=self._pool_size,
            pool_timeout=self._pool_timeout,
            subject_code_cache_mb=self.config.subject_code_cache_mb,
        )
        try:
            self._schema_version = await database.migrate(self.config.embedding_dim, apply=self.config.migrate_on_open)
        except BaseException:
            await database.dispose()
            raise
        self._db = database

    async def close(self) -> None:
        """Release the connection pool and any provider the client created itself."""
        for owned in self._owned:
            await owned.aclose()
        self._owned.clear()
        if self._db is not None:
            await self._db.dispose()
            self._db = None

    @property
    def schema_version(self) -> int:
        """The schema version of the open database (0 before open())."""
        return self._schema_version

    @property
    def database(self) -> Database:
        if self._db is None:
            raise UsageError("MemoryClient is not open: use 'async with MemoryClient(...) as memory'")
        return self._db

    def _providers(self) -> tuple[LLMProvider, EmbeddingProvider]:
        """The configured providers; the OpenAI defaults are built on first use from the environment."""
        embedder = self._embedding_provider()
        return self._llm_provider(), embedder

    def _llm_provider(self) -> LLMProvider:
        """The configured LLM, else OpenAIProvider built on first use (consolidate needs no embedder)."""
        if self._llm is None:
            from memory_sdk.llm.openai import OpenAIProvider

            with _hint_providers():
                self._llm = OpenAIProvider()
            self._owned.append(self._llm)
        return self._llm

    def _embedding_provider(self) -> EmbeddingProvider:
        """The configured embedder, else OpenAIEmbedder built on first use (reembed needs no LLM)."""
        if self._embedder is None:
            from memory_sdk.llm.openai import OpenAIEmbedder

            with _hint_providers():
                self._embedder = OpenAIEmbedder(dimensions=self.config.embedding_dim)
            self._owned.append(self._embedder)
        return self._embedder

    # -- write ------------------------------------------------------------------------------------------------

    async def write(
        self,
        agent_id: str,
        message: str,
        speaker_name: str,
        occurred_at: datetime | None = None,
        recent_messages: Sequence[str] | None = None,
        dry_run: bool = False,
        verbose: bool = False,
        config_overrides: Mapping[str, Any] | None = None,
        message_id: str | None = None,
        participants: Sequence[str] | None = None,
        language: str | None = None,
    ) -> WriteResult:
        """Turn one message into versioned memory; see docs/write-pipeline.md for every stage.

        >>> result = await memory.write("user_123", "Me mudei pra São Paulo ontem", speaker_name="Rafael",
        ...                             occurred_at=datetime(2025, 6, 15, tzinfo=UTC))
        >>> result.facts_updated, result.tokens_used.total_tokens

        Bad input raises InvalidInputError (or ConfigError for overrides), and an embedder other than the one the
        agent's vectors come from raises EmbedderMismatch (see reembed), before anything is stored. Stage
        failures never raise: they are in `result.error` and, with verbose=True, in `result.pipeline`.

        `message_id` makes the write idempotent (docs/recovery.md): a second write with the same id for this agent
        stores nothing and returns the first write's outcome with `duplicate=True`, also when both arrive at once
        (the second waits for the first); if the first write failed or its process died, the second finishes it.
        The same id with a different message or speaker raises InvalidInputError.

        `dry_run=True` runs the whole write, model calls included, and rolls it back: the result (and its cost) is
        the real write's, nothing is stored (docs/write-pipeline.md, "Dry runs").

        `participants` names the other people of the conversation (the speakers of `recent_messages`' "Name: ..."
        lines count too): a nickname of one of them ("Mel" for Melanie) is that person.

        `language` ("de", "pt-BR") picks the lexicon of the word rules; without it the language is detected from the
        message, and a message in a language with no lexicon gets the language-neutral rules only. Every change the
        SDK made to the model's answer is on `result.adjustments` (docs/write-pipeline.md, "The guard contract").
        """
        config = self.config.with_overrides(config_overrides)
        request = validate_write(
            agent_id,
            message,
            speaker_name,
            occurred_at,
            recent_messages,
            config,
            dry_run,
            verbose,
            message_id,
            participants,
            language,
        )
        if not request.message.strip():
            # Guard: nothing to remember costs nothing and stores nothing.
            trace = PipelineTrace(steps=[TraceStep(name="guard", data={"empty_message": True})])
            return WriteResult(success=True, dry_run=dry_run, pipeline=trace if verbose else None)
        llm, embedder = self._providers()
        try:
            await self._check_embedder(request.agent_id, embedder, record=not dry_run)
        except StorageError as exc:
            # Like any stage's storage failure: in the result, not raised; nothing was stored.
            error = f"embedder_check: {type(exc).__name__}: {exc}"
            trace = PipelineTrace(steps=[TraceStep(name="embedder_check", data={"error": error})])
            return WriteResult(success=False, dry_run=dry_run, error=error, pipeline=trace if verbose else None)
        async with self._write_slots:
            return await run_write(request, self._deps(config, llm, embedder))

    async def _check_embedder(self, agent_id: str, embedder: EmbeddingProvider, *, record: bool) -> None:
        """EmbedderMismatch unless the agent's vectors come from this client's embedder (vector_space.py)."""
        if agent_id in self._embedder_checked:
            return
        if not record:  # a dry run checks without recording, so it proves nothing for the writes after it
            await check_embedder(self.database, agent_id, embedder, record=False)
            return
        lock = self._embedder_checking.setdefault(agent_id, asyncio.Lock())
        try:
            async with lock:
                if agent_id not in self._embedder_checked:  # else checked while this write waited
                    await check_embedder(self.database, agent_id, embedder, record=True)
                    self._embedder_checked.add(agent_id)
        finally:
            # The writes already waiting hold the lock itself; later ones find the agent checked (or, after a
            # refusal, check again under a new lock).
            self._embedder_checking.pop(agent_id, None)

    def _deps(self, config: MemoryConfig, llm: LLMProvider, embedder: EmbeddingProvider) -> Deps:
        return Deps(
            db=self.database,
            llm=llm,
            resolution_llm=self._resolution_llm or llm,
            embedder=embedder,
            config=config,
            schema_version=self._schema_version,
        )

    # -- recovery -------------------------------------------------------------------------------------------

    async def reprocess(
        self,
        agent_id: str,
        event_id: UUID | str | None = None,
        *,
        limit: int = 100,
        max_attempts: int = 3,
        verbose: bool = False,
    ) -> list[WriteResult]:
        """Finish the writes that did not: events whose latest run failed, was cancelled, or was left `running`
        by a dead process (no heartbeat for config.run_stale_after_sec). With `event_id`, that event only.

        Each runs through the same pipeline as write(), from the stored event, in message order; nothing stored
        already is stored twice (identical facts are NOOPs, an event reinforces an edge once). An event with
        `max_attempts` runs already, or one a live write still holds, is left alone: its result says so. One
        WriteResult per event taken up, at most `limit`. The events' `recent_messages` were not stored, so the
        model sees none. See docs/recovery.md.
        """
        check_agent(agent_id)
        for name, value in (("limit", limit), ("max_attempts", max_attempts)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInputError(f"{name} must be a positive int, got {value!r}")
        check_flag("verbose", verbose)
        wanted = None if event_id is None else check_event_id(event_id)
        async with self.database.tenant(agent_id) as conn:
            if wanted is None:
                ids = await queries.unfinished_events(
                    conn, agent_id=agent_id, stale_after_sec=self.config.run_stale_after_sec, limit=limit
                )
            else:
                ids = [wanted]
            events = await queries.stored_events(conn, agent_id=agent_id, event_ids=ids)
        if wanted is not None and not events:
            raise InvalidInputError(f"agent {agent_id!r} has no event {wanted}")
        llm, embedder = self._providers()
        await self._check_embedder(agent_id, embedder, record=True)
        deps = self._deps(self.config, llm, embedder)
        results = []
        for event in events:
            request = WriteRequest(
                agent_id=agent_id,
                message=event.content,
                speaker_name=event.speaker,
                occurred_at=event.occurred_at,
                recent_messages=(),
                dry_run=False,
                verbose=verbose,
                message_id=event.message_id,
                event_id=event.id,
                max_attempts=max_attempts,
            )
            async with self._write_slots:
                results.append(await run_write(request, deps))
        return results

    async def reembed(self, agent_id: str, *, batch_size: int = DEFAULT_REEMBED_BATCH) -> dict[str, int]:
        """Recompute every vector of the agent (events, facts, entity names) with this client's embedder, record
        it as the agent's embedder, and return the rows re-embedded per table.

        >>> async with MemoryClient(embedder=LocalEmbedder()) as memory:
        ...     await memory.reembed("user_123")       # {"events": 9, "facts": 14, "entities": 8}

        For an agent whose writes raise EmbedderMismatch after a change of embedder. Stop writing to the agent
        meanwhile (a client that already wrote to it with the old embedder is not checked again); interrupted,
        run it again. Batches of `batch_size` rows, each read and written in its own short transaction. The
        vector size is the database's: an embedder of another size needs another database.
        """
        check_agent(agent_id)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidInputError(f"batch_size must be a positive int, got {batch_size!r}")
        embedder = self._embedding_provider()
        counts = await reembed_agent(self.database, agent_id, embedder, batch_size=batch_size)
        self._embedder_checked.add(agent_id)
        return counts

    async def consolidate(self, agent_id: str, entity: str | None = None) -> ConsolidationResult:
        """Rebuild the profiles older than their entity's facts, from the current facts, and merge near-duplicate
        current facts; with `entity` (a name, alias or key), that entity only, stale or not.

        >>> report = await memory.consolidate("user_123")     # e.g. nightly, or after every 50 writes
        >>> report.entities_consolidated, report.llm_calls, report.failures

        One LLM call (`profile_consolidation`) per entity rebuilt; an entity whose facts have not changed since its
        profile was built costs nothing. A failing entity is reported in `failures` and the others go on. Safe to
        run beside writes: each entity's merge takes the locks a write about it takes. See docs/consolidation.md.
        An unknown `entity` raises InvalidInputError.
        """
        check_agent(agent_id)
        key = None
        if entity is not None:
            entity = check_name("entity", entity)
            async with self.database.transaction(agent_id) as session:
                key = await self._entity_key(session, agent_id, entity)
            if key is None:
                raise InvalidInputError(f"agent {agent_id!r} has no entity {entity!r}")
        return await consolidate_agent(self.database, self._llm_provider(), self.config, agent_id, key)

    async def merge_entities(self, agent_id: str, from_key: str, into_key: str) -> dict[str, int]:
        """Merge one entity into another: its aliases, facts, fact links and relationships move to `into_key`, and
        its key becomes an alias of the survivor (the record of the merge). Returns what moved, per kind.

        >>> await memory.merge_entities("user_123", "person:mel", "person:melanie")

        Runs under the same locks as a write about either entity. An unknown key raises InvalidInputError.
        """
        check_agent(agent_id)
        from_key, into_key = check_name("from_key", from_key), check_name("into_key", into_key)
        if from_key == into_key:
            raise InvalidInputError(f"cannot merge {from_key!r} into itself")
        try:
            async with self.database.tenant(agent_id) as conn:
                counts = await registry.merge_entities(conn, agent_id, from_key, into_key)
        except LookupError as exc:
            raise InvalidInputError(str(exc)) from exc
        logger.info("merge agent=%s from=%s into=%s", agent_id, from_key, into_key)
        return counts

    async def forget(self, agent_id: str) -> dict[str, int]:
        """Erase every row of the agent, its event log and pipeline runs included, in one transaction; return the
        rows deleted per table. Other agents are untouched. Writes of this agent still in flight may land after
        it: stop writing first. See docs/recovery.md ("Forgetting")."""
        check_agent(agent_id)
        async with self.database.tenant(agent_id) as conn:
            counts = await queries.erase_agent(conn, agent_id)
        self._embedder_checked.discard(agent_id)
        logger.info("forget agent=%s rows=%d", agent_id, sum(counts.values()))
        return counts

    async def delete_fact(self, agent_id: str, fact_id: UUID | str, reason: str | None = None) -> FactCorrection:
        """Retract one current fact as the user: it is closed now and invalidated, the relationships it is evidence
        for end with it (the invalidation cascade), its history stays, and a record of the retraction (source_context
        "user_retraction", with `reason`) is stored as its successor, never current. No LLM call.

        >>> done = await memory.delete_fact("user_123", fact.id, reason="never lived there")
        >>> done.closed, done.relationships_closed

        An unknown fact id, or another agent's, raises InvalidInputError (one message for both); so does a fact that
        is no longer current (see fact_history). Nothing changes on a refused call.
        """
        check_agent(agent_id)
        fact_uuid = corrections.check_fact_id(fact_id)
        return await corrections.delete_fact(self.database, agent_id, fact_uuid, reason, self._schema_version)

    async def correct_fact(
        self,
        agent_id: str,
        fact_id: UUID | str,
        text: str,
        *,
        attribute: str | None = None,
        valid_from: datetime | None = None,
    ) -> FactCorrection:
        """Replace one current fact by the user's `text`: a new version that supersedes it (source_context
        "user_correction"), embedded with this client's embedder and applied as an UPDATE decision of a write, so a
        single-valued attribute keeps one open value and the edges the old version backed end. No LLM call.

        >>> fixed = await memory.correct_fact("user_123", fact.id, "Ana lives in Porto")
        >>> fixed.added.text, fixed.closed[0].invalidated_at

        Without `valid_from` the correction takes the fact's place from its start (it was wrong, not changed: the
        old version is retracted); with one, the old version is history until then. `attribute` defaults to the
        fact's. Refused like delete_fact, and when the text is what the fact, or another current fact of the same
        subject, already says.
        """
        check_agent(agent_id)
        fact_uuid = corrections.check_fact_id(fact_id)
        valid_from = check_moment("valid_from", valid_from)
        embedder = self._embedding_provider()
        await self._check_embedder(agent_id, embedder, record=True)
        return await corrections.correct_fact(
            self.database,
            embedder,
            self.config,
            self._schema_version,
            agent_id,
            fact_uuid,
            text,
            attribute=attribute,
            valid_from=valid_from,
        )

    async def fact_history(self, agent_id: str, fact_id: UUID | str) -> list[Fact]:
        """Every version of a fact's chain, oldest first: what it superseded and what superseded it, user
        corrections and retractions included. An unknown fact id, or another agent's, raises InvalidInputError.

        >>> [(v.text, v.valid_from, v.valid_to) for v in await memory.fact_history("user_123", fact.id)]
        """
        check_agent(agent_id)
        return await corrections.fact_history(self.database, agent_id, corrections.check_fact_id(fact_id))

    async def forget_event(self, agent_id: str, event_id: UUID | str) -> dict[str, int]:
        """Erase one message and what was derived only from it, for good (an erasure request about one message):
        the event, its pipeline runs, the fact versions it alone is the source of, the edges they backed, the
        entities and aliases it alone created, and every quote of it in other runs' stored results and traces. A
        fact another message said again stays, with that message as its source; a version the message closed is
        current again unless something that stays closed it; the profiles of the entities it touched are cleared
        until the next consolidate(). Returns what changed, counted per kind. No LLM call.

        >>> counts = await memory.forget_event("user_123", result.event_id)
        >>> counts["facts_erased"], counts["facts_reopened"]

        An unknown event id, or another agent's, raises InvalidInputError (one message for both); so does an event
        whose write is still running. See docs/recovery.md ("Forgetting one event").
        """
        check_agent(agent_id)
        return await erasure.forget_event(self.database, agent_id, check_event_id(event_id))

    async def check(self, agent_id: str) -> IntegrityReport:
        """Look for damage in the agent's memory, reading only: edges without a current fact, several open values
        of one attribute, facts or runs naming a missing event, tables and indexes that disagree, PostgreSQL's
        own btree check where the server has amcheck (store/integrity.py lists the checks).

        >>> report = await memory.check("user_123")
        >>> report.ok, [str(problem) for problem in report.problems]
        """
        check_agent(agent_id)
        report = await check_integrity(self.database, agent_id)
        logger.info("check agent=%s problems=%d", agent_id, len(report.problems))
        return report

    # -- reads ------------------------------------------------------------------------------------------------

    async def get_facts(
        self,
        agent_id: str,
        entity: str | None = None,
        as_of: datetime | None = None,
        known_at: datetime | None = None,
        include_history: bool = False,
        min_confidence: float | None = None,
    ) -> list[Fact]:
        """Current facts; facts true at `as_of`; facts believed at `known_at`; or every version.

        `entity` is a display name, an alias or an entity key; facts linked to it are included. Facts below
        `min_confidence` (default: config.min_confidence) are left out. Bad arguments raise InvalidInputError
        (limits in docs/errors.md).
        """
        check_agent(agent_id)
        entity = None if entity is None else check_name("entity", entity)
        as_of, known_at = check_moment("as_of", as_of), check_moment("known_at", known_at)
        include_history = check_flag("include_history", include_history)
        floor = check_confidence(min_confidence)
        async with self.database.transaction(agent_id) as session:
            key = await self._entity_key(session, agent_id, entity)
            if entity is not None and key is None:
                return []
            return await reads.read_facts(
                session,
                agent_id,
                entity_key=key,
                as_of=as_of,
                known_at=known_at,
                include_history=include_history,
                min_confidence=self.config.min_confidence if floor is None else floor,
            )

    async def get_entity(self, agent_id: str, name: str) -> Entity | None:
        """The entity known by this name, alias or key, with its aliases and profile (None if unknown)."""
        check_agent(agent_id)
        name = check_name("name", name)
        async with self.database.transaction(agent_id) as session:
            return await reads.read_entity(session, agent_id, name, *_other_names(name))

    async def get_relationships(
        self,
        agent_id: str,
        entity: str | None = None,
        as_of: datetime | None = None,
        include_invalidated: bool = False,
        known_at: datetime | None = None,
    ) -> list[Relationship]:
        """Current edges (touching `entity` when given); edges valid at `as_of`; edges the memory held at
        `known_at` (transaction time, as for facts); or every edge ever stored."""
        check_agent(agent_id)
        entity = None if entity is None else check_name("entity", entity)
        as_of, known_at = check_moment("as_of", as_of), check_moment("known_at", known_at)
        include_invalidated = check_flag("include_invalidated", include_invalidated)
        async with self.database.transaction(agent_id) as session:
            key = await self._entity_key(session, agent_id, entity)
            if entity is not None and key is None:
                return []
            return await reads.read_relationships(
                session,
                agent_id,
                entity_key=key,
                as_of=as_of,
                known_at=known_at,
                include_invalidated=include_invalidated,
            )

    async def get_events(self, agent_id: str, limit: int | None = None, *, newest: bool = False) -> list[Event]:
        """The agent's immutable message log, oldest first: the first `limit` events, or with newest=True the
        last `limit` (still oldest first). `limit` is None (all) or 1..10,000."""
        check_agent(agent_id)
        limit = check_limit(limit)
        newest = check_flag("newest", newest)
        async with self.database.transaction(agent_id) as session:
            return await reads.read_events(session, agent_id, limit, newest=newest)

    async def get_trace(self, agent_id: str, event_id: UUID | str) -> PipelineTrace | None:
        """The stored pipeline trace of the write that logged `event_id` (a UUID or its string)."""
        check_agent(agent_id)
        event_id = check_event_id(event_id)
        async with self.database.transaction(agent_id) as session:
            return await reads.read_trace(session, agent_id, event_id)

    @staticmethod
    async def _entity_key(session: Any, agent_id: str, entity: str | None) -> str | None:
        return None if entity is None else await reads.find_entity_key(session, agent_id, entity, *_other_names(entity))

    # -- bulk import, export and restore (memory_sdk/bulk.py, memory_sdk/export.py) ---------------------------

    async def write_many(
        self,
        agent_id: str,
        messages: Iterable[ImportMessage | Mapping[str, Any]],
        *,
        concurrency: int = DEFAULT_IMPORT_CONCURRENCY,
        progress: Callable[[ImportProgress], None] | None = None,
    ) -> ImportSummary:
        """Write many messages of one agent in `occurred_at` order, resumably; see docs/import-export.md.

        >>> summary = await memory.write_many("user_123", [ImportMessage(text=..., speaker=..., occurred_at=...)])
        >>> summary.written, summary.duplicates, summary.failures

        Each message goes through write() with its `message_id` (or one derived from when, who and what): run an
        interrupted import again and what was written comes back as `duplicates`. A bad message is a failure in
        the summary, not an exception; `progress` hears about every message.
        """
        return await import_messages(self, messages, agent_id=agent_id, concurrency=concurrency, progress=progress)

    async def write_chat(
        self,
        agent_id: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        user_name: str = "user",
        assistant_name: str = "assistant",
        occurred_at: datetime | None = None,
        dry_run: bool = False,
        verbose: bool = False,
        config_overrides: Mapping[str, Any] | None = None,
        participants: Sequence[str] | None = None,
        language: str | None = None,
    ) -> list[WriteResult]:
        """Write a chat as an app holds it, OpenAI-style (`role`, `content`, optional `name`), one write() per turn.

        >>> chat = [{"role": "user", "content": "I moved to Porto"}, {"role": "assistant", "content": "Nice!"}]
        >>> results = await memory.write_chat("user_123", chat, user_name="Rafael", assistant_name="Ava")

        A turn's speaker is its `name`, else `user_name` for "user" and `assistant_name` for "assistant"; system,
        developer and tool turns (and an assistant turn with no content: a tool call) are not written. Each turn
        gets the earlier turns as `recent_messages` ("speaker: text") and a `message_id` hashed from its role, name,
        content and the previous turn's id: send the same conversation again, longer, and only the new turns are
        written (keep `user_name`/`assistant_name` the same across calls: the same id with another speaker raises
        InvalidInputError). Returns the WriteResults of the turns written by this call, in order; turns written
        before (duplicates) are left out. A message of the wrong shape raises InvalidInputError naming its index,
        before anything is written.
        """
        check_agent(agent_id)
        turns = _chat_turns(messages, check_name("user_name", user_name), check_name("assistant_name", assistant_name))
        limit = self.config.with_overrides(config_overrides).recent_messages_limit
        results = []
        for position, turn in enumerate(turns):
            earlier = turns[max(0, position - limit) : position] if limit else ()
            result = await self.write(
                agent_id,
                turn.content,
                turn.speaker,
                occurred_at=occurred_at,
                recent_messages=[f"{said.speaker}: {said.content}" for said in earlier],
                dry_run=dry_run,
                verbose=verbose,
                config_overrides=config_overrides,
                message_id=turn.message_id,
                participants=participants,
                language=language,
            )
            if not result.duplicate:
                results.append(result)
        return results

    async def import_messages(
        self,
        messages: Iterable[ImportMessage | Mapping[str, Any]],
        *,
        concurrency: int = DEFAULT_IMPORT_CONCURRENCY,
        progress: Callable[[ImportProgress], None] | None = None,
    ) -> ImportSummary:
        """write_many for messages of several agents, each naming its `agent_id`: each agent's messages in time
        order one after another, up to `concurrency` agents at once."""
        return await import_messages(self, messages, agent_id=None, concurrency=concurrency, progress=progress)

    async def export(self, agent_id: str) -> dict[str, Any]:
        """The agent's whole memory as a versioned JSON-able document (events, runs, entities, aliases, every fact
        version, links, relationships; no vectors).

        >>> json.dump(await memory.export("user_123"), open("user_123.json", "w"))
        """
        check_agent(agent_id)
        return await export_agent(self.database, agent_id, schema_version=self._schema_version)

    async def restore(self, document: Mapping[str, Any], *, agent_id: str | None = None) -> dict[str, int]:
        """Put an export back, into the exported agent or `agent_id`, which must have no memory yet; no LLM call.
        Vectors are recomputed with this client's embedder. Returns the rows restored per table. Every row is
        checked as write() checks its arguments, and may name only rows of the document: a bad one raises
        InvalidInputError with its path (`facts[3].source_event_id`) and nothing is restored.

        >>> await memory.restore(json.load(open("user_123.json")), agent_id="user_123_copy")
        """
        target = None if agent_id is None else check_agent(agent_id)
        embedder = self._embedding_provider()
        counts = await restore_agent(
            self.database, embedder, document, agent_id=target, max_message_chars=self.config.max_message_chars
        )
        self._embedder_checked.discard(target or str(document.get("agent_id")))
        return counts

    # -- search -----------------------------------------------------------------------------------------------

    async def search(
        self,
        agent_id: str,
        query: str,
        k: int = 10,
        entity: str | None = None,
        as_of: datetime | None = None,
        known_at: datetime | None = None,
        min_confidence: float | None = None,
    ) -> list[SearchHit]:
        """The k facts most relevant to `query`, best first: vector similarity, full text and the graph around
        the entities the query names, fused by reciprocal rank (docs/search.md).

        >>> hits = await memory.search("user_123", "where does Clara work?", k=5)
        >>> [(hit.fact.text, hit.entity_name, hit.signals) for hit in hits]

        `entity`, `as_of`, `known_at` and `min_confidence` filter as in get_facts: facts about that entity only,
        true at `as_of`, believed at `known_at`, at least that confident (default config.min_confidence). The query
        is embedded with this client's embedder (EmbedderMismatch if the agent's vectors come from another one);
        an embedder failure raises ProviderError. Bad arguments raise InvalidInputError.
        """
        check_agent(agent_id)
        query = check_query("query", query)
        k = check_k(k)
        entity = None if entity is None else check_name("entity", entity)
        as_of, known_at = check_moment("as_of", as_of), check_moment("known_at", known_at)
        floor = check_confidence(min_confidence)
        request = await self._search_request(agent_id, query, k, as_of, known_at, floor)
        async with self.database.transaction(agent_id) as session:
            key = await self._entity_key(session, agent_id, entity)
            if entity is not None and key is None:
                return []
            outcome = await search_facts(session, agent_id, replace(request, entity_key=key))
        return _search_hits(outcome)

    async def context(self, agent_id: str, message: str, budget_tokens: int = 800) -> Context:
        """The profiles of the entities `message` names and the facts search() ranks highest for it, within
        `budget_tokens` (the SDK's estimate): what a chat app puts into its prompt before answering.

        >>> ctx = await memory.context("user_123", "Is Clara still at Orion Tech?", budget_tokens=400)
        >>> prompt = f"{ctx.text}\n\nUser: Is Clara still at Orion Tech?"

        Current memory only, at config.min_confidence; a profile older than its entity's facts is left out (its
        facts stand in for it), as in the write path's pre-retrieval. Bad arguments raise InvalidInputError.
        """
        check_agent(agent_id)
        message = check_query("message", message)
        budget_tokens = check_budget(budget_tokens)
        request = await self._search_request(agent_id, message, CONTEXT_CANDIDATES, None, None, None)
        async with self.database.transaction(agent_id) as session:
            outcome = await search_facts(session, agent_id, request)
            profiles = []
            for row in await current_profiles(session, agent_id, outcome.named):
                found = await reads.read_entity(session, agent_id, row.key)
                if found is not None:
                    profiles.append(found)
        return fit_context(profiles, _search_hits(outcome), budget_tokens)

    async def _search_request(
        self,
        agent_id: str,
        query: str,
        k: int,
        as_of: datetime | None,
        known_at: datetime | None,
        floor: float | None,
    ) -> SearchRequest:
        """The query embedded (before any transaction opens: none waits on the provider) with its filters."""
        embedder = self._embedding_provider()
        await self._check_embedder(agent_id, embedder, record=False)
        [embedding] = await embed_checked(embedder, [query], self.config)
        return SearchRequest(
            text=query,
            embedding=list(embedding),
            k=k,
            entity_key=None,
            as_of=as_of,
            known_at=known_at,
            min_confidence=self.config.min_confidence if floor is None else floor,
        )


def _other_names(name: str) -> tuple[str, ...]:
    """The canonical form under which writes register a relative of a named owner: "Melanie's kids" is stored as
    "Melanie's children", "a irmã da Ana" as "Ana's sister" (pipeline/relatives.py), so a read by either finds it."""
    found = relative_of(name, "")
    if found is None or not found.owner or found.own_name is not None:
        return ()
    return (f"{found.owner}'s {found.term}",)


def _search_hits(outcome: SearchOutcome) -> list[SearchHit]:
    return [
        SearchHit(
            fact=hit.fact,
            entity_key=hit.fact.entity_key,
            entity_name=outcome.entity_names.get(hit.fact.entity_key, hit.fact.entity_key),
            score=hit.score,
            signals=hit.ranks,
        )
        for hit in outcome.hits
    ]


# The roles of an OpenAI-style chat that say something to remember, and those that do not (instructions, tools).
_SPOKEN_ROLES = ("user", "assistant")
_UNSPOKEN_ROLES = ("system", "developer", "tool", "function")


@dataclass(frozen=True)
class _ChatTurn:
    """One turn of write_chat to write: who said it, what, and its derived message id."""

    speaker: str
    content: str
    message_id: str


def _chat_turns(messages: object, user_name: str, assistant_name: str) -> list[_ChatTurn]:
    """The turns of an OpenAI-style chat to write, each with a message id chained from the previous turn's (so a
    turn's id depends on the conversation before it, not on its position); InvalidInputError names a bad index."""
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence):
        raise InvalidInputError(f"messages must be a list of chat messages, got {type(messages).__name__}")
    turns: list[_ChatTurn] = []
    previous = ""
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, Mapping):
            raise InvalidInputError(f"{where} must be a mapping ('role', 'content'), not {type(message).__name__}")
        role, name, content = message.get("role"), message.get("name"), message.get("content", ...)
        if role not in _SPOKEN_ROLES + _UNSPOKEN_ROLES:
            raise InvalidInputError(f"{where}.role must be one of {', '.join(_SPOKEN_ROLES + _UNSPOKEN_ROLES)}")
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise InvalidInputError(f"{where}.name must be a non-empty str when given")
        if content is ...:
            raise InvalidInputError(f"{where} has no 'content'")
        if role in _UNSPOKEN_ROLES or (content is None and role == "assistant"):
            continue
        text = _chat_text(where, content)
        if not text.strip():  # write() would store nothing for it, again on every resend
            continue
        key = "\x1f".join((previous, role, name or "", text)).encode("utf-8", "surrogatepass")
        previous = f"chat:{hashlib.sha256(key).hexdigest()[:32]}"
        speaker = name or (user_name if role == "user" else assistant_name)
        turns.append(_ChatTurn(speaker=speaker, content=text, message_id=previous))
    return turns


def _chat_text(where: str, content: object) -> str:
    """A turn's text: a str, or the text parts of a list of content parts (images and audio are not remembered)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, Mapping) or not isinstance(part.get("type"), str):
                raise InvalidInputError(f"{where}.content parts must be mappings with a 'type'")
            if part["type"] == "text":
                if not isinstance(part.get("text"), str):
                    raise InvalidInputError(f"{where}.content text part must have a str 'text'")
                texts.append(part["text"])
        return "\n".join(texts)
    raise InvalidInputError(f"{where}.content must be a str or a list of content parts, got {type(content).__name__}")


@contextmanager
def _hint_providers() -> Iterator[None]:
    """ProviderNotConfigured from a default provider, with how to configure one."""
    try:
        yield
    except ProviderNotConfigured as exc:
        raise ProviderNotConfigured(
            f"{exc} Pass llm= and embedder= to MemoryClient, or set OPENAI_API_KEY / OPENAI_BASE_URL."
        ) from exc
