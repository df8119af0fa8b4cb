"""The value histogram (schemas/stats/histogram.py): resolution, key order, bytes."""

from __future__ import annotations

import numpy as np
import pytest

from recordforge.schemas.stats.histogram import HISTOGRAM_BUCKETS, ValueHistogram, ordered_keys


def test_value_histogram_keeps_the_finest_resolution_that_fits():
    rng = np.random.default_rng(8)
    # epoch seconds: a narrow range far from zero keeps a fine resolution
    seconds = 1.7e9 + rng.integers(0, 10 ** 7, 50_000).astype(np.float64)
    sketch = ValueHistogram.of(seconds)
    assert len(sketch.keys) <= HISTOGRAM_BUCKETS < len(np.unique(seconds))
    # the sketch's shift is the smallest at which the values fit
    assert len(np.unique(ordered_keys(seconds) >> np.uint64(sketch.shift - 1))) > HISTOGRAM_BUCKETS
    assert len(np.unique(ordered_keys(seconds) >> np.uint64(sketch.shift))) == len(sketch.keys)
    median = sketch.get_quantiles([0.5])[0]
    true = np.sort(seconds)[len(seconds) // 2]  # more than half the values at or below it
    assert abs(median - true) <= sketch.relative_error * true < 20_000
    assert sketch.n == 50_000 and (sketch.low, sketch.high) == (seconds.min(), seconds.max())
    assert ValueHistogram.deserialize(sketch.serialize()) == sketch


def test_value_histogram_orders_signs_and_zero():
    values = np.array([-3.5, -0.0, 0.0, 2.0, -1e-300, 1e300, -1e300, 5e-324])
    sketch = ValueHistogram.of(values)
    assert sketch.relative_error == 0.0
    assert sketch.get_quantiles([0, 0.2, 0.3, 0.4, 0.5, 0.8, 0.9]) == [
        -1e300, -3.5, -1e-300, 0.0, 0.0, 2.0, 1e300]
    # (-inf, -1), [-1, 0), [0, 1), [1, inf)
    assert sketch.get_pmf([-1.0, 0.0, 1.0]) == [0.25, 0.125, 0.375, 0.25]


# --- a stored sketch read back is untrusted ------------------------------------------------

import struct  # noqa: E402

from hypothesis import given, settings, strategies as st  # noqa: E402

_HEADER = struct.Struct("<4sBBBxIddQ")


@settings(max_examples=200, deadline=None)
@given(shift=st.integers(0, 63), steps=st.lists(st.integers(0, 2**64 - 1), max_size=6),
       counts=st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=7),
       low=st.floats(), high=st.floats(), first=st.integers(0, 2**64 - 1))
def test_a_read_back_histogram_answers_with_finite_fractions_or_is_refused(shift, steps, counts,
                                                                           low, high, first):
    """Any bytes of the right length: deserialize either refuses them
    (ValueError) or gives a histogram whose masses are fractions summing to
    1 (drift divides by its counts and bins by its keys and bounds)."""
    steps = steps[:len(counts) - 1] + [1] * max(0, len(counts) - 1 - len(steps))
    data = (_HEADER.pack(b"RFH1", shift, 8, 8, len(counts), low, high, first)
            + np.array(steps, dtype="<u8").tobytes() + np.array(counts, dtype="<u8").tobytes())
    try:
        sketch = ValueHistogram.deserialize(data)
    except ValueError:
        return
    masses = sketch.get_pmf(sketch.get_quantiles([0.1, 0.5, 0.9]))
    assert all(0 <= mass <= 1 for mass in masses) and sum(masses) == pytest.approx(1)
    assert all(np.isfinite(sketch.get_quantiles([0.0, 0.5, 1.0])))


# --- the sketch of values: a sort and a mask, np.unique's answer --------------------------

def _unique_sketch(floats, into=None):
    """The sketch as `of` made it with np.unique (the definition)."""
    return ValueHistogram.of_counts(*np.unique(ordered_keys(floats + 0.0), return_counts=True),
                                    into)


FINITE = st.one_of(st.floats(allow_nan=False, allow_infinity=False),
                   st.integers(0, 5000).map(float), st.sampled_from([0.0, -0.0, 5e-324, -1e300]))


@settings(max_examples=300, deadline=None)
@given(values=st.lists(FINITE, min_size=1, max_size=4000),
       held=st.none() | st.lists(FINITE, min_size=1, max_size=3000))
def test_of_is_the_sketch_np_unique_gives(values, held):
    floats = np.array(values, dtype=np.float64)
    into = None if held is None else ValueHistogram.of(np.array(held, dtype=np.float64))
    ours, reference = ValueHistogram.of(floats, into), _unique_sketch(floats, into)
    assert ours == reference and ours.counts.dtype == reference.counts.dtype
    assert ours.serialize() == reference.serialize()
