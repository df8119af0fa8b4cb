"""Where a bucket's sorted records go: chunks, or a shard's rows.

No Beam. Bucket sorting (`bucket_sort`) and the shuffle exchange give a
writer a bucket's framed records in order, a block at a time
(`write_framed`); `needs_bytes` says when their sizes are enough, so rows
that nothing writes are never gathered.

`ChunkWriter` cuts the bucket into consecutive chunks by size on disk, for
gzip output each exactly one gzip member of framed records, so that shards
are assembled from chunks by concatenation, without recompressing (key-ordered
gzip output). `ShardRowsWriter` writes the rows one shard holds when shards are
cut at rows (gzip: into a `tfrecordio.GzipStream`, one member a shard, the
way `gzip_written_size` compresses the ratio sample the shard count comes
from).
"""

from __future__ import annotations

from typing import BinaryIO, Sequence

import numpy as np

from . import tfrecordio
from .shard_plan import FRAMING, Chunk, shards_of_rows, shards_touched

__all__ = ["ChunkWriter", "ShardRowsWriter", "gzip_written_size"]

# Upper bound on one uncompressed chunk, whatever the estimated gzip ratio.
_MAX_RAW_CHUNK = 64 << 20


class ChunkWriter:
    """Writes framed records to a bucket file as chunks of about
    `chunk_bytes` on disk: framed records, or one gzip member per chunk.

    A chunk ends with the record that brings it to its target size. For
    gzip the target (uncompressed) is `chunk_bytes` times the compression
    ratio seen so far in this bucket; the ratio depends on the bucket's
    content only, so chunk boundaries are deterministic.
    """

    def __init__(self, fileobj: BinaryIO, *, compression: str, chunk_bytes: int,
                 gzip_level: int):
        self._fileobj = fileobj
        self._gzip = compression == "gzip"
        self._chunk_bytes = chunk_bytes
        self._level = gzip_level
        self._pending: list[memoryview] = []
        self._pending_bytes = 0
        self._pending_rows = 0
        self._raw_total = 0
        self._disk_total = 0
        self._offset = 0
        self._target = chunk_bytes
        self.chunks: list[Chunk] = []

    def write_many(self, examples: Sequence[bytes]) -> None:
        """Frames and writes examples."""
        examples = list(examples)
        sizes = np.fromiter(map(len, examples), dtype=np.int64, count=len(examples)) + FRAMING
        self.write_framed(tfrecordio.frame_records(examples), sizes)

    def needs_bytes(self, nbytes: int) -> bool:
        """Whether the next `nbytes` of records must be given as bytes."""
        return True

    def write_framed(self, data, sizes: np.ndarray) -> None:
        """Writes framed records held back to back in `data` (not modified
        afterwards), with `sizes` their framed sizes."""
        view = memoryview(data)
        ends = np.cumsum(sizes)
        count = len(ends)
        row = start = 0
        while row < count:
            # First record that brings the pending chunk to its target.
            last = int(np.searchsorted(ends, start + self._target - self._pending_bytes, "left"))
            last = max(last, row)
            if last >= count:
                self._pending.append(view[start:])
                self._pending_bytes += int(ends[-1]) - start
                self._pending_rows += count - row
                return
            stop = int(ends[last])
            self._pending.append(view[start:stop])
            self._pending_bytes += stop - start
            self._pending_rows += last + 1 - row
            self._flush()
            row, start = last + 1, stop

    def close(self) -> list[Chunk]:
        if self._pending_rows:
            self._flush()
        return self.chunks

    def _flush(self) -> None:
        if self._gzip:
            data = tfrecordio.gzip_compress(b"".join(self._pending), self._level)
            self._raw_total += self._pending_bytes
            self._disk_total += len(data)
            self._target = min(_MAX_RAW_CHUNK,
                               self._chunk_bytes * self._raw_total // max(1, self._disk_total))
            self._fileobj.write(data)
            length = len(data)
        else:
            for piece in self._pending:
                self._fileobj.write(piece)
            length = self._pending_bytes
        self.chunks.append(Chunk(self._offset, length, self._pending_rows))
        self._offset += length
        self._pending = []
        self._pending_bytes = self._pending_rows = 0


class ShardRowsWriter:
    """Takes a bucket's framed records in order, like ChunkWriter, and
    writes to `out` only those that belong to shard `shard` when shards are
    cut at rows (`shard_plan.shards_of_rows`; `start`: the bucket's first
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
            mine = np.flatnonzero(shards_of_rows(self._offset + ends - sizes, sizes,
                                                 self._thresholds) == self._shard)
            if len(mine):  # rows of one shard are consecutive
                lo, hi = int(ends[mine[0]] - sizes[mine[0]]), int(ends[mine[-1]])
                self._out.write(memoryview(data)[lo:hi])
                self.rows += len(mine)
                self.written += hi - lo
        self._offset += int(ends[-1])


class _Counter:
    """A sink that only counts what is written to it."""

    def __init__(self):
        self.written = 0

    def write(self, data) -> None:
        self.written += len(data)


def gzip_written_size(sample: Sequence[tuple[bytes, bytes]], level: int) -> int:
    """The bytes on disk of a ratio sample's framed records (``(key,
    framed record)`` in order, `shard_plan.ratio_sample_of`) written as a
    gzip shard is: one `tfrecordio.GzipStream` member at `level`."""
    counter = _Counter()
    stream = tfrecordio.GzipStream(counter, level)
    for _, record in sample:
        stream.write(record)
    stream.close()
    return counter.written
