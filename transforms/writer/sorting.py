"""Sorting a bucket from the runs of its split, and writing it out.

No Beam. A bucket is a key range of one split (`elements.BucketRange`).
Its rows are read from every run of the split (`run_format.RunFile`) and
given in ``(key, example)`` order to a writer (`bucket_output`):

- `sort_bucket_cells` (key-ordered gzip output) writes a bucket file: the
  split's cells within the bucket, in order, each one gzip member
  (`CellWriter`), and gives its rows in the cells it may share with its
  neighbours;
- when shards are cut at rows (every other output), `measure_bucket`
  adds up a bucket's size and largest row instead of sorting it (and
  reads its rows in the gzip ratio sample), names the bucket by a
  `spill.bucket_reference`, and each shard later writes its rows of the
  sorted bucket straight from the runs (`write_bucket_rows`, into a gzip
  stream for gzip);
- `merge_runs` gives a writer every row of some runs, and `write_sorted`
  every row of some slices held in memory, sorted or not (the shuffle
  exchange's sorts on local disk and in memory).

Memory: a bucket is sorted in memory only when its key ranges fit
`memory_bytes`; otherwise the sorted ranges are merged as streams, with
intermediate merges when there are more than `fan_in` of them. While a
bucket is only measured, local runs' records are mapped rather than read
(`RunFile._records`): measuring needs their sizes, not their bytes. A
bucket sorted in memory is read into the thread's one buffer and held
there for the next shard that takes rows of it (`bucket_arena`).
"""

from __future__ import annotations

import concurrent.futures
import heapq
import uuid
from typing import Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa

from ...schemas.native import kernels
from ..page_cache import WriteBehind
from ..splits import HASH_SIZE
from ..tfrecord import FOOTER_SIZE, HEADER_SIZE
from .bucket_arena import held_bucket, hold_bucket, read_arena, release_read_arena
from .bucket_output import CellWriter, ShardRowsWriter
from .cells import interior_unit
from .elements import BucketChunks, BucketRange, Chunk, RunInfo
from .ratio_sample import bound_key, ratio_sample_of, ratio_sample_rows
from .row_order import sorted_order, sorted_positions
from .run_merge import merged_positions
from .run_format import (
    BLOCK,
    KEY_IS_EXAMPLE,
    KEY_VARIABLE,
    RunFile,
    RunFileError,
    RunSlice,
    RunWriter,
)
from .spill import (
    ROW_OVERHEAD,
    bucket_reference,
    join_path,
    open_for_write,
    remove_file,
)

__all__ = [
    "measure_bucket",
    "merge_runs",
    "release_read_arena",
    "sort_bucket_cells",
    "write_bucket_rows",
    "write_sorted",
]


def sort_bucket_cells(bucket: BucketRange, runs: Iterable[RunInfo], *, start: int, size: int,
                      total: int, cell_bytes: int, gzip_level: int, out_dir: str,
                      scratch_dir: str, memory_bytes: int, fan_in: int, prefix_len: int,
                      index_every: int) -> tuple[BucketChunks, dict[int, tuple[bytes, int]]]:
    """Reads the bucket's key range from every run of its split, sorts it
    and writes the cells within it to a new file (unique name) under
    `out_dir`, each one gzip member (`CellWriter`; `start`, `size`: the
    bucket's first byte in the split and its bytes, as measured by
    `measure_bucket`; `total`: the split's). Gives those chunks, as unit
    `cells.interior_unit` of the split, and the bucket's rows in the
    cells it may share with its neighbours (`CellWriter.seams`).

    Sorting happens in memory when the ranges add up to at most
    `memory_bytes`, else by a streaming k-way merge (the runs are sorted),
    with intermediate merge files under `scratch_dir` when there are more
    than `fan_in` ranges. Raises RunFileError when a run's record count
    differs from what the spill step reported, or the bucket's bytes from
    `size`.
    """
    out_path = join_path(out_dir, f"{uuid.uuid4().hex}.chunks")
    with open_for_write(out_path) as fileobj:
        on_disk = WriteBehind(fileobj)  # read once, by the shard that copies it
        writer = CellWriter(on_disk, start=start, size=size, total=total,
                            cell_bytes=cell_bytes, gzip_level=gzip_level)
        _sort_into(writer, bucket, runs, scratch_dir=scratch_dir, memory_bytes=memory_bytes,
                   fan_in=fan_in, prefix_len=prefix_len, index_every=index_every)
        chunks = writer.close()
        on_disk.finish(durable=False)
    if writer.offset != start + size:
        raise RunFileError(f"bucket {bucket.index} of split {bucket.split!r}: sorted "
                           f"{writer.offset - start} bytes, measured {size}")
    return (BucketChunks(bucket.split, interior_unit(bucket.index), out_path, tuple(chunks)),
            writer.seams)


def measure_bucket(bucket: BucketRange, runs: Iterable[RunInfo], runs_file: str,
                   ratio_bound: int | None = None) -> BucketChunks:
    """What shards cut at rows need of a bucket: its size and its largest
    row (`shard_cuts.plan_row_shards`), the rows' sizes in the bucket's
    key range of every run added up, not sorted. The one chunk spans the
    whole bucket; the path is a `spill.bucket_reference`, from which
    `write_bucket_rows` sorts and writes a shard's rows later (key-ordered
    gzip: `sort_bucket_cells` sorts it once its first byte in the split
    is known). With `ratio_bound` (shuffled gzip), the bucket's rows whose
    digest is below it are read too, for the split's ratio sample
    (`tuning.RATIO_SAMPLE_BOUND`; only the lowest buckets have any),
    cut as the sample is (`ratio_sample.ratio_sample_of`)."""
    total = count = largest = 0
    below = None if ratio_bound is None else bound_key(ratio_bound)
    sampled = ratio_bound is not None and (below is None or bucket.lo < below)
    sample: list[tuple[bytes, bytes]] = []
    for run in runs:
        part = RunFile(run.path)
        try:
            rows = part.read(bucket.lo, bucket.hi, mapped=True)
            if len(rows.sizes):
                total += int(rows.sizes.sum())
                count += len(rows.sizes)
                largest = max(largest, int(rows.sizes.max()))
                if sampled:
                    sample += _sample_of_slice(rows, part.key_width, ratio_bound)
            del rows
        finally:
            part.release()
    chunks = (Chunk(0, total, count),) if count else ()
    return BucketChunks(bucket.split, bucket.index, bucket_reference(runs_file, bucket),
                        chunks, largest, tuple(ratio_sample_of(sample)))


def _sample_of_slice(rows: RunSlice, key_width: int, bound: int) -> list[tuple[bytes, bytes]]:
    """``(digest, framed record)`` of the rows of a slice of a shuffled run
    whose digest is below `bound` (`ratio_sample.ratio_sample_rows`, on the
    keys' raw bytes: numpy drops a fixed-width key's trailing zero bytes
    when it gives one). Only those rows' mapped pages are read."""
    if key_width != HASH_SIZE:
        raise RunFileError(f"a ratio sample needs digest keys, the run has width {key_width}")
    digests = np.ascontiguousarray(rows.keys).tobytes()
    return ratio_sample_rows(digests, rows.data, rows.sizes, bound)


def write_bucket_rows(out, bucket: BucketRange, start: int, thresholds: np.ndarray,
                      shard: int, runs: Iterable[RunInfo], *, scratch_dir: str,
                      memory_bytes: int, fan_in: int, prefix_len: int,
                      index_every: int) -> tuple[int, int]:
    """Writes to `out` the rows of a measured bucket (see `measure_bucket`)
    that shard `shard` holds when shards are cut at rows, sorting the
    bucket from the runs again; `start` is the bucket's first byte in the
    split. Returns (rows, bytes) written."""
    writer = ShardRowsWriter(out, start, thresholds, shard)
    _sort_into(writer, bucket, runs, scratch_dir=scratch_dir, memory_bytes=memory_bytes,
               fan_in=fan_in, prefix_len=prefix_len, index_every=index_every)
    return writer.rows, writer.written


def merge_runs(writer, runs: Sequence[RunInfo], *, scratch_dir: str, memory_bytes: int,
               fan_in: int, prefix_len: int, index_every: int) -> None:
    """Gives `writer` (a `bucket_output` writer) every row of `runs` (run files of one
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
    """Gives `writer` (one of `bucket_output`) the bucket's records
    in order: sorted in memory, or merged as streams (see `sort_bucket`)."""
    parts: list[RunFile] = []
    estimate = 0
    for run in sorted(runs, key=lambda run: run.path):
        if run.split != bucket.split:
            continue
        run_file = RunFile(run.path, keep_pages=run.kept)
        if run_file.num_records != run.num_records:
            raise RunFileError(
                f"{run.path}: holds {run_file.num_records} records, the spill step "
                f"reported {run.num_records}")
        rows, size = run_file.estimate(bucket.lo, bucket.hi)
        if rows:
            parts.append(run_file)
            estimate += size + rows * ROW_OVERHEAD
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
                remove_file(path)
    finally:
        for run_file in parts:
            run_file.release()


def _sort_in_memory(writer, bucket: BucketRange, parts: list[RunFile]) -> None:
    # Consecutive shards share the bucket one ends in and the next starts
    # in: it is read and sorted once for both (`bucket_arena`).
    identity = (bucket, tuple((run_file.path, run_file.num_records, run_file.data_size)
                              for run_file in parts))
    ordered = held_bucket(identity)
    if ordered is None:
        ordered = _read_in_order(bucket, parts)
        hold_bucket(identity, ordered)
    _write_ordered(writer, ordered)


def _read_in_order(bucket: BucketRange, parts: list[RunFile]) -> _Ordered:
    """The bucket's rows of every run, read into the thread's arena, in order."""
    sizes = [run_file.estimate(bucket.lo, bucket.hi)[1] for run_file in parts]
    arena = read_arena(sum(sizes))
    slices = []
    for run_file, start, size in zip(parts, np.cumsum(sizes) - sizes, sizes):
        slices.append(run_file.read(bucket.lo, bucket.hi, into=arena[start:start + size]))
    slices = [rows for rows in slices if len(rows.sizes)]
    # Fixed-width keys are sorted by numpy; a mix of key kinds (no
    # shuffle) is compared as bytes.
    fixed = {run_file.key_width for run_file in parts}
    width = fixed.pop() if len(fixed) == 1 else KEY_VARIABLE
    if width == KEY_IS_EXAMPLE:
        width = KEY_VARIABLE
    # Each run's slice is in order: one is as it is, several are merged.
    return _Ordered(slices, width, sorted_slices=True)


class _Ordered:
    """The rows of some slices in ``(key, example)`` order
    (`row_order.sorted_order`): `sizes` (framed) and `sources` (slice of
    each row) in slice order, `order` the rows' positions in that order
    (None: one slice, `presorted`, in order as it is). key_width: the
    slices' keys are numpy arrays of fixed-width bytes (> 0), or lists of
    bytes. `records` gives them as one Arrow array, made once."""

    def __init__(self, slices: Sequence[RunSlice], key_width: int, *,
                 sorted_slices: bool = False):
        self.slices = list(slices)
        self._records: tuple | None = None
        if not self.slices:
            self.sizes = np.zeros(0, dtype=np.int64)
            self.order = None
            return
        self.sizes = np.concatenate([rows.sizes for rows in self.slices])
        self.sources = np.repeat(np.arange(len(self.slices)),
                                 [len(rows.sizes) for rows in self.slices])
        if sorted_slices and len(self.slices) == 1:
            self.order = None
            return
        merged = merged_positions(self.slices) if sorted_slices and key_width <= 0 else None
        self.order = merged if merged is not None else self._sort(key_width)

    def _sort(self, key_width: int) -> np.ndarray:
        views = [rows.data for rows in self.slices]
        sizes, sources = self.sizes, self.sources
        starts: list[np.ndarray] = []  # each row's first byte, once an example is compared

        def example_at(row: int) -> bytes:
            if not starts:  # (digests' order compares none: `row_order._order_by_head`)
                starts.append(np.concatenate([np.cumsum(rows.sizes) - rows.sizes
                                              for rows in self.slices]))
            start = int(starts[0][row])
            end = start + int(sizes[row])
            return bytes(views[sources[row]][start + HEADER_SIZE:end - FOOTER_SIZE])

        if key_width > 0:
            return sorted_positions(np.concatenate([rows.keys for rows in self.slices]),
                                    example_at)
        return np.asarray(sorted_order([key for rows in self.slices for key in rows.keys],
                                       example_at), dtype=np.int64)

    def records(self) -> tuple[pa.LargeBinaryArray, np.ndarray]:
        """`_as_arrow` of the slices, made on the first call."""
        if self._records is None:
            self._records = _as_arrow(self.slices, self.sizes, self.sources)
        return self._records


def write_sorted(writer, slices: Sequence[RunSlice], key_width: int) -> None:
    """Gives `writer` (one of `bucket_output`) the rows of `slices`, sorted
    or not, in ``(key, example)`` order (`row_order.sorted_order`),
    gathering a block of rows at a time from the slices (no copy of the
    whole bucket). key_width: the slices' keys are numpy arrays of
    fixed-width bytes (> 0), or lists of bytes."""
    _write_ordered(writer, _Ordered(slices, key_width))


def _write_ordered(writer, ordered: _Ordered) -> None:
    """Gives `writer` the rows of `ordered` in their order, a block at a
    time; rows whose sizes are enough to the writer are not gathered."""
    if not ordered.slices:
        return
    if ordered.order is None:
        only = ordered.slices[0]
        writer.write_framed(only.data if writer.needs_bytes(len(only.data)) else None,
                            only.sizes)
        return
    order, sizes = ordered.order, ordered.sizes
    step = max(1, len(order) * BLOCK // max(1, int(sizes.sum())))
    blocks = [order[first:first + step] for first in range(0, len(order), step)]
    # The next block is gathered while the writer hashes and writes this one:
    # hashing and writing release the GIL, so a worker's second core shares
    # the copying (the native gather holds the GIL, Arrow's take does not).
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="gather") as gatherer:
        ahead: tuple[int, concurrent.futures.Future] | None = None
        for index, rows in enumerate(blocks):
            row_sizes = sizes[rows]
            if not writer.needs_bytes(int(row_sizes.sum())):
                writer.write_framed(None, row_sizes)  # sizes are enough: no gathering
                continue
            records, positions = ordered.records()
            if ahead is not None and ahead[0] == index:
                block = ahead[1].result()
            else:
                block = _gather(records, positions[rows])
            if index + 1 < len(blocks):
                ahead = (index + 1,
                         gatherer.submit(_gather, records, positions[blocks[index + 1]]))
            writer.write_framed(block, row_sizes)


def _as_arrow(slices: Sequence[RunSlice], sizes: np.ndarray, sources: np.ndarray
              ) -> tuple[pa.LargeBinaryArray, np.ndarray]:
    """The slices' framed records (`sizes`, in slice order; `sources`: the
    slice of each) as one Arrow array of binary values, and the position of
    each record in it.

    Where the slices lie in order in one buffer (as `_sort_in_memory` reads
    them, with the rows outside the bucket left between them), the array
    is over that buffer, each slice preceded by one value spanning the bytes
    before it; else over one copy of the slices. Either way Arrow takes from
    one array: its take on a chunked binary array joins every chunk again on
    each call, 3-10 times the cost with a bucket's ~100 run slices."""
    if sum(len(rows.data) for rows in slices) != int(sizes.sum()):
        raise ValueError("the slices' bytes do not match their record sizes")
    whole = _common_buffer(slices)
    if whole is not None:
        starts = [pa.py_buffer(rows.data).address - whole.address for rows in slices]
        ends = [start + len(rows.data) for start, rows in zip(starts, slices)]
        if all(end <= start for end, start in zip([0] + ends, starts)):
            offsets = np.concatenate(
                [[0]] + [np.concatenate(([start], start + np.cumsum(rows.sizes)))
                         for start, rows in zip(starts, slices)]).astype(np.int64)
            return (_binary_array(offsets, whole),
                    np.arange(len(sizes)) + sources + 1)  # past each slice's gap value
    offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    joined = pa.py_buffer(b"".join(rows.data for rows in slices))
    return _binary_array(offsets, joined), np.arange(len(sizes))


def _binary_array(offsets: np.ndarray, data: pa.Buffer) -> pa.LargeBinaryArray:
    return pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(offsets) - 1,
                                            [None, pa.py_buffer(offsets), data])


def _common_buffer(slices: Sequence[RunSlice]) -> pa.Buffer | None:
    """The one buffer every slice's bytes are a view of, or None."""
    owner = slices[0].data.obj
    if owner is None or any(rows.data.obj is not owner for rows in slices):
        return None
    try:
        return pa.py_buffer(owner)
    except (TypeError, ValueError, BufferError):  # not one contiguous buffer
        return None


def _gather(records: pa.LargeBinaryArray, rows: np.ndarray) -> memoryview:
    """The framed records at positions `rows` of `records`, back to back:
    copied by the native kernel straight into the bytes it gives (Arrow's
    take, the reference, also made offsets for them and a fresh buffer a
    block, and cost about twice as much), else by Arrow's take (in C,
    without the GIL; a Python loop over the rows cost about 0.3 µs a row)."""
    native = kernels()
    if native is not None and records.offset == 0:
        offsets, data = (np.frombuffer(buffer, dtype=np.uint8) for buffer in records.buffers()[1:])
        positions = np.ascontiguousarray(rows, dtype="<i8").view(np.uint8)
        return memoryview(native.gather_values(offsets, data, positions))
    taken = records.take(pa.array(rows, type=pa.int64()))
    offsets = np.frombuffer(taken.buffers()[1], dtype=np.int64)
    first, end = int(offsets[taken.offset]), int(offsets[taken.offset + len(taken)])
    return memoryview(taken.buffers()[2])[first:end]


def _write_stream(writer, rows: Iterator[tuple]) -> None:
    """Writes merged ``(key, example, framed)`` rows a block at a time."""
    block: list = []
    pending = 0
    for row in rows:
        block.append(row[2])
        pending += len(row[2])
        if pending >= BLOCK:
            _write_framed_list(writer, block)
            block, pending = [], 0
    _write_framed_list(writer, block)


def _write_framed_list(writer, framed: list) -> None:
    if framed:
        sizes = np.fromiter(map(len, framed), dtype=np.int64, count=len(framed))
        writer.write_framed(b"".join(framed), sizes)


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
    with open_for_write(path) as fileobj:
        writer = RunWriter(fileobj, **options)
        keys: list[bytes] = []
        examples: list[bytes] = []
        pending = 0
        for key, example, _ in rows:
            keys.append(key)
            examples.append(example)
            pending += len(example)
            if pending >= BLOCK:
                writer.add(None if options["key_width"] == KEY_IS_EXAMPLE else keys, examples)
                keys, examples, pending = [], [], 0
        writer.add(None if options["key_width"] == KEY_IS_EXAMPLE else keys, examples)
        writer.close()
