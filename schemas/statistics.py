"""Dataset statistics: mergeable per-feature summaries of the checked values, and `stats.json`.

`FeatureStatistics` summarises one feature in one split. It is built from a
batch's checked values (`from_values`, or `add_values` to add a batch to
it), merged with others (`merge`), and rendered as its ``stats.json``
entry (`to_json`); `batch_statistics` gives a batch's per split and
feature, `StatisticsAccumulator` those of a run of batches. The exact parts are plain
arithmetic: counts, min, max, and sums kept as exact integers (floats
through their binary mantissa and exponent), so mean and standard
deviation are the same bits whatever the batches and the order they merge
in. Quantiles and histograms come from a `ValueHistogram` (exact counts in
buckets of adaptive width), which is also the same whatever the batches and
the merge order; distinct counts from a DataSketches theta sketch in its
canonical form. The top values of text come from a Misra-Gries summary
(`FrequentValues`), whose merge depends on the order once a split holds
more distinct values than its capacity: `merge_partials` merges such
partials in an order fixed by their content (`partial_digest`), so the
result depends only on the set of partials. docs/statistics.md says what
each field guarantees.

Kinds of feature (`feature_kind`):
    numeric     int64 and float without a vocabulary
    vocabulary  int64 with a vocabulary: exact counts per label
    string      string (UTF-8 text)
    bytes       bytes: statistics of the value lengths (images: encoded size)

Nothing here knows about Beam.
"""

from __future__ import annotations

import base64
import collections
import dataclasses
import hashlib
import itertools
import json
import math
import struct
from fractions import Fraction
from typing import Any, Iterable, Mapping, Sequence

import datasketches
import numpy as np

from .features import FeatureSpec

__all__ = ["FORMAT", "HISTOGRAM_BUCKETS", "KINDS", "MERGE_LEVELS", "QUANTILE_RANKS",
           "FeatureStatistics", "FrequentValues", "StatisticsAccumulator", "StatisticsPlan",
           "ValueHistogram", "batch_statistics", "feature_kind", "merge_group", "merge_order",
           "merge_partials", "partial_digest", "sketch_from_json", "statistics_json"]

FORMAT = "recordforge.stats/1"
KINDS = ("numeric", "vocabulary", "string", "bytes")
# Value histograms keep the finest resolution at which a split's values fill
# at most this many buckets (ValueHistogram).
HISTOGRAM_BUCKETS = 2048
# Theta sketch: exact below 4096 distinct values, ~1.6% relative error above.
THETA_LG_K = 12
# Top values of text: exact while a split holds at most this many distinct
# values; above, counts carry bounds (FrequentValues).
FREQUENT_CAPACITY = 1024
TOP_VALUES = 50
QUANTILE_RANKS = (0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99)
HISTOGRAM_BINS = 10
# Exact sums are integers scaled by 2**_SHIFT: a double's 53-bit integer
# mantissa times 2**(exponent - 53), exponent >= -1073 (subnormals).
_SHIFT = 1126
_MANTISSA_BITS = 53
_HALF = 26
_EXACT_INT = 1 << 53  # ints up to this convert to float64 exactly
_CHUNK = 1 << 24  # bincount sums of 27-bit parts stay exact below 2**26 values
# Integers below 2**_SPLIT_BITS have their sums of squares taken in int64
# (`_integer_sums`): chunks of at least 2**14 values.
_SPLIT_BITS = 48
# The canonical merge of partials whose merge depends on the order (text
# features): level 1 groups them by the top 16 bits of their digest, level 2
# by the top 8, level 3 is one group; each group merges in the order of
# what distinguishes its members (MERGE_LEVELS: bits of the group key).
MERGE_LEVELS = (16, 8, 0)


def feature_kind(spec: FeatureSpec) -> str:
    """The kind of statistics a feature gets (see the module docstring)."""
    if spec.vocabulary is not None:
        return "vocabulary"
    if spec.stored_kind in ("int64", "float"):
        return "numeric"
    return "string" if spec.is_text else "bytes"


@dataclasses.dataclass(frozen=True)
class StatisticsPlan:
    """What the statistics of a build need to know of each feature:
    (name, kind, stored type, is a list, vocabulary or None), in schema order."""

    features: tuple[tuple[str, str, str, bool, tuple[str, ...] | None], ...]

    @classmethod
    def from_specs(cls, specs: Sequence[FeatureSpec],
                   vocabularies: Mapping[str, Sequence[str]]) -> "StatisticsPlan":
        features = []
        for spec in specs:
            vocabulary = vocabularies.get(spec.name)
            if vocabulary is None and isinstance(spec.vocabulary, tuple):
                vocabulary = spec.vocabulary
            features.append((spec.name, feature_kind(spec), spec.stored_kind, bool(spec.shape),
                             tuple(vocabulary) if vocabulary is not None else None))
        return cls(tuple(features))


# --- exact sums ----------------------------------------------------------------


def _exact_sum(values: np.ndarray) -> int:
    """The exact sum of finite float64 values, as an integer scaled by 2**_SHIFT.

    Each value is mantissa * 2**exponent with a 53-bit integer mantissa; the
    mantissas are split in two 26/27-bit halves and summed per exponent by
    bincount, whose float64 sums of such halves are exact below 2**26
    values. The result does not depend on the order of the values."""
    total = 0
    for start in range(0, len(values), _CHUNK):
        part = values[start:start + _CHUNK]
        mantissa, exponent = np.frexp(part)
        whole = (mantissa * float(1 << _MANTISSA_BITS)).astype(np.int64)
        high = whole >> _HALF  # floor: whole == high * 2**26 + low
        low = whole & ((1 << _HALF) - 1)
        lowest = int(exponent.min()) if len(exponent) else 0
        offsets = exponent - lowest
        highs = np.bincount(offsets, weights=high)
        lows = np.bincount(offsets, weights=low)
        used = np.flatnonzero((highs != 0) | (lows != 0))
        for offset, h, lo in zip(used.tolist(), highs[used].tolist(), lows[used].tolist()):
            shift = lowest + offset - _MANTISSA_BITS + _SHIFT
            total += ((int(h) << _HALF) + int(lo)) << shift
    return total


def _exact_int_sums(values: np.ndarray, as_list: list | None, low: int, high: int
                    ) -> tuple[int, int]:
    """(sum, sum of squares) of int64 values between low and high, exactly,
    scaled by 2**_SHIFT."""
    bits = max(abs(low), abs(high)).bit_length()
    if bits <= _SPLIT_BITS:
        total, squares = _integer_sums(values, bits)
        return total << _SHIFT, squares << _SHIFT
    items = as_list if as_list is not None else values.tolist()
    return sum(items) << _SHIFT, sum(x * x for x in items) << _SHIFT


def _exact_float_sums(floats: np.ndarray) -> tuple[int, int]:
    """(sum, sum of squares) of finite float64 values, each the exact
    `_exact_sum` of the values and of their float64 squares.

    Values of at most 26 significant bits (float32 values are such) whose
    magnitudes span at most _SPLIT_BITS bits are integers times one power
    of two, whose squares are exact doubles: their sums are two int64 sums
    (`_integer_sums`), several times cheaper than `_exact_sum`'s sums per
    exponent, and the same integers. Others take `_exact_sum`."""
    scaled = _scaled_integers(floats)
    if scaled is not None:
        integers, lowest, bits = scaled
        if 2 * lowest + _SHIFT >= 0:
            total, squares = _integer_sums(integers, bits)
            return total << (lowest + _SHIFT), squares << (2 * lowest + _SHIFT)
    return _exact_sum(floats), _exact_sum(floats * floats)


def _scaled_integers(floats: np.ndarray) -> tuple[np.ndarray, int, int] | None:
    """(integers, lowest, bits) with floats == integers * 2**lowest exactly
    and |integers| < 2**bits <= 2**_SPLIT_BITS, when each value has at most
    26 significant bits (its square is then an exact double); else None."""
    mantissa, exponent = np.frexp(floats)  # floats == mantissa * 2**exponent, |mantissa| < 1
    whole = (mantissa * float(1 << _MANTISSA_BITS)).astype(np.int64)  # 53-bit integers
    if (whole & ((1 << (_MANTISSA_BITS - 26)) - 1)).any():
        return None
    nonzero = whole != 0
    if not nonzero.all():
        whole, exponent = whole[nonzero], exponent[nonzero]
        if not len(whole):
            return np.zeros(len(floats), dtype=np.int64), 0, 0
    # The value of each one's lowest set bit: 2**(exponent - 53 + trailing zeros).
    trailing = np.frexp((whole & -whole).astype(np.float64))[1] - 1
    lowest = int((exponent + trailing).min()) - _MANTISSA_BITS
    bits = int(exponent.max()) - lowest
    if bits > _SPLIT_BITS:
        return None
    return np.ldexp(floats, -lowest).astype(np.int64), lowest, bits


def _integer_sums(integers: np.ndarray, bits: int) -> tuple[int, int]:
    """(sum, sum of squares) of int64 values below 2**bits in magnitude
    (bits <= _SPLIT_BITS), exactly. Each value is split in a high and a low
    half of ``half`` bits, so that the square's three parts (high², high *
    low, low²) stay below 2**(2 * half) and int64 sums of chunks of
    2**(62 - 2 * half) values cannot overflow."""
    half = (bits + 1) // 2
    chunk = 1 << (62 - 2 * half)
    total = squares = 0
    for start in range(0, len(integers), chunk):
        part = integers[start:start + chunk]
        high = part >> half  # floor: part == high * 2**half + low
        low = part & ((1 << half) - 1)
        total += int(part.sum())
        squares += ((int((high * high).sum()) << (2 * half))
                    + (int((high * low).sum()) << (half + 1)) + int((low * low).sum()))
    return total, squares


# --- value histograms: the quantile sketch ----------------------------------------

_SIGN = np.uint64(1 << 63)
_HISTOGRAM_MAGIC = b"RFH1"
_HISTOGRAM_HEADER = struct.Struct("<4sBBBxIddQ")
_WIDTHS = (1, 2, 4, 8)


def _ordered(floats: np.ndarray) -> np.ndarray:
    """uint64 keys that order as the float64 values do: the sign bit set for
    positive values, every bit flipped for negative ones."""
    bits = np.ascontiguousarray(floats, dtype=np.float64).view(np.uint64)
    return np.where(bits >> np.uint64(63) != 0, ~bits, bits | _SIGN)


def _unordered(keys: np.ndarray) -> np.ndarray:
    """The float64 values of `_ordered` keys."""
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
    (`_ordered`); a bucket is the keys sharing their top ``64 - shift`` bits,
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
        return cls.of_counts(*np.unique(_ordered(floats + 0.0), return_counts=True), into)

    @classmethod
    def of_counts(cls, keys: np.ndarray, counts: np.ndarray,
                  into: "ValueHistogram | None" = None) -> "ValueHistogram":
        """The sketch of values given as their `_ordered` keys, distinct and
        sorted, and how often each occurs (what np.unique gives), at least
        one; with `into`, merged with that sketch (of other values). The
        values then go straight to its resolution, which the union needs at
        least, rather than first to their own (which the merge would coarsen)."""
        low, high = _unordered(keys[[0, -1]]).tolist()
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
        low, high = _ordered(np.array([self.low, self.high]))
        first = np.maximum(self.keys << shift, low)
        last = np.minimum(((self.keys << shift) | ((np.uint64(1) << shift) - np.uint64(1))),
                          high)
        return _unordered(first + (last - first) // np.uint64(2))

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
        return cls(shift, keys, counts, low, high)

    def __eq__(self, other) -> bool:
        return (isinstance(other, ValueHistogram) and self.shift == other.shift
                and (self.low, self.high) == (other.low, other.high)
                and np.array_equal(self.keys, other.keys)
                and np.array_equal(self.counts, other.counts))

    def __repr__(self) -> str:
        return (f"ValueHistogram({len(self.keys)} buckets, shift {self.shift}, n {self.n}, "
                f"[{self.low}, {self.high}])")


def _width(largest: int) -> int:
    return next(width for width in _WIDTHS if largest < 1 << (8 * width))


# --- frequent values: the top values of text ------------------------------------------


class FrequentValues:
    """The most frequent values of text: a Misra-Gries summary, merged as in
    Agarwal et al., "Mergeable summaries" (2012).

    counts: value -> count, at most `FREQUENT_CAPACITY` of them; offset: the
    total subtracted by purges. A value's true count lies between its count
    (0 when not held) and count + offset; while a split holds at most
    FREQUENT_CAPACITY distinct values nothing is purged and every count is
    exact. Merging adds the counts and, above the capacity, subtracts the
    (capacity + 1)-th largest count from all and drops those left at 0 or
    less. The summary is a plain value (its dict order plays no part), and
    merging two is symmetric, but not associative once purges happen: a
    canonical merge order (`merge_partials`) makes the result one thing.
    """

    __slots__ = ("counts", "offset")

    def __init__(self, counts: dict[str, int], offset: int = 0):
        self.counts, self.offset = counts, offset

    @classmethod
    def of(cls, counts: Mapping[str, int]) -> "FrequentValues":
        """The summary of values counted exactly (value -> count)."""
        return cls._purged(counts, 0)

    @classmethod
    def _purged(cls, counts: Mapping[str, int], offset: int) -> "FrequentValues":
        if len(counts) <= FREQUENT_CAPACITY:
            return cls(dict(counts), offset)
        # The (capacity + 1)-th largest count is 1 when at most `capacity`
        # counts are above 1, as when the excess over 1 of all counts (each
        # at least 1) is at most that: mostly distinct values (free text)
        # need no partition, and values each seen once are all dropped.
        excess = sum(counts.values()) - len(counts)
        if not excess:
            return cls({}, offset + 1)
        # The threshold, and the counts above it, with numpy: a batch of
        # text may hold thousands of distinct values.
        numbers = np.fromiter(counts.values(), dtype=np.int64, count=len(counts))
        if excess <= FREQUENT_CAPACITY:
            threshold = 1
        else:
            cut = len(numbers) - FREQUENT_CAPACITY - 1
            threshold = int(np.partition(numbers, cut)[cut])
        kept = numbers > threshold
        return cls(dict(zip(itertools.compress(counts, kept.tolist()),
                            (numbers[kept] - threshold).tolist())), offset + threshold)

    def merge(self, other: "FrequentValues") -> "FrequentValues":
        """The summary of both summaries' values (neither is changed)."""
        counts = dict(self.counts)
        get = counts.get
        for value, count in other.counts.items():
            counts[value] = get(value, 0) + count
        return self._purged(counts, self.offset + other.offset)

    def to_state(self) -> dict:
        return {"offset": self.offset, "items": sorted(map(list, self.counts.items()))}

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> "FrequentValues":
        return cls({value: count for value, count in state["items"]}, state["offset"])

    def __eq__(self, other) -> bool:
        return (isinstance(other, FrequentValues) and self.offset == other.offset
                and self.counts == other.counts)

    def __repr__(self) -> str:
        return f"FrequentValues({len(self.counts)} values, offset {self.offset})"


# --- one feature in one split ------------------------------------------------------


class FeatureStatistics:
    """Mergeable statistics of one feature in one split.

    rows: examples of the split; present: those holding the feature;
    num_values: values held (lists count each element); per-example value
    counts (min, max); by kind: numeric values (finite count, NaN, inf, min,
    max, exact sums, value histogram, theta), label counts (vocabulary),
    value counts (string: frequent items, theta) or value lengths (bytes:
    min, max, sum, value histogram). Pickles as plain values and serialized
    sketches; `to_state` / `from_state` give it as JSON-safe values.
    """

    __slots__ = ("kind", "stored", "is_list", "vocabulary", "rows", "present", "num_values",
                 "min_count", "max_count", "finite", "nan", "inf", "low", "high", "sum",
                 "sum_squares", "histogram", "theta", "frequent", "labels", "origin")

    def __init__(self, kind: str, stored: str, is_list: bool = False,
                 vocabulary: Sequence[str] | None = None):
        if kind not in KINDS:
            raise ValueError(f"unknown statistics kind {kind!r}")
        self.kind, self.stored, self.is_list = kind, stored, is_list
        self.vocabulary = tuple(vocabulary) if vocabulary is not None else None
        self.rows = self.present = self.num_values = 0
        self.min_count = self.max_count = None
        self.finite = self.nan = self.inf = 0
        self.low = self.high = None
        self.sum = self.sum_squares = 0
        self.histogram = None
        self.theta = None
        self.frequent = None
        self.labels = (np.zeros(len(self.vocabulary), dtype=np.int64)
                       if kind == "vocabulary" else None)
        # the batch a partial summarises (`batch_statistics`): its place in
        # the canonical merge order; None once merged
        self.origin = None

    # -- building ---------------------------------------------------------------

    @classmethod
    def from_values(cls, kind: str, stored: str, rows: int, values: Sequence,
                    is_list: bool = False, vocabulary: Sequence[str] | None = None,
                    per_row: Sequence[int] | None = None) -> "FeatureStatistics":
        """Statistics of `rows` examples whose values of the feature are
        `values` (flattened; str or bytes for string features, ints for
        vocabulary ids, numbers, bytes). per_row: the number of values each
        present example holds (None: one value per example, all present)."""
        stats = cls(kind, stored, is_list, vocabulary)
        stats.add_values(rows, values, per_row)
        return stats

    def add_values(self, rows: int, values: Sequence,
                   per_row: Sequence[int] | None = None) -> "FeatureStatistics":
        """Adds `rows` more examples, as `from_values` takes them; returns
        self. The result is that of merging `from_values` of them, without
        a second set of sketches to make and merge: a theta sketch being
        updated (not yet merged or pickled) takes the new values itself."""
        self.rows += rows
        if per_row is None:
            present, fewest, most = len(values), 1, 1
        else:
            present = len(per_row)
            fewest, most = (min(per_row), max(per_row)) if present else (None, None)
        self.present += present
        if present:
            self.min_count = _pick(min, self.min_count, fewest)
            self.max_count = _pick(max, self.max_count, most)
        self.num_values += len(values)
        if len(values):
            getattr(self, f"_add_{self.kind}")(values)
        return self

    def _add_numeric(self, values: Sequence) -> None:
        as_list = values if isinstance(values, list) else None
        # The array a column's check made (`columns.CheckedNumbers`), if any.
        array = getattr(values, "array", values)
        if self.stored == "int64":
            finite = np.asarray(array, dtype=np.int64)
            if not len(finite):
                return
            low, high = finite.min().item(), finite.max().item()
            total, squares = _exact_int_sums(finite, as_list, low, high)
        else:
            # Statistics describe the stored float32 values.
            # (+ 0.0 makes -0.0 a plain zero, so min and max do not depend on the order)
            floats = np.asarray(array, dtype=np.float64).astype(np.float32).astype(
                np.float64) + 0.0
            is_finite = np.isfinite(floats)
            if not is_finite.all():
                nan = int(np.isnan(floats).sum())
                self.nan += nan
                self.inf += int(len(floats) - is_finite.sum()) - nan
                floats = floats[is_finite]
            finite = floats
            if not len(finite):
                return
            low, high = finite.min().item(), finite.max().item()
            total, squares = _exact_float_sums(finite)
        self.finite += len(finite)
        self.sum += total
        self.sum_squares += squares
        self.low, self.high = _pick(min, self.low, low), _pick(max, self.high, high)
        keys, counts = _counted_keys(finite, low, high)
        self.histogram = ValueHistogram.of_counts(keys, counts, self.histogram)
        self._add_theta_numbers(_theta_candidates(finite, keys, low, high))

    def _add_vocabulary(self, values: Sequence) -> None:
        self.labels += np.bincount(np.asarray(values, dtype=np.int64),
                                   minlength=len(self.vocabulary))

    def _add_string(self, values: Sequence) -> None:
        counts = collections.Counter(values)
        # A batch's values are all text (the column path's raw strings) or
        # all bytes (converted again): one type test, not one per value.
        texts = list(counts)
        if type(texts[0]) is bytes:
            texts = [value.decode("utf-8") for value in texts]
            counts = dict(zip(texts, counts.values()))
        frequent = FrequentValues.of(counts)
        self.frequent = frequent if self.frequent is None else self.frequent.merge(frequent)
        self._add_theta(texts)

    def _add_bytes(self, values: Sequence) -> None:
        lengths = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
        self.low = _pick(min, self.low, int(lengths.min()))
        self.high = _pick(max, self.high, int(lengths.max()))
        self.sum += int(lengths.sum())
        self.histogram = ValueHistogram.of(lengths.astype(np.float64), self.histogram)

    def _add_theta(self, items: Iterable) -> None:
        """Adds items to the theta sketch, one call per item (DataSketches
        updates one value at a time)."""
        sketch = self._theta_to_update()
        collections.deque(map(sketch.update, items), 0)
        self._theta_updated(sketch)

    def _add_theta_numbers(self, values: np.ndarray) -> None:
        """Adds int64 or float64 `values` to the theta sketch, as `_add_theta`
        would, but only those that can change it: a value whose hash is not
        below the sketch's theta is not kept. The hashes are DataSketches'
        own (`_theta_hashes`), computed for the whole array at once, so past
        its first few thousand distinct values a sketch takes a small share
        of one call per value, and ends the same (tested)."""
        sketch = self._theta_to_update()
        hashes = _theta_hashes(values)
        for start in range(0, len(values), _THETA_CHUNK):
            part = slice(start, start + _THETA_CHUNK)
            kept = values[part][hashes[part] < np.uint64(sketch.theta64)]
            collections.deque(map(sketch.update, kept.tolist()), 0)
        self._theta_updated(sketch)

    def _theta_to_update(self):
        """The sketch being updated; a new one when the sketch is compact
        (merged, or read back), which `_theta_updated` then unites with it."""
        if isinstance(self.theta, datasketches.update_theta_sketch):
            return self.theta
        return datasketches.update_theta_sketch(THETA_LG_K)

    def _theta_updated(self, sketch) -> None:
        if self.theta is None:
            self.theta = sketch
        elif sketch is not self.theta:
            self.theta = _theta_union(self.theta, sketch)

    # -- merging ----------------------------------------------------------------

    def merge(self, other: "FeatureStatistics") -> "FeatureStatistics":
        """Adds `other` (the same feature, other examples) into self; returns
        self. Every part but the frequent items of text gives the same
        result in any order (`order_free`)."""
        if (other.kind, other.stored) != (self.kind, self.stored):
            raise ValueError(f"cannot merge {other.kind} statistics into {self.kind}")
        self.rows += other.rows
        self.present += other.present
        self.num_values += other.num_values
        self.min_count = _pick(min, self.min_count, other.min_count)
        self.max_count = _pick(max, self.max_count, other.max_count)
        self.finite += other.finite
        self.nan += other.nan
        self.inf += other.inf
        self.low = _pick(min, self.low, other.low)
        self.high = _pick(max, self.high, other.high)
        self.sum += other.sum
        self.sum_squares += other.sum_squares
        if other.histogram is not None:
            self.histogram = (other.histogram if self.histogram is None
                              else self.histogram.merge(other.histogram))
        if other.theta is not None:
            self.theta = (_compact_theta(other.theta) if self.theta is None
                          else _theta_union(self.theta, other.theta))
        if other.frequent is not None:
            self.frequent = (other.frequent if self.frequent is None
                             else self.frequent.merge(other.frequent))
        if other.labels is not None:
            self.labels = self.labels + other.labels
        self.origin = None
        return self

    @property
    def order_free(self) -> bool:
        """Whether merging this with others gives the same in any order and
        grouping: all but text, whose frequent items depend on the order."""
        return _order_free(self.kind)

    def __getstate__(self):
        state = {name: getattr(self, name) for name in self.__slots__}
        if state["theta"] is not None:
            state["theta"] = _compact_theta(state["theta"]).serialize()
        return state

    def __setstate__(self, state):
        for name in self.__slots__:
            setattr(self, name, state[name])
        if self.theta is not None:
            self.theta = datasketches.compact_theta_sketch.deserialize(self.theta)

    def to_state(self) -> dict:
        """Everything this holds as JSON-safe values (`from_state` gives it
        back exactly): exact sums as hexadecimal text, label counts as a
        list, frequent values as ``{"offset", "items": [[value, count], ...]}``
        sorted by value, sketches as base64 of their serialized bytes (the
        theta sketch in its canonical form)."""
        state: dict[str, Any] = {name: getattr(self, name) for name in (
            "kind", "stored", "is_list", "rows", "present", "num_values", "min_count",
            "max_count", "finite", "nan", "inf", "low", "high", "origin")}
        state["vocabulary"] = list(self.vocabulary) if self.vocabulary is not None else None
        state["sum"], state["sum_squares"] = hex(self.sum), hex(self.sum_squares)
        state["labels"] = self.labels.tolist() if self.labels is not None else None
        state["frequent"] = None if self.frequent is None else self.frequent.to_state()
        for name, sketch in (("histogram", self.histogram),
                             ("theta", None if self.theta is None
                              else _compact_theta(self.theta))):
            state[name] = (None if sketch is None
                           else base64.b64encode(sketch.serialize()).decode("ascii"))
        return state

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> "FeatureStatistics":
        """The statistics `to_state` gave `state` for."""
        stats = cls(state["kind"], state["stored"], state["is_list"], state["vocabulary"])
        for name in ("rows", "present", "num_values", "min_count", "max_count", "finite", "nan",
                     "inf", "low", "high", "origin"):
            setattr(stats, name, state[name])
        stats.sum, stats.sum_squares = int(state["sum"], 16), int(state["sum_squares"], 16)
        if state["labels"] is not None:
            stats.labels = np.array(state["labels"], dtype=np.int64)
        if state["frequent"] is not None:
            stats.frequent = FrequentValues.from_state(state["frequent"])
        for name, kind in (("histogram", ValueHistogram),
                           ("theta", datasketches.compact_theta_sketch)):
            if state[name] is not None:
                setattr(stats, name, kind.deserialize(base64.b64decode(state[name])))
        return stats

    # -- the stats.json entry -----------------------------------------------------

    def to_json(self) -> dict:
        """This feature's entry of ``stats.json`` (docs/statistics.md)."""
        entry: dict[str, Any] = {
            "kind": self.kind, "type": self.stored, "examples": self.rows,
            "present": self.present, "missing": self.rows - self.present,
            "missing_fraction": _ratio(self.rows - self.present, self.rows),
            "num_values": self.num_values,
        }
        if self.is_list:
            entry["values_per_example"] = {
                "min": self.min_count, "max": self.max_count,
                "mean": _ratio(self.num_values, self.present)}
        entry[self.kind] = getattr(self, f"_json_{self.kind}")()
        return entry

    def _json_numeric(self) -> dict:
        section: dict[str, Any] = {"count": self.finite, "min": self.low, "max": self.high,
                                   "mean": None, "std": None}
        if self.finite:
            section["mean"] = float(Fraction(self.sum, self.finite << _SHIFT))
            variance = Fraction(self.finite * self.sum_squares * (1 << _SHIFT) - self.sum ** 2,
                                (self.finite ** 2) << (2 * _SHIFT))
            section["std"] = math.sqrt(max(0.0, float(variance)))
            if self.stored == "int64":
                section["sum"] = self.sum >> _SHIFT
        if self.stored == "float":
            section["nan"], section["inf"] = self.nan, self.inf
        section["distinct"] = _estimate(self.theta)
        section.update(_quantile_sections(self.histogram, self.low, self.high, self.finite))
        return section

    def _json_vocabulary(self) -> dict:
        counts = self.labels.tolist()
        ranked = sorted(((count, label) for label, count in zip(self.vocabulary, counts)
                         if count), key=lambda item: (-item[0], item[1]))
        return {"distinct": sum(1 for count in counts if count),
                "vocabulary_size": len(self.vocabulary),
                "counts": dict(zip(self.vocabulary, counts)),
                "top_values": [{"value": label, "count": count}
                               for count, label in ranked[:TOP_VALUES]],
                "exact": True}

    def _json_string(self) -> dict:
        top, exact = _top_values(self.frequent)
        return {"distinct": _estimate(self.theta), "top_values": top, "exact": exact}

    def _json_bytes(self) -> dict:
        section: dict[str, Any] = {"total_bytes": self.sum, "min": self.low, "max": self.high,
                                   "mean": _ratio(self.sum, self.num_values)}
        section.update(_quantile_sections(self.histogram, self.low, self.high,
                                          self.num_values))
        return section


def _order_free(kind: str) -> bool:
    return kind != "string"


def _pick(choose, a, b):
    if a is None:
        return b
    if b is None:
        return a
    return choose(a, b)


def _ratio(numerator: int, denominator: int) -> float | None:
    return numerator / denominator if denominator else None


def _compact_theta(sketch):
    """A theta sketch in its canonical form: the union of itself alone, which
    keeps the 2**THETA_LG_K smallest hashes, so the same values give the same
    sketch whatever order and batches they came in. A compact sketch is one
    already (only unions and deserialization make them here)."""
    if isinstance(sketch, datasketches.compact_theta_sketch):
        return sketch
    union = datasketches.theta_union(THETA_LG_K)
    union.update(sketch)
    return union.get_result()


def _counted_keys(finite: np.ndarray, low, high) -> tuple[np.ndarray, np.ndarray]:
    """The distinct `_ordered` keys of finite numbers between low and high
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
    keys = _ordered(np.sort(narrow).astype(np.float64))
    starts = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
    return keys[starts], np.diff(np.append(starts, len(keys)))


def _theta_union(a, b):
    """The union of two theta sketches, compact (canonical)."""
    union = datasketches.theta_union(THETA_LG_K)
    union.update(a)
    union.update(b)
    return union.get_result()


def _theta_candidates(finite: np.ndarray, keys: np.ndarray, low, high) -> np.ndarray:
    """The values of a numeric feature for its theta sketch (int64 values,
    which the sketch hashes as int64, or float64, hashed as doubles), each
    distinct value once where the batch's distinct sorted `_ordered` keys
    give it exactly: floats, and ints up to 2**53 in magnitude (which
    doubles hold exactly). Other ints come as they are: a repeat costs a
    hash, never a different sketch."""
    if finite.dtype != np.int64:
        return _unordered(keys)
    if max(abs(low), abs(high)) <= _EXACT_INT:
        return _unordered(keys).astype(np.int64)
    return finite


# MurmurHash3_x64_128, which DataSketches hashes every theta update with
# (its default seed), for one 8-byte word: an int64, or a double's bits.
_MURMUR_C1 = np.uint64(0x87C37B91114253D5)
_MURMUR_C2 = np.uint64(0x4CF5AD432745937F)
_FMIX_1 = np.uint64(0xFF51AFD7ED558CCD)
_FMIX_2 = np.uint64(0xC4CEB9FE1A85EC53)
_THETA_SEED = np.uint64(9001)  # DataSketches' DEFAULT_SEED, which the sketches here use
_THETA_CHUNK = 2048  # values filtered against one reading of the sketch's theta


def _fmix64(k: np.ndarray) -> np.ndarray:
    k = (k ^ (k >> np.uint64(33))) * _FMIX_1
    k = (k ^ (k >> np.uint64(33))) * _FMIX_2
    return k ^ (k >> np.uint64(33))


def _theta_hashes(values: np.ndarray) -> np.ndarray:
    """The 63-bit hashes a theta sketch compares with its theta64 for each of
    `values` (int64, or finite float64 without -0.0), as DataSketches
    computes them: MurmurHash3_x64_128 of the value's 8 little-endian bytes,
    the first half shifted right by one. No library offers it over an array;
    `tests/schemas/test_statistics.py` holds it to the sketches' own result."""
    words = np.ascontiguousarray(values).view(np.uint64)
    with np.errstate(over="ignore"):
        k1 = words * _MURMUR_C1
        k1 = ((k1 << np.uint64(31)) | (k1 >> np.uint64(33))) * _MURMUR_C2
        h1 = (_THETA_SEED ^ k1) ^ np.uint64(8)
        h2 = _THETA_SEED ^ np.uint64(8)
        h1 = h1 + h2
        h2 = h2 + h1
        h1 = _fmix64(h1) + _fmix64(h2)
    return h1 >> np.uint64(1)


def _estimate(theta) -> int | None:
    if theta is None:
        return None
    return int(round(_compact_theta(theta).get_estimate()))


def _top_values(frequent: "FrequentValues | None") -> tuple[list[dict], bool]:
    if frequent is None or not frequent.counts:
        return [], True
    exact = frequent.offset == 0
    ranked = sorted(frequent.counts.items(), key=lambda item: (-item[1], item[0]))[:TOP_VALUES]
    top = []
    for item, lower in ranked:
        entry = {"value": item, "count": lower + frequent.offset}
        if not exact:
            entry["lower_bound"], entry["upper_bound"] = lower, lower + frequent.offset
        top.append(entry)
    return top, exact


def _quantile_sections(histogram: ValueHistogram | None, low, high, count: int) -> dict:
    """quantiles (ends exact), histogram (equal-width bins between the exact
    min and max) and relative error, from the value histogram, which is
    stored too."""
    if histogram is None or not count:
        return {"quantiles": {}, "histogram": None, "relative_error": None}
    quantiles = {f"{rank:g}": value for rank, value in
                 zip(QUANTILE_RANKS, histogram.get_quantiles(list(QUANTILE_RANKS)))}
    quantiles = {"0": low, **quantiles, "1": high}
    if high > low:
        width = (high - low) / HISTOGRAM_BINS
        inner = [low + width * i for i in range(1, HISTOGRAM_BINS)]
        edges = [low, *inner, high]
        masses = histogram.get_pmf(inner)  # (-inf, e1), [e1, e2), ..., [e9, inf)
    else:
        edges, masses = [low, high], [1.0]
    return {"quantiles": quantiles,
            "histogram": {"edges": edges, "fractions": [round(m, 6) for m in masses]},
            "relative_error": histogram.relative_error,
            "sketch": base64.b64encode(histogram.serialize()).decode("ascii")}


def sketch_from_json(section: Mapping[str, Any]):
    """The quantile sketch stored in a numeric or bytes section of
    stats.json, or None: a `ValueHistogram`, or the KLL sketch
    (``datasketches.kll_doubles_sketch``) that versions written before it
    stored. Both answer `get_quantiles` and `get_pmf`."""
    data = section.get("sketch") if isinstance(section, Mapping) else None
    if not isinstance(data, str):
        return None
    try:
        raw = base64.b64decode(data, validate=True)
    except ValueError:
        return None
    for kind in (ValueHistogram, datasketches.kll_doubles_sketch):
        try:
            return kind.deserialize(raw)
        except Exception:  # a damaged or foreign sketch is no sketch
            continue
    return None


# --- merging in a canonical order ------------------------------------------------


def partial_digest(stats: FeatureStatistics) -> bytes:
    """SHA-256 of the statistics' canonical JSON (`to_state`): their content."""
    return hashlib.sha256(json.dumps(stats.to_state(), sort_keys=True,
                                     separators=(",", ":")).encode("utf-8")).digest()


def merge_order(stats: FeatureStatistics) -> tuple[bytes, int]:
    """(sort key, level-1 group) of a partial in `merge_partials`: its
    batch's origin, which no other batch has, then a fingerprint of its
    content (origin, counts and the canonical theta sketch: cheap, and
    enough to spread partials without an origin, as the batches of
    `WriteDataset` cut by the runner, over the groups)."""
    origin = (stats.origin or "").encode("utf-8", "surrogatepass")
    theta = b""
    if stats.theta is not None:
        stats.theta = _compact_theta(stats.theta)  # as pickling would
        theta = stats.theta.serialize()
    offset = stats.frequent.offset if stats.frequent is not None else 0
    fingerprint = hashlib.sha256(b"".join((
        struct.pack("<Q", len(origin)), origin,
        repr((stats.kind, stats.rows, stats.present, stats.num_values, offset)).encode("ascii"),
        theta))).digest()
    return (origin + b"\0" + fingerprint,
            int.from_bytes(fingerprint[:4], "big") >> (32 - MERGE_LEVELS[0]))


def merge_group(members: Iterable[tuple[Any, FeatureStatistics]]) -> FeatureStatistics:
    """Merges ``(order, statistics)`` pairs in the order of `order`; pairs
    of one order (partials alike in origin and fingerprint) in the order of
    their whole content (`partial_digest`)."""
    ordered = sorted(members, key=lambda member: member[0])
    merged = None
    for _, run in itertools.groupby(ordered, key=lambda member: member[0]):
        run = list(run)
        if len(run) > 1:
            run.sort(key=lambda member: partial_digest(member[1]))
        for _, stats in run:
            merged = stats if merged is None else merged.merge(stats)
    return merged


def merge_partials(partials: Iterable[FeatureStatistics]) -> FeatureStatistics | None:
    """All partials of one (split, feature) merged in the canonical tree
    that `transforms.statistics.MergeStatistics` runs on a runner: level 1
    groups them by `MERGE_LEVELS[0]` bits of their fingerprint and merges
    each group in origin order (`merge_order`), each further level groups
    the results by fewer bits and merges them in the order of their group
    keys. The result depends only on the set of (origin, partial), never
    on the order they come in."""
    level: dict[int, list] = collections.defaultdict(list)
    for stats in partials:
        key, group = merge_order(stats)
        level[group].append((key, stats))
    if not level:
        return None
    results = {group: merge_group(members) for group, members in level.items()}
    for finer, coarser in zip(MERGE_LEVELS, MERGE_LEVELS[1:]):
        level = collections.defaultdict(list)
        for group, stats in results.items():
            level[group >> (finer - coarser)].append((group, stats))
        results = {group: merge_group(members) for group, members in level.items()}
    return results[0]


# --- a batch -------------------------------------------------------------------------


def batch_statistics(plan: StatisticsPlan, values_of, split_of: np.ndarray,
                     split_names: Sequence[str], origin: str | None = None
                     ) -> list[tuple[tuple[str, str], FeatureStatistics]]:
    """The statistics of one batch, per (split, feature), each carrying the
    batch's `origin` (text no other batch of the build has, from where the
    batch was read: `transforms.statistics.batch_origin`; None if unknown).

    values_of(feature) -> ("scalars", [value per example]) or ("rows",
    [list of values, or None when absent, per example]), the checked values
    of the batch's good examples; split_of: each example's split index.
    """
    out = []
    for (split, name), (kind, stored, is_list, vocabulary), rows, values, per_row in \
            _split_values(plan, values_of, split_of, split_names):
        stats = FeatureStatistics.from_values(kind, stored, rows, values, is_list, vocabulary,
                                              per_row)
        stats.origin = origin
        out.append(((split, name), stats))
    return out


class StatisticsAccumulator:
    """The statistics partials of a run of batches (a reading unit):
    `batch_statistics` of each, with the partials whose merge does not
    depend on the order (`FeatureStatistics.order_free`) added up.

    `add` takes a batch as `batch_statistics` does and returns its text
    partials, each with the batch's origin (their merge order rests on it);
    the values of every other feature are added to the statistics held for
    their (split, feature) (`FeatureStatistics.add_values`: one theta sketch
    per feature updated by every batch, where a partial per batch would
    make one per batch and unite them twice on its way, in the cache's piece
    and in `MergeStatistics`). `flush` gives what it holds, one partial per
    (split, feature) for the run, without an origin, and starts anew. The
    merged result is the same: these partials merge in any grouping to the
    statistics of all their values."""

    def __init__(self, plan: StatisticsPlan, split_names: Sequence[str]):
        self._plan = plan
        self._split_names = tuple(split_names)
        self._held: dict[tuple[str, str], FeatureStatistics] = {}

    def add(self, values_of, split_of: np.ndarray, origin: str | None = None
            ) -> list[tuple[tuple[str, str], FeatureStatistics]]:
        out = []
        for key, (kind, stored, is_list, vocabulary), rows, values, per_row in \
                _split_values(self._plan, values_of, split_of, self._split_names):
            if _order_free(kind):
                held = self._held.get(key)
                if held is None:
                    held = self._held[key] = FeatureStatistics(kind, stored, is_list, vocabulary)
                held.add_values(rows, values, per_row)
                continue
            stats = FeatureStatistics.from_values(kind, stored, rows, values, is_list,
                                                  vocabulary, per_row)
            stats.origin = origin
            # Its canonical theta once, for the merge order, the cache and pickling.
            stats.theta = _compact_theta(stats.theta) if stats.theta is not None else None
            out.append((key, stats))
        return out

    def flush(self) -> list[tuple[tuple[str, str], FeatureStatistics]]:
        """The order-free partials of every batch added since the last
        flush, in (split, feature) order; none are held afterwards."""
        out = []
        for key in sorted(self._held):
            stats = self._held[key]
            if stats.theta is not None:
                stats.theta = _compact_theta(stats.theta)
            out.append((key, stats))
        self._held = {}
        return out


def _split_values(plan: StatisticsPlan, values_of, split_of: np.ndarray,
                  split_names: Sequence[str]):
    """((split, feature), (kind, stored, is a list, vocabulary), rows, values,
    per_row) of a batch, per feature and split with rows: its values as
    `FeatureStatistics.from_values` takes them."""
    splits = [np.flatnonzero(split_of == index) for index in range(len(split_names))]
    for name, kind, stored, is_list, vocabulary in plan.features:
        form, values = values_of(name)
        for split, rows in zip(split_names, splits):
            if not len(rows):
                continue
            if len(rows) == len(split_of):
                chosen = values
            else:
                chosen = list(map(values.__getitem__, rows.tolist()))
            feature = (kind, stored, is_list, vocabulary)
            if form == "scalars":
                yield (split, name), feature, len(rows), chosen, None
            else:
                present = [row for row in chosen if row is not None]
                flat = [value for row in present for value in row]
                yield (split, name), feature, len(rows), flat, list(map(len, present))


def statistics_json(by_key: Iterable[tuple[tuple[str, str], FeatureStatistics]],
                    plan: StatisticsPlan, split_names: Sequence[str],
                    num_examples: Mapping[str, int]) -> dict:
    """The whole ``stats.json`` document from the merged statistics per
    (split, feature): splits in config order, features in schema order.
    A feature a split never saw (the split is empty) has no entry."""
    merged = dict(by_key)
    document: dict[str, Any] = {"format": FORMAT, "splits": {}}
    for split in split_names:
        features = {}
        for name, kind, stored, is_list, vocabulary in plan.features:
            stats = merged.get((split, name))
            if stats is not None:
                features[name] = stats.to_json()
        document["splits"][split] = {"num_examples": int(num_examples.get(split, 0)),
                                     "features": features}
    return document
