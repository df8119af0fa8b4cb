"""Statistics in the pipeline: a converted batch's checked values -> merged statistics per (split, feature).

`RowsToExamples` (with a `StatisticsSetup`) summarises each batch where its
checked values are at hand (`CheckedValues`, `schemas.stats.StatisticsAccumulator`)
and emits ``((split, feature), FeatureStatistics)``, a *partial*, per batch
(the cached table path: text's per batch, the others' per reading unit);
`MergeStatistics` merges the partials per key so that the result depends
only on the set of partials, never on workers, bundles or order: partials
whose merge gives the same in any order (all but text) go through a
`CombinePerKey`, which runners apply before the shuffle (per bundle) and
after it, so one set of sketches per bundle and key crosses it; the
partials of text features, whose top-values summary depends on the merge
order, are merged in a tree ordered by their content
(`schemas.stats.merge_partials`), a GroupByKey per level; with one worker
(``spread=False``) in one GroupByKey per key, where `merge_partials` runs
the same tree (the runner holds every partial of that one GroupByKey, as it
holds every partial of the tree's first level).
`partial_to_json` / `partial_from_json` give a partial as JSON-safe values.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, NamedTuple, Sequence

import apache_beam as beam
import numpy as np

from ..schemas.row_encoder import RowEncoder
from ..schemas.stats import (MERGE_LEVELS, FeatureStatistics, StatisticsPlan, merge_group,
                             merge_order, merge_partials)

__all__ = ["CheckedValues", "MergeStatistics", "PartlyChecked", "StatisticsSetup",
           "partial_from_json", "partial_to_json", "statistics_entry"]


class StatisticsSetup(NamedTuple):
    """What `RowsToExamples` needs to compute statistics: the features' plan,
    and the dataset name and splits that assign rows to splits exactly as
    the shard writer does."""

    plan: StatisticsPlan
    dataset_name: str
    splits: tuple[tuple[str, float], ...]


class PartlyChecked(NamedTuple):
    """A feature's checked values in a batch some row holds none of (the
    native kernel's, `native_rows`): every row's value (an int64 or
    float64 array, a placeholder where the row holds none; None for text,
    which the batch's own column holds) and each row's state: `PRESENT`,
    `OMITTED` (an optional feature left out) or `UNCHECKED` (declined at
    this feature: the row path converts it)."""

    values: np.ndarray | None
    states: np.ndarray


OMITTED, PRESENT, UNCHECKED = 0, 1, 2  # (the kernel's bytes: native/src/table.rs)


class CheckedValues:
    """feature name -> the checked values of a batch's good examples, in
    the order the examples were emitted (the `values_of` of
    `batch_statistics` and `StatisticsAccumulator.add`).

    A feature whose whole column took the column path has its checked value
    per row at hand ("scalars"; a string feature's raw text, which is what
    it stores, then spares decoding it again). A feature the native kernel
    checked in some rows only (`PartlyChecked`) has those values and which
    rows hold one ("masked": the rows left unchecked are converted here,
    and only those). Any other feature (lists, missing values on the
    Python path) is converted again here with the same compiled rules,
    one value at a time ("rows")."""

    def __init__(self, encoder: RowEncoder, plan: StatisticsPlan, column: Callable[[str], list],
                 checked: Mapping[str, list], good: Sequence[int] | None):
        self._encoder = encoder
        self._kinds = {name: kind for name, kind, *_ in plan.features}
        self._column = encoder.columns_as_read(column)
        self._checked = checked
        self._good = good  # None: every row of the batch

    def _pick(self, values):
        if self._good is None:
            return values
        if isinstance(values, np.ndarray):  # the native kernel's numbers: picked as an array
            return values[self._good]
        return list(map(values.__getitem__, self._good))

    def __call__(self, name: str) -> tuple[str, Any]:
        source = self._encoder.source_of(name)
        checked = self._checked.get(name)
        if isinstance(checked, PartlyChecked):
            masked = self._masked(name, source, checked)
            if masked is not None:
                return "masked", masked
        elif checked is not None:
            if self._kinds[name] == "string":
                return "scalars", self._pick(self._column(source))
            return "scalars", self._pick(checked)
        convert = self._encoder.converter(name)
        return "rows", [_converted(convert, raw) for raw in self._pick(self._column(source))]

    def _masked(self, name: str, source, checked: PartlyChecked):
        """(every good row's value, whether it holds one) of a partly
        checked feature: the kernel's values, and those of the rows it left
        unchecked converted as the "rows" form converts them (None: none);
        None when such a row holds other than one value (the "rows" form
        then counts it as it is)."""
        text = self._kinds[name] == "string"
        states = self._pick(checked.states)
        values = self._pick(self._column(source) if text else checked.values)
        unchecked = np.flatnonzero(states == UNCHECKED)
        if len(unchecked):
            values = list(values) if text else values.copy()  # (the picks may be the batch's own)
            states = states.copy()
            convert = self._encoder.converter(name)
            raws = values if text else self._pick(self._column(source))
            for at in unchecked.tolist():
                converted = _converted(convert, raws[at])
                if converted is None:
                    states[at] = OMITTED
                    continue
                if len(converted) != 1:
                    return None
                value = converted[0]
                if not text and type(value) is not (int if values.dtype.kind == "i" else float):
                    return None  # (no such value is converted; the array holds no other)
                # (text the row path stores is UTF-8 bytes; the kernel's rows give str)
                values[at] = value.decode("utf-8") if text and type(value) is bytes else value
                states[at] = PRESENT
        return values, states == PRESENT


def _converted(convert, raw: Any) -> Any:
    try:
        values = convert(raw)
    except Exception:  # cannot happen for a row that was encoded; statistics never fail a row
        return None
    return None if values is None else list(values)


def partial_to_json(value: tuple[tuple[str, str], FeatureStatistics]) -> list:
    """A ``((split, feature), FeatureStatistics)`` partial (what
    `BatchConversion.convert` yields under "statistics") as JSON-safe
    values: ``[[split, feature], state]`` (`FeatureStatistics.to_state`)."""
    (split, feature), stats = value
    return [[split, feature], stats.to_state()]


def partial_from_json(obj: Sequence) -> tuple[tuple[str, str], FeatureStatistics]:
    """The partial `partial_to_json` gave `obj` for, exactly."""
    (split, feature), state = obj
    return (split, feature), FeatureStatistics.from_state(state)


class _MergeFn(beam.CombineFn):
    """FeatureStatistics of one key whose merge does not depend on the
    order (`FeatureStatistics.order_free`), merged as they come."""

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


def statistics_entry(keyed: tuple[tuple[str, str], FeatureStatistics]
                     ) -> tuple[str, str, dict]:
    """A merged key as ``(split, feature, stats.json entry)``."""
    (split, feature), stats = keyed
    return split, feature, stats.to_json()


def _order_free(keyed: tuple[tuple[str, str], FeatureStatistics]) -> bool:
    return keyed[1].order_free


def _first_level(keyed: tuple[tuple[str, str], FeatureStatistics]):
    """((split, feature), stats) -> ((split, feature, group), (order, stats))
    of a partial whose merge depends on the order; nothing for the others
    (one step that filters and keys: a ParDo less)."""
    (split, feature), stats = keyed
    if stats.order_free:
        return
    order, group = merge_order(stats)
    yield (split, feature, group), (order, stats)


def _merged_group(grouped, finer: int, coarser: int):
    """((split, feature, group), [(order, stats)]) -> the group merged in
    order, keyed by its group at the next level: ((split, feature,
    group >> (finer - coarser)), (group, stats))."""
    (split, feature, group), members = grouped
    return (split, feature, group >> (finer - coarser)), (group, merge_group(members))


def _last_group(grouped, finish: Callable) -> Any:
    """The last level's group merged, as `finish` gives ``((split, feature),
    stats)``."""
    (split, feature, _), members = grouped
    return finish(((split, feature), merge_group(members)))


def _ordered_partial(keyed: tuple[tuple[str, str], FeatureStatistics]):
    """A partial whose merge depends on the order, as it is; nothing for the
    others (one step that filters: a ParDo less)."""
    if not keyed[1].order_free:
        yield keyed


def _whole_tree(grouped, finish: Callable) -> Any:
    """((split, feature), [stats]) -> the key's partials merged in the tree
    (`merge_partials`), as `finish` gives ``((split, feature), stats)``."""
    key, members = grouped
    return finish((key, merge_partials(members)))


def _merged(keyed: tuple[tuple[str, str], FeatureStatistics]
            ) -> tuple[tuple[str, str], FeatureStatistics]:
    return keyed


class _MergeInOrder(beam.PTransform):
    """``((split, feature), FeatureStatistics)`` partials whose merge
    depends on the order (others are left out) -> one merged per key, as
    `finish` gives it, in the tree of `schemas.stats.merge_partials`: a
    GroupByKey per level (MERGE_LEVELS), no level holding more than a
    2**16th (level 1) or 256 (further levels) of a key's partials. With
    one worker (`spread` False: no level's groups to spread over workers)
    the same tree in one GroupByKey: two runner stages and two ParDos
    less, the same merge."""

    def __init__(self, finish: Callable, spread: bool = True):
        super().__init__()
        self._finish = finish
        self._spread = spread

    def expand(self, partials):
        if not self._spread:
            return (partials
                    | "KeyOrdered" >> beam.FlatMap(_ordered_partial)
                    | "GroupAll" >> beam.GroupByKey()  # ((split, feature), [stats])
                    | "MergeAll" >> beam.Map(_whole_tree, self._finish))
        # ((split, feature, group), (order, stats))
        level = partials | "KeyByOrigin" >> beam.FlatMap(_first_level)
        for finer, coarser in zip(MERGE_LEVELS, MERGE_LEVELS[1:]):
            # ((split, feature, coarser group), (finer group, stats))
            level = (level
                     | f"Group[{finer}]" >> beam.GroupByKey()
                     | f"Merge[{finer}]" >> beam.Map(_merged_group, finer, coarser))
        return (level
                | "GroupLast" >> beam.GroupByKey()
                # finish(((split, feature), stats))
                | "MergeLast" >> beam.Map(_last_group, self._finish))


class MergeStatistics(beam.PTransform):
    """Takes ``((split, feature), FeatureStatistics)`` per batch; gives one
    ``(split, feature, stats.json entry)`` per key, the same whatever the
    runner, its workers and bundles, and the order of the partials.

    finish: what each merged ``((split, feature), stats)`` is given as
    (`statistics_entry` by default), in the step that ends its merge, not
    in a step (a ParDo) of its own. gathered=False gives them as a tuple of
    PCollections (the order-free keys', the ordered keys') for a consumer
    that flattens them with other inputs anyway: a Flatten of its own here
    would be one more runner stage. spread: merge the ordered keys in a
    tree of GroupByKeys whose groups a runner spreads over its workers;
    False where there is one worker (the same merge in one GroupByKey,
    `_MergeInOrder`)."""

    def __init__(self, gathered: bool = True, finish: Callable = statistics_entry,
                 spread: bool = True):
        super().__init__()
        self._gathered = gathered
        self._finish = finish
        self._spread = spread

    def expand(self, partials):
        # ((split, feature), FeatureStatistics), one per key
        order_free = (partials
                      | "OrderFree" >> beam.Filter(_order_free)
                      | "MergePerKey" >> beam.CombinePerKey(_MergeFn()))
        if not self._gathered:
            return (order_free | "Finish" >> beam.Map(self._finish),
                    partials | "MergeInOrder" >> _MergeInOrder(self._finish, self._spread))
        ordered = partials | "MergeInOrder" >> _MergeInOrder(_merged, self._spread)
        return ((order_free, ordered)
                | "AllMerged" >> beam.Flatten()
                | "Finish" >> beam.Map(self._finish))
