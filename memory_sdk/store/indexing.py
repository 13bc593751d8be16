"""The facts' HNSW index, filled right after the write instead of inside it (migration 0012).

pgvector's HNSW insert is 2-3 ms of server CPU per fact (docs/benchmarks.md, "The fact insert"), the
largest part of a write's largest statement, and nothing on the write's own path reads the index: candidates are
ranked exactly or over binary codes (store/candidates.py). Search reads it. So the write inserts its facts with
`indexed = false` (outside the index's predicate) and, once the transaction that inserted them has committed, the
Database's FactIndexer sets `indexed = true` in a transaction of its own, in the background: that UPDATE is what
inserts them into the graph. Until then search ranks them exactly beside its walk of the graph (store/search.py):
a fact is searchable the moment its write commits, as before.

- Which agents: a transaction that inserted facts marks its connection (`mark`, from store/queries.insert_facts);
  Database.tenant hands the marks to the indexer after COMMIT, and drops them on a rollback (a dry run, a failed
  write). The indexer then takes every current unindexed fact of the agent (ix_memory_facts_unindexed), whoever
  inserted it: the facts a crashed process left behind are indexed by the agent's next write. A batch is one
  statement in one round trip (Database.tenant_script: the tenant setting and the UPDATE in one simple query).
- Concurrency: the indexer locks its batch with FOR UPDATE SKIP LOCKED, so it never waits on a write's row locks
  and a write that must change a fact being indexed waits for one short UPDATE at most; it takes none of the
  writes' advisory locks. Setting `indexed` fires no trigger that a cache or a profile listens to (0011).
- Failures are logged and counted (`FactIndexer.failures`, `last_error`), never raised into a write: the facts stay
  unindexed and searchable, and the agent's next write tries again.
- Database.dispose() drains the indexer first, so a short-lived process (a CLI write) leaves nothing unindexed.
"""

from __future__ import annotations

import weakref
from collections.abc import Awaitable, Callable

from memory_sdk.store.background import AgentQueue

__all__ = ["INDEX_BATCH", "INDEX_SQL", "FactIndexer", "mark", "take_marks"]

# Facts set `indexed` per transaction: each is an HNSW insert (2-3 ms of server CPU), so a batch holds its row locks
# for about a second at most; an agent with more (an import) takes several transactions.
INDEX_BATCH = 256

# One batch, run by Database.tenant_script after the tenant setting in one implicit transaction (one round trip):
# the agent is the tenant's (row-level security), and `current_setting` names it here too.
INDEX_SQL = """
    WITH picked AS (
        SELECT id FROM memory_facts
        WHERE agent_id = current_setting('memory_sdk.agent_id') AND valid_to IS NULL AND invalidated_at IS NULL
          AND NOT indexed
        LIMIT {batch}
        FOR UPDATE SKIP LOCKED
    )
    UPDATE memory_facts f SET indexed = true FROM picked WHERE f.id = picked.id
    """

# Per connection, the agents whose facts its open transaction inserted (weak: a closed connection leaves).
_MARKS: weakref.WeakKeyDictionary[object, set[str]] = weakref.WeakKeyDictionary()


def mark(connection: object, agent_id: str) -> None:
    """Record that the transaction open on `connection` inserted unindexed facts of `agent_id`."""
    _MARKS.setdefault(connection, set()).add(agent_id)


def take_marks(connection: object) -> set[str]:
    """The agents marked on `connection` since the last call, forgotten there."""
    return _MARKS.pop(connection, set())


class FactIndexer(AgentQueue[None]):
    """Adds the current unindexed facts of the agents it is given to the HNSW index, one agent at a time, in
    batches of `batch`, on one background task of the running event loop."""

    def __init__(self, run: Callable[[str, str], Awaitable[str]], batch: int = INDEX_BATCH) -> None:
        super().__init__("fact indexer")
        self._run_script, self._batch = run, batch
        self.indexed = 0

    def schedule(self, agent_id: str) -> None:
        """Index `agent_id`'s unindexed facts soon (its turn comes after the agents already waiting)."""
        self._waiting[agent_id] = None
        self._start()

    async def index_agent(self, agent_id: str) -> int:
        """Index every current unindexed fact of `agent_id` now; how many."""
        total = 0
        while True:
            status = await self._run_script(agent_id, INDEX_SQL.format(batch=int(self._batch)))
            done = int(status.rpartition(" ")[2])
            total += done
            self.indexed += done
            if done < self._batch:
                return total

    async def _serve(self, agent_id: str, work: None) -> None:
        await self.index_agent(agent_id)

    def _failed(self, agent_id: str, work: None) -> str:
        return (
            f"facts of agent {agent_id!r} not added to the search index yet (searched exactly meanwhile; its next"
            " write tries again)"
        )
