"""The CSV reader: the records of a byte range of one file as rows and dead letters.

CSV follows RFC 4180 with Python's ``csv`` module in strict mode for quoted
records: values are ``str``; an empty field is ``""``; a UTF-8 byte-order mark
is dropped; NUL characters are kept as data; fields of any size are read (no
131072-character limit). Record boundaries are found by quote parity: a newline
ends a record iff the number of ``"`` characters before it is even (escaped
quotes are doubled, so parity is preserved). A stray quote inside an unquoted
field therefore joins lines until the next stray quote; that joined record is
reported as ``csv_malformed``. Duplicate column names make the header unusable
(``csv_bad_header``, naming the duplicates) rather than being renamed silently.

Every input record yields exactly one `SourceRow` or read dead letter (stage
``read``), so counting what the reader yields counts the file's rows; a
file without a usable header yields one dead letter standing for it. ``row``
is the 1-based line where the record starts (the header is line 1; a quoted
field with newlines spans several lines). Blank lines are not rows.
`read_csv_header` reads the header by the same rules, for checks made before
a run.
"""

from __future__ import annotations

import csv
import threading
from itertools import chain, count, repeat, starmap
from typing import Iterator, Sequence

import fsspec

from ...schemas.native import kernels
from .common import (MAX_DECODED_BYTES, READ_ERRORS, empty_file, open_file, open_range,
                     read_dead_letter, read_error, resolve)
from .ranges import (BLOCK, Cursor, block_lines, iter_line_blocks, scan_split_points,
                     seek_to_record)
from .rows import ColumnBatch, SourceRow

__all__ = ["CsvRunBatch", "csv_split_points", "iter_csv", "lone_carriage_return",
           "plain_run_batch", "read_csv_header"]

# Bytes read at a time, and how the file is opened (module attributes, so
# that tests can put block ends mid-line and fail reads).
_BLOCK = BLOCK
_open = open_file
# A quoted CSV record longer than this is an unterminated quote in practice;
# reading stops there instead of holding the rest of the file in memory.
_MAX_CSV_RECORD_BYTES = MAX_DECODED_BYTES


class CsvRunBatch(ColumnBatch):
    """The ColumnBatch of a plain run of lines that also keeps the run's
    bytes, for the native table kernel (`transforms/native_rows.py`) to
    convert in one call. It pickles as a plain ColumnBatch: the bytes are a
    speed-up, never needed (the kernel's answer equals the Python path's).

    When the kernel vouched for the run (`check_csv_run`, the same test as
    `_plain_lines`), `columns` is None and `checked` is the kernel's
    answer (`_native.CsvRun`: the run and where its fields end, which the
    convert call reuses rather than parse the run again); the fields are
    split from the run (`_run_columns`, as the reader would have) only when
    something asks for them. The kernel gives the text the statistics
    read, so a build whose rows it all takes never makes a str per field."""

    __slots__ = ("run", "names", "checked", "delimiter", "_split")

    def __init__(self, source: str, first_row: int, columns: dict[str, list] | None,
                 run: bytes, names: tuple[str, ...] | None = None, checked=None,
                 delimiter: str = ","):
        self._split = None
        self.checked = checked
        self.delimiter = delimiter  # (a dialect's, `csv_dialect`: "," in the default one)
        if columns is not None:
            super().__init__(source, first_row, columns)
            names = tuple(columns)
        else:
            self.source, self.first_row, self._size = source, first_row, len(checked)
        self.names = tuple(names)
        self.run = run

    @property
    def columns(self) -> dict[str, list]:
        if self._split is None:
            self._split = _run_columns(self.run, self.names, self._size, self.source,
                                       self.first_row, self.delimiter)
        return self._split

    @columns.setter
    def columns(self, columns: dict[str, list]) -> None:
        self._split = columns

    def column_names(self) -> tuple[str, ...]:
        return self.names


def _plain_lines(run: bytes, width: int, delimiter: str = ",") -> list[str] | None:
    """The lines of a plain run as text when every line is valid UTF-8
    and has `width` fields separated by `delimiter` (the common case), else
    None. Every CR ends a line (see `_iter_csv_batches`), as
    `_decode_record` would strip it."""
    try:
        text = run.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if "\r" in text:
        text = text.replace("\r\n", "\n")
    lines = text.split("\n")
    if not lines[-1]:
        lines.pop()  # the run's last "\n" ends a line, it starts none
    if "" not in lines and set(map(str.count, lines, repeat(delimiter))) == {width - 1}:
        return lines
    return None


def _columns_of(lines: list[str], names: Sequence[str], delimiter: str = ","
                ) -> dict[str, list[str]]:
    """The columns of lines that each hold len(names) fields: the fields of
    all of them, in one list, hold column i at i, i + width, ..."""
    fields = delimiter.join(lines).split(delimiter)
    width = len(names)
    return {name: fields[i::width] for i, name in enumerate(names)}


def _run_columns(run: bytes, names: Sequence[str], rows: int, source: str,
                 first_row: int, delimiter: str = ",") -> dict[str, list[str]]:
    """The columns of a run the native kernel vouched for, as the reader
    splits them."""
    lines = _plain_lines(run, len(names), delimiter)
    if lines is None or len(lines) != rows:
        # The kernel and `_plain_lines` test the same promises (tested on
        # any bytes): a run one takes and the other refuses is a bug, not a
        # bad row; RECORDFORGE_PURE_PYTHON=1 reads the file without it.
        raise RuntimeError(f"{source} lines {first_row}-{first_row + rows - 1}: the native "
                           "check took these lines as plain CSV, the reader does not")
    return _columns_of(lines, names, delimiter)


def plain_run_batch(run: bytes, line_no: int, names: Sequence[str], source: str,
                    delimiter: str = ",") -> CsvRunBatch | None:
    """The `CsvRunBatch` of a plain run starting on line `line_no` (every
    line valid UTF-8 with one field per column, separated by `delimiter`;
    no blank line, a CR only in CRLF), or None when it is not one. Where
    the native kernels run the run is tested by `check_csv_run`, which
    keeps where its fields end for the convert call, and its fields are
    split only when asked; else by `_plain_lines`, the same test."""
    native = kernels()
    if native is not None:
        try:
            checked = native.check_csv_run(run, len(names), ord(delimiter))
        except Exception:  # a bug in the kernel costs speed, never rows: Python decides
            checked = None
        if checked is not None and len(checked):
            return CsvRunBatch(source, line_no, None, run, tuple(names), checked, delimiter)
    lines = _plain_lines(run, len(names), delimiter)
    if lines is None:
        return None
    return CsvRunBatch(source, line_no, _columns_of(lines, names, delimiter), run,
                       delimiter=delimiter)


def csv_split_points(path: str, target_bytes: int, *,
                     fs: fsspec.AbstractFileSystem | None = None) -> list[int]:
    """Byte offsets where CSV records start, about `target_bytes` apart, never
    inside a quoted field; the first is 0. Read ``[points[i], points[i+1])``
    (the last up to the end) with `iter_csv`."""
    return [p.offset for p in scan_split_points(path, target_bytes, quote_aware=True, fs=fs)]


_csv_limit_lock = threading.Lock()


def _parse_csv_record(text: str) -> list[str]:
    """Fields of one complete CSV record (no trailing newline). Raises
    csv.Error on broken quoting."""
    if '"' not in text and "\r" not in text:
        # Unquoted records (the common case) are plain splits: ~10x faster than
        # building a csv.reader per record.
        return text.split(",")
    if len(text) < csv.field_size_limit():
        return next(csv.reader((text,), strict=True), [])
    # The csv module's field limit is process-wide state: raise it only for
    # this parse, under a lock, and put it back.
    with _csv_limit_lock:
        previous = csv.field_size_limit(len(text) + 1)
        try:
            return next(csv.reader((text,), strict=True), [])
        finally:
            csv.field_size_limit(previous)


def _blocks_to_record_end(first: tuple[int, int, bytes],
                          blocks: Iterator[tuple[int, int, bytes]]
                          ) -> Iterator[tuple[int, int, bytes]]:
    """`first` (a block that starts at a record boundary) and, while a quoted
    field is still open at the end of a block (an odd number of ``"`` so far),
    the blocks after it from `blocks`."""
    block = first
    quotes = 0
    while True:
        yield block
        quotes += block[2].count(b'"')
        if quotes % 2 == 0:
            return
        block = next(blocks, None)
        if block is None:
            return


def _iter_csv_batches(blocks: Iterator[tuple[int, int, bytes]]
                      ) -> Iterator[tuple[int, int, bytes | None, bool]]:
    """Yields ``(offset, line_no, data, plain)`` for the CSV records of `blocks`
    (which start at a record boundary), in order, each with the byte offset and
    line where it starts.

    With `plain`, `data` is a run of whole lines holding no ``"`` and no ``\\r``
    but in ``\\r\\n`` line ends (Python's csv module writes those), so that
    each line is one record of fields split at commas: most blocks of most
    files, read in one go by `_plain_csv_rows`. The record at offset 0 (the
    header, which may start with a byte-order mark) is never part of one.

    Otherwise `data` is one record, its physical lines grouped by quote parity,
    without its final ``\\n``; None when the record exceeds
    `_MAX_CSV_RECORD_BYTES`, and then nothing follows.
    """
    for first in blocks:
        offset, line_no, block = first
        # (`in` first: it stops early or scans the block at memchr speed)
        if b'"' not in block and (b"\r" not in block or not lone_carriage_return(block)):
            if offset == 0:
                header, _, block = block.partition(b"\n")
                yield 0, 1, header, False
                if not block:
                    continue
                offset, line_no = len(header) + 1, 2
            yield offset, line_no, block, True
            continue
        lines = chain.from_iterable(starmap(block_lines, _blocks_to_record_end(first, blocks)))
        for offset, line_no, line in lines:
            if line.count(b'"') % 2 == 0:
                yield offset, line_no, line, False
                continue
            parts, size, quotes = [line], len(line), 1
            for _, _, more in lines:
                parts.append(more)
                size += len(more) + 1
                quotes += more.count(b'"')
                if quotes % 2 == 0 or size > _MAX_CSV_RECORD_BYTES:
                    break
            if size > _MAX_CSV_RECORD_BYTES:
                yield offset, line_no, None, False
                return
            yield offset, line_no, b"\n".join(parts), False


def lone_carriage_return(block: bytes) -> bool:
    """True when a CR of `block` is not followed by LF (a CRLF file's
    blocks hold none): in one native pass where the kernels run, else by
    counting, which scans the block twice (~1.2 ms a MB)."""
    native = kernels()
    if native is not None:
        return native.lone_carriage_return(block)
    return block.count(b"\r") != block.count(b"\r\n")


def _decode_record(raw: bytes, first: bool) -> str:
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    text = raw.decode("utf-8")
    if first and text.startswith("\ufeff"):
        text = text[1:]
    return text


def _csv_header(batches: Iterator[tuple[int, int, bytes | None, bool]], source: str
                ) -> tuple[list[str] | None, dict | None]:
    """Reads and checks the header record (the first batch, never a plain run):
    (names, None) or (None, dead letter) or (None, None) for an empty file.
    A file without a usable header is not read: its dead letter stands for
    an unknown number of rows."""
    first = next(batches, None)
    if first is None:
        return None, None
    _, line_no, raw, _ = first
    if raw is None:
        return None, read_dead_letter(
            source, line_no, "csv_bad_header",
            f"{source}: the header starts a quoted field that never ends", None,
            rows=None)
    try:
        names = _parse_csv_record(_decode_record(raw, True))
    except UnicodeDecodeError as exc:
        return None, read_dead_letter(
            source, line_no, "invalid_utf8",
            f"{source}: the header line is not valid UTF-8 ({exc.reason} at byte {exc.start})",
            raw, rows=None)
    except csv.Error as exc:
        return None, read_dead_letter(
            source, line_no, "csv_bad_header", f"{source}: the header line is not valid CSV: {exc}",
            raw, rows=None)
    if not any(name.strip() for name in names):
        return None, read_dead_letter(
            source, line_no, "csv_bad_header",
            f"{source}: the first line must be a header naming the columns, but it is empty",
            names, rows=None)
    seen: set[str] = set()
    duplicates = sorted({name for name in names if name in seen or seen.add(name)})
    if duplicates:
        return None, read_dead_letter(
            source, line_no, "csv_bad_header",
            f"{source}: duplicate column names in the header: {', '.join(map(repr, duplicates))}"
            " (rename them so each column has one name)", names, rows=None)
    return names, None


def _counted_header_problem(problem: dict, batches: Iterator[tuple[int, int, bytes | None, bool]],
                            source: str) -> dict:
    """A header that parsed but cannot name the columns (empty, duplicate
    names; its dead letter's input is the names) leaves the file's records
    countable: its dead letter then stands for all of them, counted from
    `batches` (the rest of the file). Other header problems stand for an
    unknown number of rows."""
    if problem["reason"] != "csv_bad_header" or not isinstance(problem["input"], list):
        return problem
    rows = 0
    for _, _, data, plain in batches:
        if data is None:
            return problem  # a quote that never ends: the records cannot be told apart
        if plain:
            rows += sum(1 for line in data.split(b"\n") if line and line != b"\r")
        elif data and data != b"\r":
            rows += 1
    return read_dead_letter(source, problem["row"], "csv_bad_header",
                            f"{problem['message']}; its {rows} rows are not read",
                            problem["input"], rows=rows)


def iter_csv(path: str, *, start: int = 0, end: int | None = None,
             start_line: int | None = None, fs: fsspec.AbstractFileSystem | None = None,
             source: str | None = None, columns: bool = False
             ) -> Iterator[SourceRow | ColumnBatch | dict]:
    """Reads the CSV records that start in byte range ``[start, end)`` of `path`.

    Yields a `SourceRow` (values: column -> str) per good record and a read
    dead letter per bad one: ``csv_ragged_row`` (field count differs from the
    header's), ``invalid_utf8`` (that record only), ``csv_malformed`` (broken
    quoting); ``empty_file``, ``csv_bad_header`` and ``read_error`` stand for the
    whole file (or its unread rest).

    `start_line`: the line `start` is on, when `start` is a split point from
    `csv_split_points`/`scan_split_points`; without it the reader finds the first
    record at or after `start` by scanning from the beginning of the file.
    `fs`: an fsspec filesystem `path` belongs to (then `path` is that
    filesystem's path); `source`: the name to report (default: `path` redacted).
    `columns`: good rows of plain runs of lines (no quotes, one field per
    column) come as `ColumnBatch`es, the same rows column by column.
    """
    fs, fs_path, source = resolve(path, fs, source)
    cursor = Cursor(0, 1)
    try:
        with open_range(fs, fs_path, start, end, opener=_open) as f:
            if start > 0:
                header_cursor = Cursor(0, 1)
                names, problem = _csv_header(
                    _iter_csv_batches(iter_line_blocks(f, header_cursor, _BLOCK)), source)
                if names is None:
                    return  # the range starting at 0 reports the file's problem
                point = seek_to_record(f, fs, fs_path, start, start_line, True)
                if point is None:
                    return
                cursor = Cursor(*point)
                batches = _iter_csv_batches(iter_line_blocks(f, cursor, _BLOCK))
            else:
                batches = _iter_csv_batches(iter_line_blocks(f, cursor, _BLOCK))
                names, problem = _csv_header(batches, source)
                if problem is not None:
                    yield _counted_header_problem(problem, batches, source)
                    return
                if names is None:
                    yield empty_file(source)
                    return
            yield from _csv_rows(batches, names, source, end, columns)
    except READ_ERRORS as exc:
        yield read_error(source, cursor.line if cursor.offset > 0 else None, exc)


def _csv_rows(batches: Iterator[tuple[int, int, bytes | None, bool]], names: list[str],
              source: str, end: int | None, columns: bool
              ) -> Iterator[SourceRow | ColumnBatch | dict]:
    for offset, line_no, data, plain in batches:
        if end is not None and offset >= end:
            return
        if plain:
            # The lines that start at or after `end` belong to the next range.
            in_range = len(data) if end is None else (
                data.find(b"\n", end - offset - 1) + 1 or len(data))
            yield from _plain_csv_rows(data[:in_range], line_no, names, source, columns)
            if in_range < len(data):
                return  # without reading on, as for a record at or after `end`
            continue
        if data is None:
            yield read_dead_letter(
                source, line_no, "csv_malformed",
                f"{source} line {line_no}: a quoted field runs on for more than "
                f"{_MAX_CSV_RECORD_BYTES >> 20} MB (unterminated quote?); the rest of the "
                "file is not read", None, rows=None)
            return
        row = _csv_record_row(data, offset == 0, line_no, names, source)
        if row is not None:
            yield row


def _plain_csv_rows(run: bytes, line_no: int, names: list[str], source: str,
                    columns: bool = False) -> Iterator[SourceRow | ColumnBatch | dict]:
    """The rows of a plain run from `_iter_csv_batches` starting on line
    `line_no`. When every line is valid UTF-8 and has one field per column (the
    common case) the run is decoded and split in one go, and its rows are one
    ColumnBatch (`columns`) or built by `map` over the lines, without a Python
    loop either way; otherwise it goes record by record, whose dead letters
    name the line (and the byte of bad UTF-8). Where the native kernels run,
    a ColumnBatch is tested by `check_csv_run` instead and its fields are
    split only when asked (`CsvRunBatch`)."""
    if columns:
        batch = plain_run_batch(run, line_no, names, source)
        if batch is not None:
            return iter([batch])
    else:
        lines = _plain_lines(run, len(names))
        if lines is not None:
            # Commas are counted rather than fields, so that the field lists
            # are made one at a time below and freed at once: a block's
            # worth of them alive together would add to every garbage
            # collection's work.
            fields = map(str.split, lines, repeat(","))
            return map(SourceRow, repeat(source), count(line_no),
                       map(dict, map(zip, repeat(names), fields)))
    rows = (_csv_record_row(raw, False, record_line, names, source)
            for record_line, raw in enumerate(run.split(b"\n"), line_no))
    return (row for row in rows if row is not None)


def _csv_record_row(raw: bytes, first: bool, line_no: int, names: list[str],
                    source: str) -> SourceRow | dict | None:
    """The row or read dead letter for one record (`first`: it starts the
    file); None for a blank line, which is not a row."""
    if not raw or raw == b"\r":
        return None
    try:
        fields = _parse_csv_record(_decode_record(raw, first))
    except UnicodeDecodeError as exc:
        return read_dead_letter(
            source, line_no, "invalid_utf8",
            f"{source} line {line_no}: not valid UTF-8 ({exc.reason} at byte {exc.start} "
            "of the record)", raw)
    except csv.Error as exc:
        return read_dead_letter(
            source, line_no, "csv_malformed",
            f"{source} line {line_no}: broken CSV quoting: {exc}", raw)
    if len(fields) != len(names):
        return read_dead_letter(
            source, line_no, "csv_ragged_row",
            f"{source} line {line_no}: {len(fields)} fields, but the header has {len(names)}",
            fields)
    return SourceRow(source, line_no, dict(zip(names, fields)))


def read_csv_header(path: str, *, fs: fsspec.AbstractFileSystem | None = None
                    ) -> list[str] | None:
    """The column names of a CSV file as `iter_csv` reads them, or None when
    the file has no usable header (empty, unreadable, not UTF-8, duplicate
    names: the reader makes such a file a dead letter)."""
    fs, fs_path, source = resolve(path, fs, None)
    try:
        with _open(fs, fs_path) as f:
            names, _ = _csv_header(
                _iter_csv_batches(iter_line_blocks(f, Cursor(0, 1), _BLOCK)), source)
    except READ_ERRORS:
        return None
    return names
