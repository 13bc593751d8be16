"""The entity registry's statements: entities and their aliases, for alias lookup, resolution and the apply
transaction. Like store/queries.py: fixed SQL on a tenant transaction's asyncpg connection, never a commit, every
statement filtered on agent_id.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from uuid import uuid4

from memory_sdk.store.database import Connection
from memory_sdk.store.queries import vector_param

__all__ = [
    "EntityMatches",
    "EntityRow",
    "EntityWrite",
    "NameMatch",
    "entity_names",
    "find_entities",
    "nearest_entities",
    "person_alias_prefixes",
    "register_aliases",
    "seed_profile",
    "upsert_entities",
]


@dataclass(frozen=True)
class EntityRow:
    """A stored entity as the pipeline reads it."""

    key: str
    name: str
    type: str
    profile_text: str | None


@dataclass
class EntityMatches:
    """What find_entities found: alias (normalised) -> entity key, and the entities themselves by key."""

    by_alias: dict[str, str] = field(default_factory=dict)
    entities: dict[str, EntityRow] = field(default_factory=dict)


async def find_entities(
    conn: Connection, agent_id: str, *, aliases: Sequence[str] = (), keys: Sequence[str] = ()
) -> EntityMatches:
    """The entities registered under any of `aliases` (normalised) or stored under any of `keys`, in one
    statement of index probes (alias primary key, entity key)."""
    found = EntityMatches()
    if not aliases and not keys:
        return found
    rows = await conn.fetch(
        """
        SELECT a.alias_norm, e.entity_key, e.display_name, e.entity_type, e.profile_text
        FROM memory_entity_aliases a
        JOIN memory_entities e ON e.agent_id = a.agent_id AND e.entity_key = a.entity_key
        WHERE a.agent_id = $1 AND a.alias_norm = ANY($2::text[])
        UNION ALL
        SELECT NULL, e.entity_key, e.display_name, e.entity_type, e.profile_text
        FROM memory_entities e
        WHERE e.agent_id = $1 AND e.entity_key = ANY($3::text[])
        """,
        agent_id,
        list(dict.fromkeys(aliases)),
        list(dict.fromkeys(keys)),
    )
    for row in rows:
        key = row["entity_key"]
        found.entities[key] = EntityRow(key, row["display_name"], row["entity_type"], row["profile_text"])
        if row["alias_norm"] is not None:
            found.by_alias[row["alias_norm"]] = key
    return found


async def person_alias_prefixes(conn: Connection, agent_id: str, word: str, min_chars: int) -> list[tuple[str, str]]:
    """(alias_norm, entity_key) of people whose alias starts with `word`, or whose first word is a prefix of it
    (of at least `min_chars` letters).

    Two index probes, OR-ed in a bitmap: a range scan of the text_pattern_ops alias index for `word%`, and the
    first-word expression index (migration 0003) for the prefixes; the cost does not grow with the registry.
    """
    prefixes = [word[:size] for size in range(min_chars, len(word))]
    rows = await conn.fetch(
        """
        SELECT a.alias_norm, a.entity_key
        FROM memory_entity_aliases a
        JOIN memory_entities e ON e.agent_id = a.agent_id AND e.entity_key = a.entity_key
        WHERE a.agent_id = $1 AND e.entity_type = 'person'
          AND (a.alias_norm LIKE $2 OR split_part(a.alias_norm, ' ', 1) = ANY($3::text[]))
        LIMIT 50
        """,
        agent_id,
        _escape_like(word) + "%",
        prefixes,
    )
    return [(row["alias_norm"], row["entity_key"]) for row in rows]


def _escape_like(text_: str) -> str:
    return text_.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


@dataclass(frozen=True)
class NameMatch:
    """An entity whose name is near a searched name, with the cosine (or string) similarity."""

    key: str
    name: str
    type: str
    score: float


async def nearest_entities(conn: Connection, agent_id: str, embedding: list[float], limit: int) -> list[NameMatch]:
    """The agent's entities whose name embedding is nearest, through the HNSW index."""
    # The pooled connection's hnsw.iterative_scan keeps the scan going until `limit` rows pass the agent filter.
    rows = await conn.fetch(
        """
        SELECT entity_key, display_name, entity_type, 1 - (name_embedding <=> $2) AS score
        FROM memory_entities
        WHERE agent_id = $1 AND name_embedding IS NOT NULL
        ORDER BY name_embedding <=> $2
        LIMIT $3
        """,
        agent_id,
        vector_param(embedding),
        limit,
    )
    return [NameMatch(r["entity_key"], r["display_name"], r["entity_type"], float(r["score"])) for r in rows]


async def entity_names(conn: Connection, agent_id: str) -> list[EntityRow]:
    """Every entity of the agent: the string-similarity fallback's candidates (only when embeddings failed)."""
    rows = await conn.fetch(
        "SELECT entity_key, display_name, entity_type FROM memory_entities WHERE agent_id = $1", agent_id
    )
    return [EntityRow(r["entity_key"], r["display_name"], r["entity_type"], None) for r in rows]


@dataclass(frozen=True)
class EntityWrite:
    """An entity to insert, or to count one more mention of."""

    key: str
    name: str
    type: str
    name_embedding: list[float] | None


async def upsert_entities(conn: Connection, agent_id: str, entities: Sequence[EntityWrite]) -> set[str]:
    """Insert each entity or count one more mention, in one statement (rows in key order, so concurrent writers
    take row locks in the same order); return the keys that were created."""
    if not entities:
        return set()
    ordered = sorted(entities, key=lambda entity: entity.key)
    rows = await conn.fetch(
        """
        INSERT INTO memory_entities AS e (id, agent_id, entity_key, display_name, entity_type, name_embedding)
        SELECT id, $1, key, name, type, vec
        FROM unnest($2::uuid[], $3::text[], $4::text[], $5::text[], $6::vector[]) AS w(id, key, name, type, vec)
        ON CONFLICT (agent_id, entity_key) DO UPDATE
        SET mention_count = e.mention_count + 1,
            updated_at = clock_timestamp(),
            name_embedding = coalesce(e.name_embedding, excluded.name_embedding)
        RETURNING entity_key, mention_count
        """,
        agent_id,
        [uuid4() for _ in ordered],
        [entity.key for entity in ordered],
        [entity.name for entity in ordered],
        [entity.type for entity in ordered],
        [vector_param(entity.name_embedding) for entity in ordered],
    )
    return {row["entity_key"] for row in rows if row["mention_count"] == 1}


async def register_aliases(
    conn: Connection, agent_id: str, aliases: Sequence[tuple[str, str, str]], *, source: str
) -> dict[str, list[str]]:
    """Register (normalised alias, alias, entity key) rows, first write wins, in one statement; return the
    normalised aliases that were new, by entity key."""
    if not aliases:
        return {}
    ordered = sorted(aliases)
    rows = await conn.fetch(
        """
        INSERT INTO memory_entity_aliases (agent_id, alias_norm, alias, entity_key, source)
        SELECT $1, norm, alias, key, $5 FROM unnest($2::text[], $3::text[], $4::text[]) AS a(norm, alias, key)
        ON CONFLICT (agent_id, alias_norm) DO NOTHING
        RETURNING alias_norm, entity_key
        """,
        agent_id,
        [norm for norm, _alias, _key in ordered],
        [alias for _norm, alias, _key in ordered],
        [key for _norm, _alias, key in ordered],
        source,
    )
    registered: dict[str, list[str]] = {}
    for row in rows:
        registered.setdefault(row["entity_key"], []).append(row["alias_norm"])
    return registered


async def seed_profile(conn: Connection, *, agent_id: str, entity_key: str, profile_text: str) -> bool:
    """Set profile_text only where it is NULL; True when it was seeded."""
    seeded = await conn.fetchval(
        """
        UPDATE memory_entities SET profile_text = $3, updated_at = clock_timestamp()
        WHERE agent_id = $1 AND entity_key = $2 AND profile_text IS NULL
        RETURNING id
        """,
        agent_id,
        entity_key,
        profile_text,
    )
    return seeded is not None
