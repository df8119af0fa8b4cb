"""The shuffle exchange's steps when shards are cut at rows (all but key-ordered gzip).

A batch's rows are cut by bucket as they are packed (shuffled output:
`shuffle_steps.PackFn`) or routed (key order: `shuffle_cells.RouteFn`,
once the split's bucket bounds are known); only their counts cross a combine
(`BucketSizesFn`), with, for gzip, the rows of the split's ratio sample
(`tuning.RATIO_SAMPLE_BOUND`), from which each bucket learns its
first byte in the split and each shard the buckets that may hold its
rows (`plan_row_cuts`; gzip: as many shards as the sample's compression
ratio says). A bucket's rows are sorted (`CutBucketFn`) through a
`ShardCutter`, which sends every row to the shard holding its bytes'
midpoint in the split (`shard_cuts.shards_of_rows`), in pieces; a shard
checks that it got every piece (`assemble_shard`) and is written
(`WriteCutShardFn`; gzip: its framed records compressed as one gzip
member, `tfrecord.GzipStream`). See `exchange` for the whole path.
"""

from __future__ import annotations

import functools
import tempfile
from typing import BinaryIO, Sequence

import apache_beam as beam
import numpy as np

from .. import tfrecord
from . import run_format
from .bucket_output import gzip_written_size
from .ratio_sample import RATIO_SAMPLE_LIMIT, estimated_written_bytes, ratio_sample_of, within_limit
from .shard_cuts import (
    row_shard_count,
    row_shard_thresholds,
    shards_of_rows,
    shards_touched,
)
from .shuffle_packets import sorted_bucket
from .shuffle_steps import BucketSortFn, ShardFileFn

__all__ = ["BucketSizesFn", "CutBucketFn", "ShardCutter", "WriteCutShardFn", "assemble_shard",
           "plan_row_cuts"]


# -- plain logic (no Beam) ---------------------------------------------------


class ShardCutter:
    """Takes a sorted bucket's framed records in order (like a
    bucket_output.CellWriter) and writes them to `out`, noting which shard each
    run of records belongs to: records are placed by their bytes' midpoint
    in the split (`shard_cuts.shards_of_rows`), from the bucket's first
    byte `start` in the split. `segments` lists ``[shard, offset in out,
    length, rows]`` in order."""

    def __init__(self, out: BinaryIO, start: int, thresholds: np.ndarray):
        self._out = out
        self.thresholds = thresholds
        self.start = start
        self.offset = start  # the next record's first byte in the split
        self.written = 0
        self.segments: list[list[int]] = []

    def needs_bytes(self, nbytes: int) -> bool:
        return True

    def write_framed(self, data, sizes: np.ndarray) -> None:
        sizes = np.asarray(sizes, dtype=np.int64)
        if not len(sizes):
            return
        view = memoryview(data)
        ends = np.cumsum(sizes)
        shards = shards_of_rows(self.offset + ends - sizes, sizes, self.thresholds)
        edges = [0, *(np.flatnonzero(np.diff(shards)) + 1).tolist(), len(sizes)]
        for first, last in zip(edges[:-1], edges[1:]):
            shard = int(shards[first])
            lo = int(ends[first] - sizes[first])
            hi = int(ends[last - 1])
            self._out.write(view[lo:hi])
            if self.segments and self.segments[-1][0] == shard:
                self.segments[-1][2] += hi - lo
                self.segments[-1][3] += last - first
            else:
                self.segments.append([shard, self.written, hi - lo, last - first])
            self.written += hi - lo
        self.offset += int(ends[-1])


def assemble_shard(name: str, buckets: Sequence[int], ends: dict, pieces: dict,
                   ) -> list[tuple[int, int]]:
    """Checks that a shard cut at rows got everything, and gives the order
    of its pieces: ``[(bucket, piece number), ...]``.

    buckets: the buckets the plan says may hold its rows; ends: bucket ->
    (pieces sent, rows, bytes), one per bucket that sorted its rows; pieces:
    (bucket, piece number) -> anything."""
    missing = sorted(set(buckets) - set(ends))
    if missing:
        raise run_format.RunFileError(f"{name}: bucket {missing[0]} did not report its rows")
    extra = sorted(set(ends) - set(buckets))
    if extra:
        raise run_format.RunFileError(f"{name}: bucket {extra[0]} sent rows the plan did not "
                                     f"place in this shard")
    order = []
    for bucket in sorted(buckets):
        count = ends[bucket][0]
        for number in range(count):
            if (bucket, number) not in pieces:
                raise run_format.RunFileError(f"{name}: piece {number} of bucket {bucket} is "
                                             f"missing")
            order.append((bucket, number))
    if len(order) != len(pieces):
        raise run_format.RunFileError(f"{name}: got {len(pieces)} pieces, the buckets sent "
                                     f"{len(order)}")
    return order


# -- Beam steps ---------------------------------------------------------------


class BucketSizesFn(beam.CombineFn):
    """(buckets, rows, bytes, digests, largest row, ratio sample) of a
    split's batches -> (rows per bucket, bytes per bucket, digest per
    bucket, largest row, ratio sample): arrays up to the highest bucket
    holding rows (a split has as many buckets as its hash bucket count or
    key bounds say; rows and bytes int64, digests uint64 added mod 2^64,
    `shuffle_packets.row_digests`), and the sample's rows
    (`ratio_sample.ratio_sample_of`: cut at its limit, which changes
    nothing, so that an accumulator stays small). Only counts cross, and
    for gzip the few rows of the ratio sample."""

    def create_accumulator(self):
        return [*(np.zeros(0, dtype=dtype) for dtype in _COUNT_DTYPES), 0, [], 0]

    def add_input(self, accumulator, element):
        present, rows, nbytes, digests, largest, sample = element
        present = np.frombuffer(present, dtype="<u4").astype(np.intp)
        if len(present):
            _grow(accumulator, int(present.max()) + 1)
        for position, counts in enumerate((rows, nbytes, digests)):
            accumulator[position][present] += np.frombuffer(counts,
                                                            dtype=_COUNT_DTYPES[position])
        accumulator[3] = max(accumulator[3], largest)
        if sample:
            accumulator[4].extend(sample)
            accumulator[5] += sum(len(record) for _, record in sample)
            if accumulator[5] > 2 * RATIO_SAMPLE_LIMIT:
                accumulator[4] = ratio_sample_of(accumulator[4])
                accumulator[5] = sum(len(record) for _, record in accumulator[4])
        return accumulator

    def merge_accumulators(self, accumulators):
        merged = self.create_accumulator()
        for *counts, largest, sample, _ in accumulators:
            _grow(merged, len(counts[0]))
            for position, values in enumerate(counts):
                merged[position][:len(values)] += values
            merged[3] = max(merged[3], largest)
            merged[4].extend(sample)
        merged[4] = ratio_sample_of(merged[4])
        merged[5] = sum(len(record) for _, record in merged[4])
        return merged

    def compact(self, accumulator):
        _trim(accumulator)
        accumulator[4] = ratio_sample_of(accumulator[4])
        accumulator[5] = sum(len(record) for _, record in accumulator[4])
        return accumulator

    def extract_output(self, accumulator):
        _trim(accumulator)
        rows, nbytes, digests, largest, sample, _ = accumulator
        return rows, nbytes, digests, largest, tuple(ratio_sample_of(sample))


# A BucketSizesFn accumulator's per-bucket arrays: rows, bytes, digests
# (uint64: numpy's sums of them wrap, mod 2^64).
_COUNT_DTYPES = (np.int64, np.int64, np.uint64)


def _grow(accumulator: list, count: int) -> None:
    """Makes a BucketSizesFn accumulator's count arrays at least `count`
    long, doubling them at least: key-ordered gzip adds one bucket at a
    time, and ~300,000 of them at 10 TB, which growing by one would copy
    quadratically often."""
    for position, dtype in enumerate(_COUNT_DTYPES):
        length = len(accumulator[position])
        if length < count:
            grown = np.zeros(max(count, 2 * length), dtype=dtype)
            grown[:length] = accumulator[position]
            accumulator[position] = grown


def _trim(accumulator: list) -> None:
    """Cuts a BucketSizesFn accumulator's count arrays after the highest
    bucket holding rows (`_grow` leaves room beyond it)."""
    present = np.flatnonzero(accumulator[0])
    used = int(present[-1]) + 1 if len(present) else 0
    for position in range(len(_COUNT_DTYPES)):
        accumulator[position] = accumulator[position][:used]


def plan_row_cuts(split_sizes, *, shard_size: int, gzip_level: int | None = None,
                  multiple: int = 1):
    """(split, (rows per bucket, bytes per bucket, digest per bucket,
    largest row, ratio sample)) -> for each bucket holding rows, ((split,
    bucket), ("plan", (first byte, bytes, total, shard count, rows,
    digest))); for each shard, ((split,
    shard), ("spec", (shard count, buckets that may hold its rows))).
    With `gzip_level`, the shard count follows the bytes the split is
    estimated to take compressed (its ratio sample compressed as a shard
    is, `bucket_output.gzip_written_size`). multiple: the count is a
    multiple of it (`shard_cuts.row_shard_count`)."""
    split, (rows, nbytes, digests, largest, sample) = split_sizes
    total = int(nbytes.sum())
    written = None
    if gzip_level is not None:
        sample = within_limit(ratio_sample_of(sample))
        written = estimated_written_bytes(total, gzip_written_size(sample, gzip_level),
                                          sum(len(record) for _, record in sample))
    count = row_shard_count(total, shard_size, largest, written, multiple=multiple,
                            split=split)
    thresholds = row_shard_thresholds(total, count)
    starts = np.cumsum(nbytes) - nbytes
    expected: list[list[int]] = [[] for _ in range(count)]
    for bucket in np.flatnonzero(rows).tolist():
        start, size = int(starts[bucket]), int(nbytes[bucket])
        yield ((split, bucket), ("plan", (start, size, total, count, int(rows[bucket]),
                                          int(digests[bucket]))))
        for shard in shards_touched(start, start + size, thresholds):
            expected[shard].append(bucket)
    for shard in range(count):
        yield ((split, shard), ("spec", (count, tuple(expected[shard]))))


class CutBucketFn(BucketSortFn):
    """((split, bucket), [plan, packets...]) -> ((split, shard), ("piece",
    (bucket, number, bytes))) for each piece of the bucket's sorted rows,
    and ((split, shard), ("end", (bucket, (pieces, rows, bytes)))) for each
    shard the plan says the bucket may reach."""

    def __init__(self, tuning):
        self._tuning = tuning

    def process(self, item):
        (split, bucket), _ = item
        tuning = self._tuning

        def make_cutter(out, plan):
            start, _, total, count, *_ = plan
            return ShardCutter(out, start, row_shard_thresholds(total, count))

        with sorted_bucket(item, tuning, make_cutter) as ((start, size, *_), cutter, out):
            sent: dict[int, list[int]] = {}
            out.seek(0)
            for shard, _, length, rows in cutter.segments:
                counts = sent.setdefault(shard, [0, 0, 0])
                counts[1] += rows
                counts[2] += length
                while length:
                    data = out.read(min(length, tuning.route_bytes))
                    if not data:
                        raise run_format.RunFileError(f"split {split!r}, bucket {bucket}: sorted "
                                                     f"rows cut short")
                    length -= len(data)
                    self._exchanged.inc(len(data))
                    yield (split, shard), ("piece", (bucket, counts[0], data))
                    counts[0] += 1
        touched = shards_touched(start, start + size, cutter.thresholds)
        stray = sorted(set(sent) - set(touched))
        if stray:
            raise ValueError(f"split {split!r}, bucket {bucket}: rows for shard {stray[0]}, "
                             f"outside the planned {touched}")
        for shard in touched:
            yield (split, shard), ("end", (bucket, tuple(sent.get(shard, (0, 0, 0)))))


class WriteCutShardFn(ShardFileFn):
    """((split, shard), [spec, pieces, ends...]) -> shard metadata dict
    (gzip: the pieces, framed records, compressed as one gzip member).
    With `compress` False the pieces are already what the shard holds
    (key-ordered gzip output's chunks, each a gzip member) and are copied
    as they are."""

    def __init__(self, *args, compress: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        self._compress = compress

    def process(self, item):
        (split, index), values = item
        spec = None
        ends: dict[int, tuple] = {}
        where: dict[tuple[int, int], tuple[int, int]] = {}
        # Pieces come in any order: they are appended to a spooled file
        # (memory up to memory_bytes, local disk beyond), then copied once
        # in key order.
        with tempfile.SpooledTemporaryFile(max_size=self._memory_bytes) as spool:
            for tag, value in values:
                if tag == "spec":
                    spec = value
                elif tag == "end":
                    ends[value[0]] = value[1]
                elif (value[0], value[1]) not in where:  # delivered twice: the same bytes
                    bucket, number, data = value
                    where[(bucket, number)] = (spool.tell(), len(data))
                    spool.write(data)
            if spec is None:
                raise ValueError(f"split {split!r}, shard {index}: pieces came without a plan")
            count, buckets = spec
            name = self._name(split, index, count)
            order = assemble_shard(name, buckets, ends, where)
            num_examples = sum(ends[bucket][1] for bucket in buckets)
            num_bytes = sum(ends[bucket][2] for bucket in buckets)

            # (a method, not a closure: Beam warns of a process that returns)
            write = functools.partial(self._copy_pieces, spool=spool, order=order,
                                      where=where, name=name, num_bytes=num_bytes,
                                      num_examples=num_examples)
            shard = self._published(split, name, write, num_examples)
        yield shard

    def _copy_pieces(self, out, *, spool, order, where, name: str, num_bytes: int,
                     num_examples: int) -> int:
        """Copies the spooled pieces into `out` in key `order` (gzip: into
        one compressor, unless they are compressed); checks that they are
        the `num_bytes` the buckets sent, before the shard gets its `name`.
        Returns the records written, `num_examples`."""
        sink = (tfrecord.GzipStream(out, self._gzip_level)
                if self._compression == "gzip" and self._compress else out)
        framed = 0
        for key in order:
            position, length = where[key]
            spool.seek(position)
            while length:
                block = spool.read(min(run_format.BLOCK, length))
                sink.write(block)
                framed += len(block)
                length -= len(block)
        if sink is not out:
            sink.close()
        if framed != num_bytes:
            raise run_format.RunFileError(f"{name}: wrote {framed} bytes, the buckets "
                                         f"sent {num_bytes}")
        return num_examples
