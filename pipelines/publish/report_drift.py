"""The report's drift section: this version against the previous one, in charts and a table.

`render_drift(drift, current, previous, timestamps)` draws, per split, the
examples of both versions side by side, each feature's distance
(`schemas.drift`: L-infinity or Jensen-Shannon) against its gate's limit
when a gate sets one, and, when the previous version's ``stats.json`` is
given, each feature's distribution in both versions on one chart:
histograms (as densities, since the two versions' bins differ) or the
shares of the most frequent values. The previous version's statistics are
files from an earlier build, so anything of the wrong shape in them is
left out of the charts, never trusted. Inline SVG only; every text escaped.
"""

from __future__ import annotations

import html
import math
from typing import Any, Callable, Mapping, Sequence

from .report_values import number as _number
from .report_values import value_formatter

__all__ = ["render_drift"]

PREVIOUS_COLOR, CURRENT_COLOR = "#9a9a9a", "#3b6ea5"
MAX_VALUES_COMPARED = 10
_WIDTH, _LABEL_W, _BAR_W = 520, 140, 300


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _svg_open(chart_id: str, title: str, height: float) -> str:
    return (f'<svg class="chart drift" data-chart="{_e(chart_id)}" role="img" '
            f'aria-label="{_e(title)}" width="{_WIDTH}" height="{height:.0f}" '
            f'viewBox="0 0 {_WIDTH} {height:.0f}" xmlns="http://www.w3.org/2000/svg">'
            f"<title>{_e(title)}</title>")


def _legend(y: float) -> str:
    return (f'<rect x="{_LABEL_W}" y="{y:.0f}" width="10" height="10" fill="{PREVIOUS_COLOR}"/>'
            f'<text x="{_LABEL_W + 14}" y="{y + 9:.0f}" class="axis">previous</text>'
            f'<rect x="{_LABEL_W + 80}" y="{y:.0f}" width="10" height="10" '
            f'fill="{CURRENT_COLOR}"/><text x="{_LABEL_W + 94}" y="{y + 9:.0f}" '
            'class="axis">current</text>')


def _paired_bars(chart_id: str, title: str,
                 rows: Sequence[tuple[str, float | None, float | None]],
                 shown: Callable[[float], str]) -> str:
    """Two bars per row, previous above current: (label, previous, current)."""
    if not rows:
        return ""
    row_h = 26
    height = row_h * len(rows) + 22
    top = max([v for _, *pair in rows for v in pair if _finite(v)] or [0]) or 1
    parts = [_svg_open(chart_id, title, height)]
    for i, (label, before, now) in enumerate(rows):
        y = 4 + i * row_h
        short = label if len(label) <= 20 else label[:19] + "…"
        parts.append(f'<text x="{_LABEL_W - 6}" y="{y + 14}" text-anchor="end" class="lbl">'
                     f"{_e(short)}<title>{_e(label)}</title></text>")
        for offset, value, color, which in ((0, before, PREVIOUS_COLOR, "previous"),
                                            (11, now, CURRENT_COLOR, "current")):
            if not _finite(value):
                continue
            width = max(1.0, _BAR_W * value / top) if value > 0 else 0
            parts.append(f'<rect class="bar {which}" x="{_LABEL_W}" y="{y + offset}" '
                         f'width="{width:.2f}" height="10" fill="{color}"><title>{_e(label)} '
                         f"({which}): {_e(shown(value))}</title></rect>"
                         f'<text x="{_LABEL_W + width + 4:.2f}" y="{y + offset + 9}" '
                         f'class="val">{_e(shown(value))}</text>')
    parts.append(_legend(height - 14) + "</svg>")
    return "".join(parts)


# --- distributions of both versions --------------------------------------------------


def _histogram(entry: Any) -> tuple[list[float], list[float]] | None:
    """(edges, fractions) of a numeric or bytes entry, when well formed."""
    if not isinstance(entry, Mapping):
        return None
    section = entry.get(entry.get("kind"))
    histogram = section.get("histogram") if isinstance(section, Mapping) else None
    if not isinstance(histogram, Mapping):
        return None
    edges, fractions = histogram.get("edges"), histogram.get("fractions")
    if not (isinstance(edges, list) and isinstance(fractions, list) and fractions
            and len(edges) == len(fractions) + 1
            and all(_finite(v) for v in edges) and all(_finite(v) and v >= 0 for v in fractions)
            and all(a <= b for a, b in zip(edges, edges[1:]))):
        return None
    return [float(v) for v in edges], [float(v) for v in fractions]


def _overlaid_histograms(chart_id: str, title: str, before: tuple, now: tuple,
                         shown: Callable[[Any], str]) -> str:
    """Both versions' histograms on one axis, as densities (share per unit
    of value): the previous as grey outlines, the current as blue bars."""
    low = min(before[0][0], now[0][0])
    high = max(before[0][-1], now[0][-1])
    span = (high - low) or 1.0

    def densities(edges, fractions):
        # A bin of zero width (every value equal) is drawn 1% of the axis wide.
        return [(a, b, f / max(b - a, span / 100)) for a, b, f in zip(edges, edges[1:], fractions)]

    both = densities(*before) + densities(*now)
    top = max(d for _, _, d in both) or 1.0
    plot_h, left, plot_w = 70, 10, _WIDTH - 20
    parts = [_svg_open(chart_id, title, plot_h + 34)]

    def x_of(value: float) -> float:
        return left + plot_w * (value - low) / span

    for (edges, fractions), color, which, fill in ((before, PREVIOUS_COLOR, "previous", "none"),
                                                   (now, CURRENT_COLOR, "current", CURRENT_COLOR)):
        for a, b, density in densities(edges, fractions):
            height = plot_h * density / top
            width = max(x_of(b) - x_of(a), plot_w / 100)
            parts.append(f'<rect class="bar {which}" x="{x_of(a):.2f}" '
                         f'y="{4 + plot_h - height:.2f}" width="{width:.2f}" '
                         f'height="{height:.2f}" fill="{fill}" fill-opacity="0.55" '
                         f'stroke="{color}"><title>{which}: [{_e(shown(a))}, {_e(shown(b))})'
                         f"</title></rect>")
    parts.append(f'<text x="{left}" y="{plot_h + 16}" class="axis">{_e(shown(low))}</text>'
                 f'<text x="{left + plot_w}" y="{plot_h + 16}" text-anchor="end" class="axis">'
                 f"{_e(shown(high))}</text>")
    parts.append(_legend(plot_h + 20) + "</svg>")
    return "".join(parts)


def _shares(entry: Any) -> dict[str, float] | None:
    """value -> share of the values, of a vocabulary or string entry."""
    if not isinstance(entry, Mapping):
        return None
    section = entry.get(entry.get("kind"))
    total = entry.get("num_values")
    if not isinstance(section, Mapping) or not _finite(total) or total <= 0:
        return None
    counts = section.get("counts")
    if not isinstance(counts, Mapping):
        top = section.get("top_values")
        counts = {str(item.get("value")): item.get("count") for item in top
                  if isinstance(item, Mapping)} if isinstance(top, list) else {}
    return {str(value): count / total for value, count in counts.items()
            if _finite(count) and count >= 0}


def _compared_values(chart_id: str, title: str, before: dict, now: dict) -> str:
    ranked = sorted(set(before) | set(now),
                    key=lambda value: (-max(now.get(value, 0), before.get(value, 0)), value))
    rows = [(value, before.get(value, 0.0), now.get(value, 0.0))
            for value in ranked[:MAX_VALUES_COMPARED]]
    return _paired_bars(chart_id, title, rows, lambda share: f"{share:.1%}")


def _distribution_chart(split: str, name: str, entry: Any, old: Any,
                        unit: str | None) -> str:
    chart_id, title = f"drift-{split}-{name}", f"{name} in split {split}: previous and current"
    kind = entry.get("kind") if isinstance(entry, Mapping) else None
    if kind != (old.get("kind") if isinstance(old, Mapping) else None):
        return ""
    if kind in ("numeric", "bytes"):
        now, before = _histogram(entry), _histogram(old)
        if now is None or before is None:
            return ""
        return _overlaid_histograms(chart_id, title, before, now,
                                    value_formatter(unit if kind == "numeric" else None))
    now, before = _shares(entry), _shares(old)
    if not now or not before:
        return ""
    return _compared_values(chart_id, title, before, now)


# --- the section ----------------------------------------------------------------------


def _features(stats: Any, split: str) -> Mapping[str, Any]:
    splits = stats.get("splits") if isinstance(stats, Mapping) else None
    info = splits.get(split) if isinstance(splits, Mapping) else None
    features = info.get("features") if isinstance(info, Mapping) else None
    return features if isinstance(features, Mapping) else {}


def _limits(drift: Mapping[str, Any], split: str) -> dict[str, float]:
    """feature -> the limit its drift gate sets in `split`."""
    return {gate["feature"]: gate["limit"] for gate in drift.get("gates") or []
            if isinstance(gate, Mapping) and gate.get("split") == split
            and gate.get("measure") in ("js", "linf") and _finite(gate.get("limit"))
            and isinstance(gate.get("feature"), str)}


def _distances_chart(split: str, info: Mapping[str, Any], limits: Mapping[str, float]) -> str:
    """Each feature's distance, with its gate's limit as a red tick."""
    found = [(name, value) for name, value in
             ((name, (entry or {}).get("value")) for name, entry in
              (info.get("features") or {}).items()) if _finite(value)]
    if not found:
        return ""
    row_h = 18
    height = row_h * len(found) + 8
    top = max([v for _, v in found] + [limits.get(name, 0) for name, _ in found]) or 1.0
    title = f"distance from the previous version, split {split}"
    parts = [f"<p class='caption'>{_e(title)} (red tick: the gate's limit)</p>",
             _svg_open(f"drift-distances-{split}", title, height)]
    for i, (name, value) in enumerate(found):
        y = 4 + i * row_h
        measure = (info["features"][name] or {}).get("measure", "")
        width = max(1.0, _BAR_W * value / top) if value > 0 else 0
        limit = limits.get(name)
        color = "#b3261e" if limit is not None and value > limit else CURRENT_COLOR
        parts.append(f'<text x="{_LABEL_W - 6}" y="{y + 12}" text-anchor="end" class="lbl">'
                     f"{_e(name if len(name) <= 20 else name[:19] + '…')}<title>{_e(name)}"
                     f"</title></text><rect class=\"bar\" x=\"{_LABEL_W}\" y=\"{y + 2}\" "
                     f'width="{width:.2f}" height="12" fill="{color}">'
                     f"<title>{_e(name)}: {_e(measure)} {_e(_number(value))}</title></rect>"
                     f'<text x="{_LABEL_W + width + 4:.2f}" y="{y + 12}" class="val">'
                     f"{_e(measure)} {_e(_number(value))}</text>")
        if limit is not None:
            x = _LABEL_W + _BAR_W * limit / top
            parts.append(f'<line class="limit" x1="{x:.2f}" x2="{x:.2f}" y1="{y}" '
                         f'y2="{y + 16}" stroke="#b3261e" stroke-width="2"><title>gate limit '
                         f"{_e(_number(limit))}</title></line>")
    parts.append("</svg>")
    return "".join(parts)


def _schema_line(drift: Mapping[str, Any]) -> str:
    schema = drift.get("schema") or {}
    changes = [f"{label}: {', '.join(_e(name) for name in names)}" for label, names in
               (("added", schema.get("added")), ("removed", schema.get("removed"))) if names]
    changes += [f"changed: {_e(change.get('feature'))}" for change in schema.get("changed") or []]
    return f"<p>schema: {'; '.join(changes) if changes else 'unchanged'}</p>"


def _table(drift: Mapping[str, Any]) -> str:
    rows = ["<table class='drift'><tr><th>split</th><th>examples</th><th>previous</th>"
            "<th>change</th><th>feature distances</th></tr>"]
    for split, info in (drift.get("splits") or {}).items():
        distances = ", ".join(f"{_e(name)} {_e(found.get('measure'))} "
                              f"{_e(_number(found.get('value')))}"
                              for name, found in (info.get("features") or {}).items())
        change = info.get("row_change")
        rows.append(f"<tr><td>{_e(split)}</td><td class='n'>"
                    f"{_e(_number(info.get('num_examples')))}</td><td class='n'>"
                    f"{_e(_number(info.get('previous_num_examples')))}</td><td class='n'>"
                    f"{_e(f'{change:.2%}' if _finite(change) else '-')}</td>"
                    f"<td>{distances}</td></tr>")
    rows.append("</table>")
    return "".join(rows)


def render_drift(drift: Mapping[str, Any], current: Mapping[str, Any] | None = None,
                 previous: Mapping[str, Any] | None = None,
                 timestamps: Mapping[str, str] | None = None) -> list[str]:
    """The drift section's HTML parts. current/previous: the two versions'
    ``stats.json`` documents (previous None: the distributions are not
    drawn, the counts and distances still are)."""
    version = drift.get("previous_version")
    if version is None:
        return ["<h2 id='drift'>Drift</h2><p class='note'>No previous version with statistics "
                "to compare with.</p>"]
    splits = drift.get("splits") or {}
    body = [f"<h2 id='drift'>Drift from version {_e(version)}</h2>", _schema_line(drift),
            _paired_bars("drift-examples", "examples per split: previous and current",
                         [(split, info.get("previous_num_examples"), info.get("num_examples"))
                          for split, info in splits.items()], _number),
            _table(drift)]
    for split, info in splits.items():
        charts = [_distances_chart(split, info, _limits(drift, split))]
        before = _features(previous, split)
        for name, entry in _features(current, split).items():
            chart = _distribution_chart(split, name, entry, before[name],
                                        (timestamps or {}).get(name)) if name in before else ""
            if chart:
                charts.append(f"<p class='caption'>{_e(name)}: previous and current</p>{chart}")
        charts = [chart for chart in charts if chart]
        if charts:
            body.append(f"<h3>{_e(split)}</h3>" + "".join(charts))
    return body
