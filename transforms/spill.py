"""Spill files of the shard writer: sorted runs, bucket sorting, chunks.

No Beam. Three file kinds live under the writer's temporary directory:

run file (written by the spill step, one per split per buffer flush)::

    record*  : uint32 key length | uint32 example length | key | example
               (key length 0xFFFFFFFF: the key is the example itself)
    index*   : uint64 offset | uint32 prefix length | key prefix
    footer   : uint64 index offset | uint64 index entries | uint64 records | b"RFRUN001"

Records are sorted by ``(order key, example)``. The sparse index (one entry
every `index_every` bytes) lets a bucket read only its key range of a run.

bucket file (written by the sort step): the bucket's rows in order, as
consecutive chunks; each chunk is TFRecord-framed records, or exactly one
gzip member of them. Chunks are cut by size on disk, so shards can be
assembled from them by concatenation, without recompressing.

Memory: a bucket is sorted in memory only when its key ranges fit
`memory_bytes`; otherwise the sorted ranges are merged as streams, with
intermediate merges when there are more than `fan_in` of them.
"""

from __future__ import annotations

import bisect
import heapq
import json
import posixpath
import struct
import uuid
from typing import BinaryIO, Iterable, Iterator, Sequence

import fsspec

from recordforge.transforms import tfrecordio
from recordforge.transforms.shard_plan import BucketChunks, BucketRange, Chunk, RunInfo

__all__ = [
    "ChunkWriter",
    "RunFile",
    "RunFileError",
    "join_path",
    "read_run_list",
    "sort_bucket",
    "write_run",
    "write_run_list",
]

Row = tuple  # (order key: bytes, example: bytes)

_RECORD = struct.Struct("<II")
_KEY_IS_EXAMPLE = 0xFFFFFFFF
_INDEX_ENTRY = struct.Struct("<QI")
_FOOTER = struct.Struct("<QQQ8s")
_MAGIC = b"RFRUN001"
_WRITE_BLOCK = 4 << 20
_READ_BLOCK = 1 << 20
_FRAMING = 16  # TFRecord bytes around each record
# Upper bound on one uncompressed chunk, whatever the estimated gzip ratio.
_MAX_RAW_CHUNK = 64 << 20
_ROW_OVERHEAD = 160  # bytes of Python objects per row held in a list


class RunFileError(Exception):
    """A spill file is damaged or does not match what the spill step reported
    (names the file)."""


def join_path(base: str, *parts: str) -> str:
    """Joins path parts with '/', for local paths and fsspec URLs alike."""
    return "/".join([base.rstrip("/"), *parts])


def write_run(fileobj: BinaryIO, rows: Iterable[Row], *, prefix_len: int,
              index_every: int) -> int:
    """Writes sorted `rows` (a list or a stream) as a run file, a few MB at a
    time; returns the number of records.

    A row whose order key is its example object (ordering by content) stores
    the bytes once; reading it back gives the same object for both.
    """
    parts: list[bytes] = []
    index: list[bytes] = []
    pending = offset = next_index = count = 0
    pack_record = _RECORD.pack
    for key, example in rows:
        if offset >= next_index:
            prefix = key[:prefix_len]
            index.append(_INDEX_ENTRY.pack(offset, len(prefix)) + prefix)
            next_index = offset + index_every
        if key is example:
            parts += (pack_record(_KEY_IS_EXAMPLE, len(example)), example)
            size = 8 + len(example)
        else:
            parts += (pack_record(len(key), len(example)), key, example)
            size = 8 + len(key) + len(example)
        offset += size
        pending += size
        count += 1
        if pending >= _WRITE_BLOCK:
            fileobj.write(b"".join(parts))
            parts.clear()
            pending = 0
    parts.extend(index)
    parts.append(_FOOTER.pack(offset, len(index), count, _MAGIC))
    fileobj.write(b"".join(parts))
    return count


def _record_size(header) -> int:
    key_len, example_len = _RECORD.unpack_from(header, 0)
    return 8 + example_len + (0 if key_len == _KEY_IS_EXAMPLE else key_len)


def _parse(data, lo: bytes, hi: bytes | None, out: list) -> int:
    """Appends the complete records of `data` with lo <= key < hi to `out`;
    returns the number of bytes consumed (a trailing partial record is left)."""
    unpack = _RECORD.unpack_from
    append = out.append
    size = len(data)
    position = 0
    while size - position >= 8:
        key_len, example_len = unpack(data, position)
        start = position + 8
        if key_len == _KEY_IS_EXAMPLE:
            end = start + example_len
            if end > size:
                break
            example = data[start:end]
            key = example
        else:
            middle = start + key_len
            end = middle + example_len
            if end > size:
                break
            key = data[start:middle]
            example = data[middle:end]
        position = end
        # A key compared with a boundary of at most prefix_len bytes gives the
        # same answer as its prefix would, so whole keys are compared here.
        if key >= lo and (hi is None or key < hi):
            append((key, example))
    return position


class RunFile:
    """Reads a run file's footer and index, and its records in a key range."""

    def __init__(self, path: str, fs=None):
        self.path = path
        self._fs, self._fs_path = (fs, path) if fs is not None else fsspec.core.url_to_fs(path)
        with self._fs.open(self._fs_path, "rb") as fileobj:
            size = self._fs.size(self._fs_path)
            if size < _FOOTER.size:
                raise RunFileError(f"{path}: spill file is truncated ({size} bytes)")
            fileobj.seek(size - _FOOTER.size)
            index_offset, entries, records, magic = _FOOTER.unpack(fileobj.read(_FOOTER.size))
            if magic != _MAGIC or index_offset > size - _FOOTER.size:
                raise RunFileError(f"{path}: not a complete spill file (bad footer)")
            fileobj.seek(index_offset)
            raw_index = fileobj.read(size - _FOOTER.size - index_offset)
        self.data_size = index_offset
        self.num_records = records
        self.offsets: list[int] = []
        self.prefixes: list[bytes] = []
        position = 0
        for _ in range(entries):
            offset, prefix_len = _INDEX_ENTRY.unpack_from(raw_index, position)
            position += _INDEX_ENTRY.size
            self.offsets.append(offset)
            self.prefixes.append(bytes(raw_index[position:position + prefix_len]))
            position += prefix_len

    def byte_range(self, lo: bytes, hi: bytes | None) -> tuple[int, int]:
        """The smallest indexed byte range holding every record with
        lo <= key < hi (records at its edges may fall outside)."""
        before = bisect.bisect_left(self.prefixes, lo) - 1  # last entry with prefix < lo
        start = self.offsets[before] if before >= 0 else 0
        if hi is None:
            return start, self.data_size
        after = bisect.bisect_left(self.prefixes, hi)  # first entry with prefix >= hi
        end = self.offsets[after] if after < len(self.offsets) else self.data_size
        return start, max(start, end)

    def read(self, start: int, end: int, lo: bytes, hi: bytes | None) -> list[Row]:
        """The records in [start, end) with lo <= key < hi, in one read."""
        with self._fs.open(self._fs_path, "rb") as fileobj:
            fileobj.seek(start)
            data = fileobj.read(end - start)
        rows: list[Row] = []
        consumed = _parse(data, lo, hi, rows)
        if consumed != len(data):
            raise RunFileError(f"{self.path}: record cut short at byte {start + consumed}")
        return rows

    def stream(self, start: int, end: int, lo: bytes, hi: bytes | None) -> Iterator[Row]:
        """The records in [start, end) with lo <= key < hi, read in blocks
        (a record larger than a block is read whole, once)."""
        with self._fs.open(self._fs_path, "rb") as fileobj:
            fileobj.seek(start)
            remaining = end - start
            carry = b""
            while remaining > 0:
                want = _READ_BLOCK
                if len(carry) >= 8:
                    want = max(want, _record_size(carry) - len(carry))
                block = fileobj.read(min(want, remaining))
                if not block:
                    break
                remaining -= len(block)
                data = carry + block if carry else block
                rows: list[Row] = []
                consumed = _parse(data, lo, hi, rows)
                carry = data[consumed:]
                yield from rows
            if carry or remaining > 0:
                raise RunFileError(f"{self.path}: record cut short at byte {end - remaining - len(carry)}")


class ChunkWriter:
    """Writes sorted examples to a bucket file as chunks of about
    `chunk_bytes` on disk: framed records, or one gzip member per chunk.

    For gzip the uncompressed size of the next chunk is `chunk_bytes` times
    the compression ratio seen so far in this bucket; the ratio depends on
    the bucket's content only, so chunk boundaries are deterministic.
    """

    def __init__(self, fileobj: BinaryIO, *, compression: str, chunk_bytes: int,
                 gzip_level: int):
        self._fileobj = fileobj
        self._gzip = compression == "gzip"
        self._chunk_bytes = chunk_bytes
        self._level = gzip_level
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._raw_total = 0
        self._disk_total = 0
        self._offset = 0
        self._target = chunk_bytes
        self.chunks: list[Chunk] = []

    def write_many(self, examples: Iterable[bytes]) -> None:
        pending = self._pending
        append = pending.append
        size = self._pending_bytes
        target = self._target
        for example in examples:
            append(example)
            size += len(example) + _FRAMING
            if size >= target:
                self._pending_bytes = size
                self._flush()
                size = 0
                target = self._target
        self._pending_bytes = size

    def close(self) -> list[Chunk]:
        if self._pending:
            self._flush()
        return self.chunks

    def _flush(self) -> None:
        data = tfrecordio.frame_records(self._pending)
        if self._gzip:
            raw = len(data)
            data = tfrecordio.gzip_compress(data, self._level)
            self._raw_total += raw
            self._disk_total += len(data)
            self._target = min(_MAX_RAW_CHUNK,
                               self._chunk_bytes * self._raw_total // max(1, self._disk_total))
        self._fileobj.write(data)
        self.chunks.append(Chunk(self._offset, len(data), len(self._pending)))
        self._offset += len(data)
        self._pending.clear()  # in place: write_many holds a bound append
        self._pending_bytes = 0


def _merge(streams: Sequence[Iterator[Row]]) -> Iterator[Row]:
    # Rows are (order key, example) tuples: tuple order is the output order.
    return heapq.merge(*streams)


def _streams_for(parts: Sequence[tuple[RunFile, int, int]], lo: bytes,
                 hi: bytes | None) -> list[Iterator[Row]]:
    return [run.stream(start, end, lo, hi) for run, start, end in parts]


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
    parts: list[tuple[RunFile, int, int]] = []
    for run in sorted(runs, key=lambda run: run.path):
        if run.split != bucket.split:
            continue
        run_file = RunFile(run.path)
        if run_file.num_records != run.num_records:
            raise RunFileError(
                f"{run.path}: holds {run_file.num_records} records, the spill step "
                f"reported {run.num_records}")
        start, end = run_file.byte_range(bucket.lo, bucket.hi)
        if end > start:
            parts.append((run_file, start, end))
    out_path = join_path(out_dir, f"{uuid.uuid4().hex}.chunks")
    scratch: list[str] = []
    try:
        with _open_for_write(out_path) as fileobj:
            writer = ChunkWriter(fileobj, compression=compression, chunk_bytes=chunk_bytes,
                                 gzip_level=gzip_level)
            if _memory_estimate(parts) <= memory_bytes:
                rows: list[Row] = []
                for run_file, start, end in parts:
                    rows += run_file.read(start, end, bucket.lo, bucket.hi)
                rows.sort()  # concatenated sorted runs: timsort merges them
                writer.write_many([example for _, example in rows])
                del rows
            else:
                streams = _reduce_fan_in(parts, bucket, scratch_dir, scratch, fan_in=fan_in,
                                         prefix_len=prefix_len, index_every=index_every)
                writer.write_many(example for _, example in _merge(streams))
            chunks = writer.close()
    finally:
        for path in scratch:
            _remove(path)
    return BucketChunks(bucket.split, bucket.index, out_path, tuple(chunks))


def _reduce_fan_in(parts, bucket: BucketRange, scratch_dir: str, scratch: list[str], *,
                   fan_in: int, prefix_len: int, index_every: int) -> list[Iterator[Row]]:
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
            _write_stream(path, _merge(_streams_for(group, bucket.lo, bucket.hi)),
                          prefix_len=prefix_len, index_every=index_every)
            run_file = RunFile(path)
            merged.append((run_file, 0, run_file.data_size))
        parts = merged
    return _streams_for(parts, bucket.lo, bucket.hi)


def _write_stream(path: str, rows: Iterator[Row], **run_options) -> None:
    with _open_for_write(path) as fileobj:
        write_run(fileobj, rows, **run_options)


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


def _memory_estimate(parts: Sequence[tuple[RunFile, int, int]]) -> int:
    """Bytes that sorting these ranges in memory would take: the data plus
    Python's per-row objects (a tuple and two bytes objects)."""
    total = 0
    for run_file, start, end in parts:
        rows = (end - start) * run_file.num_records // max(1, run_file.data_size)
        total += (end - start) + rows * _ROW_OVERHEAD
    return total


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
