"""The file exchange: rows meet their bucket through sorted run files on the local disk.

The exchange `WriteShards` uses on runners whose workers share one
machine's disk and keep what crosses a GroupByKey in memory (the
DirectRunner). Example bytes travel only inside the Spill step and through
files; every PCollection after it holds small metadata. This module wires
the steps and holds the spill, planning and measuring ones; the cell steps
are in `file_cells`, the shard writing step in `file_shards`. Steps and
the elements between them::

  ExampleBatch (or the build cache's SpillRecords, `spilled`)
  | Spill            -> SpillRecord    rows hashed, split, buffered; each full
                                       buffer is sorted and written as one run
                                       file per split (fused with the source)
  | KeySpills | GroupSpills            -> (split, [SpillRecord])
  | PlanBuckets      -> (run list file, BucketRange)   key ranges of ~bucket_bytes
  | SpreadBuckets | MeasureBuckets     -> (split, (run list file, BucketChunks))
                                       each range read from every run of its
                                       split and measured, not sorted (shuffled
                                       gzip: its rows in the ratio sample read
                                       too), keyed by its split
  | GroupBuckets                       -> (split, [(run list file, BucketChunks)])
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

There are no side inputs (Beam's Dask runner recomputes their producers
and can repeat their elements): the run list each bucket needs is a small
file written by the planning step. And no element is emitted from
`finish_bundle` (the Dask runner drops those): the Spill step reports each
batch's rows as it receives them, naming the run file its current buffer
will be written to by the end of the bundle.
"""

from __future__ import annotations

import functools
import uuid

import apache_beam as beam
import fsspec

from ..page_cache import WriteBehind
from ..splits import SplitAssigner
from . import bucket_output, sorting, spill
from .bucket_plan import plan_bucket_ranges, runs_of, sample_of
from .elements import SpillRecord
from .file_cells import CompressSeamFn, SortRunCellsFn, plan_split_cells
from .file_runs import RunLists
from .file_shards import WriteShardFn
from .shard_cuts import cuts_at_rows, plan_row_shards, plan_shards
from .step_setup import counter, set_up_worker
from .tuning import ShardJob, ShardTuning

__all__ = ["FileExchange"]



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
        set_up_worker(rows_die_young=True)
        self._assigner = SplitAssigner(self._dataset_name, self._splits)
        fs, path = fsspec.core.url_to_fs(self._run_dir)
        fs.makedirs(path, exist_ok=True)
        self._spilled_rows = counter("rows_spilled")
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
                       cut_at_rows: bool = False, gzip_level: int | None = None,
                       multiple: int = 1):
    """(split, [(run list file, BucketChunks)]) -> ShardSpec per shard:
    cut at rows (`plan_row_shards`; with `gzip_level`, shuffled gzip
    shards counted from the buckets' ratio sample) or at chunks
    (key-ordered gzip: the BucketChunks are units of cells, the buckets'
    interiors and the seams); their count a multiple of `multiple`.

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
        shards = plan_shards(split, buckets, shard_size, multiple=multiple)
    elif gzip_level is None:
        shards = plan_row_shards(split, buckets, shard_size, multiple=multiple)
    else:
        shards = plan_row_shards(split, buckets, shard_size, written_size=functools.partial(
            bucket_output.gzip_written_size, level=gzip_level), multiple=multiple)
    if delete_runs:
        for runs_file in sorted({runs_file for runs_file, _ in items}):
            spill.remove_runs(runs_file)
    return shards


class _MeasureBucketFn(beam.DoFn):
    """(run list file, BucketRange) -> (split, (run list file, BucketChunks)),
    keyed for the split's GroupByKey here rather than in a ParDo of its own:
    the bucket's size and largest row, added up from the runs without sorting
    (`sorting.measure_bucket`; with `ratio_bound`, shuffled gzip, its
    rows in the ratio sample too). Shards cut at rows then write their
    rows of the bucket straight from the runs: one write and one read of
    every byte fewer; key-ordered gzip learns each bucket's first byte in
    the split, where its cells start."""

    def __init__(self, ratio_bound: int | None):
        self._ratio_bound = ratio_bound

    def setup(self):
        set_up_worker()
        self._runs = RunLists()

    def process(self, task):
        runs_file, bucket = task
        yield _key_sorted_bucket((runs_file, sorting.measure_bucket(
            bucket, self._runs(runs_file), runs_file, self._ratio_bound)))


class FileExchange(beam.PTransform):
    """ExampleBatch (or, `spilled`, SpillRecords of the build cache's
    runs) -> shard metadata dict, through sorted run files under
    `work_dir` (the steps in the module docstring). Gives the bytes the
    shuffle exchange gives. spread: the Spread steps reshuffle the
    buckets, cells and shards over the runner's workers; False where there
    is one worker (each Reshuffle, four ParDos and a runner stage, would
    spread nothing). The bytes are the same either way."""

    def __init__(self, job: ShardJob, *, work_dir: str, spilled: bool, spread: bool = True):
        super().__init__()
        self._job = job
        self._work_dir = work_dir
        self._spilled = spilled
        self._spread = spread

    def _spread_step(self, items, label: str):
        """`items` reshuffled over the workers under `label`; as they are
        where there is nothing to spread over (a step not taken, not a
        pass-through ParDo: that would cost what the Reshuffle saves)."""
        return items | label >> beam.Reshuffle() if self._spread else items

    def expand(self, batches):
        tuning = self._job.tuning
        work_dir, chunk_bytes = self._work_dir, self._job.chunk_bytes
        cut_at_rows = cuts_at_rows(self._job.shuffle, self._job.compression)
        gzip = self._job.compression == "gzip"
        if self._spilled:
            spills = batches  # SpillRecord of runs that are not this writer's to delete
        else:
            spills = batches | "Spill" >> beam.ParDo(_SpillFn(
                spill.join_path(work_dir, "runs"), self._job.dataset_name, self._job.splits,
                self._job.shuffle, tuning))  # SpillRecord
        ratio_bound = tuning.ratio_sample_bound if gzip and self._job.shuffle else None
        ranges = (spills
                  | "KeySpills" >> beam.Map(_key_by_split)
                  | "GroupSpills" >> beam.GroupByKey()  # (split, [SpillRecord])
                  | "PlanBuckets" >> beam.FlatMap(
                      _plan_split_buckets, plan_dir=spill.join_path(work_dir, "plans"),
                      tuning=tuning))  # (run list file, BucketRange)
        measured = (self._spread_step(ranges, "SpreadBuckets")
                    | "MeasureBuckets" >> beam.ParDo(_MeasureBucketFn(ratio_bound))
                    | "GroupBuckets" >> beam.GroupByKey())  # (split, [(run list, BucketChunks)])
        if not cut_at_rows:
            measured = self._cells(measured, work_dir, chunk_bytes)
        specs = measured | "PlanShards" >> beam.FlatMap(
            _plan_split_shards, self._job.shard_size,
            delete_runs=not cut_at_rows and not self._spilled,
            cut_at_rows=cut_at_rows,
            gzip_level=self._job.gzip_level if gzip else None,
            multiple=self._job.shard_count_multiple)  # ShardSpec
        return (self._spread_step(specs, "SpreadShards")
                | "WriteShardFiles" >> beam.ParDo(WriteShardFn(
                    self._job.staging_dir, self._job.shard_temp_dir, self._job.compression, work_dir,
                    tuning, self._job.gzip_level, self._job.index,
                    self._job.file_format)))  # metadata dict

    def _cells(self, measured, work_dir: str, cell_bytes: int):
        """Key-ordered gzip: (split, [(run list, measured BucketChunks)]) ->
        (split, [(run list, BucketChunks)]) of the split's cells, in units
        (the buckets' interiors and the seams)."""
        # ("unit", (run list, BucketChunks)) | ("seam", ((split, cell), piece))
        planned = measured | "PlanCells" >> beam.FlatMap(plan_split_cells)
        cells = (self._spread_step(planned, "SpreadCells")
                 | "SortCells" >> beam.ParDo(SortRunCellsFn(
                     work_dir, cell_bytes, self._job.gzip_level, self._job.tuning)))
        units = (cells
                 | "UnitsOnly" >> beam.Filter(lambda item: item[0] == "unit")
                 | "Units" >> beam.Map(lambda item: item[1]))
        seams = (cells
                 | "SeamsOnly" >> beam.Filter(lambda item: item[0] == "seam")
                 | "Seams" >> beam.Map(lambda item: item[1])
                 | "GroupSeams" >> beam.GroupByKey()  # ((split, cell), [pieces])
                 | "CompressSeams" >> beam.ParDo(CompressSeamFn(
                     work_dir, cell_bytes, self._job.gzip_level)))
        return ((units, seams)
                | "FlattenUnits" >> beam.Flatten()
                | "KeyUnits" >> beam.Map(_key_sorted_bucket)
                | "GroupUnits" >> beam.GroupByKey())  # (split, [(run list, BucketChunks)])
