"""Where a bucket's sorted records go: chunks, or a shard's rows.

No Beam. Bucket sorting (`sorting`) and the shuffle exchange give a
writer a bucket's framed records in order, a block at a time
(`write_framed`); `needs_bytes` says when their sizes are enough, so rows
that nothing writes are never gathered.

`CellWriter` cuts the bucket into the split's cells (key-ordered gzip
output), each one gzip member of framed records, so that shards are
assembled from them by concatenation, without recompressing. `ShardRowsWriter` writes the rows one shard holds when shards are
cut at rows (gzip: into a `tfrecord.GzipStream`, one member a shard, the
way `gzip_written_size` compresses the ratio sample the shard count comes
from).
"""

from __future__ import annotations

from typing import Any, BinaryIO, Callable, Iterable, Sequence

import numpy as np

from .. import tfrecord
from .cells import cells_of_rows, check_seam, seam_cells
from .elements import Chunk
from .shard_cuts import shards_of_rows, shards_touched

__all__ = ["CellWriter", "ShardRowsWriter", "gzip_written_size", "join_seam"]

class CellWriter:
    """Takes a sorted bucket's framed records in order and writes them to
    `out` as the split's cells, each one gzip member at `gzip_level`
    (`cells.cells_of_rows`: a cell's rows are those whose bytes'
    midpoint lies in it; `start`, `size`: the bucket's first byte in the
    split and its bytes; `total`: the split's). `chunks` lists what was
    written (offsets in `out`).

    Rows in a cell the bucket may share with a neighbour
    (`cells.seam_cells`) are not compressed here but kept, as they
    are, in `seams`: cell -> (framed records, rows), for the step that
    joins a seam's pieces."""

    def __init__(self, out: BinaryIO, *, start: int, size: int, total: int, cell_bytes: int,
                 gzip_level: int):
        self._out = out
        self._cell_bytes = cell_bytes
        self._level = gzip_level
        self.start = start
        self.offset = start  # the next record's first byte in the split
        self._written = 0
        self._seam_pieces: dict[int, list] = {
            cell: [] for cell in seam_cells(start, size, total, cell_bytes)}
        self._seam_rows = dict.fromkeys(self._seam_pieces, 0)
        self._cell: int | None = None
        self._pending: list[memoryview] = []
        self._pending_rows = 0
        self.chunks: list[Chunk] = []

    def needs_bytes(self, nbytes: int) -> bool:
        """Whether the next `nbytes` of records must be given as bytes."""
        return True

    def write_framed(self, data, sizes: np.ndarray) -> None:
        """Writes framed records held back to back in `data` (not modified
        until the bucket is written), with `sizes` their framed sizes."""
        sizes = np.asarray(sizes, dtype=np.int64)
        if not len(sizes):
            return
        view = memoryview(data)
        ends = np.cumsum(sizes)
        cells = cells_of_rows(self.offset + ends - sizes, sizes, self._cell_bytes)
        edges = [0, *(np.flatnonzero(np.diff(cells)) + 1).tolist(), len(sizes)]
        for first, last in zip(edges[:-1], edges[1:]):
            cell = int(cells[first])
            piece = view[int(ends[first] - sizes[first]):int(ends[last - 1])]
            if cell in self._seam_pieces:
                self._seam_pieces[cell].append(bytes(piece))
                self._seam_rows[cell] += last - first
                continue
            if cell != self._cell:
                self._flush()
                self._cell = cell
            self._pending.append(piece)
            self._pending_rows += last - first
        self.offset += int(ends[-1])

    def close(self) -> list[Chunk]:
        self._flush()
        return self.chunks

    @property
    def seams(self) -> dict[int, tuple[bytes, int]]:
        """Seam cell -> (the bucket's framed records in it, their count)."""
        return {cell: (b"".join(pieces), self._seam_rows[cell])
                for cell, pieces in self._seam_pieces.items()}

    def _flush(self) -> None:
        if not self._pending_rows:
            return
        data = tfrecord.gzip_compress(b"".join(self._pending), self._level)
        self._out.write(data)
        self.chunks.append(Chunk(self._written, len(data), self._pending_rows))
        self._written += len(data)
        self._pending = []
        self._pending_rows = 0


def join_seam(split: str, cell: int, cell_bytes: int, pieces: Iterable[tuple], gzip_level: int,
              read: Callable[[Any], bytes] | None = None) -> tuple[int, bytes, int] | None:
    """The chunk of a cell that several buckets share (a seam), from the
    pieces they sent: ``(bucket, bucket start, bucket end, split total,
    rows, records)``, in any order, a piece delivered twice (a retried
    step) counted once. Their framed records are joined in bucket order
    and compressed as one gzip member at `gzip_level`: the bytes a
    `CellWriter` holding them all would give. `read` turns a piece's
    `records` into bytes (None: they are bytes). Gives (unit, member,
    rows), the unit `cells.check_seam` names after checking that no
    piece is missing, or None when no bucket had rows there."""
    once: dict[int, tuple] = {}
    for piece in pieces:
        once.setdefault(piece[0], piece)
    unit = check_seam(split, cell, cell_bytes, [piece[:4] for piece in once.values()])
    rows = sum(piece[4] for piece in once.values())
    if not rows:
        return None
    records = (once[bucket][5] for bucket in sorted(once))
    framed = b"".join(records if read is None else map(read, records))
    return unit, tfrecord.gzip_compress(framed, gzip_level), rows


class ShardRowsWriter:
    """Takes a bucket's framed records in order, like CellWriter, and
    writes to `out` only those that belong to shard `shard` when shards are
    cut at rows (`shard_cuts.shards_of_rows`; `start`: the bucket's first
    byte in the split), counting them."""

    def __init__(self, out, start: int, thresholds: np.ndarray, shard: int):
        self._out = out
        self._thresholds = thresholds
        self._shard = shard
        self._offset = start
        self.rows = 0
        self.written = 0

    def needs_bytes(self, nbytes: int) -> bool:
        return self._shard in shards_touched(self._offset, self._offset + nbytes,
                                             self._thresholds)

    def write_framed(self, data, sizes: np.ndarray) -> None:
        sizes = np.asarray(sizes, dtype=np.int64)
        if not len(sizes):
            return
        ends = np.cumsum(sizes)
        if data is not None:
            first, last = self._mine(ends, sizes)
            if last > first:
                lo, hi = int(ends[first] - sizes[first]), int(ends[last - 1])
                self._out.write(memoryview(data)[lo:hi])
                self.rows += last - first
                self.written += hi - lo
        self._offset += int(ends[-1])

    def _mine(self, ends: np.ndarray, sizes: np.ndarray) -> tuple[int, int]:
        """[first, last) of the rows (`ends`, `sizes`: of a block, from
        `_offset`) that belong to this shard. A row's doubled midpoint grows
        with its position, so its shard never falls: rows of one shard are
        consecutive, and when the first and the last row are this shard's,
        so is every row between, found without a shard per row (a block
        lies within one shard but at a shard's two ends)."""
        edges = np.array([0, len(sizes) - 1])
        shards = shards_of_rows(self._offset + ends[edges] - sizes[edges], sizes[edges],
                                self._thresholds)
        if (shards == self._shard).all():
            return 0, len(sizes)
        mine = np.flatnonzero(shards_of_rows(self._offset + ends - sizes, sizes,
                                             self._thresholds) == self._shard)
        return (int(mine[0]), int(mine[-1]) + 1) if len(mine) else (0, 0)


class _Counter:
    """A sink that only counts what is written to it."""

    def __init__(self):
        self.written = 0

    def write(self, data) -> None:
        self.written += len(data)


def gzip_written_size(sample: Sequence[tuple[bytes, bytes]], level: int) -> int:
    """The bytes on disk of a ratio sample's framed records (``(key,
    framed record)`` in order, `ratio_sample.ratio_sample_of`) written as a
    gzip shard is: one `tfrecord.GzipStream` member at `level`."""
    counter = _Counter()
    stream = tfrecord.GzipStream(counter, level)
    for _, record in sample:
        stream.write(record)
    stream.close()
    return counter.written
