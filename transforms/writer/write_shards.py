"""WriteShards: the writer's entry transform, which picks an exchange and cleans up after it."""

from __future__ import annotations

import tempfile
import uuid
from typing import Callable, Sequence

import apache_beam as beam
import fsspec
from fsspec.implementations.local import LocalFileSystem

from .. import array_record, tfrecord
from ..layout import TMP_DIR
from ..splits import validate_splits
from .file_exchange import FileExchange
from .shuffle_exchange import ShuffleExchange
from .spill import join_path
from .tuning import ShardJob, ShardTuning

__all__ = ["EXCHANGES", "WriteShards", "default_exchange"]

EXCHANGES = ("auto", "files", "shuffle")
# Runners whose workers are processes of one machine: they share its disk,
# and keep what crosses a GroupByKey in memory.
# A class made from the FnApiRunner counts too (`default_exchange`).
_LOCAL_RUNNERS = frozenset({"FnApiRunner", "DirectRunner", "SwitchingDirectRunner",
                            "BundleBasedDirectRunner"})


def default_exchange(runner) -> str:
    """The exchange WriteShards picks for a runner (see WriteShards): the
    file exchange on a local runner, or on a class made from Beam's
    FnApiRunner (a local engine under another name); the shuffle exchange
    on any other, a class made from another local runner included (Beam's
    DaskRunner is made from its BundleBasedDirectRunner, and its workers
    share no disk). Beam's FnApiRunner with worker processes was seen to
    lose some of a step's outputs on their way to a GroupByKey when ~2 GB
    crossed it, which the shuffle exchange sends all rows through (its
    buckets then fail: `shuffle_packets.sorted_bucket`)."""
    local = (type(runner).__name__ in _LOCAL_RUNNERS
             or any(cls.__name__ == "FnApiRunner" for cls in type(runner).__mro__))
    return "files" if local else "shuffle"


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


def _cleanup(gathered, *, work_dir: str, shard_temp_dir: str, temp_roots: Sequence[str],
             finish: Callable | None = None):
    """(key, [metadata dict | trigger element]) -> metadata dicts, sorted by
    file (each given as ``finish(metadata)`` with `finish`).

    Runs once every shard is written (it follows a GroupByKey of all their
    metadata, plus a trigger's element so that it runs even when nothing was
    written):
    deletes this writer's temporary files, then passes the metadata on.
    """
    _, items = gathered
    by_file = {item["file"]: item for item in items if isinstance(item, dict)}
    _remove_tree(work_dir)
    _remove_tree(shard_temp_dir)
    for root in temp_roots:  # only directories this writer may have created
        _remove_if_empty(root)
    shards = [by_file[name] for name in sorted(by_file)]
    return shards if finish is None else [finish(shard) for shard in shards]


class WriteShards(beam.PTransform):
    """Writes ExampleBatches as sharded TFRecord files, one set per split.

    Takes: PCollection of ExampleBatch, a list of ``(key, example)`` with
    key bytes or None (None: the serialized example is the key).
    Gives: PCollection of ``{"split", "file", "num_examples", "num_bytes",
    "sha256"}`` (and ``"index": {"file", "num_bytes", "sha256"}`` for a
    shard with an index file), one per shard file written to `staging_dir`.

    index: each shard gets ``<shard>.index`` beside it (one ``"<offset>
    <framed length>"`` line per record, the format DALI and the `tfrecord`
    package read; `shard_files.publish_shard`). None (default): for
    uncompressed output only; True with gzip is a ValueError (a gzip
    file has no random access).

    file_format: "tfrecord" (default) or "array_record": each shard an
    ArrayRecord file ``<split>-<index:05d>-of-<count:05d>.array_record``
    holding the same records in the same order (`shard_files.publish_shard`;
    uncompressed only, and no index file: the format has its own).

    shard_count_multiple: each split's shard count is a multiple of it
    (file-level sharding across that many hosts; `shard_cuts.row_shard_count`):
    rounded up, shards then stay at most `shard_size`. A split whose
    records cannot fill that many shards with a record each fails the
    pipeline (`shard_cuts.ShardCountError`, naming the split).

    A row's split comes from a hash of its key salted by `dataset_name`;
    rows are ordered by that hash (shuffle=True) or by key bytes, ties
    broken by the example bytes. Each split gets ceil(bytes / shard_size)
    shards of near-equal size on disk.

    exchange: how rows move between workers. "shuffle": through the
    runner's GroupByKey (`shuffle_exchange.ShuffleExchange`); nothing but the
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
    `bucket_plan.bucket_bounds_of` a sample of the input's order keys):
    rows go to their bucket as they are packed, instead of crossing the
    shuffle once more to wait for their split's sample. Any bounds give
    the same bytes (plain shards are cut at rows, gzip ones at cells of
    the framed bytes); bounds far from the data's quantiles only load
    some workers more than others. Ignored elsewhere.

    spread: the file exchange reshuffles its buckets and shards over the
    runner's workers; False where there is one worker (nothing to spread
    over: `FileExchange`). The bytes are the same either way.

    finish: what each shard's metadata dict is given as (None: the dict),
    in the step that ends the writer, not in a step (a ParDo) of its own.

    trigger: a PCollection of at least one element (anything but a dict)
    that makes the cleanup run even when nothing was written; None: the
    writer makes its own (a ``beam.Create``, a runner stage of its own), so
    a graph with other steps that need one can share it
    (`graph.stage_build`).

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
                 key_bounds: Sequence[bytes] | None = None, index: bool | None = None,
                 shard_count_multiple: int = 1, file_format: str = "tfrecord",
                 spread: bool = True, finish: Callable | None = None,
                 trigger: beam.PCollection | None = None):
        super().__init__()
        self._finish = finish
        self._trigger = trigger
        self._spread = spread
        array_record.check_file_format(file_format)
        if file_format == "array_record" and (compression != "none" or index):
            raise ValueError("array_record output takes neither gzip nor an index file: "
                             "it compresses its chunks and indexes its records itself")
        self._file_format = file_format
        if isinstance(shard_count_multiple, bool) or not isinstance(shard_count_multiple, int) \
                or shard_count_multiple < 1:
            raise ValueError(f"shard_count_multiple must be a positive integer, got "
                             f"{shard_count_multiple!r}")
        self._shard_count_multiple = shard_count_multiple
        self._index = (tfrecord.indexable(compression) and file_format == "tfrecord"
                       if index is None else bool(index))
        if self._index and not tfrecord.indexable(compression):
            raise ValueError(f"index=True needs uncompressed output: {compression} has no "
                             "random access, so no index")
        self._key_bounds = tuple(key_bounds) if key_bounds else None
        self._spilled = spilled
        if exchange not in EXCHANGES:
            raise ValueError(f"exchange must be one of {EXCHANGES}, got {exchange!r}")
        tfrecord.check_compression(compression)
        if isinstance(shard_size, bool) or not isinstance(shard_size, int) or shard_size < 1:
            raise ValueError(f"shard_size must be a positive number of bytes, got {shard_size!r}")
        self._staging_dir = staging_dir.rstrip("/")
        self._dataset_name = dataset_name
        self._splits = validate_splits(splits)
        self._shuffle = bool(shuffle)
        self._shard_size = shard_size
        self._compression = compression
        self._temp_dir = (temp_dir or join_path(self._staging_dir, TMP_DIR)).rstrip("/")
        self._gzip_level = tfrecord.DEFAULT_GZIP_LEVEL if gzip_level is None else gzip_level
        self._tuning = tuning or ShardTuning()
        self._exchange = exchange

    def expand(self, batches):
        tuning = self._tuning
        # One directory per application of the transform, so two writers (or
        # a rerun) sharing a temp_dir never see each other's files.
        writer_id = f"recordforge-shards-{uuid.uuid4().hex[:16]}"
        staging_temp = join_path(self._staging_dir, TMP_DIR)
        shard_temp_dir = join_path(staging_temp, writer_id, "shards")
        chunk_bytes = tuning.chunk_bytes(self._shard_size)
        exchange = self._exchange
        if exchange == "auto":
            exchange = default_exchange(batches.pipeline.runner)
        if self._spilled and exchange != "files":
            raise ValueError("WriteShards(spilled=True) takes sorted runs, which only the "
                             "files exchange reads; this runner's exchange is "
                             f"{exchange!r}")
        job = ShardJob(self._staging_dir, shard_temp_dir, self._dataset_name, self._splits,
                       self._shuffle, self._shard_size, self._compression, chunk_bytes,
                       self._gzip_level, tuning, self._index, self._shard_count_multiple,
                       self._file_format)
        if exchange == "shuffle":
            work_dir = shard_temp_dir
            shards = batches | "Exchange" >> ShuffleExchange(job, key_bounds=self._key_bounds)
        else:
            work_dir = join_path(_local_temp_dir(self._temp_dir), writer_id)
            shards = batches | "FileExchange" >> FileExchange(job, work_dir=work_dir,
                                                              spilled=self._spilled,
                                                              spread=self._spread)
        return self._cleanup(batches, shards, work_dir, staging_temp, writer_id)

    def _cleanup(self, batches, shards, work_dir: str, staging_temp: str, writer_id: str):
        # The trigger makes the gather non-empty, so cleanup also runs when
        # there is nothing to write.
        trigger = self._trigger
        if trigger is None:
            trigger = batches.pipeline | "CleanupTrigger" >> beam.Create([None])
        return ((shards, trigger)
                | "FlattenShards" >> beam.Flatten()
                | "KeyAll" >> beam.Map(lambda item: ("shards", item))
                | "GatherShards" >> beam.GroupByKey()  # ("shards", [metadata | None])
                | "Cleanup" >> beam.FlatMap(
                    _cleanup, work_dir=work_dir,
                    shard_temp_dir=join_path(staging_temp, writer_id),
                    temp_roots=(staging_temp,), finish=self._finish))
