"""The native numeric statistics update against numpy's, part for part, batch after batch, and the statistics built from each."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from recordforge.schemas.columns import CheckedNumbers
from recordforge.schemas.stats import FeatureStatistics, numeric
from recordforge.schemas.stats.distinct import (HashedTheta, add_numbers, compact_theta, theta_bound,
                                               theta_hashes, theta_most)
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


def _both(native, values, stored, histogram=None, theta=None, reference_histogram=None):
    """The kernel's update and numpy's of the same batch, each folded into
    what its own path held before (`reference_histogram`: numpy's)."""
    ours = numeric.native_update(native.numeric_update, values, stored, histogram, theta)
    reference = numeric.python_update(values, stored, reference_histogram or histogram)
    return ours, reference


def _assert_same(ours, reference, theta=None):
    for name in ("nan", "inf", "finite", "low", "high", "sum", "squares"):
        mine, theirs = getattr(ours, name), getattr(reference, name)
        assert type(mine) is type(theirs) and mine == theirs, name
        if isinstance(mine, float):  # -0.0 vs 0.0
            assert math.copysign(1, mine) == math.copysign(1, theirs), name
    if reference.histogram is None:
        assert ours.histogram is None
    else:
        assert ours.histogram == reference.histogram
        assert ours.histogram.keys.dtype == reference.histogram.keys.dtype
        assert ours.histogram.counts.dtype == reference.histogram.counts.dtype
        assert ours.histogram.serialize() == reference.histogram.serialize()
    # The kernel gives the hashes of numpy's candidates that the sketch
    # keeps, the `theta_most` smallest distinct ones, ascending.
    assert ours.candidates is None and reference.hashes is None
    hashes = theta_hashes(reference.candidates)
    kept = np.unique(hashes[(hashes < np.uint64(theta_bound(theta))) & (hashes != 0)])
    assert ours.hashes.tobytes() == kept[:theta_most(theta)].tobytes()


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


def _chained(native, batches, stored, lg_k=None):
    """Each batch folded in turn into what each path holds (histogram and
    theta sketch), compared batch by batch; the final sketches too.
    lg_k: the sketches are `HashedTheta(lg_k)` from the start (a small one
    fills, and the kernel cuts a batch's hashes, within a few values)."""
    ours_histogram = reference_histogram = None
    ours_theta, reference_theta = ((None, None) if lg_k is None
                                   else (HashedTheta(lg_k), HashedTheta(lg_k)))
    for batch in batches:
        ours, reference = _both(native, batch, stored, ours_histogram, ours_theta,
                                reference_histogram)
        _assert_same(ours, reference, ours_theta)
        if ours.histogram is not None:
            ours_histogram, reference_histogram = ours.histogram, reference.histogram
        if ours.finite:
            ours_theta = add_numbers(ours_theta, None, ours.hashes)
            reference_theta = add_numbers(reference_theta, reference.candidates)
    if ours_theta is not None:
        assert (compact_theta(ours_theta).serialize()
                == compact_theta(reference_theta).serialize())


# Batches of one column's values: narrow ranges (a histogram that coarsens
# as the batches widen it), repeats, and every value class.
CHAINED_INTS = st.lists(st.one_of(st.lists(INTS, max_size=2500),
                                  st.lists(st.integers(-5000, 5000), max_size=3000)), max_size=5)
CHAINED_FLOATS = st.lists(st.one_of(st.lists(FLOATS, max_size=2500),
                                    st.lists(st.floats(-1.0, 1.0), max_size=3000)), max_size=5)


@settings(max_examples=60, deadline=None)
@given(batches=CHAINED_INTS)
def test_int_batches_fold_into_the_same_histogram_and_sketch(native, batches):
    _chained(native, batches, "int64")


@settings(max_examples=60, deadline=None)
@given(batches=CHAINED_FLOATS)
def test_float_batches_fold_into_the_same_histogram_and_sketch(native, batches):
    with np.errstate(over="ignore"):
        _chained(native, batches, "float")


@settings(max_examples=100, deadline=None)
@given(ints=CHAINED_INTS, floats=CHAINED_FLOATS, lg_k=st.integers(5, 7))
def test_a_small_sketch_cut_by_the_kernel_ends_the_same(native, ints, floats, lg_k):
    """Sketches of 32-128 entries: most batches hold more distinct values
    than `theta_most`, which the kernel cuts them to; the sketches still
    end as numpy's uncut hashes make them."""
    _chained(native, ints, "int64", lg_k)
    with np.errstate(over="ignore"):
        _chained(native, floats, "float", lg_k)


def test_a_wide_column_coarsens_batch_by_batch_the_same(native):
    rng = np.random.default_rng(3)
    batches = [rng.integers(-(1 << 40), 1 << 40, 10_000) for _ in range(6)]
    _chained(native, batches, "int64")
    _chained(native, [rng.normal(0, 1e3, 10_000) for _ in range(6)], "float")


@pytest.mark.parametrize("stored, values", [
    ("int64", []), ("float", []), ("float", [math.nan] * 3), ("float", [math.inf, -math.inf]),
    ("float", [-0.0]), ("float", [3.5e38, -1e300]), ("int64", [-(1 << 63)] * 7),
    ("int64", [(1 << 63) - 1, -(1 << 63)])])
def test_edge_batches(native, stored, values):
    with np.errstate(over="ignore"):
        _assert_same(*_both(native, values, stored))
        # and folded into a histogram held already
        held = numeric.python_update([0.5, 2.0, -3.0], "float", None).histogram
        _assert_same(*_both(native, values, stored, held))


def test_a_sum_of_squares_past_128_bits_is_exact(native):
    ours, _ = _both(native, [-(1 << 63)] * 9, "int64")
    assert ours.squares == (9 << 126) << SHIFT
    assert ours.sum == (-9 << 63) << SHIFT


def test_a_buffer_of_odd_length_is_refused(native):
    with pytest.raises(ValueError, match="multiple of 8"):
        native.numeric_update(b"\x00" * 9, True, None, 1 << 62, 4097)
    with pytest.raises(ValueError, match="multiple of 8"):
        native.numeric_update(b"\x00" * 8, True, (0, b"\x00" * 7, b""), 1 << 62, 4097)


def test_a_held_histogram_that_cannot_be_is_refused(native):
    key, count = b"\x00" * 8, b"\x01" + b"\x00" * 7
    with pytest.raises(ValueError, match="shift is over 63"):
        native.numeric_update(key, True, (64, key, count), 1 << 62, 4097)
    with pytest.raises(ValueError, match="differ in number"):
        native.numeric_update(key, True, (0, key * 2, count), 1 << 62, 4097)


def _statistics(batches, stored, native, kind="numeric"):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(numeric, "kernels", lambda: native)
        stats = FeatureStatistics(kind, stored)
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


@settings(max_examples=100, deadline=None)
@given(batches=st.lists(st.lists(st.binary(max_size=300) | st.binary(min_size=5000, max_size=5003),
                                 min_size=1, max_size=2000), max_size=4))
def test_bytes_statistics_are_the_same_on_both_paths(native, batches):
    """A bytes feature's histogram of value lengths, folded in by the
    numeric kernel, is the one numpy makes."""
    assert (_statistics(batches, "bytes", native, "bytes")
            == _statistics(batches, "bytes", None, "bytes"))


@settings(max_examples=60, deadline=None)
@given(batches=st.lists(st.one_of(st.lists(INTS, min_size=1, max_size=2500),
                                  st.lists(st.integers(-5000, 5000), min_size=1, max_size=3000)),
                        min_size=1, max_size=5),
       cut=st.integers(0, 5), reverse=st.booleans())
def test_partials_merged_in_any_grouping_are_the_batches_added_in_one(native, batches, cut,
                                                                      reverse):
    """Two runs of batches, each added up natively, merged either way round:
    the statistics numpy gives adding every batch to one partial."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(numeric, "kernels", lambda: native)
        parts = []
        for group in (batches[:cut], batches[cut:]):
            stats = FeatureStatistics("numeric", "int64")
            for batch in group:
                stats.add_values(len(batch), batch)
            parts.append(stats)
    first, second = parts[::-1] if reverse else parts
    merged = first.merge(second)
    assert json.dumps(merged.to_state(), sort_keys=True) == _statistics(batches, "int64", None)[0]
