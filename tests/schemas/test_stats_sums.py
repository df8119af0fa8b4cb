"""Exact sums (schemas/stats/sums.py) against Python's exact fractions."""

from __future__ import annotations

import random
from fractions import Fraction

import numpy as np
import pytest

from recordforge.schemas.stats.sums import SHIFT, exact_float_sums, exact_int_sums, exact_sum


def test_exact_sum_is_the_exact_sum_in_any_order():
    rng = random.Random(3)
    values = [rng.uniform(-1e6, 1e6) for _ in range(2000)] + [1e-300, -2.5e-320, 1e300, 0.0]
    exact = sum(map(Fraction, values))
    assert Fraction(exact_sum(np.array(values)), 1 << SHIFT) == exact
    rng.shuffle(values)
    assert Fraction(exact_sum(np.array(values)), 1 << SHIFT) == exact


@pytest.mark.parametrize("scale", [1e-40, 1e-3, 1.0, 1e5])
def test_fast_float_sums_are_the_exact_sums(scale):
    # float32 values, as statistics keep them: narrow spreads take the int64
    # sums, wide ones (and subnormal float32s' squares) the sums per exponent
    rng = np.random.default_rng(5)
    for decades in (0, 3, 12, 30):
        magnitudes = scale * 10.0 ** rng.uniform(0, decades, 3000)
        values = (rng.standard_normal(3000) * magnitudes).astype(np.float32).astype(np.float64)
        values[:3] = 0.0
        assert exact_float_sums(values) == (exact_sum(values), exact_sum(values * values))
        total, squares = exact_float_sums(values)
        assert Fraction(total, 1 << SHIFT) == sum(map(Fraction, values.tolist()))
        assert Fraction(squares, 1 << SHIFT) == sum(Fraction(v) ** 2 for v in values.tolist())
    # doubles of more than 26 significant bits: squares rounded, as ever
    values = rng.standard_normal(1000) * scale
    assert exact_float_sums(values) == (exact_sum(values), exact_sum(values * values))


@pytest.mark.parametrize("bits", [3, 26, 31, 47, 48, 49, 62])
def test_fast_int_sums_are_the_exact_sums(bits):
    rng = random.Random(bits)
    values = [rng.randrange(-(1 << bits), 1 << bits) for _ in range(5000)] + [(1 << bits) - 1]
    array = np.array(values, dtype=np.int64)
    sums = (sum(values) << SHIFT, sum(v * v for v in values) << SHIFT)
    low, high = min(values), max(values)
    assert exact_int_sums(array, values, low, high) == sums
    assert exact_int_sums(array, None, low, high) == sums
