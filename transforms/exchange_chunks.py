"""The shuffle exchange's key-ordered steps: lanes and routing, and shards cut at chunks.

Rows wait in lanes for their split's bucket bounds, planned from the
split's sample (`SplitStatsFn`, `merge_split_stats`, `plan_lanes`), then
go to their bucket (`RouteFn`). Plain output goes on as shuffled output
does, its shards cut at rows (`exchange_rows`). Gzip: a bucket is sorted
into chunks (`SortBucketFn`, a `bucket_writers.ChunkWriter`); only their
sizes cross a combine (`exchange_rows.BucketSizesFn`), from which each
bucket learns its first byte on disk and each shard the buckets that may
hold its chunks (`exchange_rows.plan_row_cuts`, as for rows). A chunk
belongs to the shard holding its bytes' midpoint (`shard_plan.plan_shards`
says the same for the file exchange), so each bucket places its own
chunks (`PlaceFn`, `place_chunks`), and each shard is written from its
pieces as a shard cut at rows is (`exchange_rows.WriteCutShardFn`, the
pieces copied as they are). See `exchange` for the whole path.
"""

from __future__ import annotations

import heapq
import tempfile
from typing import Iterable, Iterator

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics

from . import bucket_writers, run_files
from .exchange_packets import (SIZE_DTYPE, bucket_sizes, cut_packet, merge_packets,
                               packet_buckets, sort_bucket_packets)
from .gc_tuning import relax_young_collections
from .malloc_tuning import keep_freed_memory
from .metrics import METRICS_NAMESPACE
from .shard_plan import (plan_bucket_ranges, row_shard_thresholds, shards_of_rows,
                         shards_touched)

__all__ = ["PlaceFn", "RouteFn", "SortBucketFn", "SplitStatsFn", "merge_split_stats",
           "place_chunks", "plan_lanes"]


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


def place_chunks(lengths: np.ndarray, records: np.ndarray, start: int, total: int,
                 count: int) -> tuple[np.ndarray, np.ndarray, dict[int, tuple[int, int, int]]]:
    """Where a bucket's chunks go: their `lengths` and `records` in bucket
    order (int64 arrays), the bucket's first byte on disk in the split
    `start`, the split's `total` bytes and its shard `count`. Gives each
    chunk's shard and piece number (from 0 in each shard), and for each
    shard the bucket may reach (`shard_plan.shards_touched`) the
    ``(pieces, rows, bytes)`` it sends there, as
    `exchange_rows.assemble_shard` checks them. A chunk's shard is the one
    holding its bytes' midpoint, as in `shard_plan.plan_shards`."""
    thresholds = row_shard_thresholds(total, count)
    shards = shards_of_rows(start + np.cumsum(lengths) - lengths, lengths, thresholds)
    touched = shards_touched(start, start + int(lengths.sum()), thresholds)
    if len(shards) and (shards[0] < touched.start or shards[-1] >= touched.stop):
        raise ValueError(f"chunks fall in shards {int(shards[0])}-{int(shards[-1])}, outside "
                         f"the planned {touched}")
    # Chunks come in order, so each shard's are consecutive.
    numbers = np.arange(len(shards)) - np.searchsorted(shards, shards, "left")
    sent = {}
    for shard in touched:
        lo, hi = np.searchsorted(shards, [shard, shard + 1], "left").tolist()
        sent[shard] = (hi - lo, int(records[lo:hi].sum()), int(lengths[lo:hi].sum()))
    return shards, numbers, sent


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
    """((split, bucket), [packet]) -> ("sizes", (split, sizes)) with the
    bucket's chunk sizes as `exchange_rows.BucketSizesFn` counts them (a
    chunk for a row); ("chunk", ((split, bucket), ("layout", (lengths,
    records)))), its chunks' sizes and records (int64 arrays as bytes);
    and ("chunk", ((split, bucket), ("chunk", (offset, bytes)))) per
    chunk, the chunks one after another from offset 0."""

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
            if not chunks:
                return
            lengths = np.array([chunk.length for chunk in chunks], dtype="<i8")
            records = np.array([chunk.num_records for chunk in chunks], dtype="<i8")
            yield ("sizes", (split, (*bucket_sizes(np.full(len(chunks), index), lengths), ())))
            yield ("chunk", ((split, index), ("layout", (lengths.tobytes(), records.tobytes()))))
            out.seek(0)
            for chunk in chunks:
                data = out.read(chunk.length)
                if len(data) != chunk.length:
                    raise run_files.RunFileError(f"bucket {index} of split {split!r}: chunk at "
                                                 f"byte {chunk.offset} cut short")
                self._exchanged.inc(len(data))
                yield ("chunk", ((split, index), ("chunk", (chunk.offset, data))))


class PlaceFn(beam.DoFn):
    """((split, bucket), [plan, layout, chunks...]) -> ((split, shard),
    ("piece", (bucket, number, bytes))) per chunk, and ((split, shard),
    ("end", (bucket, (pieces, rows, bytes)))) for each shard the plan says
    the bucket may reach.

    The values are read twice, as a GroupByKey's values may be: the
    bucket's plan and layout first, then its chunks one at a time, so that
    a bucket of any size (every row of a key shared by most of the data
    lands in one) passes through in one chunk's memory."""

    def setup(self):
        keep_freed_memory()  # buffers are freed and made again all the time
        self._exchanged = Metrics.counter(METRICS_NAMESPACE, "exchange_bytes")

    def process(self, item):
        (split, bucket), values = item
        plan = layout = None
        for tag, value in values:
            if tag == "plan":
                plan = value
            elif tag == "layout":
                layout = value
            if plan is not None and layout is not None:
                break  # the chunks are read once more below: stop as soon as can be
        if plan is None or layout is None:
            raise ValueError(f"split {split!r}, bucket {bucket}: chunks came without the "
                             f"split's plan or the bucket's layout")
        start, size, total, count = plan
        lengths, records = (np.frombuffer(part, dtype="<i8") for part in layout)
        if int(lengths.sum()) != size:
            raise run_files.RunFileError(f"split {split!r}, bucket {bucket}: chunks of "
                                         f"{int(lengths.sum())} bytes, the plan counted {size}")
        shards, numbers, sent = place_chunks(lengths, records, start, total, count)
        offsets = np.cumsum(lengths) - lengths
        placed = np.zeros(len(lengths), dtype=bool)
        for offset, data in _chunks_once(values):
            chunk = int(np.searchsorted(offsets, offset))
            if chunk == len(offsets) or offsets[chunk] != offset or lengths[chunk] != len(data):
                raise run_files.RunFileError(f"split {split!r}, bucket {bucket}: chunk at "
                                             f"byte {offset} is not in the bucket's layout")
            placed[chunk] = True
            self._exchanged.inc(len(data))
            yield (split, int(shards[chunk])), ("piece", (bucket, int(numbers[chunk]), data))
        if not placed.all():
            raise run_files.RunFileError(f"split {split!r}, bucket {bucket}: chunk at byte "
                                         f"{int(offsets[np.argmin(placed)])} is missing")
        for shard, counts in sent.items():
            yield (split, shard), ("end", (bucket, counts))


def _chunks_once(values: Iterable[tuple]) -> Iterator[tuple]:
    """The ``(offset, bytes)`` chunks among a bucket's tagged values, each
    once (a retried step may deliver one twice: the same bytes)."""
    seen: set[int] = set()
    for tag, value in values:
        if tag == "chunk" and value[0] not in seen:
            seen.add(value[0])
            yield value
