"""Which shard a row goes to: a split's shards cut at rows, or between chunks.

Every cut is a function of row content and config only (never of arrival
order, bundling or worker count), which is what makes the written shards
byte-identical on every runner.

Shards cut at rows (all but key-ordered gzip): when rows are written as
plain framed records (or, shuffled, as gzip shards counted from the ratio
sample), a shard is a run of rows cut where the rows' byte midpoints cross
i * total / count: row r (global start s, framed size n) belongs to shard
floor(count * (2s + n) / (2 * total)). That is a function of each row's
own place in the split alone, so a worker holding any key range of the
split, and knowing how many bytes come before it, places its rows without
seeing the others, and the cuts do not depend on how rows were bucketed.

Key-ordered gzip is cut between chunks (`cells`), each chunk going to the
shard holding its midpoint, by the same rule.
"""

from __future__ import annotations

from typing import Callable, Iterable

import numpy as np

from .bucket_plan import bucket_places, one_per_bucket
from .elements import BucketChunks, Chunk, ShardSpec
from .ratio_sample import estimated_written_bytes, ratio_sample_of, within_limit

__all__ = ["ShardCountError", "cuts_at_rows", "plan_row_shards", "plan_shards",
           "row_shard_count",
           "row_shard_thresholds", "shards_of_rows", "shards_touched"]


def cuts_at_rows(shuffle: bool, compression: str) -> bool:
    """Whether a split's shards are cut at rows (shuffled output, plain or
    gzip, and key-ordered plain output) rather than at chunks (key-ordered
    gzip output). A plain shard's bytes are its framed rows, so rows cut
    at their place in the split give exact sizes in any order. Gzip
    shards cut at rows are counted from a ratio sample and hold a 1/N
    share of the framed bytes: shuffled, every shard is a random share
    of the split and compresses alike; in key order a shard's rows are a
    range of keys, whose ratio may differ from the next range's, so
    their sizes would miss the ±10% the shards must keep. Key-ordered
    gzip is cut between chunks (cells of the framed bytes), measured once
    compressed."""
    return bool(shuffle) or compression != "gzip"


class ShardCountError(ValueError):
    """A split cannot be cut into a multiple of `output.shard_count_multiple`
    shards that each hold a record."""


def row_shard_count(total_bytes: int, shard_size: int, max_row_bytes: int,
                    written_bytes: int | None = None, *, multiple: int = 1,
                    split: str = "") -> int:
    """Shards of a split cut at rows: ceil(written / shard_size), written
    the bytes the shards will hold on disk (`total_bytes`, the framed
    bytes, when not given; gzip: `estimated_written_bytes`), but never
    more than total // largest row, so that every shard holds a row (each
    shard spans total / count >= the largest row's bytes of midpoints:
    the cut is on the framed bytes, whatever is written).

    multiple (`output.shard_count_multiple`): the count is rounded up to
    a multiple of it, so that shards stay at most `shard_size` (smaller
    ones, cut the same way, keep the same spread); where that passes the
    room (total // largest row), the largest multiple within it, as the
    count above gives up shard_size for every shard's row. A split with no
    room for `multiple` shards raises `ShardCountError` naming `split`."""
    if total_bytes <= 0:
        return 0
    written = total_bytes if written_bytes is None else written_bytes
    wanted = -(-written // shard_size)
    room = total_bytes // max(1, max_row_bytes)
    if multiple == 1:
        return max(1, min(wanted, room))
    if room < multiple:
        raise ShardCountError(
            f"split {split!r}: output.shard_count_multiple is {multiple}, but its "
            f"{total_bytes} bytes of records (the largest {max_row_bytes} bytes) fill at most "
            f"{max(1, room)} shard(s) that each hold a record; lower "
            "output.shard_count_multiple, or give the split more rows (its fraction in "
            "splits)")
    return min(-(-wanted // multiple) * multiple, room // multiple * multiple)


def row_shard_thresholds(total_bytes: int, count: int) -> np.ndarray:
    """The doubled midpoint (2s + n) from which each shard 1..count-1 starts:
    ceil(2 * total * i / count), as int64 (exact: Python integers)."""
    return np.array([-(-2 * total_bytes * shard // count) for shard in range(1, count)],
                    dtype=np.int64)


def shards_of_rows(starts: np.ndarray, sizes: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """The shard of each row, from its global start and framed size (int64
    arrays) and `row_shard_thresholds`."""
    return np.searchsorted(thresholds, 2 * starts + sizes, "right")


def shards_touched(start: int, end: int, thresholds: np.ndarray) -> range:
    """The shards that rows lying within bytes [start, end) of a split may
    belong to (every row's doubled midpoint is in [2 start + 1, 2 end - 1])."""
    if end <= start:
        return range(0)
    first = int(np.searchsorted(thresholds, 2 * start + 1, "right"))
    last = int(np.searchsorted(thresholds, 2 * end - 1, "right"))
    return range(first, last + 1)


def plan_row_shards(split: str, buckets: Iterable[BucketChunks], shard_size: int,
                    written_size: Callable[[list], int] | None = None, *,
                    multiple: int = 1) -> list[ShardSpec]:
    """Shards of a split cut at rows, as the module docstring says, from its planned
    buckets' sizes (the sum of their chunks) and largest rows: each shard
    lists, in key order, the buckets that may hold its rows (each bucket's
    first byte in the split from a prefix sum), and which of their rows it
    holds is decided as they are written. Small metadata: a few numbers
    per bucket, nothing per row. written_size (gzip): the bytes on disk
    of the split's ratio sample (`ratio_sample_of` of the buckets'
    ratio_sample), from which the shard count is estimated
    (`estimated_written_bytes`). multiple: the count is a multiple of it
    (`row_shard_count`)."""
    placed, total = bucket_places(buckets)
    if not placed:
        return []
    largest = max(bucket.max_row for bucket, _, _ in placed)
    written = None
    if written_size is not None:
        sample = within_limit(ratio_sample_of(
            row for bucket, _, _ in placed for row in bucket.ratio_sample))
        written = estimated_written_bytes(total, written_size(sample),
                                          sum(len(record) for _, record in sample))
    count = row_shard_count(total, shard_size, largest, written, multiple=multiple,
                            split=split)
    thresholds = row_shard_thresholds(total, count)
    pieces: list[list[tuple[str, int, int]]] = [[] for _ in range(count)]
    for bucket, start, size in placed:
        for shard in shards_touched(start, start + size, thresholds):
            pieces[shard].append((bucket.path, start, size))
    return [ShardSpec(split, shard, count, tuple(pieces[shard]), -1, -1, (total, count))
            for shard in range(count)]


def plan_shards(split: str, buckets: Iterable[BucketChunks], shard_size: int, *,
                multiple: int = 1) -> list[ShardSpec]:
    """Groups a split's chunks, in key order, into shards cut as rows are
    (see the module docstring): a chunk belongs to the shard holding
    its bytes' midpoint in the split, among ``min(ceil(bytes on disk /
    shard_size), bytes // largest chunk)`` shards (`row_shard_count`,
    a multiple of `multiple`).

    Every shard is then within one chunk of the mean and holds a chunk,
    and a chunk's shard follows from its own place in the split, so a
    worker holding one bucket's chunks places them knowing only the bytes
    before it (`shuffle_cells.PlaceFn`).
    """
    by_index = one_per_bucket(buckets)
    chunks = [(bucket.path, chunk) for _, bucket in sorted(by_index.items())
              for chunk in bucket.chunks if chunk.num_records]
    if not chunks:
        return []
    lengths = np.array([chunk.length for _, chunk in chunks], dtype=np.int64)
    total = int(lengths.sum())
    count = row_shard_count(total, shard_size, int(lengths.max()), multiple=multiple,
                            split=split)
    shard_of = shards_of_rows(np.cumsum(lengths) - lengths, lengths,
                              row_shard_thresholds(total, count)).tolist()
    selected: list[list[tuple[str, Chunk]]] = [[] for _ in range(count)]
    for shard, chunk in zip(shard_of, chunks):
        selected[shard].append(chunk)
    return [ShardSpec(
        split=split,
        index=shard,
        count=count,
        pieces=_coalesce((path, chunk.offset, chunk.length) for path, chunk in selected[shard]),
        num_examples=sum(chunk.num_records for _, chunk in selected[shard]),
        num_bytes=sum(chunk.length for _, chunk in selected[shard]),
    ) for shard in range(count)]


def _coalesce(pieces: Iterable[tuple[str, int, int]]) -> tuple[tuple[str, int, int], ...]:
    """Merges byte ranges that continue one another in the same file."""
    merged: list[tuple[str, int, int]] = []
    for path, offset, length in pieces:
        if merged and merged[-1][0] == path and merged[-1][1] + merged[-1][2] == offset:
            merged[-1] = (path, merged[-1][1], merged[-1][2] + length)
        else:
            merged.append((path, offset, length))
    return tuple(merged)
