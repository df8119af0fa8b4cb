"""The shard writer: ExampleBatches in, sorted, size-balanced TFRecord shards out.

`WriteShards` takes a PCollection of ExampleBatch (a list of
``(key: bytes | None, example: bytes)``) and writes
``<staging_dir>/<split>-<index:05d>-of-<count:05d>.tfrecord[.gz]`` (and, for
uncompressed shards, each one's index file ``<shard>.index``), giving one
metadata dict per shard. Outside code enters the writer only here.

A row's way through the wing, module by module (lowest level last)::

  write_shards     WriteShards: picks an exchange for the runner, cleans up
    |
    +-- file_exchange     local runners: rows meet their bucket through
    |     |               sorted run files on the local disk
    |     +-- file_cells     key-ordered gzip: a bucket's cells and seams
    |     +-- file_shards    a shard written from its buckets' runs or chunks
    |     +-- file_runs      a split's run list read once, bucket sort options
    |     +-- spill          buffer a bundle's rows, write them as runs
    |     +-- run_format     the sorted run file format (also the build
    |     |                  cache's pieces)
    |     +-- run_kernel     the same run file written by the native kernels
    |     +-- sorting        a bucket's rows sorted from its runs
    |     +-- run_merge      a key-ordered bucket's runs merged natively
    +-- shuffle_exchange  other runners: rows meet their bucket through the
          |               runner's shuffle
          +-- shuffle_steps    packing rows for the shuffle, writing shards
          +-- shuffle_packets  the packets the shuffle moves, sorted per bucket
          +-- shuffle_rows     shards cut at rows (the default)
          +-- shuffle_cells    key-ordered lanes, routing, and gzip cells
    both exchanges, in the order a row meets them:
      prepare        split, order key, framed size and sample of each row
      bucket_plan    which bucket sorts a row (key or hash ranges)
      row_order      the (key, example) order within a bucket
      bucket_output  where sorted rows go: a shard's rows, or gzip cells
      cells          which cell a row is compressed in (key-ordered gzip)
      ratio_sample   how many bytes shuffled gzip will take on disk
      shard_cuts     which shard a row goes to
      shard_files    a shard (and its index) put at its final name in staging, hashed
      elements       what passes between the Beam steps (never example bytes)
      step_setup     each step's memory habits and counters
      tuning         ShardTuning and the bounds every plan keeps

Both exchanges write the same bytes: every decision (split, order key,
bucket, cell, shard) is a function of row content and config only, never
of arrival order, bundling or worker count. Which rows share a split is
the rule in `transforms.splits`, which the step that makes Examples uses
too. Example bytes travel only inside the first step and through files or
the runner's shuffle; every other PCollection holds small metadata.

Retries: every file is written under a fresh uuid name and only files
named by a committed bundle's output are read, so a retried bundle can
neither lose nor duplicate rows; shards appear at their final names by
rename, complete.
"""

from .bucket_plan import bucket_bounds_of
from .elements import SampleEntry, SpillRecord
from .run_format import KEY_VARIABLE, RunFile
from .run_kernel import CheckedFile
from .spill import RunBuffer
from .tuning import ShardTuning
from .write_shards import EXCHANGES, WriteShards, default_exchange

__all__ = ["EXCHANGES", "KEY_VARIABLE", "CheckedFile", "RunBuffer", "RunFile", "SampleEntry", "ShardTuning",
           "SpillRecord", "WriteShards", "bucket_bounds_of", "default_exchange"]
