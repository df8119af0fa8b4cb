"""The report's statistics sections: validation gates, drift from the previous version, and per-feature statistics.

`render_statistics(stats, drift, gates)` gives HTML (inline SVG, no
scripts) that `report.render_report` appends to the page. Every text is
escaped: feature names and top values come from the data.
"""

from __future__ import annotations

import html
from typing import Any, Mapping, Sequence

__all__ = ["render_statistics"]

MAX_TOP_VALUES_SHOWN = 10
_BAR_WIDTH = 220


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _number(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.2%}"


def _histogram_svg(chart_id: str, title: str, section: Mapping[str, Any]) -> str:
    """Bars of the histogram's fractions between the exact min and max."""
    histogram = section.get("histogram")
    if not isinstance(histogram, Mapping) or not histogram.get("fractions"):
        return ""
    fractions = [float(f) for f in histogram["fractions"]]
    edges = histogram.get("edges") or []
    width, height, gap = _BAR_WIDTH, 48, 1
    step = width / len(fractions)
    top = max(fractions) or 1.0
    parts = [f'<svg class="chart hist" data-chart="{_e(chart_id)}" role="img" '
             f'aria-label="{_e(title)}" width="{width}" height="{height + 14}" '
             f'viewBox="0 0 {width} {height + 14}" xmlns="http://www.w3.org/2000/svg">'
             f"<title>{_e(title)}</title>"]
    for i, fraction in enumerate(fractions):
        bar = height * fraction / top
        low = edges[i] if i < len(edges) else None
        high = edges[i + 1] if i + 1 < len(edges) else None
        parts.append(f'<rect class="bar" x="{i * step + gap:.2f}" y="{height - bar:.2f}" '
                     f'width="{max(step - 2 * gap, 0.5):.2f}" height="{bar:.2f}" '
                     f'fill="#3b6ea5"><title>[{_e(_number(low))}, {_e(_number(high))}): '
                     f"{fraction:.1%}</title></rect>")
    if edges:
        parts.append(f'<text x="0" y="{height + 12}" class="axis">{_e(_number(edges[0]))}</text>'
                     f'<text x="{width}" y="{height + 12}" text-anchor="end" class="axis">'
                     f"{_e(_number(edges[-1]))}</text>")
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


def _summary(entry: Mapping[str, Any]) -> str:
    kind = entry.get("kind")
    section = entry.get(kind) or {}
    if kind == "numeric":
        text = (f"min {_number(section.get('min'))} · mean {_number(section.get('mean'))} · "
                f"max {_number(section.get('max'))} · std {_number(section.get('std'))} · "
                f"distinct ≈ {_number(section.get('distinct'))}")
        if section.get("nan") or section.get("inf"):
            text += f" · NaN {_number(section.get('nan'))} · inf {_number(section.get('inf'))}"
        quantiles = section.get("quantiles") or {}
        if quantiles:
            text += (f"<br>quantiles: p1 {_number(quantiles.get('0.01'))} · p50 "
                     f"{_number(quantiles.get('0.5'))} · p99 {_number(quantiles.get('0.99'))}")
        return text
    if kind == "bytes":
        return (f"size: min {_number(section.get('min'))} · mean {_number(section.get('mean'))}"
                f" · max {_number(section.get('max'))} bytes · total "
                f"{_number(section.get('total_bytes'))} bytes")
    exact = "" if section.get("exact") else " (approximate)"
    return f"distinct {_number(section.get('distinct'))}{exact}"


def _chart(split: str, name: str, entry: Mapping[str, Any]) -> str:
    kind = entry.get("kind")
    section = entry.get(kind) or {}
    chart_id = f"feature-{split}-{name}"
    if kind in ("numeric", "bytes"):
        return _histogram_svg(chart_id, f"{name} in split {split}", section)
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


def _drift_section(drift: Mapping[str, Any]) -> list[str]:
    previous = drift.get("previous_version")
    if previous is None:
        return ["<h2 id='drift'>Drift</h2><p class='note'>No previous version with statistics "
                "to compare with.</p>"]
    body = [f"<h2 id='drift'>Drift from version {_e(previous)}</h2>"]
    schema = drift.get("schema") or {}
    changes = [f"{label}: {', '.join(_e(name) for name in names)}" for label, names in
               (("added", schema.get("added")), ("removed", schema.get("removed"))) if names]
    changes += [f"changed: {_e(change.get('feature'))}" for change in schema.get("changed") or []]
    body.append(f"<p>schema: {'; '.join(changes) if changes else 'unchanged'}</p>")
    rows = ["<table class='drift'><tr><th>split</th><th>examples</th><th>previous</th>"
            "<th>change</th><th>feature distances</th></tr>"]
    for split, info in (drift.get("splits") or {}).items():
        distances = ", ".join(f"{_e(name)} {_e(found.get('measure'))} "
                              f"{_e(_number(found.get('value')))}"
                              for name, found in (info.get("features") or {}).items())
        rows.append(f"<tr><td>{_e(split)}</td><td class='n'>"
                    f"{_e(_number(info.get('num_examples')))}</td><td class='n'>"
                    f"{_e(_number(info.get('previous_num_examples')))}</td><td class='n'>"
                    f"{_e(_percent(info.get('row_change')))}</td><td>{distances}</td></tr>")
    rows.append("</table>")
    body.append("".join(rows))
    return body


def _features_section(stats: Mapping[str, Any]) -> list[str]:
    body = ["<h2 id='statistics'>Feature statistics</h2><p class='note'>Counts, min, max, "
            "mean and std are exact; quantiles and histograms come from exact counts in "
            "buckets of adaptive width (within their relative error), distinct counts from "
            "theta sketches.</p>"]
    for split, info in (stats.get("splits") or {}).items():
        body.append(f"<h3>{_e(split)}</h3>")
        rows = ["<table class='features'><tr><th>feature</th><th>kind</th><th>missing</th>"
                "<th>summary</th><th>distribution</th></tr>"]
        for name, entry in (info.get("features") or {}).items():
            rows.append(f"<tr><td>{_e(name)}</td><td>{_e(entry.get('kind'))} "
                        f"({_e(entry.get('type'))})</td><td class='n'>"
                        f"{_e(_percent(entry.get('missing_fraction')))}</td>"
                        f"<td>{_summary(entry)}</td><td>{_chart(split, name, entry)}</td></tr>")
        rows.append("</table>")
        body.append("".join(rows))
    return body


def render_statistics(stats: Mapping[str, Any] | None, drift: Mapping[str, Any] | None
                      ) -> str:
    """The gates, drift and feature statistics sections (empty without stats)."""
    if not stats:
        return ""
    body: list[str] = []
    if drift is not None:
        body += _gates_section(drift.get("gates") or [])
        body += _drift_section(drift)
    body += _features_section(stats)
    return "\n".join(body)
