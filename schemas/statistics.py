"""Dataset statistics: mergeable per-feature summaries of the checked values, and `stats.json`.

`FeatureStatistics` summarises one feature in one split. It is built from a
batch's checked values (`from_values`), merged with others (`merge`), and
rendered as its ``stats.json`` entry (`to_json`). The exact parts are plain
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
import heapq
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
           "FeatureStatistics", "FrequentValues", "StatisticsPlan", "ValueHistogram",
           "batch_statistics", "feature_kind", "merge_group", "merge_order", "merge_partials",
           "partial_digest", "sketch_from_json", "statistics_json"]

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


def _exact_int_sums(values: np.ndarray, as_list: list | None) -> tuple[int, int]:
    """(sum, sum of squares) of int64 values, exactly, scaled by 2**_SHIFT."""
    if len(values) == 0:
        return 0, 0
    biggest = max(abs(int(values.min())), abs(int(values.max())))
    if biggest < (1 << 26):  # squares below 2**52: exact as float64
        floats = values.astype(np.float64)
        return _exact_sum(floats), _exact_sum(floats * floats)
    items = as_list if as_list is not None else values.tolist()
    return sum(items) << _SHIFT, sum(x * x for x in items) << _SHIFT


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
    def of(cls, floats: np.ndarray) -> "ValueHistogram":
        """The sketch of finite float64 values (-0.0 counts as 0.0), at least one."""
        keys, counts = np.unique(_ordered(floats + 0.0), return_counts=True)
        return cls._fitted(0, keys, counts.astype(np.int64), float(floats.min()) + 0.0,
                           float(floats.max()) + 0.0)

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
    def of(cls, counts: dict[str, int]) -> "FrequentValues":
        """The summary of values counted exactly (value -> count)."""
        return cls._purged(counts, 0)

    @classmethod
    def _purged(cls, counts: dict[str, int], offset: int) -> "FrequentValues":
        if len(counts) > FREQUENT_CAPACITY:
            threshold = heapq.nlargest(FREQUENT_CAPACITY + 1, counts.values())[-1]
            counts = {value: count - threshold for value, count in counts.items()
                      if count > threshold}
            offset += threshold
        return cls(counts, offset)

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
        stats.rows = rows
        if per_row is None:
            stats.present = len(values)
            if len(values):
                stats.min_count = stats.max_count = 1
        else:
            stats.present = len(per_row)
            if len(per_row):
                stats.min_count, stats.max_count = min(per_row), max(per_row)
        stats.num_values = len(values)
        if len(values):
            getattr(stats, f"_add_{kind}")(values)
        return stats

    def _add_numeric(self, values: Sequence) -> None:
        as_list = values if isinstance(values, list) else None
        if self.stored == "int64":
            array = np.asarray(values, dtype=np.int64)
            finite = array
            self.sum, self.sum_squares = _exact_int_sums(array, as_list)
            self.finite = len(array)
            floats = array.astype(np.float64)
        else:
            # Statistics describe the stored float32 values.
            # (+ 0.0 makes -0.0 a plain zero, so min and max do not depend on the order)
            floats = np.asarray(values, dtype=np.float64).astype(np.float32).astype(
                np.float64) + 0.0
            is_finite = np.isfinite(floats)
            if not is_finite.all():
                self.nan = int(np.isnan(floats).sum())
                self.inf = int(len(floats) - is_finite.sum()) - self.nan
                floats = floats[is_finite]
            finite = floats
            self.finite = len(floats)
            if len(floats):
                self.sum = _exact_sum(floats)
                self.sum_squares = _exact_sum(floats * floats)
        if not len(finite):
            return
        self.low, self.high = finite.min().item(), finite.max().item()
        self.histogram = ValueHistogram.of(floats)
        self.theta = datasketches.update_theta_sketch(THETA_LG_K)
        # The checked ints themselves when the batch gave a list of them.
        items = as_list if as_list is not None and self.stored == "int64" else finite.tolist()
        collections.deque(map(self.theta.update, items), 0)

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
        self.frequent = FrequentValues.of(dict(zip(texts, counts.values())))
        self.theta = datasketches.update_theta_sketch(THETA_LG_K)
        collections.deque(map(self.theta.update, texts), 0)

    def _add_bytes(self, values: Sequence) -> None:
        lengths = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
        self.low, self.high = int(lengths.min()), int(lengths.max())
        self.sum = int(lengths.sum())
        self.histogram = ValueHistogram.of(lengths.astype(np.float64))

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
            union = datasketches.theta_union(THETA_LG_K)
            if self.theta is not None:
                union.update(self.theta)
            union.update(other.theta)
            self.theta = union.get_result()
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
        return self.kind != "string"

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
            if form == "scalars":
                stats = FeatureStatistics.from_values(kind, stored, len(rows), chosen, is_list,
                                                      vocabulary)
            else:
                present = [row for row in chosen if row is not None]
                flat = [value for row in present for value in row]
                stats = FeatureStatistics.from_values(
                    kind, stored, len(rows), flat, is_list, vocabulary,
                    per_row=list(map(len, present)))
            stats.origin = origin
            out.append(((split, name), stats))
    return out


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
