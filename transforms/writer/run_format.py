"""Sorted run files: the format the spill step writes and buckets read.

No Beam. A run file holds rows of one split sorted by ``(order key,
example)`` (`row_order`): the spill step writes one per split per buffer
flush (`spill.RunBuffer`), the build cache keeps them as its pieces, and a
large bucket's intermediate merges and the shuffle exchange's local sorts
write them too. It is in column sections so that a bucket finds, sorts and
copies its rows with a few numpy calls instead of a Python loop per row::

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

The sparse index lets a bucket read only its key range of a run
(`RunFile.read`, `RunFile.stream`); the rows are framed once, when the run
is written (`RunWriter`, `write_sorted_run`), so bucket sorting only moves
framed bytes.
"""

from __future__ import annotations

import bisect
import mmap
import os
import shutil
import struct
import tempfile
from typing import BinaryIO, Iterator, NamedTuple, Sequence

import numpy as np
from fsspec.implementations.local import LocalFileSystem

from .. import tfrecord
from ..framed_keys import FramedKeys
from ..page_cache import drop_behind
from ..tfrecord import FOOTER_SIZE, FRAMING, HEADER_SIZE
from .row_order import Taken, framed_rows, sorted_order, take
from .run_kernel import sorted_rows, write_ordered
from .run_reads import filesystem, open_run, read_at, read_into

__all__ = [
    "BLOCK",
    "KEY_IS_EXAMPLE",
    "KEY_VARIABLE",
    "RunFile",
    "RunFileError",
    "RunSlice",
    "RunWriter",
    "run_steps",
    "write_sorted_run",
]

KEY_IS_EXAMPLE = 0  # key_width: the order key is the example; no key section
KEY_VARIABLE = -1  # key_width: keys of any length, stored with their sizes
BLOCK = 4 << 20  # bytes of rows framed, gathered or read in one go

_SIZE = np.dtype("<u4")
_INDEX_ENTRY = struct.Struct("<QQQI")
_FOOTER = struct.Struct("<QQQQQQq8s")
_MAGIC = b"RFRUN002"
_SPOOL = 8 << 20  # column sections kept in memory up to this size while writing


class RunFileError(Exception):
    """A spill file is damaged or does not match what the spill step reported
    (names the file)."""


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

    def add(self, keys: Sequence[bytes] | None, examples: Sequence[bytes],
            joined: tuple[bytes, np.ndarray | None] | None = None) -> None:
        """Appends rows that sort after every row added before (keys None
        when the key is the example); joined: as `add_framed`."""
        count = len(examples)
        if not count:
            return
        sizes = np.fromiter(map(len, examples), dtype=np.int64, count=count) + FRAMING
        self.add_framed(keys, sizes, tfrecord.frame_records(list(examples)),
                        examples.__getitem__, joined)

    def add_framed(self, keys: Sequence[bytes] | None, sizes: np.ndarray, framed: bytes,
                   example_at, joined: tuple[bytes, np.ndarray | None] | None = None) -> None:
        """`add` of rows already framed: `framed` their records back to
        back, `sizes` (int64) each one's framed size, example_at(i) row i's
        example (read only for the index's key prefixes when keys is None);
        joined: the keys back to back and each one's size (int64; None for
        fixed-width keys), when the caller has them (else they are taken
        from `keys`)."""
        count = len(sizes)
        if not count:
            return
        starts = self._offset + np.cumsum(sizes) - sizes
        key_starts = None
        if self._key_width == KEY_VARIABLE:
            key_sizes = (joined[1] if joined is not None
                         else np.fromiter(map(len, keys), dtype=np.int64, count=count))
            key_starts = self._key_offset + np.cumsum(key_sizes) - key_sizes
            self._key_sizes.write(key_sizes.astype(_SIZE).tobytes())
            self._key_offset += int(key_sizes.sum())
        row = int(np.searchsorted(starts, self._next_index, "left"))
        while row < count:
            key = example_at(row) if keys is None else keys[row]
            prefix = bytes(key[:self._prefix_len])
            key_offset = int(key_starts[row]) if key_starts is not None else 0
            self._index.append(_INDEX_ENTRY.pack(self._records + row, int(starts[row]),
                                                 key_offset, len(prefix)) + prefix)
            self._next_index = int(starts[row]) + self._index_every
            row = int(np.searchsorted(starts, self._next_index, "left"))
        if self._keys is not None:
            blob = joined[0] if joined is not None else b"".join(keys)
            if self._key_width > 0 and len(blob) != self._key_width * count:
                raise ValueError(f"run keys must all be {self._key_width} bytes")
            self._keys.write(blob)
        self._sizes.write(sizes.astype(_SIZE).tobytes())
        self._fileobj.write(framed)
        self._offset += int(sizes.sum())
        self._records += count

    def close(self) -> int:
        """Appends the sections and the footer; returns the number of rows."""
        sections = []
        for spool in (self._sizes, self._keys, self._key_sizes):
            sections.append(self._offset)
            if spool is not None:
                spool.seek(0)
                shutil.copyfileobj(spool, self._fileobj, BLOCK)
                self._offset += spool.tell()
                spool.close()
        index = b"".join(self._index)
        self._fileobj.write(index)
        self._fileobj.write(_FOOTER.pack(*sections, self._offset, len(self._index),
                                         self._records, self._key_width, _MAGIC))
        return self._records


def write_sorted_run(fileobj: BinaryIO, keys: Sequence[bytes] | None,
                     examples: Sequence[bytes], *, key_width: int, prefix_len: int,
                     index_every: int, framed_bytes: int | None = None) -> int:
    """Sorts rows by ``(key, example)`` and writes them as a run file (by
    the kernels where they can, `run_kernel`; else `RunWriter`, the
    reference); returns the number of rows. keys: one per example, all
    `key_width` bytes when key_width > 0; None with KEY_IS_EXAMPLE.
    framed_bytes: the rows' framed size in all, when the caller knows it."""
    # What the kernels take as keys, and whether they can take these.
    native_keys, native = keys, key_width != KEY_IS_EXAMPLE or keys is None
    if key_width > 0:
        native_keys = b"".join(keys)
        order = sorted_order(_fixed_keys(native_keys, key_width), examples.__getitem__)
        native = not keys or set(map(len, keys)) == {key_width}  # else RunWriter says so
    else:
        by_example = key_width == KEY_IS_EXAMPLE
        order = sorted_rows(None if by_example else keys, examples)
        if order is None:
            order = sorted(range(len(examples)), key=examples.__getitem__ if by_example
                           else list(zip(keys, examples)).__getitem__)
    if native:
        written = write_ordered(fileobj, native_keys, examples, order, key_width=key_width,
                                prefix_len=prefix_len, index_every=index_every, block=BLOCK)
        if written is not None:
            return written
    order = order.tolist() if isinstance(order, np.ndarray) else order  # RunWriter's steps
    writer = RunWriter(fileobj, key_width=key_width, prefix_len=prefix_len,
                       index_every=index_every)
    for rows in run_steps(order, examples, framed_bytes):
        gathered = framed_rows(keys, examples, rows)
        if gathered is None:
            writer.add(None if keys is None else take(keys, rows), take(examples, rows))
            continue
        framed, sizes, joined = gathered
        writer.add_framed(None if keys is None else Taken(keys, rows), sizes, framed,
                          Taken(examples, rows).__getitem__, joined)
    return writer.close()


def run_steps(order: list[int], examples: Sequence[bytes], framed_bytes: int | None):
    """`order` cut into steps of about `BLOCK` framed bytes each."""
    total = (sum(map(len, examples)) + FRAMING * len(examples) if framed_bytes is None
             else framed_bytes)
    step = max(1, len(examples) * BLOCK // max(1, total))
    for start in range(0, len(order), step):
        yield order[start:start + step]


class RunSlice(NamedTuple):
    """Consecutive rows of a run: their framed records back to back in
    `data`, the framed size of each, and their keys (a numpy array of
    fixed-width bytes, a `FramedKeys` of variable-width ones, or a list of
    bytes)."""

    keys: object
    data: memoryview
    sizes: np.ndarray

    def examples(self) -> list[bytes]:
        ends = np.cumsum(self.sizes).tolist()
        starts = [0] + ends[:-1]
        data = self.data
        return [bytes(data[start + HEADER_SIZE:end - FOOTER_SIZE])
                for start, end in zip(starts, ends)]


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


class _Layout(NamedTuple):
    """A run file's footer and parsed index."""

    sizes_offset: int
    keys_offset: int
    key_sizes_offset: int
    num_records: int
    key_width: int
    rows: list
    offsets: list
    key_offsets: list
    prefixes: list


def _read_layout(fs, fs_path: str, path: str) -> _Layout:
    with fs.open(fs_path, "rb") as fileobj:
        size = fs.size(fs_path)
        if size < _FOOTER.size:
            raise RunFileError(f"{path}: spill file is truncated ({size} bytes)")
        fileobj.seek(size - _FOOTER.size)
        (sizes_offset, keys_offset, key_sizes_offset, index_offset, entries, records,
         key_width, magic) = _FOOTER.unpack(fileobj.read(_FOOTER.size))
        if magic != _MAGIC or index_offset > size - _FOOTER.size:
            raise RunFileError(f"{path}: not a complete spill file (bad footer)")
        fileobj.seek(index_offset)
        raw_index = fileobj.read(size - _FOOTER.size - index_offset)
    return _Layout(sizes_offset, keys_offset, key_sizes_offset, records, key_width,
                   *_parse_index(raw_index, entries))


# Layouts of local run files, by path: every bucket opens every run of its
# split, and parsing the same index again for each of them cost about a
# tenth of a rebuild from the cache. An entry is used only while the file
# is the same one (device, inode, size and modification time).
_LAYOUTS: dict[str, tuple[tuple, _Layout]] = {}
_LAYOUTS_KEPT = 4096


def _layout(fs, fs_path: str, path: str) -> _Layout:
    if not isinstance(fs, LocalFileSystem):
        return _read_layout(fs, fs_path, path)
    try:
        stat = os.stat(fs_path)
    except FileNotFoundError:
        raise RunFileError(f"{path}: spill file is missing") from None
    identity = (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)
    known = _LAYOUTS.get(fs_path)
    if known is not None and known[0] == identity:
        return known[1]
    layout = _read_layout(fs, fs_path, path)
    if len(_LAYOUTS) >= _LAYOUTS_KEPT:
        _LAYOUTS.pop(next(iter(_LAYOUTS)))  # the oldest entry
    _LAYOUTS[fs_path] = (identity, layout)
    return layout


def _within(rows: RunSlice, lo: bytes, hi: bytes | None, width: int) -> RunSlice:
    """The rows of a sorted slice with lo <= key < hi."""
    start = _bound(rows.keys, lo, width)
    stop = _bound(rows.keys, hi, width)
    ends = np.cumsum(rows.sizes)
    first_byte = int(ends[start - 1]) if start else 0
    last_byte = int(ends[stop - 1]) if stop else 0
    return RunSlice(rows.keys[start:stop], rows.data[first_byte:last_byte],
                    rows.sizes[start:stop])


class RunFile:
    """Reads a run file's footer and index, and its rows in a key range."""

    def __init__(self, path: str, fs=None, *, keep_pages: bool = False):
        self.path = path
        # A run read for good leaves the page cache as it is read
        # (`page_cache`); the build cache's runs are read again by the
        # next build and were just read whole by the cache's check, so
        # dropping them only costs: 0.4 s a GB of advice calls here.
        self._keep_pages = keep_pages
        self._fs, self._fs_path = (fs, path) if fs is not None else filesystem(path)
        layout = _layout(self._fs, self._fs_path, path)
        self._sizes_offset = layout.sizes_offset
        self._keys_offset = layout.keys_offset
        self._key_sizes_offset = layout.key_sizes_offset
        self.key_width = layout.key_width
        self.data_size = layout.sizes_offset
        self.num_records = layout.num_records
        self._map: mmap.mmap | None = None  # the whole file, mapped (see _records)
        self.rows, self.offsets = layout.rows, layout.offsets
        self.key_offsets, self.prefixes = layout.key_offsets, layout.prefixes

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

    def _read_rows(self, fileobj, first: int, end: int, offset: int, key_offset: int,
                   lo: bytes, hi: bytes | None, mapped: bool = False,
                   into: memoryview | None = None) -> RunSlice:
        """The rows with lo <= key < hi of rows ``[first, end)`` (`offset`,
        `key_offset`: row first's record and key offsets). The sizes and
        keys are read first and the records of those rows only: an indexed
        range runs up to `index_every` bytes past the key range at each
        end, which every bucket read twice over (its own edges, and its
        neighbours')."""
        count = end - first
        raw_sizes = self._section(fileobj, self._sizes_offset + 4 * first, 4 * count, "sizes")
        sizes = np.frombuffer(raw_sizes, dtype=_SIZE).astype(np.int64)
        if self.key_width > 0:
            keys = _fixed_keys(self._section(fileobj, self._keys_offset + self.key_width * first,
                                             self.key_width * count, "keys"), self.key_width)
        elif self.key_width == KEY_VARIABLE:
            # The keys stay in the one bytes object read (a `FramedKeys`):
            # a bytes object per key cost more than reading them.
            key_offsets = np.zeros(count + 1, dtype=np.int64)
            np.cumsum(np.frombuffer(self._section(fileobj, self._key_sizes_offset + 4 * first,
                                                  4 * count, "key sizes"), dtype=_SIZE),
                      out=key_offsets[1:])
            keys = FramedKeys(self._section(fileobj, self._keys_offset + key_offset,
                                            int(key_offsets[-1]), "keys"), key_offsets)
        else:
            # The key is the example: the records are read to find the range.
            data = self._records(fileobj, offset, int(sizes.sum()), mapped, into)
            rows = RunSlice(None, data, sizes)
            return _within(rows._replace(keys=rows.examples()), lo, hi, self.key_width)
        start = _bound(keys, lo, self.key_width)
        stop = max(start, _bound(keys, hi, self.key_width))
        skipped = int(sizes[:start].sum())
        sizes = sizes[start:stop]
        data = self._records(fileobj, offset + skipped, int(sizes.sum()), mapped, into)
        return RunSlice(keys[start:stop], data, sizes)

    def _section(self, fileobj, offset: int, length: int, what: str) -> bytes:
        """Bytes ``[offset, offset + length)`` of the file (a column section's)."""
        data = read_at(fileobj, offset, length)
        if len(data) != length:
            raise RunFileError(f"{self.path}: {what} cut short at byte {offset + len(data)}")
        return data

    def _records(self, fileobj, offset: int, length: int, mapped: bool,
                 into: memoryview | None = None) -> memoryview:
        """Bytes ``[offset, offset + length)`` of the records section.

        `mapped` (measuring): a local run is mapped rather than read, so
        that bytes never looked at cost nothing: measuring a bucket needs
        only the sizes (and, for the ratio sample, the keys and a few rows).
        Pages looked at count in the process's RSS until `release`, which
        is why writing reads instead (mapped, peak RSS followed the largest
        bucket: 1.26x higher at 4 GB than at 1 GB).

        `into` (writing): read into this buffer (at least `length` bytes)
        instead of a new one; see `bucket_arena.read_arena`.
        """
        if offset + length > self.data_size:
            raise RunFileError(f"{self.path}: record cut short at byte {self.data_size}")
        if into is not None and not mapped:
            view = into[:length]
            filled = read_into(fileobj, view, offset)
            if filled != length:
                raise RunFileError(f"{self.path}: record cut short at byte {offset + filled}")
            if length and not self._keep_pages:
                drop_behind(fileobj, offset, length)  # read once (twice at most)
            return view
        if not mapped or not isinstance(self._fs, LocalFileSystem):
            data = read_at(fileobj, offset, length)
            if len(data) != length:
                raise RunFileError(f"{self.path}: record cut short at byte {offset + len(data)}")
            return memoryview(data)
        if self._map is None:
            # The map outlives this call and the file: the slices handed out
            # keep it alive, and it is unmapped once the last one is gone.
            self._map = mmap.mmap(fileobj.fileno(), 0, access=mmap.ACCESS_READ)
        return memoryview(self._map)[offset:offset + length]

    def _open(self) -> BinaryIO:
        return open_run(self._fs, self._fs_path)

    def release(self) -> None:
        """Takes the mapped pages out of this process's memory (they stay in
        the page cache, and a later access maps them again), so that what
        one bucket touched does not add up over every bucket a worker sorts."""
        if self._map is not None:
            self._map.madvise(mmap.MADV_DONTNEED)

    def read(self, lo: bytes, hi: bytes | None, mapped: bool = False,
             into: memoryview | None = None) -> RunSlice:
        """The rows with lo <= key < hi, in a few reads (`mapped`, `into`:
        see `_records`; `into` must hold the range's `estimate` bytes)."""
        first, end, offset, key_offset = self.row_range(lo, hi)
        with self._open() as fileobj:
            return self._read_rows(fileobj, first, end, offset, key_offset, lo, hi, mapped,
                                   into)

    def stream(self, lo: bytes, hi: bytes | None) -> Iterator[tuple]:
        """``(key, example, framed record)`` of the rows with lo <= key < hi,
        in order, read a block of rows at a time."""
        first, end, offset, key_offset = self.row_range(lo, hi)
        with self._open() as fileobj:
            row = first
            while row < end:
                # Index entries are index_every bytes apart: a block runs to
                # the entry after BLOCK bytes (or to the end of the range).
                entry = bisect.bisect_right(self.offsets, offset + BLOCK)
                stop = self.rows[entry] if entry < len(self.rows) else self.num_records
                stop = min(end, max(stop, row + 1))
                rows = self._read_rows(fileobj, row, stop, offset, key_offset, lo, hi)
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
