"""The build report's page: `report.html` as self-contained HTML, from the manifest and samples.

`render_report` turns what `report` gathered (the manifest, label counts,
thumbnails, dead-letter samples, throughput) into one page with inline CSS
and inline SVG charts only: no scripts, no network, so it opens from a
bucket or a mail attachment alike. Everything shown comes from the data,
which may be hostile (file names, labels, dead-letter rows): every text is
HTML-escaped, and images are never embedded as given: each is decoded by
Pillow under a pixel cap and re-encoded as a small PNG/JPEG thumbnail
(`thumbnail_data_uri`).
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
from typing import Any, Mapping, Sequence

from ..progress import describe_inputs, human_bytes
from .report_duplicates import duplicates_banner, render_duplicates
from .report_statistics import failure_banner, render_statistics
from .report_values import timestamp_units

__all__ = ["render_report", "thumbnail_data_uri"]

THUMBNAIL_SIDE = 96
MAX_LABELS_SHOWN = 40
MAX_SAMPLE_CHARS = 1500
_MAX_THUMBNAIL_SOURCE_PIXELS = 50_000_000


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def thumbnail_data_uri(data: bytes, side: int = THUMBNAIL_SIDE) -> str | None:
    """A ``data:`` URI of a small thumbnail of image `data`, re-encoded by us;
    None when Pillow cannot read it (or it is implausibly large)."""
    from PIL import Image  # only image datasets pay for Pillow here

    try:
        with Image.open(io.BytesIO(data)) as im:
            if im.width * im.height > _MAX_THUMBNAIL_SOURCE_PIXELS:
                return None
            im.draft("RGB", (side * 2, side * 2))  # JPEG: decode at a reduced scale
            im = im.convert("RGBA" if im.mode in ("RGBA", "LA", "P") else "RGB")
            im.thumbnail((side, side))
            out = io.BytesIO()
            if im.mode == "RGBA":
                im.save(out, format="PNG", optimize=True)
                mime = "image/png"
            else:
                im.save(out, format="JPEG", quality=80)
                mime = "image/jpeg"
    except Exception:  # noqa: BLE001 - any unreadable image is simply not shown
        return None
    return f"data:{mime};base64,{base64.b64encode(out.getvalue()).decode('ascii')}"


def _hbar_chart(chart_id: str, title: str, items: Sequence[tuple[str, float, str]],
                color: str = "#3b6ea5") -> str:
    """Horizontal bars: (label, value, value text) per row."""
    if not items:
        return ""
    row_h, label_w, bar_w, text_w = 22, 180, 360, 110
    width = label_w + bar_w + text_w
    height = row_h * len(items) + 10
    top = max(v for _, v, _ in items) or 1
    parts = [f'<p class="caption">{_e(title)}</p>'
             f'<svg class="chart hbar" data-chart="{_e(chart_id)}" role="img" '
             f'aria-label="{_e(title)}" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">',
             f"<title>{_e(title)}</title>"]
    for i, (label, value, text) in enumerate(items):
        y = 5 + i * row_h
        w = max(1.0, bar_w * value / top) if value > 0 else 0
        short = label if len(label) <= 26 else label[:25] + "…"
        parts.append(f'<text x="{label_w - 6}" y="{y + 15}" text-anchor="end" '
                     f'class="lbl">{_e(short)}<title>{_e(label)}</title></text>')
        parts.append(f'<rect class="bar" x="{label_w}" y="{y + 3}" width="{w:.2f}" '
                     f'height="{row_h - 6}" fill="{color}"><title>{_e(label)}: {_e(text)}'
                     f"</title></rect>")
        parts.append(f'<text x="{label_w + w + 6:.2f}" y="{y + 15}" class="val">{_e(text)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _shard_chart(split: str, shards: Sequence[Mapping[str, Any]], shard_size: int | None) -> str:
    """One bar per shard (bytes), with the split's mean and the ±10% band."""
    if not shards:
        return ""
    width, height, left, bottom, top_pad = 640, 180, 64, 24, 12
    plot_w, plot_h = width - left - 10, height - bottom - top_pad
    sizes = [int(s.get("num_bytes", 0)) for s in shards]
    mean = sum(sizes) / len(sizes)
    # The target line is drawn only when it is near the bars: a split far
    # smaller than shard_size would otherwise show flat, unreadable bars.
    if shard_size and shard_size > 1.5 * max(sizes):
        shard_size = None
    top = max(max(sizes), mean * 1.1, shard_size * 1.1 if shard_size else 0) or 1
    step = plot_w / len(sizes)

    def y_of(v: float) -> float:
        return top_pad + plot_h * (1 - v / top)

    parts = [f'<svg class="chart shards" data-chart="shard-sizes-{_e(split)}" role="img" '
             f'aria-label="shard sizes of split {_e(split)}" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">',
             f"<title>shard sizes of split {_e(split)}</title>",
             f'<rect class="band" x="{left}" y="{y_of(mean * 1.1):.2f}" width="{plot_w}" '
             f'height="{y_of(mean * 0.9) - y_of(mean * 1.1):.2f}" fill="#e3ecd9">'
             f"<title>mean ±10%</title></rect>"]
    for i, (shard, size) in enumerate(zip(shards, sizes)):
        x = left + i * step
        parts.append(f'<rect class="bar" x="{x + step * 0.1:.2f}" y="{y_of(size):.2f}" '
                     f'width="{max(step * 0.8, 0.5):.2f}" height="{plot_h + top_pad - y_of(size):.2f}" '
                     f'fill="#5b8c5a"><title>{_e(shard.get("file", ""))}: '
                     f'{_e(human_bytes(size))}, {int(shard.get("num_examples", 0)):,} examples'
                     f"</title></rect>")
    parts.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{y_of(mean):.2f}" '
                 f'y2="{y_of(mean):.2f}" stroke="#333" stroke-dasharray="4 3"/>')
    if shard_size:
        parts.append(f'<line class="target" x1="{left}" x2="{left + plot_w}" '
                     f'y1="{y_of(shard_size):.2f}" y2="{y_of(shard_size):.2f}" stroke="#b5523b" '
                     f'stroke-dasharray="2 2"><title>shard_size {_e(human_bytes(shard_size))}'
                     f"</title></line>")
    for frac in (0, 0.5, 1):
        v = top * frac
        parts.append(f'<text x="{left - 6}" y="{y_of(v) + 4:.2f}" text-anchor="end" '
                     f'class="axis">{_e(human_bytes(v))}</text>')
    parts.append(f'<text x="{left}" y="{height - 6}" class="axis">shard 0</text>')
    if len(sizes) > 1:
        parts.append(f'<text x="{left + plot_w}" y="{height - 6}" text-anchor="end" '
                     f'class="axis">shard {len(sizes) - 1}</text>')
    parts.append("</svg>")
    return "".join(parts)


_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px auto;
max-width:1040px;color:#1d1d1f;padding:0 16px}
h1{font-size:24px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd;
padding-bottom:4px}h3{font-size:15px;margin:16px 0 4px}
.meta{color:#555}table{border-collapse:collapse;margin:8px 0}
th,td{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}
td.n{text-align:right;font-variant-numeric:tabular-nums}th{background:#f4f4f6}
svg.chart{display:block;margin:6px 0;font-size:12px}svg .lbl,svg .val,svg .axis{fill:#333}
pre{white-space:pre-wrap;word-break:break-all;max-width:640px;max-height:220px;overflow:auto;
margin:0;font-size:12px;background:#f7f7f9;padding:6px}
.thumbs{display:flex;flex-wrap:wrap;gap:6px;margin:4px 0 12px}
.thumbs img{width:96px;height:96px;object-fit:contain;background:#eee;border:1px solid #ccc}
.caption{margin:10px 0 0;color:#444;font-weight:600;font-size:13px}
.ok{color:#2e7d32}.bad{color:#b3261e}.note{color:#666;font-size:12px}
.banner{border:2px solid #b3261e;background:#fdecea;color:#5f1410;padding:10px 14px;
margin:8px 0 16px;border-radius:4px}.banner ul{margin:6px 0 0;padding-left:20px}
"""


# --- the page -------------------------------------------------------------------------


def _schema_table(features: Mapping[str, Any], configured: Mapping[str, Any]) -> str:
    """The feature schema: name, type (as declared; stored type when it
    differs), shape, required, default and the source column or path."""
    rows = ["<h2 id='schema'>Features</h2><table class='schema'><tr><th>feature</th>"
            "<th>type</th><th>shape</th><th>required</th><th>default</th><th>source</th></tr>"]
    for name, entry in features.items():
        entry = entry if isinstance(entry, Mapping) else {}
        body = configured.get(name) if isinstance(configured.get(name), Mapping) else {}
        stored = str(entry.get("type", "?"))
        declared = str(body.get("type", stored))
        kind = declared if declared == stored else f"{declared} (stored as {stored})"
        stamp = entry.get("timestamp")
        if isinstance(stamp, Mapping):
            kind += f", {stamp.get('unit')} since 1970 UTC; naive values in {stamp.get('timezone')}"
        source = body.get("from", name)
        # A list is a path into nested values; dotted text names one column.
        source = json.dumps(source, ensure_ascii=False) if isinstance(source, list) else source
        required = "no" if entry.get("required") is False else (
            "yes" if "default" not in entry else "no (default)")
        default = json.dumps(entry["default"], ensure_ascii=False) if "default" in entry else ""
        rows.append(f"<tr><td>{_e(name)}</td><td>{_e(kind)}</td>"
                    f"<td>{_e(json.dumps(entry.get('shape', [])))}</td><td>{_e(required)}</td>"
                    f"<td>{_e(default)}</td><td>{_e(source)}</td></tr>")
    rows.append("</table>")
    return "".join(rows)


def _cache_section(cache: Mapping[str, Any] | None) -> str:
    """What the build took from the build cache and what it read and encoded
    (the manifest's ``cache``); nothing when the build used no cache."""
    if not cache:
        return ""
    rows = []
    for label, way in (("reused from the cache", "reused"), ("read and encoded", "converted")):
        rows.append(f"<tr><td>{label}</td><td>{cache.get(f'files_{way}', 0):,}</td>"
                    f"<td>{cache.get(f'units_{way}', 0):,}</td>"
                    f"<td>{cache.get(f'rows_{way}', 0):,}</td>"
                    f"<td>{cache.get(f'examples_{way}', 0):,}</td></tr>")
    damaged = int(cache.get("units_damaged", 0) or 0)
    note = (f"{damaged:,} cached piece(s) failed their checksum and were read again. "
            if damaged else "")
    return ("<h2 id='cache'>Build cache</h2><table class='throughput'><tr><th></th>"
            "<th>files</th><th>units</th><th>rows</th><th>examples</th></tr>"
            + "".join(rows) + "</table>"
            f"<p class='note'>{note}Cache bytes read {cache.get('bytes_reused', 0):,}, "
            f"written {cache.get('bytes_written', 0):,}. Shards do not depend on what came "
            "from the cache.</p>")


def render_report(manifest: Mapping[str, Any], *,
                  thumbnails: Mapping[str, Sequence[bytes]] | None = None,
                  label_counts: Mapping[str, Mapping[str, int]] | None = None,
                  throughput: Mapping[str, Any] | None = None,
                  dead_letter_samples: Mapping[str, Mapping] | None = None,
                  statistics: Mapping[str, Any] | None = None,
                  drift: Mapping[str, Any] | None = None,
                  previous: Mapping[str, Any] | None = None,
                  duplicates: Mapping[str, Any] | None = None) -> str:
    """The report page as HTML text. duplicates: the build's
    duplicates.json document (`report_duplicates`). statistics/drift: the build's
    stats.json and drift.json documents (gates, drift and per-feature
    sections, `report_statistics`); previous: the stats.json drift compares
    with (the drift charts draw both distributions). A build whose gates
    failed opens with a banner saying so (`failure_banner`)."""
    name, version = manifest.get("name", ""), manifest.get("version", "")
    splits = manifest.get("splits") or {}
    config = manifest.get("config") or {}
    shard_size = (config.get("output") or {}).get("shard_size") if isinstance(config, Mapping) \
        else None
    shard_size = shard_size if isinstance(shard_size, int) else None
    body: list[str] = []
    body.append(f"<h1>{_e(name)} <span class='meta'>{_e(version)}</span></h1>")
    # A failed build says so before anything else: the page reads like a
    # published version's otherwise.
    body.append(failure_banner(drift))
    body.append(duplicates_banner(duplicates))
    tool = manifest.get("tool") or {}
    body.append(f"<p class='meta'>created {_e(manifest.get('created', '?'))} · compression "
                f"{_e(manifest.get('compression', '?'))} · runner {_e(tool.get('runner', '?'))}"
                f" · {_e(tool.get('name', 'recordforge'))} {_e(tool.get('version', ''))}</p>")

    # Splits.
    body.append("<h2 id='splits'>Splits</h2>")
    rows = ["<table class='splits'><tr><th>split</th><th>examples</th><th>shards</th>"
            "<th>bytes</th><th>mean shard</th><th>largest deviation from the mean</th></tr>"]
    spread_notes = []
    for split, info in splits.items():
        n_shards = len(info.get("shards", []))
        size = int(info.get("num_bytes", 0))
        spread = info.get("shard_size_spread") or {}
        deviation = spread.get("max_deviation")
        shown = f"±{deviation:.1%}" if isinstance(deviation, (int, float)) else "-"
        if spread.get("why"):
            spread_notes.append(f"<p class='note bad'>{_e(split)}: shard sizes vary by "
                                f"{_e(shown)}, beyond ±10%: {_e(spread['why'])}.</p>")
        rows.append(f"<tr><td>{_e(split)}</td><td class='n'>{int(info.get('num_examples', 0)):,}"
                    f"</td><td class='n'>{n_shards}</td><td class='n'>{_e(human_bytes(size))}"
                    f"</td><td class='n'>{_e(human_bytes(size / n_shards)) if n_shards else '-'}"
                    f"</td><td class='n'>{_e(shown)}</td></tr>")
    rows.append("</table>")
    body.append("".join(rows))
    body.extend(spread_notes)
    body.append(_schema_table(manifest.get("features") or {},
                              (config.get("features") if isinstance(config, Mapping) else None)
                              or {}))
    body.append(_hbar_chart("examples-per-split", "examples per split", [
        (split, int(info.get("num_examples", 0)), f"{int(info.get('num_examples', 0)):,}")
        for split, info in splits.items()]))
    body.append(_hbar_chart("bytes-per-split", "bytes per split", [
        (split, int(info.get("num_bytes", 0)), human_bytes(int(info.get("num_bytes", 0))))
        for split, info in splits.items()], color="#7a5ba5"))

    # Shards.
    target = f" ({human_bytes(shard_size)})" if shard_size else ""
    body.append("<h2 id='shards'>Shard sizes</h2><p class='note'>Bars: bytes per shard file. "
                "Green band: the split's mean ±10%; dashed: the mean; red: output.shard_size"
                f"{_e(target)}, drawn when it is near the bars.</p>")
    for split, info in splits.items():
        body.append(f"<h3>{_e(split)}</h3>")
        body.append(_shard_chart(split, info.get("shards", []), shard_size))

    # Labels.
    if label_counts:
        body.append("<h2 id='labels'>Label distribution</h2>")
        for split, counts in label_counts.items():
            total = sum(counts.values()) or 1
            ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
            items = [(label, n, f"{n:,} ({n / total:.1%})")
                     for label, n in ordered[:MAX_LABELS_SHOWN]]
            body.append(f"<h3>{_e(split)}</h3>")
            body.append(_hbar_chart(f"labels-{split}", f"labels in split {split}", items,
                                    color="#c07a2c"))
            if len(ordered) > MAX_LABELS_SHOWN:
                body.append(f"<p class='note'>and {len(ordered) - MAX_LABELS_SHOWN:,} more "
                            "labels</p>")

    # Input files: read and skipped (the manifest's fingerprints).
    inputs = describe_inputs(manifest)
    if inputs:
        body.append("<h2 id='inputs'>Input files</h2>")
        body.append(f"<p class='note'>input files: {_e(inputs)}; each input file's size and "
                    "version are in manifest.json (inputs).</p>")
    body.append(_cache_section(manifest.get("cache")))
    # Gates, drift and per-feature statistics.
    body.append(render_statistics(statistics, drift,
                                  timestamp_units(manifest.get("features") or {}), previous))
    body.append(render_duplicates(duplicates, thumbnail_data_uri))

    # Dead letters.
    dead = manifest.get("dead_letter") or {}
    num_dead = int(dead.get("num_rows", 0) or 0)
    num_input = manifest.get("num_input_rows")
    body.append("<h2 id='dead-letters'>Dead letters</h2>")
    share = f" ({num_dead / num_input:.2%} of {num_input:,} input rows)" \
        if isinstance(num_input, int) and num_input else ""
    css = "ok" if num_dead == 0 else "bad"
    body.append(f"<p class='{css}'>{num_dead:,} rows failed{_e(share)}.</p>")
    by_reason = sorted((dead.get("by_reason") or {}).items(), key=lambda kv: (-kv[1], kv[0]))
    if by_reason:
        body.append(_hbar_chart("dead-letter-reasons", "dead letters by reason",
                                [(reason, n, f"{n:,}") for reason, n in by_reason],
                                color="#b3261e"))
        samples = dead_letter_samples or {}
        table = ["<table class='dead-letters'><tr><th>reason</th><th>rows</th>"
                 "<th>sample</th></tr>"]
        for reason, n in by_reason:
            sample = samples.get(reason)
            text = json.dumps(sample, ensure_ascii=False, indent=1, sort_keys=True) \
                if sample is not None else "(no sample)"
            if len(text) > MAX_SAMPLE_CHARS:
                text = text[:MAX_SAMPLE_CHARS] + " …"
            table.append(f"<tr><td>{_e(reason)}</td><td class='n'>{n:,}</td>"
                         f"<td><pre>{_e(text)}</pre></td></tr>")
        table.append("</table>")
        body.append("".join(table))
        files = dead.get("files") or []
        if files:
            body.append(f"<p class='note'>all failed rows: {', '.join(_e(f) for f in files)}</p>")

    # Thumbnails.
    if thumbnails:
        body.append("<h2 id='thumbnails'>Sample images</h2>")
        for label in sorted(thumbnails):
            images = [uri for uri in (thumbnail_data_uri(data) for data in thumbnails[label])
                      if uri]
            if not images:
                continue
            body.append(f"<h3>{_e(label) if label else '(no label)'}</h3><div class='thumbs'>")
            body.extend(f"<img src='{uri}' alt='{_e(label)}' width='96' height='96'>"
                        for uri in images)
            body.append("</div>")

    # Throughput.
    if throughput:
        body.append("<h2 id='throughput'>Throughput</h2><table class='throughput'>")
        for key, value in throughput.items():
            shown = (f"{value:,.1f}" if isinstance(value, float) and math.isfinite(value)
                     else f"{value:,}" if isinstance(value, int) else str(value))
            body.append(f"<tr><th>{_e(key.replace('_', ' '))}</th><td class='n'>{_e(shown)}"
                        "</td></tr>")
        body.append("</table>")

    title = f"{name} {version} — recordforge build report"
    # No scripts and no remote loads: the CSP forbids them even if escaping failed.
    return ("<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; "
            "img-src data:; style-src 'unsafe-inline'\">"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>"
            + "\n".join(part for part in body if part) + "</body></html>\n")
