"""Export an agent's memory as a versioned JSON document, and restore one into an empty agent with no LLM call.

The document holds the agent's rows as stored (store/dump.py): events, pipeline runs (with their outcomes, so a
re-import of the same messages after a restore skips them as duplicates), entities with profiles, aliases, every
fact version with its valid and transaction times and its supersedes / merged_into links, fact-entity links and
relationships. Vectors are left out: a restore recomputes them with the restoring client's embedder and records
that embedder for the agent (the one-vector-space rule of migration 0005). See docs/import-export.md.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any
from uuid import UUID, uuid5

from sqlalchemy import DateTime, Uuid
from sqlalchemy.dialects.postgresql import JSONB

from memory_sdk.errors import InvalidInputError
from memory_sdk.llm.protocols import EmbeddingProvider, embedder_id
from memory_sdk.store import dump, embedders
from memory_sdk.store.database import Database
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
    db: Database, embedder: EmbeddingProvider, document: Any, *, agent_id: str | None = None
) -> dict[str, int]:
    """Insert an export's rows into `agent_id` (default: the exported agent), which must be empty; return the
    rows restored per table.

    Into the exported agent the ids are kept; into another agent every id is replaced by a uuid5 of the new agent
    and the old id (ids are unique across agents), consistently in every reference and stored outcome. Vectors
    are computed first, then every row goes in in one transaction: a failed restore leaves nothing.
    """
    source = _check_document(document)
    target = agent_id or source
    remap = _remapper(target) if target != source else None
    tables = {name: [_from_json(name, row, target, remap) for row in document[name]] for name in dump.DUMPED_TABLES}
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
            counts[name] = await dump.insert_rows(conn, name, rows)
        links = [(f["id"], f.get("supersedes_fact_id"), f.get("merged_into_fact_id")) for f in tables["facts"]]
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
            f"export version {document.get('version')!r} is not one this memory_sdk reads (version {EXPORT_VERSION})"
        )
    for name, (table, _) in dump.DUMPED_TABLES.items():
        rows = document.get(name)
        if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
            raise InvalidInputError(f"export table {name!r} must be a list of row objects")
        expected = set(dump.dumped_columns(table))
        for row in rows:
            if set(row) != expected:
                differ = sorted(set(row) ^ expected)
                raise InvalidInputError(f"export table {name!r}: a row's columns {differ} differ from the table's")
    source = document.get("agent_id")
    if not isinstance(source, str) or not source:
        raise InvalidInputError("export has no agent_id")
    return source


def _to_json(value: Any) -> Any:
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def _from_json(name: str, row: dict[str, Any], agent_id: str, remap: _Remap | None) -> dict[str, Any]:
    """A document row as Python values for its table, moved to `agent_id` (and its ids remapped when given)."""
    table, _ = dump.DUMPED_TABLES[name]
    values: dict[str, Any] = {}
    for column, value in row.items():
        kind = table.c[column].type
        if column == "agent_id":
            value = agent_id
        elif value is None:
            pass
        elif isinstance(kind, Uuid):
            value = _uuid(name, column, value)
            value = remap(value) if remap is not None else value
        elif isinstance(kind, DateTime):
            value = _moment(name, column, value)
        elif isinstance(kind, JSONB):
            value = _move_json(value, agent_id, remap)
        values[column] = value
    return values


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


def _uuid(table: str, column: str, value: Any) -> UUID:
    try:
        return UUID(str(value))
    except ValueError as exc:
        raise InvalidInputError(f"export table {table!r}: {column} {value!r} is not a UUID") from exc


def _moment(table: str, column: str, value: Any) -> datetime:
    try:
        moment = datetime.fromisoformat(str(value))
    except ValueError as exc:
        raise InvalidInputError(f"export table {table!r}: {column} {value!r} is not an ISO 8601 moment") from exc
    if moment.utcoffset() is None:
        raise InvalidInputError(f"export table {table!r}: {column} {value!r} has no time zone")
    return moment


async def _embed_all(embedder: EmbeddingProvider, texts: list[str]) -> list[list[float]]:
    vectors: list[list[float]] = []
    for start in range(0, len(texts), DEFAULT_REEMBED_BATCH):
        vectors += await embed_texts(embedder, texts[start : start + DEFAULT_REEMBED_BATCH], purpose="restore")
    return vectors
