"""Which bucket a row is sorted in: key ranges from a content-chosen sample, or hash ranges.

Buckets are the units a split is sorted in, in parallel. Their bounds come
from a sample selected by content alone (or, shuffled, from fixed ranges
of the digest order), so the same rows always land in the same bucket,
whatever the bundling; and no bound ever decides a byte of the output
(the shards are cut at rows, or at cells of the split's framed bytes).
"""

from __future__ import annotations

import heapq
import math
from typing import Iterable

import numpy as np

from ..splits import HASH_SIZE
from .elements import BucketChunks, BucketRange, RunInfo, SampleEntry, SpillRecord
from .tuning import MAX_BUCKETS

__all__ = ["bucket_bounds_of", "bucket_places", "hash_buckets_of", "one_per_bucket",
           "plan_bucket_ranges",
           "runs_of", "sample_of"]


def runs_of(records: Iterable[SpillRecord]) -> list[RunInfo]:
    """The run files named by a split's spill records, with their final
    sizes, in path order."""
    runs: dict[str, RunInfo] = {}
    for record in records:
        known = runs.get(record.path)
        if known is None or record.num_records > known.num_records:
            runs[record.path] = RunInfo(record.split, record.path, record.num_records,
                                        record.num_bytes, record.kept)
    return [runs[path] for path in sorted(runs)]


def sample_of(records: Iterable[SpillRecord], sample_size: int) -> list[SampleEntry]:
    """The distinct sampled rows of a split's spill records, cut to the
    `sample_size` highest priorities (a set: repeats change nothing)."""
    entries = {entry for record in records for entry in record.sample}
    return heapq.nlargest(sample_size, entries)


def plan_bucket_ranges(split: str, total_bytes: int, sample: Iterable[SampleEntry],
                       bucket_bytes: int, *, sample_bytes: int,
                       sample_size: int) -> list[BucketRange]:
    """Cuts a split's key space into about ``total_bytes / bucket_bytes``
    ranges, at most `MAX_BUCKETS`, holding similar byte counts, at weighted
    quantiles of the sample. (Past 4,096 × 32 MB a bucket grows instead:
    what is planned per bucket, the bounds every lane gets and the sizes
    the plan adds up, stays bounded, and a bucket larger than a worker's
    sort memory is merged from its local disk.)

    The sample holds the rows whose priority (see `sample_priority`) reached
    `sample_bytes`, cut to the `sample_size` highest. Each entry stands for
    ``max(size, threshold)`` bytes, the priority-sampling estimate, where
    threshold is the inclusion priority (`sample_bytes`, or the lowest
    priority kept once the sample was cut). The
    boundaries are sample key prefixes, so a key's bucket is decided by its
    prefix alone and equal keys share a bucket.
    """
    entries = sorted(sample, key=lambda entry: (entry.prefix, entry.priority, entry.size))
    wanted = min(MAX_BUCKETS, math.ceil(total_bytes / bucket_bytes)) if total_bytes > 0 else 1
    if wanted <= 1 or not entries:
        return [BucketRange(split, 0, b"", None)]
    threshold = sample_bytes
    if len(entries) >= sample_size:
        threshold = max(threshold, min(entry.priority for entry in entries))
    weights = [max(entry.size, threshold) for entry in entries]
    estimate = sum(weights)
    boundaries: list[bytes] = []
    running = 0
    step = 1
    for entry, weight in zip(entries, weights):
        running += weight
        # The boundary is the next key after the quantile point, so the
        # bucket ends just before it.
        while step < wanted and running >= estimate * step / wanted:
            step += 1
            boundaries.append(entry.prefix)
    boundaries = sorted(set(boundary for boundary in boundaries if boundary))
    edges = [b""] + boundaries + [None]
    return [BucketRange(split, index, edges[index], edges[index + 1])
            for index in range(len(edges) - 1)]


def bucket_bounds_of(keys: Iterable[bytes], count: int, prefix_len: int) -> tuple[bytes, ...]:
    """Lower bounds of about `count` buckets holding equal shares of the
    sampled order `keys` (b"" first): the keys' prefixes at the 1/count
    quantiles, so that, as with `plan_bucket_ranges`, equal prefixes share
    a bucket. For the shuffle exchange's key-ordered plain output, whose
    shards are cut at rows: the bounds spread the sorting over workers and
    never change the bytes."""
    prefixes = sorted(key[:prefix_len] for key in keys)
    if count <= 1 or not prefixes:
        return (b"",)
    picks = {prefixes[len(prefixes) * step // count] for step in range(1, count)}
    return (b"", *sorted(pick for pick in picks if pick))


def hash_buckets_of(digests: bytes, count: int) -> np.ndarray:
    """The bucket of each row from its concatenated HASH_SIZE-byte digests:
    `count` equal ranges of the digest order (the first four bytes read
    big-endian), so bucket order is digest order."""
    top = np.frombuffer(digests, dtype=np.dtype([("top", ">u4"), ("rest", f"V{HASH_SIZE - 4}")]))
    return ((top["top"].astype(np.uint64) * np.uint64(count)) >> np.uint64(32)).astype(np.int64)


def one_per_bucket(buckets: Iterable[BucketChunks]) -> dict[int, BucketChunks]:
    """Bucket index -> its BucketChunks. A runner that delivers an output
    twice (seen with Beam's Dask runner) gives a bucket twice, with
    identical bytes: one copy is kept, the same whichever came first."""
    by_index: dict[int, BucketChunks] = {}
    for bucket in buckets:
        if bucket.index not in by_index or bucket.path < by_index[bucket.index].path:
            by_index[bucket.index] = bucket
    return by_index


def bucket_places(buckets: Iterable[BucketChunks]
                  ) -> tuple[list[tuple[BucketChunks, int, int]], int]:
    """A split's buckets that hold rows, in key order, each with its first
    byte in the split and its bytes (the sum of its chunks), and the
    split's total bytes; a bucket delivered twice counts once
    (`one_per_bucket`)."""
    placed = []
    total = 0
    for _, bucket in sorted(one_per_bucket(buckets).items()):
        size = sum(chunk.length for chunk in bucket.chunks)
        if size:
            placed.append((bucket, total, size))
            total += size
    return placed, total

