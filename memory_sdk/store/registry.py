"""The entity registry's statements: entities and their aliases, for alias lookup, resolution and the apply
transaction. Like store/queries.py: fixed SQL on a tenant transaction's asyncpg connection, never a commit, every
statement filtered on agent_id.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from uuid import uuid4

from memory_sdk.store.database import Connection
from memory_sdk.store.queries import lock_names, vector_param
from memory_sdk.text import normalise_alias

__all__ = [
    "EntitiesWritten",
    "EntityMatches",
    "EntityRow",
    "EntityWrite",
    "NameMatch",
    "PrefixProbe",
    "entity_names",
    "find_entities",
    "merge_entities",
    "nearest_entities",
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
    # The profile was built before the latest change of the entity's facts (store/profiles.py, migration 0006).
    profile_stale: bool = False


@dataclass
class EntityMatches:
    """What find_entities found: alias (normalised) -> entity key, and the entities themselves by key; per person
    prefix probe, the (alias, key) pairs it found, and those people's entities (kept apart from `entities`, which
    holds only what the aliases and keys named)."""

    by_alias: dict[str, str] = field(default_factory=dict)
    entities: dict[str, EntityRow] = field(default_factory=dict)
    by_prefix: dict[PrefixProbe, list[tuple[str, str]]] = field(default_factory=dict)
    prefixed: dict[str, EntityRow] = field(default_factory=dict)


@dataclass(frozen=True)
class PrefixProbe:
    """A probe for people whose alias starts with `word`, or whose alias's first word is a prefix of it of at least
    `min_chars` letters (entity resolution's nickname and prefix phases)."""

    word: str
    min_chars: int


async def find_entities(
    conn: Connection,
    agent_id: str,
    *,
    aliases: Sequence[str] = (),
    keys: Sequence[str] = (),
    prefixes: Sequence[PrefixProbe] = (),
) -> EntityMatches:
    """The entities registered under any of `aliases` (normalised) or stored under any of `keys`, and the people
    each prefix probe finds, in one statement of index probes (alias primary key, entity
    key, the alias prefix and first-word indexes)."""
    found = EntityMatches()
    probes = list(dict.fromkeys(prefixes))
    if not aliases and not keys and not probes:
        return found
    rows = await conn.fetch(
        _find_sql(len(probes)),
        agent_id,
        list(dict.fromkeys(aliases)),
        list(dict.fromkeys(keys)),
        *(value for probe in probes for value in _prefix_params(probe)),
    )
    for probe in probes:
        found.by_prefix[probe] = []
    for row in rows:
        key = row["entity_key"]
        entity = EntityRow(key, row["display_name"], row["entity_type"], row["profile_text"], row["profile_stale"])
        if row["probe"] is not None:
            found.by_prefix[probes[row["probe"]]].append((row["alias_norm"], key))
            found.prefixed[key] = entity
            continue
        found.entities[key] = entity
        if row["alias_norm"] is not None:
            found.by_alias[row["alias_norm"]] = key
    return found


_ENTITY_COLUMNS = (
    "e.entity_key, e.display_name, e.entity_type, e.profile_text, "
    "e.profile_text IS NOT NULL AND e.profile_facts_version IS DISTINCT FROM e.facts_version AS profile_stale"
)
_BY_ALIAS_AND_KEY = f"""
        SELECT NULL::int AS probe, a.alias_norm, {_ENTITY_COLUMNS}
        FROM memory_entity_aliases a
        JOIN memory_entities e ON e.agent_id = a.agent_id AND e.entity_key = a.entity_key
        WHERE a.agent_id = $1 AND a.alias_norm = ANY($2::text[])
        UNION ALL
        SELECT NULL, NULL, {_ENTITY_COLUMNS}
        FROM memory_entities e
        WHERE e.agent_id = $1 AND e.entity_key = ANY($3::text[])
"""  # noqa: S608 - assembled from this module's constants only
# One prefix probe; {probe} is its index, {like} and {firsts} its parameters' numbers. Its own
# parameters (not a join over an array of words), so that the planner sees each pattern's prefix: two index probes
# OR-ed in a bitmap, a range scan of the text_pattern_ops alias index for `word%` and the first-word expression
# index (migration 0003) for the prefixes; the cost does not grow with the registry.
_PREFIX_BRANCH = f"""
        UNION ALL
        (SELECT {{probe}}, a.alias_norm, {_ENTITY_COLUMNS}
         FROM memory_entity_aliases a
         JOIN memory_entities e ON e.agent_id = a.agent_id AND e.entity_key = a.entity_key
         WHERE a.agent_id = $1 AND e.entity_type = 'person'
           AND (a.alias_norm LIKE ${{like}} OR split_part(a.alias_norm, ' ', 1) = ANY(${{firsts}}::text[]))
         LIMIT {{limit}})
"""  # noqa: S608 - assembled from this module's constants only
# A prefix probe returns at most this many aliases.
_PREFIX_LIMIT = 50


@functools.cache
def _find_sql(probes: int) -> str:
    """find_entities' statement for a number of prefix probes (one text per number, each prepared once)."""
    branches = (
        _PREFIX_BRANCH.format(probe=n, like=4 + 2 * n, firsts=5 + 2 * n, limit=_PREFIX_LIMIT) for n in range(probes)
    )
    return _BY_ALIAS_AND_KEY + "".join(branches)


def _prefix_params(probe: PrefixProbe) -> tuple[str, list[str]]:
    """The LIKE pattern of aliases that start with the word, and the word's prefixes a first word may be."""
    return _escape_like(probe.word) + "%", [probe.word[:size] for size in range(probe.min_chars, len(probe.word))]


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


@dataclass
class EntitiesWritten:
    """What upsert_entities changed: the keys it created, and the normalised aliases it registered, by key."""

    created: set[str] = field(default_factory=set)
    registered: dict[str, list[str]] = field(default_factory=dict)


async def upsert_entities(
    conn: Connection,
    agent_id: str,
    entities: Sequence[EntityWrite],
    aliases: Sequence[tuple[str, str, str]] = (),
    *,
    source: str = "extraction",
) -> EntitiesWritten:
    """Insert each entity or count one more mention (rows in key order, so concurrent writers take row locks in
    the same order), and register (normalised alias, alias, entity key) rows, first write wins, in one statement.
    An alias of an entity of the same call is checked against it at the end of the statement, when it exists."""
    written = EntitiesWritten()
    if not entities and not aliases:
        return written
    ordered = sorted(entities, key=lambda entity: entity.key)
    names = sorted(aliases)
    rows = await conn.fetch(
        """
        WITH upserted AS (
            INSERT INTO memory_entities AS e (id, agent_id, entity_key, display_name, entity_type, name_embedding)
            SELECT id, $1, key, name, type, vec
            FROM unnest($2::uuid[], $3::text[], $4::text[], $5::text[], $6::vector[]) AS w(id, key, name, type, vec)
            ON CONFLICT (agent_id, entity_key) DO UPDATE
            SET mention_count = e.mention_count + 1,
                updated_at = clock_timestamp(),
                name_embedding = coalesce(e.name_embedding, excluded.name_embedding)
            RETURNING entity_key, mention_count
        ), registered AS (
            INSERT INTO memory_entity_aliases (agent_id, alias_norm, alias, entity_key, source)
            SELECT $1, norm, alias, key, $10 FROM unnest($7::text[], $8::text[], $9::text[]) AS a(norm, alias, key)
            ON CONFLICT (agent_id, alias_norm) DO NOTHING
            RETURNING alias_norm, entity_key
        )
        SELECT entity_key, mention_count, NULL AS alias_norm FROM upserted
        UNION ALL
        SELECT entity_key, NULL, alias_norm FROM registered
        """,
        agent_id,
        [uuid4() for _ in ordered],
        [entity.key for entity in ordered],
        [entity.name for entity in ordered],
        [entity.type for entity in ordered],
        [vector_param(entity.name_embedding) for entity in ordered],
        [norm for norm, _alias, _key in names],
        [alias for _norm, alias, _key in names],
        [key for _norm, _alias, key in names],
        source,
    )
    for row in rows:
        if row["alias_norm"] is not None:
            written.registered.setdefault(row["entity_key"], []).append(row["alias_norm"])
        elif row["mention_count"] == 1:
            written.created.add(row["entity_key"])
    return written


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


# The alias source of the row that records a merge: the from-entity's key, pointing at the survivor.
MERGE_ALIAS_SOURCE = "merge"


async def merge_entities(conn: Connection, agent_id: str, from_key: str, into_key: str) -> dict[str, int]:
    """Move everything of `from_key` into `into_key` and delete the from-entity; return what moved, per kind.

    Runs in the caller's transaction after locking both entities as the write path does (key and name), so no write
    about either interleaves. The from-entity's aliases, facts, fact links and relationships move; where the move
    would leave two open values of a single-valued attribute, or two current copies of one text, the older (the
    from-entity's copy) is closed, with the edges it was evidence of. Edges between the two entities would point at
    themselves and are deleted. The from-key itself stays findable: it is registered as an alias of the survivor
    with source "merge" (get_entity("person:mel") finds Melanie), which is the record of the merge.
    Raises LookupError when either entity does not exist.
    """
    found = await find_entities(conn, agent_id, keys=[from_key, into_key])
    missing = [key for key in (from_key, into_key) if key not in found.entities]
    if missing:
        raise LookupError(f"agent {agent_id!r} has no entity {missing[0]!r}")
    names = [found.entities[key].name for key in (from_key, into_key)]
    await lock_names(
        conn, agent_id, [*(f"key:{k}" for k in (from_key, into_key)), *(f"name:{normalise_alias(n)}" for n in names)]
    )
    closed = await _close_colliding_facts(conn, agent_id, from_key, into_key)
    counts = {"facts_closed": len(closed)}
    status = await conn.execute(_INVALIDATE_EDGES, agent_id, from_key, into_key, closed)
    counts["relationships_invalidated"] = int(status.split()[-1])
    for kind, sql in _MERGE_STATEMENTS:
        status = await conn.execute(sql, agent_id, from_key, into_key)
        counts[kind] = counts.get(kind, 0) + int(status.split()[-1])
    await conn.execute(
        """
        INSERT INTO memory_entity_aliases (agent_id, alias_norm, alias, entity_key, source)
        VALUES ($1, $2, $3, $4, $5)
        ON CONFLICT (agent_id, alias_norm) DO UPDATE SET entity_key = excluded.entity_key, source = excluded.source
        """,
        agent_id,
        normalise_alias(from_key),
        from_key,
        into_key,
        MERGE_ALIAS_SOURCE,
    )
    return counts


async def _close_colliding_facts(conn: Connection, agent_id: str, from_key: str, into_key: str) -> list[object]:
    """Close what the move would duplicate: of two open values of one single-valued attribute the older (at the
    newer's valid_from), and the from-entity's copy of a text the survivor holds open too."""
    rows = await conn.fetch(
        """
        WITH open_facts AS (
            SELECT id, entity_key, attribute, single_valued, lower(fact_text) AS text, valid_from, recorded_at
            FROM memory_facts
            WHERE agent_id = $1 AND entity_key IN ($2, $3) AND valid_to IS NULL AND invalidated_at IS NULL
        ), ends AS (
            SELECT f.id, max(g.valid_from) AS ends_at
            FROM open_facts f JOIN open_facts g ON f.entity_key <> g.entity_key
            WHERE (f.single_valued AND g.single_valued AND f.attribute = g.attribute
                   AND (f.valid_from, f.recorded_at, f.id) < (g.valid_from, g.recorded_at, g.id))
               OR (f.text = g.text AND f.entity_key = $2)
            GROUP BY f.id
        )
        UPDATE memory_facts m
        SET valid_to = greatest(m.valid_from, ends.ends_at), closed_at = clock_timestamp()
        FROM ends
        WHERE m.agent_id = $1 AND m.id = ends.id
        RETURNING m.id
        """,
        agent_id,
        from_key,
        into_key,
    )
    return [row["id"] for row in rows]


# Edges that end with the merge: those evidenced by a fact closed for it ($4), and the from-entity's current edges
# the survivor already has (the unique index allows one current edge per ends and type).
_INVALIDATE_EDGES = """
        UPDATE memory_relationships r
        SET valid_to = greatest(clock_timestamp(), coalesce(r.valid_from, clock_timestamp())),
            invalidated_at = clock_timestamp(), updated_at = clock_timestamp()
        WHERE r.agent_id = $1 AND r.invalidated_at IS NULL
          AND (r.evidence_fact_id = ANY($4::uuid[])
               OR ($2 IN (r.source_key, r.target_key) AND EXISTS (
                   SELECT 1 FROM memory_relationships o
                   WHERE o.agent_id = $1 AND o.invalidated_at IS NULL AND o.rel_type = r.rel_type
                     AND o.source_key = CASE WHEN r.source_key = $2 THEN $3 ELSE r.source_key END
                     AND o.target_key = CASE WHEN r.target_key = $2 THEN $3 ELSE r.target_key END)))
"""
# (what it counts, statement): $1 agent, $2 from-key, $3 into-key; run in this order.
_MERGE_STATEMENTS: tuple[tuple[str, str], ...] = (
    (
        "relationships_deleted",
        """
        DELETE FROM memory_relationships
        WHERE agent_id = $1 AND ((source_key = $2 AND target_key = $3) OR (source_key = $3 AND target_key = $2))
        """,
    ),
    (
        "relationships",
        """
        UPDATE memory_relationships
        SET source_key = CASE WHEN source_key = $2 THEN $3 ELSE source_key END,
            target_key = CASE WHEN target_key = $2 THEN $3 ELSE target_key END, updated_at = clock_timestamp()
        WHERE agent_id = $1 AND $2 IN (source_key, target_key)
        """,
    ),
    (
        "facts",
        "UPDATE memory_facts SET entity_key = $3 WHERE agent_id = $1 AND entity_key = $2",
    ),
    (
        "fact_links",
        """
        WITH both_linked AS (
            DELETE FROM memory_fact_entities a
            USING memory_fact_entities b
            WHERE a.agent_id = $1 AND b.agent_id = $1 AND a.entity_key = $2 AND b.entity_key = $3
              AND a.fact_id = b.fact_id
            RETURNING a.fact_id, a.is_primary
        )
        UPDATE memory_fact_entities l SET is_primary = l.is_primary OR both_linked.is_primary
        FROM both_linked WHERE l.agent_id = $1 AND l.fact_id = both_linked.fact_id AND l.entity_key = $3
        """,
    ),
    (
        "fact_links",
        "UPDATE memory_fact_entities SET entity_key = $3 WHERE agent_id = $1 AND entity_key = $2",
    ),
    (
        "aliases",
        """
        UPDATE memory_entity_aliases SET entity_key = $3
        WHERE agent_id = $1 AND entity_key = $2
        """,
    ),
    (
        "entities_deleted",
        """
        WITH gone AS (
            DELETE FROM memory_entities WHERE agent_id = $1 AND entity_key = $2
            RETURNING mention_count, profile_text
        )
        UPDATE memory_entities e
        SET mention_count = e.mention_count + gone.mention_count,
            profile_text = coalesce(e.profile_text, gone.profile_text), updated_at = clock_timestamp()
        FROM gone WHERE e.agent_id = $1 AND e.entity_key = $3
        """,
    ),
)
