"""Hybrid search over an agent's facts: three ranked signals fused by weighted reciprocal rank fusion.

- vector: cosine distance of the fact embeddings to the query's (pgvector). An agent with fewer than
  EXACT_SCAN_MAX_FACTS facts passing the filters is ranked exactly; a larger one through the HNSW index with the
  iterative scan (store/candidates.py explains why: filters starve a plain index scan, a generic plan filters it
  to nothing), re-ranked by exact distance, with the facts of the last writes that are not in the index yet
  (store/indexing.py) ranked exactly beside it, and ranked exactly if those still are too few;
- keyword: PostgreSQL full text over the generated `text_search` column (migration 0007): `simple` configuration,
  accents and case folded by memory_sdk_fold on both sides, stop words of English and Portuguese dropped from the
  query, the other words OR-ed (prefix matches for words of 4+ letters); names and short numbers rank the matches
  (ts_rank_cd) but do not select them, and at most KEYWORD_SCAN_MAX matches are ranked;
- graph: the entities the query names (its word n-grams looked up in the alias registry, as the write path's
  alias lookup does, and first names) and their one-hop neighbours through the relationships valid then: each
  one's newest facts and the edges' evidence facts, ranked by cosine distance to the query.

Every signal applies the same filters as get_facts (store/reads.py): agent, confidence floor, `as_of` (valid
time), `known_at` (transaction time), and the optional entity. It runs inside a tenant transaction, so row-level
security is the second wall behind the agent predicate. Fusion (`fuse`) is a pure function; see docs/search.md.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from typing import Any, Literal
from uuid import UUID

from sqlalchemy import (
    ARRAY,
    Float,
    Text,
    and_,
    false,
    func,
    literal,
    literal_column,
    not_,
    or_,
    select,
    text,
    true,
    union_all,
)
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.elements import ColumnClause

from memory_sdk.results import Fact
from memory_sdk.store import profiles, reads, registry
from memory_sdk.store import tables as t
from memory_sdk.store.candidates import EXACT_SCAN_MAX_FACTS
from memory_sdk.store.queries import FACT_COLUMNS
from memory_sdk.store.registry import EntityRow
from memory_sdk.store.rows import fact_from_row
from memory_sdk.text import fold, message_ngrams, normalise_alias

__all__ = [
    "HNSW_OVERFETCH",
    "RRF_K",
    "SIGNALS",
    "SIGNAL_WEIGHTS",
    "FusedFact",
    "SearchOutcome",
    "SearchRequest",
    "Signal",
    "current_profiles",
    "fuse",
    "hnsw_order",
    "keyword_query",
    "named_entities",
    "query_words",
    "search_facts",
]

Signal = Literal["vector", "keyword", "graph"]
SIGNALS: tuple[Signal, ...] = ("vector", "keyword", "graph")
# Reciprocal rank fusion's constant (Cormack, Clarke & Büttcher, SIGIR 2009, who found 60 near-best across
# collections): a fact's fused score is the sum over signals of 1 / (RRF_K + rank). A large constant lets a fact
# that two signals rank fairly high beat one that a single signal ranks first.
RRF_K = 60
# Each signal's vote in the fusion: 1 / (RRF_K + rank) times its weight. The graph ranks the facts it reaches by
# the same embedding distance as the vector signal, so half of its vote is a second vote of the vector's; at half
# weight it adds what is its own (which facts the named entities reach). On benchmarks/retrieval.py's questions
# this took the hybrid from below the vector signal alone (recall@5 0.837 vs 0.859 with LocalEmbedder) to above it
# with either embedder (docs/search.md); the weight was chosen on those questions, there is no held-out set.
SIGNAL_WEIGHTS: Mapping[Signal, float] = MappingProxyType({"vector": 1.0, "keyword": 1.0, "graph": 0.5})
# Facts each signal hands to fusion (at least k): deep enough that a fact found by two signals at ranks 30 and
# 40 still counts for both, small enough that every signal stays a bounded index probe.
SIGNAL_POOL = 50
# Graph expansion: the strongest edges followed from the named entities, and the newest facts of each entity of the
# expanded neighbourhood that are ranked by distance (bounded, so an entity with 100k facts costs what one with 25
# does: at most (named + 20) x 25 vectors compared).
GRAPH_NEIGHBOURS_MAX = 20
GRAPH_FACTS_PER_ENTITY = 25
# Full-text matches ranked per search. Ranking reads every match: a word in 60% of 100,000 facts took 120-590 ms
# to rank, 2,000 matches about 55 ms and 500 about 15 ms on the (loaded) development machine. Past the cap the
# signal ranks the matches the index yields first (in table order, oldest rows first); the vector and graph
# signals still see every fact.
KEYWORD_SCAN_MAX = 500
# Words a question is made of rather than what it asks about, in the two languages facts are stored in; a
# `simple` configuration keeps them in the index, so the query must leave them out or every fact matches.
_STOP_WORDS_TEXT = """
    a an and are as at be been but by can could did do does for from had has have he her hers him his how i if in
    into is it its me my no not of on or our she so than that the their them then there these they this to us was
    we were what when where which who whom why will with would you your yours about after before any all some
    o os as um uma uns umas e ou de da do das dos em na no nas nos num numa por pra pro para pelo pela pelos pelas
    com sem que quem qual quais quando onde como porque se ele ela eles elas eu tu voce voces nos meu minha meus
    minhas seu sua seus suas teu tua dele dela deles delas isso isto aquilo esse essa este esta e foi era ser sao
    tem ter tinha ja mais muito mas nao sim ao aos
"""
_STOP_WORDS = frozenset(_STOP_WORDS_TEXT.split())
# Query words shorter than this are matched whole; longer ones also match as a prefix ("move" finds "moved").
_PREFIX_MIN_CHARS = 4
# Numbers shorter than this select no facts (days, months, amounts: in most facts of a large memory); a year does.
_NUMBER_MIN_DIGITS = 4
_WORD = re.compile(r"[^\W_]+")
# A query word names a person whose first name it is when it has this many letters ("Ana" yes, "Jo" no, as the
# write path's prefix rule), and at most this many people are taken for a query (a common first name).
_FIRST_NAME_MIN_CHARS = 3
_FIRST_NAME_MATCHES_MAX = 20
_TEXT_SEARCH: ColumnClause[Any] = literal_column("memory_facts.text_search")
_SIMPLE: ColumnClause[Any] = literal_column("'simple'::regconfig")
# For the HNSW statement only (a search's transaction ends after it): walk the index instead of sorting the
# agent's facts by distance (the planner does not price 1536-dimensional distances: it sorted a subject of 5,786
# facts in 137 ms where the walk took 26), and let the iterative scan visit 50,000 tuples in 8 x work_mem (defaults
# 20,000 and 1 x: 1536-dimensional candidates fill 4 MB after a few hundred tuples). The candidate list stays the
# connection's 100, not the 400 the write path once walked with: search wants 50 good neighbours, not
# one planted near-duplicate; in benchmarks/search_scale.py 100 took the vector signal from 42 to 27 ms (p50) for
# an agent of 10,000 facts beside one of 100,000, with the same recall.
_PREFER_INDEX_ORDER = text(
    "SELECT set_config('enable_sort', 'off', true), "
    "set_config('hnsw.max_scan_tuples', '50000', true), set_config('hnsw.scan_mem_multiplier', '8', true)"
)

# Rows walked from the facts' HNSW index before the full-precision re-rank (the walk's order is approximate and
# half precision).
HNSW_OVERFETCH = 40


@functools.cache
def hnsw_order(dim: int, query: str) -> str:
    """The ORDER BY expression the facts' HNSW index serves (migration 0008): half-precision cosine distance.
    It must match the index expression exactly, vector size included, or the planner cannot use the index."""
    return f"f.embedding::halfvec({dim}) <=> {query}::halfvec({dim})"


@dataclass(frozen=True)
class SearchRequest:
    """A validated search: the query, its embedding and the filters get_facts has."""

    text: str
    embedding: list[float]
    k: int
    entity_key: str | None
    as_of: datetime | None
    known_at: datetime | None
    min_confidence: float
    # The signals to run: all of them for search(); one alone to measure it (benchmarks/retrieval.py).
    signals: frozenset[Signal] = frozenset(SIGNALS)


@dataclass(frozen=True)
class FusedFact:
    """A fact after fusion: its fused score and its 1-based rank in each signal that found it."""

    fact: Fact
    score: float
    ranks: dict[Signal, int]


@dataclass(frozen=True)
class NamedEntities:
    """The entities a query names, and the (folded) words of the query that named them."""

    entities: list[EntityRow]
    words: frozenset[str]


@dataclass(frozen=True)
class SearchOutcome:
    """The top facts, the display name of each hit's entity, and the entities the query names."""

    hits: list[FusedFact]
    entity_names: dict[str, str]
    named: list[EntityRow]


async def search_facts(session: AsyncSession, agent_id: str, request: SearchRequest) -> SearchOutcome:
    """The request's top-k facts, in a tenant transaction (Database.transaction(agent_id))."""
    named = await named_entities(session, agent_id, request.text)
    filters = _filters(agent_id, request)
    pool = max(request.k, SIGNAL_POOL)
    facts: dict[UUID, Fact] = {}
    rankings: dict[Signal, list[UUID]] = {}
    if "keyword" in request.signals:
        ranked_by = keyword_query(request.text)
        matched_by = keyword_query(request.text, skip=named.words, selecting=True) or ranked_by
        rankings["keyword"] = _collect(await _keyword(session, filters, matched_by, ranked_by, pool), facts)
    if "graph" in request.signals and named.entities:
        keys = [entity.key for entity in named.entities]
        rankings["graph"] = _collect(await _graph(session, agent_id, filters, request, keys, pool), facts)
    if "vector" in request.signals:  # last: its index settings hold to the end of the transaction
        rankings["vector"] = _collect(await _vector(session, filters, request, pool), facts)
    hits = fuse(rankings, facts)[: request.k]
    keys = sorted({hit.fact.entity_key for hit in hits})
    names = await session.execute(
        select(t.entities.c.entity_key, t.entities.c.display_name).where(
            t.entities.c.agent_id == agent_id, t.entities.c.entity_key.in_(keys)
        )
    )
    return SearchOutcome(hits, {key: name for key, name in names.all()}, named.entities)


async def current_profiles(session: AsyncSession, agent_id: str, named: Sequence[EntityRow]) -> list[EntityRow]:
    """The named entities whose profile was built from their facts as they are now (store/profiles.py): a stale
    profile may say what is no longer true."""
    with_profile = [entity for entity in named if entity.profile_text]
    stale = await profiles.stale_profiles(
        await _driver_connection(session), agent_id, [entity.key for entity in with_profile]
    )
    return [entity for entity in with_profile if entity.key not in stale]


async def named_entities(session: AsyncSession, agent_id: str, query: str) -> NamedEntities:
    """The entities a query names: its word n-grams found in the alias registry (as the write path's alias lookup
    finds them), and the people whose first name is one of its words ("Clara" names Clara Rezende, whose alias
    is her full name), through the first-word index of migration 0003."""
    found = await registry.find_entities(await _driver_connection(session), agent_id, aliases=message_ngrams(query))
    named = dict(found.entities)
    name_words = {word for alias in found.by_alias for word in alias.split()}
    words = [normalise_alias(word) for word in query_words(query) if len(fold(word)) >= _FIRST_NAME_MIN_CHARS]
    if words:
        a, e = t.aliases.c, t.entities.c
        first_word = func.split_part(a.alias_norm, " ", 1)
        people = await session.execute(
            select(e.entity_key, e.display_name, e.entity_type, e.profile_text, first_word)
            .join_from(t.aliases, t.entities, and_(e.agent_id == a.agent_id, e.entity_key == a.entity_key))
            .where(a.agent_id == agent_id, e.entity_type == "person", first_word.in_(words))
            .limit(_FIRST_NAME_MATCHES_MAX)
        )
        for key, name, type_, profile, word in people.all():
            named.setdefault(key, EntityRow(key, name, type_, profile))
            name_words.add(word)
    return NamedEntities(list(named.values()), frozenset(name_words))


def fuse(rankings: Mapping[Signal, Sequence[UUID]], facts: Mapping[UUID, Fact]) -> list[FusedFact]:
    """Weighted reciprocal rank fusion of the signals' rankings (SIGNAL_WEIGHTS), best first.

    Ties (the same ranks in the same signals) go to the more important fact, then to the more recent one (later
    valid_from), then to the id, so the order is total and repeatable.
    """
    scores: dict[UUID, float] = {}
    ranks: dict[UUID, dict[Signal, int]] = {}
    for signal, ranking in rankings.items():
        for position, fact_id in enumerate(ranking, start=1):
            scores[fact_id] = scores.get(fact_id, 0.0) + SIGNAL_WEIGHTS[signal] / (RRF_K + position)
            ranks.setdefault(fact_id, {})[signal] = position

    def order(fact_id: UUID) -> tuple[float, float, float, str]:
        fact = facts[fact_id]
        return (-scores[fact_id], -fact.importance, -fact.valid_from.timestamp(), str(fact_id))

    return [FusedFact(facts[fact_id], scores[fact_id], ranks[fact_id]) for fact_id in sorted(scores, key=order)]


def keyword_query(query: str, skip: frozenset[str] = frozenset(), *, selecting: bool = False) -> str | None:
    """The tsquery text of a query: its words, stop words and the `skip` words (folded) left out, OR-ed, the
    longer ones as prefixes; None when no word is left. Words are letters and digits only, so nothing in them is
    tsquery syntax; the database folds accents and case (memory_sdk_fold), as it did for the indexed facts.

    search() selects facts by the words that name no entity and are not short numbers (`selecting=True`), and
    ranks them by every word: a name is the commonest word of an agent's memory (the speaker's is in most facts),
    and "3" or "2021" of a date in most others, which full text would select by the thousands for nothing."""
    terms = [
        f"'{word}':*" if len(fold(word)) >= _PREFIX_MIN_CHARS else f"'{word}'"
        for word in query_words(query)
        if normalise_alias(word) not in skip and not (selecting and word.isdigit() and len(word) < _NUMBER_MIN_DIGITS)
    ]
    return " | ".join(terms) or None


def query_words(query: str) -> list[str]:
    """The query's words (letters and digits, lower case, each once) that are not stop words nor single letters
    (the "s" of "Rafael's" is a word of every possessive)."""
    words = dict.fromkeys(_WORD.findall(query.lower()))
    return [word for word in words if fold(word) not in _STOP_WORDS and (len(word) > 1 or word.isdigit())]


def _filters(agent_id: str, request: SearchRequest) -> list[Any]:
    """get_facts' filters: the same clauses (store/reads.py), not a second copy of them."""
    f = t.facts.c
    clauses = [f.agent_id == agent_id, f.confidence >= request.min_confidence]
    clauses += reads.validity(request.as_of, request.known_at)
    if request.entity_key is not None:
        clauses.append(reads.about_entity(agent_id, [request.entity_key]))
    return clauses


async def _keyword(
    session: AsyncSession, filters: list[Any], matched_by: str | None, ranked_by: str | None, pool: int
) -> list[Any]:
    """Facts matching any term of `matched_by` (the first KEYWORD_SCAN_MAX the GIN index yields), ranked by
    ts_rank_cd against `ranked_by`: the query's words that name no entity select the facts, all its words rank them,
    so "Rafael's birthday" finds the facts about a birthday, Rafael's first, without ranking every fact that
    says "Rafael"."""
    if matched_by is None or ranked_by is None:
        return []
    matching = func.to_tsquery(_SIMPLE, func.memory_sdk_fold(literal(matched_by)))
    matched = (
        select(*FACT_COLUMNS, _TEXT_SEARCH.label("text_search"))
        .where(*filters, _TEXT_SEARCH.op("@@")(matching))
        .limit(KEYWORD_SCAN_MAX)
        .subquery()
    )
    ranking = func.to_tsquery(_SIMPLE, func.memory_sdk_fold(literal(ranked_by)))
    rank = func.ts_rank_cd(matched.c.text_search, ranking, type_=Float)
    columns = [matched.c[column.name] for column in FACT_COLUMNS]
    statement = (
        select(*columns)
        .order_by(rank.desc(), matched.c.importance.desc(), matched.c.valid_from.desc(), matched.c.id)
        .limit(pool)
    )
    return list((await session.execute(statement)).all())


async def _vector(session: AsyncSession, filters: list[Any], request: SearchRequest, pool: int) -> list[Any]:
    """Nearest facts: exact for a small filtered set; else the current ones through the HNSW index (iterative scan,
    re-ranked by full-precision distance) with the current ones not indexed yet ranked exactly beside them
    (store/indexing.py) and, for a past view, the closed ones too (the index holds current facts only, migration
    0008); else, when those are too few, exact."""
    f = t.facts.c
    capped = select(literal(1)).where(*filters).limit(EXACT_SCAN_MAX_FACTS).subquery()
    count = (await session.execute(select(func.count()).select_from(capped))).scalar_one()
    distance = f.embedding.cosine_distance(request.embedding).label("distance")
    if count >= EXACT_SCAN_MAX_FACTS:
        await session.execute(_PREFER_INDEX_ORDER)
        current = (f.valid_to.is_(None), f.invalidated_at.is_(None), f.embedding.is_not(None))
        walked = _walk([*filters, *current], distance, request.embedding, max(pool, HNSW_OVERFETCH)).subquery("walked")
        # The current facts the indexer has not added to the graph yet (store/indexing.py): the last writes' few,
        # ranked exactly through their own partial index.
        unindexed = select(*FACT_COLUMNS, distance).where(*filters, *current, not_(f.indexed)).offset(0).subquery()
        nearest_unindexed = select(unindexed).order_by(unindexed.c.distance).limit(pool).subquery("unindexed")
        parts = [select(walked, true().label("walked")), select(nearest_unindexed, false().label("walked"))]
        if request.as_of is not None or request.known_at is not None:
            closed = (
                select(*FACT_COLUMNS, distance)
                .where(*filters, or_(f.valid_to.is_not(None), f.invalidated_at.is_not(None)), f.embedding.is_not(None))
                .offset(0)
                .subquery("closed")
            )
            nearest_closed = select(closed).order_by(closed.c.distance).limit(pool).subquery("nearest_closed")
            parts.append(select(nearest_closed, false().label("walked")))
        found: Any = union_all(*parts).subquery("found")
        rows = list((await session.execute(select(found).order_by(found.c.distance))).all())
        # The walk vouches for the ranking only if it filled the pool itself: one that comes back short stopped early
        # (at hnsw.max_scan_tuples or its memory limit, when many facts of other agents lie nearer the query than the
        # agent's own), and the facts ranked beside it must not stand in for the ones it did not reach.
        if sum(1 for row in rows if row.walked) >= pool:
            return rows[:pool]
    # OFFSET 0 keeps the distance ranking from being planned as an index scan (store/candidates.py).
    fenced = select(*FACT_COLUMNS, distance).where(*filters, f.embedding.is_not(None)).offset(0).subquery()
    statement = select(fenced).order_by(fenced.c.distance, fenced.c.recorded_at.desc()).limit(pool)
    return list((await session.execute(statement)).all())


def _walk(conditions: list[Any], distance: Any, embedding: list[float], limit: int) -> Any:
    """The indexed facts meeting `conditions`, `limit` of them, in the order a walk of the facts' HNSW index gives
    (approximate, half precision), each with its full-precision `distance`."""
    return (
        select(*FACT_COLUMNS, distance)
        .where(*conditions, t.facts.c.indexed)
        .order_by(_index_order(embedding))
        .limit(limit)
    )


def _index_order(embedding: list[float]) -> Any:
    """The facts' HNSW index expression (hnsw_order) as a SQLAlchemy clause, the query bound."""
    expression = hnsw_order(len(embedding), "CAST(:query AS vector)").replace("f.embedding", "memory_facts.embedding")
    return text(expression).bindparams(query=embedding)


async def _graph(
    session: AsyncSession,
    agent_id: str,
    filters: list[Any],
    request: SearchRequest,
    named: list[str],
    pool: int,
) -> list[Any]:
    """The newest GRAPH_FACTS_PER_ENTITY facts of each named entity and of each neighbour through the edges valid
    then (the GRAPH_NEIGHBOURS_MAX strongest), and the edges' evidence facts; nearest to the query first.

    Each entity's newest facts are a backward walk of the (agent, entity, valid_from) index that stops after
    GRAPH_FACTS_PER_ENTITY rows: an entity with 60,000 facts costs what one with 60 does."""
    edges = []
    for key in named:
        edges += await reads.read_relationships(
            session, agent_id, entity_key=key, as_of=request.as_of, include_invalidated=False
        )
    edges.sort(key=lambda edge: -edge.strength)
    keys = list(dict.fromkeys(named))
    evidence = []
    for edge in edges[:GRAPH_NEIGHBOURS_MAX]:
        keys += [key for key in (edge.source_key, edge.target_key) if key not in keys]
        if edge.evidence_fact_id is not None:
            evidence.append(edge.evidence_fact_id)
    f = t.facts.c
    entity = func.unnest(literal(keys, ARRAY(Text))).table_valued("key").render_derived(name="entity")
    newest = (
        select(*FACT_COLUMNS, f.embedding)
        .where(*filters, f.entity_key == entity.c.key)
        .order_by(f.valid_from.desc())
        .limit(GRAPH_FACTS_PER_ENTITY)
        .lateral("newest")
    )
    reached = union_all(
        select(newest).select_from(entity.join(newest, true())),
        select(*FACT_COLUMNS, f.embedding).where(*filters, f.id.in_(evidence)),
    ).subquery()
    distance = reached.c.embedding.cosine_distance(request.embedding)
    statement = (
        select(*(reached.c[column.name] for column in FACT_COLUMNS))
        .order_by(distance.asc().nulls_last(), reached.c.importance.desc(), reached.c.id)
        .limit(pool)
    )
    return list((await session.execute(statement)).all())


def _collect(rows: list[Any], facts: dict[UUID, Fact]) -> list[UUID]:
    """The rows' fact ids in rank order, each once (at its best rank); each fact kept once in `facts`."""
    ranking: dict[UUID, None] = {}
    for row in rows:
        if row.id not in facts:
            facts[row.id] = fact_from_row(row)
        ranking.setdefault(row.id)
    return list(ranking)


async def _driver_connection(session: AsyncSession) -> Any:
    """The asyncpg connection under the session, inside its transaction: registry lookups (fixed asyncpg SQL) run
    in the same tenant transaction as the SQLAlchemy statements."""
    connection = await session.connection()
    raw = await connection.get_raw_connection()
    return raw.driver_connection
