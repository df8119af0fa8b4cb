"""A feature's entry of stats.json: its FeatureStatistics rendered (counts, mean and std, quantiles, histogram, top values), and the stored sketch read back."""

from __future__ import annotations

import base64
import math
from fractions import Fraction
from typing import Any, Mapping

import datasketches

from .distinct import distinct_estimate
from .frequent import TOP_VALUES, top_values
from .histogram import ValueHistogram
from .sums import SHIFT

__all__ = ["HISTOGRAM_BINS", "QUANTILE_RANKS", "feature_entry", "quantile_sections",
           "sketch_from_json"]

QUANTILE_RANKS = (0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99)
HISTOGRAM_BINS = 10


def feature_entry(stats) -> dict:
    """The ``stats.json`` entry of a feature's `FeatureStatistics` (docs/statistics.md)."""
    entry: dict[str, Any] = {
        "kind": stats.kind, "type": stats.stored, "examples": stats.rows,
        "present": stats.present, "missing": stats.rows - stats.present,
        "missing_fraction": _ratio(stats.rows - stats.present, stats.rows),
        "num_values": stats.num_values,
    }
    if stats.is_list:
        entry["values_per_example"] = {
            "min": stats.min_count, "max": stats.max_count,
            "mean": _ratio(stats.num_values, stats.present)}
    entry[stats.kind] = _SECTIONS[stats.kind](stats)
    return entry


def _json_numeric(stats) -> dict:
    section: dict[str, Any] = {"count": stats.finite, "min": stats.low, "max": stats.high,
                               "mean": None, "std": None}
    if stats.finite:
        section["mean"] = float(Fraction(stats.sum, stats.finite << SHIFT))
        variance = Fraction(stats.finite * stats.sum_squares * (1 << SHIFT) - stats.sum ** 2,
                            (stats.finite ** 2) << (2 * SHIFT))
        section["std"] = math.sqrt(max(0.0, float(variance)))
        if stats.stored == "int64":
            section["sum"] = stats.sum >> SHIFT
    if stats.stored == "float":
        section["nan"], section["inf"] = stats.nan, stats.inf
    section["distinct"] = distinct_estimate(stats.theta)
    section.update(quantile_sections(stats.histogram, stats.low, stats.high, stats.finite))
    return section


def _json_vocabulary(stats) -> dict:
    counts = stats.labels.tolist()
    ranked = sorted(((count, label) for label, count in zip(stats.vocabulary, counts)
                     if count), key=lambda item: (-item[0], item[1]))
    return {"distinct": sum(1 for count in counts if count),
            "vocabulary_size": len(stats.vocabulary),
            "counts": dict(zip(stats.vocabulary, counts)),
            "top_values": [{"value": label, "count": count}
                           for count, label in ranked[:TOP_VALUES]],
            "exact": True}


def _json_string(stats) -> dict:
    top, exact = top_values(stats.frequent)
    return {"distinct": distinct_estimate(stats.theta), "top_values": top, "exact": exact}


def _json_bytes(stats) -> dict:
    section: dict[str, Any] = {"total_bytes": stats.sum, "min": stats.low, "max": stats.high,
                               "mean": _ratio(stats.sum, stats.num_values)}
    section.update(quantile_sections(stats.histogram, stats.low, stats.high,
                                      stats.num_values))
    return section


_SECTIONS = {"numeric": _json_numeric, "vocabulary": _json_vocabulary, "string": _json_string,
             "bytes": _json_bytes}


def _ratio(numerator: int, denominator: int) -> float | None:
    return numerator / denominator if denominator else None


def quantile_sections(histogram: ValueHistogram | None, low, high, count: int) -> dict:
    """quantiles (ends exact), histogram (equal-width bins between the exact
    min and max) and relative error, from the value histogram, which is
    stored too."""
    if histogram is None or not count:
        return {"quantiles": {}, "histogram": None, "relative_error": None}
    quantiles = {f"{rank:g}": value for rank, value in
                 zip(QUANTILE_RANKS, histogram.get_quantiles(list(QUANTILE_RANKS)))}
    quantiles = {"0": low, **quantiles, "1": high}
    if high > low:
        width = (high - low) / HISTOGRAM_BINS
        inner = [low + width * i for i in range(1, HISTOGRAM_BINS)]
        edges = [low, *inner, high]
        masses = histogram.get_pmf(inner)  # (-inf, e1), [e1, e2), ..., [e9, inf)
    else:
        edges, masses = [low, high], [1.0]
    return {"quantiles": quantiles,
            "histogram": {"edges": edges, "fractions": [round(m, 6) for m in masses]},
            "relative_error": histogram.relative_error,
            "sketch": base64.b64encode(histogram.serialize()).decode("ascii")}


def sketch_from_json(section: Mapping[str, Any]):
    """The quantile sketch stored in a numeric or bytes section of
    stats.json, or None: a `ValueHistogram`, or the KLL sketch
    (``datasketches.kll_doubles_sketch``) that versions written before it
    stored. Both answer `get_quantiles` and `get_pmf`."""
    data = section.get("sketch") if isinstance(section, Mapping) else None
    if not isinstance(data, str):
        return None
    try:
        raw = base64.b64decode(data, validate=True)
    except ValueError:
        return None
    for kind in (ValueHistogram, datasketches.kll_doubles_sketch):
        try:
            return kind.deserialize(raw)
        except Exception:  # a damaged or foreign sketch is no sketch
            continue
    return None
