"""Row readers for table files (CSV, JSONL, Parquet): plain generators, no Beam.

Each reader opens one file through fsspec and yields, in file order, a
`SourceRow` for every good row and a dead-letter dict (stage ``read``) for every
row it cannot read. Every input row yields exactly one of the two, so counting
what a reader yields counts the file's rows. A unit that cannot be read at all
(an unreadable file, a CSV file without a usable header, a Parquet row group that
does not decode) yields one dead letter standing for it.

Conventions shared by all readers:

* ``source`` is the path as listed, with credentials removed (`redact_url`).
* ``row`` is the 1-based line where the record starts (CSV: the header is line 1
  and a quoted field with newlines spans several lines; JSONL: the line number;
  Parquet: the 1-based row index in the file). Lines are counted by ``\\n``.
* Files ending in ``.gz`` (or another suffix fsspec knows) are decompressed
  transparently; byte offsets then refer to the decompressed stream.
* Blank lines are not rows: they are skipped (CSV and JSONL) and not counted.

CSV follows RFC 4180 with Python's ``csv`` module in strict mode for quoted
records: values are ``str``; an empty field is ``""``; a UTF-8 byte-order mark
is dropped; NUL characters are kept as data; fields of any size are read (no
131072-character limit). Record boundaries are found by quote parity: a newline
ends a record iff the number of ``"`` characters before it is even (escaped
quotes are doubled, so parity is preserved). A stray quote inside an unquoted
field therefore joins lines until the next stray quote; that joined record is
reported as ``csv_malformed``. Duplicate column names make the header unusable
(``csv_bad_header``, naming the duplicates) rather than being renamed silently.

JSONL values are the parsed objects; duplicate keys keep the last value.
Parquet values are `pyarrow`'s Python conversions (``to_pylist``).

Byte ranges let several workers read one big file: a reader given
``[start, end)`` yields exactly the records that start in that range, so the
ranges between consecutive `csv_split_points` / `jsonl_split_points` partition
the file's records.
"""

from __future__ import annotations

import contextlib
import csv
import json
import threading
import zlib
from itertools import chain, count, repeat, starmap
from typing import IO, Any, Iterable, Iterator, NamedTuple

import fsspec
from fsspec.implementations.local import LocalFileSystem
from isal import isal_zlib

from ..schemas.dead_letters import dead_letter
from . import page_cache
from .rows import ColumnBatch, SourceRow
from .urls import redact_url

__all__ = [
    "READ_ERRORS",
    "SplitPoint",
    "csv_split_points",
    "display_name",
    "is_compressed",
    "iter_csv",
    "iter_jsonl",
    "iter_parquet",
    "iter_table",
    "jsonl_split_points",
    "parquet_row_groups",
    "read_error",
    "scan_split_points",
]

# Exceptions that mean "this file cannot be read" rather than "this row is
# bad": I/O and permission errors, and damaged compression streams (fsspec
# decompresses .gz with isal when it is installed, which it is here: isal's
# error is not zlib's).
READ_ERRORS = (OSError, EOFError, zlib.error, isal_zlib.error)

_BLOCK = 1 << 20
# Parquet record batches hold about _BLOCK bytes of column data (as the
# file's metadata counts them, uncompressed), within these many rows: every
# batch costs a fixed amount downstream, so narrow rows come thousands at a
# time (a 1M-row table of ~100-byte rows, ~10,000 rows a batch, built 1.09x
# as fast as with 1024-row batches), and wide ones (image bytes) a few at a
# time.
_PARQUET_BATCH_ROWS = (16, 16384)
# A quoted CSV record longer than this is an unterminated quote in practice;
# reading stops there instead of holding the rest of the file in memory.
_MAX_CSV_RECORD_BYTES = 256 << 20
# JSON nested deeper than this would exhaust the stack of whatever later walks
# the value (checks, dead-letter serialisation), so it is refused at read time.
_MAX_JSON_DEPTH = 64

# ---------------------------------------------------------------------------
# Paths and provenance

def display_name(fs: fsspec.AbstractFileSystem, path: str) -> str:
    """The name shown for `path` of `fs` in rows and dead letters: the local path,
    or the URL with credentials removed."""
    if isinstance(fs, LocalFileSystem):
        return path
    return redact_url(fs.unstrip_protocol(path))


def is_compressed(path: str) -> bool:
    """True when the file is read through a decompressor (``.gz`` ...), so it
    cannot be split into byte ranges."""
    return fsspec.utils.infer_compression(path) is not None


def read_error(source: str, row: int | None, exc: BaseException, *,
               input: Any = None) -> dict:
    """The dead letter for a file (or the rest of one) that cannot be read."""
    message = redact_url(f"cannot read {source}: {type(exc).__name__}: {exc}")
    return dead_letter(source=source, row=row, key=None, stage="read",
                       reason="read_error", feature=None, message=message,
                       input=input if input is not None else source)


def _read_dead_letter(source: str, row: int | None, reason: str, message: str,
                      input: Any) -> dict:
    return dead_letter(source=source, row=row, key=None, stage="read", reason=reason,
                       feature=None, message=message, input=input)


def _resolve(path: str, fs: fsspec.AbstractFileSystem | None,
             source: str | None) -> tuple[fsspec.AbstractFileSystem, str, str]:
    if fs is None:
        fs, fs_path = fsspec.core.url_to_fs(path)
    else:
        fs_path = path
    return fs, fs_path, source if source is not None else redact_url(path)


def _open(fs: fsspec.AbstractFileSystem, path: str) -> IO[bytes]:
    return fs.open(path, "rb", compression="infer")


@contextlib.contextmanager
def _open_range(fs: fsspec.AbstractFileSystem, path: str, start: int,
                end: int | None) -> Iterator[IO[bytes]]:
    """`_open` for reading the records of ``[start, end)``: once they are all
    read, those bytes are dropped from the page cache (`page_cache`; the
    bytes just past `end` are left for the next range's reader)."""
    with _open(fs, path) as f:
        yield f
        page_cache.drop_behind(f, start, 0 if end is None else end - start)


# ---------------------------------------------------------------------------
# Lines and record boundaries

class SplitPoint(NamedTuple):
    """A record boundary: byte `offset` where a record starts and the 1-based
    `line` it starts on."""

    offset: int
    line: int


def _iter_boundaries(f: IO[bytes], first_target: int, step: int | None,
                     quote_aware: bool) -> Iterator[SplitPoint]:
    """Streams `f` from its current position (taken as offset 0) and yields the
    first record boundary at or after `first_target`, then, if `step` is set,
    the first boundary at or after each previous boundary + `step`.

    A boundary is offset 0 or an offset just after a ``\\n``; with
    `quote_aware`, only if the number of ``"`` before it is even. Line numbers
    come from counting ``\\n`` in the same pass (``bytes.count``: memchr speed).
    """
    target = first_target
    if target <= 0:
        yield SplitPoint(0, 1)
        if step is None:
            return
        target = step
    base = 0       # offset of the current block
    newlines = 0   # "\n" before the accounted position
    quotes = 0     # '"' before the accounted position (only parity matters)
    while True:
        block = f.read(_BLOCK)
        if not block:
            return
        size = len(block)
        done = 0   # block[:done] is accounted in newlines/quotes
        while True:
            # A boundary at offset p needs a newline at p - 1.
            want = target - base - 1
            if want >= size:
                break
            nl = block.find(b"\n", max(want, done))
            if nl < 0:
                break
            if quote_aware:
                quotes += block.count(b'"', done, nl)
            newlines += block.count(b"\n", done, nl + 1)
            done = nl + 1
            if not quote_aware or quotes % 2 == 0:
                point = SplitPoint(base + nl + 1, newlines + 1)
                yield point
                if step is None:
                    return
                target = point.offset + step
        if quote_aware:
            quotes += block.count(b'"', done)
        newlines += block.count(b"\n", done)
        base += size


def scan_split_points(path: str, target_bytes: int, *, quote_aware: bool,
                      fs: fsspec.AbstractFileSystem | None = None) -> list[SplitPoint]:
    """Record boundaries about `target_bytes` apart, found in one streaming pass.

    The first point is ``(0, 1)``; consecutive points delimit ranges that
    partition the file's records (the last range ends at the end of the file).
    `quote_aware` selects CSV boundaries (even quote parity) over plain newlines.
    """
    if target_bytes <= 0:
        raise ValueError(f"target_bytes must be positive, got {target_bytes}")
    fs, fs_path, _ = _resolve(path, fs, None)
    with _open(fs, fs_path) as f:
        points = list(_iter_boundaries(f, 0, target_bytes, quote_aware))
        end = f.tell()
    # A boundary at the very end of the file starts no record.
    while len(points) > 1 and points[-1].offset >= end:
        points.pop()
    return points


def csv_split_points(path: str, target_bytes: int, *,
                     fs: fsspec.AbstractFileSystem | None = None) -> list[int]:
    """Byte offsets where CSV records start, about `target_bytes` apart, never
    inside a quoted field; the first is 0. Read ``[points[i], points[i+1])``
    (the last up to the end) with `iter_csv`."""
    return [p.offset for p in scan_split_points(path, target_bytes, quote_aware=True, fs=fs)]


def jsonl_split_points(path: str, target_bytes: int, *,
                       fs: fsspec.AbstractFileSystem | None = None) -> list[int]:
    """Byte offsets where JSONL lines start, about `target_bytes` apart; the
    first is 0."""
    return [p.offset for p in scan_split_points(path, target_bytes, quote_aware=False, fs=fs)]


class _Cursor:
    """Where a line reader is: byte offset and 1-based line number of the line it
    is on (the one last handed out, or the one a read is for); shared with the
    caller so that an I/O error can name the line."""

    __slots__ = ("offset", "line")

    def __init__(self, offset: int, line: int):
        self.offset = offset
        self.line = line


def _iter_line_blocks(f: IO[bytes], cursor: _Cursor) -> Iterator[tuple[int, int, bytes]]:
    """Yields ``(offset, line_no, block)`` for `f` from the cursor's position:
    `block` is a run of whole lines starting at byte `offset` on line `line_no`,
    each line ending in ``\\n`` but the file's last. Reads big blocks; a line
    longer than a block is assembled from pieces joined once (no quadratic
    copying). Before each read the cursor is set to the first line not yet read
    in full."""
    offset, line_no = cursor.offset, cursor.line
    pending: list[bytes] = []
    while True:
        cursor.offset, cursor.line = offset, line_no
        data = f.read(_BLOCK)
        if not data:
            break
        whole_lines_end = data.rfind(b"\n") + 1
        if not whole_lines_end:
            pending.append(data)
            continue
        # A memoryview slice is not a copy: the join below is the one copy.
        pending.append(memoryview(data)[:whole_lines_end])
        block = b"".join(pending)
        pending = [data[whole_lines_end:]] if whole_lines_end < len(data) else []
        yield offset, line_no, block
        offset += len(block)
        line_no += block.count(b"\n")
    if pending:
        yield offset, line_no, b"".join(pending)


def _block_lines(offset: int, line_no: int, block: bytes) -> Iterator[tuple[int, int, bytes]]:
    """Yields ``(offset, line_no, line)`` for the lines of a block from
    `_iter_line_blocks`, each line without its ``\\n``."""
    lines = block.split(b"\n")
    if not lines[-1]:
        lines.pop()  # the block's last "\n" ends a line, it starts none
    for line in lines:
        yield offset, line_no, line
        offset += len(line) + 1
        line_no += 1


def _iter_lines(f: IO[bytes], cursor: _Cursor) -> Iterator[tuple[int, int, bytes]]:
    """Yields ``(offset, line_no, line)`` for the lines of `f` from the cursor's
    position, each line without its ``\\n``. Reads big blocks; a line longer
    than a block is assembled from pieces joined once (no quadratic copying)."""
    offset, line_no = cursor.offset, cursor.line
    pending: list[bytes] = []
    while True:
        block = f.read(_BLOCK)
        if not block:
            break
        parts = block.split(b"\n")
        if len(parts) == 1:
            pending.append(block)
            continue
        if pending:
            pending.append(parts[0])
            parts[0] = b"".join(pending)
            pending = []
        tail = parts.pop()
        for line in parts:
            cursor.offset, cursor.line = offset, line_no
            yield offset, line_no, line
            offset += len(line) + 1
            line_no += 1
        if tail:
            pending.append(tail)
        cursor.offset, cursor.line = offset, line_no
    if pending:
        cursor.offset, cursor.line = offset, line_no
        yield offset, line_no, b"".join(pending)


def _seek_to_record(f: IO[bytes], fs, fs_path: str, start: int, start_line: int | None,
                    quote_aware: bool) -> SplitPoint | None:
    """Positions `f` at the first record boundary at or after `start` and returns
    it; None when no record starts there. With `start_line` the caller vouches
    that `start` is a boundary on that line (a split point), which skips the
    scan from the beginning of the file."""
    if start <= 0:
        return SplitPoint(0, 1)
    if start_line is not None:
        f.seek(start)
        return SplitPoint(start, start_line)
    with _open(fs, fs_path) as scan:
        point = next(_iter_boundaries(scan, start, None, quote_aware), None)
    if point is not None:
        f.seek(point.offset)
    return point


# ---------------------------------------------------------------------------
# CSV

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
        if b'"' not in block and block.count(b"\r") == block.count(b"\r\n"):
            if offset == 0:
                header, _, block = block.partition(b"\n")
                yield 0, 1, header, False
                if not block:
                    continue
                offset, line_no = len(header) + 1, 2
            yield offset, line_no, block, True
            continue
        lines = chain.from_iterable(starmap(_block_lines, _blocks_to_record_end(first, blocks)))
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
    (names, None) or (None, dead letter) or (None, None) for an empty file."""
    first = next(batches, None)
    if first is None:
        return None, None
    _, line_no, raw, _ = first
    if raw is None:
        return None, _read_dead_letter(
            source, line_no, "csv_bad_header",
            f"{source}: the header starts a quoted field that never ends", None)
    try:
        names = _parse_csv_record(_decode_record(raw, True))
    except UnicodeDecodeError as exc:
        return None, _read_dead_letter(
            source, line_no, "invalid_utf8",
            f"{source}: the header line is not valid UTF-8 ({exc.reason} at byte {exc.start})",
            raw)
    except csv.Error as exc:
        return None, _read_dead_letter(
            source, line_no, "csv_bad_header", f"{source}: the header line is not valid CSV: {exc}",
            raw)
    if not any(name.strip() for name in names):
        return None, _read_dead_letter(
            source, line_no, "csv_bad_header",
            f"{source}: the first line must be a header naming the columns, but it is empty",
            names)
    seen: set[str] = set()
    duplicates = sorted({name for name in names if name in seen or seen.add(name)})
    if duplicates:
        return None, _read_dead_letter(
            source, line_no, "csv_bad_header",
            f"{source}: duplicate column names in the header: {', '.join(map(repr, duplicates))}"
            " (rename them so each column has one name)", names)
    return names, None


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
    fs, fs_path, source = _resolve(path, fs, source)
    cursor = _Cursor(0, 1)
    try:
        with _open_range(fs, fs_path, start, end) as f:
            if start > 0:
                header_cursor = _Cursor(0, 1)
                names, problem = _csv_header(
                    _iter_csv_batches(_iter_line_blocks(f, header_cursor)), source)
                if names is None:
                    return  # the range starting at 0 reports the file's problem
                point = _seek_to_record(f, fs, fs_path, start, start_line, True)
                if point is None:
                    return
                cursor = _Cursor(*point)
                batches = _iter_csv_batches(_iter_line_blocks(f, cursor))
            else:
                batches = _iter_csv_batches(_iter_line_blocks(f, cursor))
                names, problem = _csv_header(batches, source)
                if problem is not None:
                    yield problem
                    return
                if names is None:
                    yield _read_dead_letter(source, None, "empty_file",
                                            f"{source} is empty", source)
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
            yield _read_dead_letter(
                source, line_no, "csv_malformed",
                f"{source} line {line_no}: a quoted field runs on for more than "
                f"{_MAX_CSV_RECORD_BYTES >> 20} MB (unterminated quote?); the rest of the "
                "file is not read", None)
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
    name the line (and the byte of bad UTF-8)."""
    try:
        text = run.decode("utf-8")
        if "\r" in text:
            # Every CR ends a line (see _iter_csv_batches), as the per-record
            # path's _decode_record would strip it.
            text = text.replace("\r\n", "\n")
        lines = text.split("\n")
    except UnicodeDecodeError:
        pass
    else:
        if not lines[-1]:
            lines.pop()  # the run's last "\n" ends a line, it starts none
        if "" not in lines and set(map(str.count, lines, repeat(","))) == {len(names) - 1}:
            if columns:
                # Every line has len(names) fields, so the fields of all of
                # them, in one list, hold column i at i, i + width, ...
                fields = ",".join(lines).split(",")
                width = len(names)
                return iter([ColumnBatch(source, line_no, {
                    name: fields[i::width] for i, name in enumerate(names)})])
            # Commas are counted rather than fields, so that the field lists are
            # made one at a time below and freed at once: a block's worth of
            # them alive together would add to every garbage collection's work.
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
        return _read_dead_letter(
            source, line_no, "invalid_utf8",
            f"{source} line {line_no}: not valid UTF-8 ({exc.reason} at byte {exc.start} "
            "of the record)", raw)
    except csv.Error as exc:
        return _read_dead_letter(
            source, line_no, "csv_malformed",
            f"{source} line {line_no}: broken CSV quoting: {exc}", raw)
    if len(fields) != len(names):
        return _read_dead_letter(
            source, line_no, "csv_ragged_row",
            f"{source} line {line_no}: {len(fields)} fields, but the header has {len(names)}",
            fields)
    return SourceRow(source, line_no, dict(zip(names, fields)))


# ---------------------------------------------------------------------------
# JSONL

def _json_depth_exceeds(value: Any, limit: int) -> bool:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


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
    fs, fs_path, source = _resolve(path, fs, source)
    cursor = _Cursor(0, 1)
    try:
        with _open_range(fs, fs_path, start, end) as f:
            point = _seek_to_record(f, fs, fs_path, start, start_line, False)
            if point is None:
                return
            cursor = _Cursor(*point)
            seen_any = False
            for line_start, line_no, raw in _iter_lines(f, cursor):
                if end is not None and line_start >= end:
                    return
                seen_any = True
                row = _jsonl_row(raw, source, line_no, line_start == 0)
                if row is not None:
                    yield row
            if start <= 0 and not seen_any:
                yield _read_dead_letter(source, None, "empty_file", f"{source} is empty", source)
    except READ_ERRORS as exc:
        yield read_error(source, cursor.line if cursor.offset > 0 else None, exc)


def _jsonl_row(raw: bytes, source: str, line_no: int, first: bool) -> SourceRow | dict | None:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return _read_dead_letter(
            source, line_no, "invalid_utf8",
            f"{source} line {line_no}: not valid UTF-8 ({exc.reason} at byte {exc.start})", raw)
    if first and text.startswith("\ufeff"):
        text = text[1:]
    if not text.strip():
        return None
    try:
        value = json.loads(text)
    except RecursionError:
        return _read_dead_letter(
            source, line_no, "json_invalid",
            f"{source} line {line_no}: JSON nested too deeply to parse", raw)
    except ValueError as exc:
        return _read_dead_letter(
            source, line_no, "json_invalid", f"{source} line {line_no}: invalid JSON: {exc}", raw)
    if not isinstance(value, dict):
        return _read_dead_letter(
            source, line_no, "json_invalid",
            f"{source} line {line_no}: a JSON {type(value).__name__} where each line must hold "
            "one JSON object", raw)
    # Counting brackets first keeps the exact walk off the common path.
    if (text.count("{") + text.count("[") > _MAX_JSON_DEPTH
            and _json_depth_exceeds(value, _MAX_JSON_DEPTH)):
        return _read_dead_letter(
            source, line_no, "json_invalid",
            f"{source} line {line_no}: JSON nested deeper than {_MAX_JSON_DEPTH} levels", raw)
    return SourceRow(source, line_no, value)


# ---------------------------------------------------------------------------
# Parquet

def _parquet_file(f: IO[bytes]):
    import pyarrow.parquet as pq  # imported here: only Parquet sources need it
    return pq.ParquetFile(f)


def parquet_row_groups(path: str, *, fs: fsspec.AbstractFileSystem | None = None
                       ) -> list[tuple[int, int]]:
    """``(num_rows, total_byte_size)`` of each row group, from the footer only."""
    fs, fs_path, _ = _resolve(path, fs, None)
    with _open(fs, fs_path) as f:
        metadata = _parquet_file(f).metadata
        return [(metadata.row_group(i).num_rows, metadata.row_group(i).total_byte_size)
                for i in range(metadata.num_row_groups)]


def iter_parquet(path: str, *, row_groups: Iterable[int] | None = None,
                 batch_size: int | None = None, fs: fsspec.AbstractFileSystem | None = None,
                 source: str | None = None, columns: bool = False
                 ) -> Iterator[SourceRow | ColumnBatch | dict]:
    """Reads the rows of the given row groups (default: all) of a Parquet file,
    one record batch of `batch_size` rows at a time (default: about 1 MB of
    the row group's data; memory is bounded by a row group's column chunks
    plus one batch).

    Yields a `SourceRow` per row (values: column -> Python value; `row` the
    1-based row index in the file) and dead letters: ``empty_file``,
    ``parquet_invalid`` (an unreadable footer stands for the file; a row group
    that fails to decode stands for its unread rows), ``read_error``.
    `columns`: each record batch comes as one `ColumnBatch` instead.
    """
    import pyarrow as pa

    fs, fs_path, source = _resolve(path, fs, source)
    try:
        with _open(fs, fs_path) as f:
            if f.seek(0, 2) == 0:
                yield _read_dead_letter(source, None, "empty_file", f"{source} is empty", source)
                return
            f.seek(0)
            try:
                parquet = _parquet_file(f)
            except (pa.ArrowException, ValueError) as exc:
                # Arrow reports damage as ArrowInvalid or ArrowIOError alike;
                # plain OSErrors from the file itself stay read errors.
                yield _read_dead_letter(source, None, "parquet_invalid",
                                        f"{source} is not a readable Parquet file: {exc}", source)
                return
            metadata = parquet.metadata
            firsts = [0]
            for i in range(metadata.num_row_groups):
                firsts.append(firsts[-1] + metadata.row_group(i).num_rows)
            groups = range(metadata.num_row_groups) if row_groups is None else row_groups
            for group in groups:
                if not 0 <= group < metadata.num_row_groups:
                    yield read_error(source, None, IndexError(
                        f"row group {group} does not exist (the file has "
                        f"{metadata.num_row_groups}; was it replaced after listing?)"))
                    continue
                rows = batch_size or _parquet_batch_rows(metadata.row_group(group))
                yield from _parquet_group(parquet, group, firsts[group], rows, source, columns)
    except READ_ERRORS as exc:
        yield read_error(source, None, exc)


def _parquet_batch_rows(row_group) -> int:
    """Rows of `row_group` (its metadata) in about _BLOCK bytes."""
    row_bytes = row_group.total_byte_size / max(1, row_group.num_rows)
    low, high = _PARQUET_BATCH_ROWS
    return int(min(high, max(low, _BLOCK // max(1.0, row_bytes))))


def _parquet_group(parquet, group: int, first_row: int, batch_size: int, source: str,
                   columns: bool) -> Iterator[SourceRow | ColumnBatch | dict]:
    import pyarrow as pa

    row = first_row
    try:
        for batch in parquet.iter_batches(batch_size=batch_size, row_groups=[group],
                                          use_threads=False):
            if columns:
                # (the same Python values as to_pylist's, a column at a time)
                yield ColumnBatch(source, row + 1, batch.to_pydict())
                row += batch.num_rows
                continue
            for values in batch.to_pylist():
                row += 1
                yield SourceRow(source, row, values)
    except (pa.ArrowException, ValueError, OSError) as exc:
        # Damaged pages surface as ArrowIOError (an OSError) as often as
        # ArrowInvalid; either way this row group is lost and the next may not be.
        yield _read_dead_letter(
            source, row + 1, "parquet_invalid",
            f"{source}: row group {group} cannot be decoded from row {row + 1} on: {exc}",
            {"row_group": group})


# ---------------------------------------------------------------------------

def iter_table(path: str, format: str, **kwargs) -> Iterator[SourceRow | dict]:
    """`iter_csv`, `iter_jsonl` or `iter_parquet` by `format` name."""
    readers = {"csv": iter_csv, "jsonl": iter_jsonl, "parquet": iter_parquet}
    if format not in readers:
        raise ValueError(f"unknown table format {format!r}; expected one of {sorted(readers)}")
    return readers[format](path, **kwargs)
