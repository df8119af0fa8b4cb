"""The JSONL reader: the lines of a byte range of one file as rows and dead letters.

Each line holds one JSON object; its values are the parsed object, by the
rule of `json_values` that the JSON-array reader shares (duplicate keys keep
the last value; a number too large for a double, ``1e999``, is kept as an
exact Decimal, so the checks report it rather than take it as inf).
Every non-blank line yields exactly one `SourceRow` or read dead letter
(stage ``read``); ``row`` is the 1-based line number. Blank lines are not rows; a UTF-8 byte-order mark on the first line is
dropped; JSON nested deeper than 64 levels is refused here, before anything
walks it.

Where the native kernels run, `iter_jsonl(columns=True)` reads a block of
lines at a time: the kernel (`jsonl_segments`) says which lines are blank,
which are one JSON object it reads exactly as `json` does, and which
Python must read (`_jsonl_row`, as without the extension: its rows and
dead letters). Consecutive object lines come as one `JsonlRunBatch`, which
the convert step hands to the kernel whole and parses in Python only
where asked (a row the kernel declines, a column the statistics read).
"""

from __future__ import annotations

from typing import Iterator

import fsspec

from ...schemas.native import kernels
from .common import READ_ERRORS, empty_file, open_range, read_dead_letter, read_error, resolve
from .json_values import DECODER, MAX_JSON_DEPTH, json_depth_exceeds
from .ranges import Cursor, iter_line_blocks, iter_lines, scan_split_points, seek_to_record
from .rows import ColumnBatch, SourceRow

__all__ = ["JsonlRunBatch", "iter_jsonl", "jsonl_split_points"]

# A block whose object lines the kernel would hand over in more runs than
# this (lines it cannot read between them) is read line by line instead:
# a batch per line or two would cost more than it saves.
_MAX_RUNS_PER_BLOCK = 16
# The kernel's verdicts on a line (`native/src/json.rs`, `Line`).
_BLANK, _OBJECT = 0, 1


def jsonl_split_points(path: str, target_bytes: int, *,
                       fs: fsspec.AbstractFileSystem | None = None) -> list[int]:
    """Byte offsets where JSONL lines start, about `target_bytes` apart; the
    first is 0."""
    return [p.offset for p in scan_split_points(path, target_bytes, quote_aware=False, fs=fs)]


def iter_jsonl(path: str, *, start: int = 0, end: int | None = None,
               start_line: int | None = None, fs: fsspec.AbstractFileSystem | None = None,
               source: str | None = None, columns: bool = False
               ) -> Iterator[SourceRow | ColumnBatch | dict]:
    """Reads the JSONL lines that start in byte range ``[start, end)`` of `path`.

    Yields a `SourceRow` (values: the line's JSON object) per good line and a
    read dead letter per bad one: ``json_invalid`` (not JSON, not an object, or
    nested deeper than 64 levels), ``invalid_utf8``; ``empty_file`` and
    ``read_error`` stand for the whole file (or its unread rest). `start_line`,
    `fs`, `source`: as for `iter_csv`. With `columns`, where the native
    kernels run, runs of object lines come as `JsonlRunBatch`es (the same
    rows).
    """
    fs, fs_path, source = resolve(path, fs, source)
    cursor = Cursor(0, 1)
    try:
        with open_range(fs, fs_path, start, end) as f:
            point = seek_to_record(f, fs, fs_path, start, start_line, False)
            if point is None:
                return
            cursor = Cursor(*point)
            native = kernels() if columns else None
            if native is not None:
                seen_any = yield from _native_rows(f, cursor, end, source, native)
                if start <= 0 and not seen_any:
                    yield empty_file(source)
                return
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


def _native_rows(f, cursor: Cursor, end: int | None, source: str, native):
    """The rows and dead letters of the lines from the cursor on, a block
    at a time (see the module); returns whether any line was there (the
    range ends before the file does, or a line was read)."""
    seen_any = False
    for offset, line_no, block in iter_line_blocks(f, cursor):
        seen_any = True
        if end is not None and offset >= end:
            break
        # The lines that start at or after `end` belong to the next range.
        in_range = len(block) if end is None else (
            block.find(b"\n", end - offset - 1) + 1 or len(block))
        if offset == 0:
            # The file's first line (its byte-order mark) is Python's.
            first, _, rest = block[:in_range].partition(b"\n")
            row = _jsonl_row(first, source, 1, True)
            if row is not None:
                yield row
            yield from _block_rows(rest, line_no + 1, source, native)
        else:
            yield from _block_rows(block[:in_range], line_no, source, native)
        if in_range < len(block):
            break
    return seen_any


def _block_rows(block: bytes, line_no: int, source: str, native):
    """The rows of `block` (whole lines from line `line_no` on): runs of
    object lines as `JsonlRunBatch`es, the other lines by `_jsonl_row`."""
    if not block:
        return
    try:
        segments = native.jsonl_segments(block)
    except Exception:  # a bug in the kernel costs speed, never rows: Python reads
        segments = [(2, 0, len(block), 0, block.count(b"\n") + (not block.endswith(b"\n")))]
    if sum(kind == _OBJECT for kind, *_ in segments) > _MAX_RUNS_PER_BLOCK:
        segments = [(2, start, end, first, lines)
                    for _, start, end, first, lines in segments]
    for kind, start, end, first, lines in segments:
        if kind == _OBJECT:
            yield JsonlRunBatch(source, line_no + first, block[start:end], lines)
        elif kind != _BLANK:
            for at, raw in enumerate(block[start:end].split(b"\n"), line_no + first):
                row = _jsonl_row(raw, source, at, False)
                if row is not None:
                    yield row


class JsonlRunBatch(ColumnBatch):
    """Consecutive JSONL lines the kernel found to be one JSON object each
    (`run`: the lines, LF between them), rows ``first_row`` on of `source`.
    The native table kernel converts the run in one call
    (`transforms/native_rows.py`); the rows' Python values are parsed
    (`_jsonl_row`, as the reader without the kernel) only when something
    asks for them, so the batch equals the SourceRows the plain reader
    gives, and pickles as its run. Unlike a CSV run, rows need not hold the
    same keys: `row` gives each line's own object."""

    __slots__ = ("run", "_lines", "_values")

    def __init__(self, source: str, first_row: int, run: bytes, count: int):
        self.source, self.first_row, self._size = source, first_row, count
        self.run = run
        self._lines: list[bytes] | None = None
        self._values: dict[int, dict] = {}

    def _row_values(self, index: int) -> dict:
        values = self._values.get(index)
        if values is None:
            if self._lines is None:
                self._lines = self.run.split(b"\n")
            line_no = self.first_row + index
            row = _jsonl_row(self._lines[index], self.source, line_no, False)
            if not isinstance(row, SourceRow) or len(self._lines) != self._size:
                # The kernel and `_jsonl_row` judge lines by the same rules
                # (tested on generated lines): a line one takes and the
                # other refuses is a bug, not a bad row;
                # RECORDFORGE_PURE_PYTHON=1 reads the file without it.
                raise RuntimeError(f"{self.source} line {line_no}: the native check took "
                                   "this line as one JSON object, the reader does not")
            values = self._values[index] = row.values
        return values

    def column_names(self) -> tuple[str, ...]:
        """Every top-level key of the batch's rows, in the order first seen."""
        native = kernels()
        found = native.jsonl_keys(self.run) if native is not None else None
        if found is None:
            found = dict.fromkeys(name for index in range(self._size)
                                  for name in self._row_values(index))
        return tuple(found)

    @property
    def columns(self) -> dict[str, list]:
        return {name: self.column(name) for name in self.column_names()}

    @columns.setter
    def columns(self, columns: dict[str, list]) -> None:
        raise AttributeError("a JsonlRunBatch's columns are its lines'")

    def column(self, name: str) -> list:
        return [self._row_values(index).get(name) for index in range(self._size)]

    def row(self, index: int) -> SourceRow:
        return SourceRow(self.source, self.first_row + index, self._row_values(index))

    def __reduce__(self):
        return (JsonlRunBatch, (self.source, self.first_row, self.run, self._size))

    def __eq__(self, other) -> bool:
        return (isinstance(other, ColumnBatch) and len(self) == len(other)
                and list(self) == list(other))

    def __repr__(self) -> str:
        return (f"JsonlRunBatch({self.source!r}, rows {self.first_row}-"
                f"{self.first_row + self._size - 1})")


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
