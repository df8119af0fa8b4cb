"""One feature in one split: `FeatureStatistics`, built from checked values, merged, and kept as JSON-safe state.

The exact parts are plain arithmetic: counts, min, max, and sums kept as
exact integers (`sums`), so mean and standard deviation are the same bits
whatever the batches and the order they merge in. Quantiles and histograms
come from a `ValueHistogram` (`histogram`), which is also the same whatever
the batches and the merge order; distinct counts from a DataSketches theta
sketch in its canonical form (`distinct`). The top values of text come from
a Misra-Gries summary (`frequent`), whose merge depends on the order once a
split holds more distinct values than its capacity: `merge.merge_partials`
fixes that order.
"""

from __future__ import annotations

import base64
import json
from typing import Any, Mapping, Sequence

import numpy as np

from .distinct import HashedTheta, SerializedTheta, add_numbers, compact_theta, serialized_theta, united
from .entries import feature_entry
from .frequent import FrequentValues
from .histogram import ValueHistogram
from .numeric import numeric_update
from .plan import KINDS, order_free
from .text import text_parts

__all__ = ["FeatureStatistics"]


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
                 "sum_squares", "histogram", "theta", "frequent", "labels")

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
        parts = numeric_update(values, self.stored, self.histogram, self.theta)
        self.nan += parts.nan
        self.inf += parts.inf
        if not parts.finite:
            return
        self.finite += parts.finite
        self.sum += parts.sum
        self.sum_squares += parts.squares
        self.low, self.high = _pick(min, self.low, parts.low), _pick(max, self.high, parts.high)
        self.histogram = parts.histogram
        self.theta = add_numbers(self.theta, parts.candidates, parts.hashes)

    def _add_vocabulary(self, values: Sequence) -> None:
        self.labels += np.bincount(np.asarray(values, dtype=np.int64),
                                   minlength=len(self.vocabulary))

    def _add_string(self, values: Sequence) -> None:
        self.frequent, self.theta = text_parts(values, self.frequent, self.theta)

    def _add_bytes(self, values: Sequence) -> None:
        lengths = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
        self.low = _pick(min, self.low, int(lengths.min()))
        self.high = _pick(max, self.high, int(lengths.max()))
        self.sum += int(lengths.sum())
        # The lengths' histogram folded in as an int64 column's (one native
        # call where the kernel runs); the rest of that update goes unused.
        self.histogram = numeric_update(lengths, "int64", self.histogram, None).histogram

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
            # (united: the sketches held as one HashedTheta, which this
            # merge owns and adds to, not a DataSketches union per merge)
            self.theta = (compact_theta(other.theta) if self.theta is None
                          else united(self.theta, other.theta))
        if other.frequent is not None:
            self.frequent = (other.frequent if self.frequent is None
                             else self.frequent.merge(other.frequent))
        if other.labels is not None:
            self.labels = self.labels + other.labels
        return self

    def without_frequent(self) -> "FeatureStatistics":
        """A copy of self without its top values (the sketches shared, not
        copied: a merge into the copy replaces them, never changes them;
        a `HashedTheta`, which a merge adds to, goes compact)."""
        copy = FeatureStatistics.__new__(FeatureStatistics)
        for name in self.__slots__:
            setattr(copy, name, getattr(self, name))
        copy.frequent = None
        if isinstance(self.theta, HashedTheta):
            copy.theta = compact_theta(self.theta)
        return copy

    @property
    def order_free(self) -> bool:
        """Whether merging this with others gives the same in any order and
        grouping: all but text, whose frequent items depend on the order."""
        return order_free(self.kind)

    def __getstate__(self):
        state = {name: getattr(self, name) for name in self.__slots__}
        if state["theta"] is not None:
            state["theta"] = serialized_theta(state["theta"]).data
        return state

    def __setstate__(self, state):
        for name in self.__slots__:
            setattr(self, name, state[name])
        if self.theta is not None:
            self.theta = SerializedTheta(self.theta)

    def to_state(self) -> dict:
        """Everything this holds as JSON-safe values (`from_state` gives it
        back exactly): exact sums as hexadecimal text, label counts as a
        list, frequent values as ``{"offset", "items": [[value, count], ...]}``
        sorted by value, sketches as base64 of their serialized bytes (the
        theta sketch in its canonical form)."""
        state: dict[str, Any] = {name: getattr(self, name) for name in (
            "kind", "stored", "is_list", "rows", "present", "num_values", "min_count",
            "max_count", "finite", "nan", "inf", "low", "high")}
        state["vocabulary"] = list(self.vocabulary) if self.vocabulary is not None else None
        state["sum"], state["sum_squares"] = hex(self.sum), hex(self.sum_squares)
        state["labels"] = self.labels.tolist() if self.labels is not None else None
        state["frequent"] = None if self.frequent is None else self.frequent.to_state()
        state["histogram"] = (None if self.histogram is None
                              else base64.b64encode(self.histogram.serialize()).decode("ascii"))
        state["theta"] = None if self.theta is None else serialized_theta(self.theta).base64()
        return state

    def state_json(self, sort_keys: bool = False) -> str:
        """`to_state` as compact ASCII JSON text (`json.dumps` with
        separators ``(",", ":")`` and `sort_keys`), the theta sketch's
        base64 (tens of kilobytes in a text partial, none of it to escape)
        put in as it is rather than scanned by the encoder."""
        state = self.to_state()
        theta = state["theta"]
        if theta is None:
            return json.dumps(state, sort_keys=sort_keys, separators=(",", ":"))
        # (an empty placeholder: no str inside the JSON text can hold the
        # marker, whose quotes would be escaped there, so it is the key's)
        state["theta"] = ""
        head, _, tail = json.dumps(state, sort_keys=sort_keys, separators=(",", ":")
                                        ).partition('"theta":""')
        return "".join((head, '"theta":"', theta, '"', tail))

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> "FeatureStatistics":
        """The statistics `to_state` gave `state` for."""
        stats = cls(state["kind"], state["stored"], state["is_list"], state["vocabulary"])
        for name in ("rows", "present", "num_values", "min_count", "max_count", "finite", "nan",
                     "inf", "low", "high"):
            setattr(stats, name, state[name])
        stats.sum, stats.sum_squares = int(state["sum"], 16), int(state["sum_squares"], 16)
        if state["labels"] is not None:
            stats.labels = np.array(state["labels"], dtype=np.int64)
        if state["frequent"] is not None:
            stats.frequent = FrequentValues.from_state(state["frequent"])
        if state["histogram"] is not None:
            stats.histogram = ValueHistogram.deserialize(base64.b64decode(state["histogram"]))
        if state["theta"] is not None:
            stats.theta = SerializedTheta(base64.b64decode(state["theta"]))
        return stats

    def to_json(self) -> dict:
        """This feature's entry of ``stats.json`` (`entries.feature_entry`)."""
        return feature_entry(self)


def _pick(choose, a, b):
    if a is None:
        return b
    if b is None:
        return a
    return choose(a, b)
