"""The report's statistics sections: validation gates, drift from the previous version, and per-feature statistics.

`render_statistics(stats, drift, ...)` gives HTML (inline SVG, no
scripts) that `report.render_report` appends to the page;
`failure_banner(drift)` the banner that opens the page of a build whose
gates failed. Timestamp features are shown as ISO 8601 dates in their
unit (`report_values.value_formatter`), not as counts since 1970; the
drift section is `report_drift`'s. Every text is
escaped: feature names and top values come from the data.
"""

from __future__ import annotations

import html
import math
from typing import Any, Callable, Mapping, Sequence

from .report_drift import render_drift
from .report_values import number as _number
from .report_values import span, value_formatter

__all__ = ["failure_banner", "render_statistics"]

MAX_TOP_VALUES_SHOWN = 10
_BAR_WIDTH = 220
_AXIS_CHAR_WIDTH = 6.5  # px of a 12px axis label's character, about


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.2%}"


_MAX_FAILED_GATES_SHOWN = 10


# --- a failed build's banner --------------------------------------------------------------


def failure_banner(drift: Mapping[str, Any] | None) -> str:
    """The banner that opens the report of a build whose validation gates
    failed: that nothing was published and why (each failed gate's
    message); empty when no gate failed."""
    gates = (drift or {}).get("gates") if isinstance(drift, Mapping) else None
    failed = [gate for gate in gates or [] if isinstance(gate, Mapping) and not gate.get("passed")]
    if not failed:
        return ""
    items = "".join(f"<li>{_e(gate.get('message') or gate.get('key'))}</li>"
                    for gate in failed[:_MAX_FAILED_GATES_SHOWN])
    more = (f"<li>and {len(failed) - _MAX_FAILED_GATES_SHOWN:,} more (below)</li>"
            if len(failed) > _MAX_FAILED_GATES_SHOWN else "")
    return (f"<div class='banner' id='failed' role='alert'><strong>Build failed: "
            f"{len(failed):,} validation gate(s) failed; nothing was published.</strong>"
            f"<ul>{items}{more}</ul><p class='note'>This report, the statistics and the dead "
            "letters are kept under the output's .failed/ folder; <a href='#gates'>the "
            "gates</a> and <a href='#drift'>the drift</a> are below.</p></div>")


def _histogram_svg(chart_id: str, title: str, section: Mapping[str, Any],
                   shown: Callable[[Any], str] = _number) -> str:
    """Bars of the histogram's fractions between the exact min and max."""
    histogram = section.get("histogram")
    if not isinstance(histogram, Mapping) or not histogram.get("fractions"):
        return ""
    fractions = [float(f) for f in histogram["fractions"]]
    edges = histogram.get("edges") or []
    width, height, gap = _BAR_WIDTH, 48, 1
    step = width / len(fractions)
    top = max(fractions) or 1.0
    low_text, high_text = (shown(edges[0]), shown(edges[-1])) if edges else ("", "")
    # Long labels (dates) would overlap at the two ends: the last goes a line lower.
    second_line = (len(low_text) + len(high_text)) * _AXIS_CHAR_WIDTH > width - 8
    full = height + (26 if second_line else 14)
    parts = [f'<svg class="chart hist" data-chart="{_e(chart_id)}" role="img" '
             f'aria-label="{_e(title)}" width="{width}" height="{full}" '
             f'viewBox="0 0 {width} {full}" xmlns="http://www.w3.org/2000/svg">'
             f"<title>{_e(title)}</title>"]
    for i, fraction in enumerate(fractions):
        bar = height * fraction / top
        low = edges[i] if i < len(edges) else None
        high = edges[i + 1] if i + 1 < len(edges) else None
        parts.append(f'<rect class="bar" x="{i * step + gap:.2f}" y="{height - bar:.2f}" '
                     f'width="{max(step - 2 * gap, 0.5):.2f}" height="{bar:.2f}" '
                     f'fill="#3b6ea5"><title>[{_e(shown(low))}, {_e(shown(high))}): '
                     f"{fraction:.1%}</title></rect>")
    if edges:
        parts.append(f'<text x="0" y="{height + 12}" class="axis">{_e(low_text)}</text>'
                     f'<text x="{width}" y="{full - 2}" text-anchor="end" class="axis">'
                     f"{_e(high_text)}</text>")
    parts.append("</svg>")
    return "".join(parts)


def _top_values_svg(chart_id: str, title: str, top: Sequence[Mapping[str, Any]],
                    total: int) -> str:
    shown = list(top)[:MAX_TOP_VALUES_SHOWN]
    if not shown or not total:
        return ""
    row, label_w = 16, 110
    width, height = label_w + _BAR_WIDTH + 60, row * len(shown) + 4
    largest = max(item.get("count", 0) for item in shown) or 1
    parts = [f'<svg class="chart top" data-chart="{_e(chart_id)}" role="img" '
             f'aria-label="{_e(title)}" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">'
             f"<title>{_e(title)}</title>"]
    for i, item in enumerate(shown):
        value, count = str(item.get("value")), int(item.get("count", 0))
        y = 2 + i * row
        bar = _BAR_WIDTH * count / largest
        short = value if len(value) <= 16 else value[:15] + "…"
        parts.append(f'<text x="{label_w - 4}" y="{y + 11}" text-anchor="end" class="lbl">'
                     f"{_e(short)}<title>{_e(value)}</title></text>"
                     f'<rect class="bar" x="{label_w}" y="{y + 2}" width="{max(bar, 1):.2f}" '
                     f'height="{row - 4}" fill="#c07a2c"><title>{_e(value)}: {count:,}</title>'
                     f'</rect><text x="{label_w + bar + 4:.2f}" y="{y + 11}" class="val">'
                     f"{count / total:.1%}</text>")
    parts.append("</svg>")
    return "".join(parts)


def _spread(value: Any, unit: str | None) -> str:
    """The standard deviation: a number, or a length of time for a timestamp."""
    if unit is not None and isinstance(value, (int, float)) and not isinstance(value, bool) \
            and math.isfinite(value):
        return span(value, unit)
    return _number(value)


def _summary(entry: Mapping[str, Any], unit: str | None = None) -> str:
    kind = entry.get("kind")
    section = entry.get(kind) or {}
    if kind == "numeric":
        shown = value_formatter(unit)
        text = (f"min {_e(shown(section.get('min')))} · mean {_e(shown(section.get('mean')))}"
                f" · max {_e(shown(section.get('max')))} · std "
                f"{_e(_spread(section.get('std'), unit))} · distinct ≈ "
                f"{_number(section.get('distinct'))}")
        if section.get("nan") or section.get("inf"):
            text += f" · NaN {_number(section.get('nan'))} · inf {_number(section.get('inf'))}"
        quantiles = section.get("quantiles") or {}
        if quantiles:
            text += (f"<br>quantiles: p1 {_e(shown(quantiles.get('0.01')))} · p50 "
                     f"{_e(shown(quantiles.get('0.5')))} · p99 {_e(shown(quantiles.get('0.99')))}")
        return text
    if kind == "bytes":
        return (f"size: min {_number(section.get('min'))} · mean {_number(section.get('mean'))}"
                f" · max {_number(section.get('max'))} bytes · total "
                f"{_number(section.get('total_bytes'))} bytes")
    exact = "" if section.get("exact") else " (approximate)"
    return f"distinct {_number(section.get('distinct'))}{exact}"


def _chart(split: str, name: str, entry: Mapping[str, Any], unit: str | None = None) -> str:
    kind = entry.get("kind")
    section = entry.get(kind) or {}
    chart_id = f"feature-{split}-{name}"
    if kind in ("numeric", "bytes"):
        return _histogram_svg(chart_id, f"{name} in split {split}", section,
                              value_formatter(unit if kind == "numeric" else None))
    return _top_values_svg(chart_id, f"top values of {name} in split {split}",
                           section.get("top_values") or [], int(entry.get("num_values") or 0))


def _gates_section(gates: Sequence[Mapping[str, Any]]) -> list[str]:
    if not gates:
        return []
    failed = [gate for gate in gates if not gate.get("passed")]
    verdict = (f"<p class='bad'>{len(failed)} gate(s) failed: nothing was published.</p>"
               if failed else "<p class='ok'>every gate passed.</p>")
    rows = ["<table class='gates'><tr><th>gate</th><th>split</th><th>measured</th>"
            "<th>limit</th><th>result</th></tr>"]
    for gate in sorted(gates, key=lambda g: (bool(g.get("passed")), g.get("key", ""))):
        passed = gate.get("passed")
        value = gate.get("value")
        result = ("passed" if value is not None else "not checked") if passed else "FAILED"
        css = "ok" if passed else "bad"
        rows.append(f"<tr class='{css}'><td>{_e(gate.get('key'))}</td>"
                    f"<td>{_e(gate.get('split'))}</td><td class='n'>{_e(_number(value))}</td>"
                    f"<td class='n'>{_e(_number(gate.get('limit')))}</td>"
                    f"<td class='{css}' title='{_e(gate.get('message'))}'>{result}</td></tr>")
    rows.append("</table>")
    return ["<h2 id='gates'>Validation gates</h2>", verdict, "".join(rows)]


def _features_section(stats: Mapping[str, Any], units: Mapping[str, str]) -> list[str]:
    body = ["<h2 id='statistics'>Feature statistics</h2><p class='note'>Counts, min, max, "
            "mean and std are exact; quantiles and histograms come from exact counts in "
            "buckets of adaptive width (within their relative error), distinct counts from "
            "theta sketches.</p>"]
    for split, info in (stats.get("splits") or {}).items():
        body.append(f"<h3>{_e(split)}</h3>")
        rows = ["<table class='features'><tr><th>feature</th><th>kind</th><th>missing</th>"
                "<th>summary</th><th>distribution</th></tr>"]
        for name, entry in (info.get("features") or {}).items():
            unit = units.get(name)
            kind = f"{entry.get('kind')} ({entry.get('type')}" + (
                f", timestamp in {unit})" if unit else ")")
            rows.append(f"<tr><td>{_e(name)}</td><td>{_e(kind)}</td><td class='n'>"
                        f"{_e(_percent(entry.get('missing_fraction')))}</td>"
                        f"<td>{_summary(entry, unit)}</td>"
                        f"<td>{_chart(split, name, entry, unit)}</td></tr>")
        rows.append("</table>")
        body.append("".join(rows))
    return body


def render_statistics(stats: Mapping[str, Any] | None, drift: Mapping[str, Any] | None,
                      timestamps: Mapping[str, str] | None = None,
                      previous: Mapping[str, Any] | None = None) -> str:
    """The gates, drift and feature statistics sections (empty without
    stats). timestamps: feature -> unit (`timestamp_units`), shown as dates;
    previous: the previous version's stats.json, for the drift charts."""
    if not stats:
        return ""
    body: list[str] = []
    if drift is not None:
        body += _gates_section(drift.get("gates") or [])
        body += render_drift(drift, stats, previous, timestamps)
    body += _features_section(stats, timestamps or {})
    return "\n".join(body)
