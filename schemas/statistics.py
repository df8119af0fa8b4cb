"""Dataset statistics: mergeable per-feature summaries of the checked values, and `stats.json`.

`FeatureStatistics` summarises one feature in one split. It is built from a
batch's checked values (`from_values`), merged with others in any order
(`merge`), and rendered as its ``stats.json`` entry (`to_json`). The exact
parts are plain arithmetic: counts, min, max, and sums kept as exact
integers (floats through their binary mantissa and exponent), so mean and
standard deviation are the same bits whatever the batches and the order
they merge in. The sketched parts are Apache DataSketches: KLL for quantiles
and histograms, a theta sketch for the distinct count, frequent items for
the top values of text; docs/statistics.md says what each guarantees.

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
import math
from fractions import Fraction
from typing import Any, Iterable, Mapping, Sequence

import datasketches
import numpy as np

from .features import FeatureSpec

__all__ = ["FORMAT", "KINDS", "KLL_K", "QUANTILE_RANKS", "FeatureStatistics", "StatisticsPlan",
           "batch_statistics", "feature_kind", "kll_from_json", "statistics_json"]

FORMAT = "recordforge.stats/1"
KINDS = ("numeric", "vocabulary", "string", "bytes")
# KLL accuracy: normalized rank error ~1.33% (single quantile, 99% confidence).
KLL_K = 200
# Theta sketch: exact below 4096 distinct values, ~1.6% relative error above.
THETA_LG_K = 12
# Frequent items: exact (and order-independent) below 0.75 * 2**10 = 768
# distinct values per split; above that, counts carry the sketch's bounds.
FREQUENT_LG_MAP = 10
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


# --- one feature in one split ------------------------------------------------------


class FeatureStatistics:
    """Mergeable statistics of one feature in one split.

    rows: examples of the split; present: those holding the feature;
    num_values: values held (lists count each element); per-example value
    counts (min, max); by kind: numeric values (finite count, NaN, inf, min,
    max, exact sums, KLL, theta), label counts (vocabulary), value counts
    (string: frequent items, theta) or value lengths (bytes: min, max, sum,
    KLL). Pickles as plain values and serialized sketches.
    """

    __slots__ = ("kind", "stored", "is_list", "vocabulary", "rows", "present", "num_values",
                 "min_count", "max_count", "finite", "nan", "inf", "low", "high", "sum",
                 "sum_squares", "kll", "theta", "frequent", "labels")

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
        self.kll = None
        self.theta = None
        self.frequent = None
        self.labels = (np.zeros(len(self.vocabulary), dtype=np.int64)
                       if kind == "vocabulary" else None)

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
            floats = np.asarray(values, dtype=np.float64).astype(np.float32).astype(np.float64)
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
        self.kll = datasketches.kll_doubles_sketch(KLL_K)
        self.kll.update(floats)
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
        self.frequent = datasketches.frequent_strings_sketch(FREQUENT_LG_MAP)
        update = self.frequent.update
        for text, count in zip(texts, counts.values()):
            update(text, count)
        self.theta = datasketches.update_theta_sketch(THETA_LG_K)
        collections.deque(map(self.theta.update, texts), 0)

    def _add_bytes(self, values: Sequence) -> None:
        lengths = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
        self.low, self.high = int(lengths.min()), int(lengths.max())
        self.sum = int(lengths.sum())
        self.kll = datasketches.kll_doubles_sketch(KLL_K)
        self.kll.update(lengths.astype(np.float64))

    # -- merging ----------------------------------------------------------------

    def merge(self, other: "FeatureStatistics") -> "FeatureStatistics":
        """Adds `other` (the same feature, other examples) into self; returns self."""
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
        if other.kll is not None:
            if self.kll is None:
                self.kll = datasketches.kll_doubles_sketch(KLL_K)
            self.kll.merge(other.kll)
        if other.theta is not None:
            union = datasketches.theta_union(THETA_LG_K)
            if self.theta is not None:
                union.update(self.theta)
            union.update(other.theta)
            self.theta = union.get_result()
        if other.frequent is not None:
            if self.frequent is None:
                self.frequent = datasketches.frequent_strings_sketch(FREQUENT_LG_MAP)
            self.frequent.merge(other.frequent)
        if other.labels is not None:
            self.labels = self.labels + other.labels
        return self

    def __getstate__(self):
        state = {name: getattr(self, name) for name in self.__slots__}
        for name in ("kll", "theta", "frequent"):
            if state[name] is not None:
                sketch = state[name]
                if name == "theta":
                    sketch = _compact_theta(sketch)
                state[name] = sketch.serialize()
        return state

    def __setstate__(self, state):
        for name in self.__slots__:
            setattr(self, name, state[name])
        if self.kll is not None:
            self.kll = datasketches.kll_doubles_sketch.deserialize(self.kll)
        if self.theta is not None:
            self.theta = datasketches.compact_theta_sketch.deserialize(self.theta)
        if self.frequent is not None:
            self.frequent = datasketches.frequent_strings_sketch.deserialize(self.frequent)

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
        section.update(_quantile_sections(self.kll, self.low, self.high, self.finite))
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
        section.update(_quantile_sections(self.kll, self.low, self.high, self.num_values))
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
    sketch whatever order and batches they came in."""
    union = datasketches.theta_union(THETA_LG_K)
    union.update(sketch)
    return union.get_result()


def _estimate(theta) -> int | None:
    if theta is None:
        return None
    return int(round(_compact_theta(theta).get_estimate()))


def _top_values(frequent) -> tuple[list[dict], bool]:
    if frequent is None or frequent.is_empty():
        return [], True
    items = frequent.get_frequent_items(datasketches.frequent_items_error_type.NO_FALSE_POSITIVES)
    exact = all(lower == upper for _, _, lower, upper in items)
    if not exact:
        items = frequent.get_frequent_items(
            datasketches.frequent_items_error_type.NO_FALSE_NEGATIVES)
    ranked = sorted(items, key=lambda item: (-item[1], item[0]))[:TOP_VALUES]
    top = []
    for item, estimate, lower, upper in ranked:
        entry = {"value": item, "count": int(estimate)}
        if not exact:
            entry["lower_bound"], entry["upper_bound"] = int(lower), int(upper)
        top.append(entry)
    return top, exact


def _quantile_sections(kll, low, high, count: int) -> dict:
    """quantiles (KLL, ends exact), histogram (equal-width bins between the
    exact min and max, fractions from KLL) and the KLL's rank error."""
    if kll is None or not count:
        return {"quantiles": {}, "histogram": None, "rank_error": None}
    quantiles = {f"{rank:g}": value for rank, value in
                 zip(QUANTILE_RANKS, kll.get_quantiles(list(QUANTILE_RANKS)))}
    quantiles = {"0": low, **quantiles, "1": high}
    if high > low:
        width = (high - low) / HISTOGRAM_BINS
        inner = [low + width * i for i in range(1, HISTOGRAM_BINS)]
        edges = [low, *inner, high]
        masses = kll.get_pmf(inner)  # (-inf, e1), [e1, e2), ..., [e9, inf)
    else:
        edges, masses = [low, high], [1.0]
    return {"quantiles": quantiles,
            "histogram": {"edges": edges, "fractions": [round(m, 6) for m in masses]},
            "rank_error": round(kll.normalized_rank_error(False), 6),
            "sketch": base64.b64encode(kll.serialize()).decode("ascii")}


def kll_from_json(section: Mapping[str, Any]):
    """The KLL sketch stored in a numeric or bytes section of stats.json, or None."""
    data = section.get("sketch") if isinstance(section, Mapping) else None
    if not isinstance(data, str):
        return None
    try:
        return datasketches.kll_doubles_sketch.deserialize(base64.b64decode(data))
    except Exception:  # a damaged or foreign sketch is no sketch
        return None


# --- a batch -------------------------------------------------------------------------


def batch_statistics(plan: StatisticsPlan, values_of, split_of: np.ndarray,
                     split_names: Sequence[str]) -> list[tuple[tuple[str, str], FeatureStatistics]]:
    """The statistics of one batch, per (split, feature).

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
