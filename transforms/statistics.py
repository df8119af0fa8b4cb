"""Statistics in the pipeline: a converted batch's checked values -> merged statistics per (split, feature).

`RowsToExamples` (with a `StatisticsSetup`) summarises each batch where its
checked values are at hand (`CheckedValues`, `schemas.statistics.batch_statistics`)
and emits ``((split, feature), FeatureStatistics)``; `MergeStatistics`
merges them per key with a `CombinePerKey`, which runners apply before the
shuffle (per bundle) and after it, so what crosses the shuffle is one set of
sketches per bundle and key, never rows.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, NamedTuple, Sequence

import apache_beam as beam

from ..schemas.row_encoder import RowEncoder
from ..schemas.statistics import FeatureStatistics, StatisticsPlan

__all__ = ["CheckedValues", "MergeStatistics", "StatisticsSetup"]


class StatisticsSetup(NamedTuple):
    """What `RowsToExamples` needs to compute statistics: the features' plan,
    and the dataset name and splits that assign rows to splits exactly as
    the shard writer does."""

    plan: StatisticsPlan
    dataset_name: str
    splits: tuple[tuple[str, float], ...]


class CheckedValues:
    """feature name -> the checked values of a batch's good examples, in
    the order the examples were emitted (the `values_of` of
    `batch_statistics`).

    A feature whose whole column took the column path has its checked value
    per row at hand ("scalars"; a string feature's raw text, which is what
    it stores, then spares decoding it again). Any other feature (lists,
    missing values, a column some row failed) is converted again here with
    the same compiled rules, one value at a time ("rows")."""

    def __init__(self, encoder: RowEncoder, plan: StatisticsPlan, column: Callable[[str], list],
                 checked: Mapping[str, list], good: Sequence[int] | None):
        self._encoder = encoder
        self._kinds = {name: kind for name, kind, *_ in plan.features}
        self._column = encoder.columns_as_read(column)
        self._checked = checked
        self._good = good  # None: every row of the batch

    def _pick(self, values: list) -> list:
        return values if self._good is None else list(map(values.__getitem__, self._good))

    def __call__(self, name: str) -> tuple[str, list]:
        source = self._encoder.source_of(name)
        if name in self._checked:
            if self._kinds[name] == "string":
                return "scalars", self._pick(self._column(source))
            return "scalars", self._pick(self._checked[name])
        convert = self._encoder.converter(name)
        return "rows", [_converted(convert, raw) for raw in self._pick(self._column(source))]


def _converted(convert, raw: Any) -> Any:
    try:
        values = convert(raw)
    except Exception:  # cannot happen for a row that was encoded; statistics never fail a row
        return None
    return None if values is None else list(values)


class _MergeFn(beam.CombineFn):
    """FeatureStatistics of one key, merged in whatever order they come."""

    def create_accumulator(self):
        return None

    def add_input(self, accumulator, stats: FeatureStatistics):
        return stats if accumulator is None else accumulator.merge(stats)

    def merge_accumulators(self, accumulators):
        merged = None
        for accumulator in accumulators:
            if accumulator is not None:
                merged = accumulator if merged is None else merged.merge(accumulator)
        return merged

    def extract_output(self, accumulator):
        return accumulator


def _entry(keyed: tuple[tuple[str, str], FeatureStatistics]) -> tuple[str, str, dict]:
    (split, feature), stats = keyed
    return split, feature, stats.to_json()


class MergeStatistics(beam.PTransform):
    """Takes ``((split, feature), FeatureStatistics)`` per batch; gives one
    ``(split, feature, stats.json entry)`` per key."""

    def expand(self, partials):
        return (partials
                # ((split, feature), FeatureStatistics), one per key
                | "MergePerKey" >> beam.CombinePerKey(_MergeFn())
                # (split, feature, entry dict)
                | "ToJson" >> beam.Map(_entry))
