"""The `memory-sdk` command: run the demo, write a message, read facts, entities, relationships, events and traces,
reprocess unfinished writes, move vectors to another embedder, consolidate, forget an agent, check it for damage.

    $ memory-sdk demo                                  # offline: replays answers recorded from a real model
    $ memory-sdk write try-me 4 --replay --dry-run --verbose   # offline: the demo's message 4, nothing stored
    $ memory-sdk write user_123 "Moro em Curitiba" --speaker Rafael --occurred-at 2025-01-10
    $ memory-sdk facts user_123 --entity Rafael --history
    $ memory-sdk entity user_123 Guili
    $ memory-sdk relationships user_123 --known-at 2025-03-01
    $ memory-sdk events user_123 --limit 5             # newest first (--oldest for the other end)
    $ memory-sdk trace user_123 <event id>
    $ memory-sdk reprocess user_123                    # finish writes that failed or died mid-way
    $ memory-sdk reembed user_123 --embedder local     # move the agent's vectors to another embedder
    $ memory-sdk consolidate user_123                  # rebuild stale profiles, merge near-duplicate facts
    $ memory-sdk forget user_123 --yes                 # erase the agent, events included
    $ memory-sdk forget-event user_123 <event id> --yes   # erase one message and what derived only from it
    $ memory-sdk delete-fact user_123 <fact id> --reason "never lived there"   # retract one fact
    $ memory-sdk correct user_123 <fact id> "Ana lives in Porto"   # replace one fact by the user's text
    $ memory-sdk history user_123 <fact id>            # every version of one fact, oldest first
    $ memory-sdk check user_123                        # look for damage: exit status 1 and each problem if any
    $ memory-sdk migrate --check                       # is the schema at head? (exit status 1 if not)
    $ memory-sdk import chats.jsonl --agent user_123   # bulk import, resumable; --restore for an export
    $ memory-sdk export user_123 -o user_123.json      # events, facts with history, entities, edges as JSON
    $ memory-sdk mcp --agent user_123                  # the agent's memory as MCP tools over stdio
    $ memory-sdk search user_123 "where does Clara work" -k 5   # hybrid search: vector + full text + graph

Exit status: 0 done; 1 a runtime failure, a failed write, or a name the memory does not know (with a hint: the
agents or entities it does know); 2 a usage error (a bad argument: fix the call). Every error is one line on
stderr, `memory-sdk: error: ...`.

How this module is built, so that `memory-sdk --help` and `--version` stay fast (no SQLAlchemy, alembic, asyncpg,
openai or pydantic imported; tests/test_cli_parser.py checks it):
- this module only parses arguments: it imports the standard library and nothing heavy;
- each subcommand is one `_add_<name>(sub, options)` function in COMMANDS that declares its parser, gives every
  argument a help text, and names its handler as "module:function" (`handler="memory_sdk.cli_commands:facts"`);
- `main` imports the handler's module only once the arguments are parsed; a handler is
  `async def handler(args: argparse.Namespace) -> int` and imports what it needs (the client, providers, output).
To add a command: write its handler in a module of its own (or cli_commands.py), add `_add_<name>` here and
list it in COMMANDS.
"""

from __future__ import annotations

import argparse
import importlib
import io
import logging
import os
import sys
from collections.abc import Callable, Coroutine, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn, TypeAlias
from uuid import UUID

from memory_sdk import __version__

__all__ = ["COMMANDS", "NotFound", "build_parser", "main"]

# OpenAIProvider's default model; repeated here only to say on screen which model answers.
DEFAULT_MODEL = "gpt-4o-mini"
EMBEDDERS = ("openai", "local", "hash")
EXIT_ERROR = 1
EXIT_USAGE = 2  # argparse's own status for a bad argument
EXIT_INTERRUPTED = 130
# The SDK's own bounds (memory_sdk/validation.py, MAX_SEARCH_K and MAX_EVENTS_LIMIT), repeated so that the parser
# refuses a value out of range before the database starts; tests/test_cli_honest.py pins them equal.
MAX_SEARCH_K = 100
MAX_EVENTS_LIMIT = 10_000

Handler = Callable[[argparse.Namespace], Coroutine[Any, Any, int]]
_Subparsers: TypeAlias = "argparse._SubParsersAction[_Parser]"


class NotFound(LookupError):
    """The agent, entity or event a read named is unknown: printed as one line with a hint, exit status 1."""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `memory-sdk` script; returns the exit status."""
    args = build_parser().parse_args(argv)
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)  # the demo's progress shows up at once, even in a log file
    # The SDK's own log at the chosen level; libraries (the embedded server, alembic) only when they fail.
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("memory_sdk").setLevel(args.log_level.upper())
    import asyncio  # after parsing: asyncio alone costs --help more than a tenth of a second

    from memory_sdk.errors import MemorySDKError, UsageError  # light: the exception classes only

    try:
        return asyncio.run(_handler(args.handler)(args))
    except MemorySDKError as exc:
        _fail(_with_fix(args, exc))
        return EXIT_USAGE if isinstance(exc, UsageError) else EXIT_ERROR
    except NotFound as exc:
        _fail(str(exc))
        return EXIT_ERROR
    except BrokenPipeError:
        # The reader (`| head`) went away: stop quietly, and keep Python from complaining at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_ERROR
    except OSError as exc:
        _fail(str(exc))
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("memory-sdk: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _with_fix(args: argparse.Namespace, exc: Exception) -> str:
    """The error's message; for an embedder mismatch, the flags and the command that fix it from the shell."""
    from memory_sdk.errors import EmbedderMismatch

    if isinstance(exc, EmbedderMismatch):
        from memory_sdk.cli_providers import embedder_fix  # loaded already: the handler that raised imported it

        return embedder_fix(args, exc)
    return str(exc) or type(exc).__name__


def _fail(message: str) -> None:
    print(f"memory-sdk: error: {' '.join(message.split())}", file=sys.stderr)


def _handler(reference: str) -> Handler:
    """The handler named "module:function", imported now: its module may pull in the client and the database."""
    module, _, name = reference.partition(":")
    handler: Handler = getattr(importlib.import_module(module), name)
    return handler


# -- arguments ------------------------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error: no usage block above it (`--help` shows the usage)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


class _Options:
    """The option groups subcommands share, as argparse parent parsers."""

    def __init__(self) -> None:
        self.common = _common_options()
        self.model = _model_options()
        self.embedding = _embedding_options()


def _common_options() -> _Parser:
    common = _Parser(add_help=False)
    common.add_argument("--database-url", help="PostgreSQL URL (default: MEMORY_SDK_DATABASE_URL, else embedded)")
    common.add_argument(
        "--data-dir", type=Path, help="embedded PostgreSQL directory (default: MEMORY_SDK_DATA_DIR, else per-user)"
    )
    common.add_argument("--json", action="store_true", help="print JSON instead of tables and text")
    common.add_argument(
        "--wide",
        action="store_true",
        help="tables with every column, each value on one line (default: fit the terminal, or COLUMNS)",
    )
    common.add_argument(
        "--log-level", default="error", choices=["debug", "info", "warning", "error"], help="the SDK's log on stderr"
    )
    return common


def _model_options() -> _Parser:
    model = _Parser(add_help=False)
    model.add_argument("--base-url", help="OpenAI-compatible server (default: OPENAI_BASE_URL)")
    model.add_argument("--model", help=f"model name (default: {DEFAULT_MODEL})")
    model.add_argument(
        "--timeout",
        type=_positive_float,
        metavar="SECONDS",
        help="seconds per LLM call (default: the SDK's); small local models need minutes",
    )
    model.add_argument(
        "--structured",
        choices=["json_schema", "json_object", "none"],
        default="json_schema",
        help="how the server is asked for JSON: a schema (default), any JSON object, or plain text parsed here",
    )
    return model


def _embedding_options() -> _Parser:
    embedding = _Parser(add_help=False)
    embedding.add_argument(
        "--embedder",
        choices=EMBEDDERS,
        help="openai: the embeddings API (OPENAI_API_KEY, or --base-url's server); local: multilingual-e5-small on "
        "this CPU (memory-sdk[local]); hash: a lexical test double. Default: openai with a key and no base URL, "
        "else local when installed, else hash",
    )
    return embedding


def build_parser() -> _Parser:
    """The whole command line: the top-level options, then one subparser per entry of COMMANDS."""
    parser = _Parser(prog="memory-sdk", description="Versioned memory for AI agents.")
    parser.add_argument("--version", action="version", version=f"memory-sdk {__version__}")
    sub = parser.add_subparsers(required=True, metavar="COMMAND", title="commands")
    options = _Options()
    for add in COMMANDS:
        add(sub, options)
    return parser


def _add_demo(sub: _Subparsers, options: _Options) -> None:
    demo = sub.add_parser(
        "demo",
        parents=[options.common, options.model, options.embedding],
        help="write the example conversation and show the result (offline: replays a recorded model)",
    )
    demo.add_argument("--agent", help="agent id (default: demo-<timestamp>, fresh each run)")
    demo.add_argument("--record", type=Path, metavar="PATH", help="save the real model's answers for replay")
    demo.add_argument("--replay", type=Path, metavar="PATH", help="replay this recording instead of the bundled one")
    demo.set_defaults(handler="memory_sdk.cli_demo:demo")


def _add_write(sub: _Subparsers, options: _Options) -> None:
    write = sub.add_parser(
        "write",
        parents=[options.common, options.model, options.embedding],
        help="write one message (with a model, or offline with --replay)",
        description="Write one message. Without a model configured, --replay answers from the demo's recording: "
        "MESSAGE is then one of the demo's messages, by number (1-9) or text, e.g. "
        "`memory-sdk write try-me 4 --replay --dry-run --verbose`.",
    )
    write.add_argument("agent", help="agent id: whose memory")
    write.add_argument("message", help="the message text (with --replay: the demo message's number or text)")
    write.add_argument("--speaker", help="who said it (required, except with --replay: the demo's speaker)")
    write.add_argument("--occurred-at", type=_moment, help="ISO date or datetime (naive means UTC; default: now)")
    write.add_argument("--dry-run", action="store_true", help="run the write and show its result, store nothing")
    write.add_argument("--verbose", action="store_true", help="print the pipeline trace as a tree")
    write.add_argument("--message-id", help="your id of the message: writing it again stores nothing twice")
    write.add_argument(
        "--replay",
        action="store_true",
        help="no model needed: answer with the bundled demo recording (the real model's answers to that message)",
    )
    write.set_defaults(handler="memory_sdk.cli_commands:write")


def _add_facts(sub: _Subparsers, options: _Options) -> None:
    facts = sub.add_parser("facts", parents=[options.common], help="current facts, facts at a time, or every version")
    facts.add_argument("agent", help="agent id: whose memory")
    facts.add_argument("--entity", help="display name, alias or entity key")
    facts.add_argument("--as-of", type=_moment, help="what was true at this time (ISO date or datetime)")
    facts.add_argument("--known-at", type=_moment, help="what the memory believed at this time (ISO date or datetime)")
    facts.add_argument("--history", action="store_true", help="every version, closed and retracted ones included")
    facts.set_defaults(handler="memory_sdk.cli_commands:facts")


def _add_entity(sub: _Subparsers, options: _Options) -> None:
    entity = sub.add_parser("entity", parents=[options.common], help="one entity: key, type, aliases, profile")
    entity.add_argument("agent", help="agent id: whose memory")
    entity.add_argument("name", help="display name, alias or entity key")
    entity.set_defaults(handler="memory_sdk.cli_commands:entity")


def _add_relationships(sub: _Subparsers, options: _Options) -> None:
    rels = sub.add_parser("relationships", parents=[options.common], help="current relationships, or at a time")
    rels.add_argument("agent", help="agent id: whose memory")
    rels.add_argument("--entity", help="only edges touching this entity (name, alias or key)")
    rels.add_argument("--as-of", type=_moment, help="edges valid at this time (ISO date or datetime)")
    rels.add_argument("--known-at", type=_moment, help="edges the memory held at this time (ISO date or datetime)")
    rels.add_argument(
        "--history", "--all", dest="history", action="store_true", help="every edge ever stored, ended ones included"
    )
    rels.set_defaults(handler="memory_sdk.cli_commands:relationships")


def _add_events(sub: _Subparsers, options: _Options) -> None:
    events = sub.add_parser("events", parents=[options.common], help="the agent's message log (event ids for `trace`)")
    events.add_argument("agent", help="agent id: whose memory")
    events.add_argument("--limit", type=_int_up_to(MAX_EVENTS_LIMIT), metavar="N", help="only N events (default: all)")
    events.add_argument("--oldest", action="store_true", help="oldest first (default: newest first)")
    events.set_defaults(handler="memory_sdk.cli_commands:events")


def _add_trace(sub: _Subparsers, options: _Options) -> None:
    trace = sub.add_parser("trace", parents=[options.common], help="the pipeline trace of one write, as a tree")
    trace.add_argument("agent", help="agent id: whose memory")
    trace.add_argument("event_id", type=_event_id, metavar="EVENT_ID", help="the write's event id (see `events`)")
    trace.set_defaults(handler="memory_sdk.cli_commands:trace")


def _add_reprocess(sub: _Subparsers, options: _Options) -> None:
    reprocess = sub.add_parser(
        "reprocess",
        parents=[options.common, options.model, options.embedding],
        help="finish writes that failed, were cancelled or died mid-way",
    )
    reprocess.add_argument("agent", help="agent id: whose memory")
    reprocess.add_argument("--event-id", type=_event_id, help="this event only (default: every unfinished write)")
    reprocess.add_argument("--limit", type=_positive_int, default=100, metavar="N", help="at most N writes")
    reprocess.add_argument(
        "--max-attempts", type=_positive_int, default=3, metavar="N", help="leave alone events with N runs already"
    )
    reprocess.set_defaults(handler="memory_sdk.cli_commands:reprocess")


def _add_reembed(sub: _Subparsers, options: _Options) -> None:
    reembed = sub.add_parser(
        "reembed",
        parents=[options.common, options.embedding],
        help="recompute an agent's vectors with another embedder",
    )
    reembed.add_argument("agent", help="agent id: whose memory")
    reembed.add_argument("--batch-size", type=_positive_int, default=64, metavar="N", help="rows per transaction")
    reembed.set_defaults(handler="memory_sdk.cli_commands:reembed")


def _add_consolidate(sub: _Subparsers, options: _Options) -> None:
    consolidate = sub.add_parser(
        "consolidate",
        parents=[options.common, options.model, options.embedding],
        help="rebuild stale profiles, merge near-duplicate facts",
    )
    consolidate.add_argument("agent", help="agent id: whose memory")
    consolidate.add_argument("--entity", help="this entity only (name, alias or key), rebuilt even if up to date")
    consolidate.set_defaults(handler="memory_sdk.cli_commands:consolidate")


def _add_forget(sub: _Subparsers, options: _Options) -> None:
    forget = sub.add_parser("forget", parents=[options.common], help="erase every row of an agent, its events included")
    forget.add_argument("agent", help="agent id: whose memory is erased")
    forget.add_argument("--yes", action="store_true", help="confirm: the erase cannot be undone")
    forget.set_defaults(handler="memory_sdk.cli_commands:forget")


def _add_forget_event(sub: _Subparsers, options: _Options) -> None:
    forget = sub.add_parser(
        "forget-event",
        parents=[options.common],
        help="erase one message and what was derived only from it (an erasure request)",
    )
    forget.add_argument("agent", help="agent id: whose memory")
    forget.add_argument("event_id", type=_event_id, metavar="EVENT_ID", help="the event's id (see `events --json`)")
    forget.add_argument("--yes", action="store_true", help="confirm: the erase cannot be undone")
    forget.set_defaults(handler="memory_sdk.cli_commands:forget_event")


def _add_check(sub: _Subparsers, options: _Options) -> None:
    check = sub.add_parser(
        "check",
        parents=[options.common],
        help="look for damage in an agent's memory (exit status 1 if any)",
        description="Check an agent's memory, reading only: every current relationship stands on a current fact, "
        "one open value per single-valued attribute, every fact's and pipeline run's event present, the tables "
        "agree with their indexes, and PostgreSQL's amcheck where the server has it. Prints each problem.",
    )
    check.add_argument("agent", help="agent id: whose memory is checked")
    check.set_defaults(handler="memory_sdk.cli_commands:check")


def _add_migrate(sub: _Subparsers, options: _Options) -> None:
    migrate = sub.add_parser(
        "migrate",
        parents=[options.common],
        help="apply the database migrations now (or --check: is the schema at head?)",
        description="Apply the SDK's pending migrations to the database, serialised by an advisory lock (safe "
        "while app servers run). With --check nothing is changed: exit status 0 when the schema is at head, 1 "
        "when migrations are pending. Run it once per release before the app servers (MemoryConfig("
        "migrate_on_open=False) then keeps them from migrating).",
    )
    migrate.add_argument("--to", metavar="REVISION", default="head", help="stop at this revision (default: head)")
    migrate.add_argument("--check", action="store_true", help="only report whether the schema is at head")
    migrate.add_argument(
        "--embedding-dim",
        type=_positive_int,
        metavar="N",
        help="vector size of a database migrated for the first time (default: the stored one, else 1536)",
    )
    migrate.set_defaults(handler="memory_sdk.cli_commands:migrate")


def _add_bench(sub: _Subparsers, options: _Options) -> None:
    bench = sub.add_parser("bench", parents=[options.common], help="time the SDK's own work per write (replayed LLM)")
    bench.add_argument(
        "--rounds", type=_positive_int, default=3, metavar="N", help="times the demo conversation is written"
    )
    bench.set_defaults(handler="memory_sdk.cli_demo:bench")


def _add_import(sub: _Subparsers, options: _Options) -> None:
    importer = sub.add_parser(
        "import",
        parents=[options.common, options.model, options.embedding],
        help="import a JSONL file of messages, or restore an export",
    )
    importer.add_argument(
        "file",
        type=Path,
        help="JSONL, one message per line: agent_id?, speaker, text, occurred_at, message_id?; with --restore, "
        "an export",
    )
    importer.add_argument("--restore", action="store_true", help="FILE is an export: put it back, no LLM call")
    importer.add_argument(
        "--agent", help="the agent of every line (lines may omit agent_id); with --restore, the agent restored into"
    )
    importer.add_argument("--concurrency", type=_positive_int, default=8, metavar="N", help="agents written at once")
    importer.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    importer.add_argument("--scripted-llm", type=Path, help=argparse.SUPPRESS)  # tests: answers from a JSON file
    importer.set_defaults(handler="memory_sdk.cli_import:import_command")


def _add_export(sub: _Subparsers, options: _Options) -> None:
    export = sub.add_parser(
        "export", parents=[options.common], help="an agent's whole memory as JSON (for import --restore)"
    )
    export.add_argument("agent", help="agent id: whose memory is exported")
    export.add_argument("--output", "-o", type=Path, help="write to this file instead of stdout")
    export.set_defaults(handler="memory_sdk.cli_import:export_command")


def _add_mcp(sub: _Subparsers, options: _Options) -> None:
    mcp = sub.add_parser(
        "mcp",
        parents=[options.common, options.model, options.embedding],
        help="serve an agent's memory over MCP (stdio)",
    )
    mcp.add_argument("--agent", required=True, help="the agent whose memory is served (never chosen by the model)")
    mcp.add_argument("--allow-forget", action="store_true", help="offer the forget tool, which erases the agent")
    mcp.add_argument("--scripted-llm", type=Path, help=argparse.SUPPRESS)  # tests: answers from a JSON file
    mcp.set_defaults(handler="memory_sdk.cli_import:mcp_command")


def _add_search(sub: _Subparsers, options: _Options) -> None:
    search = sub.add_parser(
        "search",
        parents=[options.common, options.embedding],
        help="the facts most relevant to a query (vector + text + graph)",
    )
    search.add_argument("agent", help="agent id: whose memory is searched")
    search.add_argument("query", help="what to look for, in words")
    search.add_argument(
        "-k", type=_int_up_to(MAX_SEARCH_K), default=10, metavar="N", help=f"number of hits, 1 to {MAX_SEARCH_K}"
    )
    search.add_argument("--entity", help="only facts about this entity (display name, alias or entity key)")
    search.add_argument("--as-of", type=_moment, help="what was true at this time")
    search.add_argument("--known-at", type=_moment, help="what the memory believed at this time")
    search.set_defaults(handler="memory_sdk.cli_commands:search")


def _add_delete_fact(sub: _Subparsers, options: _Options) -> None:
    delete = sub.add_parser(
        "delete-fact",
        parents=[options.common],
        help="retract one fact as the user: closed now with the edges it backs, its history kept",
    )
    delete.add_argument("agent", help="agent id: whose memory")
    delete.add_argument("fact_id", type=_fact_id, metavar="FACT_ID", help="the fact's id (see `facts --json`)")
    delete.add_argument("--reason", help="why it is retracted (kept in the fact's history)")
    delete.set_defaults(handler="memory_sdk.cli_commands:delete_fact")


def _add_correct(sub: _Subparsers, options: _Options) -> None:
    correct = sub.add_parser(
        "correct",
        parents=[options.common, options.embedding],
        help="replace one fact by the user's text (a new version, no model call)",
    )
    correct.add_argument("agent", help="agent id: whose memory")
    correct.add_argument("fact_id", type=_fact_id, metavar="FACT_ID", help="the fact's id (see `facts --json`)")
    correct.add_argument("text", help="what is true instead, as one sentence")
    correct.add_argument("--attribute", help="the corrected fact's attribute (default: the fact's)")
    correct.add_argument(
        "--valid-from",
        type=_moment,
        help="true from this time, the old value history until then (default: the fact's own start: it was wrong)",
    )
    correct.set_defaults(handler="memory_sdk.cli_commands:correct")


def _add_history(sub: _Subparsers, options: _Options) -> None:
    history = sub.add_parser("history", parents=[options.common], help="every version of one fact, oldest first")
    history.add_argument("agent", help="agent id: whose memory")
    history.add_argument("fact_id", type=_fact_id, metavar="FACT_ID", help="the id of any version of the fact")
    history.set_defaults(handler="memory_sdk.cli_commands:history")


def _id_type(what: str) -> Callable[[str], UUID]:
    """An argparse type for an id argument: a UUID, else a usage error naming what it should be."""

    def parse(text: str) -> UUID:
        try:
            return UUID(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"not {what} (a UUID): {text!r}") from exc

    return parse


_event_id = _id_type("an event id")
_fact_id = _id_type("a fact id")


# The subcommands, in the order `--help` lists them.
COMMANDS: tuple[Callable[[_Subparsers, _Options], None], ...] = (
    _add_demo,
    _add_write,
    _add_facts,
    _add_entity,
    _add_relationships,
    _add_events,
    _add_trace,
    _add_reprocess,
    _add_reembed,
    _add_consolidate,
    _add_forget,
    _add_forget_event,
    _add_delete_fact,
    _add_correct,
    _add_history,
    _add_check,
    _add_migrate,
    _add_bench,
    _add_import,
    _add_export,
    _add_mcp,
    _add_search,
)


def _positive_int(text: str) -> int:
    try:
        number = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from exc
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {number}")
    return number


def _int_up_to(maximum: int) -> Callable[[str], int]:
    """A positive int of at most `maximum`, checked while parsing (the SDK's bound, before the database starts)."""

    def bounded(text: str) -> int:
        number = _positive_int(text)
        if number > maximum:
            raise argparse.ArgumentTypeError(f"must be {maximum:,} or less, got {number:,}")
        return number

    return bounded


def _positive_float(text: str) -> float:
    try:
        number = float(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from exc
    if not number > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text}")
    return number


def _moment(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an ISO date or datetime: {text!r}") from exc
    return moment if moment.utcoffset() is not None else moment.replace(tzinfo=UTC)


if __name__ == "__main__":
    sys.exit(main())
