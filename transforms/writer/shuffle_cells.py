"""The shuffle exchange's key-ordered steps: lanes and routing, and shards cut at cells.

Rows wait in lanes for their split's bucket bounds, planned from the
split's sample (`SplitStatsFn`, `merge_split_stats`, `plan_lanes`), then
go to their bucket (`RouteFn`), when no bounds were sampled before the
run. Plain output goes on as shuffled output does, its shards cut at rows
(`shuffle_rows`).

Gzip: knowing its first byte in the split, a bucket is sorted into the
split's cells (`SortCellsFn`, a `bucket_output.CellWriter`): the cells
within it are compressed there, the rows of a cell it may share with a
neighbour go to that seam, which compresses them as one cell (`SeamFn`).
Only the chunks' sizes cross a combine (`shuffle_rows.BucketSizesFn`, per
unit: a bucket's interior or a seam), from which each unit learns its
first byte on disk and each shard the units that may hold its chunks
(`shuffle_rows.plan_row_cuts`, as for rows). A chunk belongs to the
shard holding its bytes' midpoint (`shard_cuts.plan_shards` says the same
for the file exchange), so each unit places its own chunks (`PlaceFn`,
`place_chunks`), and each shard is written from its pieces as a shard cut
at rows is (`shuffle_rows.WriteCutShardFn`, the pieces copied as they
are). See `exchange` for the whole path.
"""

from __future__ import annotations

import heapq
import io
from typing import Iterable, Iterator, Sequence

import apache_beam as beam
import numpy as np

from . import bucket_output, run_format
from .bucket_plan import plan_bucket_ranges
from .cells import interior_unit
from .elements import Chunk
from .shard_cuts import row_shard_thresholds, shards_of_rows, shards_touched
from .shuffle_packets import (
    SIZE_DTYPE,
    bucket_sizes,
    cut_packet,
    merge_packets,
    packet_buckets,
    row_digests,
    sorted_bucket,
)
from .shuffle_steps import BucketSortFn
from .step_setup import counter, set_up_worker

__all__ = ["PlaceFn", "RouteFn", "SeamFn", "SortCellsFn", "SplitStatsFn", "merge_split_stats",
           "place_chunks", "plan_lanes"]


# -- plain logic (no Beam) ---------------------------------------------------


def merge_split_stats(parts: Iterable[tuple], sample_size: int) -> tuple:
    """Adds up ``(rows, bytes, sample)`` triples of one split; the sample is
    the `sample_size` highest distinct entries, as `bucket_plan.sample_of`
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
    """Where a unit's chunks go (a bucket's interior cells, or a seam):
    their `lengths` and `records` in key order (int64 arrays), the unit's
    first byte on disk in the split `start`, the split's `total` bytes and
    its shard `count`. Gives each chunk's shard and piece number (from 0 in
    each shard), and for each shard the unit may reach
    (`shard_cuts.shards_touched`) the
    ``(pieces, rows, bytes)`` it sends there, as
    `shuffle_rows.assemble_shard` checks them. A chunk's shard is the one
    holding its bytes' midpoint, as in `shard_cuts.plan_shards`."""
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


def plan_lanes(split_stats, *, tuning, bucket_bytes: int):
    """(split, (rows, bytes, sample)) -> the split's bucket lower bounds
    (buckets of about `bucket_bytes`), once for each lane."""
    split, (_, nbytes, sample) = split_stats
    ranges = plan_bucket_ranges(split, nbytes, sample, bucket_bytes,
                                sample_bytes=tuning.sample_every(),
                                sample_size=tuning.sample_size)
    bounds = tuple(bucket.lo for bucket in ranges)
    return [((split, lane), ("plan", bounds)) for lane in range(tuning.lanes)]


class RouteFn(beam.DoFn):
    """((split, lane), [plan, packets...]) -> ("rows", ((split, bucket),
    ("rows", packet))), and each packet's rows, bytes and row digests per
    bucket and its largest row as ("sizes", (split, (buckets, rows, bytes,
    digests, largest row, ()))): what `shuffle_steps.PackFn` gives when the bounds are known
    before the run.

    A bucket's rows are gathered into packets of about `route_bytes`
    before they go on; when `route_bytes` are held in all, every bucket's
    are sent."""

    def __init__(self, route_bytes: int):
        self._route_bytes = route_bytes

    def setup(self):
        set_up_worker()
        self._exchanged = counter("exchange_bytes")

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
            if len(buckets):
                sizes = np.frombuffer(packet[3], dtype=SIZE_DTYPE).astype(np.int64)
                yield ("sizes", (split, (*bucket_sizes(buckets, sizes,
                                                       row_digests(packet[2], sizes)), ())))
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
        yield ("rows", ((split, bucket), ("rows", packet)))


def _unit_outputs(split: str, unit: int, chunks: Sequence[Chunk], read,
                  exchanged) -> Iterator[tuple]:
    """What a unit of chunks (a bucket's interior, or a seam) sends on:
    ("sizes", (split, sizes)), its chunk count and bytes as
    `shuffle_rows.BucketSizesFn` adds them up (a chunk for a row; no
    digest, 0: `PlaceFn` checks the chunks against the layout);
    ("chunk", ((split, unit), ("layout", (lengths, records)))), its chunks'
    sizes and records (int64 arrays as bytes); and ("chunk", ((split,
    unit), ("chunk", (offset, bytes)))) per chunk, read in order by
    `read(length)` and counted by the `exchanged` counter."""
    lengths = np.array([chunk.length for chunk in chunks], dtype="<i8")
    records = np.array([chunk.num_records for chunk in chunks], dtype="<i8")
    yield ("sizes", (split, (*bucket_sizes(np.full(len(chunks), unit), lengths), ())))
    yield ("chunk", ((split, unit), ("layout", (lengths.tobytes(), records.tobytes()))))
    for chunk in chunks:
        data = read(chunk.length)
        if len(data) != chunk.length:
            raise run_format.RunFileError(f"split {split!r}, unit {unit}: chunk at byte "
                                         f"{chunk.offset} cut short")
        exchanged.inc(len(data))
        yield ("chunk", ((split, unit), ("chunk", (chunk.offset, data))))


class SortCellsFn(BucketSortFn):
    """((split, bucket), [plan, packets...]) -> the bucket's rows sorted
    and cut into the split's cells (`bucket_output.CellWriter`, from the
    bucket's first byte in the split that the plan gives): the cells
    within it, compressed, as unit `cells.interior_unit` (see
    `_unit_outputs`), and for each cell it may share with a neighbour
    ("seam", ((split, cell), (bucket, start, end, total, rows, framed
    records))), its rows there as they are (possibly none)."""

    def __init__(self, cell_bytes: int, gzip_level: int, tuning):
        self._cell_bytes = cell_bytes
        self._gzip_level = gzip_level
        self._tuning = tuning

    def process(self, item):
        (split, bucket), _ = item

        def cell_writer(out, plan):
            start, size, total, *_ = plan
            return bucket_output.CellWriter(out, start=start, size=size, total=total,
                                            cell_bytes=self._cell_bytes,
                                            gzip_level=self._gzip_level)

        with sorted_bucket(item, self._tuning, cell_writer) as ((start, size, total, *_),
                                                                 writer, out):
            chunks = writer.close()
            if chunks:
                out.seek(0)
                yield from _unit_outputs(split, interior_unit(bucket), chunks, out.read,
                                         self._exchanged)
        for cell, (data, rows) in writer.seams.items():
            self._exchanged.inc(len(data))
            yield ("seam", ((split, cell), (bucket, start, start + size, total, rows, data)))


class SeamFn(beam.DoFn):
    """((split, cell), [pieces...]) -> the seam's chunk
    (`bucket_output.join_seam`) as its unit's outputs (see
    `_unit_outputs`); nothing when no bucket had rows there."""

    def __init__(self, cell_bytes: int, gzip_level: int):
        self._cell_bytes = cell_bytes
        self._gzip_level = gzip_level

    def setup(self):
        self._exchanged = counter("exchange_bytes")

    def process(self, item):
        (split, cell), pieces = item
        seam = bucket_output.join_seam(split, cell, self._cell_bytes, pieces, self._gzip_level)
        if seam is not None:
            unit, data, rows = seam
            yield from _unit_outputs(split, unit, [Chunk(0, len(data), rows)],
                                     io.BytesIO(data).read, self._exchanged)


class PlaceFn(beam.DoFn):
    """((split, unit), [plan, layout, chunks...]) -> ((split, shard),
    ("piece", (unit, number, bytes))) per chunk, and ((split, shard),
    ("end", (unit, (pieces, rows, bytes)))) for each shard the plan says
    the unit may reach (a unit: a bucket's interior cells, or a seam).

    The values are read twice, as a GroupByKey's values may be: the
    unit's plan and layout first, then its chunks one at a time, so that
    a bucket of any size (every row of a key shared by most of the data
    lands in one) passes through in one chunk's memory."""

    def setup(self):
        set_up_worker()
        self._exchanged = counter("exchange_bytes")

    def process(self, item):
        (split, unit), values = item
        plan = layout = None
        for tag, value in values:
            if tag == "plan":
                plan = value
            elif tag == "layout":
                layout = value
            if plan is not None and layout is not None:
                break  # the chunks are read once more below: stop as soon as can be
        if plan is None or layout is None:
            raise ValueError(f"split {split!r}, unit {unit}: chunks came without the "
                             f"split's plan or the unit's layout")
        start, size, total, count, *_ = plan
        lengths, records = (np.frombuffer(part, dtype="<i8") for part in layout)
        if int(lengths.sum()) != size:
            raise run_format.RunFileError(f"split {split!r}, unit {unit}: chunks of "
                                         f"{int(lengths.sum())} bytes, the plan counted {size}")
        shards, numbers, sent = place_chunks(lengths, records, start, total, count)
        offsets = np.cumsum(lengths) - lengths
        placed = np.zeros(len(lengths), dtype=bool)
        for offset, data in _chunks_once(values):
            chunk = int(np.searchsorted(offsets, offset))
            if chunk == len(offsets) or offsets[chunk] != offset or lengths[chunk] != len(data):
                raise run_format.RunFileError(f"split {split!r}, unit {unit}: chunk at "
                                             f"byte {offset} is not in the unit's layout")
            placed[chunk] = True
            self._exchanged.inc(len(data))
            yield (split, int(shards[chunk])), ("piece", (unit, int(numbers[chunk]), data))
        if not placed.all():
            raise run_format.RunFileError(f"split {split!r}, unit {unit}: chunk at byte "
                                         f"{int(offsets[np.argmin(placed)])} is missing")
        for shard, counts in sent.items():
            yield (split, shard), ("end", (unit, counts))


def _chunks_once(values: Iterable[tuple]) -> Iterator[tuple]:
    """The ``(offset, bytes)`` chunks among a unit's tagged values, each
    once (a retried step may deliver one twice: the same bytes)."""
    seen: set[int] = set()
    for tag, value in values:
        if tag == "chunk" and value[0] not in seen:
            seen.add(value[0])
            yield value
