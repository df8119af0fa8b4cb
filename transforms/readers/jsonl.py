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
dead letters). Rows come as `JsonlRunBatch`es of lines (a run of object
lines, or one row Python read), in line order with the dead letters;
the convert step hands a batch's lines to the kernel whole and parses
them in Python only where asked (a row the kernel declines, a column the
statistics read).
"""

from __future__ import annotations

from bisect import bisect_left
from itertools import accumulate, chain, repeat
from typing import Iterator

import fsspec

from ...schemas.native import kernels
from .common import READ_ERRORS, empty_file, open_range, read_dead_letter, read_error, resolve
from .json_values import DECODER, MAX_JSON_DEPTH, json_depth_exceeds
from .ranges import Cursor, iter_line_blocks, iter_lines, scan_split_points, seek_to_record
from .rows import ColumnBatch, SourceRow

__all__ = ["JsonlRunBatch", "iter_jsonl", "jsonl_split_points"]

# The kernel's verdicts on a line (`native/src/json.rs`, `Line`).
_BLANK, _OBJECT, _OTHER = 0, 1, 2


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
    `fs`, `source`: as for `iter_csv`. With `columns`, rows come as
    `JsonlRunBatch`es (the same rows, in order): runs of lines where the
    native kernels run, else one line each (its values already read).
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
                if columns and isinstance(row, SourceRow):
                    # A row as the kernel's path gives it, so that both are
                    # batched by the bytes of their lines alike.
                    yield JsonlRunBatch(source, [raw], [line_no], [row.values])
                elif row is not None:
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
            yield from _python_rows([first], 1, source)
            yield from _block_rows(rest, line_no + 1, source, native)
        else:
            yield from _block_rows(block[:in_range], line_no, source, native)
        if in_range < len(block):
            break
    return seen_any


def _block_rows(block: bytes, line_no: int, source: str, native):
    """The rows of `block` (whole lines from line `line_no` on), in line
    order: runs of object lines as `JsonlRunBatch`es, the other lines by
    `_jsonl_row`."""
    if not block:
        return
    try:
        segments = native.jsonl_segments(block)
    except Exception:  # a bug in the kernel costs speed, never rows: Python reads
        segments = [(_OTHER, 0, len(block), 0, None)]
    for kind, start, end, first, lines in segments:
        if kind == _OBJECT:
            yield JsonlRunBatch(source, block[start:end].split(b"\n"),
                                list(range(line_no + first, line_no + first + lines)))
        elif kind != _BLANK:
            yield from _python_rows(block[start:end].split(b"\n"), line_no + first, source)


def _python_rows(lines: list[bytes], line_no: int, source: str):
    """`_jsonl_row` of each line: a row comes as a batch of one line (the
    kernel declines a line it cannot read; Python converts it)."""
    for at, raw in enumerate(lines, line_no):
        row = _jsonl_row(raw, source, at, at == 1)
        if isinstance(row, SourceRow):
            yield JsonlRunBatch(source, [raw], [at], [row.values])
        elif row is not None:
            yield row


class JsonlRunBatch(ColumnBatch):
    """JSONL rows of `source` as their raw lines (`lines`, without LF) and
    line numbers (`rows`), which need not be consecutive. The native table
    kernel converts their lines in one call (`transforms/native_rows.py`);
    the rows' Python values are parsed (`_jsonl_row`, as the reader without
    the kernel) only when something asks for them (`values`: those already
    parsed, None where not), so the batch equals the SourceRows the plain
    reader gives, and pickles as its lines. The reader gives runs of lines,
    or single lines; `sources.outputs.batched` joins and cuts them into
    batches by the bytes of their lines (`concatenated`, `cut`), which both
    paths see alike, so that every batch, and so every statistic, is the
    same on both. Unlike a CSV run, rows need not hold the same keys: `row`
    gives each line's own object."""

    __slots__ = ("lines", "rows", "_values")

    def __init__(self, source: str, lines: list[bytes], rows: list[int],
                 values: list[dict | None] | None = None):
        if len(lines) != len(rows) or (values is not None and len(values) != len(lines)):
            raise ValueError(f"{source}: {len(lines)} lines but {len(rows)} line numbers"
                             f"{'' if values is None else f' and {len(values)} values'}")
        self.source, self.first_row, self._size = source, rows[0] if rows else 1, len(lines)
        self.lines, self.rows = lines, rows
        self._values = values

    @property
    def run(self) -> bytes:
        """The lines, LF between them, as the kernel takes them."""
        return b"\n".join(self.lines)

    @property
    def num_bytes(self) -> int:
        """The bytes of its lines (without their LFs): what a batch is cut by."""
        return sum(map(len, self.lines))

    @classmethod
    def concatenated(cls, batches: list["JsonlRunBatch"]) -> "JsonlRunBatch":
        """The rows of `batches` (of one file), in order, as one batch."""
        first = batches[0]
        if len(batches) == 1:
            return first
        for other in batches:
            if other.source != first.source:
                raise ValueError(f"rows of {other.source} joined to rows of {first.source}")
        values = None
        if any(batch._values is not None for batch in batches):
            values = list(chain.from_iterable(
                batch._values if batch._values is not None else repeat(None, len(batch))
                for batch in batches))
        return cls(first.source, list(chain.from_iterable(batch.lines for batch in batches)),
                   list(chain.from_iterable(batch.rows for batch in batches)), values)

    def cut(self, batch_bytes: int) -> tuple[list["JsonlRunBatch"], "JsonlRunBatch | None"]:
        """(batches, rest): the rows in batches of at least `batch_bytes` bytes
        of lines, each ending with the line that brings it there, and the
        rows after the last of them (fewer bytes; None when there are none)."""
        ends = list(accumulate(map(len, self.lines)))
        batches, start, base = [], 0, 0
        while True:
            last = bisect_left(ends, base + batch_bytes, lo=start)
            if last == len(ends):
                break
            batches.append(self.sliced(start, last + 1))
            start, base = last + 1, ends[last]
        return batches, self.sliced(start, len(ends)) if start < len(ends) else None

    def sliced(self, start: int, stop: int) -> "JsonlRunBatch":
        if start == 0 and stop >= self._size:
            return self
        return JsonlRunBatch(self.source, self.lines[start:stop], self.rows[start:stop],
                             None if self._values is None else self._values[start:stop])

    def _row_values(self, index: int) -> dict:
        values = self._values[index] if self._values is not None else None
        if values is None:
            line_no = self.rows[index]
            row = _jsonl_row(self.lines[index], self.source, line_no, line_no == 1)
            if not isinstance(row, SourceRow):
                # The reader made the batch of lines `_jsonl_row` read as
                # rows: one it refuses now is a bug, not a bad row;
                # RECORDFORGE_PURE_PYTHON=1 reads the file without it.
                raise RuntimeError(f"{self.source} line {line_no}: read as a row, "
                                   "refused when its values were asked for")
            if self._values is None:
                self._values = [None] * self._size
            values = self._values[index] = row.values
        return values

    def row_number(self, index: int) -> int:
        return self.rows[index]

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
        return SourceRow(self.source, self.rows[index], self._row_values(index))

    def __reduce__(self):
        return (JsonlRunBatch, (self.source, self.lines, self.rows))

    def __eq__(self, other) -> bool:
        return (isinstance(other, ColumnBatch) and len(self) == len(other)
                and list(self) == list(other))

    def __repr__(self) -> str:
        return f"JsonlRunBatch({self.source!r}, {self._size} rows from line {self.first_row})"


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
