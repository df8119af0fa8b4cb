"""Exact duplicates as a Beam step (`FindDuplicates`): fingerprints grouped by digest bucket, duplicates counted per bucket.

`RowsToExamples` gives each batch's `Fingerprint`s (content digest, split,
key: ~40 bytes a row). Each batch is cut into one list per digest bucket,
so the runner's shuffle moves a handful of lists per batch rather than one
element per row, and all rows of one digest meet in one bucket;
`schemas.duplicates.find_duplicates` counts each bucket's duplicates.
A bucket holds about 1/`buckets` of the fingerprints: `duplicate_buckets`
sizes the count from the input so that a bucket stays small whatever the
dataset's size. The parts add up in the driver (`merge_parts`) to the same
result whatever the bucket count, bundling, runner or worker count.
"""

from __future__ import annotations

import itertools
from typing import Iterable, Sequence

import apache_beam as beam

from ..schemas.duplicates import DuplicatesPart, Fingerprint, bucket_of, find_duplicates

__all__ = ["FindDuplicates", "duplicate_buckets"]

# Input bytes per bucket: a row takes at least ~16 bytes of input, and a
# fingerprint ~200 bytes as Python objects, so a bucket of 2**22 input
# bytes holds at most ~260,000 fingerprints (~50 MB) when it is sorted.
_INPUT_BYTES_PER_BUCKET = 1 << 22
_MAX_BUCKETS = 1 << 14


def duplicate_buckets(input_bytes: int | None) -> int:
    """How many digest buckets a build of `input_bytes` of input uses: a
    power of two from 1 to 16,384 (a few per batch at most below ~1 GB of
    input; unknown input: 64)."""
    if input_bytes is None:
        return 64
    wanted = max(1, -(-input_bytes // _INPUT_BYTES_PER_BUCKET))
    return min(_MAX_BUCKETS, 1 << (wanted - 1).bit_length())


def by_bucket(batch: Sequence[Fingerprint], buckets: int
              ) -> Iterable[tuple[int, list[Fingerprint]]]:
    """(bucket, the batch's fingerprints in it), one per bucket the batch meets."""
    lists: dict[int, list[Fingerprint]] = {}
    for fingerprint in batch:
        lists.setdefault(bucket_of(fingerprint.digest, buckets), []).append(fingerprint)
    return lists.items()


def bucket_duplicates(bucket_and_lists: tuple[int, Iterable[list[Fingerprint]]]
                      ) -> DuplicatesPart:
    """The duplicates among every fingerprint of one bucket."""
    _, lists = bucket_and_lists
    return find_duplicates(itertools.chain.from_iterable(lists))


class FindDuplicates(beam.PTransform):
    """Takes ``[Fingerprint, ...]`` batches; gives one `DuplicatesPart` per
    digest bucket that holds any row (`merge_parts` adds them up).
    buckets: how many digest buckets (`duplicate_buckets`); it changes how
    the work is spread, never the result."""

    def __init__(self, buckets: int):
        super().__init__()
        if buckets < 1:
            raise ValueError(f"buckets must be at least 1, not {buckets}")
        self._buckets = buckets

    def expand(self, batches):
        return (batches
                # (bucket, [Fingerprint, ...]) per bucket a batch meets
                | "ByBucket" >> beam.FlatMap(by_bucket, self._buckets)
                # (bucket, [[Fingerprint, ...], ...])
                | "GroupBuckets" >> beam.GroupByKey()
                # DuplicatesPart per bucket
                | "FindInBucket" >> beam.Map(bucket_duplicates))
