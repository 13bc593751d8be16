"""HashEmbedder's vectors are frozen: tests, seeds and recorded benchmarks depend on them bit for bit.

The digests below were computed from the implementation on main before session 21 rewrote embed_one for speed
(per-word cached bucket sums). Any change to a single bit of any vector of these texts turns this file red.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Iterator

import pytest

from memory_sdk.testing import HashEmbedder

_VOCABULARY = (  # noqa: SIM905
    "Rafael Ana Melanie Caroline São Paulo Curitiba Acme Globex mora trabalha na em moved to lives in works at "
    "joined started a new job minha mãe meu irmão Pedro irmã my sister Julia mom best friend não never ya no ontem "
    "yesterday 15 de março de 2024 2025-06-01 last Friday the and com para PhD guitarra Ångström ß ﬁ café naïve "
    "😀 🍕 日本語 , . ! ? ; : ' - ( ) \n \t \x00 Dr. João-Pedro isn't ΣΊΣΥΦΟΣ İstanbul x_y 12345 aaaaaaaaaaaaaaaaaaaa"
).split(" ")

# Texts with no word, repeated words, empties, combining marks alone, lone surrogates, long runs.
FIXED = [
    "",
    " ",
    "😀",
    "🍕 😀",
    "\x00",
    "a\ud800b",
    "Ana",
    "ana ana ana",
    "Carol",
    "Carolina",
    "São Paulo",
    "Sao Paulo",
    "\u0301",
    "e\u0301",
    "Rafael lives in São Paulo since 2024",
    "I just moved to Curitiba! We went to Café Lisboa with Marina Duarte and bought a coffee grinder yesterday",
    "ana " * 300,
]


def _generated(count: int) -> Iterator[str]:
    """`count` texts drawn from the vocabulary by a fixed linear congruential sequence (not `random`, whose
    choice() may change between Python versions)."""
    state = 2021
    for _ in range(count):
        state = (state * 1103515245 + 12345) % 2**31
        size = 1 + state % 45
        words = []
        for _ in range(size):
            state = (state * 1103515245 + 12345) % 2**31
            words.append(_VOCABULARY[state % len(_VOCABULARY)])
        text = " ".join(words)
        yield text.upper() if state % 11 == 0 else text


TEXTS = FIXED + list(_generated(600))


def digest(vectors: Iterable[list[float]]) -> str:
    """SHA-256 over the exact IEEE-754 bits of the vectors, in order."""
    hasher = hashlib.sha256()
    for vector in vectors:
        assert type(vector) is list and all(type(x) is float for x in vector)
        hasher.update(struct.pack(f"<I{len(vector)}d", len(vector), *vector))
    return hasher.hexdigest()


# Computed from main at 6a6aaea (HashEmbedder before session 21), with the functions of this file.
FROZEN_DIGESTS = {
    8: "6902fdd9854f3bfbcfab42ade1263764e1807d5623339bdca1ccfc5a9feb3e51",
    64: "8b78211fc7a3c23efa7a393b843f24ec70e6ee92b10cd20950d279c053e7d3e6",
    1536: "5d3e21dbd630a69a500c29b39a7ba68de266a065ed71df9ea7fb029b5724293a",
}

# The first 16 hex digits of each FIXED text's own digest at 1536 dimensions, in FIXED's order.
FROZEN_FIXED = [
    "1a58016b62875061",
    "1a58016b62875061",
    "7da2563f12600d16",
    "ed99357d27f82e6f",
    "71d51fa79145ded8",
    "029b8c0afd71d69a",
    "8cba7b7f0df6f668",
    "8cba7b7f0df6f668",
    "40f0e68a37e5d604",
    "67262205a558a859",
    "41986095ce09173a",
    "41986095ce09173a",
    "1a58016b62875061",
    "03cd864decdca118",
    "3a2d7cd4ec8ca458",
    "853ec68032dfa751",
    "4beeebf87a74b937",
]


@pytest.mark.parametrize("dimensions", sorted(FROZEN_DIGESTS))
def test_vectors_are_bit_for_bit_those_of_main(dimensions: int) -> None:
    embedder = HashEmbedder(dimensions)
    assert digest(embedder.embed_one(text) for text in TEXTS) == FROZEN_DIGESTS[dimensions]


def test_each_fixed_text_keeps_its_vector() -> None:
    embedder = HashEmbedder()
    assert [digest([embedder.embed_one(text)])[:16] for text in FIXED] == FROZEN_FIXED
