"""Work the SDK does beside the writes rather than inside them, agent by agent, on one background task.

Two kinds use it: the facts' HNSW index filled after their write commits (store/indexing.FactIndexer) and large
subjects' codes loaded for the client's cache (store/subject_codes.EntryLoader). Both are owned by a Database and
share its pool; neither is ever waited for by a write. A failure is logged (a warning of the `memory_sdk` logger) and
counted (`failures`, `last_error`), never raised into the write that asked for the work: what it would have done is
asked for again by a later write.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Generic, TypeVar

__all__ = ["AgentQueue"]

logger = logging.getLogger("memory_sdk")

_T = TypeVar("_T")


class AgentQueue(Generic[_T]):
    """Agents waiting for work, each with what it was asked for (`_T`), served one at a time in the order they came,
    on one task of the running event loop, started when work arrives and ended when none is left."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._waiting: dict[str, _T] = {}
        # The agent being served and its work, while it is.
        self._serving: tuple[str, _T] | None = None
        self._task: asyncio.Task[None] | None = None
        self.failures = 0
        self.last_error: str | None = None

    @property
    def busy(self) -> bool:
        return self._task is not None and not self._task.done()

    def _start(self) -> None:
        """Serve the agents waiting, unless the task already runs (it takes them too)."""
        if self._waiting and not self.busy:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"memory_sdk {self._name}")

    async def drain(self) -> None:
        """Wait until every agent asked for so far (and since) is served. Cancelling the caller leaves the task."""
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)

    async def close(self) -> None:
        """Stop: the agents waiting are dropped, the one being served is cancelled."""
        self._waiting.clear()
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _serve(self, agent_id: str, work: _T) -> None:
        raise NotImplementedError

    def _failed(self, agent_id: str, work: _T) -> str:
        """What was not done, for the log (the error follows it)."""
        raise NotImplementedError

    async def _run(self) -> None:
        while self._waiting:
            agent_id = next(iter(self._waiting))
            work = self._waiting.pop(agent_id)
            self._serving = (agent_id, work)
            try:
                await self._serve(agent_id, work)
            except Exception as exc:  # noqa: BLE001 - logged and counted; a later write asks again
                self.failures += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
                logger.warning("memory_sdk: %s: %s", self._failed(agent_id, work), self.last_error)
            finally:
                self._serving = None
