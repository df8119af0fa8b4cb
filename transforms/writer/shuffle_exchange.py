"""The shard writer's shuffle exchange: rows move between workers through the
runner's own GroupByKey, never through files on the output store.

`ShuffleExchange` takes ExampleBatches and gives ShardSpec-like shard
metadata dicts, with the shards written once, under their final names in
`staging_dir`. It writes the same bytes as the file exchange of
`file_exchange.py` (same split, order key, bucket sort, shard cuts, all from
the planning modules (`bucket_plan`, `shard_cuts`, `cells`)). There are two ways through it, by what decides the cuts
(`shard_cuts.cuts_at_rows`).

Shards cut at rows: shuffled output (the default config; plain or gzip)
and key-ordered plain output::

  ExampleBatch
  | Pack               -> ("sizes", (split, (buckets, rows, bytes, digests,
                                             largest row, ratio sample)))
                          ("rows", ((split, bucket), ("rows", packet)))
                          a batch's rows of one split, framed once (CRCs),
                          cut by bucket: shuffled, `hash_buckets` equal
                          ranges of the digest order, known as soon as a
                          row is hashed; key order, the `key_bounds` given
                          (sampled before the run); gzip: the rows whose
                          digest is below the ratio sample's bound go with
                          the sizes
  | BucketSizes (CombinePerKey) | PlanCuts
                       -> ((split, bucket), ("plan", (first byte, bytes, total, shards, rows,
                                                      digest)))
                          ((split, shard), ("spec", (shards, buckets it may get)))
                          a bucket's digest: the sum of its rows' digests
                          (64 bits of each row's data CRC and size), which
                          the bucket checks, with its rows and bytes, on
                          what the runner delivered
  | GroupBuckets (Flatten + GroupByKey) | SortBuckets
                       -> ((split, shard), ("piece", (bucket, number, bytes)))
                          ((split, shard), ("end", (bucket, (pieces, rows, bytes))))
                          each bucket sorted in memory up to memory_bytes,
                          above it in sorted runs on the worker's local disk,
                          every row sent to the shard holding its bytes'
                          midpoint in the split
  | JoinShards (Flatten + GroupByKey) | WriteShardFiles  -> metadata dict
                          gzip: the shard's framed records compressed as
                          one gzip member as they are written

Rows cross the runner's shuffle once (to their bucket) and again as the
bytes of the shard they land in: with the shard written once (c·D for
gzip, c its compression ratio), 2 + c bytes moved per dataset byte (3
plain). Only counts cross the combine, and for gzip the ratio sample
(1/64 of each split's rows, `tuning.RATIO_SAMPLE_BOUND`, at most
`ratio_sample.RATIO_SAMPLE_LIMIT`), from which a gzip split's shard count
is estimated: a gzip shard holds the rows a plain one would, of a
1/N share of the split's framed bytes, so gzip shard sizes follow the
sample's ratio. A row's shard is a function of its place in the split,
so the buckets (their number, their bounds) never change the bytes.

Key-ordered output without `key_bounds` (`WriteDataset` given no key
sample) first learns its buckets from a sample of the whole split, for
which its rows wait in lanes::

  ExampleBatch
  | Pack               -> ("stats", (split, (rows, bytes, sample)))
                          ("rows", ((split, lane), ("rows", packet)))
  | SplitStats (CombinePerKey) | PlanBuckets
                       -> ((split, lane), ("plan", bucket lower bounds))
                          for each of the split's `lanes` lanes
  | JoinPlan (Flatten + GroupByKey)   -> ((split, lane), [plan, packets...])
  | Route              -> ("sizes", ...), ("rows", ...) as Pack gives them above

and goes on as with bounds: plain rows cross three times, 4 bytes moved
per dataset byte.

Key-ordered gzip output, shards cut at cells (a shard's rows are a key
range, whose compression ratio may differ from the next range's: a shard
counted from a sample would miss the ±10% size the shards keep, so it is
cut between chunks whose compressed sizes are known). Chunk j is the
rows whose framed bytes' midpoint lies in cell j of the split, bytes
[j, j + 1) × `chunk_bytes` in key order, one gzip member: a function of
the rows alone, so the bucket bounds (sampled before the run or not)
never change the bytes::

  ExampleBatch
  | Pack (with key_bounds) or Pack | ... | Route (without)  as above
                       -> ("sizes", ...), ("rows", ((split, bucket), ("rows", packet)))
  | BucketSizes (CombinePerKey) | PlanStarts
                       -> ((split, bucket), ("plan", (first byte, bytes, total, _, rows,
                                                      digest)))
  | GroupBuckets (Flatten + GroupByKey) | SortBuckets
                       -> ("sizes", (split, (unit, chunks, bytes, largest chunk, ())))
                          ("chunk", ((split, unit), ("layout", chunk sizes and rows)))
                          ("chunk", ((split, unit), ("chunk", (offset, bytes))))
                          the cells within the bucket, compressed: unit 2b + 1
                          ("seam", ((split, cell), (bucket, start, end, total, rows, bytes)))
                          its rows, as they are, in the (at most two) cells
                          it may share with a neighbour
  | GroupSeams (GroupByKey) | CompressSeams
                       -> ("sizes", ...), ("chunk", ...) of a seam: its buckets'
                          rows joined in key order, compressed as one cell,
                          unit 2b of the last of them
  | UnitSizes (CombinePerKey) | PlanShards
                       -> ((split, unit), ("plan", (first byte, bytes, total, shards, chunks)))
                          ((split, shard), ("spec", (shards, units it may get)))
                          as PlanCuts, on the chunks' bytes on disk
  | JoinPlaces (Flatten + GroupByKey) | Place
                       -> ((split, shard), ("piece", (unit, number, bytes)))
                          ((split, shard), ("end", (unit, (pieces, rows, bytes))))
                          every chunk sent to the shard holding its bytes'
                          midpoint in the split
  | JoinShards (Flatten + GroupByKey) | WriteShardFiles  -> metadata dict
                          the pieces copied as they are

Here rows cross once (to their bucket; twice without bounds, waiting in
lanes first), chunks twice (waiting for the shard plan, then to their
shard), and the rows of the shared cells once more (a cell of
`chunk_bytes`, at most 4 MB, at each bucket boundary: under 1% of a
bucket of 1 GB): (1 + 3c) bytes moved per dataset byte with bounds,
(2 + 3c) without, c the compression ratio. The plan is made of a few
numbers per unit (as for rows), nothing per chunk: a chunk's shard
follows from its own place in the split (`shard_cuts.plan_shards`).

Where each part lives:

- `shuffle_packets` (no Beam): packets, a batch's rows of one split as
  they cross the shuffle (plain tuples of bytes and ints, which Beam's
  coders carry without pickling); cutting them by bucket, and sorting a
  bucket's packets;
- `shuffle_steps`: the steps both ways share, Pack (`PackFn`) and the
  base of WriteShardFiles (`ShardFileFn`);
- `shuffle_rows`: the steps of shards cut at rows;
- `shuffle_cells`: lanes and routing (key order without bounds given),
  and the steps of shards cut at cells;
- here, `ShuffleExchange`, which picks the way and wires its steps.

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

from typing import Sequence

import apache_beam as beam

from .shard_cuts import cuts_at_rows
from .shuffle_cells import (
    PlaceFn,
    RouteFn,
    SeamFn,
    SortCellsFn,
    SplitStatsFn,
    plan_lanes,
)
from .shuffle_rows import BucketSizesFn, CutBucketFn, WriteCutShardFn, plan_row_cuts
from .shuffle_steps import PackFn
from .tuning import ShardJob

__all__ = ["ShuffleExchange"]


def _part(tagged, kind: str, label: str):
    """The values of a step's (kind, value) outputs of one kind."""
    return (tagged
            | f"{label}Only" >> beam.Filter(lambda item: item[0] == kind)
            | label >> beam.Map(lambda item: item[1]))


def _sizes_and_rows(tagged):
    """(sizes, rows) of a step's ("sizes", ...) and ("rows", ...) outputs."""
    return _part(tagged, "sizes", "Sizes"), _part(tagged, "rows", "Rows")


class ShuffleExchange(beam.PTransform):
    """ExampleBatches -> shard metadata dicts, through the runner's shuffle.

    Key-ordered gzip output is cut at cells, the rest at rows (see the
    module docstring). `job`: what to write, and where (`tuning.ShardJob`).
    `key_bounds` (key-ordered output): bucket lower
    bounds known before the run (`bucket_plan.bucket_bounds_of` a sample of
    the input's order keys), so that rows go to their bucket as they are
    packed instead of waiting in lanes for their split's sample; any
    bounds give the same bytes."""

    def __init__(self, job: ShardJob, *, key_bounds: Sequence[bytes] | None = None):
        super().__init__()
        self._job = job
        self._key_bounds = tuple(key_bounds) if key_bounds else None
        if self._key_bounds is not None and self._key_bounds[0] != b"":
            raise ValueError(f"key_bounds must start with b'', got {self._key_bounds[0]!r}")
        if job.shuffle and not 1 <= job.tuning.hash_buckets <= 1 << 24:
            raise ValueError(f"hash_buckets must be between 1 and {1 << 24}, got "
                             f"{job.tuning.hash_buckets!r}")

    def expand(self, batches):
        if self._job.shuffle or self._key_bounds:
            sizes, rows = self._cut_as_packed(batches)
        else:
            sizes, rows = self._route_by_key(batches)
        if cuts_at_rows(self._job.shuffle, self._job.compression):
            return self._cut_at_rows(sizes, rows)
        return self._cut_at_cells(sizes, rows)

    def _cut_as_packed(self, batches):
        """(sizes, rows), each batch's rows cut by bucket as they are
        packed: hash buckets (shuffled output) or the given key bounds."""
        tuning = self._job.tuning
        shuffled_gzip = self._job.shuffle and self._job.compression == "gzip"
        # ("sizes", (split, (buckets, rows, bytes, digests, largest row, ratio sample)))
        # | ("rows", ((split, bucket), ("rows", packet)))
        packed = batches | "Pack" >> beam.ParDo(PackFn(
            self._job.dataset_name, self._job.splits, self._job.shuffle, tuning,
            hash_buckets=tuning.hash_buckets if self._job.shuffle else None,
            ratio_bound=tuning.ratio_sample_bound if shuffled_gzip else None,
            key_bounds=None if self._job.shuffle else self._key_bounds))
        return _sizes_and_rows(packed)

    def _route_by_key(self, batches):
        """Key-ordered output without bounds known before the run: (sizes,
        rows), each lane's rows cut by the split's bucket bounds once they
        are known."""
        # ("sizes", (split, (buckets, rows, bytes, digests, largest row, ())))
        # | ("rows", ((split, bucket), ("rows", packet)))
        return _sizes_and_rows(self._routed(batches))

    def _routed(self, batches):
        """Key-ordered output: rows wait in lanes for their split's bucket
        bounds, then go to their bucket (`RouteFn`)."""
        tuning = self._job.tuning
        bucket_bytes = tuning.bucket_bytes
        if self._job.compression == "gzip":  # fewer cells shared by two buckets
            bucket_bytes = tuning.key_gzip_bucket_bytes(self._job.shard_size)
        # ("stats", (split, (rows, bytes, sample))) | ("rows", ((split, lane), ("rows", packet)))
        packed = batches | "Pack" >> beam.ParDo(PackFn(
            self._job.dataset_name, self._job.splits, self._job.shuffle, tuning))
        # ((split, lane), ("plan", bucket lower bounds))
        plans = (_part(packed, "stats", "Stats")
                 | "SplitStats" >> beam.CombinePerKey(SplitStatsFn(tuning.sample_size))
                 | "PlanBuckets" >> beam.FlatMap(plan_lanes, tuning=tuning,
                                                 bucket_bytes=bucket_bytes))
        rows = _part(packed, "rows", "LaneRows")
        return ((plans, rows)
                | "FlattenLanes" >> beam.Flatten()
                | "JoinPlan" >> beam.GroupByKey()  # ((split, lane), [plan, packets])
                | "Route" >> beam.ParDo(RouteFn(tuning.route_bytes)))

    def _plan(self, sizes, *, step: str, added_up: str, gzip_level: int | None = None):
        """(placements, specs): `plan_row_cuts` on `sizes` added up per
        bucket (or unit of chunks). Placements: ((split, bucket), ("plan",
        (first byte, bytes, total, shards, rows or chunks, digest))); specs:
        ((split, shard), ("spec", (shards, buckets it may get)))."""
        plan = (sizes
                | added_up >> beam.CombinePerKey(BucketSizesFn())
                | step >> beam.FlatMap(plan_row_cuts, shard_size=self._job.shard_size,
                                       multiple=self._job.shard_count_multiple,
                                       gzip_level=gzip_level))
        return (plan | f"{step}Placements" >> beam.Filter(lambda item: item[1][0] == "plan"),
                plan | f"{step}Specs" >> beam.Filter(lambda item: item[1][0] == "spec"))

    def _write_shards(self, specs, pieces, *, compress: bool):
        """Each shard's spec and pieces joined, and the shard written:
        metadata dicts."""
        return ((specs, pieces)
                | "FlattenShards" >> beam.Flatten()
                | "JoinShards" >> beam.GroupByKey()  # ((split, shard), [spec, pieces, ends])
                | "WriteShardFiles" >> beam.ParDo(WriteCutShardFn(
                    self._job.staging_dir, self._job.shard_temp_dir, self._job.compression,
                    self._job.tuning.memory_bytes, self._job.gzip_level, compress=compress,
                    index=self._job.index, file_format=self._job.file_format)))

    def _cut_at_rows(self, sizes, rows):
        gzip = self._job.compression == "gzip"
        placements, specs = self._plan(sizes, step="PlanCuts", added_up="BucketSizes",
                                       gzip_level=self._job.gzip_level if gzip else None)
        # ((split, shard), ("piece", (bucket, number, bytes)) | ("end", (bucket, counts)))
        pieces = ((placements, rows)
                  | "FlattenBuckets" >> beam.Flatten()
                  | "GroupBuckets" >> beam.GroupByKey()  # ((split, bucket), [plan, packets])
                  | "SortBuckets" >> beam.ParDo(CutBucketFn(self._job.tuning)))
        return self._write_shards(specs, pieces, compress=True)

    def _cut_at_cells(self, sizes, rows):
        # ((split, bucket), ("plan", (first byte, bytes, total, _, rows, digest)))
        starts, _ = self._plan(sizes, step="PlanStarts", added_up="BucketSizes")
        # ("sizes", (split, (units, chunks, bytes, largest chunk, ())))
        # | ("chunk", ((split, unit), ("layout", sizes) | ("chunk", (offset, bytes))))
        # | ("seam", ((split, cell), (bucket, start, end, total, rows, bytes)))
        cells = ((starts, rows)
                 | "FlattenBuckets" >> beam.Flatten()
                 | "GroupBuckets" >> beam.GroupByKey()  # ((split, bucket), [plan, packets])
                 | "SortBuckets" >> beam.ParDo(SortCellsFn(
                     self._job.chunk_bytes, self._job.gzip_level, self._job.tuning)))
        seams = (_part(cells, "seam", "Seams")
                 | "GroupSeams" >> beam.GroupByKey()  # ((split, cell), [pieces])
                 | "CompressSeams" >> beam.ParDo(SeamFn(self._job.chunk_bytes, self._job.gzip_level)))
        chunk_sizes = ((_part(cells, "sizes", "CellSizes"), _part(seams, "sizes", "SeamSizes"))
                       | "FlattenChunkSizes" >> beam.Flatten())
        chunks = ((_part(cells, "chunk", "CellChunks"), _part(seams, "chunk", "SeamChunks"))
                  | "FlattenChunks" >> beam.Flatten())
        places, specs = self._plan(chunk_sizes, step="PlanShards", added_up="UnitSizes")
        # ((split, shard), ("piece", (unit, number, bytes)) | ("end", (unit, counts)))
        pieces = ((places, chunks)
                  | "FlattenPlaces" >> beam.Flatten()
                  | "JoinPlaces" >> beam.GroupByKey()  # ((split, unit), [plan, layout, chunks])
                  | "Place" >> beam.ParDo(PlaceFn()))
        return self._write_shards(specs, pieces, compress=False)
