"""The shard writer's shuffle exchange: rows move between workers through the
runner's own GroupByKey, never through files on the output store.

`ShuffleExchange` takes ExampleBatches and gives ShardSpec-like shard
metadata dicts, with the shards written once, under their final names in
`staging_dir`. It writes the same bytes as the file exchange of
`shards.py` (same split, order key, bucket sort, shard cuts, all from
`shard_plan`). There are two ways through it.

Shuffled plain output (the default config), shards cut at rows
(`shard_plan.cuts_at_rows`)::

  ExampleBatch
  | Pack               -> ("sizes", (split, (buckets, rows, bytes, largest row)))
                          ("rows", ((split, bucket), ("rows", packet)))
                          a batch's rows of one split, framed once (CRCs),
                          cut by bucket: `hash_buckets` equal ranges of
                          the digest order, known as soon as a row is hashed
  | BucketSizes (CombinePerKey) | PlanCuts
                       -> ((split, bucket), ("plan", (first byte, bytes, total, shards)))
                          ((split, shard), ("spec", (shards, buckets it may get)))
  | GroupBuckets (Flatten + GroupByKey) | SortBuckets
                       -> ((split, shard), ("piece", (bucket, number, bytes)))
                          ((split, shard), ("end", (bucket, (pieces, rows, bytes))))
                          each bucket sorted in memory up to memory_bytes,
                          above it in sorted runs on the worker's local disk,
                          every row sent to the shard holding its bytes'
                          midpoint in the split
  | JoinShards (Flatten + GroupByKey) | WriteShardFiles  -> metadata dict

Rows cross the runner's shuffle once (to their bucket) and again as the
bytes of the shard they land in: with the shard written once, 3 bytes
moved per dataset byte. Only counts cross the combine.

Everything else (gzip, whose cuts need every compressed chunk's size;
key-ordered output, whose bucket bounds come from a sample), shards cut
at chunks::

  ExampleBatch
  | Pack               -> ("stats", (split, (rows, bytes, sample)))
                          ("rows", ((split, lane), ("rows", packet)))
  | SplitStats (CombinePerKey) | PlanBuckets
                       -> ((split, lane), ("plan", bucket lower bounds))
                          for each of the split's `lanes` lanes
  | JoinPlan (Flatten + GroupByKey)   -> ((split, lane), [plan, packets...])
  | Route              -> ((split, bucket), packet)     rows cut by bucket
  | GroupBuckets | SortBuckets
                       -> ("meta", (split, BucketChunks))
                          ("chunk", ((split, bucket), ("chunk", (offset, bytes))))
  | GroupSplitChunks | PlanShards   -> ((split, bucket), ("place", piece))
                                       ((split, shard), ("spec", counts))
  | JoinPlaces (Flatten + GroupByKey) | Place
                       -> ((split, shard), ("piece", (offset, bytes)))
  | JoinShards (Flatten + GroupByKey) | WriteShardFiles  -> metadata dict

Here rows cross twice (keyed by a lane, where they wait for the split's
sampled bucket bounds, then by bucket) and chunks twice (waiting for the
shard plan, then to their shard): (2 + 3c) bytes moved per dataset byte,
c the compression ratio.

A packet is a plain tuple ``(key_width, keys, framed records, sizes)``:
key_width HASH_SIZE with keys the concatenated digests, KEY_VARIABLE with
a tuple of keys, KEY_IS_EXAMPLE with keys None (a row's key is its
example). Plain tuples of bytes and ints cross Beam's coders without
pickling.

Why it is built this way:

- Joins are a Flatten and a GroupByKey rather than side inputs, which
  Beam's Dask runner computes again for every bundle.
- Nothing is written on the output store but the shards, each once. On
  a local filesystem a shard is written under a temporary name in
  `shard_temp_dir` and renamed; on an object store (whose objects appear
  only when complete) it is written at its final name; elsewhere it is
  moved from its temporary name.
- Memory: one packet (a batch) per Pack call; at most memory_bytes of a
  bucket, the rest in sorted runs under the worker's local temporary
  directory (`tempfile`), merged as streams; a bucket's sorted rows and a
  shard's pieces in spooled temporary files (memory up to memory_bytes,
  local disk beyond).
- Retries: every step is a function of its input; a retried shard is
  rewritten with the same bytes under the same name.
"""

from __future__ import annotations

import bisect
import heapq
import os
import shutil
import tempfile
import uuid
from typing import BinaryIO, Iterable, Sequence

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics

from . import bucket_sort, bucket_writers, row_order, run_files, tfrecordio
from .gc_tuning import relax_young_collections
from .layout import SHARD_FILE_NAME
from .metrics import METRICS_NAMESPACE
from .shard_files import publish_shard, shard_metadata
from .spill import ROW_OVERHEAD
from .shard_plan import (
    HASH_SIZE,
    BucketChunks,
    RunInfo,
    SplitAssigner,
    cuts_at_rows,
    hash_buckets_of,
    plan_bucket_ranges,
    plan_shards,
    prepare_batch,
    row_shard_count,
    row_shard_thresholds,
    shards_of_rows,
    shards_touched,
)

__all__ = ["METRICS_NAMESPACE", "ShardCutter", "ShuffleExchange", "assemble_shard",
           "bucket_of_keys", "cut_packet", "merge_split_stats", "place_chunks",
           "sort_bucket_packets"]


_SIZE = np.dtype("<u4")
# Filesystems on which a written object appears only once complete (a PUT,
# or a multipart upload's completion): a shard is written at its final name.
_ATOMIC_PROTOCOLS = frozenset({"s3", "s3a", "gs", "gcs", "abfs", "az", "abfss"})


def _tag(kind: str):
    return lambda value: (kind, value)


def _is(kind: str):
    return lambda item: item[0] == kind


def _untag(item):
    return item[1]


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


def bucket_of_keys(lower_bounds: Sequence[bytes], key_width: int, keys) -> np.ndarray:
    """The bucket of each row: the last bucket whose lower bound is at or
    below the row's key (bounds sorted, the first b""). keys: concatenated
    fixed-width keys (key_width > 0) or a sequence of bytes."""
    if key_width > 0:
        # Bounds are key prefixes; padded with zero bytes they compare with
        # fixed-width keys as the bytes do (see run_files._bound).
        bounds = np.array([bound[:key_width].ljust(key_width, b"\0")
                           for bound in lower_bounds], dtype=f"S{key_width}")
        array = np.frombuffer(keys, dtype=f"S{key_width}")
        return np.searchsorted(bounds, array, "right").astype(np.int64) - 1
    bounds = list(lower_bounds)
    return np.fromiter((bisect.bisect_right(bounds, key) - 1 for key in keys),
                       dtype=np.int64, count=len(keys))


def _packet_rows(packet) -> tuple[int, object, memoryview, np.ndarray]:
    key_width, keys, data, raw_sizes = packet
    return key_width, keys, memoryview(data), np.frombuffer(raw_sizes, dtype=_SIZE).astype(
        np.int64)


def _examples_of(data: memoryview, sizes: np.ndarray) -> list[bytes]:
    return run_files.RunSlice(None, data, sizes).examples()


def split_packet(packet, lower_bounds: Sequence[bytes]) -> list[tuple[int, tuple]]:
    """Cuts a packet into one packet per bucket its rows fall in:
    ``[(bucket, packet), ...]``."""
    key_width, keys, data, sizes = _packet_rows(packet)
    if not len(sizes):
        return []
    if len(lower_bounds) == 1:
        return [(0, packet)]
    route_keys = keys if key_width != run_files.KEY_IS_EXAMPLE else _examples_of(data, sizes)
    return cut_packet(packet, bucket_of_keys(lower_bounds, key_width, route_keys))


def cut_packet(packet, buckets: np.ndarray) -> list[tuple[int, tuple]]:
    """Cuts a packet into one packet per bucket, given each row's bucket:
    ``[(bucket, packet), ...]`` in bucket order, rows in packet order."""
    key_width, keys, data, sizes = _packet_rows(packet)
    if not len(sizes):
        return []
    order = np.argsort(buckets, kind="stable")
    ordered = buckets[order]
    edges = np.flatnonzero(np.diff(ordered)) + 1
    starts = np.cumsum(sizes) - sizes
    pieces = []
    for first, last in zip([0, *edges.tolist()], [*edges.tolist(), len(order)]):
        rows = order[first:last]
        row_sizes = sizes[rows]
        if last - first == len(sizes):
            pieces.append((int(ordered[first]), packet))
            break
        row_starts = starts[rows].tolist()
        blob = b"".join([data[start:start + size] for start, size in
                         zip(row_starts, row_sizes.tolist())])
        if key_width > 0:
            part_keys = b"".join([keys[row * key_width:(row + 1) * key_width]
                                  for row in rows.tolist()])
        elif key_width == run_files.KEY_VARIABLE:
            part_keys = tuple(row_order.take(keys, rows.tolist()))
        else:
            part_keys = None
        pieces.append((int(ordered[first]),
                       (key_width, part_keys, blob, row_sizes.astype(_SIZE).tobytes())))
    return pieces


def _merge_packets(packets: list[tuple]) -> tuple:
    """One packet holding the rows of several (same key kind, else keys
    spelled out as bytes)."""
    if len(packets) == 1:
        return packets[0]
    widths = {packet[0] for packet in packets}
    width = widths.pop() if len(widths) == 1 else run_files.KEY_VARIABLE
    data = b"".join(packet[2] for packet in packets)
    sizes = b"".join(packet[3] for packet in packets)
    if width > 0:
        keys = b"".join(packet[1] for packet in packets)
    elif width == run_files.KEY_IS_EXAMPLE:
        keys = None
    else:
        keys = tuple(key for packet in packets for key in _keys_as_bytes(packet))
    return width, keys, data, sizes


def _keys_as_bytes(packet) -> list[bytes]:
    key_width, keys, data, sizes = _packet_rows(packet)
    if key_width > 0:
        return [keys[start:start + key_width] for start in range(0, len(keys), key_width)]
    if key_width == run_files.KEY_IS_EXAMPLE:
        return _examples_of(data, sizes)
    return list(keys)


def _write_sorted(writer, packets: list[tuple]) -> None:
    """Gives `writer` (a bucket_writers.ChunkWriter) the rows of `packets` ordered by
    ``(key, example)``, as `bucket_sort` orders a bucket, a block at a time."""
    packets = [packet for packet in packets if packet[3]]
    if not packets:
        return
    merged = _merge_packets(packets)
    key_width, keys, data, sizes = _packet_rows(merged)
    starts = np.cumsum(sizes) - sizes

    def example_at(row: int) -> bytes:
        start = int(starts[row])
        return bytes(data[start + run_files.RECORD_HEADER:start + int(sizes[row]) - 4])

    if key_width > 0:
        order_keys = np.frombuffer(keys, dtype=f"S{key_width}")
    else:
        order_keys = _keys_as_bytes(merged)
    order = np.asarray(row_order.sorted_order(order_keys, example_at), dtype=np.int64)
    del order_keys
    step = max(1, len(order) * run_files.BLOCK // max(1, int(sizes.sum())))
    for first in range(0, len(order), step):
        rows = order[first:first + step]
        row_sizes = sizes[rows]
        row_starts = starts[rows].tolist()
        block = b"".join([data[start:start + size] for start, size in
                          zip(row_starts, row_sizes.tolist())])
        writer.write_framed(block, row_sizes)


def _spill_run(directory: str, packets: list[tuple], *, prefix_len: int,
               index_every: int) -> RunInfo:
    """Sorts packets into a run file on local disk (the `run_files` format)."""
    merged = _merge_packets([packet for packet in packets if packet[3]])
    key_width, keys, data, sizes = _packet_rows(merged)
    examples = _examples_of(data, sizes)
    if key_width > 0:
        key_list = [keys[start:start + key_width] for start in range(0, len(keys), key_width)]
    elif key_width == run_files.KEY_VARIABLE:
        key_list = list(keys)
    else:
        key_list = None
    path = os.path.join(directory, f"{uuid.uuid4().hex}.run")
    with open(path, "wb") as fileobj:
        count = run_files.write_sorted_run(fileobj, key_list, examples, key_width=key_width,
                                           prefix_len=prefix_len, index_every=index_every)
    return RunInfo("", path, count, int(sizes.sum()))


def sort_bucket_packets(packets: Iterable[tuple], writer, *, memory_bytes: int, fan_in: int,
                        prefix_len: int, index_every: int) -> None:
    """Sorts a bucket's packets into `writer` (a bucket_writers.ChunkWriter).

    Up to `memory_bytes` (record bytes plus a per-row allowance) are held
    in memory; above it, each `memory_bytes` is sorted into a run file in a
    temporary directory of the worker's local disk (removed at the end),
    and the runs are merged as streams (`bucket_sort.merge_runs`)."""
    held: list[tuple] = []
    held_bytes = 0
    runs: list[RunInfo] = []
    scratch = None
    try:
        for packet in packets:
            held.append(packet)
            held_bytes += len(packet[2]) + len(packet[3]) // 4 * ROW_OVERHEAD
            if held_bytes > memory_bytes:
                if scratch is None:
                    scratch = tempfile.mkdtemp(prefix="recordforge-sort-")
                runs.append(_spill_run(scratch, held, prefix_len=prefix_len,
                                       index_every=index_every))
                held, held_bytes = [], 0
        if not runs:
            _write_sorted(writer, held)
            return
        if any(packet[3] for packet in held):
            runs.append(_spill_run(scratch, held, prefix_len=prefix_len,
                                   index_every=index_every))
        held = []
        bucket_sort.merge_runs(writer, runs, scratch_dir=scratch, memory_bytes=0, fan_in=fan_in,
                               prefix_len=prefix_len, index_every=index_every)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


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


class ShardCutter:
    """Takes a sorted bucket's framed records in order (like a
    bucket_writers.ChunkWriter) and writes them to `out`, noting which shard each
    run of records belongs to: records are placed by their bytes' midpoint
    in the split (`shard_plan.shards_of_rows`), from the bucket's first
    byte `start` in the split. `segments` lists ``[shard, offset in out,
    length, rows]`` in order."""

    writes_bytes = True

    def __init__(self, out: BinaryIO, start: int, thresholds: np.ndarray):
        self._out = out
        self._thresholds = thresholds
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
        shards = shards_of_rows(self.offset + ends - sizes, sizes, self._thresholds)
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
        raise run_files.RunFileError(f"{name}: bucket {missing[0]} did not report its rows")
    extra = sorted(set(ends) - set(buckets))
    if extra:
        raise run_files.RunFileError(f"{name}: bucket {extra[0]} sent rows the plan did not "
                                     f"place in this shard")
    order = []
    for bucket in sorted(buckets):
        count = ends[bucket][0]
        for number in range(count):
            if (bucket, number) not in pieces:
                raise run_files.RunFileError(f"{name}: piece {number} of bucket {bucket} is "
                                             f"missing")
            order.append((bucket, number))
    if len(order) != len(pieces):
        raise run_files.RunFileError(f"{name}: got {len(pieces)} pieces, the buckets sent "
                                     f"{len(order)}")
    return order


# -- Beam steps ---------------------------------------------------------------


class _PackFn(beam.DoFn):
    """ExampleBatch -> per split in the batch: ("stats", (split, (rows,
    bytes, sample))) and ("rows", ((split, lane), ("rows", packet))); or,
    with `hash_buckets` (shards cut at rows), ("sizes", (split, (buckets,
    rows, bytes, largest row))) and ("rows", ((split, bucket), ("rows",
    packet))) per bucket the batch's rows fall in."""

    def __init__(self, dataset_name: str, splits, shuffle: bool, tuning,
                 hash_buckets: int | None = None):
        self._dataset_name = dataset_name
        self._splits = tuple(splits)
        self._shuffle = shuffle
        self._tuning = tuning
        self._hash_buckets = hash_buckets

    def setup(self):
        relax_young_collections()  # a batch's rows should die young
        self._assigner = SplitAssigner(self._dataset_name, self._splits)
        self._rows = Metrics.counter(METRICS_NAMESPACE, "rows_spilled")
        self._exchanged = Metrics.counter(METRICS_NAMESPACE, "exchange_bytes")
        self._lane = int.from_bytes(os.urandom(4), "little")

    def process(self, batch):
        prepared = prepare_batch(self._assigner, batch, shuffle=self._shuffle,
                                 sample_every=self._tuning.sample_every(),
                                 prefix_len=self._tuning.prefix_len)
        if prepared is None:
            return
        names = self._assigner.names
        for split, rows, selected in prepared.by_split():
            examples = row_order.take(prepared.examples, selected)
            sizes = prepared.sizes[rows]
            if self._shuffle:
                width = HASH_SIZE
                keys = b"".join(row_order.take(prepared.order_keys, selected))
            elif prepared.keyed:
                width = run_files.KEY_VARIABLE
                keys = tuple(row_order.take(prepared.order_keys, selected))
            else:
                width, keys = run_files.KEY_IS_EXAMPLE, None
            data = tfrecordio.frame_records(examples)
            packet = (width, keys, data, sizes.astype(_SIZE).tobytes())
            self._exchanged.inc(len(data))
            if self._hash_buckets:
                yield from self._by_bucket(names[split], packet, sizes)
                continue
            # Lanes only spread the waiting rows over workers: any lane will
            # do, and none changes the output.
            self._lane += 1
            yield ("rows", ((names[split], self._lane % self._tuning.lanes), ("rows", packet)))
            yield ("stats", (names[split], (len(selected), int(sizes.sum()),
                                            tuple(prepared.samples.get(split, ())))))
        self._rows.inc(len(prepared.examples))

    def _by_bucket(self, split: str, packet: tuple, sizes: np.ndarray):
        buckets = hash_buckets_of(packet[1], self._hash_buckets)
        for bucket, piece in cut_packet(packet, buckets):
            yield ("rows", ((split, bucket), ("rows", piece)))
        present, inverse = np.unique(buckets, return_inverse=True)
        rows = np.bincount(inverse).astype("<i8")
        nbytes = np.zeros(len(present), dtype="<i8")
        np.add.at(nbytes, inverse, sizes)
        yield ("sizes", (split, (present.astype("<u4").tobytes(), rows.tobytes(),
                                 nbytes.tobytes(), int(sizes.max()))))


class _SplitStatsFn(beam.CombineFn):
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


def _plan_lanes(split_stats, *, tuning):
    """(split, (rows, bytes, sample)) -> the split's bucket lower bounds,
    once for each lane."""
    split, (_, nbytes, sample) = split_stats
    ranges = plan_bucket_ranges(split, nbytes, sample, tuning.bucket_bytes,
                                sample_bytes=tuning.sample_every(),
                                sample_size=tuning.sample_size)
    bounds = tuple(bucket.lo for bucket in ranges)
    return [((split, lane), ("plan", bounds)) for lane in range(tuning.lanes)]


class _RouteFn(beam.DoFn):
    """((split, lane), [plan, packets...]) -> ((split, bucket), packet).

    A bucket's rows are gathered into packets of about `route_bytes`
    before they go on; when `route_bytes` are held in all, every bucket's
    are sent."""

    def __init__(self, route_bytes: int):
        self._route_bytes = route_bytes

    def setup(self):
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
            for bucket, piece in split_packet(packet, bounds):
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
        packet = _merge_packets(pieces)
        self._exchanged.inc(len(packet[2]))
        yield (split, bucket), packet


class _SortBucketFn(beam.DoFn):
    """((split, bucket), [packet]) -> ("meta", (split, BucketChunks)) and
    ("chunk", ((split, bucket), ("chunk", (offset, bytes)))) per chunk."""

    def __init__(self, compression: str, chunk_bytes: int, gzip_level: int, tuning):
        self._compression = compression
        self._chunk_bytes = chunk_bytes
        self._gzip_level = gzip_level
        self._tuning = tuning

    def setup(self):
        relax_young_collections()
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


def _plan_split_shards(split_buckets, *, shard_size: int):
    """(split, [BucketChunks]) -> each shard's counts, keyed (split, shard),
    and each bucket's places in the shards, keyed (split, bucket)."""
    split, buckets = split_buckets
    for spec in plan_shards(split, list(buckets), shard_size):
        yield ((split, spec.index), ("spec", (spec.count, spec.num_examples, spec.num_bytes)))
        shard_offset = 0
        for bucket, offset, length in spec.pieces:
            yield ((split, int(bucket)), ("place", (offset, length, spec.index, shard_offset)))
            shard_offset += length


class _PlaceFn(beam.DoFn):
    """((split, bucket), [places and chunks]) -> ((split, shard), ("piece",
    (offset in the shard, bytes)))."""

    def setup(self):
        self._exchanged = Metrics.counter(METRICS_NAMESPACE, "exchange_bytes")

    def process(self, item):
        (split, bucket), values = item
        places = [value for tag, value in values if tag == "place"]
        chunks = {value[0]: value[1] for tag, value in values if tag == "chunk"}
        for shard, offset, data in place_chunks(places, sorted(chunks.items())):
            self._exchanged.inc(len(data))
            yield (split, shard), ("piece", (offset, data))


class _ShardFileFn(beam.DoFn):
    """What the two shard-writing steps share: where shards go, the
    counters, and publishing one assembled shard (`_published`)."""

    def __init__(self, staging_dir: str, temp_dir: str, compression: str, memory_bytes: int):
        self._staging_dir = staging_dir
        self._temp_dir = temp_dir
        self._compression = compression
        self._memory_bytes = memory_bytes

    def setup(self):
        self._examples = Metrics.counter(METRICS_NAMESPACE, "examples_written")
        self._bytes = Metrics.counter(METRICS_NAMESPACE, "bytes_written")
        self._shards = Metrics.counter(METRICS_NAMESPACE, "shards_written")

    def _name(self, split: str, index: int, count: int) -> str:
        return SHARD_FILE_NAME.format(split=split, index=index, count=count,
                                      suffix=tfrecordio.suffix_for(self._compression))

    def _published(self, split: str, name: str, write, num_examples: int) -> dict:
        """Publishes the shard `write(out)` writes (`num_examples` records,
        which it returns); its metadata dict."""
        shard = publish_shard(name, write, staging_dir=self._staging_dir,
                              temp_dir=self._temp_dir, compression=self._compression)
        self._examples.inc(num_examples)
        self._bytes.inc(shard.num_bytes)
        self._shards.inc()
        return shard_metadata(split, name, shard)


class _WriteShardFn(_ShardFileFn):
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

            def write(out) -> int:
                spool.seek(0)
                while True:
                    block = spool.read(run_files.BLOCK)
                    if not block:
                        return num_examples
                    out.write(block)

            yield self._published(split, name, write, num_examples)


class _BucketSizesFn(beam.CombineFn):
    """(buckets, rows, bytes, largest row) of a split's batches -> (rows per
    bucket, bytes per bucket, largest row): int64 arrays of `count`
    entries. Only counts cross, never rows."""

    def __init__(self, count: int):
        self._count = count

    def create_accumulator(self):
        return [np.zeros(self._count, dtype=np.int64), np.zeros(self._count, dtype=np.int64), 0]

    def add_input(self, accumulator, element):
        present, rows, nbytes, largest = element
        present = np.frombuffer(present, dtype="<u4").astype(np.intp)
        accumulator[0][present] += np.frombuffer(rows, dtype="<i8")
        accumulator[1][present] += np.frombuffer(nbytes, dtype="<i8")
        accumulator[2] = max(accumulator[2], largest)
        return accumulator

    def merge_accumulators(self, accumulators):
        merged = self.create_accumulator()
        for rows, nbytes, largest in accumulators:
            merged[0] += rows
            merged[1] += nbytes
            merged[2] = max(merged[2], largest)
        return merged

    def extract_output(self, accumulator):
        return tuple(accumulator)


def _plan_row_cuts(split_sizes, *, shard_size: int):
    """(split, (rows per bucket, bytes per bucket, largest row)) -> for each
    bucket holding rows, ((split, bucket), ("plan", (first byte, bytes,
    total, shard count))); for each shard, ((split, shard), ("spec",
    (shard count, buckets that may hold its rows)))."""
    split, (rows, nbytes, largest) = split_sizes
    total = int(nbytes.sum())
    count = row_shard_count(total, shard_size, largest)
    thresholds = row_shard_thresholds(total, count)
    starts = np.cumsum(nbytes) - nbytes
    expected: list[list[int]] = [[] for _ in range(count)]
    for bucket in np.flatnonzero(rows).tolist():
        start, size = int(starts[bucket]), int(nbytes[bucket])
        yield ((split, bucket), ("plan", (start, size, total, count)))
        for shard in shards_touched(start, start + size, thresholds):
            expected[shard].append(bucket)
    for shard in range(count):
        yield ((split, shard), ("spec", (count, tuple(expected[shard]))))


class _CutBucketFn(beam.DoFn):
    """((split, bucket), [plan, packets...]) -> ((split, shard), ("piece",
    (bucket, number, bytes))) for each piece of the bucket's sorted rows,
    and ((split, shard), ("end", (bucket, (pieces, rows, bytes)))) for each
    shard the plan says the bucket may reach."""

    def __init__(self, tuning):
        self._tuning = tuning

    def setup(self):
        relax_young_collections()
        self._exchanged = Metrics.counter(METRICS_NAMESPACE, "exchange_bytes")

    def process(self, item):
        (split, bucket), values = item
        tuning = self._tuning
        # The values are iterated twice (runners give re-iterables): the plan
        # is found first, then the rows stream into the sort.
        plan = next((value for tag, value in values if tag == "plan"), None)
        if plan is None:
            raise ValueError(f"split {split!r}, bucket {bucket}: rows came without the "
                             f"split's plan")
        start, size, total, count = plan
        thresholds = row_shard_thresholds(total, count)
        packets = (value for tag, value in values if tag == "rows")
        with tempfile.SpooledTemporaryFile(max_size=tuning.memory_bytes) as out:
            cutter = ShardCutter(out, start, thresholds)
            sort_bucket_packets(packets, cutter, memory_bytes=tuning.memory_bytes,
                                fan_in=tuning.fan_in, prefix_len=tuning.prefix_len,
                                index_every=tuning.index_every)
            if cutter.offset != start + size:
                raise run_files.RunFileError(
                    f"split {split!r}, bucket {bucket}: sorted {cutter.offset - start} bytes, "
                    f"the plan counted {size}")
            sent: dict[int, list[int]] = {}
            out.seek(0)
            for shard, _, length, rows in cutter.segments:
                counts = sent.setdefault(shard, [0, 0, 0])
                counts[1] += rows
                counts[2] += length
                while length:
                    data = out.read(min(length, tuning.route_bytes))
                    if not data:
                        raise run_files.RunFileError(f"split {split!r}, bucket {bucket}: sorted "
                                                     f"rows cut short")
                    length -= len(data)
                    self._exchanged.inc(len(data))
                    yield (split, shard), ("piece", (bucket, counts[0], data))
                    counts[0] += 1
        touched = shards_touched(start, start + size, thresholds)
        stray = sorted(set(sent) - set(touched))
        if stray:
            raise ValueError(f"split {split!r}, bucket {bucket}: rows for shard {stray[0]}, "
                             f"outside the planned {touched}")
        for shard in touched:
            yield (split, shard), ("end", (bucket, tuple(sent.get(shard, (0, 0, 0)))))


class _WriteCutShardFn(_ShardFileFn):
    """((split, shard), [spec, pieces, ends...]) -> shard metadata dict."""

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

            def write(out) -> int:
                for key in order:
                    position, length = where[key]
                    spool.seek(position)
                    while length:
                        block = spool.read(min(run_files.BLOCK, length))
                        out.write(block)
                        length -= len(block)
                return num_examples

            shard = self._published(split, name, write, num_examples)
        if shard["num_bytes"] != num_bytes:
            raise run_files.RunFileError(f"{name}: wrote {shard['num_bytes']} bytes, the buckets "
                                         f"sent {num_bytes}")
        yield shard


class ShuffleExchange(beam.PTransform):
    """ExampleBatches -> shard metadata dicts, through the runner's shuffle.

    Shuffled plain output is cut at rows, everything else at chunks (see
    the module docstring). The shards are written to `staging_dir`;
    `shard_temp_dir` holds a shard only while it is written, on
    filesystems that need a temporary name. `tuning` is a
    `shards.ShardTuning`."""

    def __init__(self, staging_dir: str, *, shard_temp_dir: str, dataset_name: str,
                 splits: Sequence[tuple[str, float]], shuffle: bool, shard_size: int,
                 compression: str, chunk_bytes: int, gzip_level: int, tuning):
        super().__init__()
        self._staging_dir = staging_dir
        self._shard_temp_dir = shard_temp_dir
        self._dataset_name = dataset_name
        self._splits = tuple(splits)
        self._shuffle = shuffle
        self._shard_size = shard_size
        self._compression = compression
        self._chunk_bytes = chunk_bytes
        self._gzip_level = gzip_level
        self._tuning = tuning
        if cuts_at_rows(shuffle, compression) and not 1 <= tuning.hash_buckets <= 1 << 24:
            raise ValueError(f"hash_buckets must be between 1 and {1 << 24}, got "
                             f"{tuning.hash_buckets!r}")

    def expand(self, batches):
        if cuts_at_rows(self._shuffle, self._compression):
            return self._cut_at_rows(batches)
        return self._cut_at_chunks(batches)

    def _cut_at_rows(self, batches):
        tuning = self._tuning
        # ("sizes", (split, (buckets, rows, bytes, largest row)))
        # | ("rows", ((split, bucket), ("rows", packet)))
        packed = batches | "Pack" >> beam.ParDo(_PackFn(
            self._dataset_name, self._splits, self._shuffle, tuning,
            hash_buckets=tuning.hash_buckets))
        # ((split, bucket), ("plan", placement)) | ((split, shard), ("spec", buckets))
        plan = (packed
                | "SizesOnly" >> beam.Filter(_is("sizes"))
                | "Sizes" >> beam.Map(_untag)
                | "BucketSizes" >> beam.CombinePerKey(_BucketSizesFn(tuning.hash_buckets))
                | "PlanCuts" >> beam.FlatMap(_plan_row_cuts, shard_size=self._shard_size))
        placements = plan | "PlacementsOnly" >> beam.Filter(lambda item: item[1][0] == "plan")
        specs = plan | "SpecsOnly" >> beam.Filter(lambda item: item[1][0] == "spec")
        rows = (packed
                | "RowsOnly" >> beam.Filter(_is("rows"))
                | "Rows" >> beam.Map(_untag))
        # ((split, shard), ("piece", (bucket, number, bytes)) | ("end", (bucket, counts)))
        pieces = ((placements, rows)
                  | "FlattenBuckets" >> beam.Flatten()
                  | "GroupBuckets" >> beam.GroupByKey()  # ((split, bucket), [plan, packets])
                  | "SortBuckets" >> beam.ParDo(_CutBucketFn(tuning)))
        return ((specs, pieces)
                | "FlattenShards" >> beam.Flatten()
                | "JoinShards" >> beam.GroupByKey()  # ((split, shard), [spec, pieces, ends])
                | "WriteShardFiles" >> beam.ParDo(_WriteCutShardFn(
                    self._staging_dir, self._shard_temp_dir, self._compression,
                    tuning.memory_bytes)))  # metadata dict

    def _cut_at_chunks(self, batches):
        tuning = self._tuning
        # ("stats", (split, (rows, bytes, sample))) | ("rows", ((split, lane), ("rows", packet)))
        packed = batches | "Pack" >> beam.ParDo(_PackFn(
            self._dataset_name, self._splits, self._shuffle, tuning))
        # ((split, lane), ("plan", bucket lower bounds))
        plans = (packed
                 | "StatsOnly" >> beam.Filter(_is("stats"))
                 | "Stats" >> beam.Map(_untag)
                 | "SplitStats" >> beam.CombinePerKey(_SplitStatsFn(tuning.sample_size))
                 | "PlanBuckets" >> beam.FlatMap(_plan_lanes, tuning=tuning))
        rows = (packed
                | "RowsOnly" >> beam.Filter(_is("rows"))
                | "Rows" >> beam.Map(_untag))
        # ("meta", (split, BucketChunks)) | ("chunk", ((split, bucket), ("chunk", (offset, bytes))))
        sorted_buckets = ((plans, rows)
                          | "FlattenLanes" >> beam.Flatten()
                          | "JoinPlan" >> beam.GroupByKey()  # ((split, lane), [plan, packets])
                          | "Route" >> beam.ParDo(_RouteFn(tuning.route_bytes))
                          | "GroupBuckets" >> beam.GroupByKey()  # ((split, bucket), [packet])
                          | "SortBuckets" >> beam.ParDo(_SortBucketFn(
                              self._compression, self._chunk_bytes, self._gzip_level, tuning)))
        # ((split, shard), ("spec", counts)) | ((split, bucket), ("place", piece))
        plan = (sorted_buckets
                | "MetaOnly" >> beam.Filter(_is("meta"))
                | "Meta" >> beam.Map(_untag)
                | "GroupSplitChunks" >> beam.GroupByKey()  # (split, [BucketChunks])
                | "PlanShards" >> beam.FlatMap(_plan_split_shards, shard_size=self._shard_size))
        chunks = (sorted_buckets
                  | "ChunksOnly" >> beam.Filter(_is("chunk"))
                  | "Chunks" >> beam.Map(_untag))
        places = plan | "PlacesOnly" >> beam.Filter(lambda item: item[1][0] == "place")
        specs = plan | "SpecsOnly" >> beam.Filter(lambda item: item[1][0] == "spec")
        pieces = ((places, chunks)
                  | "FlattenChunks" >> beam.Flatten()
                  | "JoinPlaces" >> beam.GroupByKey()  # ((split, bucket), [places, chunks])
                  | "Place" >> beam.ParDo(_PlaceFn()))  # ((split, shard), ("piece", ...))
        return ((specs, pieces)
                | "FlattenShards" >> beam.Flatten()
                | "JoinShards" >> beam.GroupByKey()  # ((split, shard), [spec, pieces])
                | "WriteShardFiles" >> beam.ParDo(_WriteShardFn(
                    self._staging_dir, self._shard_temp_dir, self._compression,
                    tuning.memory_bytes)))  # metadata dict
