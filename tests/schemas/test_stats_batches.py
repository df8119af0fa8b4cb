"""A batch's statistics per split and feature (schemas/stats/batches.py, plan.py)."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import given, settings, strategies as st

from recordforge.schemas.feature_config import parse_features
from recordforge.schemas.stats import StatisticsPlan, batch_statistics, feature_kind


def test_batch_statistics_partitions_by_split():
    specs = parse_features({"x": {"type": "int64"}, "tag": {"type": "string"},
                            "v": {"type": "float", "shape": [-1], "required": False}})
    plan = StatisticsPlan.from_specs(specs, {})
    assert [kind for _, kind, *_ in plan.features] == ["numeric", "string", "numeric"]
    columns = {"x": ("scalars", [1, 2, 3, 4]), "tag": ("scalars", ["a", "b", "a", "a"]),
               "v": ("rows", [[1.0], None, [2.0, 3.0], None])}
    out = dict(batch_statistics(plan, columns.__getitem__, np.array([0, 1, 0, 0]),
                                ["train", "test"]))
    assert out["train", "x"].to_json()["numeric"]["sum"] == 8
    assert out["test", "x"].to_json()["numeric"]["sum"] == 2
    assert out["train", "v"].to_json()["missing"] == 1
    assert out["test", "v"].to_json()["missing"] == 1
    assert out["train", "tag"].to_json()["string"]["top_values"] == [{"value": "a", "count": 3}]


def test_feature_kinds():
    specs = parse_features({"a": {"type": "int64", "vocabulary": ["x"]}, "b": {"type": "float"},
                            "c": {"type": "string"}, "d": {"type": "bytes"}})
    assert [feature_kind(spec) for spec in specs] == ["vocabulary", "numeric", "string", "bytes"]


def test_nested_and_listed_features_take_their_checked_values():
    from recordforge.transforms.batch_converter import BatchConverter
    from recordforge.transforms.readers.rows import SourceRow

    specs = parse_features({"city": {"type": "string", "from": ["place", "city"]},
                            "n": {"type": "int64", "from": ["place", "n"]},
                            "tags": {"type": "int64", "shape": [-1], "required": False}})
    rows = [SourceRow("f.jsonl", i, {"place": {"city": ["oslo", "rome"][i % 2], "n": i},
                                     "tags": list(range(i % 3)) if i % 4 else None})
            for i in range(40)]
    converter = BatchConverter(specs, {}, None)
    plan = StatisticsPlan.from_specs(specs, {})
    examples, _, dead, values = converter.convert_observed_batch(rows, None, None, plan)
    assert len(examples) == 40 and not dead
    out = dict(batch_statistics(plan, values, np.zeros(40, dtype=np.intp), ["train"]))
    assert out["train", "city"].to_json()["string"]["top_values"] == [
        {"value": "oslo", "count": 20}, {"value": "rome", "count": 20}]
    assert out["train", "n"].to_json()["numeric"]["sum"] == sum(range(40))
    tags = out["train", "tags"].to_json()
    present = [list(range(i % 3)) for i in range(40) if i % 4]
    assert tags["missing"] == 10 and tags["num_values"] == sum(map(len, present))
    assert tags["values_per_example"]["max"] == 2


@settings(max_examples=60, deadline=None)
@given(ints=st.lists(st.integers(-(1 << 63), (1 << 63) - 1), min_size=1, max_size=200),
       floats=st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=1,
                       max_size=200),
       splits=st.lists(st.integers(0, 2), min_size=200, max_size=200))
def test_a_checked_array_gives_each_split_the_statistics_of_its_list(ints, floats, splits):
    """A numeric column as `CheckedNumbers` (its array picked per split)
    and as a plain list of the same numbers: the same partials, byte for byte."""
    from recordforge.schemas.columns import CheckedNumbers
    from recordforge.schemas.stats import StatisticsAccumulator

    rows = min(len(ints), len(floats))
    ints, floats = ints[:rows], floats[:rows]
    specs = parse_features({"i": {"type": "int64"}, "f": {"type": "float"}})
    plan = StatisticsPlan.from_specs(specs, {})
    split_of = np.array(splits[:rows])
    lists = {"i": ("scalars", ints), "f": ("scalars", floats)}
    arrays = {"i": ("scalars", CheckedNumbers(ints, np.array(ints, dtype=np.int64))),
              "f": ("scalars", CheckedNumbers(floats, np.array(floats)))}
    states = []
    for columns in (lists, arrays):
        accumulator = StatisticsAccumulator(plan, ["train", "test", "eval"])
        with np.errstate(over="ignore"):
            assert not accumulator.add(columns.__getitem__, split_of)
        states.append(json.dumps([[key, stats.to_state()] for key, stats in accumulator.flush()]))
    assert states[0] == states[1]


@settings(max_examples=80, deadline=None)
@given(data=st.data(), rows=st.integers(1, 60), splits=st.integers(1, 3))
def test_each_split_gets_the_statistics_of_its_own_values(data, rows, splits):
    """Arrays, text columns, masked and listed values split per split (one
    split holding every row, some empty, or rows spread): each (split,
    feature) partial is the statistics of that split's values alone, as
    plain lists give them."""
    from recordforge.schemas.stats import FeatureStatistics
    from recordforge.schemas.text_column import TextColumn

    split_of = np.array(data.draw(st.lists(st.integers(0, splits - 1), min_size=rows,
                                           max_size=rows)), dtype=np.intp)
    ints = data.draw(st.lists(st.integers(-5, 5), min_size=rows, max_size=rows))
    texts = data.draw(st.lists(st.sampled_from(["", "a", "é", "b😀"]), min_size=rows,
                               max_size=rows))
    held = np.array(data.draw(st.lists(st.booleans(), min_size=rows, max_size=rows)), dtype=bool)
    listed = data.draw(st.lists(st.none() | st.lists(st.integers(0, 3), max_size=3),
                                min_size=rows, max_size=rows))
    plan = StatisticsPlan((("n", "numeric", "int64", False, None),
                           ("t", "string", "bytes", False, None),
                           ("m", "string", "bytes", False, None),
                           ("k", "numeric", "int64", False, None),
                           ("l", "vocabulary", "int64", True, ("w", "x", "y", "z"))))
    columns = {"n": ("scalars", np.array(ints, dtype=np.int64)),
               "t": ("scalars", TextColumn.of(texts)),
               "m": ("masked", (TextColumn.of(texts), held)),
               "k": ("masked", (ints, held)),
               "l": ("rows", listed)}
    names = ["train", "test", "eval"][:splits]
    out = [(key, json.dumps(stats.to_state()))
           for key, stats in batch_statistics(plan, columns.__getitem__, split_of, names)]
    expected = []
    for name, kind, stored, is_list, vocabulary in plan.features:
        for index, split in enumerate(names):
            mine = np.flatnonzero(split_of == index).tolist()
            if not mine:
                continue
            per_row = None
            if name in ("n", "t"):
                values = [(ints if name == "n" else texts)[at] for at in mine]
            elif name in ("m", "k"):
                values = [(texts if name == "m" else ints)[at] for at in mine if held[at]]
            else:
                present = [listed[at] for at in mine if listed[at] is not None]
                values, per_row = [value for row in present for value in row], list(map(len, present))
            stats = FeatureStatistics.from_values(kind, stored, len(mine), values, is_list,
                                                  vocabulary, per_row)
            expected.append(((split, name), json.dumps(stats.to_state())))
    assert out == expected
