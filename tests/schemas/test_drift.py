"""Drift between two stats.json documents and the validation gates (schemas/drift.py)."""

from __future__ import annotations

import base64
import math
import random

import datasketches
import pytest

from recordforge.schemas.drift import (Gate, check_gates, compare, failure_message,
                                       jensen_shannon, linf_distance)
from recordforge.schemas.stats import FeatureStatistics


def _stats(numbers, labels, vocabulary=("a", "b", "c"), texts=None, missing=0):
    rows = len(numbers) + missing
    features = {
        "x": FeatureStatistics.from_values("numeric", "float", rows, numbers).to_json(),
        "label": FeatureStatistics.from_values("vocabulary", "int64", len(labels), labels,
                                               vocabulary=vocabulary).to_json(),
    }
    if texts is not None:
        features["city"] = FeatureStatistics.from_values("string", "bytes", len(texts),
                                                         texts).to_json()
    return {"format": "recordforge.stats/1",
            "splits": {"train": {"num_examples": rows, "features": features}}}


def test_distances_by_hand():
    assert linf_distance({"a": 1, "b": 1}, {"a": 3, "b": 1}) == pytest.approx(0.25)
    assert linf_distance({"a": 2}, {"b": 5}) == 1.0
    assert jensen_shannon([1, 0], [0, 1]) == 1.0
    assert jensen_shannon([1, 1], [2, 2]) == 0.0
    # JS of (1/2, 1/2) and (1, 0): 1/2 KL(p||m) + 1/2 KL(q||m), m = (3/4, 1/4)
    expected = 0.5 * (0.5 * math.log2(0.5 / 0.75) + 0.5 * math.log2(0.5 / 0.25)) \
        + 0.5 * math.log2(1 / 0.75)
    assert jensen_shannon([1, 1], [1, 0]) == pytest.approx(expected)


def test_same_distribution_passes_the_gates():
    rng = random.Random(2)
    before = _stats([rng.gauss(10, 2) for _ in range(20_000)],
                    [rng.choice([0, 1, 2]) for _ in range(20_000)],
                    texts=[rng.choice(["paris", "rome", "oslo"]) for _ in range(20_000)])
    after = _stats([rng.gauss(10, 2) for _ in range(21_000)],
                   [rng.choice([0, 1, 2]) for _ in range(21_000)],
                   texts=[rng.choice(["paris", "rome", "oslo"]) for _ in range(21_000)])
    drift = compare(after, before, "v1")
    split = drift["splits"]["train"]
    assert split["row_change"] == pytest.approx(0.05)
    # Two samples of one distribution are not identical: JS over the shared
    # decile bins stays well below the gate.
    assert split["features"]["x"]["measure"] == "js" and split["features"]["x"]["value"] < 0.04
    assert split["features"]["label"] == {"measure": "linf", "value": pytest.approx(
        split["features"]["label"]["value"]), "exact": True}
    assert split["features"]["label"]["value"] < 0.02
    assert split["features"]["city"]["value"] < 0.02
    assert drift["schema"] == {"added": [], "removed": [], "changed": []}
    gates = [Gate("validation.max_row_change", "row_change", 0.5),
             Gate("validation.features.x.max_js", "js", 0.05, "x"),
             Gate("validation.features.label.max_linf", "linf", 0.1, "label"),
             Gate("validation.features.city.max_linf", "linf", 0.1, "city")]
    results = check_gates(gates, after, drift)
    assert [result.passed for result in results] == [True] * 4
    assert failure_message(results) is None


def test_drifted_distributions_fail_the_gates_with_the_measured_values():
    rng = random.Random(3)
    before = _stats([rng.gauss(10, 2) for _ in range(20_000)],
                    [rng.choice([0, 1, 2]) for _ in range(20_000)])
    # prices in cents instead of dollars; label "c" vanished; half the rows
    after = _stats([rng.gauss(10, 2) * 100 for _ in range(10_000)],
                   [rng.choice([0, 1]) for _ in range(10_000)])
    drift = compare(after, before, "v1")
    split = drift["splits"]["train"]
    assert split["row_change"] == 0.5
    assert split["features"]["x"]["value"] > 0.8
    # c had a third of the values and has none
    assert split["features"]["label"]["value"] == pytest.approx(1 / 3, abs=0.03)
    gates = [Gate("validation.max_row_change", "row_change", 0.4),
             Gate("validation.features.x.max_js", "js", 0.1, "x"),
             Gate("validation.features.label.max_linf", "linf", 0.2, "label")]
    results = check_gates(gates, after, drift)
    assert [result.passed for result in results] == [False, False, False]
    message = failure_message(results)
    assert "3 validation gate(s) crossed" in message
    assert ("validation.max_row_change: split 'train', against version 'v1': row_change = 0.5 "
            "exceeds the limit 0.4") in message
    assert ("validation.features.label.max_linf: split 'train', feature 'label', against "
            "version 'v1': linf = 0.3") \
        in message


def test_missing_gate_needs_no_previous_version():
    after = _stats([1.0] * 95, [0] * 100, missing=5)
    drift = compare(after, None, None)
    assert drift["previous_version"] is None and drift["schema"] is None
    results = check_gates([Gate("validation.features.x.max_missing", "missing", 0.01, "x"),
                           Gate("validation.features.x.max_js", "js", 0.0, "x")], after, drift)
    assert not results[0].passed and results[0].value == 0.05
    # drift gates cannot be measured without a previous version: they pass and say why
    assert results[1].passed and results[1].value is None
    assert "no previous version" in results[1].message


def test_schema_changes_are_reported():
    before = _stats([1.0, 2.0], [0, 1])
    after = _stats([1.0, 2.0], [0, 1], texts=["x", "y"])
    del after["splits"]["train"]["features"]["x"]
    schema = compare(after, before, "v1")["schema"]
    assert schema == {"added": ["city"], "removed": ["x"], "changed": []}


def _kll_entry(numbers):
    """A numeric entry as versions written before value histograms stored it:
    a base64 KLL sketch (k = 200) and its rank error."""
    entry = FeatureStatistics.from_values("numeric", "float", len(numbers), numbers).to_json()
    section = entry["numeric"]
    kll = datasketches.kll_doubles_sketch(200)
    for number in numbers:
        kll.update(number)
    del section["relative_error"]
    section["rank_error"] = round(kll.normalized_rank_error(False), 6)
    section["sketch"] = base64.b64encode(kll.serialize()).decode("ascii")
    return entry


def test_drift_against_a_version_with_kll_sketches():
    rng = random.Random(4)
    old = _stats([rng.gauss(10, 2) for _ in range(20_000)], [0, 1, 2] * 100)
    old["splits"]["train"]["features"]["x"] = _kll_entry(
        [rng.gauss(10, 2) for _ in range(20_000)])
    same = _stats([rng.gauss(10, 2) for _ in range(20_000)], [0, 1, 2] * 100)
    moved = _stats([rng.gauss(10, 2) * 100 for _ in range(20_000)], [0, 1, 2] * 100)
    assert compare(same, old, "v1")["splits"]["train"]["features"]["x"]["value"] < 0.04
    assert compare(moved, old, "v1")["splits"]["train"]["features"]["x"]["value"] > 0.8
    # and the other way round (a version rolled back)
    assert compare(old, same, "v2")["splits"]["train"]["features"]["x"]["value"] < 0.04


def test_a_sketch_that_cannot_be_read_is_not_compared():
    before = _stats([1.0, 2.0, 3.0], [0, 1])
    before["splits"]["train"]["features"]["x"]["numeric"]["sketch"] = "AAAA"
    drift = compare(_stats([1.0, 2.0, 3.0], [0, 1]), before, "v1")
    assert "x" not in drift["splits"]["train"]["features"]
    results = check_gates([Gate("validation.features.x.max_js", "js", 0.1, "x")],
                          _stats([1.0], [0]), drift)
    assert results[0].passed and results[0].value is None
    assert "nothing to compare" in results[0].message


# --- NaN and infinities are part of the distribution ------------------------------------

from hypothesis import given, settings, strategies as st  # noqa: E402

_FINITE = st.lists(st.floats(-1e6, 1e6, width=32), min_size=1, max_size=200)


@settings(max_examples=60, deadline=None)
@given(values=_FINITE, share=st.one_of(st.floats(0.05, 0.99), st.just(1.0)),
       infinite=st.booleans(), repeat=st.integers(1, 5))
def test_values_turning_nan_or_infinite_drift_and_cross_their_gate(values, share, infinite,
                                                                   repeat):
    """The same finite values, a `share` of all values now NaN (or
    infinite): js is the divergence of the whole distributions, which with
    the finite part unchanged is (1 - s) log2((1 - s) / (1 - s/2)) + s,
    halved, plus log2(1 / (1 - s/2)), halved; max_nonfinite sees the
    share itself, without a previous version."""
    finite = values * repeat
    bad = max(1, round(share * len(finite) / (1 - share))) if share < 1 else len(finite)
    share = bad / (len(finite) + bad)
    before = {"format": "recordforge.stats/1", "splits": {"train": {
        "num_examples": len(finite), "features": {"x": FeatureStatistics.from_values(
            "numeric", "float", len(finite), finite).to_json()}}}}
    now = ([] if share == 1 else finite) + [math.inf if infinite else math.nan] * bad
    after = {"format": "recordforge.stats/1", "splits": {"train": {
        "num_examples": len(now), "features": {"x": FeatureStatistics.from_values(
            "numeric", "float", len(now), now).to_json()}}}}
    if share == 1:
        share = 1.0
    drift = compare(after, before, "v1")
    found = drift["splits"]["train"]["features"]["x"]
    kept = 1 - share
    expected = 0.5 * ((kept * math.log2(kept / (1 - share / 2)) if kept else 0) + share) \
        + 0.5 * math.log2(1 / (1 - share / 2))
    assert found["measure"] == "js" and found["value"] == pytest.approx(expected, abs=2e-6)
    assert found["nonfinite_share"] == pytest.approx(share, abs=1e-6)
    assert found["previous_nonfinite_share"] == 0
    limit = share / 2
    results = check_gates([Gate("validation.features.x.max_js", "js", expected / 2, "x"),
                           Gate("validation.features.x.max_nonfinite", "nonfinite", limit,
                                "x")], after, drift)
    assert [result.passed for result in results] == [False, False]
    assert results[1].value == pytest.approx(share)
    # the share gate needs no previous version
    alone = check_gates([Gate("validation.features.x.max_nonfinite", "nonfinite", limit, "x")],
                        after, compare(after, None, None))
    assert not alone[0].passed and alone[0].value == pytest.approx(share)
