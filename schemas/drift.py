"""Drift and gates: a build's statistics against the previous version's, and the validation gates.

`compare(current, previous, previous_version)` turns two ``stats.json``
documents into ``drift.json``: the change in examples per split, the
schema change, and per feature a distance between the two distributions:
L-infinity between the value frequencies of vocabulary and string features
(the largest difference in any value's share of the values, as TFDV's drift
comparator), Jensen-Shannon divergence (base 2, 0 to 1) for numeric
features and byte lengths over bins the two share (the deciles of both
versions; masses from both versions' stored sketches: value histograms, or
the KLL sketch of a version written before them), NaN and infinity each a
bin of its own.

`check_gates(gates, stats, drift)` evaluates the configured `Gate`s and
returns one `GateResult` per gate and split, for a gate that compares one
per baseline (`baselines_of`). Nothing here knows about Beam or files; the
previous document was checked before (`stats.stored_statistics_problem`).
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, NamedTuple, Sequence

from .stats import sketch_from_json

__all__ = ["FORMAT", "MEASURES", "Gate", "GateResult", "baselines_of", "check_gates", "compare",
           "failure_message", "jensen_shannon", "linf_distance", "nonfinite_share"]

FORMAT = "recordforge.drift/1"
# measure -> (what it is, where it comes from)
MEASURES = {
    "row_change": "relative change in examples per split against the previous version",
    "linf": "L-infinity distance between value frequencies against the previous version",
    "js": "Jensen-Shannon divergence against the previous version",
    "missing": "fraction of the split's examples without the feature",
    "nonfinite": "fraction of a numeric feature's values that are NaN or infinite",
}
# Measures of the build alone; the others compare with a baseline.
_OF_THIS_BUILD = ("missing", "nonfinite")
# Ranks whose quantiles (of both versions) make the shared bins.
_BIN_RANKS = tuple(i / 10 for i in range(1, 10))


class Gate(NamedTuple):
    """One validation gate: `measure` (a key of MEASURES) must not exceed
    `limit` in any split. feature: None for dataset-wide measures
    (row_change). key: the config key that set it, for messages."""

    key: str
    measure: str
    limit: float
    feature: str | None = None


class GateResult(NamedTuple):
    """A gate evaluated in one split (against one baseline: its version,
    for gates that compare): passed, the measured value (None when it
    cannot be measured: no baseline or an unusable one, a new split or
    feature), and a sentence saying so."""

    gate: Gate
    split: str
    value: float | None
    passed: bool
    message: str
    baseline: str | None = None


# --- distances ---------------------------------------------------------------------


def linf_distance(a: Mapping[Any, float], b: Mapping[Any, float],
                  total_a: float | None = None, total_b: float | None = None) -> float:
    """max over values of |a[v] / total_a - b[v] / total_b|, a and b mapping
    value -> count (totals default to the sums of the counts; larger totals
    stand for values not listed)."""
    total_a = sum(a.values()) if total_a is None else total_a
    total_b = sum(b.values()) if total_b is None else total_b
    if not total_a or not total_b:
        return 0.0 if not total_a and not total_b else 1.0
    return max((abs(a.get(value, 0) / total_a - b.get(value, 0) / total_b)
                for value in set(a) | set(b)), default=0.0)


def jensen_shannon(p: Sequence[float], q: Sequence[float]) -> float:
    """Jensen-Shannon divergence (log base 2, 0..1) of two distributions over the same bins."""
    total_p, total_q = sum(p), sum(q)
    if total_p <= 0 or total_q <= 0:
        return 0.0 if total_p <= 0 and total_q <= 0 else 1.0
    divergence = 0.0
    for x, y in zip(p, q):
        x, y = x / total_p, y / total_q
        m = (x + y) / 2
        if x > 0:
            divergence += x / 2 * math.log2(x / m)
        if y > 0:
            divergence += y / 2 * math.log2(y / m)
    return min(1.0, max(0.0, divergence))


def _value_counts(entry: Mapping[str, Any]) -> tuple[dict[str, float], bool] | None:
    """value -> count of a vocabulary or string feature's entry, and whether exact."""
    section = entry.get(entry.get("kind"))
    if not isinstance(section, Mapping):
        return None
    if entry.get("kind") == "vocabulary" and isinstance(section.get("counts"), Mapping):
        return dict(section["counts"]), True
    top = section.get("top_values")
    if not isinstance(top, list):
        return None
    counts = {item["value"]: item["count"] for item in top
              if isinstance(item, Mapping) and "value" in item}
    # Values beyond the listed ones share what is left, as one "other".
    rest = entry.get("num_values", 0) - sum(counts.values())
    if rest > 0:
        counts[None] = rest
    return counts, bool(section.get("exact"))


def _value_shares(entry: Mapping[str, Any]) -> tuple[int, int, int]:
    """(finite values, NaN, infinities) of a numeric or bytes entry: the
    parts of its value distribution (a byte length is always finite)."""
    section = entry.get(entry.get("kind"))
    if entry.get("kind") == "bytes" or not isinstance(section, Mapping):
        return entry.get("num_values") or 0, 0, 0
    return section.get("count") or 0, section.get("nan") or 0, section.get("inf") or 0


def _numeric_js(entry: Mapping[str, Any], previous: Mapping[str, Any]) -> float | None:
    """Jensen-Shannon divergence of the whole value distributions: the
    finite values over bins both versions share (the deciles of both), and
    NaN and infinity each a bin of its own, so a feature turning NaN moves
    it as much as one whose values move. None when a version holds finite
    values but no sketch of them (nothing to bin them by)."""
    kind = entry.get("kind")
    sides = []
    for version in (entry, previous):
        shares = _value_shares(version)
        sketch = sketch_from_json(version.get(kind)) if shares[0] else None
        if shares[0] and (sketch is None or sketch.is_empty()):
            return None
        sides.append((sketch, shares))
    edges = sorted({edge for sketch, _ in sides if sketch is not None
                    for edge in sketch.get_quantiles(list(_BIN_RANKS))})
    masses = []
    for sketch, (finite, nan, inf) in sides:
        # get_pmf bins: (-inf, e0), [e0, e1), ..., [e_last, inf)
        body = sketch.get_pmf(edges) if sketch is not None else [0.0] * (len(edges) + 1)
        masses.append([share * finite for share in body] + [nan, inf])
    return jensen_shannon(*masses)


def nonfinite_share(entry: Mapping[str, Any]) -> float | None:
    """The share of a numeric feature's values that are NaN or infinite
    (0 for int64), None when it holds no values."""
    finite, nan, inf = _value_shares(entry)
    total = finite + nan + inf
    return (nan + inf) / total if total else None


def _feature_drift(entry: Mapping[str, Any], previous: Mapping[str, Any]) -> dict | None:
    kind = entry.get("kind")
    if kind != previous.get("kind"):
        return None
    if kind in ("vocabulary", "string"):
        mine, theirs = _value_counts(entry), _value_counts(previous)
        if mine is None or theirs is None:
            return None
        # "other" is not one value: it is left out of the comparison.
        a = {k: v for k, v in mine[0].items() if k is not None}
        b = {k: v for k, v in theirs[0].items() if k is not None}
        value = linf_distance(a, b, entry.get("num_values") or sum(mine[0].values()),
                              previous.get("num_values") or sum(theirs[0].values()))
        return {"measure": "linf", "value": round(value, 6), "exact": mine[1] and theirs[1]}
    value = _numeric_js(entry, previous)
    if value is None or not math.isfinite(value):
        return None
    found = {"measure": "js", "value": round(value, 6), "exact": False}
    if kind == "numeric" and entry.get("type") == "float":
        share, before = nonfinite_share(entry), nonfinite_share(previous)
        found["nonfinite_share"] = None if share is None else round(share, 6)
        found["previous_nonfinite_share"] = None if before is None else round(before, 6)
    return found


# --- the comparison ----------------------------------------------------------------


def _schema(stats: Mapping[str, Any]) -> dict[str, tuple]:
    found: dict[str, tuple] = {}
    for split in (stats.get("splits") or {}).values():
        for name, entry in (split.get("features") or {}).items():
            found.setdefault(name, (entry.get("kind"), entry.get("type")))
    return found


def compare(current: Mapping[str, Any], previous: Mapping[str, Any] | None,
            previous_version: str | None) -> dict:
    """The ``drift.json`` document of `current` against `previous` (both
    ``stats.json`` documents; previous None when there is no previous
    version with statistics)."""
    document: dict[str, Any] = {"format": FORMAT, "previous_version": previous_version,
                                "splits": {}, "schema": None}
    if previous is None:
        for split, info in (current.get("splits") or {}).items():
            document["splits"][split] = {"num_examples": info.get("num_examples"),
                                         "previous_num_examples": None, "row_change": None,
                                         "features": {}}
        return document
    mine, theirs = _schema(current), _schema(previous)
    document["schema"] = {
        "added": sorted(set(mine) - set(theirs)),
        "removed": sorted(set(theirs) - set(mine)),
        "changed": [{"feature": name, "from": {"kind": theirs[name][0], "type": theirs[name][1]},
                     "to": {"kind": mine[name][0], "type": mine[name][1]}}
                    for name in sorted(set(mine) & set(theirs)) if mine[name] != theirs[name]],
    }
    document["removed_splits"] = sorted(set(previous.get("splits") or {})
                                        - set(current.get("splits") or {}))
    for split, info in (current.get("splits") or {}).items():
        before = (previous.get("splits") or {}).get(split)
        count = info.get("num_examples")
        old = before.get("num_examples") if before else None
        change = (abs(count - old) / old) if old else None
        features = {}
        if before:
            for name, entry in (info.get("features") or {}).items():
                old_entry = (before.get("features") or {}).get(name)
                if old_entry is not None:
                    drift = _feature_drift(entry, old_entry)
                    if drift is not None:
                        features[name] = drift
        document["splits"][split] = {"num_examples": count, "previous_num_examples": old,
                                     "row_change": None if change is None else round(change, 6),
                                     "features": features}
    return document


# --- gates -------------------------------------------------------------------------


def _entry(stats: Mapping[str, Any], split: str, feature: str | None) -> Mapping | None:
    return ((stats.get("splits") or {}).get(split, {}).get("features") or {}).get(feature)


def _measure_now(gate: Gate, split: str, stats: Mapping[str, Any]) -> tuple[float | None, str]:
    """(value, why it is None) of a measure of this build alone."""
    entry = _entry(stats, split, gate.feature)
    if entry is None:
        return None, f"feature {gate.feature!r} has no statistics"
    if gate.measure == "missing":
        return entry.get("missing_fraction") or 0.0, ""
    share = nonfinite_share(entry)
    return (share, "") if share is not None else (None, f"feature {gate.feature!r} holds no "
                                                  "values")


def _measure_against(gate: Gate, split: str, comparison: Mapping[str, Any]
                     ) -> tuple[float | None, str]:
    """(value, why it is None) of a measure against one baseline."""
    split_drift = (comparison.get("splits") or {}).get(split) or {}
    if gate.measure == "row_change":
        if split_drift.get("previous_num_examples") is None:
            return None, f"split {split!r} is new"
        if split_drift.get("row_change") is None:
            return None, f"split {split!r} held no examples in the baseline"
        return split_drift.get("row_change"), ""
    found = (split_drift.get("features") or {}).get(gate.feature)
    if found is None or found.get("measure") != gate.measure:
        return None, f"feature {gate.feature!r} has nothing to compare in the baseline"
    return found.get("value"), ""


def baselines_of(drift: Mapping[str, Any]) -> list[tuple[str | None, Mapping | None, str]]:
    """(version, comparison or None, why None) for each baseline of a
    ``drift.json`` document: its ``baselines`` list (each usable one's
    comparison is the document itself, then ``earlier`` in order), or
    without one the single comparison `compare` made."""
    listed = drift.get("baselines")
    if listed is None:
        if drift.get("previous_version") is None:
            return [(None, None, "no previous version with statistics to compare with")]
        return [(drift.get("previous_version"), drift, "")]
    if not listed:
        return [(None, None, "no published version to compare with")]
    comparisons = iter([drift, *(drift.get("earlier") or [])])
    return [(item.get("version"), None, f"the baseline is unusable: {item['problem']}")
            if item.get("problem") else (item.get("version"), next(comparisons), "")
            for item in listed]


def check_gates(gates: Iterable[Gate], stats: Mapping[str, Any],
                drift: Mapping[str, Any]) -> list[GateResult]:
    """Every gate in every split of `stats`, in gate then split order, a
    gate that compares once per baseline (`baselines_of`). A gate that
    cannot be measured (no baseline, an unusable one, a new split or
    feature) passes and says why."""
    results = []
    splits = list((stats.get("splits") or {}).keys())
    baselines = baselines_of(drift)
    for gate in gates:
        for split in splits:
            where = f"split {split!r}" + (f", feature {gate.feature!r}" if gate.feature else "")
            if gate.measure in _OF_THIS_BUILD:
                results.append(_result(gate, split, where, *_measure_now(gate, split, stats)))
                continue
            for version, comparison, why in baselines:
                if comparison is not None:
                    value, why = _measure_against(gate, split, comparison)
                    where_against = f"{where}, against version {version!r}"
                else:
                    value, where_against = None, where
                results.append(_result(gate, split, where_against, value, why, version))
    return results


def _result(gate: Gate, split: str, where: str, value: float | None, why: str,
            baseline: str | None = None) -> GateResult:
    if value is None:
        return GateResult(gate, split, None, True, f"{gate.key}: not checked in {where}: {why}",
                          baseline)
    passed = value <= gate.limit
    verb = "is within" if passed else "exceeds"
    return GateResult(gate, split, value, passed, (
        f"{gate.key}: {where}: {gate.measure} = {value:.4g} {verb} the limit {gate.limit:g}"),
        baseline)


def failure_message(results: Sequence[GateResult]) -> str | None:
    """One message naming every failed gate with its measured value, or None."""
    failed = [result for result in results if not result.passed]
    if not failed:
        return None
    lines = [f"build failed: {len(failed)} validation gate(s) crossed; nothing was published"]
    lines += [f"  {result.message}" for result in failed]
    lines.append("  (relax a gate for one run with --set "
                 f"{failed[0].gate.key}=<limit>, or null to turn it off)")
    return "\n".join(lines)
