"""A batch's numeric partial: what `FeatureStatistics` adds for an int64 or float column, native or numpy.

`numeric_parts` gives, for one batch of a numeric feature, the NaN and
infinity counts, the finite values' count, min, max, exact sum and sum of
squares, their distinct histogram keys with counts and the theta sketch's
candidates: in one pass of the native kernel (`recordforge._native.
numeric_partial`, native/src/stats.rs) where the extension runs, else with
numpy (`python_parts`, the reference the kernel is held to, part for part,
by tests/native/test_numeric_partials.py). The kernel also gives each
candidate's theta hash, which `distinct.add_numbers` otherwise computes.
"""

from __future__ import annotations

import logging
from typing import NamedTuple, Sequence

import numpy as np

from ..native import kernels
from .distinct import theta_candidates
from .histogram import counted_keys
from .sums import SHIFT, exact_float_sums, exact_int_sums

__all__ = ["NumericParts", "native_parts", "numeric_parts", "python_parts"]

_LOG = logging.getLogger(__name__)


class NumericParts(NamedTuple):
    """One batch's numeric partial. Floats are described as the float32
    values they store (-0.0 as 0.0); low, high, sum, squares, keys, counts
    and candidates are of the finite values only (None or empty without
    one); sum and squares are exact integers scaled by 2**SHIFT (`sums`);
    keys the distinct `histogram.ordered_keys` ascending, counts how often
    each occurs; candidates what `distinct.theta_candidates` gives, hashes
    their `distinct.theta_hashes` or None (not computed yet)."""

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
    hashes: np.ndarray | None


def numeric_parts(values: Sequence, stored: str) -> NumericParts:
    """The partial of a batch's values of a numeric feature stored as
    `stored` ("int64" or "float"): a list of numbers, a numpy array, or a
    `columns.CheckedNumbers`. The native kernel's where it runs; a kernel
    failure (a bug) costs speed, never the statistics: numpy then."""
    native = kernels()
    if native is not None:
        try:
            return native_parts(native.numeric_partial, values, stored)
        except (OverflowError, TypeError, ValueError):
            raise  # the values themselves are not int64 or float: numpy says the same
        except Exception:
            _LOG.warning("native numeric statistics failed; taking the numpy path",
                         exc_info=True)
    return python_parts(values, stored)


def native_parts(numeric_partial, values: Sequence, stored: str) -> NumericParts:
    """`numeric_parts` by the kernel function `numeric_partial`."""
    is_int = stored == "int64"
    dtype = np.int64 if is_int else np.float64
    # The kernel reads little-endian words (a no-op conversion here).
    array = np.ascontiguousarray(getattr(values, "array", values),
                                 dtype="<i8" if is_int else "<f8")
    (nan, inf, finite, low, high, total, squares, keys, counts, candidates,
     hashes) = numeric_partial(array.view(np.uint8), is_int)
    # (read-only views of the kernel's bytes: nothing here writes them)
    return NumericParts(nan, inf, finite, low, high, _scaled(total), _scaled(squares),
                        _words(keys, np.uint64), _words(counts, np.int64),
                        _words(candidates, dtype), _words(hashes, np.uint64))


def _words(packed: bytes, dtype) -> np.ndarray:
    """Little-endian 8-byte words as a native array (no copy on this machine)."""
    return np.frombuffer(packed, dtype=np.dtype(dtype).newbyteorder("<")).astype(dtype, copy=False)


def _scaled(terms: list[tuple[int, int]]) -> int:
    """Σ value * 2**shift of the kernel's (value, shift) terms, scaled by 2**SHIFT."""
    return sum(value << (shift + SHIFT) for value, shift in terms)


def python_parts(values: Sequence, stored: str) -> NumericParts:
    """`numeric_parts` with numpy: the reference."""
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
                        counts.astype(np.int64), theta_candidates(finite, keys, low, high), None)


def _no_finite(nan: int, inf: int, dtype) -> NumericParts:
    empty = np.zeros(0, dtype=np.uint64)
    return NumericParts(nan, inf, 0, None, None, 0, 0, empty, np.zeros(0, dtype=np.int64),
                        np.zeros(0, dtype=dtype), None)
