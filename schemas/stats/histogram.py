"""The value histogram: exact counts of values in buckets of adaptive width, the quantile sketch of stats.json."""

from __future__ import annotations

import math
import struct
from typing import Sequence

import numpy as np

__all__ = ["HISTOGRAM_BUCKETS", "ValueHistogram", "counted_keys", "ordered_keys",
           "unordered_keys"]

# Value histograms keep the finest resolution at which a split's values fill
# at most this many buckets (ValueHistogram).
HISTOGRAM_BUCKETS = 2048

_SIGN = np.uint64(1 << 63)
_HISTOGRAM_MAGIC = b"RFH1"
_HISTOGRAM_HEADER = struct.Struct("<4sBBBxIddQ")
_WIDTHS = (1, 2, 4, 8)


def ordered_keys(floats: np.ndarray) -> np.ndarray:
    """uint64 keys that order as the float64 values do: the sign bit set for
    positive values, every bit flipped for negative ones."""
    bits = np.ascontiguousarray(floats, dtype=np.float64).view(np.uint64)
    return np.where(bits >> np.uint64(63) != 0, ~bits, bits | _SIGN)


def unordered_keys(keys: np.ndarray) -> np.ndarray:
    """The float64 values of `ordered_keys` keys."""
    keys = np.asarray(keys, dtype=np.uint64)
    return np.where(keys >> np.uint64(63) != 0, keys ^ _SIGN, ~keys).view(np.float64)


def _coarsened(keys: np.ndarray, counts: np.ndarray, by: int) -> tuple[np.ndarray, np.ndarray]:
    """Sorted keys shifted right by `by` bits, equal keys' counts added."""
    if by:
        keys = keys >> np.uint64(by)
    if len(keys) < 2:
        return keys, counts
    starts = np.flatnonzero(keys[1:] != keys[:-1]) + 1
    if len(starts) == len(keys) - 1:
        return keys, counts
    starts = np.concatenate(([0], starts))
    return keys[starts], np.add.reduceat(counts, starts)


def _occupied(keys: np.ndarray, by: int) -> int:
    """The number of buckets the sorted keys fill once shifted by `by` bits."""
    shifted = keys >> np.uint64(by)
    return 1 + int(np.count_nonzero(shifted[1:] != shifted[:-1]))


class ValueHistogram:
    """Exact counts of values in buckets whose width adapts to the data: the
    quantile sketch of `stats.json`.

    Every finite double maps to a 64-bit key that orders as the values do
    (`ordered_keys`); a bucket is the keys sharing their top ``64 - shift`` bits,
    so it holds the values that share sign, exponent and the top
    ``52 - shift`` mantissa bits: with ``shift`` 0 every distinct value is
    its own bucket (exact), and each further bit halves the resolution.
    The sketch keeps the finest resolution at which the values fill at most
    `HISTOGRAM_BUCKETS` buckets. Counts are exact integers and coarser
    buckets are unions of finer ones, so the sketch of a set of values is
    one thing however the values were batched and in whatever order the
    batches were merged: merging coarsens both sides to the coarser shift,
    adds the counts and coarsens on while too many buckets are filled,
    which is exactly the sketch of the union.

    It answers as KLL does (`get_quantiles`, `get_pmf`), taking each bucket's
    values at its middle (clamped to the exact min and max), so the true
    quantile lies in the same bucket as the answer: within `relative_error`
    of it.
    """

    __slots__ = ("shift", "keys", "counts", "low", "high")

    def __init__(self, shift: int, keys: np.ndarray, counts: np.ndarray, low: float, high: float):
        self.shift, self.keys, self.counts, self.low, self.high = shift, keys, counts, low, high

    @classmethod
    def of(cls, floats: np.ndarray, into: "ValueHistogram | None" = None) -> "ValueHistogram":
        """The sketch of finite float64 values (-0.0 counts as 0.0), at least
        one; with `into`, merged with that sketch (`of_counts`)."""
        # (a sort and a mask: np.unique's own takes about 1.5x as long here)
        return cls.of_counts(*_runs(np.sort(ordered_keys(floats + 0.0))), into)

    @classmethod
    def of_counts(cls, keys: np.ndarray, counts: np.ndarray,
                  into: "ValueHistogram | None" = None) -> "ValueHistogram":
        """The sketch of values given as their `ordered_keys` keys, distinct and
        sorted, and how often each occurs (what np.unique gives), at least
        one; with `into`, merged with that sketch (of other values). The
        values then go straight to its resolution, which the union needs at
        least, rather than first to their own (which the merge would coarsen)."""
        low, high = unordered_keys(keys[[0, -1]]).tolist()
        counts = counts.astype(np.int64)
        if into is None:
            return cls._fitted(0, keys, counts, low, high)
        keys, counts = _coarsened(keys, counts, into.shift)
        return into.merge(cls(into.shift, keys, counts, low, high))

    @classmethod
    def _fitted(cls, shift: int, keys, counts, low, high) -> "ValueHistogram":
        if len(keys) > HISTOGRAM_BUCKETS:
            # the finest further shift that fills few enough buckets
            fine, coarse = 0, 63 - shift
            while fine < coarse:
                middle = (fine + coarse) // 2
                if _occupied(keys, middle) <= HISTOGRAM_BUCKETS:
                    coarse = middle
                else:
                    fine = middle + 1
            keys, counts = _coarsened(keys, counts, fine)
            shift += fine
        return cls(shift, keys, counts, low, high)

    def merge(self, other: "ValueHistogram") -> "ValueHistogram":
        """The sketch of both sketches' values (neither is changed)."""
        shift = max(self.shift, other.shift)
        keys = np.concatenate((self.keys >> np.uint64(shift - self.shift),
                               other.keys >> np.uint64(shift - other.shift)))
        counts = np.concatenate((self.counts, other.counts))
        order = np.argsort(keys, kind="stable")
        keys, counts = _coarsened(keys[order], counts[order], 0)
        return self._fitted(shift, keys, counts, min(self.low, other.low),
                            max(self.high, other.high))

    # -- answers, as datasketches' quantile sketches give them -------------------

    def is_empty(self) -> bool:
        return not len(self.keys)

    @property
    def n(self) -> int:
        return int(self.counts.sum())

    @property
    def relative_error(self) -> float:
        """A bound on |answer - true quantile| / |true quantile| (normal
        numbers): the buckets' width relative to their values; 0 is exact."""
        if self.shift <= 52:
            return 2.0 ** (self.shift - 52) if self.shift else 0.0
        # buckets of 2**(shift - 52) binades
        return float(min(2 ** (2 ** (self.shift - 52)) - 1, 1e300))

    def _middles(self) -> np.ndarray:
        """Each bucket's representative value: the middle of its keys, within
        the exact min and max."""
        shift = np.uint64(self.shift)
        low, high = ordered_keys(np.array([self.low, self.high]))
        first = np.maximum(self.keys << shift, low)
        last = np.minimum(((self.keys << shift) | ((np.uint64(1) << shift) - np.uint64(1))),
                          high)
        return unordered_keys(first + (last - first) // np.uint64(2))

    def get_quantiles(self, ranks: Sequence[float]) -> list[float]:
        """For each rank q, the value of the bucket holding the smallest value
        with more than q * n values at or below it."""
        cumulative = np.cumsum(self.counts)
        total = int(cumulative[-1])
        where = np.searchsorted(cumulative, np.asarray(ranks, dtype=np.float64) * total,
                                side="right")
        middles = self._middles()
        return middles[np.minimum(where, len(middles) - 1)].tolist()

    def get_pmf(self, split_points: Sequence[float]) -> list[float]:
        """Fractions of the values in (-inf, p0), [p0, p1), ..., [p_last, inf),
        each bucket counted where its representative value falls."""
        cumulative = np.concatenate(([0], np.cumsum(self.counts)))
        below = cumulative[np.searchsorted(self._middles(), np.asarray(split_points,
                                                                        dtype=np.float64),
                                           side="left")]
        masses = np.diff(np.concatenate(([0], below, [cumulative[-1]])))
        return (masses / cumulative[-1]).tolist()

    # -- bytes -------------------------------------------------------------------

    def serialize(self) -> bytes:
        """Header (magic ``RFH1``, shift, byte widths of key steps and counts,
        bucket count, min, max, first key; little-endian), then the steps
        between consecutive keys and the counts as unsigned integers."""
        steps = np.diff(self.keys)
        step_width = _width(int(steps.max()) if len(steps) else 0)
        count_width = _width(int(self.counts.max()) if len(self.counts) else 0)
        header = _HISTOGRAM_HEADER.pack(_HISTOGRAM_MAGIC, self.shift, step_width, count_width,
                                        len(self.keys), self.low, self.high,
                                        int(self.keys[0]) if len(self.keys) else 0)
        return (header + steps.astype(f"<u{step_width}").tobytes()
                + self.counts.astype(f"<u{count_width}").tobytes())

    @classmethod
    def deserialize(cls, data: bytes) -> "ValueHistogram":
        try:
            magic, shift, step_width, count_width, size, low, high, first = \
                _HISTOGRAM_HEADER.unpack_from(data)
        except struct.error:
            raise ValueError("not a recordforge value histogram: too short") from None
        if magic != _HISTOGRAM_MAGIC or shift > 63 or step_width not in _WIDTHS \
                or count_width not in _WIDTHS:
            raise ValueError("not a recordforge value histogram")
        offset = _HISTOGRAM_HEADER.size
        steps_end = offset + max(0, size - 1) * step_width
        if len(data) != steps_end + size * count_width:
            raise ValueError("a recordforge value histogram of the wrong length")
        steps = np.frombuffer(data, dtype=f"<u{step_width}", count=max(0, size - 1),
                              offset=offset).astype(np.uint64)
        keys = (np.concatenate(([np.uint64(first)], steps)).cumsum(dtype=np.uint64)
                if size else np.zeros(0, dtype=np.uint64))
        counts = np.frombuffer(data, dtype=f"<u{count_width}", count=size,
                               offset=steps_end).astype(np.int64)
        if size and not _holdable(shift, keys, counts, low, high):
            raise ValueError("a recordforge value histogram whose keys, counts or bounds "
                             "are not ones it can hold")
        return cls(shift, keys, counts, low, high)

    def __eq__(self, other) -> bool:
        return (isinstance(other, ValueHistogram) and self.shift == other.shift
                and (self.low, self.high) == (other.low, other.high)
                and np.array_equal(self.keys, other.keys)
                and np.array_equal(self.counts, other.counts))

    def __repr__(self) -> str:
        return (f"ValueHistogram({len(self.keys)} buckets, shift {self.shift}, n {self.n}, "
                f"[{self.low}, {self.high}])")


def _holdable(shift: int, keys: np.ndarray, counts: np.ndarray, low: float, high: float
              ) -> bool:
    """Whether read-back parts are what `of` makes, which the answers rely
    on (they divide by the counts and clamp buckets to the bounds): keys
    strictly rising (a wrapped sum of steps falls), counts of at least 1
    summing below 2**62, finite bounds, the min in the first bucket and the
    max in the last (so no bucket lies outside them, and no key shifted
    back overflows)."""
    if (np.diff(keys) <= 0).any() or counts.min() < 1 or sum(counts.tolist()) >= 1 << 62:
        return False
    if not (math.isfinite(low) and math.isfinite(high) and low <= high):
        return False
    low_key, high_key = ordered_keys(np.array([low, high])) >> np.uint64(shift)
    return bool(low_key == keys[0] and high_key == keys[-1])


def _width(largest: int) -> int:
    return next(width for width in _WIDTHS if largest < 1 << (8 * width))



def counted_keys(finite: np.ndarray, low, high) -> tuple[np.ndarray, np.ndarray]:
    """The distinct `ordered_keys` keys of finite numbers between low and high
    (int64, or float64 holding float32 values, no -0.0), sorted, and how
    often each occurs: np.unique of their keys. The numbers are sorted in
    32 bits where they fit (ints below 2**31; float32 values always), about
    twice as fast as their 64-bit keys; sorted numbers give sorted keys."""
    if finite.dtype != np.int64:
        narrow = finite.astype(np.float32)
    elif -(1 << 31) <= low and high < (1 << 31):
        narrow = finite.astype(np.int32)
    else:
        narrow = finite
    return _runs(ordered_keys(np.sort(narrow).astype(np.float64)))


def _runs(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted keys -> (the distinct ones, how often each occurs): np.unique's
    answer for keys already sorted."""
    starts = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
    return keys[starts], np.diff(np.append(starts, len(keys)))
