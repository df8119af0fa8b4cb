"""The shard writer: ExampleBatches in, sorted, size-balanced TFRecord shards out.

`WriteShards` takes a PCollection of ExampleBatch (a list of
``(key: bytes | None, example: bytes)``) and writes
``<staging_dir>/<split>-<index:05d>-of-<count:05d>.tfrecord[.gz]``, returning
one metadata dict per shard. Steps and the elements between them::

  ExampleBatch
  | Spill            -> SpillRecord    rows hashed, split, buffered; each full
                                       buffer is sorted and written as one run
                                       file per split (fused with the source)
  | KeySpills | GroupSpills            -> (split, [SpillRecord])
  | PlanBuckets      -> (run list file, BucketRange)   key ranges of ~bucket_bytes
  | SpreadBuckets | SortBuckets        -> (run list file, BucketChunks)  each range
                                       read from every run of its split and
                                       measured, not sorted (shuffled gzip: its
                                       rows in the ratio sample read too)
  | KeyBuckets | GroupBuckets          -> (split, [(run list file, BucketChunks)])
  key-ordered gzip only (`_cells`), the split's cells as units of chunks:
  | PlanCells | SpreadCells | SortCells  -> ("unit", (run list file, BucketChunks))
                                       the cells within a bucket, sorted and
                                       compressed into a chunk file, knowing its
                                       first byte in the split;
                                       ("seam", ((split, cell), piece))  its rows
                                       in a cell it may share, as they are, in a
                                       small file
  | GroupSeams | CompressSeams         -> (run list file, BucketChunks)  a seam's
                                       pieces joined and compressed as one cell
  | FlattenUnits | KeyUnits | GroupUnits -> (split, [(run list file, BucketChunks)])
  then:
  | PlanShards                         -> ShardSpec  cut at rows, each
                                       shard taking its rows of the buckets it
                                       reaches as it writes them (shuffled gzip:
                                       as many shards as the sample's ratio says);
                                       key-ordered gzip: each chunk in the shard
                                       holding its midpoint, and the split's
                                       runs deleted
  | SpreadShards | WriteShardFiles     -> shard metadata dict  rows sorted again
                                       from the runs and written (gzip: into one
                                       gzip member); key-ordered gzip: chunk
                                       ranges copied
  | KeyAll (+ CleanupTrigger) | GatherShards | Cleanup  -> shard metadata dict

Example bytes only ever travel inside the Spill step (which receives them
from the source) and through files; every later PCollection holds small
metadata, because runners such as the DirectRunner keep whatever crosses a
GroupByKey or Reshuffle in memory. There are no side inputs (Beam's Dask
runner recomputes their producers and can repeat their elements): the run
list each bucket needs is a small file written by the planning step. And no
element is emitted from `finish_bundle` (the Dask runner drops those): the
Spill step reports each batch's rows as it receives them, naming the run
file its current buffer will be written to by the end of the bundle.

Retries: every file is written under a fresh uuid name and only files named
by a committed bundle's output are read, so a retried bundle can neither
lose nor duplicate rows; shards appear at their final names by rename,
complete. Output bytes depend on content and config only.
"""

from __future__ import annotations

import dataclasses
import functools
import tempfile
import uuid
from typing import Callable, Sequence

import apache_beam as beam
import fsspec
from apache_beam.metrics import Metrics
from fsspec.implementations.local import LocalFileSystem

from . import bucket_sort, bucket_writers, run_files, spill, tfrecord
from .exchange import ShuffleExchange
from .gc_tuning import relax_young_collections
from .malloc_tuning import keep_freed_memory
from .layout import SHARD_FILE_NAME, TMP_DIR
from .page_cache import WriteBehind, drop_behind
from .shard_files import publish_shard, shard_metadata
from .shard_plan import (
    MAX_BUCKETS,
    RATIO_SAMPLE_BOUND,
    BucketChunks,
    Chunk,
    RunInfo,
    ShardSpec,
    SpillRecord,
    SplitAssigner,
    assign_split,
    bucket_places,
    cuts_at_rows,
    plan_bucket_ranges,
    plan_row_shards,
    row_shard_thresholds,
    plan_shards,
    runs_of,
    sample_of,
    validate_splits,
)

__all__ = ["EXCHANGES", "METRICS_NAMESPACE", "ShardTuning", "WriteShards", "assign_split",
           "default_exchange", "write_shard"]

from .metrics import METRICS_NAMESPACE  # noqa: E402 (re-exported)

EXCHANGES = ("auto", "files", "shuffle")
# Runners whose workers are processes of one machine: they share its disk,
# and keep what crosses a GroupByKey in memory.
_LOCAL_RUNNERS = frozenset({"FnApiRunner", "DirectRunner", "SwitchingDirectRunner",
                            "BundleBasedDirectRunner"})

_COPY_BLOCK = 4 << 20


# ShardTuning.for_input: hash buckets per byte of input (at most
# shard_plan.MAX_BUCKETS).
INPUT_BYTES_PER_HASH_BUCKET = 1 << 30
# Key-ordered gzip buckets on the shuffle exchange hold at least this
# many cells (`ShardTuning.key_bucket_count`): the rows of the cell at each
# bucket boundary cross the shuffle once more, about 1/64 of the data.
KEY_GZIP_BUCKET_CELLS = 64


@dataclasses.dataclass(frozen=True)
class ShardTuning:
    """Internal sizes of the shard writer.

    run_bytes, memory_bytes, fan_in and index_every trade memory for speed
    and never change the output. The others decide bucket boundaries and
    chunk boundaries, hence the shard bytes: like the config, they must be
    the same for two builds to be byte-identical.

    run_bytes: spill buffer per worker before it is sorted and written.
    bucket_bytes: target size of a key range sorted as one unit.
    memory_bytes: largest bucket sorted in memory; larger ones are merged
      as streams from the sorted runs.
    fan_in: most sorted streams merged at once.
    chunks_per_shard, max_chunk_bytes: key-ordered gzip shards are cut
      from chunks, the rows of cells of shard_size / chunks_per_shard
      framed bytes, at most max_chunk_bytes (`shard_plan.cells_of_rows`).
      A shard is within one chunk of its split's mean, which may be just
      over half a shard (two shards for 1.01 shard sizes): 25 keeps that
      within ±8% for bytes gzip cannot shrink; more, smaller gzip members
      would compress text worse.
    sample_bytes: one sampled key per this many bytes, on average (default
      bucket_bytes / 64); sample_size: most sampled keys kept per split.
    prefix_len: bytes of an order key kept in samples and run indexes.
    index_every: bytes of a run between two index entries.
    lanes: groups per split in which rows wait for their split's bucket
      bounds (shuffle exchange; more lanes, more workers route rows).
    route_bytes: rows of one bucket gathered into one element before the
      shuffle exchange sends them on.
    hash_buckets: buckets per split of shuffled output in the shuffle
      exchange: equal ranges of the digest order, so a row's bucket is
      known as soon as it is hashed. Each is sorted on one worker
      (memory_bytes in memory, the rest on its local disk); their number
      never changes the output. `for_input` sizes it to the input.
    ratio_sample_bound: K of shuffled gzip output's ratio sample (the rows
      whose digest is below it, `shard_plan.RATIO_SAMPLE_BOUND`), from
      which a split's shard count is estimated: it changes the output,
      so it never follows the input size (`WriteDataset` does not know it).
    """

    run_bytes: int = 64 << 20
    bucket_bytes: int = 32 << 20
    memory_bytes: int = 256 << 20
    fan_in: int = 64
    chunks_per_shard: int = 25
    max_chunk_bytes: int = 4 << 20
    sample_bytes: int | None = None
    sample_size: int = 65536
    prefix_len: int = 64
    index_every: int = 64 << 10
    lanes: int = 64
    route_bytes: int = 1 << 20
    hash_buckets: int = 256
    ratio_sample_bound: int = RATIO_SAMPLE_BOUND

    @classmethod
    def for_input(cls, input_bytes: int | None) -> "ShardTuning":
        """The tuning for a build reading `input_bytes` (None: unknown):
        one hash bucket per `INPUT_BYTES_PER_HASH_BUCKET` of input, at
        least the default 256 and at most `shard_plan.MAX_BUCKETS`. A bucket is
        what one worker sorts: with a fixed 256, a 10 TB build would sort
        ~40 GB per worker and keep at most 256 workers busy; with 4,096 it
        is ~2.5 GB each. The bound keeps the per-bundle byte counts that
        cross the combine (16 bytes a bucket) at 64 KB. Nothing else
        follows the input: the bucket count never changes the output,
        and `WriteDataset`, which cannot know its input's size, must give
        a build's bytes."""
        default = cls()
        if not input_bytes:
            return default
        wanted = -(-input_bytes // INPUT_BYTES_PER_HASH_BUCKET)
        return dataclasses.replace(
            default, hash_buckets=max(default.hash_buckets, min(MAX_BUCKETS, wanted)))

    def key_bucket_count(self, *, compression: str, shard_size: int,
                         input_bytes: int | None) -> int:
        """Buckets of key-ordered output whose bounds are sampled before
        the run: `hash_buckets`; for gzip, whose rows in a cell that two
        buckets share cross the shuffle once more (about a cell per bucket
        boundary), at most one per `KEY_GZIP_BUCKET_CELLS` cells of the
        input when its size is known. The count never changes the bytes."""
        if compression != "gzip" or not input_bytes:
            return self.hash_buckets
        wanted = input_bytes // (KEY_GZIP_BUCKET_CELLS * self.chunk_bytes(shard_size))
        return max(1, min(self.hash_buckets, wanted))

    def key_gzip_bucket_bytes(self, shard_size: int) -> int:
        """Bucket size of key-ordered gzip output planned from its split's
        own sample on the shuffle exchange: `bucket_bytes`, or
        `KEY_GZIP_BUCKET_CELLS` cells when that is more (see
        `key_bucket_count`)."""
        return max(self.bucket_bytes, KEY_GZIP_BUCKET_CELLS * self.chunk_bytes(shard_size))

    def sample_every(self) -> int:
        return self.sample_bytes or max(1, self.bucket_bytes // 64)

    def chunk_bytes(self, shard_size: int) -> int:
        return max(1, min(self.max_chunk_bytes, shard_size // self.chunks_per_shard))


class _SpillFn(beam.DoFn):
    """ExampleBatch -> SpillRecord per split present in the batch.

    Hashes each row, picks its split and order key, and buffers it; when
    the buffer reaches run_bytes (and at the end of the bundle) each split's
    rows are sorted and written as a run file named for this bundle attempt.
    The per-row work is done on whole batches (C loops and numpy); only
    sampled rows are looked at one by one.
    """

    def __init__(self, run_dir: str, dataset_name: str, splits, shuffle: bool,
                 tuning: ShardTuning):
        self._run_dir = run_dir
        self._dataset_name = dataset_name
        self._splits = tuple(splits)
        self._shuffle = shuffle
        self._tuning = tuning

    def setup(self):
        relax_young_collections()  # a batch's rows should die young
        keep_freed_memory()  # buffers are freed and made again all the time
        self._assigner = SplitAssigner(self._dataset_name, self._splits)
        fs, path = fsspec.core.url_to_fs(self._run_dir)
        fs.makedirs(path, exist_ok=True)
        self._spilled_rows = Metrics.counter(METRICS_NAMESPACE, "rows_spilled")
        tuning = self._tuning
        self._buffer = spill.RunBuffer(self._assigner, shuffle=self._shuffle,
                                       sample_every=tuning.sample_every(),
                                       prefix_len=tuning.prefix_len,
                                       index_every=tuning.index_every)

    def start_bundle(self):
        self._new_buffer()

    def _new_buffer(self):
        self._generation = uuid.uuid4().hex
        self._buffer.clear()

    def _run_path(self, split_index: int) -> str:
        return spill.join_path(self._run_dir, f"{self._generation}-{split_index}.run")

    def process(self, batch):
        names = self._assigner.names
        held = self._buffer.add(batch)
        for split, num_records, num_bytes, sample in held:
            yield SpillRecord(names[split], self._run_path(split), num_records, num_bytes,
                              sample)
        if held:
            self._spilled_rows.inc(len(batch))
        if self._buffer.buffered_bytes >= self._tuning.run_bytes:
            self._flush()

    def finish_bundle(self):
        self._flush()

    def _flush(self):
        for split in self._buffer.splits_held():
            path = self._run_path(split)
            fs, fs_path = fsspec.core.url_to_fs(path)
            with fs.open(fs_path, "wb") as fileobj:
                # Read back once, soon: handed to the disk as it is written,
                # so that the cache does not grow by every run (page_cache).
                run = WriteBehind(fileobj)
                self._buffer.write(split, run)
                run.finish(durable=False)
        self._new_buffer()


def _key_by_split(item):
    return item.split, item


def _plan_split_buckets(split_spills, *, plan_dir: str, tuning: ShardTuning):
    """(split, [SpillRecord]) -> (run list file, BucketRange) per bucket.

    Writes the split's run list to a new file that every bucket reads,
    rather than copying it into each bucket's element.
    """
    split, records = split_spills
    records = list(records)
    runs = runs_of(records)
    ranges = plan_bucket_ranges(split, sum(run.num_bytes for run in runs),
                                sample_of(records, tuning.sample_size), tuning.bucket_bytes,
                                sample_bytes=tuning.sample_every(),
                                sample_size=tuning.sample_size)
    runs_file = spill.join_path(plan_dir, f"{uuid.uuid4().hex}.json")
    spill.write_run_list(runs_file, runs)
    return [(runs_file, bucket) for bucket in ranges]


def _key_sorted_bucket(item):
    _, bucket = item
    return bucket.split, item


def _plan_split_shards(split_buckets, shard_size: int, delete_runs: bool,
                       cut_at_rows: bool = False, gzip_level: int | None = None):
    """(split, [(run list file, BucketChunks)]) -> ShardSpec per shard:
    cut at rows (`plan_row_shards`; with `gzip_level`, shuffled gzip
    shards counted from the buckets' ratio sample) or at chunks
    (key-ordered gzip: the BucketChunks are units of cells, the buckets'
    interiors and the seams).

    With `delete_runs` (key-ordered gzip: every cell is written as chunk
    files by now), the split's runs are no longer needed and are deleted
    here rather than at the end: that halves the temporary disk space at
    the peak, and the shards that follow are written into memory the page
    cache has just released. Shards cut at rows are written from the runs
    themselves.
    """
    split, items = split_buckets
    items = list(items)
    buckets = [bucket for _, bucket in items]
    if not cut_at_rows:
        shards = plan_shards(split, buckets, shard_size)
    elif gzip_level is None:
        shards = plan_row_shards(split, buckets, shard_size)
    else:
        shards = plan_row_shards(split, buckets, shard_size, written_size=functools.partial(
            bucket_writers.gzip_written_size, level=gzip_level))
    if delete_runs:
        for runs_file in sorted({runs_file for runs_file, _ in items}):
            spill.remove_runs(runs_file)
    return shards


class _RunLists:
    """Run list file -> its runs, read once; buckets of one split share a
    run list, so a few are kept."""

    def __init__(self):
        self._lists: dict[str, list[RunInfo]] = {}

    def __call__(self, runs_file: str) -> list[RunInfo]:
        runs = self._lists.get(runs_file)
        if runs is None:
            if len(self._lists) >= 8:
                self._lists.clear()
            runs = self._lists[runs_file] = spill.read_run_list(runs_file)
        return runs


def _bucket_options(work_dir: str, tuning: ShardTuning) -> dict:
    """How buckets are sorted, for `bucket_sort.sort_bucket` and `write_bucket_rows`."""
    return {"scratch_dir": spill.join_path(work_dir, "merge"),
            "memory_bytes": tuning.memory_bytes, "fan_in": tuning.fan_in,
            "prefix_len": tuning.prefix_len, "index_every": tuning.index_every}


class _MeasureBucketFn(beam.DoFn):
    """(run list file, BucketRange) -> (run list file, BucketChunks): the
    bucket's size and largest row, added up from the runs without sorting
    (`bucket_sort.measure_bucket`; with `ratio_bound`, shuffled gzip, its
    rows in the ratio sample too). Shards cut at rows then write their
    rows of the bucket straight from the runs: one write and one read of
    every byte fewer; key-ordered gzip learns each bucket's first byte in
    the split, where its cells start."""

    def __init__(self, ratio_bound: int | None):
        self._ratio_bound = ratio_bound

    def setup(self):
        keep_freed_memory()  # buffers are freed and made again all the time
        self._runs = _RunLists()

    def process(self, task):
        runs_file, bucket = task
        yield runs_file, bucket_sort.measure_bucket(bucket, self._runs(runs_file), runs_file,
                                                    self._ratio_bound)


def _plan_split_cells(split_buckets):
    """(split, [(run list file, measured BucketChunks)]) -> (run list file,
    BucketRange, first byte in the split, bytes, split total) per bucket
    holding rows, in key order."""
    _, items = split_buckets
    placed, total = bucket_places(bucket for _, bucket in items)
    for bucket, start, size in placed:
        runs_file, bucket_range = spill.parse_bucket_reference(bucket.path)
        yield runs_file, bucket_range, start, size, total


class _SortCellsFn(beam.DoFn):
    """(run list file, BucketRange, start, bytes, total) -> ("unit", (run
    list file, BucketChunks)): the cells within the bucket, sorted and
    compressed into a chunk file (`bucket_sort.sort_bucket_cells`); and
    ("seam", ((split, cell), (bucket, start, end, total, rows, file))) for
    each cell it may share with a neighbour, its rows there written as
    they are to a small file (possibly empty) for `_CompressSeamFn`."""

    def __init__(self, work_dir: str, cell_bytes: int, gzip_level: int, tuning: ShardTuning):
        self._work_dir = work_dir
        self._cell_bytes = cell_bytes
        self._gzip_level = gzip_level
        self._tuning = tuning

    def setup(self):
        keep_freed_memory()  # buffers are freed and made again all the time
        self._runs = _RunLists()

    def process(self, task):
        runs_file, bucket, start, size, total = task
        unit, seams = bucket_sort.sort_bucket_cells(
            bucket, self._runs(runs_file), start=start, size=size, total=total,
            cell_bytes=self._cell_bytes, gzip_level=self._gzip_level,
            out_dir=spill.join_path(self._work_dir, "buckets"),
            **_bucket_options(self._work_dir, self._tuning))
        yield "unit", (runs_file, unit)
        for cell, (data, rows) in seams.items():
            path = spill.join_path(self._work_dir, "seams", f"{uuid.uuid4().hex}.seam")
            with spill.open_for_write(path) as fileobj:
                fileobj.write(data)
            yield "seam", ((bucket.split, cell),
                           (bucket.index, start, start + size, total, rows, path, runs_file))

    def finish_bundle(self):
        bucket_sort.release_read_arena()


class _CompressSeamFn(beam.DoFn):
    """((split, cell), [pieces]) -> (run list file, BucketChunks): the
    seam's chunk (`bucket_writers.join_seam`, each bucket's rows read from
    its seam file) in a chunk file of its own; nothing when no bucket had
    rows there."""

    def __init__(self, work_dir: str, cell_bytes: int, gzip_level: int):
        self._work_dir = work_dir
        self._cell_bytes = cell_bytes
        self._gzip_level = gzip_level

    def process(self, item):
        (split, cell), values = item
        values = list(values)  # a piece from each of a few buckets
        seam = bucket_writers.join_seam(split, cell, self._cell_bytes,
                                        (value[:6] for value in values), self._gzip_level,
                                        read=_read_file)
        if seam is None:
            return
        unit, data, rows = seam
        path = spill.join_path(self._work_dir, "buckets", f"{uuid.uuid4().hex}.chunks")
        with spill.open_for_write(path) as fileobj:
            fileobj.write(data)
        runs_file = values[0][6]  # a split's buckets share its run list
        yield runs_file, BucketChunks(split, unit, path, (Chunk(0, len(data), rows),))


def _read_file(path: str) -> bytes:
    with open(path, "rb") as fileobj:
        return fileobj.read()


def write_shard(spec: ShardSpec, *, staging_dir: str, temp_dir: str, compression: str,
                runs_of: Callable[[str], list[RunInfo]] | None = None,
                bucket_options: dict | None = None,
                gzip_level: int = tfrecord.DEFAULT_GZIP_LEVEL) -> dict:
    """Writes a shard, hashing as it goes, and puts it at its final name in
    `staging_dir` (`shard_files.publish_shard`): with `spec.cut`, the rows
    of each listed bucket that the shard holds, sorted from the runs
    (`bucket_sort.write_bucket_rows`; `runs_of`: run list file -> runs;
    `bucket_options`: see `_bucket_options`), for gzip into one gzip
    member at `gzip_level` (`tfrecord.GzipStream`); else its chunk
    ranges of bucket files, copied (key-ordered gzip). Returns the
    shard's metadata dict. Rerunning it writes the same bytes under the
    same final name."""
    name = SHARD_FILE_NAME.format(split=spec.split, index=spec.index, count=spec.count,
                                  suffix=tfrecord.suffix_for(compression))
    thresholds = row_shard_thresholds(*spec.cut) if spec.cut else None

    def write(out) -> int:
        num_examples = 0
        sink = out
        if spec.cut and compression == "gzip":
            sink = tfrecord.GzipStream(out, gzip_level)
        for path, offset, length in spec.pieces:
            measured = spill.parse_bucket_reference(path) if spec.cut else None
            if measured is not None:
                runs_file, bucket = measured
                rows, _ = bucket_sort.write_bucket_rows(sink, bucket, offset, thresholds,
                                                        spec.index, runs_of(runs_file),
                                                        **bucket_options)
                num_examples += rows
            else:
                _copy_range(out, path, offset, length, name)
        if not spec.cut:
            return spec.num_examples
        if sink is not out:
            sink.close()
        if not num_examples:
            raise run_files.RunFileError(f"{name}: no row of its buckets falls in it")
        return num_examples

    shard = publish_shard(name, write, staging_dir=staging_dir, temp_dir=temp_dir,
                          compression=compression)
    if not spec.cut and shard.num_bytes != spec.num_bytes:
        raise run_files.RunFileError(f"{name}: assembled {shard.num_bytes} bytes, planned "
                                 f"{spec.num_bytes}")
    return shard_metadata(spec.split, name, shard)


def _copy_range(out, path: str, offset: int, length: int, name: str) -> None:
    """Copies `length` bytes at `offset` of the file at `path` to `out`."""
    source_fs, source_path = fsspec.core.url_to_fs(path)
    with source_fs.open(source_path, "rb") as source:
        source.seek(offset)
        remaining = length
        while remaining:
            block = source.read(min(_COPY_BLOCK, remaining))
            if not block:
                raise run_files.RunFileError(
                    f"{path}: ends before byte {offset + length} while writing {name}")
            out.write(block)
            remaining -= len(block)
        drop_behind(source, offset, length)


class _WriteShardFn(beam.DoFn):
    """ShardSpec -> shard metadata dict (the file is at its final name)."""

    def __init__(self, staging_dir: str, temp_dir: str, compression: str, work_dir: str,
                 tuning: ShardTuning, gzip_level: int = tfrecord.DEFAULT_GZIP_LEVEL):
        self._staging_dir = staging_dir
        self._temp_dir = temp_dir
        self._compression = compression
        self._work_dir = work_dir
        self._tuning = tuning
        self._gzip_level = gzip_level

    def setup(self):
        keep_freed_memory()  # buffers are freed and made again all the time
        self._runs = _RunLists()
        self._examples = Metrics.counter(METRICS_NAMESPACE, "examples_written")
        self._bytes = Metrics.counter(METRICS_NAMESPACE, "bytes_written")
        self._shards = Metrics.counter(METRICS_NAMESPACE, "shards_written")

    def process(self, spec: ShardSpec):
        metadata = write_shard(spec, staging_dir=self._staging_dir, temp_dir=self._temp_dir,
                               compression=self._compression, runs_of=self._runs,
                               bucket_options=_bucket_options(self._work_dir, self._tuning),
                               gzip_level=self._gzip_level)
        self._examples.inc(metadata["num_examples"])
        self._bytes.inc(metadata["num_bytes"])
        self._shards.inc()
        yield metadata

    def finish_bundle(self):
        bucket_sort.release_read_arena()


def default_exchange(runner) -> str:
    """The exchange WriteShards picks for a runner (see WriteShards)."""
    return "files" if type(runner).__name__ in _LOCAL_RUNNERS else "shuffle"


def _local_temp_dir(temp_dir: str) -> str:
    """`temp_dir` when it is on the local disk, else the local temporary
    directory: the file exchange never writes its runs to an object store."""
    fs, _ = fsspec.core.url_to_fs(temp_dir)
    return temp_dir if isinstance(fs, LocalFileSystem) else tempfile.gettempdir()


def _remove_tree(path: str) -> None:
    fs, fs_path = fsspec.core.url_to_fs(path)
    if fs.exists(fs_path):
        fs.rm(fs_path, recursive=True)


def _remove_if_empty(path: str) -> None:
    fs, fs_path = fsspec.core.url_to_fs(path)
    try:
        if fs.exists(fs_path) and not fs.ls(fs_path):
            fs.rmdir(fs_path)
    except OSError:
        pass  # another writer's files are still there


def _cleanup(gathered, *, work_dir: str, shard_temp_dir: str, temp_roots: Sequence[str]):
    """(key, [metadata dict | None]) -> metadata dicts, sorted by file.

    Runs once every shard is written (it follows a GroupByKey of all their
    metadata, plus one None so that it runs even when nothing was written):
    deletes this writer's temporary files, then passes the metadata on.
    """
    _, items = gathered
    by_file = {item["file"]: item for item in items if item is not None}
    _remove_tree(work_dir)
    _remove_tree(shard_temp_dir)
    for root in temp_roots:  # only directories this writer may have created
        _remove_if_empty(root)
    return [by_file[name] for name in sorted(by_file)]


class WriteShards(beam.PTransform):
    """Writes ExampleBatches as sharded TFRecord files, one set per split.

    Takes: PCollection of ExampleBatch, a list of ``(key, example)`` with
    key bytes or None (None: the serialized example is the key).
    Gives: PCollection of ``{"split", "file", "num_examples", "num_bytes",
    "sha256"}``, one per shard file written to `staging_dir`.

    A row's split comes from a hash of its key salted by `dataset_name`;
    rows are ordered by that hash (shuffle=True) or by key bytes, ties
    broken by the example bytes. Each split gets ceil(bytes / shard_size)
    shards of near-equal size on disk.

    exchange: how rows move between workers. "shuffle": through the
    runner's GroupByKey (`exchange.ShuffleExchange`); nothing but the
    shards is written to the output store, and scratch space is each
    worker's local temporary directory. "files": sorted run files under
    `temp_dir` (default ``<staging_dir>/_tmp``; a local temporary directory
    when that is not on the local disk), read back by key range: for
    runners whose workers share one machine's disk and hold what crosses a
    GroupByKey in memory (the DirectRunner). "auto" (default): "files" on
    the DirectRunner (and the FnApiRunner), "shuffle" on every other
    runner. Both write the same bytes.

    spilled: the input is SpillRecords of sorted runs that another step
    wrote in this writer's run format (`spill.RunBuffer` with the same
    dataset name, splits, shuffle and tuning; the build cache's pieces),
    rather than ExampleBatches: the file exchange takes them as its own
    spill runs and never deletes them. Only with the file exchange.

    key_bounds: for key-ordered output on the shuffle exchange, bucket
    lower bounds known before the run (b"" first;
    `shard_plan.bucket_bounds_of` a sample of the input's order keys):
    rows go to their bucket as they are packed, instead of crossing the
    shuffle once more to wait for their split's sample. Any bounds give
    the same bytes (plain shards are cut at rows, gzip ones at cells of
    the framed bytes); bounds far from the data's quantiles only load
    some workers more than others. Ignored elsewhere.

    Shards are assembled under
    ``<staging_dir>/_tmp`` where the filesystem needs a temporary name (so
    the final rename stays on one filesystem); temporary files are removed
    at the end.
    """

    def __init__(self, staging_dir: str, *, dataset_name: str,
                 splits: Sequence[tuple[str, float]], shuffle: bool, shard_size: int,
                 compression: str, temp_dir: str | None = None,
                 gzip_level: int | None = None, tuning: ShardTuning | None = None,
                 exchange: str = "auto", spilled: bool = False,
                 key_bounds: Sequence[bytes] | None = None):
        super().__init__()
        self._key_bounds = tuple(key_bounds) if key_bounds else None
        self._spilled = spilled
        if exchange not in EXCHANGES:
            raise ValueError(f"exchange must be one of {EXCHANGES}, got {exchange!r}")
        if compression not in tfrecord.COMPRESSIONS:
            raise ValueError(f"compression must be one of {tfrecord.COMPRESSIONS}, "
                             f"got {compression!r}")
        if isinstance(shard_size, bool) or not isinstance(shard_size, int) or shard_size < 1:
            raise ValueError(f"shard_size must be a positive number of bytes, got {shard_size!r}")
        self._staging_dir = staging_dir.rstrip("/")
        self._dataset_name = dataset_name
        self._splits = validate_splits(splits)
        self._shuffle = bool(shuffle)
        self._shard_size = shard_size
        self._compression = compression
        self._temp_dir = (temp_dir or spill.join_path(self._staging_dir, TMP_DIR)).rstrip("/")
        self._gzip_level = tfrecord.DEFAULT_GZIP_LEVEL if gzip_level is None else gzip_level
        self._tuning = tuning or ShardTuning()
        self._exchange = exchange

    def expand(self, batches):
        tuning = self._tuning
        # One directory per application of the transform, so two writers (or
        # a rerun) sharing a temp_dir never see each other's files.
        writer_id = f"recordforge-shards-{uuid.uuid4().hex[:16]}"
        staging_temp = spill.join_path(self._staging_dir, TMP_DIR)
        shard_temp_dir = spill.join_path(staging_temp, writer_id, "shards")
        chunk_bytes = tuning.chunk_bytes(self._shard_size)
        exchange = self._exchange
        if exchange == "auto":
            exchange = default_exchange(batches.pipeline.runner)
        if self._spilled and exchange != "files":
            raise ValueError("WriteShards(spilled=True) takes sorted runs, which only the "
                             "files exchange reads; this runner's exchange is "
                             f"{exchange!r}")
        if exchange == "shuffle":
            work_dir = shard_temp_dir
            shards = batches | "Exchange" >> ShuffleExchange(
                self._staging_dir, shard_temp_dir=shard_temp_dir,
                dataset_name=self._dataset_name, splits=self._splits, shuffle=self._shuffle,
                shard_size=self._shard_size, compression=self._compression,
                chunk_bytes=chunk_bytes, gzip_level=self._gzip_level, tuning=tuning,
                key_bounds=self._key_bounds)
        else:
            work_dir = spill.join_path(_local_temp_dir(self._temp_dir), writer_id)
            shards = self._file_exchange(batches, work_dir, shard_temp_dir, chunk_bytes)
        return self._cleanup(batches, shards, work_dir, staging_temp, writer_id)

    def _file_exchange(self, batches, work_dir: str, shard_temp_dir: str, chunk_bytes: int):
        tuning = self._tuning
        cut_at_rows = cuts_at_rows(self._shuffle, self._compression)
        gzip = self._compression == "gzip"
        if self._spilled:
            spills = batches  # SpillRecord of runs that are not this writer's to delete
        else:
            spills = batches | "Spill" >> beam.ParDo(_SpillFn(
                spill.join_path(work_dir, "runs"), self._dataset_name, self._splits,
                self._shuffle, tuning))  # SpillRecord
        ratio_bound = tuning.ratio_sample_bound if gzip and self._shuffle else None
        measured = (spills
                    | "KeySpills" >> beam.Map(_key_by_split)
                    | "GroupSpills" >> beam.GroupByKey()  # (split, [SpillRecord])
                    | "PlanBuckets" >> beam.FlatMap(
                        _plan_split_buckets, plan_dir=spill.join_path(work_dir, "plans"),
                        tuning=tuning)  # (run list file, BucketRange)
                    | "SpreadBuckets" >> beam.Reshuffle()
                    | "SortBuckets" >> beam.ParDo(_MeasureBucketFn(ratio_bound))
                    | "KeyBuckets" >> beam.Map(_key_sorted_bucket)
                    | "GroupBuckets" >> beam.GroupByKey())  # (split, [(run list, BucketChunks)])
        if not cut_at_rows:
            measured = self._cells(measured, work_dir, chunk_bytes)
        return (measured
                | "PlanShards" >> beam.FlatMap(
                    _plan_split_shards, self._shard_size,
                    delete_runs=not cut_at_rows and not self._spilled,
                    cut_at_rows=cut_at_rows,
                    gzip_level=self._gzip_level if gzip else None)
                | "SpreadShards" >> beam.Reshuffle()  # ShardSpec
                | "WriteShardFiles" >> beam.ParDo(_WriteShardFn(
                    self._staging_dir, shard_temp_dir, self._compression, work_dir,
                    tuning, self._gzip_level)))  # metadata dict

    def _cells(self, measured, work_dir: str, cell_bytes: int):
        """Key-ordered gzip: (split, [(run list, measured BucketChunks)]) ->
        (split, [(run list, BucketChunks)]) of the split's cells, in units
        (the buckets' interiors and the seams)."""
        # ("unit", (run list, BucketChunks)) | ("seam", ((split, cell), piece))
        cells = (measured
                 | "PlanCells" >> beam.FlatMap(_plan_split_cells)
                 | "SpreadCells" >> beam.Reshuffle()
                 | "SortCells" >> beam.ParDo(_SortCellsFn(
                     work_dir, cell_bytes, self._gzip_level, self._tuning)))
        units = (cells
                 | "UnitsOnly" >> beam.Filter(lambda item: item[0] == "unit")
                 | "Units" >> beam.Map(lambda item: item[1]))
        seams = (cells
                 | "SeamsOnly" >> beam.Filter(lambda item: item[0] == "seam")
                 | "Seams" >> beam.Map(lambda item: item[1])
                 | "GroupSeams" >> beam.GroupByKey()  # ((split, cell), [pieces])
                 | "CompressSeams" >> beam.ParDo(_CompressSeamFn(
                     work_dir, cell_bytes, self._gzip_level)))
        return ((units, seams)
                | "FlattenUnits" >> beam.Flatten()
                | "KeyUnits" >> beam.Map(_key_sorted_bucket)
                | "GroupUnits" >> beam.GroupByKey())  # (split, [(run list, BucketChunks)])

    def _cleanup(self, batches, shards, work_dir: str, staging_temp: str, writer_id: str):
        # The trigger makes the gather non-empty, so cleanup also runs when
        # there is nothing to write.
        trigger = batches.pipeline | "CleanupTrigger" >> beam.Create([None])
        return ((shards, trigger)
                | "FlattenShards" >> beam.Flatten()
                | "KeyAll" >> beam.Map(lambda item: ("shards", item))
                | "GatherShards" >> beam.GroupByKey()  # ("shards", [metadata | None])
                | "Cleanup" >> beam.FlatMap(
                    _cleanup, work_dir=work_dir,
                    shard_temp_dir=spill.join_path(staging_temp, writer_id),
                    temp_roots=(staging_temp,)))
