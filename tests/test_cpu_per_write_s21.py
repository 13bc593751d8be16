"""CPU per write (issue 8, session 21): the functions rewritten for speed return exactly what the code before them
returned, bit for bit where floats are involved.

Each is compared with a reference, the implementation it replaced kept here verbatim as the specification, over
varied inputs including the edges (cosines exactly at the threshold, zero vectors, negative zeros, None vectors).
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
import random
import struct
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from pgvector import Vector

from memory_sdk.pipeline import post_extraction
from memory_sdk.pipeline.llm_calls import vector_problem
from memory_sdk.pipeline.post_extraction import NEAR_DUPLICATE_WINDOW, drop_near_duplicates
from memory_sdk.store import queries

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
    """Left to right, as `sum` added floats up to Python 3.11 (3.12's `sum` compensates its rounding)."""
    return float(functools.reduce(operator.add, map(operator.mul, a, b), 0.0))


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


def test_huge_vectors_overflow_silently_as_python_floats_do() -> None:
    """Components past 1e154 overflow their squares to infinity: Python's floats say nothing, and neither may
    numpy (pytest turns its RuntimeWarning into an error)."""
    huge = [1e200, -1e200, 3.0, 1e300]
    assert [_bits(x) for x in post_extraction._unit(huge).tolist()] == [_bits(x) for x in _reference_unit(huge)]
    both = [huge, [-x for x in huge]]
    assert drop_near_duplicates(both, 0.85) == _reference_drop_near_duplicates(both, 0.85)


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


# --- vectors sent to PostgreSQL: packed once, the same bytes as pgvector's Vector ------------------------------


def _float32_edges(rng: random.Random) -> list[float]:
    """Floats that round to float32 in every way: halfway cases, subnormals, the largest finite, -0.0, ints."""
    tiny, largest = 1.4e-45, 3.4028234663852886e38
    edges = [0.0, -0.0, 1.0, -1.0, 1 + 2**-24, 1 + 3 * 2**-24, tiny, tiny / 3, -tiny * 1.5, largest, -largest]
    return [*edges, *(rng.uniform(-1, 1) * 10 ** rng.randint(-40, 38) for _ in range(500))]


def test_vector_parameters_are_the_bytes_pgvector_sends() -> None:
    rng = random.Random(8)
    values = _float32_edges(rng)
    for vector in (values, [3, -7, 0, 2**30], [rng.gauss(0, 1) for _ in range(1536)], np.ones(8, dtype=np.float32)):
        packed = queries.vector_param(vector)
        assert packed is not None
        assert packed.to_binary() == Vector(list(vector)).to_binary()
        assert packed.to_list() == Vector(list(vector)).to_list()  # the rest of Vector still reads it


def test_vector_parameters_past_float32_or_not_numbers_behave_as_pgvector() -> None:
    too_large = [1e39, -1e39, 0.5]
    packed = queries.vector_param(too_large)
    assert packed is not None and packed.to_binary() == Vector(too_large).to_binary()  # infinities, as before
    with pytest.raises(ValueError, match="expected list"):
        queries.vector_param(["a", "b"])  # type: ignore[list-item]
    assert queries.vector_param(None) is None


# --- vector_problem: a finite float sum proves every element finite ------------------------------------------


def _reference_vector_problem(vector: Any, dimensions: int) -> str | None:
    try:
        size = len(vector)
        finite = all(map(math.isfinite, vector))
    except TypeError:
        return "is not a list of numbers"
    if size != dimensions:
        return f"has {size} dimensions, expected {dimensions}"
    if not finite:
        return "holds NaN or infinity"
    if not any(vector):
        return "is all zeros"
    return None


def test_vector_problems_found_as_before() -> None:
    rng = random.Random(5)
    dense = [rng.gauss(0, 1) for _ in range(8)]
    vectors: list[Any] = [
        dense,
        [0.0] * 8,
        [-0.0] * 8,
        [*dense[:7], math.nan],
        [*dense[:7], math.inf],
        [math.inf, -math.inf, *dense[:6]],
        [1.7e308, 1.7e308, *dense[:6]],  # a sum that overflows though every element is finite
        [1, 2, 3, 4, 5, 6, 7, 8],
        [True, *dense[:7]],
        [Decimal("1.5"), *dense[:7]],
        [Decimal("NaN"), *dense[:7]],
        [Fraction(1, 3), *dense[:7]],
        [complex(1, 1), *dense[:7]],
        ["a", *dense[:7]],
        [None, *dense[:7]],
        np.ones(8, dtype=np.float32),
        np.array([*dense[:7], np.inf]),
        dense[:7],
        [],
        "abcdefgh",
        42,
        iter(dense),
    ]
    for vector in vectors:
        assert vector_problem(vector, 8) == _reference_vector_problem(vector, 8), vector
