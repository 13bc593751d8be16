"""The sync client: MemoryClient's methods for code with no event loop (scripts, notebooks, Flask or Django views).

>>> with Memory(llm=OpenAIProvider(), embedder=OpenAIEmbedder()) as memory:
...     memory.write("user_123", "Moro em Curitiba", speaker_name="Rafael")
...     facts = memory.get_facts("user_123", entity="Rafael")

One event loop per `Memory`, run in its own daemon thread from open() to close(): the connection pool and every
provider's connections live on that loop, and each call is handed to it with `asyncio.run_coroutine_threadsafe`, so
any thread may call any method at once (calling `asyncio.run` per call instead gives "attached to a different loop").
See docs/sync.md.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from memory_sdk.client import DEFAULT_MAX_CONCURRENT_WRITES, MemoryClient
from memory_sdk.config import MemoryConfig
from memory_sdk.errors import UsageError
from memory_sdk.llm.protocols import EmbeddingProvider, LLMProvider
from memory_sdk.store.database import DEFAULT_POOL_SIZE, DEFAULT_POOL_TIMEOUT_SEC

__all__ = ["Memory"]

P = ParamSpec("P")
T = TypeVar("T")

# How long close() waits for the loop thread to finish its clean-up before giving up on it (it is a daemon thread).
CLOSE_JOIN_TIMEOUT_SEC = 30.0


def _sync(
    method: Callable[Concatenate[MemoryClient, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[Memory, P], T]:
    """The blocking form of a MemoryClient coroutine method: same parameters, same docstring without the awaits."""

    @functools.wraps(method)
    def call(self: Memory, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._run(lambda client: method(client, *args, **kwargs))

    call.__doc__ = (method.__doc__ or "").replace("await ", "").replace("async with ", "with ")
    return call


class Memory:
    """MemoryClient for sync code: the same constructor arguments and methods, each call blocking until done.

    >>> memory = Memory(llm=llm, embedder=embedder)      # or: with Memory(...) as memory:
    >>> memory.open()
    >>> result = memory.write("user_123", "Moro em Curitiba", speaker_name="Rafael")
    >>> memory.close()

    Safe to call from any number of threads; the calls run concurrently on the client's own loop, within the same
    limits as MemoryClient's (pool_size, max_concurrent_writes). A call after close() raises UsageError. Do not
    call it from inside a callback the SDK runs (a write_many `progress`): that runs on the loop and would wait on
    itself, so it raises UsageError too. `open()` after `close()` starts a new loop and a new MemoryClient with the
    same arguments (providers you passed are reused: they must not hold connections tied to the old loop).
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
        self._make_client: Callable[[], MemoryClient] = functools.partial(
            MemoryClient,
            database_url,
            data_dir=data_dir,
            llm=llm,
            embedder=embedder,
            config=config,
            resolution_llm=resolution_llm,
            pool_size=pool_size,
            pool_timeout=pool_timeout,
            max_concurrent_writes=max_concurrent_writes,
        )
        self._client: MemoryClient | None = self._make_client()  # bad arguments raise ConfigError here, as there
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------------------------

    def __enter__(self) -> Memory:
        self.open()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def client(self) -> MemoryClient:
        """The MemoryClient this wraps (its coroutines run only on this Memory's loop)."""
        if self._client is None:
            raise UsageError("Memory is closed: use 'with Memory(...) as memory' or call open() first")
        return self._client

    @property
    def config(self) -> MemoryConfig:
        return self.client.config

    @property
    def is_open(self) -> bool:
        return self._loop is not None

    def open(self) -> None:
        """Start the client's event loop thread, then connect as MemoryClient.open() does (no-op when open)."""
        with self._lock:
            if self._loop is not None:
                return
            client = self._client if self._client is not None else self._make_client()
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=_run_loop, args=(loop,), name="memory-sdk-loop", daemon=True)
            thread.start()
            try:
                asyncio.run_coroutine_threadsafe(client.open(), loop).result()
            except BaseException:
                _stop_loop(loop, thread)
                raise
            self._client, self._loop, self._thread = client, loop, thread

    def close(self) -> None:
        """Close the client (its pool and the providers it created), then stop and close the loop; idempotent.

        Calls still running from other threads are cancelled and raise UsageError."""
        with self._lock:
            loop, thread, client = self._loop, self._thread, self._client
            if loop is None or thread is None or client is None:
                return
            self._loop = self._thread = None
            self._client = None  # the next open() builds a fresh client: its locks belong to the old loop
            try:
                asyncio.run_coroutine_threadsafe(client.close(), loop).result()
            finally:
                _stop_loop(loop, thread)

    def _run(self, start: Callable[[MemoryClient], Coroutine[Any, Any, T]]) -> T:
        """Run one client coroutine on the loop and wait for its result (its exception is raised here)."""
        with self._lock:
            loop, thread, client = self._loop, self._thread, self._client
            if loop is None or client is None:
                raise UsageError("Memory is closed: use 'with Memory(...) as memory' or call open() first")
            if threading.current_thread() is thread:
                raise UsageError("a Memory method was called from its own event loop (a callback): it would deadlock")
            future = asyncio.run_coroutine_threadsafe(start(client), loop)
        try:
            return future.result()
        except concurrent.futures.CancelledError as exc:
            raise UsageError("Memory was closed while the call was running") from exc
        except BaseException:
            future.cancel()  # KeyboardInterrupt in the caller: do not leave the coroutine running on the loop
            raise

    # -- MemoryClient's methods, blocking (signatures and docstrings are MemoryClient's) ----------------------

    write = _sync(MemoryClient.write)
    write_chat = _sync(MemoryClient.write_chat)
    write_many = _sync(MemoryClient.write_many)
    import_messages = _sync(MemoryClient.import_messages)
    get_facts = _sync(MemoryClient.get_facts)
    get_entity = _sync(MemoryClient.get_entity)
    get_relationships = _sync(MemoryClient.get_relationships)
    get_events = _sync(MemoryClient.get_events)
    get_trace = _sync(MemoryClient.get_trace)
    search = _sync(MemoryClient.search)
    context = _sync(MemoryClient.context)
    forget = _sync(MemoryClient.forget)
    delete_fact = _sync(MemoryClient.delete_fact)
    correct_fact = _sync(MemoryClient.correct_fact)
    fact_history = _sync(MemoryClient.fact_history)
    forget_event = _sync(MemoryClient.forget_event)
    export = _sync(MemoryClient.export)
    restore = _sync(MemoryClient.restore)
    reprocess = _sync(MemoryClient.reprocess)
    reembed = _sync(MemoryClient.reembed)
    consolidate = _sync(MemoryClient.consolidate)
    merge_entities = _sync(MemoryClient.merge_entities)
    check = _sync(MemoryClient.check)

    if not TYPE_CHECKING:  # untyped on purpose: a method mypy does not see here is one to add above

        def __getattr__(self, name: str) -> Callable[..., Any]:
            """The blocking form of a public MemoryClient coroutine method not listed above (added later)."""
            method = getattr(MemoryClient, name, None) if not name.startswith("_") else None
            if method is None or not inspect.iscoroutinefunction(method):
                raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
            return functools.partial(_sync(method), self)


def _run_loop(loop: asyncio.AbstractEventLoop) -> None:
    """The loop thread: run until stopped, then cancel what is left and shut the loop down without warnings."""
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
    finally:
        try:
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            asyncio.set_event_loop(None)
            loop.close()


def _stop_loop(loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
    loop.call_soon_threadsafe(loop.stop)
    thread.join(CLOSE_JOIN_TIMEOUT_SEC)
