"""Theta sketches (schemas/stats/distinct.py): the array-wide hash is DataSketches' own, and filtering by it changes nothing."""

from __future__ import annotations

from unittest import mock

import datasketches
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from recordforge.schemas.stats import FeatureStatistics, distinct


@pytest.mark.parametrize("values", [
    np.array([0, 1, -1, 2**53 + 1, 2**62, -2**63, 2**63 - 1], dtype=np.int64),
    np.array([0.0, 1.5, -2.25, 1e300, -1e-300, 5e-324, np.finfo(np.float64).max]),
])
def test_theta_hashes_are_the_ones_datasketches_keeps(values):
    sketch = datasketches.update_theta_sketch(distinct.THETA_LG_K)
    for value in values.tolist():
        sketch.update(value)
    assert sorted(int(h) for h in sketch.compact()) == sorted(
        distinct.theta_hashes(values).tolist())


_INTS = st.one_of(st.integers(-2**63, 2**63 - 1), st.integers(-50, 50))


_FLOATS = st.floats(allow_nan=False, allow_infinity=False, width=32).map(lambda x: x + 0.0)


def _numeric_theta(stored: str, batches: list[list]) -> bytes:
    stats = FeatureStatistics("numeric", stored)
    for values in batches:
        stats.add_values(len(values), values)
    return stats.theta.compact().serialize()


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(["int64", "float"]), st.data())
def test_a_filtered_theta_sketch_equals_one_given_every_value(stored, data):
    """Past its first thousands of distinct values a sketch is given only
    the values whose hash is below its theta; it must end the same as one
    given every value in the same order (an update sketch's state depends
    on the order: the same batches go to both), whatever the batches hold."""
    size = data.draw(st.sampled_from([10, 5000, 30_000]), label="size")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    if stored == "int64":
        drawn = data.draw(st.lists(_INTS, max_size=50), label="ints")
        values = drawn + rng.integers(-2**63, 2**63 - 1, size, dtype=np.int64).tolist() \
            + rng.integers(-100, 100, size // 2).tolist()
        if data.draw(st.booleans(), label="small ints only"):
            values = [value % 2**40 for value in values]
    else:
        drawn = data.draw(st.lists(_FLOATS, max_size=50), label="floats")
        values = drawn + rng.standard_normal(size).astype(np.float32).tolist() \
            + np.round(rng.uniform(-5, 5, size // 2), 1).tolist()
    rng.shuffle(values)
    cut = data.draw(st.integers(0, len(values)), label="cut")
    batches = [values[:cut], values[cut:]]
    filtered = _numeric_theta(stored, batches)
    with mock.patch.object(distinct, "theta_hashes",
                           lambda array: np.zeros(len(array), dtype=np.uint64)):
        every_value = _numeric_theta(stored, batches)
    assert filtered == every_value
