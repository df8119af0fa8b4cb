"""The JSONL reader: the lines of a byte range of one file as rows and dead letters.

Each line holds one JSON object; its values are the parsed object, by the
rule of `json_values` that the JSON-array reader shares (duplicate keys keep
the last value; a number too large for a double, ``1e999``, is kept as an
exact Decimal, so the checks report it rather than take it as inf).
Every non-blank line yields exactly one `SourceRow` or read dead letter
(stage ``read``); ``row`` is the 1-based line number. Blank lines are not rows; a UTF-8 byte-order mark on the first line is
dropped; JSON nested deeper than 64 levels is refused here, before anything
walks it.
"""

from __future__ import annotations

from typing import Iterator

import fsspec

from .common import READ_ERRORS, empty_file, open_range, read_dead_letter, read_error, resolve
from .json_values import DECODER, MAX_JSON_DEPTH, json_depth_exceeds
from .ranges import Cursor, iter_lines, scan_split_points, seek_to_record
from .rows import SourceRow

__all__ = ["iter_jsonl", "jsonl_split_points"]


def jsonl_split_points(path: str, target_bytes: int, *,
                       fs: fsspec.AbstractFileSystem | None = None) -> list[int]:
    """Byte offsets where JSONL lines start, about `target_bytes` apart; the
    first is 0."""
    return [p.offset for p in scan_split_points(path, target_bytes, quote_aware=False, fs=fs)]


def iter_jsonl(path: str, *, start: int = 0, end: int | None = None,
               start_line: int | None = None, fs: fsspec.AbstractFileSystem | None = None,
               source: str | None = None) -> Iterator[SourceRow | dict]:
    """Reads the JSONL lines that start in byte range ``[start, end)`` of `path`.

    Yields a `SourceRow` (values: the line's JSON object) per good line and a
    read dead letter per bad one: ``json_invalid`` (not JSON, not an object, or
    nested deeper than 64 levels), ``invalid_utf8``; ``empty_file`` and
    ``read_error`` stand for the whole file (or its unread rest). `start_line`,
    `fs`, `source`: as for `iter_csv`.
    """
    fs, fs_path, source = resolve(path, fs, source)
    cursor = Cursor(0, 1)
    try:
        with open_range(fs, fs_path, start, end) as f:
            point = seek_to_record(f, fs, fs_path, start, start_line, False)
            if point is None:
                return
            cursor = Cursor(*point)
            seen_any = False
            for line_start, line_no, raw in iter_lines(f, cursor):
                if end is not None and line_start >= end:
                    return
                seen_any = True
                row = _jsonl_row(raw, source, line_no, line_start == 0)
                if row is not None:
                    yield row
            if start <= 0 and not seen_any:
                yield empty_file(source)
    except READ_ERRORS as exc:
        yield read_error(source, cursor.line if cursor.offset > 0 else None, exc)


def _jsonl_row(raw: bytes, source: str, line_no: int, first: bool) -> SourceRow | dict | None:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return read_dead_letter(
            source, line_no, "invalid_utf8",
            f"{source} line {line_no}: not valid UTF-8 ({exc.reason} at byte {exc.start})", raw)
    if first and text.startswith("\ufeff"):
        text = text[1:]
    if not text.strip():
        return None
    try:
        value = DECODER.decode(text)
    except RecursionError:
        return read_dead_letter(
            source, line_no, "json_invalid",
            f"{source} line {line_no}: JSON nested too deeply to parse", raw)
    except ValueError as exc:
        return read_dead_letter(
            source, line_no, "json_invalid", f"{source} line {line_no}: invalid JSON: {exc}", raw)
    if not isinstance(value, dict):
        return read_dead_letter(
            source, line_no, "json_invalid",
            f"{source} line {line_no}: a JSON {type(value).__name__} where each line must hold "
            "one JSON object", raw)
    # Counting brackets first keeps the exact walk off the common path.
    if (text.count("{") + text.count("[") > MAX_JSON_DEPTH
            and json_depth_exceeds(value)):
        return read_dead_letter(
            source, line_no, "json_invalid",
            f"{source} line {line_no}: JSON nested deeper than {MAX_JSON_DEPTH} levels", raw)
    return SourceRow(source, line_no, value)
