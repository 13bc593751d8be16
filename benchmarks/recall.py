"""Near-duplicate recall of the fact-candidate read at 100,000 facts, with real embedding geometry:
`python benchmarks/recall.py --vectors e5 --cache DIR`.

benchmarks/fact_index.py measures recall with HashEmbedder vectors, where texts that share no word are orthogonal: a
geometry HNSW graphs are not built for. Embedding 110,000 texts with LocalEmbedder (multilingual-e5-small, the
`local` extra; numpy comes with it) takes hours on a small machine, so this script embeds a few thousand for real
and derives the rest from them:

- rows: benchmarks/fact_index.py's seed (benchmarks/scale.py's agents of 100 / 10,000 / 100,000 facts, one subject
  holding 60% of each, the 40 planted facts), loaded by COPY, the migration's index (0008) built after the load;
- `--vectors e5`: each fact text is sorted into the template it was generated from; `--sample` texts per template,
  the planted facts, the probes' targets, the entity names and every text no template matches are embedded by
  LocalEmbedder (cached in `--cache`, so a rerun embeds nothing); every other text gets a mix of the real vectors
  of the three sampled texts of its template that share the most words with it (Dirichlet weights, the largest on
  the closest) plus isotropic noise of norm `--noise`, renormalised: the model's structure (templates, names,
  places, numbers, languages), not orthogonal clusters. `--vectors hash`: HashEmbedder's, as the other benchmarks;
- probes, embedded for real: per planted fact its near-duplicate (scale.py's "ainda guarda"), a rewording, an
  English translation and an update (sold it); per one of 40 ordinary subject facts (real vectors) a Portuguese
  paraphrase and the same fact with one value changed;
- truth: the exact top 5 of the 60,000-fact subject, computed here over the same float32 vectors and checked
  against the database's own exact scan on a few probes;
- per index build (`--builds`; the first is the seed's), the SDK's candidate read as shipped
  (`store.candidates.nearest_current_facts`) and its HNSW statement under other search settings: agreement with the
  exact top 5 (ties within 1e-6 count), the probe's target found where the exact top 5 has it, probes that miss,
  and the time per probe; with `--unfiltered`, also the index walk with no agent or subject filter against the
  exact top 5 of the whole table (is it the graph or the filters that misses?);
- mid-size subjects (store/candidates.MID_SIZE_FROM to EXACT_SCAN_MAX_FACTS current facts: the seed's other entities
  at 100,000 facts), read through the SDK's Hamming shortlist: per subject of MID_SUBJECTS, two near-duplicates of
  stored facts and two new facts of the kind scale.py's writes make, scored against each subject's exact top 5.

    python benchmarks/recall.py --vectors e5 --cache DIR [--builds 3] [--sample 100] [--noise 0.2]
    python benchmarks/recall.py --vectors hash [--sizes 100 10000 100000]
    python benchmarks/recall.py --quick     # hash vectors, sizes 100 2000, one build: a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
import re
import string
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped, unused-ignore]
import numpy as np
from _common import asyncpg_dsn, database, format_table, percentile
from fact_index import DEFINITIONS
from pgvector import Vector
from pgvector.asyncpg import register_vector
from scale import (
    LINK_TEMPLATES,
    NOW,
    OTHER_TEMPLATES,
    RESTAURANTS,
    SUBJECT_KEY,
    SUBJECT_TEMPLATES,
    WRITE_OTHER_TEMPLATES,
    AgentSeed,
    Filler,
    SeedFact,
    build_agent,
    near_duplicate,
    seed,
)

from memory_sdk import MemoryClient, MemoryConfig
from memory_sdk.store import candidates
from memory_sdk.store.candidates import CandidateProbe, nearest_current_facts
from memory_sdk.store.search import hnsw_order
from memory_sdk.testing import HashEmbedder

DIM = 1536
TOP_K = 5  # reconciliation's MAX_CANDIDATES
TIE = 1e-6  # a returned fact as similar as the exact 5th (to float precision) is as right as it
PROBES_PER_SET = 40
# Probes whose exact top 5 is also read through the database's own exact scan (about 1.5 s each at 60,000 facts).
DB_CHECKS = 4
TEMPLATE_SEED = 7


# --- probes ---------------------------------------------------------------------------------------------------------

_PLANTED = re.compile(r"^Rafael guarda um (\S+) de (\S+) herdado do tio (\S+) em (.+?)((?: numero \d+)?)$")


def planted_variants(text: str) -> dict[str, str]:
    """scale.py's planted fact said four other ways: its near-duplicate, reworded, in English, and an update."""
    match = _PLANTED.match(text)
    if match is None:
        raise ValueError(f"not a planted fact: {text!r}")
    obj, material, uncle, town, suffix = match.groups()
    return {
        "planted: near-dup": near_duplicate(text),
        "planted: reworded": f"O {obj} de {material} que o tio {uncle} deixou para o Rafael continua em {town}{suffix}",
        "planted: English": f"Rafael keeps a {material} {obj} inherited from his uncle {uncle} in {town}{suffix}",
        "planted: update": f"Rafael vendeu o {obj} de {material} do tio {uncle} que guardava em {town}{suffix}",
    }


# An ordinary subject fact's template -> its Portuguese paraphrase, and the field an update changes.
REWORDED = {
    "Rafael ran {km} km around {park} on {date}": ("No dia {date} o Rafael correu {km} km no {park}", "km"),
    "Rafael had lunch with {person} at {restaurant} on {date}": (
        "Rafael almoçou com {person} em {restaurant} no dia {date}",
        "restaurant",
    ),
    "Rafael paid {price} reais for a new {item} in {month} {year}": (
        "Em {month} de {year} o Rafael comprou um {item} novo por {price} reais",
        "price",
    ),
    "Rafael booked a {doctor} appointment for {date} at {clock}": (
        "Rafael marcou consulta ({doctor}) para o dia {date} às {clock}",
        "clock",
    ),
    "Rafael slept {hours} hours on the night of {date}": ("Na noite de {date} o Rafael dormiu {hours} horas", "hours"),
    "Rafael donated {price} reais to {org} in {month} {year}": (
        "Rafael doou {price} reais para a {org} em {month} de {year}",
        "price",
    ),
    "Rafael spent {price} reais on groceries at {market} on {date}": (
        "Rafael gastou {price} reais em compras no {market} em {date}",
        "price",
    ),
    "Rafael planted {n} {plant} seedlings in his garden in {month} {year}": (
        "Em {month} de {year} o Rafael plantou {n} mudas de {plant} no jardim",
        "n",
    ),
}


def changed(name: str, value: str) -> str:
    """Another value for one field: the fact an update of it would state."""
    if name == "km":
        return f"{float(value) + 7.5:.1f}"
    if name == "restaurant":
        return RESTAURANTS[(RESTAURANTS.index(value) + 1) % len(RESTAURANTS)]
    if name == "clock":
        hour, minute = value.split(":")
        return f"{(int(hour) + 3) % 24}:{minute}"
    return str(int(value) * 2 + 3)


@dataclass(frozen=True)
class Template:
    text: str
    fields: tuple[str, ...]
    pattern: re.Pattern[str]

    @classmethod
    def of(cls, template: str) -> Template:
        parts = list(string.Formatter().parse(template))
        regex = "".join(re.escape(literal) + ("(.+?)" if name else "") for literal, name, _, _ in parts)
        return cls(template, tuple(name for _, name, _, _ in parts if name), re.compile(f"^{regex}$"))

    def values(self, text: str) -> dict[str, str] | None:
        match = self.pattern.match(text)
        return None if match is None else dict(zip(self.fields, match.groups(), strict=True))


TEMPLATES = [
    Template.of(t)
    for t in (*SUBJECT_TEMPLATES, *(t for group in OTHER_TEMPLATES.values() for t in group), *LINK_TEMPLATES.values())
]


def template_of(text: str) -> Template | None:
    return next((t for t in TEMPLATES if t.pattern.match(text)), None)


@dataclass(frozen=True)
class Probe:
    kind: str
    text: str
    target: uuid.UUID


def build_probes(agent: AgentSeed) -> list[Probe]:
    """Six sets of PROBES_PER_SET probes of the agent's subject, each aimed at one stored fact (its target)."""
    probes = [
        Probe(kind, variant, fact.id)
        for fact in agent.planted[:PROBES_PER_SET]
        for kind, variant in planted_variants(fact.text).items()
    ]
    rng = random.Random(TEMPLATE_SEED)
    ordinary = [
        f for f in agent.facts if f.entity_key == SUBJECT_KEY and f.current and template_of(f.text) in _reworded()
    ]
    for fact in rng.sample(ordinary, min(PROBES_PER_SET, len(ordinary))):
        template = template_of(fact.text)
        assert template is not None
        values = template.values(fact.text) or {}
        paraphrase, field_name = REWORDED[template.text]
        probes.append(Probe("ordinary: reworded", paraphrase.format(**values), fact.id))
        update = template.text.format(**{**values, field_name: changed(field_name, values[field_name])})
        probes.append(Probe("ordinary: changed", update, fact.id))
    return probes


def _reworded() -> list[Template]:
    return [t for t in TEMPLATES if t.text in REWORDED]


# --- vectors --------------------------------------------------------------------------------------------------------


def tokens(text: str) -> frozenset[str]:
    return frozenset(re.findall(r"\w+", text.lower()))


def text_seed(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


class E5Cache:
    """LocalEmbedder's vectors (its own 384 dimensions) by text, kept on disk: a rerun embeds only new texts."""

    def __init__(self, directory: Path) -> None:
        from memory_sdk.llm.local import MODEL_ID

        directory.mkdir(parents=True, exist_ok=True)
        self.index_file = directory / "e5-texts.json"
        self.vectors_file = directory / "e5-vectors.npy"
        self.model_id = MODEL_ID
        self.texts: list[str] = []
        self.matrix = np.zeros((0, 384), dtype=np.float32)
        if self.index_file.exists() and self.vectors_file.exists():
            stored = json.loads(self.index_file.read_text())
            if stored["model_id"] == MODEL_ID:
                self.texts = stored["texts"]
                self.matrix = np.load(self.vectors_file)
        self.row = {text: i for i, text in enumerate(self.texts)}

    async def ensure(self, texts: Sequence[str]) -> tuple[int, float]:
        """Embed what is not cached yet: (texts embedded, seconds)."""
        from memory_sdk.llm.local import NATIVE_DIMENSIONS, LocalEmbedder

        missing = [t for t in dict.fromkeys(texts) if t not in self.row]
        if not missing:
            return 0, 0.0
        embedder = LocalEmbedder(dimensions=NATIVE_DIMENSIONS, batch_size=32)
        started = time.perf_counter()
        for start in range(0, len(missing), 256):
            chunk = missing[start : start + 256]
            vectors = np.asarray(await embedder.embed(chunk), dtype=np.float32)
            self.row.update((t, len(self.texts) + i) for i, t in enumerate(chunk))
            self.texts += chunk
            self.matrix = np.vstack([self.matrix, vectors])
            np.save(self.vectors_file, self.matrix)
            self.index_file.write_text(json.dumps({"model_id": self.model_id, "texts": self.texts}))
            done = start + len(chunk)
            rate = done / (time.perf_counter() - started)
            print(f"  embedded {done:,} / {len(missing):,} texts ({rate:.1f}/s)", flush=True)
        return len(missing), time.perf_counter() - started

    def vector(self, text: str) -> np.ndarray[Any, Any]:
        return self.matrix[self.row[text]]


@dataclass
class Geometry:
    """How the stored vectors sit: real ones against derived ones (NaN where a kind is absent)."""

    real: int
    derived: int
    within_real: float  # mean cosine of two sampled texts of one template
    within_derived: float  # ... of two derived vectors of one template
    nearest_real: float  # median cosine of a derived vector to the nearest real vector of its template
    random_real: float  # mean cosine of random pairs of real vectors
    random_all: float  # ... of random pairs of every stored vector


# Derived vectors: the Dirichlet weights of the three mixed real vectors (below 1: uneven, one dominates) and the
# noise norm. A mix is closer to its template's centre than real texts are; these two keep it near the real spread.
MIX_ALPHA = 0.5
DEFAULT_NOISE = 0.2


def derive(text: str, matrix: np.ndarray[Any, Any], pool: Sequence[frozenset[str]], noise: float) -> Any:
    """A vector for `text` from the real ones of its template (`matrix`, texts' words `pool`): the three sharing the
    most words with it, mixed with uneven random weights (the largest on the closest), plus isotropic noise."""
    own = tokens(text)
    nearest = np.argsort(-np.array([len(own & other) for other in pool]), kind="stable")[:3]
    generator = np.random.default_rng(text_seed(text))
    weights = np.sort(generator.dirichlet([MIX_ALPHA] * 3))[::-1]
    mixed = weights @ matrix[nearest] + noise * generator.standard_normal(matrix.shape[1]) / np.sqrt(matrix.shape[1])
    return mixed / np.linalg.norm(mixed)


def _mean_pairwise(matrix: np.ndarray[Any, Any]) -> float:
    sims = matrix @ matrix.T
    return float(sims[np.triu_indices(len(matrix), 1)].mean())


class VectorBank:
    """The vector of every seeded text (native size, float32), padded to `dim` for the seed."""

    def __init__(self, vectors: dict[str, np.ndarray[Any, Any]], dim: int) -> None:
        self.vectors = vectors
        self.dim = dim

    def vector(self, text: str) -> np.ndarray[Any, Any]:
        return self.vectors[text]

    def embed_one(self, text: str) -> list[float]:
        row: list[float] = self.vectors[text].tolist()
        return row + [0.0] * (self.dim - len(row))


async def e5_bank(
    agents: Sequence[AgentSeed], probes: Sequence[Probe], cache: E5Cache, sample: int, noise: float, dim: int
) -> tuple[VectorBank, Geometry, list[np.ndarray[Any, Any]], tuple[int, float]]:
    """Real vectors for the sample and every special text, derived ones for the rest; the probes' vectors."""
    texts = list(dict.fromkeys(f.text for agent in agents for f in agent.facts))
    classes: dict[str, list[str]] = {}
    unmatched: list[str] = []
    for text in texts:
        template = template_of(text)
        (classes.setdefault(template.text, []) if template else unmatched).append(text)
    rng = random.Random(TEMPLATE_SEED)
    sampled = {name: rng.sample(members, min(sample, len(members))) for name, members in classes.items()}
    targets = {f.text for agent in agents for f in agent.facts if f.id in {p.target for p in probes}}
    targets |= {f.text for agent in agents for f in agent.planted}
    names = {"Rafael"} | {o.name for agent in agents for o in agent.others}
    real_texts = [t for group in sampled.values() for t in group] + unmatched + sorted(targets) + sorted(names)
    embedded = await cache.ensure(real_texts + [p.text for p in probes])
    vectors = {t: cache.vector(t) for t in real_texts}
    within_real: list[float] = []
    within_derived: list[float] = []
    nearest_real: list[float] = []
    for name, members in classes.items():
        matrix = np.stack([cache.vector(t) for t in sampled[name]]).astype(np.float64)
        pool = [tokens(t) for t in sampled[name]]
        missing = [t for t in members if t not in vectors]
        derived = [derive(t, matrix, pool, noise) for t in missing]
        vectors.update((t, v.astype(np.float32)) for t, v in zip(missing, derived, strict=True))
        if len(matrix) >= 10 and len(derived) >= 10:
            within_real.append(_mean_pairwise(matrix))
            within_derived.append(_mean_pairwise(np.stack(derived[:300])))
            nearest_real += (np.stack(derived[:300]) @ matrix.T).max(axis=1).tolist()
    real = [cache.vector(t) for t in real_texts]
    geometry = Geometry(
        real=len(set(real_texts)),
        derived=len(vectors) - len(set(real_texts)),
        within_real=float(np.mean(within_real)) if within_real else float("nan"),
        within_derived=float(np.mean(within_derived)) if within_derived else float("nan"),
        nearest_real=float(np.median(nearest_real)) if nearest_real else float("nan"),
        random_real=_random_pairs(real),
        random_all=_random_pairs(list(vectors.values())),
    )
    return VectorBank(vectors, dim), geometry, [cache.vector(p.text) for p in probes], embedded


def _random_pairs(vectors: Sequence[np.ndarray[Any, Any]], pairs: int = 5000) -> float:
    """Mean cosine of random pairs: about 0 for orthogonal vectors, well above for one model's."""
    generator = np.random.default_rng(1)
    a, b = generator.integers(0, len(vectors), size=(2, pairs))
    cosines = [
        float(np.dot(vectors[i], vectors[j]) / (np.linalg.norm(vectors[i]) * np.linalg.norm(vectors[j])))
        for i, j in zip(a, b, strict=True)
        if i != j
    ]
    return sum(cosines) / len(cosines)


def hash_bank(agents: Sequence[AgentSeed], dim: int) -> tuple[VectorBank, Geometry]:
    embedder = HashEmbedder(dimensions=dim)
    texts = dict.fromkeys([f.text for agent in agents for f in agent.facts] + ["Rafael"])
    texts.update(dict.fromkeys(o.name for agent in agents for o in agent.others))
    vectors = {t: np.asarray(embedder.embed_one(t), dtype=np.float32) for t in texts}
    nan = float("nan")
    random_pairs = _random_pairs(list(vectors.values()))
    return VectorBank(vectors, dim), Geometry(len(vectors), 0, nan, nan, nan, random_pairs, random_pairs)


# --- truth ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Truth:
    ids: list[uuid.UUID]  # the exact top 5, most similar first
    fifth: float  # the 5th similarity: a returned fact at least this similar (within TIE) is right
    similarity: dict[uuid.UUID, float]  # of every subject fact to the probe, for the returned ones


def exact_truth(
    agent: AgentSeed, bank: VectorBank, queries: Sequence[np.ndarray[Any, Any]], among: Sequence[SeedFact] = ()
) -> list[Truth]:
    """The exact top 5 of the agent's current subject facts (or of `among`) per query, over the stored (float32)
    vectors."""
    subject = list(among) or [f for f in agent.facts if f.entity_key == SUBJECT_KEY and f.current]
    matrix = np.stack([bank.vector(f.text) for f in subject]).astype(np.float64)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    truths = []
    for query in queries:
        q = np.asarray(query, dtype=np.float64)[: matrix.shape[1]]
        sims = matrix @ (q / np.linalg.norm(q))
        top = np.argsort(-sims, kind="stable")[:TOP_K]
        truths.append(
            Truth(
                [subject[i].id for i in top],
                float(sims[top[-1]]),
                {f.id: float(s) for f, s in zip(subject, sims, strict=True)},
            )
        )
    return truths


# --- measurement ----------------------------------------------------------------------------------------------------


# The HNSW statement the candidate read used before the binary codes (store/candidates.py then): per
# probe, `overfetch` rows of the facts' index in relaxed order, with the fact of the probe's identity key,
# re-ranked by full-precision distance. Kept here to compare the index walk with the shipped read.
HNSW_EF_SEARCH = 1000
HNSW_OVERFETCH = 40


def hnsw_sql(dim: int) -> str:
    return f"""
    SELECT p.ord, c.*, 1 - c.distance AS similarity
    FROM unnest($2::text[], $3::vector[], $4::text[], $6::int[])
        WITH ORDINALITY AS p(entity_key, vec, identity_key, k, ord)
    CROSS JOIN LATERAL (
        SELECT u.* FROM (
            (SELECT f.id, f.embedding <=> p.vec AS distance
             FROM memory_facts f
             WHERE f.agent_id = $1 AND f.valid_to IS NULL AND f.invalidated_at IS NULL AND f.entity_key = p.entity_key
             ORDER BY {hnsw_order(dim, "p.vec")}
             LIMIT $5)
            UNION
            (SELECT f.id, f.embedding <=> p.vec AS distance
             FROM memory_facts f
             WHERE f.agent_id = $1 AND f.valid_to IS NULL AND f.invalidated_at IS NULL AND f.entity_key = p.entity_key
               AND f.identity_key = p.identity_key)
        ) u
        ORDER BY u.distance
        LIMIT p.k
    ) c
    ORDER BY p.ord, c.distance
    """  # noqa: S608 - constants of this script


@dataclass(frozen=True)
class Setting:
    """HNSW search settings for the candidate read's former HNSW statement (hnsw_sql)."""

    name: str
    iterative: str = "relaxed_order"
    ef_search: int = HNSW_EF_SEARCH
    overfetch: int = HNSW_OVERFETCH
    max_scan_tuples: int = 50_000

    def sql(self) -> str:
        return (
            f"SELECT set_config('enable_sort', 'off', true), set_config('hnsw.iterative_scan', '{self.iterative}', "
            f"true), set_config('hnsw.ef_search', '{self.ef_search}', true), set_config('hnsw.max_scan_tuples', "
            f"'{self.max_scan_tuples}', true), set_config('hnsw.scan_mem_multiplier', '8', true)"
        )


@dataclass(frozen=True)
class Shortlist:
    """The shipped read (nearest_current_facts) with another number of facts taken by Hamming distance."""

    name: str
    size: int


SDK = f"sdk as shipped (binary {candidates.BINARY_SHORTLIST})"
HNSW_WAS_SHIPPED = Setting("hnsw ef 1000 (was shipped)")
SWEEP = (
    Setting("hnsw ef 400", ef_search=400),
    Setting("hnsw ef 1000, 100 re-ranked", ef_search=1000, overfetch=100),
)


@dataclass
class Outcome:
    setting: str
    agree: list[float]  # per probe: share of the exact top 5 returned (ties count)
    shortfall: list[float]  # per probe: exact 5th similarity minus the 5th returned (0: as good as exact)
    found: dict[str, list[bool]]  # per probe set: target returned, over the probes whose exact top 5 has it
    ms: list[float]
    rows: list[list[tuple[uuid.UUID, float]]] = field(default_factory=list)  # per probe: what the read returned

    def add(self, probe: Probe, truth: Truth, ms: float, rows: list[tuple[uuid.UUID, float]]) -> None:
        self.ms.append(ms)
        self.rows.append(rows)
        self.agree.append(score(truth, rows))
        self.shortfall.append(shortfall(truth, rows))
        if probe.target in truth.ids:
            self.found.setdefault(probe.kind, []).append(probe.target in {fact_id for fact_id, _ in rows})


def union(first: Outcome, second: Outcome, probes: Sequence[Probe], truths: Sequence[Truth]) -> Outcome:
    """Both reads' rows merged and the best 5 kept, as a read running both would (its time: both times)."""
    merged = Outcome(f"{first.setting} + {second.setting} (merged here)", [], [], {}, [])
    for i, (probe, truth) in enumerate(zip(probes, truths, strict=True)):
        rows = sorted(dict(first.rows[i] + second.rows[i]).items(), key=lambda row: -row[1])[:TOP_K]
        merged.add(probe, truth, first.ms[i] + second.ms[i], rows)
    return merged


async def read_top(
    memory: MemoryClient, agent_id: str, setting: Setting | Shortlist | None, vector: Sequence[float]
) -> tuple[float, list[tuple[uuid.UUID, float]]]:
    """One probe through the SDK's read (setting None, or a Shortlist) or the former HNSW statement (a Setting)."""
    async with memory.database.tenant(agent_id) as conn:
        started = time.perf_counter()
        if setting is None or isinstance(setting, Shortlist):
            shortlist = candidates.BINARY_SHORTLIST if setting is None else setting.size
            probe = CandidateProbe(SUBJECT_KEY, list(vector))
            [found] = await nearest_current_facts(conn, agent_id, [probe], TOP_K, shortlist=shortlist)
            rows = [(c.id, c.similarity or 0.0) for c in found]
        else:
            await conn.execute(setting.sql())
            records = await conn.fetch(
                hnsw_sql(len(vector)),
                agent_id,
                [SUBJECT_KEY],
                [Vector(list(vector))],
                [None],
                max(setting.overfetch, TOP_K),
                [TOP_K],
            )
            rows = [(r["id"], float(r["similarity"])) for r in records]
        return (time.perf_counter() - started) * 1000, rows


def shortfall(truth: Truth, rows: Sequence[tuple[uuid.UUID, float]]) -> float:
    """How much less similar the read's 5th fact is than the exact 5th (a miss among near-ties costs ~0)."""
    fifth = sorted((truth.similarity.get(fact_id, -1.0) for fact_id, _ in rows), reverse=True)[TOP_K - 1 : TOP_K]
    return max(0.0, truth.fifth - (fifth[0] if fifth else -1.0))


def score(truth: Truth, rows: Sequence[tuple[uuid.UUID, float]]) -> float:
    right = sum(truth.similarity.get(fact_id, -2.0) >= truth.fifth - TIE for fact_id, _ in rows)
    return min(right, TOP_K) / TOP_K


async def measure_build(
    memory: MemoryClient,
    agent_id: str,
    probes: Sequence[Probe],
    queries: Sequence[Sequence[float]],
    truths: Sequence[Truth],
    settings: Sequence[Setting | Shortlist | None],
) -> list[Outcome]:
    outcomes = []
    for setting in settings:
        outcome = Outcome(SDK if setting is None else setting.name, [], [], {}, [])
        await read_top(memory, agent_id, setting, queries[0])  # warm the statement
        for probe, query, truth in zip(probes, queries, truths, strict=True):
            ms, rows = await read_top(memory, agent_id, setting, query)
            outcome.add(probe, truth, ms, rows)
        outcomes.append(outcome)
    shipped = next(o for o in outcomes if o.setting == SDK)
    hnsw = next(o for o in outcomes if o.setting == HNSW_WAS_SHIPPED.name)
    return [*outcomes, union(shipped, hnsw, probes, truths)]


# The walk alone: every current fact of every agent, no filter, the SDK's re-rank (a superuser connection).
_UNFILTERED_SQL = f"""
    SELECT w.id, 1 - w.distance AS similarity FROM (
        SELECT f.id, f.embedding <=> $1 AS distance FROM memory_facts f
        WHERE f.valid_to IS NULL AND f.invalidated_at IS NULL
        ORDER BY {hnsw_order(DIM, "$1")} LIMIT {HNSW_OVERFETCH}
    ) w ORDER BY w.distance LIMIT {TOP_K}"""  # noqa: S608 - constants of this script


async def measure_unfiltered(
    url: str, probes: Sequence[Probe], queries: Sequence[Sequence[float]], truths: Sequence[Truth], ef_search: int
) -> Outcome:
    """The same probes against the exact top 5 of the whole table: is it the graph or the filters that misses?"""
    conn = await asyncpg.connect(asyncpg_dsn(url))
    outcome = Outcome(f"no filter, ef {ef_search}", [], [], {}, [])
    try:
        await register_vector(conn)
        await conn.execute(f"SET enable_sort = off; SET jit = off; SET hnsw.ef_search = {ef_search}")
        for probe, query, truth in zip(probes, queries, truths, strict=True):
            started = time.perf_counter()
            records = await conn.fetch(_UNFILTERED_SQL, np.asarray(query, dtype=np.float32))
            ms = (time.perf_counter() - started) * 1000
            outcome.add(probe, truth, ms, [(r["id"], float(r["similarity"])) for r in records])
    finally:
        await conn.close()
    return outcome


async def check_truth(
    memory: MemoryClient, agent_id: str, queries: Sequence[Sequence[float]], truths: Sequence[Truth]
) -> int:
    """How many of the first DB_CHECKS probes get from the database's exact scan the similarities, in order,
    of the top 5 computed here."""
    same = 0
    for query, truth in list(zip(queries, truths, strict=True))[:DB_CHECKS]:
        async with memory.database.tenant(agent_id) as conn:
            [found] = await nearest_current_facts(
                conn, agent_id, [CandidateProbe(SUBJECT_KEY, list(query))], TOP_K, large_from=10**9, exact_below=10**9
            )
        expected = [truth.similarity[fact_id] for fact_id in truth.ids]
        same += len(found) == TOP_K and all(
            abs((c.similarity or 0.0) - e) <= TIE for c, e in zip(found, expected, strict=True)
        )
    return same


async def rebuild(url: str, definition: str) -> float:
    """Build the facts' index anew (`definition` of benchmarks/fact_index.py): another graph over the same rows."""
    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        await conn.execute("DROP INDEX IF EXISTS ix_memory_facts_embedding")
        await conn.execute("SET maintenance_work_mem = '2GB'")
        started = time.perf_counter()
        await conn.execute(DEFINITIONS[definition][0])
        built = time.perf_counter() - started
        await conn.execute("ANALYZE memory_facts")
        return built
    finally:
        await conn.close()


# --- report ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MidProbe:
    kind: str
    text: str
    entity_key: str
    target: uuid.UUID | None  # the stored fact a near-duplicate repeats


MID_SUBJECTS = 40


def current_by_subject(agent: AgentSeed) -> dict[str, list[SeedFact]]:
    """The agent's current facts, by subject."""
    current: dict[str, list[SeedFact]] = {}
    for fact in agent.facts:
        if fact.current:
            current.setdefault(fact.entity_key, []).append(fact)
    return current


def build_mid_probes(agent: AgentSeed) -> list[MidProbe]:
    """Probes of up to MID_SUBJECTS of the agent's mid-size subjects: per subject two near-duplicates of its stored
    facts and two new facts as scale.py's writes make them."""
    current = current_by_subject(agent)
    sized = range(candidates.MID_SIZE_FROM, candidates.EXACT_SCAN_MAX_FACTS)
    mid = [o for o in agent.others if len(current.get(o.key, [])) in sized]
    rng = random.Random(TEMPLATE_SEED)
    filler = Filler(rng, agent.others)
    probes = []
    for other in rng.sample(mid, min(MID_SUBJECTS, len(mid))):
        for fact in rng.sample(current[other.key], 2):
            probes.append(MidProbe("near-duplicate", near_duplicate(fact.text), other.key, fact.id))
        for _ in range(2):
            text = filler.fill(WRITE_OTHER_TEMPLATES[other.type], NOW, e=other.name)[0]
            probes.append(MidProbe("new fact", text, other.key, None))
    return probes


async def measure_mid(
    memory: MemoryClient, agent: AgentSeed, bank: VectorBank, probes: Sequence[MidProbe], queries: Sequence[Any]
) -> list[tuple[str, ...]]:
    """Per kind of mid-size probe: top-5 agreement of the SDK's read and of an exact read, targets found."""
    current = current_by_subject(agent)
    agree: dict[tuple[str, str], list[float]] = {}
    found: dict[str, list[bool]] = {}
    for probe, query in zip(probes, queries, strict=True):
        [truth] = exact_truth(agent, bank, [np.asarray(query)], among=current[probe.entity_key])
        for read, exact_below in (("shortlist", candidates.MID_SIZE_FROM), ("exact", 10**9)):
            async with memory.database.tenant(agent.agent_id) as conn:
                [rows] = await nearest_current_facts(
                    conn,
                    agent.agent_id,
                    [CandidateProbe(probe.entity_key, list(query))],
                    TOP_K,
                    exact_below=exact_below,
                )
            agree.setdefault((probe.kind, read), []).append(score(truth, [(c.id, 0.0) for c in rows]))
            if read == "shortlist" and probe.target is not None and probe.target in truth.ids:
                found.setdefault(probe.kind, []).append(probe.target in {c.id for c in rows})
    kinds = list(dict.fromkeys(p.kind for p in probes))
    return [
        (
            kind,
            str(sum(p.kind == kind for p in probes)),
            f"{np.mean(agree[(kind, 'shortlist')]):.3f}",
            f"{np.mean(agree[(kind, 'exact')]):.3f}",
            _share(found.get(kind, [])),
        )
        for kind in kinds
    ]


def report(builds: Sequence[tuple[float, list[Outcome]]], kinds: Sequence[str], exact_has: dict[str, str]) -> None:
    header = ("build", "index s", "setting", "top-5 agree", "probes all 5", "max shortfall", *kinds, "p50 ms", "p95 ms")
    rows = []
    for number, (built, outcomes) in enumerate(builds, start=1):
        for outcome in outcomes:
            rows.append(
                (
                    str(number),
                    f"{built:.0f}",
                    outcome.setting,
                    f"{sum(outcome.agree) / len(outcome.agree):.3f}",
                    f"{sum(a == 1.0 for a in outcome.agree)}/{len(outcome.agree)}",
                    f"{max(outcome.shortfall):.4f}",
                    *(_share(outcome.found.get(kind, [])) for kind in kinds),
                    f"{percentile(outcome.ms, 50):.1f}",
                    f"{percentile(outcome.ms, 95):.1f}",
                )
            )
    print(format_table(header, rows))
    print("target found among the probes whose exact top 5 has it; exact top 5 has it: " + _joined(exact_has))


def _share(hits: Sequence[bool]) -> str:
    return f"{sum(hits) / len(hits):.2f}" if hits else "-"


def _joined(values: dict[str, str]) -> str:
    return ", ".join(f"{key} {value}" for key, value in values.items())


async def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--vectors", choices=("e5", "hash"), default="e5")
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 10_000, 100_000])
    parser.add_argument("--builds", type=int, default=3, help="index builds measured (the first is the seed's)")
    parser.add_argument(
        "--definition",
        choices=[name for name in DEFINITIONS if name.startswith("after")],
        default="after",
        help="the index definition (benchmarks/fact_index.py; 'after' is the migration's)",
    )
    parser.add_argument("--sample", type=int, default=100, help="texts embedded for real per template (e5)")
    parser.add_argument("--noise", type=float, default=DEFAULT_NOISE, help="noise norm in derived vectors (e5)")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "memory-sdk-recall")
    parser.add_argument("--sweep", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument(
        "--shortlists", type=int, nargs="*", default=[100, 200], help="other binary shortlists than the SDK's"
    )
    parser.add_argument(
        "--unfiltered", action="store_true", help="also walk the index with no agent or subject filter (diagnostic)"
    )
    parser.add_argument("--others", type=int, default=200, help="other entities per agent (at most)")
    parser.add_argument(
        "--quick", action="store_true", help="hash vectors, sizes 100 2000, 5 other entities (mid-size), one build"
    )
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args(argv)
    if args.quick:
        args.vectors, args.sizes, args.builds, args.others = "hash", [100, 2000], 1, 5
    run = uuid.uuid4().hex[:8]
    agents = [build_agent(f"recall-{size}-{run}", size, 20, args.others, seed=size) for size in sorted(args.sizes)]
    largest = agents[-1]
    probes = build_probes(largest)
    mid = build_mid_probes(largest)
    kinds = list(dict.fromkeys(p.kind for p in probes))
    started = time.perf_counter()
    if args.vectors == "e5":
        as_probes = [Probe(m.kind, m.text, m.target or uuid.UUID(int=0)) for m in mid]
        bank, geometry, native, (embedded, embed_s) = await e5_bank(
            agents, [*probes, *as_probes], E5Cache(args.cache), args.sample, args.noise, DIM
        )
        padded = [[*v.tolist(), *([0.0] * (DIM - len(v)))] for v in native]
        queries, mid_queries = padded[: len(probes)], padded[len(probes) :]
        if embedded:
            print(f"LocalEmbedder: {embedded:,} texts in {embed_s:.0f} s ({embedded / embed_s:.1f} texts/s)")
    else:
        bank, geometry = hash_bank(agents, DIM)
        queries = await HashEmbedder(dimensions=DIM).embed([p.text for p in probes])
        mid_queries = await HashEmbedder(dimensions=DIM).embed([m.text for m in mid])
    print(
        f"vectors ({args.vectors}): {geometry.real:,} real, {geometry.derived:,} derived in "
        f"{time.perf_counter() - started:.0f} s; mean cosine within a template: real {geometry.within_real:.3f}, "
        f"derived {geometry.within_derived:.3f}; derived to its nearest real: {geometry.nearest_real:.3f} (median); "
        f"random pairs: real {geometry.random_real:.3f}, all {geometry.random_all:.3f}"
    )
    truths = exact_truth(largest, bank, queries)
    exact_has = {
        kind: f"{sum(p.target in t.ids for p, t in zip(probes, truths, strict=True) if p.kind == kind)}/"
        f"{sum(p.kind == kind for p in probes)}"
        for kind in kinds
    }
    shortlists = [Shortlist(f"binary {n}", n) for n in args.shortlists if n != candidates.BINARY_SHORTLIST]
    settings: list[Setting | Shortlist | None] = [None, *shortlists, HNSW_WAS_SHIPPED, *(SWEEP if args.sweep else ())]
    everything = [f for agent in agents for f in agent.facts if f.current]
    whole = exact_truth(largest, bank, queries, among=everything) if args.unfiltered else []
    builds: list[tuple[float, list[Outcome]]] = []
    with database(args.database_url) as url:
        async with MemoryClient(
            url, embedder=HashEmbedder(dimensions=DIM), config=MemoryConfig(embedding_dim=DIM)
        ) as memory:
            seeded = await seed(url, agents, DIM, embedder=bank)
            print(f"seeded {sum(a.size for a in agents):,} facts (index built in {seeded.index_s:.0f} s)", flush=True)
            checked = await check_truth(memory, largest.agent_id, queries, truths)
            print(f"exact top 5 computed here = the database's exact scan on {checked}/{min(DB_CHECKS, len(probes))}")
            mid_rows = await measure_mid(memory, largest, bank, mid, mid_queries) if mid else []
            for number in range(args.builds):
                reuse = number == 0 and args.definition == "after"
                built = seeded.index_s if reuse else await rebuild(url, args.definition)
                outcomes = await measure_build(memory, largest.agent_id, probes, queries, truths, settings)
                if args.unfiltered:
                    outcomes += [await measure_unfiltered(url, probes, queries, whole, ef) for ef in (400, 1000)]
                builds.append((built, outcomes))
                print(f"  build {number + 1}: done", flush=True)
            if args.database_url and args.definition != "after":  # leave the migration's index (0008)
                await rebuild(url, "after")
    subject = f"subject of {largest.subject_facts:,} facts"
    print(f"\n{args.vectors} vectors, index '{args.definition}'; {subject}; {len(probes)} probes")
    report(builds, kinds, exact_has)
    if mid_rows:
        print(
            f"\nmid-size subjects ({candidates.MID_SIZE_FROM}-{candidates.EXACT_SCAN_MAX_FACTS - 1} current facts, "
            f"{len({m.entity_key for m in mid})} of them): the SDK's read against their exact top 5"
        )
        print(format_table(("probes", "count", "top-5 agree", "exact read", "target found"), mid_rows))


if __name__ == "__main__":
    asyncio.run(main())
