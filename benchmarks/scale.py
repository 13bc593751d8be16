"""The SDK's own overhead per write as an agent's memory grows: 100, 10,000 and 100,000 facts per agent.

One database (a fresh embedded PostgreSQL in a temporary directory, stopped and removed at the end, or `--database-url`)
is seeded with one agent per size. Each agent's facts are realistic sentences (templates and numbers) with HashEmbedder
vectors of their text made dense (_common.DenseEmbedder: a fixed orthogonal transform, the same cosines, every dimension
used as in a real model's vectors): more than half are about one subject, the speaker "Rafael"
(person:rafael), the rest about up to 200 other people, places and organisations. The seed has what real memory has:
entities with name embeddings and their display names as aliases, single-valued attributes (lives_in, employer,
job_title) with closed historical versions, a few corrected (retracted) versions, fact-entity links, relationships with
evidence facts, one source event per 500 facts. Rows are bulk-loaded with COPY; the facts' HNSW index is dropped for the
load and rebuilt with the migration's own definition, then VACUUM ANALYZE and a CHECKPOINT.

Then, per size, `--writes` writes (after `--warmup` unmeasured ones) go through the public API,
`memory.write(agent, message, speaker_name="Rafael", verbose=True)`, with a ScriptedLLM, instant unless
`--llm-ms` makes each call wait that long first (as a hosted model's call would: the fact indexer adds a write's
facts to the HNSW index after its commit, in the background, and with an instant model that work overlaps the next
write on the server's cores instead of a model call): 3 facts (2 about
Rafael, 1 about another entity), 2-3 entities and 1 relation per write. The writes cycle through new facts, a repeat
of a stored fact (NOOP without LLM), a move to another city (lives_in UPDATE) and a near-duplicate of a stored fact
(NOOP by the LLM); reconciliation answers UPDATE/NOOP on the candidate it expects when it is shown, else ADD.

  overhead per write = wall time - LLM time (the trace's llm_calls) - embedder time (a timing wrapper)

Printed: load times; p50/p95 overhead, the client thread's CPU per write (the machine's speed of the minute), SQL
statements (SAVEPOINTs also counted apart), transactions, pool pre-pings (each a BEGIN, an empty query and a ROLLBACK,
not in the other counts) and the fact indexer's batches (store/indexing.py: after the writes, in the background; not in
the other counts) per write; the growth of p95 from the smallest to the largest size; the median duration of each
pipeline stage; and a recall check: 2K facts planted in the subject's memory, K writes whose fact is a near-duplicate of
one (recall: the reconciliation prompt showed the planted fact) and K whose fact is the identical text (recall: the
write reports it in facts_unchanged), once on the pooled connections and once on fresh ones (PostgreSQL may plan the
candidate query differently once a connection has run it more than 5 times). Recall is 1.0 when candidate retrieval is
right.

    python benchmarks/scale.py [--sizes 100 10000 100000] [--writes 80] [--dim 1536] [--recall-k 20]
    python benchmarks/scale.py --sizes 100 100000 --llm-ms 300   # each LLM call waits 300 ms (not in the overhead)
    python benchmarks/scale.py --quick         # sizes 100 2000, 10 writes, K=3: a smoke run (~15 s)
    python benchmarks/scale.py --database-url postgresql://user:pw@host/db   # an existing database
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import math
import random
import re
import statistics
import string
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import asyncpg  # type: ignore[import-untyped, unused-ignore]
from _common import (
    CITIES,
    SqlCounter,
    TimedEmbedder,
    asyncpg_dsn,
    bench_embedder,
    database,
    format_table,
    llm_ms,
    percentile,
    prompt_message,
    reconciliation_prompt,
)
from pgvector.asyncpg import register_vector
from sqlalchemy import text as sql_text

import memory_sdk.text
from memory_sdk import MemoryClient, MemoryConfig
from memory_sdk.llm.protocols import LLMRequest
from memory_sdk.llm.schemas import IMPORTANCE_BY_CATEGORY
from memory_sdk.results import WriteResult
from memory_sdk.testing import ScriptedLLM
from memory_sdk.text import entity_key, normalise_alias

SUBJECT = "Rafael"
SUBJECT_KEY = entity_key("person", SUBJECT)
# The migration's definition (0001_initial.py), recreated exactly after the bulk load.
FACTS_HNSW_INDEX = "CREATE INDEX ix_memory_facts_embedding ON memory_facts USING hnsw (embedding vector_cosine_ops)"
FACTS_PER_EVENT = 500
COPY_CHUNK = 2000
SCHEMA_VERSION = 1
NOW = datetime.now(UTC).replace(microsecond=0)

# --- vocabulary -----------------------------------------------------------------------------------------------------

# fmt: off
FIRST = [
    "Marina", "Carlos", "Beatriz", "Joana", "Thiago", "Lucas", "Fernanda", "Paulo", "Aline", "Rodrigo", "Camila",
    "Gustavo", "Helena", "Igor", "Larissa", "Mateus", "Natalia", "Otavio", "Priscila", "Renato", "Sofia", "Vinicius",
    "Yara", "Bruno"
]
# fmt: on
LAST = ["Duarte", "Moreira", "Teixeira", "Cardoso", "Barros", "Pacheco", "Lopes", "Farias", "Nogueira", "Siqueira"]
ORG_HEADS = ["Acme", "Pinheiro", "Aurora", "Vale", "Horizonte", "Atlas", "Boreal", "Cobalto", "Delta", "Estrela"]
ORG_TAILS = ["Robotics", "Advogados", "Logistica", "Software", "Seguros", "Clinica", "Editora", "Foods"]
PARKS = ["Barigui Park", "Parque Tangua", "Jardim Botanico", "Ibirapuera", "the lake trail", "Parque da Cidade"]
RESTAURANTS = ["a Japanese place", "a pizzeria", "the corner bakery", "a vegan bistro", "a churrascaria", "a taqueria"]
ITEMS = ["bicycle", "laptop", "espresso machine", "pair of running shoes", "monitor", "tent", "guitar", "backpack"]
BOOK_ADJ = ["Silent", "Last", "Hidden", "Broken", "Golden", "Distant", "Frozen", "Quiet", "Red", "Endless"]
BOOK_NOUN = ["River", "Garden", "Harbour", "Mountain", "Letter", "Orchard", "Lighthouse", "Archive", "Bridge"]
HOLIDAYS = ["Carnival", "Easter", "Christmas", "New Year", "Corpus Christi", "July"]
SKILLS = ["guitar", "swimming", "German", "pottery", "chess", "salsa", "photography", "climbing"]
FOODS = ["feijoada", "sushi", "lasagna", "tacos", "ramen", "moqueca", "pastel", "falafel", "risotto"]
DOCTORS = ["dentist", "dermatologist", "physiotherapy", "eye doctor", "cardiologist"]
GAMES = ["chess", "padel", "table tennis", "poker", "trivia", "bowling"]
VEHICLES = ["car", "motorbike", "bicycle", "scooter"]
PARTS = ["battery", "chain", "clutch", "set of tyres", "brake pad", "headlight"]
PROJECTS = ["billing", "migration", "onboarding", "warehouse", "mobile app", "analytics", "payments"]
PLANTS = ["tomato", "basil", "pepper", "lettuce", "strawberry", "rosemary"]
MARKETS = ["the farmers market", "Mercado Municipal", "the supermarket downtown", "the organic store"]
ANIMALS = ["cat", "dog", "parrot", "rabbit", "turtle"]
PETS = ["Tofu", "Biscoito", "Luna", "Pipoca", "Mel", "Thor", "Nina", "Paçoca"]
RELATIVES = ["mother", "father", "sister", "brother", "grandmother", "cousin", "uncle", "aunt"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]
VENUES = ["bookshop", "climbing gym", "coffee roastery", "food hall", "cinema", "bike lane"]
JOBS = ["junior developer", "software engineer", "senior engineer", "tech lead"]

SUBJECT_TEMPLATES = (
    "Rafael ran {km} km around {park} on {date}",
    "Rafael had lunch with {person} at {restaurant} on {date}",
    "Rafael paid {price} reais for a new {item} in {month} {year}",
    "Rafael finished reading 'The {book_adj} {book_noun}' in {month} {year}",
    "Rafael visited {city} with {person} during the {holiday} holiday of {year}",
    "Rafael has taken {n} {skill} lessons since {month} {year}",
    "Rafael told {person} that he prefers {food} over {food2}",
    "Rafael booked a {doctor} appointment for {date} at {clock}",
    "Rafael scored {n} points in the {game} tournament run by {org}",
    "Rafael's {vehicle} needed a new {part} after {km} km, fixed on {date}",
    "Rafael watched 'The {book_adj} {book_noun}' at a cinema in {city} on {date}",
    "Rafael met {person} from {org} to discuss the {project} project on {date}",
    "Rafael planted {n} {plant} seedlings in his garden in {month} {year}",
    "Rafael donated {price} reais to {org} in {month} {year}",
    "Rafael slept {hours} hours on the night of {date}",
    "Rafael spent {price} reais on groceries at {market} on {date}",
)
OTHER_TEMPLATES = {
    "person": (
        "{e} adopted a {animal} named {pet} in {month} {year}",
        "{e} moved the weekly meeting to {weekday} at {clock}",
        "{e} ran a {km} km race in {city} on {date}",
        "{e}'s {relative} turned {age} on {date}",
        "{e} recommended 'The {book_adj} {book_noun}' to Rafael on {date}",
    ),
    "place": (
        "{e} had {n} mm of rain on {date}",
        "A new {venue} opened in {e} in {month} {year}",
        "{e} hosted a {game} championship in {month} {year}",
    ),
    "organization": (
        "{e} hired {n} engineers in {month} {year}",
        "{e} opened an office in {city} in {year}",
        "{e} raised its prices by {pct}% in {month} {year}",
    ),
}
# Written facts about the other entity name Rafael too, so the relation has its evidence fact.
WRITE_OTHER_TEMPLATES = {
    "person": "{e} recommended 'The {book_adj} {book_noun}' to Rafael on {date}",
    "place": "{e} is where Rafael spent {n} days in {month} {year}",
    "organization": "{e} sent Rafael an offer of {price} reais in {month} {year}",
}
RELATION_TO = {"person": "friend_of", "place": "visited", "organization": "customer_of"}
LINK_TEMPLATES = {
    "person": "Rafael has known {e} since {year}",
    "place": "Rafael first visited {e} in {year}",
    "organization": "Rafael has been a customer of {e} since {year}",
}
# Planted facts: unusual words, so nothing else in memory is close to them.
# fmt: off
PLANT_OBJECTS = [
    "astrolabio", "sextante", "teodolito", "clepsidra", "gramofone", "metronomo", "caleidoscopio", "periscopio",
    "barometro", "ampulheta", "higrometro", "planetario", "sismografo", "estetoscopio", "harmonio", "daguerreotipo"
]
# fmt: on
# fmt: off
PLANT_MATERIALS = [
    "latao", "bronze", "cobre", "nogueira", "marfim", "jacaranda", "estanho", "ebano", "peroba", "cristal"
]
# fmt: on
# fmt: off
PLANT_UNCLES = [
    "Bartolomeu", "Eleuterio", "Anacleto", "Hermenegildo", "Teodosio", "Ludovico", "Policarpo", "Genesio", "Quirino"
]
# fmt: on
# fmt: off
PLANT_TOWNS = [
    "Quixeramobim", "Itaquaquecetuba", "Pindamonhangaba", "Xiquexique", "Jaboticabal", "Paranapiacaba", "Itapecerica",
    "Araraquara", "Mucugê", "Pirenopolis", "Guaratingueta", "Tabatinga", "Oiapoque", "Chapecó", "Cabrobo",
    "Itacoatiara", "Ubatuba", "Paraty", "Cananeia", "Iguape"
]
# fmt: on


def _fields(template: str) -> list[str]:
    return [name for _, name, _, _ in string.Formatter().parse(template) if name]


@dataclass(frozen=True)
class Other:
    name: str
    type: str
    key: str


def other_entities(count: int) -> list[Other]:
    """`count` distinct people, places and organisations (about 65 / 20 / 15 %)."""
    people = [f"{first} {last}" for last in LAST for first in FIRST]
    orgs = [f"{head} {tail}" for tail in ORG_TAILS for head in ORG_HEADS]
    n_places = min(len(CITIES), max(1, count // 5))
    n_orgs = max(1, (count * 15) // 100)
    n_people = count - n_places - n_orgs
    chosen = (
        [(name, "person") for name in people[:n_people]]
        + [(name, "place") for name in CITIES[:n_places]]
        + [(name, "organization") for name in orgs[:n_orgs]]
    )
    return [Other(name, kind, entity_key(kind, name)) for name, kind in chosen]


class Filler:
    """Fills template slots with plausible values; names come from the agent's own entities."""

    def __init__(self, rng: random.Random, others: list[Other]) -> None:
        self.rng = rng
        self.by_type: dict[str, list[Other]] = {}
        for other in others:
            self.by_type.setdefault(other.type, []).append(other)

    def fill(self, template: str, when: datetime, **given: str) -> tuple[str, list[str]]:
        """The text and the keys of the agent's entities it mentions."""
        rng = self.rng
        values: dict[str, str] = dict(given)
        mentions: list[str] = []
        for name in _fields(template):
            if name in values:
                continue
            if name in ("person", "city", "org"):
                kind = {"person": "person", "city": "place", "org": "organization"}[name]
                pool = self.by_type.get(kind)
                if pool:
                    other = rng.choice(pool)
                    values[name] = other.name
                    mentions.append(other.key)
                else:
                    values[name] = rng.choice(CITIES if kind == "place" else FIRST)
                continue
            values[name] = self._value(name, when)
        return template.format(**values), mentions

    def _value(self, name: str, when: datetime) -> str:
        rng = self.rng
        simple: dict[str, Sequence[str]] = {
            "park": PARKS,
            "restaurant": RESTAURANTS,
            "item": ITEMS,
            "book_adj": BOOK_ADJ,
            "book_noun": BOOK_NOUN,
            "holiday": HOLIDAYS,
            "skill": SKILLS,
            "food": FOODS,
            "food2": FOODS,
            "doctor": DOCTORS,
            "game": GAMES,
            "vehicle": VEHICLES,
            "part": PARTS,
            "project": PROJECTS,
            "plant": PLANTS,
            "market": MARKETS,
            "animal": ANIMALS,
            "pet": PETS,
            "relative": RELATIVES,
            "weekday": WEEKDAYS,
            "venue": VENUES,
        }
        if name in simple:
            return rng.choice(simple[name])
        if name == "km":
            return f"{rng.uniform(2, 42):.1f}"
        if name == "price":
            return str(rng.randint(15, 9000))
        bounds = {"n": (2, 90), "hours": (4, 10), "age": (5, 95), "pct": (3, 30)}
        if name in bounds:
            return str(rng.randint(*bounds[name]))
        if name == "date":
            return f"{when:%Y-%m-%d}"
        if name == "month":
            return f"{when:%B}"
        if name == "year":
            return str(when.year)
        if name == "clock":
            return f"{rng.randint(7, 19)}:{rng.choice(['00', '15', '30', '45'])}"
        raise KeyError(name)


# --- seed rows ------------------------------------------------------------------------------------------------------


@dataclass
class SeedFact:
    id: uuid.UUID
    entity_key: str
    text: str
    valid_from: datetime
    recorded_at: datetime
    category: str = "specific_event"
    attribute: str | None = None
    single_valued: bool = False
    valid_to: datetime | None = None
    closed_at: datetime | None = None
    invalidated_at: datetime | None = None
    supersedes: uuid.UUID | None = None
    mentions: list[str] = field(default_factory=list)

    @property
    def current(self) -> bool:
        return self.valid_to is None and self.invalidated_at is None


@dataclass
class AgentSeed:
    agent_id: str
    size: int
    others: list[Other]
    facts: list[SeedFact]
    planted: list[SeedFact]  # 2K facts of the subject: the first K get near-duplicates, the next K identical texts
    repeatable: list[str]  # texts of current subject facts the writes may repeat or paraphrase
    relationships: list[tuple[str, str, str, uuid.UUID]]  # source, target, type, evidence fact
    released: tuple[int, int] | None = None  # (subject facts, closed versions) once release_rows() let the rows go

    @property
    def subject_facts(self) -> int:
        if self.released is not None:
            return self.released[0]
        return sum(f.entity_key == SUBJECT_KEY for f in self.facts)

    @property
    def closed_versions(self) -> int:
        if self.released is not None:
            return self.released[1]
        return sum(not f.current for f in self.facts)

    def release_rows(self) -> None:
        """Let go of the loaded rows (the planted facts, repeatable texts and other entities stay). At 100,000 facts
        they are ~300,000 of the objects CPython's garbage collector tracks (400,000 with them, 100,000 without): each
        full collection, every few dozen writes, walked them all during a measured write (100-420 ms against 30-60
        without them, timed with gc.callbacks): the benchmark's own memory, not the SDK's work,
        and it set the p95 of a write kind."""
        self.released = (self.subject_facts, self.closed_versions)
        self.facts = []
        self.relationships = []
        gc.collect()  # the let-go rows, so no measured write's collection meets them


def planted_text(k: int) -> str:
    obj = PLANT_OBJECTS[k % len(PLANT_OBJECTS)]
    material = PLANT_MATERIALS[(k * 3) % len(PLANT_MATERIALS)]
    uncle = PLANT_UNCLES[(k * 7) % len(PLANT_UNCLES)]
    town = PLANT_TOWNS[k % len(PLANT_TOWNS)]
    suffix = "" if k < len(PLANT_TOWNS) else f" numero {k}"
    return f"Rafael guarda um {obj} de {material} herdado do tio {uncle} em {town}{suffix}"


def near_duplicate(text: str) -> str:
    return text.replace("Rafael guarda", "Rafael ainda guarda", 1) if "Rafael guarda" in text else f"{text} again"


def build_agent(agent_id: str, size: int, recall_k: int, max_others: int, seed: int) -> AgentSeed:
    """Every row of one agent's memory, `size` facts in all, more than half of them about the subject."""
    rng = random.Random(seed)
    others = other_entities(min(max_others, max(5, size // 10)))
    filler = Filler(rng, others)
    facts: list[SeedFact] = []
    relationships: list[tuple[str, str, str, uuid.UUID]] = []
    span = (NOW - timedelta(days=2) - (NOW - timedelta(days=8 * 365))).total_seconds()

    def moment() -> datetime:
        return (NOW - timedelta(days=8 * 365) + timedelta(seconds=rng.uniform(0, span))).replace(microsecond=0)

    def recorded(valid_from: datetime) -> datetime:
        return min(valid_from + timedelta(hours=rng.uniform(0, 72)), NOW - timedelta(days=1))

    def add(key: str, text: str, when: datetime, **extra: Any) -> SeedFact:
        fact = SeedFact(uuid.uuid4(), key, text, when, recorded(when), **extra)
        facts.append(fact)
        return fact

    # Single-valued attributes of the subject, each with closed history: [v1, v2), [v2, v3), [v3, open).
    timelines = {
        "lives_in": ("Rafael lives in {}", ["Porto Alegre", "Florianopolis", "Curitiba"], "biographical_milestone"),
        "employer": ("Rafael works at {}", ["Delta Software", "Acme Robotics"], "biographical_milestone"),
        "job_title": ("Rafael is a {}", JOBS[1:3], "biographical_milestone"),
    }
    for attribute, (pattern, values, category) in timelines.items():
        starts = sorted(moment() for _ in values)
        previous: SeedFact | None = None
        for value, start in zip(values, starts, strict=True):
            mention = [o.key for o in others if o.name == value]
            fact = add(
                SUBJECT_KEY,
                pattern.format(value),
                start,
                category=category,
                attribute=attribute,
                single_valued=True,
                supersedes=previous.id if previous else None,
                mentions=mention,
            )
            if previous is not None:
                previous.valid_to, previous.closed_at = start, fact.recorded_at
            previous = fact
        if attribute == "lives_in" and previous is not None:
            city = entity_key("place", values[-1])
            if any(o.key == city for o in others):
                relationships.append((SUBJECT_KEY, city, "lives_in", previous.id))
    # One fact per other entity linking it to the subject: the evidence of the subject's edge to it.
    for other in others:
        when = moment()
        fact = add(
            SUBJECT_KEY,
            LINK_TEMPLATES[other.type].format(e=other.name, year=when.year),
            when,
            category="relationship_change",
            mentions=[other.key],
        )
        relationships.append((SUBJECT_KEY, other.key, RELATION_TO[other.type], fact.id))
    # Every third person has an employer (single-valued, one open value).
    orgs = [o for o in others if o.type == "organization"]
    for i, other in enumerate(o for o in others if o.type == "person"):
        if i % 3 == 0 and orgs:
            org = orgs[i % len(orgs)]
            add(
                other.key,
                f"{other.name} works at {org.name}",
                moment(),
                category="biographical_milestone",
                attribute="employer",
                single_valued=True,
                mentions=[org.key],
            )
    planted = [add(SUBJECT_KEY, planted_text(k), moment(), category="stable_preference") for k in range(2 * recall_k)]
    # Filler: subject facts up to 60 % of the agent, then facts about the others; some with closed history.
    subject_target = math.ceil(size * 0.6)
    subject_count = sum(f.entity_key == SUBJECT_KEY for f in facts)
    templates_by_type = {kind: OTHER_TEMPLATES[kind] for kind in OTHER_TEMPLATES}
    while len(facts) < size:
        about_subject = subject_count < subject_target
        when = moment()
        if about_subject:
            key, name = SUBJECT_KEY, SUBJECT
            template = rng.choice(SUBJECT_TEMPLATES)
            text, mentions = filler.fill(template, when)
            subject_count += 1
        else:
            other = rng.choice(others)
            key, name = other.key, other.name
            template = rng.choice(templates_by_type[other.type])
            text, mentions = filler.fill(template, when, e=other.name)
            if "Rafael" in text:
                mentions.append(SUBJECT_KEY)
        mentions = [m for m in dict.fromkeys(mentions) if m != key]
        roll = rng.random()
        if roll < 0.04 and len(facts) + 2 <= size:
            # A fact that changed: an older version, closed when the newer one was recorded.
            older_when = when - timedelta(days=rng.uniform(30, 400))
            older_text, older_mentions = filler.fill(
                template, older_when, **({"e": name} if key != SUBJECT_KEY else {})
            )
            older_mentions += [SUBJECT_KEY] if "Rafael" in older_text else []
            older = add(key, older_text, older_when, mentions=[m for m in dict.fromkeys(older_mentions) if m != key])
            newer = add(key, text, when, supersedes=older.id, mentions=mentions)
            older.valid_to, older.closed_at = when, newer.recorded_at
            if about_subject:
                subject_count += 1
        elif roll < 0.045:
            # A corrected version: never true (empty interval), retracted.
            fact = add(key, text, when, mentions=mentions)
            fact.valid_to = when
            fact.closed_at = fact.invalidated_at = fact.recorded_at + timedelta(hours=1)
        else:
            add(key, text, when, mentions=mentions)
    # Old rows first, so a superseded version is always loaded before (or with) its successor.
    rng.shuffle(facts)
    facts.sort(key=lambda f: f.recorded_at)
    planted_ids = {f.id for f in planted}
    repeatable = [
        f.text
        for f in facts
        if f.entity_key == SUBJECT_KEY
        and f.current
        and f.attribute is None
        and f.id not in planted_ids
        and f.text.startswith("Rafael ")
    ]
    rng.shuffle(repeatable)
    return AgentSeed(agent_id, size, others, facts, planted, repeatable, relationships)


class RowEmbedder(Protocol):
    """What the seed needs of an embedder: one text's vector, synchronously (benchmarks/recall.py passes its own)."""

    def embed_one(self, text: str) -> list[float]: ...


@dataclass
class LoadTimes:
    rows: dict[str, int] = field(default_factory=dict)
    embed_s: float = 0.0
    copy_s: float = 0.0


def _chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


async def load_agent(
    conn: asyncpg.Connection, agent: AgentSeed, embedder: RowEmbedder, identity: Callable[[str], str] | None
) -> LoadTimes:
    """COPY one agent's rows. `identity` fills memory_facts.identity_key where the schema has it (newer SDKs)."""
    times = LoadTimes()
    agent_id = agent.agent_id
    started = time.perf_counter()
    counts: dict[str, int] = {}
    for fact in agent.facts:
        for key in (fact.entity_key, *fact.mentions):
            counts[key] = counts.get(key, 0) + 1
    names = [(SUBJECT, "person", SUBJECT_KEY)] + [(o.name, o.type, o.key) for o in agent.others]
    first_seen = min(f.recorded_at for f in agent.facts)
    entity_rows = [
        (
            uuid.uuid4(),
            agent_id,
            key,
            name,
            kind,
            None,
            embedder.embed_one(name),
            max(1, counts.get(key, 1)),
            first_seen,
            NOW - timedelta(days=1),
        )
        for name, kind, key in names
    ]
    alias_rows = [(agent_id, normalise_alias(name), name, key, "extraction", first_seen) for name, _, key in names]
    times.embed_s += time.perf_counter() - started
    started = time.perf_counter()
    await conn.copy_records_to_table(
        "memory_entities",
        records=entity_rows,
        columns=[
            "id",
            "agent_id",
            "entity_key",
            "display_name",
            "entity_type",
            "profile_text",
            "name_embedding",
            "mention_count",
            "created_at",
            "updated_at",
        ],
    )
    await conn.copy_records_to_table(
        "memory_entity_aliases",
        records=alias_rows,
        columns=["agent_id", "alias_norm", "alias", "entity_key", "source", "created_at"],
    )
    times.copy_s += time.perf_counter() - started
    for batch in _chunks(agent.facts, COPY_CHUNK):
        started = time.perf_counter()
        events = []
        event_of: dict[uuid.UUID, uuid.UUID] = {}
        for group in _chunks(batch, FACTS_PER_EVENT):
            event_id = uuid.uuid4()
            content = "Imported conversation: " + " ".join(f"{f.text}." for f in group[:3])
            events.append(
                (
                    event_id,
                    agent_id,
                    SUBJECT,
                    content,
                    min(f.valid_from for f in group),
                    min(f.recorded_at for f in group),
                    None,
                )
            )
            event_of.update((f.id, event_id) for f in group)
        fact_rows = [
            (
                f.id,
                agent_id,
                f.entity_key,
                f.text,
                f.attribute,
                f.single_valued,
                round(0.8 + 0.19 * (i % 7) / 6, 3),
                IMPORTANCE_BY_CATEGORY[f.category],
                f.category,
                SUBJECT,
                event_of[f.id],
                "extracted",
                f.valid_from,
                f.valid_to,
                f.recorded_at,
                f.closed_at,
                f.invalidated_at,
                f.supersedes,
                None,
                embedder.embed_one(f.text),
                SCHEMA_VERSION,
                "informed_extraction/v4",
                *((identity(f.text),) if identity else ()),
            )
            for i, f in enumerate(batch)
        ]
        link_rows = [(f.id, agent_id, f.entity_key, True) for f in batch]
        link_rows += [(f.id, agent_id, key, False) for f in batch for key in f.mentions]
        times.embed_s += time.perf_counter() - started
        started = time.perf_counter()
        await conn.copy_records_to_table(
            "memory_events",
            records=events,
            columns=["id", "agent_id", "speaker", "content", "occurred_at", "recorded_at", "embedding"],
        )
        await conn.copy_records_to_table(
            "memory_facts",
            records=fact_rows,
            columns=[
                "id",
                "agent_id",
                "entity_key",
                "fact_text",
                "attribute",
                "single_valued",
                "confidence",
                "importance",
                "importance_category",
                "speaker",
                "source_event_id",
                "source_context",
                "valid_from",
                "valid_to",
                "recorded_at",
                "closed_at",
                "invalidated_at",
                "supersedes_fact_id",
                "last_confirmed_at",
                "embedding",
                "schema_version",
                "prompt_version",
                *(["identity_key"] if identity else []),
            ],
        )
        await conn.copy_records_to_table(
            "memory_fact_entities", records=link_rows, columns=["fact_id", "agent_id", "entity_key", "is_primary"]
        )
        times.copy_s += time.perf_counter() - started
        for name, count in (("events", len(events)), ("facts", len(fact_rows)), ("fact links", len(link_rows))):
            times.rows[name] = times.rows.get(name, 0) + count
    started = time.perf_counter()
    by_id = {f.id: f for f in agent.facts}
    edge_rows = [
        (
            uuid.uuid4(),
            agent_id,
            source,
            target,
            rel_type,
            0.85,
            2,
            evidence,
            by_id[evidence].valid_from,
            None,
            None,
            by_id[evidence].recorded_at,
            by_id[evidence].recorded_at,
        )
        for source, target, rel_type, evidence in agent.relationships
    ]
    await conn.copy_records_to_table(
        "memory_relationships",
        records=edge_rows,
        columns=[
            "id",
            "agent_id",
            "source_key",
            "target_key",
            "rel_type",
            "strength",
            "mention_count",
            "evidence_fact_id",
            "valid_from",
            "valid_to",
            "invalidated_at",
            "created_at",
            "updated_at",
        ],
    )
    times.copy_s += time.perf_counter() - started
    times.rows.update(entities=len(entity_rows), aliases=len(alias_rows), relationships=len(edge_rows))
    return times


@dataclass
class Seeded:
    loads: list[LoadTimes]
    index_s: float
    analyze_s: float
    index_definition: str
    identity_key: bool


async def seed(url: str, agents: list[AgentSeed], dim: int, embedder: RowEmbedder | None = None) -> Seeded:
    """Bulk-load every agent as the database's own (superuser) role, which row-level security does not bind.

    The facts' HNSW index is dropped for the load and recreated from the definition the database had (the
    migration's), read back before the drop. The vectors are HashEmbedder's made dense (bench_embedder) unless
    `embedder` gives others."""
    if embedder is None:
        embedder = bench_embedder(dim)
    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        await register_vector(conn)
        await conn.execute("SET synchronous_commit = off")
        columns = await conn.fetch(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'memory_facts'"
            " AND table_schema = current_schema()"
        )
        identity = getattr(memory_sdk.text, "fact_identity_key", None)
        if "identity_key" not in {row["column_name"] for row in columns}:
            identity = None
        definition = await conn.fetchval(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_memory_facts_embedding'"
            " AND schemaname = current_schema()"
        )
        definition = definition or FACTS_HNSW_INDEX
        await conn.execute("DROP INDEX IF EXISTS ix_memory_facts_embedding")
        try:
            loads = [await load_agent(conn, agent, embedder, identity) for agent in agents]
        finally:
            started = time.perf_counter()
            await conn.execute("SET maintenance_work_mem = '2GB'")
            exists = await conn.fetchval("SELECT to_regclass('ix_memory_facts_embedding') IS NOT NULL")
            if not exists:
                await conn.execute(definition)
            index_s = time.perf_counter() - started
        started = time.perf_counter()
        # What autovacuum does to a table soon after a load (PostgreSQL >= 13 vacuums after inserts too): the
        # visibility map is set, so the candidate read's index-only scan of the subject's codes reads no heap.
        await conn.execute("VACUUM ANALYZE")
        # The load's dirty pages (~1 GB at 100,000 facts) written out now, not by a checkpoint that would fall on the
        # first size's measured writes (their upsert stage 21 -> 29 ms in one series of runs, which size came first
        # and when the checkpoint started deciding it): the writes are measured in a steady state.
        await conn.execute("CHECKPOINT")
        analyze_s = time.perf_counter() - started
    finally:
        await conn.close()
    return Seeded(loads, index_s, analyze_s, definition, identity is not None)


# --- the writes -----------------------------------------------------------------------------------------------------


@dataclass
class Plan:
    message: str
    extraction: dict[str, Any]


@dataclass
class WriteSample:
    wall_ms: float
    llm_ms: float
    embed_ms: float
    statements: int
    savepoints: int
    transactions: int
    pings: int
    index_batches: int
    steps: dict[str, float]
    result: WriteResult
    kind: str = ""  # plan_write's kind of the first fact (WRITE_KINDS)
    # The client thread's CPU during the write, less the embedder's time: the same code costs 16 to 36 ms a write
    # here from one minute to the next (docs/benchmarks.md), so it tells a slow minute from a slow write.
    cpu_ms: float = 0.0

    @property
    def overhead_ms(self) -> float:
        return self.wall_ms - self.llm_ms - self.embed_ms


def first_person(text: str) -> str:
    return text.replace("Rafael's ", "my ").replace("Rafael ", "I ", 1).replace(" Rafael", " me")


def _fact(subject: str, text: str, category: str = "specific_event", attribute: str | None = None) -> dict[str, Any]:
    fact: dict[str, Any] = {"subject": subject, "text": text, "importance_category": category}
    if attribute:
        fact["attribute"] = attribute
    return fact


# A batched reconciliation prompt (pipeline/reconciliation.py, `_ask_batch`): one block per new fact, each with its
# own numbered candidates.
_BATCH_BLOCK = re.compile(r"^New fact (\d+) \([^\n]*\):\n(.*)\nExisting facts:\n((?:\d+\. .*\n?)*)", re.MULTILINE)
_BATCH_CANDIDATE = re.compile(r"^(\d+)\. (.*) \(true since [^)]*\)$", re.MULTILINE)


def batch_prompt(request: LLMRequest) -> list[tuple[str, str, list[str]]]:
    """(number, new fact, candidates in their shown order) per block of a `reconciliation_batch` prompt."""
    blocks = _BATCH_BLOCK.findall(request.messages[-1]["content"])
    return [(number, text, [m.group(2) for m in _BATCH_CANDIDATE.finditer(listed)]) for number, text, listed in blocks]


def _waiting(
    answer: Callable[[LLMRequest], dict[str, Any]], latency_s: float
) -> Callable[[LLMRequest], Awaitable[dict[str, Any]]]:
    """`answer`, given after `latency_s` of waiting (the trace counts it as the call's time, outside the overhead)."""

    async def waited(request: LLMRequest) -> dict[str, Any]:
        await asyncio.sleep(latency_s)
        return answer(request)

    return waited


class Bench:
    """The scripted model: extraction answers by message, reconciliation (one fact or a batch) by what each new fact
    expects to see."""

    def __init__(self, latency_s: float = 0.0) -> None:
        self.plans: dict[str, Plan] = {}
        self.expect: dict[str, tuple[str, str]] = {}  # new fact text -> (candidate it targets, action)
        responders: dict[str, Callable[[LLMRequest], dict[str, Any]]] = {
            "informed_extraction": self._extract,
            "reconciliation": lambda request: self._verdict(*reconciliation_prompt(request)),
            "reconciliation_batch": self._reconcile_batch,
            "entity_resolution": lambda request: {"reasoning": "no candidate is this one", "match": None},
        }
        if latency_s > 0:
            self.llm = ScriptedLLM({purpose: _waiting(answer, latency_s) for purpose, answer in responders.items()})
        else:
            self.llm = ScriptedLLM(dict(responders))

    def _extract(self, request: LLMRequest) -> dict[str, Any]:
        plan = self.plans.get(prompt_message(request))
        return plan.extraction if plan else {"entities": [], "facts": [], "relations": []}

    def _reconcile_batch(self, request: LLMRequest) -> dict[str, Any]:
        return {
            "decisions": [
                {"fact": number, **self._verdict(text, candidates)}
                for number, text, candidates in batch_prompt(request)
            ]
        }

    def _verdict(self, new_fact: str, candidates: Sequence[str]) -> dict[str, Any]:
        expected = self.expect.get(new_fact)
        if expected is not None:
            needle, action = expected
            for number, candidate in enumerate(candidates, start=1):
                if needle in candidate:
                    return {"reasoning": "same fact as a known one", "action": action, "target": str(number)}
        return {"reasoning": "new information", "action": "ADD", "target": None}

    def shown(self, requests: Sequence[LLMRequest]) -> list[str]:
        """Every candidate the reconciliation prompts among `requests` showed, batched or not."""
        shown: list[str] = []
        for request in requests:
            if request.purpose == "reconciliation_batch":
                shown += [c for _number, _text, candidates in batch_prompt(request) for c in candidates]
            else:
                shown += reconciliation_prompt(request)[1]
        return shown

    def plan(self, message: str, extraction: dict[str, Any]) -> str:
        self.plans[message] = Plan(message, extraction)
        return message


# What the first fact of write i is (plan_write: i % 4); a repeat or near-duplicate falls back to a new fact once the
# stored facts to repeat run out.
WRITE_KINDS = ("new", "repeat (NOOP)", "move (UPDATE)", "near-dup (LLM NOOP)")


def plan_write(bench: Bench, agent: AgentSeed, i: int, rng: random.Random, filler: Filler) -> str:
    """Write number i: two facts about Rafael (the first cycles through new / repeat / move / near-duplicate),
    one about another entity that names Rafael, the entities, one relation."""
    when = NOW - timedelta(hours=rng.uniform(1, 48))
    templates = rng.sample(SUBJECT_TEMPLATES, 2)
    other = rng.choice([o for o in agent.others if o.type != "place"] or agent.others)
    entities: list[dict[str, Any]] = [{"name": SUBJECT, "type": "person"}, {"name": other.name, "type": other.type}]
    relation = {"source": SUBJECT, "target": other.name, "type": RELATION_TO[other.type]}
    kind = i % 4
    if kind == 1 and agent.repeatable:
        first = _fact(SUBJECT, agent.repeatable.pop())
    elif kind == 2:
        city = rng.choice(CITIES)
        first = _fact(SUBJECT, f"Rafael lives in {city}", "biographical_milestone", "lives_in")
        bench.expect[first["text"]] = ("Rafael lives in", "UPDATE")
        entities.append({"name": city, "type": "place"})
        relation = {"source": SUBJECT, "target": city, "type": "lives_in"}
    elif kind == 3 and agent.repeatable:
        stored = agent.repeatable.pop()
        first = _fact(SUBJECT, near_duplicate(stored))
        bench.expect[first["text"]] = (stored, "NOOP")
    else:
        first = _fact(SUBJECT, filler.fill(templates[0], when)[0])
    second = _fact(SUBJECT, filler.fill(templates[1], when)[0])
    third = _fact(other.name, filler.fill(WRITE_OTHER_TEMPLATES[other.type], when, e=other.name)[0])
    message = " ".join(f"{first_person(f['text'])}." for f in (first, second, third))
    while message in bench.plans:
        message += " Really."
    extraction = {"entities": entities, "facts": [first, second, third], "relations": [relation]}
    return bench.plan(message, extraction)


async def timed_write(
    memory: MemoryClient, embedder: TimedEmbedder, counter: SqlCounter, agent_id: str, message: str
) -> WriteSample:
    embed_before, sql_before = embedder.seconds, await counter.settle()
    started, cpu_started = time.perf_counter(), time.thread_time()
    result = await memory.write(agent_id, message, speaker_name=SUBJECT, verbose=True)
    wall_ms = (time.perf_counter() - started) * 1000
    cpu_ms = (time.thread_time() - cpu_started) * 1000
    sql = (await counter.settle()).minus(sql_before)
    assert result.pipeline is not None
    return WriteSample(
        wall_ms=wall_ms,
        llm_ms=llm_ms(result),
        embed_ms=(embedder.seconds - embed_before) * 1000,
        statements=sql.statements,
        savepoints=sql.savepoints,
        transactions=sql.transactions,
        pings=sql.pings,
        index_batches=sql.index_batches,
        steps={step.name: step.duration_ms for step in result.pipeline.steps},
        result=result,
        cpu_ms=cpu_ms - (embedder.seconds - embed_before) * 1000,
    )


@dataclass
class Recall:
    near_seen: int = 0
    near_total: int = 0
    identical_seen: int = 0
    identical_total: int = 0
    misses_without_candidates: int = 0

    @property
    def near(self) -> float:
        return self.near_seen / self.near_total if self.near_total else float("nan")

    @property
    def identical(self) -> float:
        return self.identical_seen / self.identical_total if self.identical_total else float("nan")


RECALL_MODES = ("pooled connections", "fresh connections")


async def recall_check(
    memory: MemoryClient, bench: Bench, embedder: TimedEmbedder, counter: SqlCounter, agent: AgentSeed, k: int
) -> dict[str, Recall]:
    """Recall of the planted facts, twice: first on the pool's connections as the measured writes left them (a
    prepared statement executed more than 5 times on a connection may be switched to a generic plan), then each write
    on new connections (the pool is disposed before it, so the candidate query gets PostgreSQL's custom plan). Both
    the near-duplicate and the identical fact are answered NOOP, so the planted facts stay current for the second
    pass."""
    recalls: dict[str, Recall] = {}
    for mode in RECALL_MODES:
        recall = recalls[mode] = Recall()
        for index, planted in enumerate(agent.planted[: 2 * k]):
            identical = index >= k
            text = planted.text if identical else near_duplicate(planted.text)
            bench.expect[text] = (planted.text, "NOOP")
            extraction = {
                "entities": [{"name": SUBJECT, "type": "person"}],
                "facts": [_fact(SUBJECT, text, "stable_preference")],
                "relations": [],
            }
            message = bench.plan(first_person(text) + ".", extraction)
            asked_before = len(bench.llm.requests)
            if mode == "fresh connections":
                await memory.database.indexer.drain()  # its connection must not outlive the pool
                await memory.database.engine.dispose()
            result = (await timed_write(memory, embedder, counter, agent.agent_id, message)).result
            decisions = result.pipeline.step("reconciliation").data.get("decisions", []) if result.pipeline else []
            if identical:
                recall.identical_total += 1
                seen = any(fact.id == planted.id for fact in result.facts_unchanged)
                recall.identical_seen += seen
            else:
                recall.near_total += 1
                seen = planted.text in bench.shown(bench.llm.requests[asked_before:]) or any(
                    d.get("target") == str(planted.id) for d in decisions
                )
                recall.near_seen += seen
            if not seen:
                recall.misses_without_candidates += any("no current fact" in d.get("why", "") for d in decisions)
    return recalls


@dataclass
class SizeReport:
    size: int
    samples: list[WriteSample]
    recall: dict[str, Recall]
    failed: int
    stats: DatabaseStats  # of the measured writes: memory_facts updates (HOT among them), blocks read and hit

    def actions(self) -> str:
        added = sum(len(s.result.facts_added) for s in self.samples)
        updated = sum(len(s.result.facts_updated) for s in self.samples)
        unchanged = sum(len(s.result.facts_unchanged) for s in self.samples)
        return f"{added}/{updated}/{unchanged}"


async def measure(
    memory: MemoryClient,
    bench: Bench,
    embedder: TimedEmbedder,
    counter: SqlCounter,
    agent: AgentSeed,
    writes: int,
    warmup: int,
    recall_k: int,
) -> SizeReport:
    rng = random.Random(agent.size)
    filler = Filler(rng, agent.others)
    samples: list[WriteSample] = []
    stats_before = DatabaseStats(0, 0, 0, 0)
    for i in range(warmup + writes):
        if i == warmup:
            stats_before = await database_stats(memory)
        message = plan_write(bench, agent, i, rng, filler)
        sample = await timed_write(memory, embedder, counter, agent.agent_id, message)
        sample.kind = WRITE_KINDS[i % 4]
        if i >= warmup:
            samples.append(sample)
    stats = (await database_stats(memory)).minus(stats_before)
    recall = await recall_check(memory, bench, embedder, counter, agent, recall_k)
    failed = sum(not s.result.success for s in samples)
    for sample in samples:
        if not sample.result.success:
            print(f"  write failed at {agent.size:,} facts: {sample.result.error}")
    return SizeReport(agent.size, samples, recall, failed, stats)


@dataclass(frozen=True)
class DatabaseStats:
    fact_updates: int
    hot_updates: int  # heap-only: no index touched
    blocks_read: int  # not in shared_buffers: copied in from the OS page cache (or the disk)
    blocks_hit: int

    def minus(self, other: DatabaseStats) -> DatabaseStats:
        return DatabaseStats(
            self.fact_updates - other.fact_updates,
            self.hot_updates - other.hot_updates,
            self.blocks_read - other.blocks_read,
            self.blocks_hit - other.blocks_hit,
        )


async def database_stats(memory: MemoryClient) -> DatabaseStats:
    """memory_facts' updates and HOT updates, and the database's block reads, so far (the benchmark is the
    database's only client). The pool is closed first: a backend reports its statistics when it exits, an idle
    one up to 10 s late."""
    await memory.database.indexer.drain()  # its updates counted too, and its connection closed with the pool
    await memory.database.engine.dispose()
    async with memory.database.transaction() as session:
        row = (
            await session.execute(
                sql_text(
                    "SELECT n_tup_upd, n_tup_hot_upd, blks_read, blks_hit FROM pg_stat_user_tables, pg_stat_database "
                    "WHERE relname = 'memory_facts' AND datname = current_database()"
                )
            )
        ).one()
    return DatabaseStats(*(int(value) for value in row))


# --- report ---------------------------------------------------------------------------------------------------------


def report(
    reports: list[SizeReport],
    agents: list[AgentSeed],
    seeded: Seeded,
    args: argparse.Namespace,
) -> None:
    model = f"each LLM call waits {args.llm_ms:g} ms" if args.llm_ms else "instant scripted LLM"
    print(f"embedding dim {args.dim}; seed: HashEmbedder vectors made dense; {model}\n")
    loads = seeded.loads
    print("load (COPY as the superuser, HNSW index on memory_facts dropped during the load)")
    rows: list[tuple[str, ...]] = []
    for agent, load in zip(agents, loads, strict=True):
        history = agent.closed_versions
        rows.append(
            (
                f"{agent.size:,}",
                f"{agent.subject_facts:,}",
                f"{len(agent.others) + 1:,}",
                f"{history:,}",
                f"{load.rows['relationships']:,}",
                f"{load.rows['events']:,}",
                f"{load.embed_s:.1f}",
                f"{load.copy_s:.1f}",
            )
        )
    print(
        format_table(
            (
                "facts/agent",
                "subject facts",
                "entities",
                "closed versions",
                "edges",
                "events",
                "generate+embed s",
                "COPY s",
            ),
            rows,
        )
    )
    total_facts = sum(a.size for a in agents)
    print(
        f"HNSW index rebuild over {total_facts:,} facts: {seeded.index_s:.1f} s; "
        f"VACUUM ANALYZE: {seeded.analyze_s:.1f} s"
        f"\n  {seeded.index_definition}"
        + ("\n  identity_key filled with the SDK's fact_identity_key" if seeded.identity_key else "")
        + "\n"
    )

    print(
        f"per write, {args.writes} writes per size after {args.warmup} warm-up writes "
        "(overhead = wall - LLM - embedder, ms; client CPU = the client thread's median, less the embedder's;\n"
        "SQL stmts without BEGIN/COMMIT)"
    )
    rows = []
    for r in reports:
        overhead = [s.overhead_ms for s in r.samples]
        rows.append(
            (
                f"{r.size:,}",
                f"{percentile(overhead, 50):.1f}",
                f"{percentile(overhead, 95):.1f}",
                f"{percentile([s.wall_ms for s in r.samples], 50):.1f}",
                f"{statistics.median(s.cpu_ms for s in r.samples):.1f}",
                f"{statistics.median(s.embed_ms for s in r.samples):.1f}",
                f"{statistics.mean(s.statements for s in r.samples):.1f}",
                f"{statistics.mean(s.savepoints for s in r.samples):.1f}",
                f"{statistics.mean(s.transactions for s in r.samples):.1f}",
                f"{statistics.mean(s.pings for s in r.samples):.1f}",
                f"{statistics.mean(s.index_batches for s in r.samples):.1f}",
                f"{r.stats.hot_updates}/{r.stats.fact_updates}",
                f"{r.stats.blocks_read / len(r.samples):,.0f}",
                r.actions(),
                str(r.failed),
            )
        )
    print(
        format_table(
            (
                "facts/agent",
                "p50 overhead",
                "p95 overhead",
                "p50 wall",
                "client CPU",
                "embed",
                "SQL stmts",
                "of which SAVEPOINT",
                "transactions",
                "pool pings",
                "index batches",
                "HOT/fact updates",
                "blocks read",
                "add/upd/noop",
                "failed",
            ),
            rows,
        )
    )
    if len(reports) > 1:
        first, last = reports[0], reports[-1]
        p95 = [percentile([s.overhead_ms for s in r.samples], 95) for r in (first, last)]
        p50 = [percentile([s.overhead_ms for s in r.samples], 50) for r in (first, last)]
        print(
            f"growth {first.size:,} -> {last.size:,} facts: p95 overhead x{p95[1] / p95[0]:.2f}, "
            f"p50 x{p50[1] / p50[0]:.2f}"
        )
    print()

    print("median stage duration (ms, from the trace)")
    names = list(reports[0].samples[0].steps)
    rows = []
    for name in names:
        rows.append((name, *(f"{statistics.median(s.steps.get(name, 0.0) for s in r.samples):.2f}" for r in reports)))
    rows.append(
        (
            "(outside stages)",
            *(f"{statistics.median(s.wall_ms - sum(s.steps.values()) for s in r.samples):.2f}" for r in reports),
        )
    )
    print(format_table(("stage", *(f"{r.size:,}" for r in reports)), rows, left=1))
    print()

    print("per kind of write: p50 / p95 overhead (ms)")
    rows = []
    for kind in WRITE_KINDS:
        cells = []
        for r in reports:
            overhead = [s.overhead_ms for s in r.samples if s.kind == kind]
            cells.append(f"{percentile(overhead, 50):.1f} / {percentile(overhead, 95):.1f}" if overhead else "-")
        rows.append((kind, *cells))
    print(format_table(("write", *(f"{r.size:,}" for r in reports)), rows, left=1))
    print()

    k = args.recall_k
    print(
        f"recall: {2 * k} facts planted in the subject's memory; per pass {k} writes of a near-duplicate and {k} of "
        "the identical text;\npooled = on the connections the measured writes used, fresh = the pool disposed before "
        "each write (custom plans)"
    )
    rows = []
    for r in reports:
        pooled, fresh = (r.recall[mode] for mode in RECALL_MODES)
        rows.append(
            (
                f"{r.size:,}",
                f"{pooled.near:.2f}",
                f"{pooled.identical:.2f}",
                f"{fresh.near:.2f}",
                f"{fresh.identical:.2f}",
                f"{fresh.misses_without_candidates + pooled.misses_without_candidates}",
            )
        )
    header = (
        "facts/agent",
        "near-dup pooled",
        "identical pooled",
        "near-dup fresh",
        "identical fresh",
        "misses with 0 candidates",
    )
    print(format_table(header, rows))
    largest = reports[-1].recall.values()
    seen = sum(r.near_seen + r.identical_seen for r in largest)
    total = sum(r.near_total + r.identical_total for r in largest)
    print(f"recall at {reports[-1].size:,} facts: {seen / max(1, total):.2f}")
    lowest = min(
        (value, r.size, f"{kind} {mode.split()[0]}")
        for r in reports
        for mode, recall in r.recall.items()
        for kind, value in (("near-dup", recall.near), ("identical", recall.identical))
    )
    print(f"lowest recall: {lowest[0]:.2f} ({lowest[1]:,} facts, {lowest[2]})")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 10_000, 100_000])
    parser.add_argument("--writes", type=int, default=80, help="measured writes per size")
    parser.add_argument("--warmup", type=int, default=3, help="unmeasured writes per size before them")
    parser.add_argument("--dim", type=int, default=1536)
    parser.add_argument("--recall-k", type=int, default=20, help="planted facts per recall kind")
    parser.add_argument("--others", type=int, default=200, help="other entities per agent (at most)")
    parser.add_argument("--database-url", default=None, help="an existing database instead of a new embedded one")
    parser.add_argument("--llm-ms", type=float, default=0.0, help="each LLM call waits this long before answering")
    parser.add_argument("--quick", action="store_true", help="sizes 100 2000, 10 writes, K=3")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.writes, args.recall_k, args.warmup = [100, 2000], 10, 3, 1
    if any(size < 2 * args.recall_k + 50 for size in args.sizes):
        parser.error(f"every size must hold the {2 * args.recall_k} planted facts and 50 more")
    return args


async def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    run = uuid.uuid4().hex[:8]
    agents = [
        build_agent(f"scale-{size}-{run}", size, args.recall_k, args.others, seed=size) for size in sorted(args.sizes)
    ]
    embedder = TimedEmbedder(bench_embedder(args.dim))
    bench = Bench(args.llm_ms / 1000)
    with database(args.database_url) as url:
        async with MemoryClient(
            url, llm=bench.llm, embedder=embedder, config=MemoryConfig(embedding_dim=args.dim)
        ) as memory:
            seeded = await seed(url, agents, args.dim)
            for agent in agents:
                agent.release_rows()
            counter = SqlCounter(memory.database.engine)
            async with memory.database.transaction() as session:
                buffers = (await session.execute(sql_text("SHOW shared_buffers"))).scalar_one()
            reports = [
                await measure(memory, bench, embedder, counter, agent, args.writes, args.warmup, args.recall_k)
                for agent in agents
            ]
    report(reports, agents, seeded, args)
    print(f"\nthe server's shared_buffers: {buffers} (blocks read = per write, from outside them)")


if __name__ == "__main__":
    asyncio.run(main())
