"""Per-feature statistics (schemas/statistics.py) against Python's own arithmetic."""

from __future__ import annotations

import math
import pickle
import random
import statistics as pystats
from fractions import Fraction

import numpy as np
import pytest

from recordforge.schemas.columns import CheckedNumbers
from recordforge.schemas.feature_config import parse_features
from recordforge.schemas.statistics import (HISTOGRAM_BUCKETS, FeatureStatistics, StatisticsPlan,
                                            ValueHistogram, _SHIFT, _exact_float_sums,
                                            _exact_int_sums, _exact_sum, batch_statistics,
                                            feature_kind, sketch_from_json)

EXACT_KEYS = ("count", "min", "max", "mean", "std", "sum", "nan", "inf", "distinct")


def _numeric(values, stored="int64"):
    return FeatureStatistics.from_values("numeric", stored, len(values), values)


def _merged(parts, stored="int64"):
    merged = None
    for part in parts:
        stats = _numeric(part, stored)
        merged = stats if merged is None else merged.merge(stats)
    return merged


def test_exact_sum_is_the_exact_sum_in_any_order():
    rng = random.Random(3)
    values = [rng.uniform(-1e6, 1e6) for _ in range(2000)] + [1e-300, -2.5e-320, 1e300, 0.0]
    exact = sum(map(Fraction, values))
    assert Fraction(_exact_sum(np.array(values)), 1 << _SHIFT) == exact
    rng.shuffle(values)
    assert Fraction(_exact_sum(np.array(values)), 1 << _SHIFT) == exact


@pytest.mark.parametrize("scale", [1e-40, 1e-3, 1.0, 1e5])
def test_fast_float_sums_are_the_exact_sums(scale):
    # float32 values, as statistics keep them: narrow spreads take the int64
    # sums, wide ones (and subnormal float32s' squares) the sums per exponent
    rng = np.random.default_rng(5)
    for decades in (0, 3, 12, 30):
        magnitudes = scale * 10.0 ** rng.uniform(0, decades, 3000)
        values = (rng.standard_normal(3000) * magnitudes).astype(np.float32).astype(np.float64)
        values[:3] = 0.0
        assert _exact_float_sums(values) == (_exact_sum(values), _exact_sum(values * values))
        total, squares = _exact_float_sums(values)
        assert Fraction(total, 1 << _SHIFT) == sum(map(Fraction, values.tolist()))
        assert Fraction(squares, 1 << _SHIFT) == sum(Fraction(v) ** 2 for v in values.tolist())
    # doubles of more than 26 significant bits: squares rounded, as ever
    values = rng.standard_normal(1000) * scale
    assert _exact_float_sums(values) == (_exact_sum(values), _exact_sum(values * values))


@pytest.mark.parametrize("bits", [3, 26, 31, 47, 48, 49, 62])
def test_fast_int_sums_are_the_exact_sums(bits):
    rng = random.Random(bits)
    values = [rng.randrange(-(1 << bits), 1 << bits) for _ in range(5000)] + [(1 << bits) - 1]
    array = np.array(values, dtype=np.int64)
    sums = (sum(values) << _SHIFT, sum(v * v for v in values) << _SHIFT)
    low, high = min(values), max(values)
    assert _exact_int_sums(array, values, low, high) == sums
    assert _exact_int_sums(array, None, low, high) == sums


def test_checked_numbers_give_the_statistics_of_their_list():
    rng = random.Random(4)
    ints = [rng.randrange(-10**6, 10**6) for _ in range(2000)]
    floats = [rng.uniform(-5, 5) for _ in range(2000)] + [float("nan")]
    for stored, values, dtype in (("int64", ints, np.int64), ("float", floats, np.float64)):
        checked = CheckedNumbers(values, np.array(values, dtype=dtype))
        assert checked == values
        assert (_numeric(checked, stored).to_state() == _numeric(values, stored).to_state())


def test_int_statistics_match_python():
    values = [3, -7, 12, 12, 0, 5, 1 << 40, -(1 << 40) + 3]
    entry = _numeric(values).to_json()
    section = entry["numeric"]
    assert entry["examples"] == entry["present"] == entry["num_values"] == len(values)
    assert entry["missing"] == 0 and entry["missing_fraction"] == 0.0
    assert section["count"] == len(values)
    assert section["min"] == min(values) and section["max"] == max(values)
    assert section["sum"] == sum(values)
    assert section["mean"] == float(Fraction(sum(values), len(values)))
    assert section["std"] == pytest.approx(pystats.pstdev(values), rel=1e-15)
    assert section["distinct"] == len(set(values))


def test_huge_ints_are_summed_exactly():
    values = [(1 << 62) + 1, (1 << 62) + 3, -(1 << 63)]
    section = _numeric(values).to_json()["numeric"]
    assert section["sum"] == sum(values)
    assert section["mean"] == float(Fraction(sum(values), 3))


def test_float_statistics_describe_the_stored_float32_values():
    values = [0.1, 0.2, 0.3, -1.5, 1e10, 3.25]
    stored = [float(np.float32(v)) for v in values]
    section = _numeric(values, "float").to_json()["numeric"]
    assert section["min"] == min(stored) and section["max"] == max(stored)
    mean = sum(map(Fraction, stored)) / len(stored)
    assert section["mean"] == float(mean)
    variance = sum((Fraction(v) - mean) ** 2 for v in stored) / len(stored)
    assert section["std"] == math.sqrt(float(variance))
    assert section["nan"] == 0 and section["inf"] == 0


def test_nan_and_inf_are_counted_and_left_out():
    section = _numeric([1.0, math.nan, math.inf, -math.inf, 3.0], "float").to_json()["numeric"]
    assert (section["nan"], section["inf"], section["count"]) == (1, 2, 2)
    assert (section["min"], section["max"], section["mean"]) == (1.0, 3.0, 2.0)


@pytest.mark.parametrize("stored", ["int64", "float"])
def test_exact_fields_do_not_depend_on_batches_or_merge_order(stored):
    rng = random.Random(11)
    values = [rng.randint(-10**6, 10**6) if stored == "int64" else rng.uniform(-50, 50)
              for _ in range(30_000)]
    one = _numeric(values, stored).to_json()["numeric"]
    cut = [values[i:i + 977] for i in range(0, len(values), 977)]
    rng.shuffle(cut)
    many = _merged(cut, stored)
    # pickled as a runner would between workers
    many = pickle.loads(pickle.dumps(many)).to_json()["numeric"]
    for key in EXACT_KEYS:
        if key in one:
            assert one[key] == many[key], key


def _true_quantile(stored: np.ndarray, rank: float) -> float:
    """The smallest value with more than rank * n values at or below it."""
    return stored[min(len(stored) - 1, math.floor(rank * len(stored)))]


def test_quantiles_are_within_the_relative_error():
    rng = random.Random(5)
    values = [rng.gauss(0, 1) for _ in range(100_000)]
    parts = [values[i:i + 10_000] for i in range(0, len(values), 10_000)]
    section = _merged(parts, "float").to_json()["numeric"]
    stored = np.sort(np.array(values, dtype=np.float32).astype(np.float64))
    error = section["relative_error"]
    # 2,048 buckets over the normal's binades near zero: 6 mantissa bits
    assert 0 < error <= 2 ** -6
    for rank, value in section["quantiles"].items():
        true = _true_quantile(stored, float(rank))
        assert abs(value - true) <= error * abs(true), rank
    assert section["quantiles"]["0"] == stored[0] and section["quantiles"]["1"] == stored[-1]
    fractions = section["histogram"]["fractions"]
    assert len(fractions) == 10 and sum(fractions) == pytest.approx(1.0, abs=1e-5)
    edges = section["histogram"]["edges"]
    for low, high, fraction in zip(edges, edges[1:], fractions):
        # a bucket straddling an edge counts on one side: at most the values
        # within the relative error of the edge move
        slack = error * max(abs(low), abs(high))
        inside = np.count_nonzero((stored >= low + slack) & (stored < high - slack))
        around = np.count_nonzero((stored >= low - slack) & (stored < high + slack))
        assert inside / len(stored) - 1e-6 <= fraction <= around / len(stored) + 1e-6


def test_few_distinct_values_give_exact_quantiles_and_histograms():
    # Up to HISTOGRAM_BUCKETS distinct values every value is its own bucket:
    # quantile q is the smallest value with more than q * n at or below it.
    values = [v for v in range(1, 400) for _ in range(v % 3 + 1)]
    random.Random(4).shuffle(values)
    section = _merged([values[:333], values[333:]]).to_json()["numeric"]
    assert section["relative_error"] == 0.0
    stored = np.sort(np.array(values, dtype=np.float64))
    for rank, value in section["quantiles"].items():
        assert value == _true_quantile(stored, float(rank)), rank
    edges = section["histogram"]["edges"]
    assert edges[0] == 1 and edges[-1] == 399
    for i, fraction in enumerate(section["histogram"]["fractions"]):
        last = i == len(edges) - 2
        count = np.count_nonzero((stored >= edges[i]) & ((stored <= edges[i + 1]) if last
                                                         else (stored < edges[i + 1])))
        assert fraction == round(count / len(stored), 6), i


def test_value_histogram_keeps_the_finest_resolution_that_fits():
    rng = np.random.default_rng(8)
    # epoch seconds: a narrow range far from zero keeps a fine resolution
    seconds = 1.7e9 + rng.integers(0, 10 ** 7, 50_000).astype(np.float64)
    sketch = ValueHistogram.of(seconds)
    assert len(sketch.keys) <= HISTOGRAM_BUCKETS < len(np.unique(seconds))
    # the sketch's shift is the smallest at which the values fit
    assert len(np.unique(_keys(seconds) >> np.uint64(sketch.shift - 1))) > HISTOGRAM_BUCKETS
    assert len(np.unique(_keys(seconds) >> np.uint64(sketch.shift))) == len(sketch.keys)
    median = sketch.get_quantiles([0.5])[0]
    true = _true_quantile(np.sort(seconds), 0.5)
    assert abs(median - true) <= sketch.relative_error * true < 20_000
    assert sketch.n == 50_000 and (sketch.low, sketch.high) == (seconds.min(), seconds.max())
    assert ValueHistogram.deserialize(sketch.serialize()) == sketch


def _keys(values):
    from recordforge.schemas.statistics import _ordered
    return _ordered(values)


def test_value_histogram_orders_signs_and_zero():
    values = np.array([-3.5, -0.0, 0.0, 2.0, -1e-300, 1e300, -1e300, 5e-324])
    sketch = ValueHistogram.of(values)
    assert sketch.relative_error == 0.0
    assert sketch.get_quantiles([0, 0.2, 0.3, 0.4, 0.5, 0.8, 0.9]) == [
        -1e300, -3.5, -1e-300, 0.0, 0.0, 2.0, 1e300]
    # (-inf, -1), [-1, 0), [0, 1), [1, inf)
    assert sketch.get_pmf([-1.0, 0.0, 1.0]) == [0.25, 0.125, 0.375, 0.25]


def test_a_damaged_sketch_is_no_sketch():
    section = _numeric(list(range(50))).to_json()["numeric"]
    assert isinstance(sketch_from_json(section), ValueHistogram)
    assert sketch_from_json({"sketch": section["sketch"][:-8]}) is None
    assert sketch_from_json({"sketch": "not base64!"}) is None
    assert sketch_from_json({}) is None


def test_vocabulary_counts_are_exact():
    vocabulary = ("cat", "dog", "eel")
    a = FeatureStatistics.from_values("vocabulary", "int64", 4, [0, 1, 1, 1],
                                      vocabulary=vocabulary)
    b = FeatureStatistics.from_values("vocabulary", "int64", 2, [1, 0], vocabulary=vocabulary)
    section = a.merge(b).to_json()["vocabulary"]
    assert section["counts"] == {"cat": 2, "dog": 4, "eel": 0}
    assert section["top_values"] == [{"value": "dog", "count": 4}, {"value": "cat", "count": 2}]
    assert section["distinct"] == 2 and section["exact"] is True


def test_string_top_values_are_exact_below_the_sketch_capacity():
    values = ["b"] * 5 + ["a"] * 5 + ["z"] * 7 + [f"u{i}" for i in range(300)]
    rng = random.Random(1)
    rng.shuffle(values)
    halves = [FeatureStatistics.from_values("string", "bytes", n, part) for n, part in
              ((200, [v.encode() for v in values[:200]]), (len(values) - 200, values[200:]))]
    section = halves[1].merge(halves[0]).to_json()["string"]
    assert section["exact"] is True and section["distinct"] == 303
    assert section["top_values"][:3] == [{"value": "z", "count": 7}, {"value": "a", "count": 5},
                                         {"value": "b", "count": 5}]


def test_bytes_features_give_length_statistics():
    values = [b"", b"abc", b"x" * 10, b"12"]
    entry = FeatureStatistics.from_values("bytes", "bytes", 4, values).to_json()
    section = entry["bytes"]
    assert (section["min"], section["max"], section["total_bytes"]) == (0, 10, 15)
    assert section["mean"] == 15 / 4


def test_lists_and_missing_values():
    # 5 examples: two lists, one absent, one empty list, one single value
    rows = [[1.0, 2.0], [3.0], None, [], [4.0, 5.0, 6.0]]
    present = [row for row in rows if row is not None]
    stats = FeatureStatistics.from_values(
        "numeric", "float", len(rows), [v for row in present for v in row], is_list=True,
        per_row=list(map(len, present)))
    entry = stats.to_json()
    assert (entry["examples"], entry["present"], entry["missing"]) == (5, 4, 1)
    assert entry["missing_fraction"] == 0.2 and entry["num_values"] == 6
    assert entry["values_per_example"] == {"min": 0, "max": 3, "mean": 1.5}
    assert entry["numeric"]["mean"] == 3.5


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


# --- theta updates filtered by DataSketches' own hash ----------------------------------

from unittest import mock  # noqa: E402

from hypothesis import given, settings, strategies as st  # noqa: E402

import datasketches  # noqa: E402

from recordforge.schemas import statistics as statistics_module  # noqa: E402


@pytest.mark.parametrize("values", [
    np.array([0, 1, -1, 2**53 + 1, 2**62, -2**63, 2**63 - 1], dtype=np.int64),
    np.array([0.0, 1.5, -2.25, 1e300, -1e-300, 5e-324, np.finfo(np.float64).max]),
])
def test_theta_hashes_are_the_ones_datasketches_keeps(values):
    sketch = datasketches.update_theta_sketch(statistics_module.THETA_LG_K)
    for value in values.tolist():
        sketch.update(value)
    assert sorted(int(h) for h in sketch.compact()) == sorted(
        statistics_module._theta_hashes(values).tolist())


_INTS = st.one_of(st.integers(-2**63, 2**63 - 1), st.integers(-50, 50))
_FLOATS = st.floats(allow_nan=False, allow_infinity=False, width=32).map(lambda x: x + 0.0)


def _numeric_theta(stored: str, batches: list[list]) -> bytes:
    stats = FeatureStatistics("numeric", stored)
    for values in batches:
        stats.add_values(len(values), values)
    return stats.theta.compact().serialize()


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(["int64", "float"]), st.data())
def test_a_filtered_theta_sketch_equals_one_given_every_value(stored, data):
    """Past its first thousands of distinct values a sketch is given only
    the values whose hash is below its theta; it must end the same as one
    given every value in the same order (an update sketch's state depends
    on the order: the same batches go to both), whatever the batches hold."""
    size = data.draw(st.sampled_from([10, 5000, 30_000]), label="size")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    if stored == "int64":
        drawn = data.draw(st.lists(_INTS, max_size=50), label="ints")
        values = drawn + rng.integers(-2**63, 2**63 - 1, size, dtype=np.int64).tolist() \
            + rng.integers(-100, 100, size // 2).tolist()
        if data.draw(st.booleans(), label="small ints only"):
            values = [value % 2**40 for value in values]
    else:
        drawn = data.draw(st.lists(_FLOATS, max_size=50), label="floats")
        values = drawn + rng.standard_normal(size).astype(np.float32).tolist() \
            + np.round(rng.uniform(-5, 5, size // 2), 1).tolist()
    rng.shuffle(values)
    cut = data.draw(st.integers(0, len(values)), label="cut")
    batches = [values[:cut], values[cut:]]
    filtered = _numeric_theta(stored, batches)
    with mock.patch.object(statistics_module, "_theta_hashes",
                           lambda array: np.zeros(len(array), dtype=np.uint64)):
        every_value = _numeric_theta(stored, batches)
    assert filtered == every_value
