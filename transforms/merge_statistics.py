"""Statistics in the pipeline: a converted batch's checked values -> merged statistics per (split, feature).

`RowsToExamples` (with a `StatisticsSetup`) summarises each batch where its
checked values are at hand (`CheckedValues`, `schemas.stats.StatisticsAccumulator`)
and emits ``((split, feature), FeatureStatistics)``, a *partial*, per batch
(the table paths, `unit_conversion`: one per reading unit, its batches'
text summaries merged in the order they were read);
`MergeStatistics` merges the partials per key so that the result depends
only on the set of partials, never on workers, bundles or order: one
`CombinePerKey`, which runners apply before the shuffle (per bundle) and
after it, whose accumulator (`schemas.stats.MergingStatistics`) merges
every part as it comes but the top values of text, whose summary depends
on the merge order: those wait, without the rest of their partial, for
the canonical tree ordered by their content.
`partial_to_json` / `partial_from_json` give a partial as JSON-safe values,
`partial_json_text` as the JSON text of those.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Mapping, NamedTuple, Sequence

import apache_beam as beam
import numpy as np

from ..schemas.row_encoder import RowEncoder
from ..schemas.stats import FeatureStatistics, MergingStatistics, StatisticsPlan
from ..schemas.text_column import TextColumn

__all__ = ["CheckedValues", "MergeStatistics", "PartlyChecked", "StatisticsSetup",
           "partial_from_json", "partial_json_text", "partial_to_json", "statistics_entry"]


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
    float64 array, or a `TextColumn`, a placeholder where the row holds
    none) and each row's state: `PRESENT`,
    `OMITTED` (an optional feature left out) or `UNCHECKED` (declined at
    this feature: the row path converts it)."""

    values: np.ndarray | TextColumn
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
        if isinstance(values, TextColumn):  # and its text: picked as one buffer
            return values.take(self._good)
        return list(map(values.__getitem__, self._good))

    def __call__(self, name: str) -> tuple[str, Any]:
        source = self._encoder.source_of(name)
        checked = self._checked.get(name)
        if isinstance(checked, PartlyChecked):
            masked = self._masked(name, source, checked)
            if masked is not None:
                return "masked", masked
        elif checked is not None:
            if self._kinds[name] == "string" and not isinstance(checked, TextColumn):
                # Text as it was read spares decoding the stored UTF-8 again,
                # unless it was read as one-item lists (`columns._only_items`).
                # (the native kernels' text is already read as str: a
                # TFRecord batch's rows are then never made)
                raws = self._column(source)
                listed = len(raws) > 0 and type(raws[0]) in (list, tuple)
                return "scalars", self._pick(checked if listed else raws)
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
        values = self._pick(checked.values)
        unchecked = np.flatnonzero(states == UNCHECKED)
        if len(unchecked):
            values = list(values) if text else values.copy()  # (the picks may be the batch's own)
            states = states.copy()
            convert = self._encoder.converter(name)
            raws = self._pick(self._column(source))
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


def partial_json_text(value: tuple[tuple[str, str], FeatureStatistics]) -> str:
    """`partial_to_json(value)` as compact ASCII JSON text (`json.dumps`
    with separators ``(",", ":")``), its state written by
    `FeatureStatistics.state_json`."""
    (split, feature), stats = value
    key = json.dumps([split, feature], separators=(",", ":"))
    return f"[{key},{stats.state_json()}]"


def partial_from_json(obj: Sequence) -> tuple[tuple[str, str], FeatureStatistics]:
    """The partial `partial_to_json` gave `obj` for, exactly."""
    (split, feature), state = obj
    return (split, feature), FeatureStatistics.from_state(state)


class _MergeFn(beam.CombineFn):
    """The partials of one key merged as they come (`MergingStatistics`:
    the theta sketch and every other part that merges alike in any order at
    once, the top values of text in their canonical order at the end)."""

    def create_accumulator(self) -> MergingStatistics:
        return MergingStatistics()

    def add_input(self, accumulator: MergingStatistics, stats: FeatureStatistics):
        return accumulator.add(stats)

    def merge_accumulators(self, accumulators):
        accumulators = iter(accumulators)
        merged = next(accumulators)
        for accumulator in accumulators:
            merged.merge(accumulator)
        return merged

    def extract_output(self, accumulator: MergingStatistics) -> FeatureStatistics:
        return accumulator.result()


def statistics_entry(keyed: tuple[tuple[str, str], FeatureStatistics]
                     ) -> tuple[str, str, dict]:
    """A merged key as ``(split, feature, stats.json entry)``."""
    (split, feature), stats = keyed
    return split, feature, stats.to_json()


class MergeStatistics(beam.PTransform):
    """Takes ``((split, feature), FeatureStatistics)`` per batch; gives one
    ``(split, feature, stats.json entry)`` per key, the same whatever the
    runner, its workers and bundles, and the order of the partials: one
    `CombinePerKey`, which runners lift before their shuffle, so one
    accumulator per bundle and key crosses it.

    finish: what each merged ``((split, feature), stats)`` is given as
    (`statistics_entry` by default), in the step that extracts it, not in
    a step (a ParDo) of its own."""

    def __init__(self, finish: Callable = statistics_entry):
        super().__init__()
        self._finish = finish

    def expand(self, partials):
        return (partials
                | "MergePerKey" >> beam.CombinePerKey(_MergeFn())
                | "Finish" >> beam.Map(self._finish))
