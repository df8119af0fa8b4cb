"""The build report's duplicates section: counts within and across splits, the gates, and pairs of equal rows side by side.

Drawn from the build's duplicates.json document (`publish.duplicates`).
Keys and split names come from the data: every text is HTML-escaped.
"""

from __future__ import annotations

import html
import json
from typing import Any, Mapping

from ..progress import describe_duplicates

__all__ = ["duplicates_banner", "render_duplicates"]


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


def render_duplicates(document: Mapping[str, Any] | None) -> str:
    """The section, or nothing when duplicate detection was off."""
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
    return "".join(out)
