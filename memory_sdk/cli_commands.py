"""The handlers of `memory-sdk write`, the reads (facts, entity, relationships, events, trace) and the upkeep
commands (reprocess, reembed, consolidate, forget, check, migrate). Each is `async def name(args) -> int` (the
exit status).

A read that finds nothing checks why: an agent with no memory, or an entity the agent does not know, is an error
with a hint (the agents here, the nearest entity names), not an empty table with exit status 0.
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import os
import sys
from contextlib import AsyncExitStack

from memory_sdk.cli import EXIT_ERROR, NotFound
from memory_sdk.cli_output import (
    one_line,
    print_counts,
    print_entity,
    print_events,
    print_facts,
    print_json,
    print_relationships,
    print_result,
    print_search,
    print_trace,
    progress,
    to_json,
    when,
)
from memory_sdk.cli_providers import CountedEmbedder, client, embedder, model_client, pick_agent_embedder, where
from memory_sdk.client import MemoryClient
from memory_sdk.errors import UsageError
from memory_sdk.llm.protocols import embedder_id
from memory_sdk.store import queries, reads

__all__ = [
    "check",
    "consolidate",
    "correct",
    "delete_fact",
    "entity",
    "events",
    "facts",
    "forget",
    "forget_event",
    "history",
    "migrate",
    "reembed",
    "relationships",
    "reprocess",
    "require_agent",
    "search",
    "trace",
    "write",
]

# How many agent ids and entity names a hint lists at most.
HINT_NAMES = 8


async def write(args: argparse.Namespace) -> int:
    if not (args.speaker or args.replay):
        raise UsageError("write needs --speaker NAME (who said the message); only --replay has a default")
    await pick_agent_embedder(args, args.agent)
    if args.replay:
        from memory_sdk.cli_demo import replay_write

        return await replay_write(args)
    async with AsyncExitStack() as stack, model_client(args, stack, "write") as memory:
        result = await memory.write(
            args.agent,
            args.message,
            args.speaker,
            occurred_at=args.occurred_at,
            dry_run=args.dry_run,
            verbose=args.verbose,
            message_id=args.message_id,
        )
    if args.json:
        print_json(to_json(result))
    else:
        print_result(result, calls=True, indent="")
        if result.pipeline is not None:
            print_trace(result.pipeline)
    return 0 if result.success else EXIT_ERROR


async def facts(args: argparse.Namespace) -> int:
    async with client(args) as memory:
        found = await memory.get_facts(
            args.agent, entity=args.entity, as_of=args.as_of, known_at=args.known_at, include_history=args.history
        )
        if not found:
            await explain_nothing(memory, args.agent, args.entity)
    print_facts(args, found)
    return 0


async def entity(args: argparse.Namespace) -> int:
    async with client(args) as memory:
        known = await memory.get_entity(args.agent, args.name)
        if known is None:
            await explain_nothing(memory, args.agent, args.name)
            raise NotFound(f"no entity named {args.name!r}")  # reached only if it appeared meanwhile
        current = [
            fact for fact in await memory.get_facts(args.agent, entity=known.key) if fact.entity_key == known.key
        ]
    print_entity(args, known, len(current))
    return 0


async def relationships(args: argparse.Namespace) -> int:
    async with client(args) as memory:
        found = await memory.get_relationships(
            args.agent,
            entity=args.entity,
            as_of=args.as_of,
            known_at=args.known_at,
            include_invalidated=args.history,
        )
        if not found:
            await explain_nothing(memory, args.agent, args.entity)
    print_relationships(args, found)
    return 0


async def events(args: argparse.Namespace) -> int:
    async with client(args) as memory:
        found = await memory.get_events(args.agent, limit=args.limit, newest=not args.oldest)
        if not found:
            await explain_nothing(memory, args.agent, None)
    print_events(args, found if args.oldest else found[::-1])
    return 0


async def trace(args: argparse.Namespace) -> int:
    async with client(args) as memory:
        found = await memory.get_trace(args.agent, args.event_id)
        if found is None:
            await explain_nothing(memory, args.agent, None)
            raise NotFound(
                f"no pipeline run recorded for event {args.event_id} of agent {args.agent!r} "
                f"(`memory-sdk events {args.agent}` lists its event ids)"
            )
    if args.json:
        print_json(to_json(found))
    else:
        print_trace(found, title=f"write of event {args.event_id}")
    return 0


async def explain_nothing(memory: MemoryClient, agent: str, name: str | None) -> None:
    """Raise NotFound with a hint when an empty read comes from an unknown agent or entity; return if it is real.

    The agent is unknown when its event log is empty (every write logs its message first); the entity is unknown
    when no key, alias or display name matches, and the hint lists the closest names the agent does know.
    """
    await require_agent(memory, agent)
    if name is None or await memory.get_entity(agent, name) is not None:
        return
    async with memory.database.transaction(agent) as session:
        names = await reads.entity_names(session, agent)
    near = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
    near += [known for known in names if name.casefold() in known.casefold() and known not in near][: 3 - len(near)]
    hint = f" (did you mean {', '.join(repr(known) for known in near)}?)" if near else ""
    raise NotFound(f"no entity named {name!r} in agent {agent!r}{hint}")


async def require_agent(memory: MemoryClient, agent: str) -> None:
    """NotFound with the agents here when `agent` has no memory (an empty event log: every write logs its message
    first): one answer for every command, reads, upkeep and erasure alike, and nothing created for it."""
    if not await memory.get_events(agent, limit=1):
        async with memory.database.transaction() as session:
            agents = await reads.agent_ids(session, limit=HINT_NAMES + 1)
        here = ", ".join(agents[:HINT_NAMES]) + (", ..." if len(agents) > HINT_NAMES else "")
        raise NotFound(f"agent {agent!r} has no memory" + (f"; agents here: {here}" if agents else "; none here yet"))


async def reprocess(args: argparse.Namespace) -> int:
    await pick_agent_embedder(args, args.agent)
    async with AsyncExitStack() as stack, model_client(args, stack, "reprocess") as memory:
        await require_agent(memory, args.agent)
        with progress(args, f"reprocessing agent {args.agent!r}"):
            results = await memory.reprocess(
                args.agent, args.event_id, limit=args.limit, max_attempts=args.max_attempts
            )
    if args.json:
        print_json(to_json(results))
    elif not results:
        print("(nothing to reprocess)")
    for result in [] if args.json else results:
        print(f"event {result.event_id}")
        print_result(result)
    return 0 if all(result.success for result in results) else EXIT_ERROR


async def reembed(args: argparse.Namespace) -> int:
    async with AsyncExitStack() as stack:
        chosen, note = embedder(args, stack)
        if not args.json:
            print(note, file=sys.stderr)
        async with client(args) as reader:  # no embedder: this one only counts, and creates no row for an unknown
            await require_agent(reader, args.agent)
            async with reader.database.transaction(args.agent) as session:
                stored = await queries.count_rows(session, args.agent)
        total = stored["memory_events"] + stored["memory_facts"] + stored["memory_entities"]
        with progress(args, f"re-embedding agent {args.agent!r}", total) as advance:
            async with client(args, embedder=CountedEmbedder(chosen, advance)) as memory:
                counts = await memory.reembed(args.agent, batch_size=args.batch_size)
    rows = sum(counts.values())
    print_counts(args, f"re-embedded {rows} rows of agent {args.agent!r} with {embedder_id(chosen)}", counts)
    return 0


async def consolidate(args: argparse.Namespace) -> int:
    async with AsyncExitStack() as stack, model_client(args, stack, "consolidate") as memory:
        await require_agent(memory, args.agent)
        with progress(args, f"consolidating agent {args.agent!r}"):
            report = await memory.consolidate(args.agent, entity=args.entity)
    if args.json:
        print_json(to_json(report))
        return 0 if report.success else EXIT_ERROR
    print(
        f"consolidated {len(report.entities_consolidated)} entities of agent {args.agent!r}, "
        f"merged {len(report.facts_merged)} facts, {report.llm_calls} LLM calls, "
        f"{report.tokens_used.total_tokens} tokens"
    )
    for merged in report.facts_merged:
        print(f"  merged {merged.text!r} into {merged.survivor_text!r}")
    for key, error in report.failures.items():
        print(f"  failed {key}: {' '.join(error.split())}")
    return 0 if report.success else EXIT_ERROR


async def forget(args: argparse.Namespace) -> int:
    if not args.yes:
        raise UsageError(f"forget erases every row of agent {args.agent!r} for good; add --yes to confirm")
    async with client(args) as memory:
        counts = await memory.forget(args.agent)
        if not any(counts.values()):  # erased nothing: the agent was not there, which is not "done"
            await require_agent(memory, args.agent)
    print_counts(args, f"erased {sum(counts.values())} rows of agent {args.agent!r}", counts)
    return 0


async def forget_event(args: argparse.Namespace) -> int:
    """`memory-sdk forget-event`: erase one message and what was derived only from it (MemoryClient.forget_event)."""
    if not args.yes:
        raise UsageError(
            f"forget-event erases event {args.event_id} of agent {args.agent!r} and what derived only from it "
            "for good; add --yes to confirm"
        )
    async with client(args) as memory:
        counts = await memory.forget_event(args.agent, args.event_id)
    print_counts(args, f"erased event {args.event_id} of agent {args.agent!r}", counts)
    return 0


async def delete_fact(args: argparse.Namespace) -> int:
    """`memory-sdk delete-fact`: the user's retraction of one fact (MemoryClient.delete_fact)."""
    async with client(args) as memory:
        done = await memory.delete_fact(args.agent, args.fact_id, reason=args.reason)
    if args.json:
        print_json(to_json(done))
        return 0
    [fact] = done.closed
    print(f"deleted fact {fact.id}: {one_line(fact.text)!r}")
    print(f"  relationships closed: {len(done.relationships_closed)}")
    print(f"  history kept: `memory-sdk history {args.agent} {fact.id}`")
    return 0


async def correct(args: argparse.Namespace) -> int:
    """`memory-sdk correct`: the user's correction of one fact, embedded with the chosen embedder, no model call."""
    await pick_agent_embedder(args, args.agent)
    async with AsyncExitStack() as stack:
        chosen, note = embedder(args, stack)
        if not args.json:
            print(note, file=sys.stderr)
        async with client(args, embedder=chosen) as memory:
            fixed = await memory.correct_fact(
                args.agent, args.fact_id, args.text, attribute=args.attribute, valid_from=args.valid_from
            )
    if args.json:
        print_json(to_json(fixed))
        return 0
    old = fixed.closed[0] if fixed.closed else None
    new = fixed.added
    print(f"corrected fact {args.fact_id}: {one_line(old.text) if old else ''!r}")
    if new is not None:
        print(f"  now: {one_line(new.text)!r} (fact {new.id}, valid from {when(new.valid_from)})")
    print(f"  relationships closed: {len(fixed.relationships_closed)}")
    return 0


async def history(args: argparse.Namespace) -> int:
    """`memory-sdk history`: every version of one fact's chain, oldest first."""
    async with client(args) as memory:
        versions = await memory.fact_history(args.agent, args.fact_id)
    print_facts(args, versions)
    return 0


async def check(args: argparse.Namespace) -> int:
    """`memory-sdk check`: every problem on its own line; exit status 1 when there is one (store/integrity.py)."""
    async with client(args) as memory:
        report = await memory.check(args.agent)
        if report.ok and not any(report.rows.values()):
            await explain_nothing(memory, args.agent, None)
    if args.json:
        print_json(to_json(report))
        return 0 if report.ok else EXIT_ERROR
    rows = ", ".join(f"{table} {count}" for table, count in report.rows.items())
    print(f"checked agent {args.agent!r}: {rows}")
    for note in report.notes:
        print(f"  note: {note}")
    if report.ok:
        print("no problems found")
        return 0
    print(f"{len(report.problems)} problem(s) found:")
    for problem in report.problems:
        print(f"  {problem}")
    return EXIT_ERROR


async def search(args: argparse.Namespace) -> int:
    """`memory-sdk search`: the hits best first, embedded like the agent's vectors (its recorded embedder)."""
    await pick_agent_embedder(args, args.agent)
    async with AsyncExitStack() as stack:
        chosen, note = embedder(args, stack)
        if not args.json:
            print(note, file=sys.stderr)
        async with client(args, embedder=chosen) as memory:
            hits = await memory.search(
                args.agent, args.query, k=args.k, entity=args.entity, as_of=args.as_of, known_at=args.known_at
            )
            if not hits and not args.json:
                await explain_nothing(memory, args.agent, args.entity)
    print_search(args, hits)
    return 0


async def migrate(args: argparse.Namespace) -> int:
    """`memory-sdk migrate`: apply the pending migrations up to `--to`; with `--check` change nothing and exit 1
    when the schema is not at that revision. Opens the database alone (no MemoryClient, no embedder)."""
    from memory_sdk.config import MemoryConfig
    from memory_sdk.store.database import HEAD_REVISION, Database, known_revisions

    url = args.database_url or os.environ.get("MEMORY_SDK_DATABASE_URL") or None
    if url is None:
        from memory_sdk.store.embedded import default_data_dir, start_embedded_server

        url = await asyncio.to_thread(start_embedded_server, args.data_dir or default_data_dir())
    if not args.json:
        print(where(args), file=sys.stderr)
    target = HEAD_REVISION if args.to == "head" else args.to
    database = Database(url, pool_size=1)
    try:
        before, stored_dim = await database.schema_state()
        if not args.check:
            dim = args.embedding_dim or stored_dim or MemoryConfig().embedding_dim
            await database.migrate(dim, to=args.to)
        after, _ = await database.schema_state()
    finally:
        await database.dispose()
    pending = [revision for revision in known_revisions() if revision <= target and (after is None or revision > after)]
    current = after == target
    if args.json:
        print_json({"revision": after, "previous": before, "target": target, "head": HEAD_REVISION, "pending": pending})
    else:
        at = f"at revision {after or 'none (never migrated)'}"
        if args.check:
            print(f"{at}: up to date" if current else f"{at}, {target} wanted: pending {', '.join(pending) or '?'}")
        elif before == after:
            print(f"{at}: nothing to migrate")
        else:
            print(f"migrated from {before or 'an empty database'} to {after}")
    if args.check and not current:
        return EXIT_ERROR
    return 0
