"""The build report's duplicates section: counts within and across splits, the gates, and pairs of equal rows side by side.

Drawn from the build's duplicates.json document (`publish.duplicates`).
Keys and split names come from the data: every text is HTML-escaped.
"""

from __future__ import annotations

import html
import json
from typing import Any, Callable, Mapping

import fsspec

from .duplicates import describe_duplicates

__all__ = ["duplicates_banner", "render_duplicates"]

# Near pairs drawn with thumbnails (each reads two input images again).
MAX_PAIRS_DRAWN = 12
# An input image larger than this is not read for a thumbnail.
_MAX_THUMBNAIL_FILE = 64 << 20


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _row_name(side: Mapping[str, Any]) -> str:
    """A row as the pair lists it: its key's value, or its row digest."""
    if side.get("key") is None and "row_digest" in side:
        return f"row digest {side['row_digest']}"
    return json.dumps(side.get("key"), ensure_ascii=False)


def _failed(document: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [gate for gate in document.get("gates") or [] if not gate.get("passed")]


def duplicates_banner(document: Mapping[str, Any] | None) -> str:
    """The banner that opens the report of a build whose duplicate gates
    failed; empty otherwise."""
    failed = _failed(document) if document else []
    if not failed:
        return ""
    items = "".join(f"<li>{_e(gate['message'])}</li>" for gate in failed)
    return (f"<div class='banner' id='duplicates-failed' role='alert'><strong>Build failed: "
            f"{len(failed)} duplicate gate(s) failed; nothing was published.</strong>"
            f"<ul>{items}</ul><p class='note'>This report and duplicates.json are kept under "
            "the output's .failed/ folder; <a href='#duplicates'>the duplicates</a> are "
            "below.</p></div>")


def render_duplicates(document: Mapping[str, Any] | None,
                      thumbnail: Callable[[bytes], str | None] = lambda data: None) -> str:
    """The section, or nothing when duplicate detection was off. thumbnail:
    image bytes -> a ``data:`` URI of a small re-encoded copy, or None (the
    page's `report_html.thumbnail_data_uri`)."""
    if not document:
        return ""
    checked = document.get("features")
    out = ["<h2 id='duplicates'>Duplicates</h2>",
           f"<p class='{'bad' if document['duplicate_rows'] else 'ok'}'>"
           f"{_e(describe_duplicates(document))}.</p>",
           f"<p class='note'>Rows compared on {_e(', '.join(checked)) if checked else 'every feature'}"
           "; the earlier row of equal rows is the one with the smaller key (then the split "
           "listed first). duplicates.json holds the counts and the first "
           f"{document['pairs_limit']} pairs.</p>"]
    counts = ["<table class='splits'><tr><th>within split</th><th>rows</th></tr>"]
    counts += [f"<tr><td>{_e(split)}</td><td class='n'>{count:,}</td></tr>"
               for split, count in document["within_split"].items()]
    counts += ["<tr><th>across splits</th><th>rows of the second</th></tr>"]
    counts += [f"<tr><td>{_e(pair)}</td><td class='n'>{count:,}</td></tr>"
               for pair, count in document["across_splits"].items()]
    out.append("".join(counts) + "</table>")
    for gate in document.get("gates") or []:
        css = "ok" if gate["passed"] else "bad"
        out.append(f"<p class='{css}'>{_e(gate['message'])}</p>")
    if document["pairs"]:
        rows = ["<table class='splits'><tr><th>kind</th><th>earlier split</th><th>earlier row"
                "</th><th>later split</th><th>later row</th></tr>"]
        rows += [f"<tr><td>{_e(pair['kind'])}</td><td>{_e(pair['earlier']['split'])}</td>"
                 f"<td>{_e(_row_name(pair['earlier']))}</td><td>{_e(pair['later']['split'])}"
                 f"</td><td>{_e(_row_name(pair['later']))}</td></tr>"
                 for pair in document["pairs"]]
        out.append("".join(rows) + "</table>")
    if document.get("near_duplicates"):
        out.append(_near_section(document["near_duplicates"], thumbnail))
    return "".join(out)


def _thumbnail(path: str, thumbnail_data_uri: Callable[[bytes], str | None]) -> str:
    """An <img> of the input image at `path`, re-encoded small by
    `thumbnail_data_uri` (the page's), or a dash when it cannot be read now."""
    try:
        fs, local = fsspec.core.url_to_fs(path)
        if (fs.info(local).get("size") or 0) > _MAX_THUMBNAIL_FILE:
            return "-"
        with fs.open(local, "rb") as handle:
            uri = thumbnail_data_uri(handle.read(_MAX_THUMBNAIL_FILE + 1))
    except Exception:  # a report must not fail on an image that moved
        return "-"
    return f"<img src='{uri}' alt=''>" if uri else "-"


def _near_section(near: Mapping[str, Any], thumbnail: Callable[[bytes], str | None]) -> str:
    """The near-duplicate images: counts and the first pairs side by side."""
    out = [f"<h3>Near-duplicate images</h3><p class='note'>{near['pairs']:,} pairs of images "
           f"within {near['threshold']} bits of their 64-bit perceptual hashes, "
           f"{near['cross_split_pairs']:,} of them across splits; "
           f"{near['images_not_hashed']:,} images could not be hashed.</p>"]
    if near["examples"]:
        rows = ["<table class='splits'><tr><th>distance</th><th>first</th><th></th>"
                "<th>second</th><th></th></tr>"]
        for index, pair in enumerate(near["examples"]):
            drawn = index < MAX_PAIRS_DRAWN
            sides = "".join(
                f"<td>{_e(side['split'])}: {_e(side['path'])}</td>"
                f"<td>{_thumbnail(side['path'], thumbnail) if drawn else ''}</td>"
                for side in (pair["a"], pair["b"]))
            rows.append(f"<tr><td class='n'>{pair['distance']}</td>{sides}</tr>")
        out.append("".join(rows) + "</table>")
    return "".join(out)
