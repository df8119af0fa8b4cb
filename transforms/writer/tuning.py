"""The shard writer's internal sizes (`ShardTuning`), and the bounds every plan keeps.

The lowest room of the writer: every other module takes a `ShardTuning`
or these constants, and this module imports none of them.
"""

from __future__ import annotations

import dataclasses

__all__ = ["INPUT_BYTES_PER_HASH_BUCKET", "KEY_GZIP_BUCKET_CELLS", "MAX_BUCKETS",
           "RATIO_SAMPLE_BOUND", "ShardJob", "ShardTuning"]

# The most buckets a split is sorted in, by key ranges or hash ranges
# (`ShardTuning.for_input`): 4,096 workers at once, and per-split plans of
# a few numbers a bucket that do not grow with the data.
MAX_BUCKETS = 4096

# K of shuffled gzip output's ratio sample (`ratio_sample`): rows whose
# digest starts with six zero bits, 1/64 of a split, so a split of 1 GiB
# or more samples `ratio_sample.RATIO_SAMPLE_LIMIT` and a smaller one 1/64
# of its rows. Small samples misjudge small splits
# (benchmarks/bench_ratio_sample.py: a 3 MB split's estimate off by up to
# 3.6% with 1/64, 6.9% with 1/256); at most 1/64 of the data, and
# RATIO_SAMPLE_LIMIT of a bundle, crosses the combine.
RATIO_SAMPLE_BOUND = 1 << 122

# ShardTuning.for_input: hash buckets per byte of input (at most
# MAX_BUCKETS).
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
      framed bytes, at most max_chunk_bytes (`cells.cells_of_rows`).
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
      whose digest is below it, `RATIO_SAMPLE_BOUND`), from
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
        least the default 256 and at most `MAX_BUCKETS`. A bucket is
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


@dataclasses.dataclass(frozen=True)
class ShardJob:
    """What `WriteShards` asks of either exchange: which rows go where,
    and how they are cut. `shard_temp_dir` holds a shard only while it is
    written, on filesystems that need a temporary name; `chunk_bytes`:
    the cells of key-ordered gzip (`ShardTuning.chunk_bytes`); `index`:
    each shard gets its index file (uncompressed output only,
    `shard_files.publish_shard`); `shard_count_multiple`: each split's
    shard count is a multiple of it (`shard_cuts.row_shard_count`);
    `file_format`: "tfrecord" or "array_record" (`shard_files.publish_shard`)."""

    staging_dir: str
    shard_temp_dir: str
    dataset_name: str
    splits: tuple[tuple[str, float], ...]
    shuffle: bool
    shard_size: int
    compression: str
    chunk_bytes: int
    gzip_level: int
    tuning: ShardTuning
    index: bool = False
    shard_count_multiple: int = 1
    file_format: str = "tfrecord"
