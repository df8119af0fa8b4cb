"""A batch's numeric update: what `FeatureStatistics` adds for an int64 or float column, native or numpy.

`numeric_update` folds one batch of a numeric feature into the value
histogram and theta sketch held for it and gives the batch's NaN and
infinity counts, the finite values' count, min, max, exact sum and sum of
squares: in one call of the native kernel (`recordforge._native.
numeric_update`, native/src/numeric_stats.rs) where the extension runs,
else with numpy (`python_update`: `python_parts`, then
`ValueHistogram.of_counts`; the reference the kernel is held to by
tests/native/test_numeric_partials.py). The kernel hands back the merged
histogram (at most `HISTOGRAM_BUCKETS` buckets) and only the theta hashes
the sketch keeps (`distinct.theta_bound`), at most the smallest
`distinct.theta_most` of them and ascending, not arrays of the batch's length.
"""

from __future__ import annotations

import logging
from typing import NamedTuple, Sequence

import numpy as np

from ..native import kernels
from .distinct import theta_bound, theta_candidates, theta_most
from .histogram import ValueHistogram, counted_keys
from .sums import SHIFT, exact_float_sums, exact_int_sums

__all__ = ["NumericParts", "NumericUpdate", "native_update", "numeric_update", "python_parts",
           "python_update"]

_LOG = logging.getLogger(__name__)


class NumericParts(NamedTuple):
    """One batch's numeric partial. Floats are described as the float32
    values they store (-0.0 as 0.0); low, high, sum, squares, keys, counts
    and candidates are of the finite values only (None or empty without
    one); sum and squares are exact integers scaled by 2**SHIFT (`sums`);
    keys the distinct `histogram.ordered_keys` ascending, counts how often
    each occurs; candidates what `distinct.theta_candidates` gives."""

    nan: int
    inf: int
    finite: int
    low: int | float | None
    high: int | float | None
    sum: int
    squares: int
    keys: np.ndarray
    counts: np.ndarray
    candidates: np.ndarray


class NumericUpdate(NamedTuple):
    """One batch folded into a numeric feature's statistics: nan to squares
    as `NumericParts` gives them; histogram the one held merged with the
    batch's finite values (None without one: the held one stands); the
    theta sketch's new values as candidates (`theta_candidates`) with
    hashes None, or as hashes alone (the kernel's, screened by
    `theta_bound` and cut to the `theta_most` smallest, ascending and
    distinct) with candidates None."""

    nan: int
    inf: int
    finite: int
    low: int | float | None
    high: int | float | None
    sum: int
    squares: int
    histogram: ValueHistogram | None
    candidates: np.ndarray | None
    hashes: np.ndarray | None


def numeric_update(values: Sequence, stored: str, histogram: ValueHistogram | None,
                   theta) -> NumericUpdate:
    """The update of a numeric feature stored as `stored` ("int64" or
    "float") holding `histogram` and `theta` (None, or its sketch) by a
    batch's values: a list of numbers, a numpy array, or a
    `columns.CheckedNumbers`. The native kernel's where it runs; a kernel
    failure (a bug) costs speed, never the statistics: numpy then."""
    native = kernels()
    if native is not None:
        try:
            return native_update(native.numeric_update, values, stored, histogram, theta)
        except (OverflowError, TypeError, ValueError):
            raise  # the values themselves are not int64 or float: numpy says the same
        except Exception:
            _LOG.warning("native numeric statistics failed; taking the numpy path",
                         exc_info=True)
    return python_update(values, stored, histogram)


def python_update(values: Sequence, stored: str, histogram: ValueHistogram | None
                  ) -> NumericUpdate:
    """`numeric_update` with numpy: the reference."""
    parts = python_parts(values, stored)
    if parts.finite:
        histogram = ValueHistogram.of_counts(parts.keys, parts.counts, histogram)
    return NumericUpdate(parts.nan, parts.inf, parts.finite, parts.low, parts.high, parts.sum,
                         parts.squares, histogram if parts.finite else None, parts.candidates,
                         None)


def native_update(numeric_update_kernel, values: Sequence, stored: str,
                  histogram: ValueHistogram | None, theta) -> NumericUpdate:
    """`numeric_update` by the kernel function `numeric_update_kernel`."""
    is_int = stored == "int64"
    # The kernel reads little-endian words (a no-op conversion here).
    array = np.ascontiguousarray(getattr(values, "array", values),
                                 dtype="<i8" if is_int else "<f8")
    held = None if histogram is None else (
        histogram.shift, np.ascontiguousarray(histogram.keys, dtype="<u8").view(np.uint8),
        np.ascontiguousarray(histogram.counts, dtype="<i8").view(np.uint8))
    (nan, inf, finite, low, high, total, squares, bounds, buckets, hashes) = \
        numeric_update_kernel(array.view(np.uint8), is_int, held, theta_bound(theta),
                              theta_most(theta))
    merged = None
    if buckets is not None:
        shift, keys, counts = buckets
        first, last = bounds
        if histogram is not None:
            first, last = min(histogram.low, first), max(histogram.high, last)
        # (read-only views of the kernel's bytes: nothing here writes them)
        merged = ValueHistogram(shift, _words(keys, np.uint64), _words(counts, np.int64),
                                first, last)
    return NumericUpdate(nan, inf, finite, low, high, _scaled(total), _scaled(squares), merged,
                         None, _words(hashes, np.uint64))


def _words(packed: bytes, dtype) -> np.ndarray:
    """Little-endian 8-byte words as a native array (no copy on this machine)."""
    return np.frombuffer(packed, dtype=np.dtype(dtype).newbyteorder("<")).astype(dtype, copy=False)


def _scaled(terms: list[tuple[int, int]]) -> int:
    """Σ value * 2**shift of the kernel's (value, shift) terms, scaled by 2**SHIFT."""
    return sum(value << (shift + SHIFT) for value, shift in terms)


def python_parts(values: Sequence, stored: str) -> NumericParts:
    """A batch's numeric partial with numpy, the reference `python_update` folds in."""
    as_list = values if isinstance(values, list) else None
    # The array a column's check made (`columns.CheckedNumbers`), if any.
    array = getattr(values, "array", values)
    nan = inf = 0
    if stored == "int64":
        finite = np.asarray(array, dtype=np.int64)
        if not len(finite):
            return _no_finite(nan, inf, finite.dtype)
        low, high = finite.min().item(), finite.max().item()
        total, squares = exact_int_sums(finite, as_list, low, high)
    else:
        # (+ 0.0 makes -0.0 a plain zero, so min and max do not depend on the order)
        floats = np.asarray(array, dtype=np.float64).astype(np.float32).astype(
            np.float64) + 0.0
        is_finite = np.isfinite(floats)
        if not is_finite.all():
            nan = int(np.isnan(floats).sum())
            inf = int(len(floats) - is_finite.sum()) - nan
            floats = floats[is_finite]
        finite = floats
        if not len(finite):
            return _no_finite(nan, inf, finite.dtype)
        low, high = finite.min().item(), finite.max().item()
        total, squares = exact_float_sums(finite)
    keys, counts = counted_keys(finite, low, high)
    return NumericParts(nan, inf, len(finite), low, high, total, squares, keys,
                        counts.astype(np.int64), theta_candidates(finite, keys, low, high))


def _no_finite(nan: int, inf: int, dtype) -> NumericParts:
    empty = np.zeros(0, dtype=np.uint64)
    return NumericParts(nan, inf, 0, None, None, 0, 0, empty, np.zeros(0, dtype=np.int64),
                        np.zeros(0, dtype=dtype))
