"""The shuffle exchange's key-ordered steps: lanes and routing, and shards cut at chunks.

Rows wait in lanes for their split's bucket bounds, planned from the
split's sample (`SplitStatsFn`, `merge_split_stats`, `plan_lanes`), then
go to their bucket (`RouteFn`). Plain output goes on as shuffled output
does, its shards cut at rows (`exchange_rows`). Gzip: a bucket is sorted
into chunks (`SortBucketFn`, a `bucket_writers.ChunkWriter`), the split's shards are
planned from the chunks' sizes (`plan_split_shards`,
`shard_plan.plan_shards`), each chunk is sent to its place in its shard
(`PlaceFn`, `place_chunks`), and each shard is written from its pieces
(`WriteShardFn`). See `exchange` for the whole path.
"""

from __future__ import annotations

import bisect
import functools
import heapq
import tempfile
from typing import Iterable, Iterator, Sequence

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics

from . import bucket_writers, run_files
from .exchange_packets import (SIZE_DTYPE, bucket_sizes, cut_packet, merge_packets,
                               packet_buckets, sort_bucket_packets)
from .exchange_steps import ShardFileFn
from .gc_tuning import relax_young_collections
from .malloc_tuning import keep_freed_memory
from .metrics import METRICS_NAMESPACE
from .shard_plan import BucketChunks, plan_bucket_ranges, plan_shards

__all__ = ["PlaceFn", "RouteFn", "SortBucketFn", "SplitStatsFn", "WriteShardFn",
           "merge_split_stats", "place_chunks", "plan_lanes", "plan_split_shards"]


# -- plain logic (no Beam) ---------------------------------------------------


def merge_split_stats(parts: Iterable[tuple], sample_size: int) -> tuple:
    """Adds up ``(rows, bytes, sample)`` triples of one split; the sample is
    the `sample_size` highest distinct entries, as `shard_plan.sample_of`
    keeps them (a set: an entry seen twice counts once)."""
    rows = nbytes = 0
    entries: set = set()
    for part_rows, part_bytes, sample in parts:
        rows += part_rows
        nbytes += part_bytes
        entries.update(sample)
        if len(entries) > 2 * sample_size:
            entries = set(heapq.nlargest(sample_size, entries))
    return rows, nbytes, tuple(heapq.nlargest(sample_size, entries))


def place_chunks(places: Sequence[tuple], chunks: Iterable[tuple]):
    """Yields ``(shard index, offset in the shard, chunk bytes)`` for a
    bucket's chunks ``(offset in the bucket, bytes)``, given its places
    ``(offset in the bucket, length, shard index, offset in the shard)``
    from the split's shard plan. Every chunk lies within one place."""
    places = sorted(places)
    starts = [place[0] for place in places]
    for offset, data in chunks:
        position = bisect.bisect_right(starts, offset) - 1
        if position < 0:
            raise ValueError(f"chunk at byte {offset} is before the first planned piece")
        start, length, shard, shard_offset = places[position]
        if offset + len(data) > start + length:
            raise ValueError(f"chunk at byte {offset} ({len(data)} bytes) overruns its planned "
                             f"piece [{start}, {start + length})")
        yield shard, shard_offset + offset - start, data


# -- Beam steps ---------------------------------------------------------------


class SplitStatsFn(beam.CombineFn):
    """(rows, bytes, sample) of a split's batches, added up; the sample cut
    to the highest sample_size distinct entries. The accumulator is a
    mutable ``[rows, bytes, set]``, cut only when it holds twice the sample,
    so that adding a batch costs its own entries, not the whole sample."""

    def __init__(self, sample_size: int):
        self._sample_size = sample_size

    def create_accumulator(self):
        return [0, 0, set()]

    def add_input(self, accumulator, element):
        rows, nbytes, sample = element
        accumulator[0] += rows
        accumulator[1] += nbytes
        accumulator[2].update(sample)
        self._cut(accumulator)
        return accumulator

    def merge_accumulators(self, accumulators):
        merged = self.create_accumulator()
        for rows, nbytes, sample in accumulators:
            merged[0] += rows
            merged[1] += nbytes
            merged[2] |= sample
            self._cut(merged)
        return merged

    def _cut(self, accumulator) -> None:
        if len(accumulator[2]) > 2 * self._sample_size:
            accumulator[2] = set(heapq.nlargest(self._sample_size, accumulator[2]))

    def extract_output(self, accumulator):
        return merge_split_stats([(accumulator[0], accumulator[1], accumulator[2])],
                                 self._sample_size)


def plan_lanes(split_stats, *, tuning):
    """(split, (rows, bytes, sample)) -> the split's bucket lower bounds,
    once for each lane."""
    split, (_, nbytes, sample) = split_stats
    ranges = plan_bucket_ranges(split, nbytes, sample, tuning.bucket_bytes,
                                sample_bytes=tuning.sample_every(),
                                sample_size=tuning.sample_size)
    bounds = tuple(bucket.lo for bucket in ranges)
    return [((split, lane), ("plan", bounds)) for lane in range(tuning.lanes)]


class RouteFn(beam.DoFn):
    """((split, lane), [plan, packets...]) -> ((split, bucket), packet).

    A bucket's rows are gathered into packets of about `route_bytes`
    before they go on; when `route_bytes` are held in all, every bucket's
    are sent. With `counts` (key-ordered plain output, whose shards are
    cut at rows), the packets go on as ("rows", ((split, bucket), ("rows",
    packet))), and each packet's rows and bytes per bucket and its largest
    row as ("sizes", (split, (buckets, rows, bytes, largest row, ()))), as
    `exchange_steps.PackFn` gives them for `exchange_rows.BucketSizesFn`."""

    def __init__(self, route_bytes: int, counts: bool = False):
        self._route_bytes = route_bytes
        self._counts = counts

    def setup(self):
        keep_freed_memory()  # buffers are freed and made again all the time
        self._exchanged = Metrics.counter(METRICS_NAMESPACE, "exchange_bytes")

    def process(self, item):
        (split, lane), values = item
        bounds = next((value for tag, value in values if tag == "plan"), None)
        if bounds is None:
            if any(tag == "rows" for tag, _ in values):
                raise ValueError(f"split {split!r}, lane {lane}: rows came without the "
                                 f"split's bucket plan")
            return
        held: dict[int, list] = {}
        held_bytes: dict[int, int] = {}
        total = 0
        for tag, packet in values:
            if tag != "rows":
                continue
            buckets = packet_buckets(packet, bounds)
            if self._counts and len(buckets):
                sizes = np.frombuffer(packet[3], dtype=SIZE_DTYPE).astype(np.int64)
                yield ("sizes", (split, (*bucket_sizes(buckets, sizes), ())))
            for bucket, piece in cut_packet(packet, buckets):
                held.setdefault(bucket, []).append(piece)
                held_bytes[bucket] = held_bytes.get(bucket, 0) + len(piece[2])
                total += len(piece[2])
                if held_bytes[bucket] >= self._route_bytes:
                    total -= held_bytes.pop(bucket)
                    yield from self._send(split, bucket, held.pop(bucket))
                if total >= self._route_bytes * 8:
                    for waiting in sorted(held):
                        yield from self._send(split, waiting, held[waiting])
                    held, held_bytes, total = {}, {}, 0
        for waiting in sorted(held):
            yield from self._send(split, waiting, held[waiting])

    def _send(self, split, bucket, pieces):
        packet = merge_packets(pieces)
        self._exchanged.inc(len(packet[2]))
        if self._counts:
            yield ("rows", ((split, bucket), ("rows", packet)))
        else:
            yield (split, bucket), packet


class SortBucketFn(beam.DoFn):
    """((split, bucket), [packet]) -> ("meta", (split, BucketChunks)) and
    ("chunk", ((split, bucket), ("chunk", (offset, bytes)))) per chunk."""

    def __init__(self, compression: str, chunk_bytes: int, gzip_level: int, tuning):
        self._compression = compression
        self._chunk_bytes = chunk_bytes
        self._gzip_level = gzip_level
        self._tuning = tuning

    def setup(self):
        relax_young_collections()
        keep_freed_memory()  # buffers are freed and made again all the time
        self._exchanged = Metrics.counter(METRICS_NAMESPACE, "exchange_bytes")

    def process(self, item):
        (split, index), packets = item
        tuning = self._tuning
        with tempfile.SpooledTemporaryFile(max_size=tuning.memory_bytes) as out:
            writer = bucket_writers.ChunkWriter(out, compression=self._compression,
                                                chunk_bytes=self._chunk_bytes,
                                                gzip_level=self._gzip_level)
            sort_bucket_packets(packets, writer, memory_bytes=tuning.memory_bytes,
                                fan_in=tuning.fan_in, prefix_len=tuning.prefix_len,
                                index_every=tuning.index_every)
            chunks = writer.close()
            yield ("meta", (split, BucketChunks(split, index, str(index), tuple(chunks))))
            out.seek(0)
            for chunk in chunks:
                data = out.read(chunk.length)
                if len(data) != chunk.length:
                    raise run_files.RunFileError(f"bucket {index} of split {split!r}: chunk at "
                                                 f"byte {chunk.offset} cut short")
                self._exchanged.inc(len(data))
                yield ("chunk", ((split, index), ("chunk", (chunk.offset, data))))


def plan_split_shards(split_buckets, *, shard_size: int):
    """(split, [BucketChunks]) -> each shard's counts, keyed (split, shard),
    and each bucket's places in the shards, keyed (split, bucket)."""
    split, buckets = split_buckets
    for spec in plan_shards(split, list(buckets), shard_size):
        yield ((split, spec.index), ("spec", (spec.count, spec.num_examples, spec.num_bytes)))
        shard_offset = 0
        for bucket, offset, length in spec.pieces:
            yield ((split, int(bucket)), ("place", (offset, length, spec.index, shard_offset)))
            shard_offset += length


class PlaceFn(beam.DoFn):
    """((split, bucket), [places and chunks]) -> ((split, shard), ("piece",
    (offset in the shard, bytes))).

    The values are read twice, as a GroupByKey's values may be: the
    bucket's few places first, then its chunks one at a time, so that a
    bucket of any size (every row of a key shared by most of the data
    lands in one) passes through in one chunk's memory."""

    def setup(self):
        keep_freed_memory()  # buffers are freed and made again all the time
        self._exchanged = Metrics.counter(METRICS_NAMESPACE, "exchange_bytes")

    def process(self, item):
        (split, bucket), values = item
        places = [value for tag, value in values if tag == "place"]
        for shard, offset, data in place_chunks(places, _chunks_once(values)):
            self._exchanged.inc(len(data))
            yield (split, shard), ("piece", (offset, data))


def _chunks_once(values: Iterable[tuple]) -> Iterator[tuple]:
    """The ``(offset, bytes)`` chunks among a bucket's tagged values, each
    once (a retried step may deliver one twice: the same bytes)."""
    seen: set[int] = set()
    for tag, value in values:
        if tag == "chunk" and value[0] not in seen:
            seen.add(value[0])
            yield value


class WriteShardFn(ShardFileFn):
    """((split, shard), [spec, pieces...]) -> shard metadata dict."""

    def process(self, item):
        (split, index), values = item
        spec = None
        placed: dict[int, int] = {}
        name = None
        # Pieces come in any order: they are put in place in a spooled file
        # (memory up to memory_bytes, local disk beyond), then copied once.
        with tempfile.SpooledTemporaryFile(max_size=self._memory_bytes) as spool:
            for tag, value in values:
                if tag == "spec":
                    spec = value
                    continue
                offset, data = value
                if offset in placed:
                    continue  # delivered twice: the same bytes
                spool.seek(offset)
                spool.write(data)
                placed[offset] = len(data)
            if spec is None:
                raise ValueError(f"split {split!r}, shard {index}: pieces came without a plan")
            count, num_examples, num_bytes = spec
            name = self._name(split, index, count)
            position = 0
            for offset in sorted(placed):
                if offset != position:
                    raise run_files.RunFileError(f"{name}: no piece at byte {position}")
                position += placed[offset]
            if position != num_bytes:
                raise run_files.RunFileError(f"{name}: assembled {position} bytes, planned "
                                             f"{num_bytes}")

            # (a function, not a closure: Beam warns of a process that returns)
            write = functools.partial(_copy_spool, spool, num_examples)
            yield self._published(split, name, write, num_examples)


def _copy_spool(spool, num_examples: int, out) -> int:
    """Copies a shard's assembled bytes from `spool` into `out`; the
    shard's records, `num_examples`."""
    spool.seek(0)
    while block := spool.read(run_files.BLOCK):
        out.write(block)
    return num_examples
