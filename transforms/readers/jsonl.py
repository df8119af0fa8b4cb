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

from typing import Iterator, Sequence

import fsspec
import numpy as np

from ...schemas.native import kernels
from .common import READ_ERRORS, empty_file, open_range, read_dead_letter, read_error, resolve
from .json_values import DECODER, MAX_JSON_DEPTH, json_depth_exceeds
from .ranges import (Cursor, count_newlines, iter_line_blocks, iter_lines, scan_split_points,
                     seek_to_record)
from .rows import RawRowsBatch, SourceRow

__all__ = ["JsonlRunBatch", "iter_jsonl", "jsonl_split_points"]

# The kernel's verdicts on a line (`native/src/json.rs`, `Line`).
_BLANK, _OBJECT, _OTHER = 0, 1, 2
_LF = ord("\n")


def jsonl_split_points(path: str, target_bytes: int, *,
                       fs: fsspec.AbstractFileSystem | None = None) -> list[int]:
    """Byte offsets where JSONL lines start, about `target_bytes` apart; the
    first is 0."""
    return [p.offset for p in scan_split_points(path, target_bytes, quote_aware=False, fs=fs)]


def iter_jsonl(path: str, *, start: int = 0, end: int | None = None,
               start_line: int | None = None, fs: fsspec.AbstractFileSystem | None = None,
               source: str | None = None, columns: bool = False
               ) -> Iterator[SourceRow | JsonlRunBatch | dict]:
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
                    yield JsonlRunBatch(source, [raw], range(line_no, line_no + 1), [row.values])
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
            # The run stays the block's bytes, not split into a bytes object a line.
            yield JsonlRunBatch.of_run(source, block[start:end],
                                       range(line_no + first, line_no + first + lines))
        elif kind != _BLANK:
            yield from _python_rows(block[start:end].split(b"\n"), line_no + first, source)


def _python_rows(lines: list[bytes], line_no: int, source: str):
    """`_jsonl_row` of each line: a row comes as a batch of one line (the
    kernel declines a line it cannot read; Python converts it)."""
    for at, raw in enumerate(lines, line_no):
        row = _jsonl_row(raw, source, at, at == 1)
        if isinstance(row, SourceRow):
            yield JsonlRunBatch(source, [raw], range(at, at + 1), [row.values])
        elif row is not None:
            yield row


class JsonlRunBatch(RawRowsBatch):
    """JSONL rows of `source` as their raw lines and line numbers (`rows`,
    which need not be consecutive: a list, or a range where they are). The
    lines are held as one run (`run`: the lines, LF between them), as the
    native table kernel converts them in one call
    (`transforms/native_rows.py`) and as the reader cuts a block's object
    lines out: joining and cutting batches copies bytes and counts LFs,
    not a bytes object per line. The rows' Python values are parsed
    (`_jsonl_row`, as the reader without the kernel) only when something
    asks for them (`values`: those already parsed, None where not), so the
    batch equals the SourceRows the plain reader gives, and pickles without
    them. The reader gives runs of lines, or single lines;
    `sources.outputs.batched` joins and cuts them into batches by the bytes
    of their lines (`concatenated`, `cut`), which both paths see alike, so
    that every batch, and so every statistic, is the same on both. Unlike a
    CSV run, rows need not hold the same keys: `row` gives each line's own
    object."""

    __slots__ = ("_ends", "run")

    def __init__(self, source: str, lines: list[bytes], rows: Sequence[int],
                 values: list[dict | None] | None = None):
        if len(lines) != len(rows):
            raise ValueError(f"{source}: {len(lines)} lines but {len(rows)} line numbers")
        self._take(source, b"\n".join(lines), rows, values)

    @classmethod
    def of_run(cls, source: str, run: bytes, rows: Sequence[int],
               values: list[dict | None] | None = None) -> JsonlRunBatch:
        """The batch of the lines of `run` (LF between them), one per line
        number in `rows`."""
        batch = cls.__new__(cls)
        batch._take(source, run, rows, values)
        return batch

    def _take(self, source: str, run: bytes, rows: Sequence[int],
              values: list[dict | None] | None) -> None:
        if values is not None and len(values) != len(rows):
            raise ValueError(f"{source}: {len(rows)} line numbers but {len(values)} values")
        self.source, self.first_row, self._size = source, rows[0] if len(rows) else 1, len(rows)
        self.run, self.rows, self._values = run, rows, values
        self._ends = None  # where each line ends in the run: found when a line is asked for

    @property
    def lines(self) -> list[bytes]:
        """The lines, without their LFs."""
        return self.run.split(b"\n") if self._size else []

    def line(self, index: int) -> bytes:
        if self._ends is None:
            newlines = np.flatnonzero(np.frombuffer(self.run, dtype=np.uint8) == _LF)
            self._ends = np.append(newlines, len(self.run)).tolist()
            if len(self._ends) != self._size:
                raise ValueError(f"{self.source}: {len(self._ends)} lines held where "
                                 f"{self._size} line numbers are")
        return self.run[self._ends[index - 1] + 1 if index else 0:self._ends[index]]

    @property
    def num_bytes(self) -> int:
        """The bytes of its lines (without their LFs): what a batch is cut by."""
        return len(self.run) - self._size + 1 if self._size else 0

    @classmethod
    def concatenated(cls, batches: list[JsonlRunBatch]) -> JsonlRunBatch:
        """The rows of `batches` (of one file), in order, as one batch."""
        if len(batches) == 1:
            return batches[0]
        batches, rows, values = cls._joined(batches)
        return cls.of_run(batches[0].source, b"\n".join(batch.run for batch in batches), rows,
                          values)

    def cut(self, batch_bytes: int) -> tuple[list[JsonlRunBatch], JsonlRunBatch | None]:
        """(batches, rest): the rows in batches of at least `batch_bytes` (> 0)
        bytes of lines, each ending with the line that brings it there, and
        the rows after the last of them (fewer bytes; None when there are none)."""
        batches, start, line = [], 0, 0  # where the next batch starts: byte and line
        while True:
            end = _end_of_line_reaching(self.run, start, batch_bytes)
            if end is None:
                break
            lines = count_newlines(self.run, start, end) + 1
            batches.append(self._part(start, end, line, line + lines))
            start, line = end + 1, line + lines
        return batches, self._part(start, len(self.run), line, self._size) if (
            line < self._size) else None

    def sliced(self, start: int, stop: int) -> JsonlRunBatch:
        """Its rows `start` to `stop` (line indices)."""
        stop = min(stop, self._size)
        if stop <= start:
            return self._part(0, 0, 0, 0)
        self.line(start)  # (finds where the lines end)
        begin = self._ends[start - 1] + 1 if start else 0
        return self._part(begin, self._ends[stop - 1], start, stop)

    def _part(self, begin: int, end: int, start: int, stop: int) -> JsonlRunBatch:
        """Its lines `start` to `stop`, which are ``run[begin:end]``."""
        if start == 0 and stop == self._size:
            return self
        return JsonlRunBatch.of_run(self.source, self.run[begin:end], self.rows[start:stop],
                                    None if self._values is None else self._values[start:stop])

    def _parse(self, index: int) -> dict:
        line_no = self.rows[index]
        row = _jsonl_row(self.line(index), self.source, line_no, line_no == 1)
        if not isinstance(row, SourceRow):
            # The reader made the batch of lines `_jsonl_row` read as
            # rows: one it refuses now is a bug, not a bad row;
            # RECORDFORGE_PURE_PYTHON=1 reads the file without it.
            raise RuntimeError(f"{self.source} line {line_no}: read as a row, "
                               "refused when its values were asked for")
        return row.values

    def column_names(self) -> tuple[str, ...]:
        """Every top-level key of the batch's rows, in the order first seen."""
        native = kernels()
        found = native.jsonl_keys(self.run) if native is not None else None
        return tuple(found) if found is not None else super().column_names()

    def __reduce__(self):
        return (JsonlRunBatch.of_run, (self.source, self.run, self.rows))

    def __repr__(self) -> str:
        return f"JsonlRunBatch({self.source!r}, {self._size} rows from line {self.first_row})"


def _end_of_line_reaching(run: bytes, start: int, want: int) -> int | None:
    """Where in `run` the line ends (its LF, or the run's end) that brings
    the bytes of lines from `start` (without their LFs) to `want` (> 0);
    None when the run ends first. The byte that does is at ``p - 1`` for
    the least ``p = start + want + (LFs in run[start:p])``, found from below
    by counting only the LFs not yet counted."""
    newlines, counted = 0, start
    while True:
        reach = start + want + newlines
        if reach > len(run):
            return None
        if reach == counted:
            end = run.find(b"\n", reach - 1)
            return len(run) if end < 0 else end
        newlines += count_newlines(run, counted, reach)
        counted = reach


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
