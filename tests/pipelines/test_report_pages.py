"""The report of a build as a reader meets it: a failed build says so at
the top, timestamps read as dates in their unit, and drift is drawn as
the previous version against the current one (with generated statistics,
including a previous version's hostile ``stats.json``)."""

from __future__ import annotations

import html
import json
import math
import re
import textwrap

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recordforge.pipelines import cli
from recordforge.pipelines.publish.report_html import render_report
from recordforge.pipelines.publish.report_values import value_formatter

IN_PROCESS = ["--", "--direct_running_mode=in_memory"]
SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
NUMPY_UNITS = {"s": "s", "ms": "ms", "us": "us", "ns": "ns", "days": "D"}
# Years 1678 to 2261 in every unit: what datetime64[ns] holds, so numpy can check.
COUNTS = {unit: st.integers(-(2**63 - 1) // per, (2**63 - 1) // per) for unit, per in
          {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1, "days": 86400 * 10**9}.items()}
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=30)


def _manifest(features: dict | None = None) -> dict:
    return {"name": "things", "version": "2", "created": "2026-01-01T00:00:00Z",
            "compression": "NONE", "features": features or {"x": {"type": "int64", "shape": []}},
            "splits": {"train": {"num_examples": 10, "num_bytes": 100, "shards": []}},
            "dead_letter": {"num_rows": 0, "by_reason": {}}, "num_input_rows": 10}


def _numpy_iso(count: int, unit: str) -> str:
    text = np.datetime_as_string(np.datetime64(count, NUMPY_UNITS[unit]), unit=NUMPY_UNITS[unit])
    return text if unit == "days" else text + "Z"


# --- timestamps as dates -------------------------------------------------------------

@SETTINGS
@given(data=st.data(), unit=st.sampled_from(sorted(NUMPY_UNITS)))
def test_timestamp_values_read_as_dates_exact_to_the_unit(data, unit):
    count = data.draw(COUNTS[unit])
    assert value_formatter(unit)(count) == _numpy_iso(count, unit)


@SETTINGS
@given(data=st.data(), unit=st.sampled_from(sorted(NUMPY_UNITS)))
def test_a_timestamp_feature_s_statistics_show_dates(data, unit):
    low, high = sorted(data.draw(st.lists(COUNTS[unit], min_size=2, max_size=2)))
    entry = {"kind": "numeric", "type": "int64", "num_values": 3, "missing_fraction": 0.0,
             "numeric": {"min": low, "max": high, "mean": (low + high) / 2, "std": 1.0,
                         "quantiles": {"0.01": low, "0.5": low, "0.99": high},
                         "histogram": {"edges": [low, high], "fractions": [1.0]}}}
    stats = {"splits": {"train": {"features": {"when": entry}}}}
    features = {"when": {"type": "int64", "shape": [],
                         "timestamp": {"unit": unit, "timezone": "UTC"}}}
    page = render_report(_manifest(features), statistics=stats,
                         drift={"previous_version": None, "splits": {}, "gates": []})
    section = page[page.index("<h2 id='statistics'>"):]
    row = section[section.index("<td>when</td>"):]
    row = row[:row.index("</tr>")]
    assert f"min {_numpy_iso(low, unit)}" in row and f"max {_numpy_iso(high, unit)}" in row
    assert f">{_numpy_iso(low, unit)}</text>" in row  # the histogram's axis
    assert f"min {low:,} " not in row


def test_a_timestamp_beyond_what_dates_hold_stays_a_number():
    assert value_formatter("s")(10**15) == f"{10**15:,}"
    assert value_formatter("days")(float("nan")) == "nan"


# --- a failed build's banner ---------------------------------------------------------

GATES = st.lists(st.fixed_dictionaries({
    "key": st.sampled_from(["validation.max_row_change", "validation.features.x.max_js"]),
    "split": st.sampled_from(["train", "test"]), "passed": st.booleans(),
    "value": st.floats(0, 1), "limit": st.floats(0, 1), "message": TEXT}), max_size=14)


@SETTINGS
@given(gates=GATES)
def test_a_failed_build_says_so_at_the_top(gates):
    drift = {"previous_version": "1", "splits": {}, "gates": gates}
    page = render_report(_manifest(), statistics={"splits": {}}, drift=drift)
    failed = [gate for gate in gates if not gate["passed"]]
    if not failed:
        assert "Build failed" not in page
        return
    banner = page.index("Build failed")
    assert banner < page.index("<h2 id='splits'>")
    assert f"{len(failed):,} validation gate(s) failed; nothing was published" in page
    top = page[banner:page.index("<h2 id='splits'>")]
    for gate in failed[:10]:
        assert f"<li>{html.escape(gate['message'], quote=True)}</li>" in top


# --- drift as a chart ----------------------------------------------------------------

def _histogram_entry(edges, fractions):
    return {"kind": "numeric", "type": "float", "num_values": 10,
            "numeric": {"histogram": {"edges": edges, "fractions": fractions}}}


EDGES = st.lists(st.floats(-1e9, 1e9), min_size=2, max_size=12, unique=True).map(sorted)
SHARES = st.dictionaries(TEXT, st.integers(0, 50), min_size=1, max_size=15)
JSONISH = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | TEXT,
                       lambda inner: st.lists(inner, max_size=4)
                       | st.dictionaries(TEXT, inner, max_size=4), max_leaves=20)


@SETTINGS
@given(now_edges=EDGES, before_edges=EDGES, data=st.data(), now_counts=SHARES,
       before_counts=SHARES)
def test_drift_draws_previous_against_current(now_edges, before_edges, data, now_counts,
                                              before_counts):
    def fractions(edges):
        return data.draw(st.lists(st.floats(0, 1), min_size=len(edges) - 1,
                                  max_size=len(edges) - 1))

    def strings(counts):
        return {"kind": "string", "type": "bytes", "num_values": sum(counts.values()) or 1,
                "string": {"top_values": [{"value": v, "count": c} for v, c in counts.items()]}}

    current = {"splits": {"train": {"features": {
        "x": _histogram_entry(now_edges, fractions(now_edges)), "s": strings(now_counts)}}}}
    previous = {"splits": {"train": {"features": {
        "x": _histogram_entry(before_edges, fractions(before_edges)),
        "s": strings(before_counts)}}}}
    drift = {"previous_version": "1", "gates": [],
             "splits": {"train": {"num_examples": 10, "previous_num_examples": 7,
                                  "row_change": 0.43,
                                  "features": {"x": {"measure": "js", "value": 0.2},
                                               "s": {"measure": "linf", "value": 0.1}}}}}
    page = render_report(_manifest(), statistics=current, drift=drift, previous=previous)
    for chart in ("drift-examples", "drift-distances-train", "drift-train-x", "drift-train-s"):
        svg = re.search(rf'<svg[^>]*data-chart="{chart}".*?</svg>', page, re.S)
        assert svg, chart
        assert "previous" in svg.group(0) and ("current" in svg.group(0)
                                               or chart == "drift-distances-train")
    histogram = re.search(r'data-chart="drift-train-x".*?</svg>', page, re.S).group(0)
    assert histogram.count('class="bar previous"') == len(before_edges) - 1
    assert histogram.count('class="bar current"') == len(now_edges) - 1
    for number in re.findall(r'\s(?:x|y|width|height)="([^"]+)"', histogram):
        assert math.isfinite(float(number))


@SETTINGS
@given(previous=JSONISH, entry=JSONISH)
def test_a_hostile_previous_stats_json_never_breaks_the_report(previous, entry):
    current = {"splits": {"train": {"features": {"x": _histogram_entry([0, 1], [1.0])}}}}
    drift = {"previous_version": "1", "gates": [],
             "splits": {"train": {"num_examples": 1, "previous_num_examples": 1,
                                  "row_change": 0.0, "features": {}}}}
    for hostile in (previous, {"splits": {"train": {"features": {"x": entry}}}}):
        page = render_report(_manifest(), statistics=current, drift=drift, previous=hostile)
        assert "drift-examples" in page


# --- end to end: two builds, the second fails a drift gate ------------------------------

def test_a_build_failing_a_gate_opens_its_report_with_the_banner_and_charts(tmp_path, capsys):
    data = tmp_path / "rows.csv"
    config = tmp_path / "drifting.yaml"
    config.write_text(textwrap.dedent(f"""\
        name: drifting
        version: "1"
        source: {{type: csv, path: {data}}}
        features:
          v: {{type: float}}
          when: {{type: timestamp, unit: ms}}
        output: {{path: {tmp_path / 'out'}}}
        validation: {{features: {{v: {{max_js: 0.05}}}}}}
        """))
    data.write_text("v,when\n" + "".join(f"{i % 10},2024-03-0{1 + i % 9}T10:00:00.125Z\n"
                                         for i in range(200)))
    assert cli.main(["build", str(config), *IN_PROCESS]) == 0
    data.write_text("v,when\n" + "".join(f"{50 + i % 10},2024-03-01T10:00:00.125Z\n"
                                         for i in range(200)))
    assert cli.main(["build", str(config), "--set", 'version="2"', *IN_PROCESS]) == 1
    err = capsys.readouterr().err
    kept = re.search(r"the report of this build was kept at (\S+report\.html)", err).group(1)
    page = open(kept, encoding="utf-8").read()
    assert page.index("Build failed: 1 validation gate(s) failed; nothing was published") \
        < page.index("<h2 id='splits'>")
    assert 'data-chart="drift-train-v"' in page and 'class="bar previous"' in page
    assert "2024-03-01T10:00:00.125Z" in page
    stats = json.loads((tmp_path / "out" / "1" / "stats.json").read_text())
    assert stats["splits"]["train"]["features"]["when"]["numeric"]["min"] == 1709287200125
