"""CPU per write (issue 8, session 21): the functions rewritten for speed return exactly what the code before them
returned, bit for bit where floats are involved.

Each is compared with a reference, the implementation it replaced kept here verbatim as the specification, over
varied inputs including the edges (cosines exactly at the threshold, zero vectors, negative zeros, None vectors).
"""

from __future__ import annotations

import itertools
import math
import operator
import random
import struct

import numpy as np
import pytest

from memory_sdk.pipeline import post_extraction
from memory_sdk.pipeline.post_extraction import NEAR_DUPLICATE_WINDOW, drop_near_duplicates

# --- the references: the implementations before session 21, verbatim ------------------------------------------


def _reference_drop_near_duplicates(vectors: list[list[float] | None], threshold: float) -> set[int]:
    units = [None if vector is None else _reference_unit(vector) for vector in vectors]
    kept: list[tuple[int, list[float]]] = []
    keep: set[int] = set()
    for index, unit in enumerate(units):
        if unit is None:
            keep.add(index)
        elif all(_reference_dot(unit, other) <= threshold for _, other in kept[-NEAR_DUPLICATE_WINDOW:]):
            kept.append((index, unit))
            keep.add(index)
    return keep


def _reference_unit(vector: list[float]) -> list[float]:
    norm = math.sqrt(_reference_dot(vector, vector))
    return list(map(operator.truediv, vector, itertools.repeat(norm))) if norm else vector


def _reference_dot(a: list[float], b: list[float]) -> float:
    return float(sum(map(operator.mul, a, b)))


def _bits(value: float) -> bytes:
    return struct.pack("<d", value)


def _vectors(rng: random.Random, dimensions: int) -> list[list[float]]:
    """Random directions, near copies of them (cosines around the 0.85 threshold and above), scaled copies, a
    zero vector and one of negative zeros."""
    base = [[rng.gauss(0, 1) for _ in range(dimensions)] for _ in range(3)]
    near = [[x + rng.gauss(0, noise) for x in vector] for vector in base for noise in (0.05, 0.4, 0.6, 0.8)]
    scaled = [[x * rng.choice((1e-3, 7.0, 1e6)) for x in rng.choice(base)]]
    return [*base, *near, *scaled, [0.0] * dimensions, [-0.0] * dimensions]


@pytest.mark.parametrize("dimensions", [1, 8, 384, 1536])
def test_dot_and_unit_are_bit_for_bit_the_python_sums(dimensions: int) -> None:
    rng = random.Random(dimensions)
    vectors = _vectors(rng, dimensions)
    for a, b in itertools.product(vectors, repeat=2):
        new = post_extraction._dot(np.asarray(a), np.asarray(b))
        assert _bits(new) == _bits(_reference_dot(a, b))
    for vector in vectors:
        assert [_bits(x) for x in post_extraction._unit(vector).tolist()] == [_bits(x) for x in _reference_unit(vector)]


def test_dot_of_products_that_are_all_zero_is_positive_zero_as_sum_gives() -> None:
    zeros = np.asarray([-0.0, -0.0, 0.0])
    assert _bits(post_extraction._dot(zeros, np.asarray([1.0, 1.0, 1.0]))) == _bits(0.0)


@pytest.mark.parametrize("seed", range(40))
def test_near_duplicates_dropped_as_before_even_at_the_threshold(seed: int) -> None:
    rng = random.Random(seed)
    pool = _vectors(rng, rng.choice((8, 64, 1536)))
    vectors: list[list[float] | None] = [rng.choice([*pool, None]) for _ in range(rng.randint(0, 9))]
    present = [vector for vector in vectors if vector is not None]
    # The cosines the reference computes, used as thresholds: `<=` at exactly the threshold decides the same.
    thresholds = {0.85, 0.5, 0.99}
    thresholds.update(
        _reference_dot(_reference_unit(a), _reference_unit(b)) for a, b in itertools.combinations(present, 2)
    )
    for threshold in sorted(thresholds):
        assert drop_near_duplicates(vectors, threshold) == _reference_drop_near_duplicates(vectors, threshold)
