"""Export an agent's memory as a versioned JSON document, and restore one into an empty agent with no LLM call.

The document holds the agent's rows as stored (store/dump.py): events, pipeline runs (with their outcomes, so a
re-import of the same messages after a restore skips them as duplicates), entities with profiles, aliases, every
fact version with its valid and transaction times and its supersedes / merged_into links, fact-entity links and
relationships. Vectors are left out: a restore recomputes them with the restoring client's embedder and records
that embedder for the agent (the one-vector-space rule of migration 0005). See docs/import-export.md.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any
from uuid import UUID, uuid5

import asyncpg
from pydantic import BaseModel, ValidationError
from sqlalchemy import Boolean, DateTime, Float, Integer, Table, UniqueConstraint, Uuid
from sqlalchemy.dialects.postgresql import JSONB

from memory_sdk.errors import InvalidInputError
from memory_sdk.llm.protocols import EmbeddingProvider, embedder_id
from memory_sdk.results import Emotion, PipelineTrace, WriteResult
from memory_sdk.store import dump, embedders
from memory_sdk.store.database import Database
from memory_sdk.validation import (
    MAX_ENTITY_TYPE_CHARS,
    MAX_NAME_CHARS,
    MAX_SPEAKER_NAME_CHARS,
    MAX_STORED_TEXT_CHARS,
    check_agent,
    check_flag,
    check_message_id,
    check_stored_count,
    check_stored_json,
    check_stored_moment,
    check_stored_share,
    check_stored_text,
    check_stored_uuid,
)
from memory_sdk.vector_space import DEFAULT_REEMBED_BATCH, embed_texts

__all__ = ["EXPORT_FORMAT", "EXPORT_VERSION", "export_agent", "restore_agent"]

logger = logging.getLogger("memory_sdk")

EXPORT_FORMAT = "memory-sdk-export"
# Bumped when a table or column of the document changes meaning; a restore refuses versions it does not know.
EXPORT_VERSION = 1
# The namespace of the ids a restore into another agent gives the rows (uuid5 of the new agent and the old id).
_REMAP_NAMESPACE = UUID("5b0c4a52-2d6e-4e0f-9a57-8f0e3c1d7a61")
# Where each embedded table keeps the text its vector is computed from, and the vector (store/embedders.py).
_Remap = Callable[[UUID], UUID]
_VECTORS = {
    "events": embedders.EMBEDDED_TABLES["events"][1:],
    "facts": embedders.EMBEDDED_TABLES["facts"][1:],
    "entities": embedders.EMBEDDED_TABLES["entities"][1:],
}


async def export_agent(db: Database, agent_id: str, *, schema_version: int) -> dict[str, Any]:
    """The agent's memory as a JSON-able document (one transaction: a write that lands meanwhile is in it whole
    or not at all only per table, so export an agent nobody is writing to)."""
    async with db.tenant(agent_id) as conn:
        recorded = await embedders.recorded_embedder(conn, agent_id)
        tables = {name: await dump.read_rows(conn, agent_id, name) for name in dump.DUMPED_TABLES}
    document: dict[str, Any] = {
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "agent_id": agent_id,
        "exported_at": datetime.now(UTC).isoformat(),
        "schema_version": schema_version,
        "embedder": None if recorded is None else {"id": recorded.embedder, "dimensions": recorded.dimensions},
    }
    for name, rows in tables.items():
        document[name] = [{column: _to_json(value) for column, value in row.items()} for row in rows]
    logger.info("export agent=%s rows=%d", agent_id, sum(len(rows) for rows in tables.values()))
    return document


async def restore_agent(
    db: Database,
    embedder: EmbeddingProvider,
    document: Any,
    *,
    agent_id: str | None = None,
    max_message_chars: int,
) -> dict[str, int]:
    """Insert an export's rows into `agent_id` (default: the exported agent), which must be empty; return the
    rows restored per table.

    Into the exported agent the ids are kept; into another agent every id is replaced by a uuid5 of the new agent
    and the old id (ids are unique across agents), consistently in every reference and stored outcome. Every row
    is checked first with the rules of write() and the reads (InvalidInputError naming the row, e.g.
    `facts[3].fact_text`), and may reference only rows of the document itself; then vectors are computed, then
    every row goes in in one transaction: a failed restore leaves nothing.
    """
    source = _check_document(document)
    target = source if agent_id is None else check_agent(agent_id)
    remap = _remapper(target) if target != source else None
    tables = {
        name: [
            _from_json(name, index, row, target, remap, max_message_chars) for index, row in enumerate(document[name])
        ]
        for name in dump.DUMPED_TABLES
    }
    _check_keys(tables)
    for name, (text_column, vector_column) in _VECTORS.items():
        texts = [row[text_column] for row in tables[name]]
        vectors = await _embed_all(embedder, texts)
        for row, vector in zip(tables[name], vectors, strict=True):
            row[vector_column] = vector
    counts: dict[str, int] = {}
    async with db.tenant(target) as conn:
        if await dump.agent_has_rows(conn, target):
            raise InvalidInputError(
                f"agent {target!r} already has a memory: restore goes into an empty agent "
                "(forget it first, or restore into another agent id)"
            )
        await embedders.record_embedder(conn, target, embedder_id(embedder), embedder.dimensions)
        for name, rows in tables.items():
            async with _refused_as_input(name):
                counts[name] = await dump.insert_rows(conn, name, rows)
        links = [(f["id"], f.get("supersedes_fact_id"), f.get("merged_into_fact_id")) for f in tables["facts"]]
        async with _refused_as_input("facts"):
            await dump.set_fact_links(conn, target, [link for link in links if link[1] or link[2]])
        versions = [(e["entity_key"], e["facts_version"], e["profile_facts_version"]) for e in tables["entities"]]
        await dump.set_entity_versions(conn, target, versions)
    logger.info("restore agent=%s from=%s rows=%d", target, source, sum(counts.values()))
    return counts


def _check_document(document: Any) -> str:
    """The exported agent id, once the document is an export this version can read (else InvalidInputError)."""
    if not isinstance(document, Mapping) or document.get("format") != EXPORT_FORMAT:
        raise InvalidInputError(f"not a memory-sdk export (expected a JSON object with format {EXPORT_FORMAT!r})")
    if document.get("version") != EXPORT_VERSION:
        raise InvalidInputError(
            f"export version {_shown(document.get('version'))} is not one this memory_sdk reads "
            f"(version {EXPORT_VERSION})"
        )
    for name, (table, _) in dump.DUMPED_TABLES.items():
        rows = document.get(name)
        if not isinstance(rows, list):
            raise InvalidInputError(f"export table {name!r} must be a list of row objects")
        expected = set(dump.dumped_columns(table))
        for index, row in enumerate(rows):
            if not isinstance(row, dict):
                raise InvalidInputError(f"{name}[{index}] must be a row object, got {type(row).__name__}")
            if set(row) != expected:
                differ = sorted(map(str, set(row) ^ expected))
                raise InvalidInputError(f"{name}[{index}]: the row's columns {differ} differ from the table's")
    return check_agent(document.get("agent_id"))


def _to_json(value: Any) -> Any:
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    return value


# Text columns whose rule is not a name's (non-blank, at most MAX_NAME_CHARS: keys, aliases, tags): (at most how
# many characters, None for the client's max_message_chars; blank allowed). As write() takes a message and speaker.
_TEXT_RULES: dict[tuple[str, str], tuple[int | None, bool]] = {
    ("events", "content"): (None, True),
    ("events", "speaker"): (MAX_SPEAKER_NAME_CHARS, False),
    ("pipeline_runs", "error"): (MAX_STORED_TEXT_CHARS, True),
    ("entities", "entity_type"): (MAX_ENTITY_TYPE_CHARS, False),
    ("entities", "profile_text"): (None, True),
    ("facts", "fact_text"): (None, False),
    ("facts", "speaker"): (MAX_SPEAKER_NAME_CHARS, False),
}
# Stored JSON the SDK reads back through a model: each must parse as it will be read (a retried write returns the
# stored outcome, get_trace the trace), so a value the reads would choke on is refused here, not there.
_JSON_MODELS: dict[tuple[str, str], type[BaseModel]] = {
    ("events", "emotion"): Emotion,
    ("pipeline_runs", "trace"): PipelineTrace,
    ("pipeline_runs", "result"): WriteResult,
}
_RUN_STATUSES = frozenset({"running", "succeeded", "failed", "cancelled", "abandoned"})  # migration 0004


def _from_json(
    name: str, index: int, row: dict[str, Any], agent_id: str, remap: _Remap | None, max_message_chars: int
) -> dict[str, Any]:
    """A document row checked and read as Python values for its table, moved to `agent_id` (and its ids
    remapped when given)."""
    table, _ = dump.DUMPED_TABLES[name]
    values: dict[str, Any] = {}
    for column, value in row.items():
        path = f"{name}[{index}].{column}"
        if column == "agent_id":
            values[column] = agent_id
        elif value is None:
            if not table.c[column].nullable:
                raise InvalidInputError(f"{path} must not be null")
            values[column] = None
        else:
            values[column] = _stored(name, column, path, value, agent_id, remap, max_message_chars)
    _check_row(name, index, values)
    return values


def _stored(
    name: str, column: str, path: str, value: Any, agent_id: str, remap: _Remap | None, max_message_chars: int
) -> Any:
    """One non-null value of a document row, checked by its column's type and rule."""
    kind = dump.DUMPED_TABLES[name][0].c[column].type
    if isinstance(kind, Uuid):
        uuid = check_stored_uuid(path, value)
        return remap(uuid) if remap is not None else uuid
    if isinstance(kind, DateTime):
        return check_stored_moment(path, value)
    if isinstance(kind, Boolean):
        return check_flag(path, value)
    if isinstance(kind, Float):  # confidence, importance, strength
        return check_stored_share(path, value)
    if isinstance(kind, Integer):
        return check_stored_count(path, value)
    if isinstance(kind, JSONB):
        check_stored_json(path, value)
        moved = _move_json(value, agent_id, remap)
        model = _JSON_MODELS.get((name, column))
        if model is not None:
            try:
                model.model_validate(moved)
            except ValidationError as exc:
                error = exc.errors()[0]
                where = ".".join(str(part) for part in error["loc"])
                raise InvalidInputError(f"{path} is not a stored {model.__name__}: {where}: {error['msg']}") from None
        return moved
    if (name, column) == ("events", "message_id"):
        return _named(path, check_message_id, value)
    max_chars, blank = _TEXT_RULES.get((name, column), (MAX_NAME_CHARS, False))
    text = check_stored_text(path, value, max_message_chars if max_chars is None else max_chars, blank=blank)
    if (name, column) == ("pipeline_runs", "status") and text not in _RUN_STATUSES:
        raise InvalidInputError(f"{path} must be one of {sorted(_RUN_STATUSES)}, got {_shown(text)}")
    return text


def _named(path: str, check: Callable[[Any], Any], value: Any) -> Any:
    """A check of validation.py that names the argument, not the row: its error prefixed with the row's path."""
    try:
        return check(value)
    except InvalidInputError as exc:
        raise InvalidInputError(f"{path}: {exc}") from None


def _check_row(name: str, index: int, row: dict[str, Any]) -> None:
    """The CHECK constraints of a row (migration 0001), as errors naming it."""
    if name == "facts":
        if row["valid_to"] is not None and row["valid_to"] < row["valid_from"]:
            raise InvalidInputError(f"facts[{index}].valid_to is before its valid_from")
        if (row["valid_to"] is None) != (row["closed_at"] is None):
            raise InvalidInputError(f"facts[{index}].closed_at must be set exactly when valid_to is")
    if name == "relationships" and row["source_key"] == row["target_key"]:
        raise InvalidInputError(f"relationships[{index}].target_key is its source_key: an edge joins two entities")


# Unique indexes with a WHERE clause (migrations 0001 and 0004): which rows of a table they hold.
_PARTIAL_KEYS: dict[str, list[tuple[tuple[str, ...], Callable[[dict[str, Any]], bool]]]] = {
    "events": [(("message_id",), lambda row: row["message_id"] is not None)],
    "facts": [
        (
            ("entity_key", "attribute"),
            lambda row: (
                bool(row["single_valued"])
                and row["attribute"] is not None
                and row["valid_to"] is None
                and row["invalidated_at"] is None
            ),
        )
    ],
    "relationships": [(("source_key", "target_key", "rel_type"), lambda row: row["invalidated_at"] is None)],
}


def _check_keys(tables: Mapping[str, list[dict[str, Any]]]) -> None:
    """What the database's keys would refuse, as errors naming the row: a key twice, and a reference to a row
    the document does not hold. The target agent is empty, so every reference must land in the document itself;
    the check never looks at the database, so it reads the same whether another agent has that id or not."""
    names = {table.name: name for name, (table, _) in dump.DUMPED_TABLES.items()}
    for name, (table, _) in dump.DUMPED_TABLES.items():
        for columns, holds in _unique_keys(name, table):
            seen: dict[tuple[Any, ...], int] = {}
            for index, row in enumerate(tables[name]):
                if holds(row):
                    first = seen.setdefault(tuple(row[column] for column in columns), index)
                    if first != index:
                        raise InvalidInputError(
                            f"{name}[{index}]: {', '.join(columns)} the same as {name}[{first}]'s, "
                            "which the database keeps unique"
                        )
        for constraint in table.foreign_key_constraints:
            pairs = [(e.parent.name, e.column.name) for e in constraint.elements if e.parent.name != "agent_id"]
            referenced = names[constraint.referred_table.name]
            present = {tuple(row[remote] for _, remote in pairs) for row in tables[referenced]}
            for index, row in enumerate(tables[name]):
                key = tuple(row[local] for local, _ in pairs)
                if None not in key and key not in present:
                    raise InvalidInputError(
                        f"{name}[{index}].{pairs[0][0]} names no row of the document's {referenced}: a restore "
                        "may reference only the rows it restores"
                    )


def _unique_keys(name: str, table: Table) -> list[tuple[tuple[str, ...], Callable[[dict[str, Any]], bool]]]:
    """The table's primary key, unique constraints and partial unique indexes, without agent_id (every row of
    a document goes to one agent)."""
    keys: list[tuple[str, ...]] = [tuple(c.name for c in table.primary_key.columns)]
    keys += [tuple(c.name for c in u.columns) for u in table.constraints if isinstance(u, UniqueConstraint)]
    found: list[tuple[tuple[str, ...], Callable[[dict[str, Any]], bool]]] = []
    for key in dict.fromkeys(tuple(c for c in key if c != "agent_id") for key in keys):
        found.append((key, lambda row: True))
    return found + _PARTIAL_KEYS.get(name, [])


@asynccontextmanager
async def _refused_as_input(name: str) -> AsyncIterator[None]:
    """A row the database refuses after every check above (a key or value rule this module does not know):
    InvalidInputError naming the table and the rule, never StorageError, and the restore's transaction is rolled
    back. A failure of the database itself (class 08, 40, 53, 57...) stays what it is."""
    try:
        yield
    except asyncpg.PostgresError as exc:
        if not str(exc.sqlstate).startswith(_REFUSED_ROW_CLASSES):
            raise
        rule = getattr(exc, "constraint_name", None) or type(exc).__name__
        raise InvalidInputError(f"{name}: the database refused a row of the document ({rule})") from exc


# SQLSTATE classes of a refused row: data exception (22), integrity constraint violation (23), program limit
# exceeded (54: an index row too large).
_REFUSED_ROW_CLASSES = ("22", "23", "54")


def _remapper(agent_id: str) -> _Remap:
    def remap(old: UUID) -> UUID:
        return uuid5(_REMAP_NAMESPACE, f"{agent_id}/{old}")

    return remap


def _move_json(value: Any, agent_id: str, remap: _Remap | None) -> Any:
    """A stored outcome or trace moved like its row: its `agent_id` fields name the new agent, and with `remap`
    the ids inside it (fact ids, event ids) follow the rows they name."""
    if isinstance(value, dict):
        return {
            key: agent_id if key == "agent_id" else _move_json(item, agent_id, remap) for key, item in value.items()
        }
    if isinstance(value, list):
        return [_move_json(item, agent_id, remap) for item in value]
    if remap is not None and isinstance(value, str) and len(value) == 36:
        try:
            return str(remap(UUID(value)))
        except ValueError:
            return value
    return value


def _shown(value: Any) -> str:
    shown = repr(value)
    return f"{shown[:60]}..." if len(shown) > 60 else shown


async def _embed_all(embedder: EmbeddingProvider, texts: list[str]) -> list[list[float]]:
    vectors: list[list[float]] = []
    for start in range(0, len(texts), DEFAULT_REEMBED_BATCH):
        vectors += await embed_texts(embedder, texts[start : start + DEFAULT_REEMBED_BATCH], purpose="restore")
    return vectors
