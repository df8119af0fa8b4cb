"""Labels tables: which label each image file has, read from a CSV or JSONL table.

A labels table has the columns ``file`` (a path relative to the image
source's root) and ``label``. Rows that are not usable become dead letters of
their own: unreadable lines, a missing ``file``/``label`` or a file listed
twice (``labels_invalid``), an absolute or ``..`` path (``path_outside_root``).
"""

from __future__ import annotations

import posixpath
import re

import fsspec

from ...schemas.dead_letters import dead_letter
from ..urls import redact_url
from .tables import iter_table

__all__ = ["labels_format", "read_labels_table"]

_DRIVE = re.compile(r"^[A-Za-z]:")


def _relative(name: str) -> str | None:
    """`name` as a normalized root-relative path, or None if it leaves the root."""
    name = name.replace("\\", "/")
    if not name or name.startswith("/") or _DRIVE.match(name) or "://" in name:
        return None
    rel = posixpath.normpath(name)
    if rel in (".", "..") or rel.startswith("../"):
        return None
    return rel


def labels_format(labels: str) -> str:
    """The table format of labels table `labels` ("csv" or "jsonl"), by its name."""
    name = re.sub(r"\.(gz|bz2|xz|zst|lz4)$", "", labels.split("?")[0].lower())
    if name.endswith(".csv"):
        return "csv"
    if name.endswith((".jsonl", ".ndjson", ".json")):
        return "jsonl"
    raise ValueError(f"labels: expected 'directory' or a .csv/.jsonl labels table, got {labels!r}")


def read_labels_table(labels: str) -> tuple[dict[str, tuple[str, str, int | None]], list[dict]]:
    """Reads a labels table (columns ``file``, ``label``).

    Returns ``{rel: (label, source, row)}`` for the usable rows and dead letters
    for the others (unreadable rows, ``labels_invalid``, ``path_outside_root``)."""
    fmt = labels_format(labels)
    fs, fs_path = fsspec.core.url_to_fs(labels)
    source = redact_url(labels)
    entries: dict[str, tuple[str, str, int | None]] = {}
    problems: list[dict] = []

    def problem(row, reason, message, values):
        problems.append(dead_letter(source=source, row=row, key=None, stage="read",
                                    reason=reason, feature=None, message=message, input=values))

    for item in iter_table(fs_path, fmt, fs=fs, source=source):
        if isinstance(item, dict):
            problems.append(item)
            continue
        file, label = item.values.get("file"), item.values.get("label")
        where = f"{source} line {item.row}"
        if file is None or file == "" or label is None or label == "":
            problem(item.row, "labels_invalid",
                    f"{where}: a labels row needs non-empty 'file' and 'label'", item.values)
            continue
        rel = _relative(str(file))
        if rel is None:
            problem(item.row, "path_outside_root",
                    f"{where}: file {str(file)!r} is not a path inside source.path "
                    "(absolute, a URL, or escaping with '..')", item.values)
            continue
        if rel in entries:
            problem(item.row, "labels_invalid",
                    f"{where}: file {rel!r} is already listed on line {entries[rel][2]}",
                    item.values)
            continue
        entries[rel] = (str(label), source, item.row)
    return entries, problems
