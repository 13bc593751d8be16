"""The handlers of `memory-sdk write`, the reads (facts, entity, relationships, events, trace) and the upkeep
commands (reprocess, reembed, consolidate, forget, check). Each is `async def name(args) -> int` (the exit status).

A read that finds nothing checks why: an agent with no memory, or an entity the agent does not know, is an error
with a hint (the agents here, the nearest entity names), not an empty table with exit status 0.
"""

from __future__ import annotations

import argparse
import difflib
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
    to_json,
    when,
)
from memory_sdk.cli_providers import client, embedder, model_client
from memory_sdk.client import MemoryClient
from memory_sdk.errors import UsageError
from memory_sdk.llm.protocols import embedder_id
from memory_sdk.store import reads

__all__ = [
    "check",
    "consolidate",
    "correct",
    "delete_fact",
    "entity",
    "events",
    "facts",
    "forget",
    "history",
    "relationships",
    "reprocess",
    "search",
    "trace",
    "write",
]

# How many agent ids and entity names a hint lists at most.
HINT_NAMES = 8


async def write(args: argparse.Namespace) -> int:
    if args.replay:
        from memory_sdk.cli_demo import replay_write

        return await replay_write(args)
    if not args.speaker:
        raise UsageError("write needs --speaker NAME (who said the message); only --replay has a default")
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
    if not await memory.get_events(agent, limit=1):
        async with memory.database.transaction() as session:
            agents = await reads.agent_ids(session, limit=HINT_NAMES + 1)
        here = ", ".join(agents[:HINT_NAMES]) + (", ..." if len(agents) > HINT_NAMES else "")
        raise NotFound(f"agent {agent!r} has no memory" + (f"; agents here: {here}" if agents else "; none here yet"))
    if name is None or await memory.get_entity(agent, name) is not None:
        return
    async with memory.database.transaction(agent) as session:
        names = await reads.entity_names(session, agent)
    near = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
    near += [known for known in names if name.casefold() in known.casefold() and known not in near][: 3 - len(near)]
    hint = f" (did you mean {', '.join(repr(known) for known in near)}?)" if near else ""
    raise NotFound(f"no entity named {name!r} in agent {agent!r}{hint}")


async def reprocess(args: argparse.Namespace) -> int:
    async with AsyncExitStack() as stack, model_client(args, stack, "reprocess") as memory:
        results = await memory.reprocess(args.agent, args.event_id, limit=args.limit, max_attempts=args.max_attempts)
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
        async with client(args, embedder=chosen) as memory:
            counts = await memory.reembed(args.agent, batch_size=args.batch_size)
    rows = sum(counts.values())
    print_counts(args, f"re-embedded {rows} rows of agent {args.agent!r} with {embedder_id(chosen)}", counts)
    return 0


async def consolidate(args: argparse.Namespace) -> int:
    async with AsyncExitStack() as stack, model_client(args, stack, "consolidate") as memory:
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
    print_counts(args, f"erased {sum(counts.values())} rows of agent {args.agent!r}", counts)
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
    """`memory-sdk search`: the hits best first; the embedder must be the one the agent was written with."""
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
