"""The native numeric statistics partial against numpy's, part for part, and the statistics built from each."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from recordforge.schemas.columns import CheckedNumbers
from recordforge.schemas.stats import FeatureStatistics, numeric
from recordforge.schemas.stats.distinct import theta_hashes
from recordforge.schemas.stats.sums import SHIFT

INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
# Every value class: huge and tiny ints, ints around 2**31 and 2**53 (where
# the sort and the theta candidates change), floats of every magnitude,
# subnormals, float32's overflow edge, NaN, +-inf, -0.0.
INTS = st.one_of(INT64, st.integers(-1000, 1000), st.integers(-(1 << 31) - 2, 1 << 31),
                 st.integers(-(1 << 53) - 2, (1 << 53) + 2))
FLOATS = st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                   st.floats(-200.0, 200.0), st.floats(width=32),
                   st.sampled_from([0.0, -0.0, math.nan, math.inf, -math.inf, 5e-324, 1e-45,
                                    1.4e-45, 3.4028235e38, 3.4028236e38, -3.5e38, 1e300]))


def _both(native, values, stored):
    ours = numeric.native_parts(native.numeric_partial, values, stored)
    reference = numeric.python_parts(values, stored)
    return ours, reference


def _assert_same(ours, reference):
    for name in ("nan", "inf", "finite", "low", "high", "sum", "squares"):
        mine, theirs = getattr(ours, name), getattr(reference, name)
        assert type(mine) is type(theirs) and mine == theirs, name
        if isinstance(mine, float):  # -0.0 vs 0.0
            assert math.copysign(1, mine) == math.copysign(1, theirs), name
    for name in ("keys", "counts", "candidates"):
        mine, theirs = getattr(ours, name), getattr(reference, name)
        assert mine.dtype == theirs.dtype, name
        assert mine.tobytes() == theirs.tobytes(), name
    assert reference.hashes is None
    assert ours.hashes.tobytes() == theta_hashes(reference.candidates).tobytes()


@settings(max_examples=400, deadline=None)
@given(values=st.lists(INTS, max_size=300))
def test_int_partials_match_numpy(native, values):
    _assert_same(*_both(native, values, "int64"))
    _assert_same(*_both(native, np.array(values, dtype=np.int64), "int64"))


@settings(max_examples=400, deadline=None)
@given(values=st.lists(FLOATS, max_size=300))
def test_float_partials_match_numpy(native, values):
    with np.errstate(over="ignore"):  # numpy warns on float32 overflow; the kernel counts it
        _assert_same(*_both(native, values, "float"))


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.sampled_from([1, -1, 0, 7, (1 << 62), -(1 << 63)]), max_size=200))
def test_repeated_values_are_counted_once_per_key(native, values):
    _assert_same(*_both(native, values, "int64"))


@pytest.mark.parametrize("stored, values", [
    ("int64", []), ("float", []), ("float", [math.nan] * 3), ("float", [math.inf, -math.inf]),
    ("float", [-0.0]), ("float", [3.5e38, -1e300]), ("int64", [-(1 << 63)] * 7),
    ("int64", [(1 << 63) - 1, -(1 << 63)])])
def test_edge_batches(native, stored, values):
    with np.errstate(over="ignore"):
        _assert_same(*_both(native, values, stored))


def test_a_sum_of_squares_past_128_bits_is_exact(native):
    ours, _ = _both(native, [-(1 << 63)] * 9, "int64")
    assert ours.squares == (9 << 126) << SHIFT
    assert ours.sum == (-9 << 63) << SHIFT


def test_a_buffer_of_odd_length_is_refused(native):
    with pytest.raises(ValueError, match="multiple of 8"):
        native.numeric_partial(b"\x00" * 9, True)


def _statistics(batches, stored, native):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(numeric, "kernels", lambda: native)
        stats = FeatureStatistics("numeric", stored)
        for batch in batches:
            stats.add_values(len(batch), batch)
        return json.dumps(stats.to_state(), sort_keys=True), json.dumps(stats.to_json(),
                                                                        sort_keys=True)


@settings(max_examples=100, deadline=None)
@given(batches=st.lists(st.lists(INTS, max_size=3000), max_size=4))
def test_int_statistics_are_the_same_on_both_paths(native, batches):
    """Whole `FeatureStatistics` (state and stats.json entry) of several
    batches, so that the theta sketch fills and filters by the kernel's
    hashes. Some batches are `CheckedNumbers`, as the kernel's columns."""
    batches = [CheckedNumbers(batch, np.array(batch, dtype=np.int64)) if index % 2 else batch
               for index, batch in enumerate(batches)]
    assert _statistics(batches, "int64", native) == _statistics(batches, "int64", None)


@settings(max_examples=100, deadline=None)
@given(batches=st.lists(st.lists(FLOATS, max_size=3000), max_size=4))
def test_float_statistics_are_the_same_on_both_paths(native, batches):
    with np.errstate(over="ignore"):
        assert _statistics(batches, "float", native) == _statistics(batches, "float", None)


def test_many_distinct_values_fill_the_sketch_the_same(native):
    rng = np.random.default_rng(5)
    batches = [rng.integers(-(1 << 40), 1 << 40, 20_000).tolist() for _ in range(3)]
    floats = [rng.normal(0, 1e3, 20_000).tolist() for _ in range(3)]
    assert _statistics(batches, "int64", native) == _statistics(batches, "int64", None)
    assert _statistics(floats, "float", native) == _statistics(floats, "float", None)
