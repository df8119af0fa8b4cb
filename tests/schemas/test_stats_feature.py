"""One feature's statistics and its stats.json entry (schemas/stats/feature_stats.py, entries.py) against Python's own arithmetic."""

from __future__ import annotations

import math
import pickle
import random
import statistics as pystats
from fractions import Fraction

import numpy as np
import pytest

from recordforge.schemas.columns import CheckedNumbers
from recordforge.schemas.stats import FeatureStatistics, ValueHistogram, sketch_from_json

EXACT_KEYS = ("count", "min", "max", "mean", "std", "sum", "nan", "inf", "distinct")


def _numeric(values, stored="int64"):
    return FeatureStatistics.from_values("numeric", stored, len(values), values)


def _merged(parts, stored="int64"):
    merged = None
    for part in parts:
        stats = _numeric(part, stored)
        merged = stats if merged is None else merged.merge(stats)
    return merged


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
