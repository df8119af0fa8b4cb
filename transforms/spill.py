"""Spill files of the shard writer: sorted runs, bucket sorting, chunks.

No Beam. Three file kinds live under the writer's temporary directory:

run file (written by the spill step, one per split per buffer flush), in
column sections so that a bucket finds, sorts and copies its rows with a
few numpy calls instead of a Python loop per row::

    records   : the rows' TFRecord framing (length, CRCs and example), sorted
    sizes     : uint32 framed size of each record
    keys      : key_width bytes per record (fixed-width order keys, e.g. hashes),
                or the concatenated keys (variable width), or nothing (the
                key is the example itself)
    key sizes : uint32 per record (variable-width keys only)
    index     : entries every `index_every` record bytes:
                uint64 row | uint64 record offset | uint64 key offset
                | uint32 prefix length | key prefix
    footer    : section offsets, index entries, records, key width, b"RFRUN002"

Records are sorted by ``(order key, example)``. The sparse index lets a
bucket read only its key range of a run; the rows are framed once, when the
run is written, so bucket sorting only moves framed bytes.

bucket file (written by the sort step, gzip output): the bucket's rows in
order, as consecutive chunks, each exactly one gzip member of framed
records. Chunks are cut by size on disk, so shards can be assembled from
them by concatenation, without recompressing. For plain output a chunk's
size on disk is the sum of its records' framed sizes, so the chunks are only
planned (`plan_bucket`) and each shard writes its byte range of the sorted
bucket straight from the runs (`write_bucket_range`); `sort_bucket` still
writes plain chunks, with the same boundaries, for tests and tools.

Memory: a bucket is sorted in memory only when its key ranges fit
`memory_bytes`; otherwise the sorted ranges are merged as streams, with
intermediate merges when there are more than `fan_in` of them. While a
bucket is only planned, local runs' records are mapped rather than read
(`RunFile._records`): planning needs their sizes, not their bytes.
"""

from __future__ import annotations

import bisect
import heapq
import json
import mmap
import operator
import posixpath
import shutil
import struct
import tempfile
import threading
import uuid
from typing import BinaryIO, Iterable, Iterator, NamedTuple, Sequence

import fsspec
import numpy as np
from fsspec.implementations.local import LocalFileSystem

from . import tfrecordio
from .page_cache import WriteBehind, drop_behind
from .shard_plan import (HASH_SIZE, BucketChunks, BucketRange, Chunk, RunInfo, SampleEntry,
                         SplitAssigner, prepare_batch, shards_of_rows, shards_touched)

__all__ = [
    "KEY_IS_EXAMPLE",
    "KEY_VARIABLE",
    "ChunkWriter",
    "RunFile",
    "RunBuffer",
    "RunFileError",
    "RunSlice",
    "RunWriter",
    "bucket_reference",
    "join_path",
    "measure_bucket",
    "merge_runs",
    "parse_bucket_reference",
    "plan_bucket",
    "read_run_list",
    "release_read_arena",
    "remove_runs",
    "sort_bucket",
    "sorted_order",
    "take",
    "write_bucket_range",
    "write_bucket_rows",
    "write_run_list",
    "write_sorted_run",
]

KEY_IS_EXAMPLE = 0  # key_width: the order key is the example; no key section
KEY_VARIABLE = -1  # key_width: keys of any length, stored with their sizes

_SIZE = np.dtype("<u4")
_INDEX_ENTRY = struct.Struct("<QQQI")
_FOOTER = struct.Struct("<QQQQQQq8s")
_MAGIC = b"RFRUN002"
_FRAMING = 16  # TFRecord bytes around each record
_HEADER = 12  # TFRecord bytes before the example
_BLOCK = 4 << 20  # bytes of rows framed, gathered or read in one go
_SPOOL = 8 << 20  # column sections kept in memory up to this size while writing
# Upper bound on one uncompressed chunk, whatever the estimated gzip ratio.
_MAX_RAW_CHUNK = 64 << 20
_ROW_OVERHEAD = 160  # bytes of Python/numpy objects per row sorted in memory


class RunFileError(Exception):
    """A spill file is damaged or does not match what the spill step reported
    (names the file)."""


def join_path(base: str, *parts: str) -> str:
    """Joins path parts with '/', for local paths and fsspec URLs alike."""
    return "/".join([base.rstrip("/"), *parts])


def take(items: Sequence, order: list[int]) -> list:
    """items[i] for i in order, gathered in C."""
    if len(order) == 1:
        return [items[order[0]]]
    return list(operator.itemgetter(*order)(items)) if order else []


def _tie_groups(ordered_keys: np.ndarray) -> Iterator[tuple[int, int]]:
    """[start, end) of each run of equal adjacent keys (two or more)."""
    ties = np.flatnonzero(ordered_keys[1:] == ordered_keys[:-1])
    start = previous = None
    for position in ties.tolist():
        if previous is not None and position == previous + 1:
            previous = position
            continue
        if start is not None:
            yield start, previous + 2
        start = previous = position
    if start is not None:
        yield start, previous + 2


def sorted_order(keys, example_at) -> list[int]:
    """The row order by ``(key, example)``.

    keys: a numpy array of fixed-width bytes (sorted by numpy; rows with
    equal keys are then ordered by `example_at(row)`, which only duplicate
    keys pay for), or a list of bytes (sorted by Python).
    """
    if isinstance(keys, np.ndarray):
        order = np.argsort(keys, kind="stable")
        groups = list(_tie_groups(keys[order]))
        order = order.tolist()
        for start, end in groups:
            order[start:end] = sorted(order[start:end], key=example_at)
        return order
    return sorted(range(len(keys)), key=lambda row: (keys[row], example_at(row)))


def _fixed_keys(blob: bytes, width: int) -> np.ndarray:
    return np.frombuffer(blob, dtype=f"S{width}")


class RunWriter:
    """Writes a run file from rows given in order, a batch at a time; the
    column sections wait in spooled temporary files (memory up to a few MB,
    local disk beyond) until `close` appends them."""

    def __init__(self, fileobj: BinaryIO, *, key_width: int, prefix_len: int,
                 index_every: int):
        self._fileobj = fileobj
        self._key_width = key_width
        self._prefix_len = prefix_len
        self._index_every = index_every
        self._index: list[bytes] = []
        self._records = self._offset = self._key_offset = self._next_index = 0
        self._sizes = tempfile.SpooledTemporaryFile(max_size=_SPOOL)
        self._keys = (tempfile.SpooledTemporaryFile(max_size=_SPOOL)
                      if key_width != KEY_IS_EXAMPLE else None)
        self._key_sizes = (tempfile.SpooledTemporaryFile(max_size=_SPOOL)
                           if key_width == KEY_VARIABLE else None)

    def add(self, keys: Sequence[bytes] | None, examples: Sequence[bytes]) -> None:
        """Appends rows that sort after every row added before (keys None
        when the key is the example)."""
        count = len(examples)
        if not count:
            return
        sizes = np.fromiter(map(len, examples), dtype=np.int64, count=count) + _FRAMING
        starts = self._offset + np.cumsum(sizes) - sizes
        key_starts = None
        if self._key_width == KEY_VARIABLE:
            key_sizes = np.fromiter(map(len, keys), dtype=np.int64, count=count)
            key_starts = self._key_offset + np.cumsum(key_sizes) - key_sizes
            self._key_sizes.write(key_sizes.astype(_SIZE).tobytes())
            self._key_offset += int(key_sizes.sum())
        row = int(np.searchsorted(starts, self._next_index, "left"))
        while row < count:
            key = examples[row] if keys is None else keys[row]
            prefix = bytes(key[:self._prefix_len])
            key_offset = int(key_starts[row]) if key_starts is not None else 0
            self._index.append(_INDEX_ENTRY.pack(self._records + row, int(starts[row]),
                                                 key_offset, len(prefix)) + prefix)
            self._next_index = int(starts[row]) + self._index_every
            row = int(np.searchsorted(starts, self._next_index, "left"))
        if self._keys is not None:
            blob = b"".join(keys)
            if self._key_width > 0 and len(blob) != self._key_width * count:
                raise ValueError(f"run keys must all be {self._key_width} bytes")
            self._keys.write(blob)
        self._sizes.write(sizes.astype(_SIZE).tobytes())
        self._fileobj.write(tfrecordio.frame_records(list(examples)))
        self._offset += int(sizes.sum())
        self._records += count

    def close(self) -> int:
        """Appends the sections and the footer; returns the number of rows."""
        sections = []
        for spool in (self._sizes, self._keys, self._key_sizes):
            sections.append(self._offset)
            if spool is not None:
                spool.seek(0)
                shutil.copyfileobj(spool, self._fileobj, _BLOCK)
                self._offset += spool.tell()
                spool.close()
        index = b"".join(self._index)
        self._fileobj.write(index)
        self._fileobj.write(_FOOTER.pack(*sections, self._offset, len(self._index),
                                         self._records, self._key_width, _MAGIC))
        return self._records


def write_sorted_run(fileobj: BinaryIO, keys: Sequence[bytes] | None,
                     examples: Sequence[bytes], *, key_width: int, prefix_len: int,
                     index_every: int) -> int:
    """Sorts rows by ``(key, example)`` and writes them as a run file;
    returns the number of rows. keys: one per example, all `key_width`
    bytes when key_width > 0; None with KEY_IS_EXAMPLE."""
    if key_width > 0:
        order = sorted_order(_fixed_keys(b"".join(keys), key_width), examples.__getitem__)
    elif key_width == KEY_IS_EXAMPLE:
        order = sorted(range(len(examples)), key=examples.__getitem__)
    else:
        order = sorted(range(len(examples)), key=list(zip(keys, examples)).__getitem__)
    writer = RunWriter(fileobj, key_width=key_width, prefix_len=prefix_len,
                       index_every=index_every)
    total = sum(map(len, examples)) + _FRAMING * len(examples)
    step = max(1, len(examples) * _BLOCK // max(1, total))
    for start in range(0, len(order), step):
        rows = order[start:start + step]
        writer.add(None if keys is None else take(keys, rows), take(examples, rows))
    return writer.close()


class SplitRows(NamedTuple):
    """What a `RunBuffer` holds of one split after a batch: rows and framed
    bytes in all, and the batch's sampled rows of the split."""

    split: int
    num_records: int
    num_bytes: int
    sample: tuple[SampleEntry, ...]


_ROW_OVERHEAD = 160  # Python object bytes per buffered row


class RunBuffer:
    """ExampleBatches' rows by split, waiting to be sorted and written as one
    run per split: what the shard writer's spill step and the build cache
    hold between two writes.

    `add` hashes a batch's rows, picks each row's split and order key
    (`shard_plan.prepare_batch`, on whole batches) and keeps them; `write`
    writes a split's rows as a sorted run; `clear` empties the buffer.
    `buffered_bytes` estimates the memory held."""

    def __init__(self, assigner: SplitAssigner, *, shuffle: bool, sample_every: int,
                 prefix_len: int, index_every: int):
        self._assigner = assigner
        self._shuffle = shuffle
        self._sample_every = sample_every
        self._prefix_len = prefix_len
        self._index_every = index_every
        self.clear()

    def clear(self) -> None:
        splits = len(self._assigner.names)
        self._keys: list[list[bytes]] = [[] for _ in range(splits)]
        self._examples: list[list[bytes]] = [[] for _ in range(splits)]
        self._keyed = [False] * splits  # a row with its own key (no shuffle)
        self._bytes = [0] * splits
        self.buffered_bytes = 0

    def add(self, batch) -> list[SplitRows]:
        """Keeps a batch's rows; returns what each split it had rows of holds now."""
        prepared = prepare_batch(self._assigner, batch, shuffle=self._shuffle,
                                 sample_every=self._sample_every, prefix_len=self._prefix_len)
        if prepared is None:
            return []
        held = []
        for split, rows, selected in prepared.by_split():
            self._keys[split] += take(prepared.order_keys, selected)
            self._examples[split] += take(prepared.examples, selected)
            if prepared.keyed:
                self._keyed[split] = True
            self._bytes[split] += int(prepared.sizes[rows].sum())
            held.append(SplitRows(split, len(self._examples[split]), self._bytes[split],
                                  tuple(prepared.samples.get(split, ()))))
        self.buffered_bytes += (int(prepared.sizes.sum())
                                + _ROW_OVERHEAD * len(prepared.examples))
        return held

    def splits_held(self) -> list[int]:
        """The splits with rows, in split order."""
        return [split for split, examples in enumerate(self._examples) if examples]

    def write(self, split: int, fileobj: BinaryIO) -> int:
        """Writes a split's rows as a sorted run; returns its number of rows."""
        if self._shuffle:
            key_width, keys = HASH_SIZE, self._keys[split]
        elif self._keyed[split]:
            key_width, keys = KEY_VARIABLE, self._keys[split]
        else:
            key_width, keys = KEY_IS_EXAMPLE, None
        return write_sorted_run(fileobj, keys, self._examples[split], key_width=key_width,
                                prefix_len=self._prefix_len, index_every=self._index_every)


class RunSlice(NamedTuple):
    """Consecutive rows of a run: their framed records back to back in
    `data`, the framed size of each, and their keys (a numpy array of
    fixed-width bytes, or a list of bytes)."""

    keys: object
    data: memoryview
    sizes: np.ndarray

    def examples(self) -> list[bytes]:
        ends = np.cumsum(self.sizes).tolist()
        starts = [0] + ends[:-1]
        data = self.data
        return [bytes(data[start + _HEADER:end - 4]) for start, end in zip(starts, ends)]


def _bound(keys, bound: bytes | None, width: int) -> int:
    """Rows of sorted `keys` below `bound` (None: no bound)."""
    if bound is None:
        return len(keys)
    if width <= 0:
        return bisect.bisect_left(keys, bound)
    if len(bound) <= width:
        # A fixed-width key k has k >= bound exactly when k >= bound padded
        # with zero bytes.
        return int(np.searchsorted(keys, bound.ljust(width, b"\0"), "left"))
    return int(np.searchsorted(keys, bound[:width], "right"))


def _parse_index(raw: bytes, entries: int) -> tuple[list, list, list, list[bytes]]:
    """Rows, record offsets, key offsets and key prefixes of a run's index
    entries. Every bucket opens every run of its split, so this is on the
    hot path: when all prefixes have one length (fixed-width keys, or keys
    longer than the prefix) numpy parses the entries in one go."""
    if entries and len(raw) >= _INDEX_ENTRY.size:
        prefix_len = _INDEX_ENTRY.unpack_from(raw)[3]
        if prefix_len and len(raw) == entries * (_INDEX_ENTRY.size + prefix_len):
            table = np.frombuffer(raw, dtype=np.dtype([
                ("row", "<u8"), ("offset", "<u8"), ("key_offset", "<u8"),
                ("prefix_len", "<u4"), ("prefix", f"V{prefix_len}")]))
            if (table["prefix_len"] == prefix_len).all():
                return (table["row"].tolist(), table["offset"].tolist(),
                        table["key_offset"].tolist(), table["prefix"].tolist())
    rows, offsets, key_offsets, prefixes = [], [], [], []
    position = 0
    for _ in range(entries):
        row, offset, key_offset, prefix_len = _INDEX_ENTRY.unpack_from(raw, position)
        position += _INDEX_ENTRY.size
        rows.append(row)
        offsets.append(offset)
        key_offsets.append(key_offset)
        prefixes.append(bytes(raw[position:position + prefix_len]))
        position += prefix_len
    return rows, offsets, key_offsets, prefixes


class RunFile:
    """Reads a run file's footer and index, and its rows in a key range."""

    def __init__(self, path: str, fs=None):
        self.path = path
        self._fs, self._fs_path = (fs, path) if fs is not None else fsspec.core.url_to_fs(path)
        with self._fs.open(self._fs_path, "rb") as fileobj:
            size = self._fs.size(self._fs_path)
            if size < _FOOTER.size:
                raise RunFileError(f"{path}: spill file is truncated ({size} bytes)")
            fileobj.seek(size - _FOOTER.size)
            (self._sizes_offset, self._keys_offset, self._key_sizes_offset, index_offset,
             entries, records, self.key_width, magic) = _FOOTER.unpack(
                 fileobj.read(_FOOTER.size))
            if magic != _MAGIC or index_offset > size - _FOOTER.size:
                raise RunFileError(f"{path}: not a complete spill file (bad footer)")
            fileobj.seek(index_offset)
            raw_index = fileobj.read(size - _FOOTER.size - index_offset)
        self.data_size = self._sizes_offset
        self.num_records = records
        self._map: mmap.mmap | None = None  # the whole file, mapped (see _records)
        self.rows, self.offsets, self.key_offsets, self.prefixes = _parse_index(raw_index,
                                                                                entries)

    def row_range(self, lo: bytes, hi: bytes | None) -> tuple[int, int, int, int]:
        """``(first row, end row, record offset, key offset)`` of the smallest
        indexed row range holding every row with lo <= key < hi (rows at its
        edges may fall outside)."""
        before = bisect.bisect_left(self.prefixes, lo) - 1  # last entry with prefix < lo
        first, offset, key_offset = ((self.rows[before], self.offsets[before],
                                      self.key_offsets[before]) if before >= 0 else (0, 0, 0))
        end = self.num_records
        if hi is not None:
            after = bisect.bisect_left(self.prefixes, hi)  # first entry with prefix >= hi
            if after < len(self.rows):
                end = self.rows[after]
        return first, max(first, end), offset, key_offset

    def estimate(self, lo: bytes, hi: bytes | None) -> tuple[int, int]:
        """``(rows, record bytes)`` of the indexed range for lo <= key < hi."""
        first, end, offset, _ = self.row_range(lo, hi)
        if end >= self.num_records:
            return end - first, self.data_size - offset
        return end - first, self.offsets[bisect.bisect_left(self.rows, end)] - offset

    def _read_rows(self, fileobj, first: int, end: int, offset: int,
                   key_offset: int, mapped: bool = False, into: memoryview | None = None
                   ) -> RunSlice:
        count = end - first
        fileobj.seek(self._sizes_offset + 4 * first)
        raw_sizes = fileobj.read(4 * count)
        if len(raw_sizes) != 4 * count:
            raise RunFileError(f"{self.path}: sizes cut short at row {first}")
        sizes = np.frombuffer(raw_sizes, dtype=_SIZE).astype(np.int64)
        data = self._records(fileobj, offset, int(sizes.sum()), mapped, into)
        if self.key_width > 0:
            fileobj.seek(self._keys_offset + self.key_width * first)
            keys = _fixed_keys(fileobj.read(self.key_width * count), self.key_width)
        elif self.key_width == KEY_VARIABLE:
            fileobj.seek(self._key_sizes_offset + 4 * first)
            key_ends = np.cumsum(np.frombuffer(fileobj.read(4 * count), dtype=_SIZE)).tolist()
            fileobj.seek(self._keys_offset + key_offset)
            blob = fileobj.read(key_ends[-1] if key_ends else 0)
            keys = [blob[start:stop] for start, stop in zip([0] + key_ends[:-1], key_ends)]
        else:
            keys = None
        rows = RunSlice(keys, data, sizes)
        return rows if keys is not None else rows._replace(keys=rows.examples())

    def _records(self, fileobj, offset: int, length: int, mapped: bool,
                 into: memoryview | None = None) -> memoryview:
        """Bytes ``[offset, offset + length)`` of the records section.

        `mapped` (planning): a local run is mapped rather than read, so
        that bytes never looked at cost nothing: planning a bucket needs
        only the sizes and keys, unless keys tie or the key is the example.
        Pages looked at count in the process's RSS until `release`, which
        is why writing reads instead (mapped, peak RSS followed the largest
        bucket: 1.26x higher at 4 GB than at 1 GB).

        `into` (writing): read into this buffer (at least `length` bytes)
        instead of a new one; see `_read_arena`.
        """
        if into is not None and not mapped:
            fileobj.seek(offset)
            view = into[:length]
            filled = 0
            while filled < length:
                count = fileobj.readinto(view[filled:])
                if not count:
                    raise RunFileError(f"{self.path}: record cut short at byte {offset + filled}")
                filled += count
            drop_behind(fileobj, offset, length)  # read once (twice at most)
            return view
        if not mapped or not isinstance(self._fs, LocalFileSystem):
            fileobj.seek(offset)
            data = fileobj.read(length)
            if len(data) != length:
                raise RunFileError(f"{self.path}: record cut short at byte {offset + len(data)}")
            return memoryview(data)
        if offset + length > self.data_size:
            raise RunFileError(f"{self.path}: record cut short at byte {self.data_size}")
        if self._map is None:
            # The map outlives this call and the file: the slices handed out
            # keep it alive, and it is unmapped once the last one is gone.
            self._map = mmap.mmap(fileobj.fileno(), 0, access=mmap.ACCESS_READ)
        return memoryview(self._map)[offset:offset + length]

    def release(self) -> None:
        """Takes the mapped pages out of this process's memory (they stay in
        the page cache, and a later access maps them again), so that what
        one bucket touched does not add up over every bucket a worker sorts."""
        if self._map is not None:
            self._map.madvise(mmap.MADV_DONTNEED)

    def _within(self, rows: RunSlice, lo: bytes, hi: bytes | None) -> RunSlice:
        """The rows of a sorted slice with lo <= key < hi."""
        start = _bound(rows.keys, lo, self.key_width)
        stop = _bound(rows.keys, hi, self.key_width)
        ends = np.cumsum(rows.sizes)
        first_byte = int(ends[start - 1]) if start else 0
        last_byte = int(ends[stop - 1]) if stop else 0
        return RunSlice(rows.keys[start:stop], rows.data[first_byte:last_byte],
                        rows.sizes[start:stop])

    def read(self, lo: bytes, hi: bytes | None, mapped: bool = False,
             into: memoryview | None = None) -> RunSlice:
        """The rows with lo <= key < hi, in a few reads (`mapped`, `into`:
        see `_records`; `into` must hold the range's `estimate` bytes)."""
        first, end, offset, key_offset = self.row_range(lo, hi)
        with self._fs.open(self._fs_path, "rb") as fileobj:
            rows = self._read_rows(fileobj, first, end, offset, key_offset, mapped, into)
        return self._within(rows, lo, hi)

    def stream(self, lo: bytes, hi: bytes | None) -> Iterator[tuple]:
        """``(key, example, framed record)`` of the rows with lo <= key < hi,
        in order, read a block of rows at a time."""
        first, end, offset, key_offset = self.row_range(lo, hi)
        with self._fs.open(self._fs_path, "rb") as fileobj:
            row = first
            while row < end:
                # Index entries are index_every bytes apart: a block runs to
                # the entry after _BLOCK bytes (or to the end of the range).
                entry = bisect.bisect_right(self.offsets, offset + _BLOCK)
                stop = self.rows[entry] if entry < len(self.rows) else self.num_records
                stop = min(end, max(stop, row + 1))
                rows = self._within(self._read_rows(fileobj, row, stop, offset, key_offset),
                                    lo, hi)
                yield from _row_tuples(rows, self.key_width)
                if stop < end:
                    index = bisect.bisect_left(self.rows, stop)
                    offset, key_offset = self.offsets[index], self.key_offsets[index]
                row = stop


def _row_tuples(rows: RunSlice, key_width: int) -> list[tuple]:
    examples = rows.examples()
    ends = np.cumsum(rows.sizes).tolist()
    framed = [rows.data[start:stop] for start, stop in zip([0] + ends[:-1], ends)]
    if key_width > 0:
        blob = rows.keys.tobytes()  # raw bytes: numpy would strip trailing zeros
        keys = [blob[start:start + key_width] for start in range(0, len(blob), key_width)]
    else:
        keys = rows.keys
    return list(zip(keys, examples, framed))


class ChunkWriter:
    """Writes framed records to a bucket file as chunks of about
    `chunk_bytes` on disk: framed records, or one gzip member per chunk.

    A chunk ends with the record that brings it to its target size. For
    gzip the target (uncompressed) is `chunk_bytes` times the compression
    ratio seen so far in this bucket; the ratio depends on the bucket's
    content only, so chunk boundaries are deterministic.

    With `fileobj` None (plain output only) nothing is written: the writer
    only plans the chunks, which depend on the records' sizes alone.
    """

    def __init__(self, fileobj: BinaryIO | None, *, compression: str, chunk_bytes: int,
                 gzip_level: int):
        if fileobj is None and compression == "gzip":
            raise ValueError("gzip chunks can only be planned by compressing them")
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
        self.max_record = 0  # the largest framed record written

    def write_many(self, examples: Sequence[bytes]) -> None:
        """Frames and writes examples."""
        examples = list(examples)
        sizes = np.fromiter(map(len, examples), dtype=np.int64, count=len(examples)) + _FRAMING
        self.write_framed(tfrecordio.frame_records(examples), sizes)

    def needs_bytes(self, nbytes: int) -> bool:
        """Whether the next `nbytes` of records must be given as bytes (False
        when only planning: their sizes are enough)."""
        return self._fileobj is not None

    @property
    def writes_bytes(self) -> bool:
        return self._fileobj is not None

    def write_framed(self, data, sizes: np.ndarray) -> None:
        """Writes framed records held back to back in `data` (not modified
        afterwards; None when `needs_bytes` said so), with `sizes` their
        framed sizes."""
        view = memoryview(data) if data is not None else None
        if len(sizes):
            self.max_record = max(self.max_record, int(sizes.max()))
        ends = np.cumsum(sizes)
        count = len(ends)
        row = start = 0
        while row < count:
            # First record that brings the pending chunk to its target.
            last = int(np.searchsorted(ends, start + self._target - self._pending_bytes, "left"))
            last = max(last, row)
            if last >= count:
                if view is not None:
                    self._pending.append(view[start:])
                self._pending_bytes += int(ends[-1]) - start
                self._pending_rows += count - row
                return
            stop = int(ends[last])
            if view is not None:
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
            if self._fileobj is not None:
                for piece in self._pending:
                    self._fileobj.write(piece)
            length = self._pending_bytes
        self.chunks.append(Chunk(self._offset, length, self._pending_rows))
        self._offset += length
        self._pending = []
        self._pending_bytes = self._pending_rows = 0


class _WindowWriter:
    """Takes a bucket's framed records in order, like ChunkWriter, and
    writes only bytes ``[start, end)`` of them to `out`: the part of a
    planned bucket that one shard holds."""

    def __init__(self, out, start: int, end: int):
        self._out = out
        self._start = start
        self._end = end
        self._offset = 0

    def needs_bytes(self, nbytes: int) -> bool:
        return self._offset < self._end and self._offset + nbytes > self._start

    writes_bytes = True

    def write_framed(self, data, sizes: np.ndarray) -> None:
        nbytes = int(sizes.sum())
        if data is not None:
            first = max(0, self._start - self._offset)
            last = min(nbytes, self._end - self._offset)
            if first < last:
                self._out.write(memoryview(data)[first:last])
        self._offset += nbytes

    @property
    def done(self) -> bool:
        return self._offset >= self._end


class _ShardRowsWriter:
    """Takes a bucket's framed records in order, like ChunkWriter, and
    writes to `out` only those that belong to shard `shard` when shards are
    cut at rows (`shard_plan.shards_of_rows`; `start`: the bucket's first
    byte in the split), counting them."""

    writes_bytes = True

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


def write_bucket_rows(out: BinaryIO, bucket: BucketRange, start: int, thresholds: np.ndarray,
                      shard: int, runs: Iterable[RunInfo], *, scratch_dir: str,
                      memory_bytes: int, fan_in: int, prefix_len: int,
                      index_every: int) -> tuple[int, int]:
    """Writes to `out` the rows of a planned bucket (see `plan_bucket`)
    that shard `shard` holds when shards are cut at rows, sorting the
    bucket from the runs again; `start` is the bucket's first byte in the
    split. Returns (rows, bytes) written."""
    writer = _ShardRowsWriter(out, start, thresholds, shard)
    _sort_into(writer, bucket, runs, scratch_dir=scratch_dir, memory_bytes=memory_bytes,
               fan_in=fan_in, prefix_len=prefix_len, index_every=index_every)
    return writer.rows, writer.written


def _write_in_order(writer: ChunkWriter, slices: list[RunSlice], key_width: int) -> None:
    """Writes the rows of several sorted slices in ``(key, example)`` order,
    gathering a block of rows at a time from the slices (no copy of the
    whole bucket)."""
    if len(slices) == 1:
        only = slices[0]
        writer.write_framed(only.data if writer.needs_bytes(len(only.data)) else None,
                            only.sizes)
        return
    views = [rows.data for rows in slices]
    sizes = np.concatenate([rows.sizes for rows in slices])
    starts = np.concatenate([np.cumsum(rows.sizes) - rows.sizes for rows in slices])
    sources = np.repeat(np.arange(len(slices)), [len(rows.sizes) for rows in slices])

    def example_at(row: int) -> bytes:
        start = int(starts[row])
        return bytes(views[sources[row]][start + _HEADER:start + int(sizes[row]) - 4])

    if key_width > 0:
        keys = np.concatenate([rows.keys for rows in slices])
    else:
        keys = [key for rows in slices for key in rows.keys]
    order = np.asarray(sorted_order(keys, example_at), dtype=np.int64)
    del keys
    step = max(1, len(order) * _BLOCK // max(1, int(sizes.sum())))
    for first in range(0, len(order), step):
        rows = order[first:first + step]
        row_sizes = sizes[rows]
        if not writer.needs_bytes(int(row_sizes.sum())):
            writer.write_framed(None, row_sizes)  # sizes are enough: no gathering
            continue
        row_starts = starts[rows]
        block = b"".join([views[source][start:stop] for source, start, stop in
                          zip(sources[rows].tolist(), row_starts.tolist(),
                              (row_starts + row_sizes).tolist())])
        writer.write_framed(block, row_sizes)


def _write_stream(writer: ChunkWriter, rows: Iterator[tuple]) -> None:
    """Writes merged ``(key, example, framed)`` rows a block at a time."""
    block: list = []
    pending = 0
    for row in rows:
        block.append(row[2])
        pending += len(row[2])
        if pending >= _BLOCK:
            _write_framed_list(writer, block)
            block, pending = [], 0
    _write_framed_list(writer, block)


def _write_framed_list(writer: ChunkWriter, framed: list) -> None:
    if framed:
        sizes = np.fromiter(map(len, framed), dtype=np.int64, count=len(framed))
        writer.write_framed(b"".join(framed), sizes)


def sort_bucket(bucket: BucketRange, runs: Iterable[RunInfo], *, out_dir: str,
                scratch_dir: str, compression: str, chunk_bytes: int, gzip_level: int,
                memory_bytes: int, fan_in: int, prefix_len: int,
                index_every: int) -> BucketChunks:
    """Reads the bucket's key range from every run of its split, sorts it and
    writes it as chunks to a new file (unique name) under `out_dir`.

    Sorting happens in memory when the ranges add up to at most
    `memory_bytes`, else by a streaming k-way merge (the runs are sorted),
    with intermediate merge files under `scratch_dir` when there are more
    than `fan_in` ranges. Raises RunFileError when a run's record count
    differs from what the spill step reported.
    """
    out_path = join_path(out_dir, f"{uuid.uuid4().hex}.chunks")
    with _open_for_write(out_path) as fileobj:
        on_disk = WriteBehind(fileobj)  # read once, by the shard that copies it
        writer = ChunkWriter(on_disk, compression=compression, chunk_bytes=chunk_bytes,
                             gzip_level=gzip_level)
        _sort_into(writer, bucket, runs, scratch_dir=scratch_dir, memory_bytes=memory_bytes,
                   fan_in=fan_in, prefix_len=prefix_len, index_every=index_every)
        chunks = writer.close()
        on_disk.finish(durable=False)
    return BucketChunks(bucket.split, bucket.index, out_path, tuple(chunks))


def plan_bucket(bucket: BucketRange, runs: Iterable[RunInfo], runs_file: str, *,
                scratch_dir: str, chunk_bytes: int, memory_bytes: int, fan_in: int,
                prefix_len: int, index_every: int) -> BucketChunks:
    """`sort_bucket` for plain output, writing nothing: the chunks (which
    depend on the sorted records' sizes only) are planned, and the
    BucketChunks' path is a `bucket_reference` from which
    `write_bucket_range` writes any planned byte range later, straight
    from the runs. Same chunks as `sort_bucket`; also the largest row."""
    writer = ChunkWriter(None, compression="none", chunk_bytes=chunk_bytes, gzip_level=0)
    _sort_into(writer, bucket, runs, scratch_dir=scratch_dir, memory_bytes=memory_bytes,
               fan_in=fan_in, prefix_len=prefix_len, index_every=index_every)
    chunks = tuple(writer.close())
    return BucketChunks(bucket.split, bucket.index, bucket_reference(runs_file, bucket),
                        chunks, writer.max_record)


def measure_bucket(bucket: BucketRange, runs: Iterable[RunInfo], runs_file: str
                   ) -> BucketChunks:
    """`plan_bucket` for shards cut at rows, which need only a bucket's size
    and its largest row (`shard_plan.plan_row_shards`): the rows' sizes in
    the bucket's key range of every run are added up, not sorted. The one
    chunk spans the whole bucket."""
    total = count = largest = 0
    for run in runs:
        part = RunFile(run.path)
        try:
            rows = part.read(bucket.lo, bucket.hi, mapped=True)
            if len(rows.sizes):
                total += int(rows.sizes.sum())
                count += len(rows.sizes)
                largest = max(largest, int(rows.sizes.max()))
            del rows
        finally:
            part.release()
    chunks = (Chunk(0, total, count),) if count else ()
    return BucketChunks(bucket.split, bucket.index, bucket_reference(runs_file, bucket),
                        chunks, largest)


def write_bucket_range(out: BinaryIO, bucket: BucketRange, start: int, length: int,
                       runs: Iterable[RunInfo], *, scratch_dir: str, memory_bytes: int,
                       fan_in: int, prefix_len: int, index_every: int) -> None:
    """Writes bytes ``[start, start + length)`` of a planned bucket (see
    `plan_bucket`; `parse_bucket_reference` gives the bucket and its run
    list) to `out`, sorting its rows from the runs again. Raises
    RunFileError when the bucket is shorter."""
    writer = _WindowWriter(out, start, start + length)
    _sort_into(writer, bucket, runs, scratch_dir=scratch_dir, memory_bytes=memory_bytes,
               fan_in=fan_in, prefix_len=prefix_len, index_every=index_every)
    if not writer.done:
        raise RunFileError(f"bucket {bucket.index} of split {bucket.split!r} ends before "
                           f"byte {start + length}")


def merge_runs(writer, runs: Sequence[RunInfo], *, scratch_dir: str, memory_bytes: int,
               fan_in: int, prefix_len: int, index_every: int) -> None:
    """Gives `writer` (a ChunkWriter) every row of `runs` (run files of one
    split) in ``(key, example)`` order: sorted in memory when they fit
    `memory_bytes`, else merged as streams (intermediate merge runs under
    `scratch_dir` when there are more than `fan_in`)."""
    splits = {run.split for run in runs}
    if len(splits) > 1:
        raise ValueError(f"runs of several splits: {sorted(splits)}")
    whole = BucketRange(splits.pop() if splits else "", 0, b"", None)
    _sort_into(writer, whole, runs, scratch_dir=scratch_dir, memory_bytes=memory_bytes,
               fan_in=fan_in, prefix_len=prefix_len, index_every=index_every)


def _sort_into(writer, bucket: BucketRange, runs: Iterable[RunInfo], *, scratch_dir: str,
               memory_bytes: int, fan_in: int, prefix_len: int, index_every: int) -> None:
    """Gives `writer` (a ChunkWriter or _WindowWriter) the bucket's records
    in order: sorted in memory, or merged as streams (see `sort_bucket`)."""
    parts: list[RunFile] = []
    estimate = 0
    for run in sorted(runs, key=lambda run: run.path):
        if run.split != bucket.split:
            continue
        run_file = RunFile(run.path)
        if run_file.num_records != run.num_records:
            raise RunFileError(
                f"{run.path}: holds {run_file.num_records} records, the spill step "
                f"reported {run.num_records}")
        rows, size = run_file.estimate(bucket.lo, bucket.hi)
        if rows:
            parts.append(run_file)
            estimate += size + rows * _ROW_OVERHEAD
    try:
        if estimate <= memory_bytes:
            _sort_in_memory(writer, bucket, parts)
            return
        scratch: list[str] = []
        try:
            streams = _reduce_fan_in(parts, bucket, scratch_dir, scratch, fan_in=fan_in,
                                     prefix_len=prefix_len, index_every=index_every)
            _write_stream(writer, heapq.merge(*streams))
        finally:
            for path in scratch:
                _remove(path)
    finally:
        for run_file in parts:
            run_file.release()


def _sort_in_memory(writer, bucket: BucketRange, parts: list[RunFile]) -> None:
    if not writer.writes_bytes:
        slices = [run_file.read(bucket.lo, bucket.hi, mapped=True) for run_file in parts]
    else:
        sizes = [run_file.estimate(bucket.lo, bucket.hi)[1] for run_file in parts]
        arena = _read_arena(sum(sizes))
        slices = []
        for run_file, start, size in zip(parts, np.cumsum(sizes) - sizes, sizes):
            slices.append(run_file.read(bucket.lo, bucket.hi, into=arena[start:start + size]))
    slices = [rows for rows in slices if len(rows.sizes)]
    if slices:
        # Fixed-width keys are sorted by numpy; a mix of key kinds (no
        # shuffle) is compared as bytes.
        fixed = {run_file.key_width for run_file in parts}
        width = fixed.pop() if len(fixed) == 1 else KEY_VARIABLE
        if width == KEY_IS_EXAMPLE:
            width = KEY_VARIABLE
        _write_in_order(writer, slices, width)


_ARENAS = threading.local()


def _read_arena(nbytes: int) -> memoryview:
    """A buffer of at least `nbytes` for one bucket's records, kept for the
    same thread's next buckets. A new buffer per bucket is memory fresh from
    the kernel every time (large allocations are mapped and unmapped), whose
    page faults cost as much as the read itself; one per thread is safe with
    runners that process bundles in several threads. `release_read_arena`
    frees it."""
    arena = getattr(_ARENAS, "buffer", None)
    if arena is None or len(arena) < nbytes:
        arena = bytearray(nbytes)
        _ARENAS.buffer = arena
    return memoryview(arena)


def release_read_arena() -> None:
    """Frees this thread's bucket buffer (at the end of a bundle: it should
    not add to the memory of whatever the worker does next)."""
    _ARENAS.buffer = None


_BUCKET_REFERENCE = "bucket:"


def bucket_reference(runs_file: str, bucket: BucketRange) -> str:
    """A planned bucket's stand-in for a file path: its run list and key range."""
    return _BUCKET_REFERENCE + json.dumps(
        [runs_file, bucket.split, bucket.index, bucket.lo.hex(),
         None if bucket.hi is None else bucket.hi.hex()])


def parse_bucket_reference(path: str) -> tuple[str, BucketRange] | None:
    """``(run list file, BucketRange)`` of a `bucket_reference`; None for a
    path to a file."""
    if not path.startswith(_BUCKET_REFERENCE):
        return None
    runs_file, split, index, lo, hi = json.loads(path[len(_BUCKET_REFERENCE):])
    return runs_file, BucketRange(split, index, bytes.fromhex(lo),
                                  None if hi is None else bytes.fromhex(hi))


def _reduce_fan_in(parts: list[RunFile], bucket: BucketRange, scratch_dir: str,
                   scratch: list[str], *, fan_in: int, prefix_len: int,
                   index_every: int) -> list[Iterator[tuple]]:
    """Streams over the bucket's ranges, merged into at most `fan_in` streams
    by writing intermediate sorted runs (their names appended to `scratch`)."""
    while len(parts) > fan_in:
        merged = []
        for group_start in range(0, len(parts), fan_in):
            group = parts[group_start:group_start + fan_in]
            if len(group) == 1:
                merged.append(group[0])
                continue
            path = join_path(scratch_dir, f"{uuid.uuid4().hex}.merge")
            scratch.append(path)
            widths = {run_file.key_width for run_file in group}
            width = widths.pop() if len(widths) == 1 else KEY_VARIABLE
            _merge_to_run(path, heapq.merge(*(run.stream(bucket.lo, bucket.hi) for run in group)),
                          key_width=width, prefix_len=prefix_len, index_every=index_every)
            merged.append(RunFile(path))
        parts = merged
    return [run.stream(bucket.lo, bucket.hi) for run in parts]


def _merge_to_run(path: str, rows: Iterator[tuple], **options) -> None:
    with _open_for_write(path) as fileobj:
        writer = RunWriter(fileobj, **options)
        keys: list[bytes] = []
        examples: list[bytes] = []
        pending = 0
        for key, example, _ in rows:
            keys.append(key)
            examples.append(example)
            pending += len(example)
            if pending >= _BLOCK:
                writer.add(None if options["key_width"] == KEY_IS_EXAMPLE else keys, examples)
                keys, examples, pending = [], [], 0
        writer.add(None if options["key_width"] == KEY_IS_EXAMPLE else keys, examples)
        writer.close()


def write_run_list(path: str, runs: Sequence[RunInfo]) -> None:
    """Writes the run files of a split (JSON) for the bucket sorters."""
    payload = {"runs": [[run.split, run.path, run.num_records, run.num_bytes] for run in runs]}
    with _open_for_write(path) as fileobj:
        fileobj.write(json.dumps(payload).encode("utf-8"))


def read_run_list(path: str) -> list[RunInfo]:
    """The run files listed by `write_run_list`."""
    with fsspec.open(path, "rb") as fileobj:
        payload = json.loads(fileobj.read().decode("utf-8"))
    return [RunInfo(*item) for item in payload["runs"]]


def remove_runs(runs_file: str) -> None:
    """Deletes the run files named in a run list, then the list itself.
    Files already gone are skipped, so a retried call is harmless."""
    try:
        runs = read_run_list(runs_file)
    except FileNotFoundError:
        return
    for run in runs:
        _remove(run.path)
    _remove(runs_file)


def _open_for_write(path: str) -> BinaryIO:
    fs, fs_path = fsspec.core.url_to_fs(path)
    fs.makedirs(posixpath.dirname(fs_path), exist_ok=True)
    return fs.open(fs_path, "wb")


def _remove(path: str) -> None:
    fs, fs_path = fsspec.core.url_to_fs(path)
    try:
        fs.rm(fs_path)
    except FileNotFoundError:
        pass
