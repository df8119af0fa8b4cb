"""The elements that pass between the shard writer's Beam steps.

They carry file names, counts and a few key prefixes, never example bytes:
runners such as the DirectRunner keep whatever crosses a GroupByKey or
Reshuffle in memory.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["BucketChunks", "BucketRange", "Chunk", "RunInfo", "SampleEntry", "ShardSpec",
           "SpillRecord"]


class SampleEntry(NamedTuple):
    """One sampled row, used only to place bucket boundaries.

    priority: ``(size << 64) // (u64 + 1)`` where u64 comes from the row's
    hash, so the largest priorities form a byte-weighted random sample that
    depends on content alone. prefix: the row's order key cut to the prefix
    length. size: the row's framed size in bytes.
    """

    priority: int
    prefix: bytes
    size: int


class SpillRecord(NamedTuple):
    """What the spill step says after buffering one input batch's rows of
    one split: they go to the run file `path` (written by the same bundle),
    which then holds `num_records` rows of `num_bytes` framed bytes in all.

    The counts are running totals, so a run's size is the largest reported
    and a record delivered twice changes nothing.
    """

    split: str
    path: str
    num_records: int
    num_bytes: int
    sample: tuple[SampleEntry, ...]  # this batch's sampled rows of the split
    kept: bool = False  # the run is the build cache's, read again by later builds


class RunInfo(NamedTuple):
    """One sorted run file of a split."""

    split: str
    path: str
    num_records: int
    num_bytes: int
    kept: bool = False  # the build cache's run (`SpillRecord.kept`)


class BucketRange(NamedTuple):
    """A key range of a split sorted as one unit: ``lo <= key < hi``
    (`hi` None: no upper bound). `index` orders the buckets of a split."""

    split: str
    index: int
    lo: bytes
    hi: bytes | None


class Chunk(NamedTuple):
    """A run of whole TFRecords in a bucket file: plain framed records or one
    complete gzip member. Offsets and lengths are bytes on disk."""

    offset: int
    length: int
    num_records: int


class BucketChunks(NamedTuple):
    """A sorted bucket written as consecutive chunks in the file `path`;
    max_row: its largest framed row, when shards are cut at rows
    (`plan_row_shards`); ratio_sample: its rows in the split's gzip ratio
    sample, ``((order key, framed record), ...)`` (`RATIO_SAMPLE_BOUND`)."""

    split: str
    index: int
    path: str
    chunks: tuple[Chunk, ...]
    max_row: int = 0
    ratio_sample: tuple = ()


class ShardSpec(NamedTuple):
    """One output shard: the byte ranges to concatenate, in order.

    pieces: ``(bucket file, offset, length)``. With `cut` ``(total bytes,
    shard count)`` of the split (shards cut at rows, `plan_row_shards`), a
    piece is ``(bucket, the bucket's first byte in the split, its bytes)``
    and the shard holds those of the bucket's rows whose midpoint falls in
    it; num_examples and num_bytes are then -1, known once written.
    """

    split: str
    index: int
    count: int
    pieces: tuple[tuple[str, int, int], ...]
    num_examples: int
    num_bytes: int
    cut: tuple[int, int] | None = None
