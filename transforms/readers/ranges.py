"""Record boundaries and line cursors, so that several readers can share one big file.

A line-based file (CSV, JSONL) is split at record boundaries: offset 0, or an
offset just after a ``\\n`` (for CSV, only where the number of ``"`` before
it is even: escaped quotes are doubled, so parity is preserved). Lines are
counted by ``\\n``. A reader given ``[start, end)`` yields exactly the
records that start in that range, so the ranges between consecutive
`scan_split_points` partition the file's records (`csv.csv_split_points`,
`jsonl.jsonl_split_points`).

The line iterators here read big blocks (`BLOCK`) and hand out whole lines;
a `Cursor` shared with the reader tells where it is, so that an I/O error
can name the line.
"""

from __future__ import annotations

from typing import IO, Iterator, NamedTuple

import fsspec

from ...schemas.native import kernels
from .common import open_file, resolve

__all__ = [
    "BLOCK",
    "Cursor",
    "SplitPoint",
    "block_lines",
    "iter_line_blocks",
    "iter_lines",
    "scan_split_points",
    "seek_to_record",
]

# Bytes read at a time.
BLOCK = 1 << 20


class SplitPoint(NamedTuple):
    """A record boundary: byte `offset` where a record starts and the 1-based
    `line` it starts on."""

    offset: int
    line: int


def _newlines_quotes(block: bytes, start: int, end: int, quotes: bool = True
                     ) -> tuple[int, int]:
    """``(newlines, quotes)``: the ``\\n`` and ``"`` bytes in
    ``block[start:end]`` (0 <= start, end), in one native pass where the
    kernels run (`bytes.count` tests a byte at a time and is called once per
    byte sought); in Python, quotes only when `quotes` is set (else 0)."""
    native = kernels()
    if native is not None:
        return native.count_newlines_quotes(block, start, end)
    return (block.count(b"\n", start, end),
            block.count(b'"', start, end) if quotes else 0)


def count_newlines(block: bytes, start: int, end: int) -> int:
    """The ``\\n`` bytes in ``block[start:end]``, natively where the kernels run."""
    return _newlines_quotes(block, start, end, False)[0]


def _iter_boundaries(f: IO[bytes], first_target: int, step: int | None,
                     quote_aware: bool, digest=None) -> Iterator[SplitPoint]:
    """Streams `f` from its current position (taken as offset 0) and yields the
    first record boundary at or after `first_target`, then, if `step` is set,
    the first boundary at or after each previous boundary + `step`.

    A boundary is offset 0 or an offset just after a ``\\n``; with
    `quote_aware`, only if the number of ``"`` before it is even. Line numbers
    come from counting ``\\n`` in the same pass (`_newlines_quotes`).
    `digest`: fed every block read, in order (with `step`, the scan reads
    to the end: the digest is then of every byte from the start position).
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
        block = f.read(BLOCK)
        if not block:
            return
        if digest is not None:
            digest.update(block)
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
            # (block[nl] is the newline: no quote, so counting to nl + 1
            # counts the quotes before it)
            more_newlines, more_quotes = _newlines_quotes(block, done, nl + 1, quote_aware)
            newlines, quotes = newlines + more_newlines, quotes + more_quotes
            done = nl + 1
            if not quote_aware or quotes % 2 == 0:
                point = SplitPoint(base + nl + 1, newlines + 1)
                yield point
                if step is None:
                    return
                target = point.offset + step
        more_newlines, more_quotes = _newlines_quotes(block, done, size, quote_aware)
        newlines, quotes = newlines + more_newlines, quotes + more_quotes
        base += size


def scan_split_points(path: str, target_bytes: int, *, quote_aware: bool,
                      fs: fsspec.AbstractFileSystem | None = None,
                      digest=None) -> list[SplitPoint]:
    """Record boundaries about `target_bytes` apart, found in one streaming pass.

    The first point is ``(0, 1)``; consecutive points delimit ranges that
    partition the file's records (the last range ends at the end of the file).
    `quote_aware` selects CSV boundaries (even quote parity) over plain newlines.
    `digest` (an ``xxhash.xxh3_128``, say) is fed every byte of the file
    (as its reader decompresses it), so that one read both plans and hashes.
    """
    if target_bytes <= 0:
        raise ValueError(f"target_bytes must be positive, got {target_bytes}")
    fs, fs_path, _ = resolve(path, fs, None)
    with open_file(fs, fs_path) as f:
        points = list(_iter_boundaries(f, 0, target_bytes, quote_aware, digest))
        end = f.tell()
    # A boundary at the very end of the file starts no record.
    while len(points) > 1 and points[-1].offset >= end:
        points.pop()
    return points


class Cursor:
    """Where a line reader is: byte offset and 1-based line number of the line it
    is on (the one last handed out, or the one a read is for); shared with the
    caller so that an I/O error can name the line."""

    __slots__ = ("offset", "line")

    def __init__(self, offset: int, line: int):
        self.offset = offset
        self.line = line


def iter_line_blocks(f: IO[bytes], cursor: Cursor, block_size: int = BLOCK
                     ) -> Iterator[tuple[int, int, bytes]]:
    """Yields ``(offset, line_no, block)`` for `f` from the cursor's position:
    `block` is a run of whole lines starting at byte `offset` on line `line_no`,
    each line ending in ``\\n`` but the file's last. Reads big blocks; a line
    longer than a block is assembled from pieces joined once (no quadratic
    copying); `block_size` bytes are read at a time. Before each read the
    cursor is set to the first line not yet read in full."""
    offset, line_no = cursor.offset, cursor.line
    pending: list[bytes] = []
    while True:
        cursor.offset, cursor.line = offset, line_no
        data = f.read(block_size)
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
        line_no += count_newlines(block, 0, len(block))
    if pending:
        yield offset, line_no, b"".join(pending)


def block_lines(offset: int, line_no: int, block: bytes) -> Iterator[tuple[int, int, bytes]]:
    """Yields ``(offset, line_no, line)`` for the lines of a block from
    `iter_line_blocks`, each line without its ``\\n``."""
    lines = block.split(b"\n")
    if not lines[-1]:
        lines.pop()  # the block's last "\n" ends a line, it starts none
    for line in lines:
        yield offset, line_no, line
        offset += len(line) + 1
        line_no += 1


def iter_lines(f: IO[bytes], cursor: Cursor) -> Iterator[tuple[int, int, bytes]]:
    """Yields ``(offset, line_no, line)`` for the lines of `f` from the cursor's
    position, each line without its ``\\n``. Reads big blocks; a line longer
    than a block is assembled from pieces joined once (no quadratic copying)."""
    offset, line_no = cursor.offset, cursor.line
    pending: list[bytes] = []
    while True:
        block = f.read(BLOCK)
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


def seek_to_record(f: IO[bytes], fs, fs_path: str, start: int, start_line: int | None,
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
    with open_file(fs, fs_path) as scan:
        point = next(_iter_boundaries(scan, start, None, quote_aware), None)
    if point is not None:
        f.seek(point.offset)
    return point
