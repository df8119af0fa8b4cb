"""A batch's statistics: its checked values -> one FeatureStatistics partial per (split, feature)."""

from __future__ import annotations

import itertools
from typing import Sequence

import numpy as np

from ..text_column import TextColumn
from .distinct import compact_theta, serialized_theta
from .feature_stats import FeatureStatistics
from .plan import StatisticsPlan, order_free

__all__ = ["StatisticsAccumulator", "batch_statistics"]


def batch_statistics(plan: StatisticsPlan, values_of, split_of: np.ndarray,
                     split_names: Sequence[str]
                     ) -> list[tuple[tuple[str, str], FeatureStatistics]]:
    """The statistics of one batch, per (split, feature): of its values
    alone (not of where they were read, so that the merged statistics
    depend only on the rows).

    values_of(feature) -> ("scalars", [value per example]), ("masked",
    ([value per example], [whether the example holds it, a bool array]):
    what "rows" gives with None where it holds none and [value] where it
    does) or ("rows", [list of values, or None when absent, per example]),
    the checked values of the batch's good examples; split_of: each
    example's split index.
    """
    out = []
    for (split, name), (kind, stored, is_list, vocabulary), rows, values, per_row in \
            _split_values(plan, values_of, split_of, split_names):
        stats = FeatureStatistics.from_values(kind, stored, rows, values, is_list, vocabulary,
                                              per_row)
        out.append(((split, name), stats))
    return out


class StatisticsAccumulator:
    """The statistics partials of a run of batches (a reading unit): one
    partial per (split, feature) for every batch added since the last
    `flush`.

    Every part of a partial but the top values of text merges the same in
    any order: those values are added to the statistics held for their
    (split, feature) (`FeatureStatistics.add_values`: one theta sketch per
    feature updated by every batch, where a partial per batch would make
    one per batch and unite them twice on its way, in the cache's piece and
    in `MergeStatistics`). A text feature's batch partial
    (`FeatureStatistics.from_values`: the native text kernel's, where it
    runs) is merged into the one held, in the order the batches are added.
    A reading unit's batches always come in the same order, so its text
    partial is one thing; and the merge (`merge.MergingStatistics`), which
    holds each text partial until the last one is in, holds one per unit
    and split rather than one per batch (1000 rows of free text each).
    `flush` gives what it holds, in (split, feature) order, and starts anew:
    flushed after every batch, the partials are the batch's own
    (`batch_statistics`)."""

    def __init__(self, plan: StatisticsPlan, split_names: Sequence[str]):
        self._plan = plan
        self._split_names = tuple(split_names)
        self._held: dict[tuple[str, str], FeatureStatistics] = {}

    def add(self, values_of, split_of: np.ndarray) -> None:
        """Adds a batch, as `batch_statistics` takes one."""
        for key, (kind, stored, is_list, vocabulary), rows, values, per_row in \
                _split_values(self._plan, values_of, split_of, self._split_names):
            held = self._held.get(key)
            if order_free(kind):
                if held is None:
                    held = self._held[key] = FeatureStatistics(kind, stored, is_list, vocabulary)
                held.add_values(rows, values, per_row)
                continue
            stats = FeatureStatistics.from_values(kind, stored, rows, values, is_list,
                                                  vocabulary, per_row)
            if held is None:
                self._held[key] = stats
            else:
                held.merge(stats)

    def flush(self) -> list[tuple[tuple[str, str], FeatureStatistics]]:
        """The partials of every batch added since the last flush, one per
        (split, feature), in (split, feature) order; none are held
        afterwards."""
        out = []
        for key in sorted(self._held):
            stats = self._held[key]
            if stats.theta is not None:
                # A text partial's canonical theta as bytes, for the merge
                # order, the cache and pickling (the kernel's bytes as they are).
                stats.theta = (compact_theta(stats.theta) if stats.order_free
                               else serialized_theta(stats.theta))
            out.append((key, stats))
        self._held = {}
        return out


def _split_values(plan: StatisticsPlan, values_of, split_of: np.ndarray,
                  split_names: Sequence[str]):
    """((split, feature), (kind, stored, is a list, vocabulary), rows, values,
    per_row) of a batch, per feature and split with rows: its values as
    `FeatureStatistics.from_values` takes them."""
    splits = [(split_names[index], rows) for index, rows in _split_rows(split_of, len(split_names))]
    for name, kind, stored, is_list, vocabulary in plan.features:
        form, values = values_of(name)
        held = None
        if form == "masked":
            values, held = values
        feature = (kind, stored, is_list, vocabulary)
        for split, rows in splits:
            count = len(split_of) if rows is None else len(rows)
            if form == "masked":
                # The examples holding a value, one each: as "rows" counts them.
                yield (split, name), feature, count, _held_values(values, held, rows), None
            elif form == "scalars":
                yield (split, name), feature, count, _picked(values, rows, scalars=True), None
            else:
                present = [row for row in _picked(values, rows) if row is not None]
                flat = [value for row in present for value in row]
                yield (split, name), feature, count, flat, list(map(len, present))


def _split_rows(split_of: np.ndarray, splits: int) -> list[tuple[int, np.ndarray | None]]:
    """(split index, its rows) of every split holding some of a batch's
    rows, in split order; rows None where one split holds them all (its
    values are then taken whole, not copied)."""
    if not len(split_of):
        return []
    if splits == 1 and not split_of.any():  # (most builds: nothing to compare or count)
        return [(0, None)]
    picked = [np.flatnonzero(split_of == index) for index in range(splits)]
    return [(index, None if len(rows) == len(split_of) else rows)
            for index, rows in enumerate(picked) if len(rows)]


def _picked(values, rows: np.ndarray | None, scalars: bool = False):
    """The values at `rows` (None: all of them, as they are); `scalars`:
    the values are a feature's one number per example."""
    if rows is None:
        return values
    if isinstance(values, (np.ndarray, TextColumn)):
        # The native kernel's checked array of a numeric or vocabulary
        # column, or its text column: picked the same way.
        return values[rows]
    if scalars and hasattr(values, "array"):
        # A numeric column's checked array (`columns.CheckedNumbers`): the
        # split's values picked in one numpy call, which the statistics
        # take as they are (no list of numbers made).
        return values.array[rows]
    return list(map(values.__getitem__, rows.tolist()))


def _held_values(values, held: np.ndarray, rows: np.ndarray | None):
    """The values at `rows` (None: all) of the examples that hold one
    (`held`): an array or text column picked once, at those positions."""
    if isinstance(values, (np.ndarray, TextColumn)):
        return values[np.flatnonzero(held) if rows is None else rows[held[rows]]]
    chosen = _picked(values, rows)
    return list(itertools.compress(chosen, held if rows is None else held[rows]))
