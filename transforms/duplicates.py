"""Exact duplicates as a Beam step (`FindDuplicates`): fingerprints grouped by digest bucket, duplicates counted per bucket.

`RowsToExamples` gives each batch's fingerprints (content digest, split,
key: ~40 bytes a row) as a `FingerprintBatch`. Each batch is cut into one
sub-batch per digest bucket,
so the runner's shuffle moves a handful of lists per batch rather than one
element per row, and all rows of one digest meet in one bucket;
`schemas.duplicates.find_duplicates` counts each bucket's duplicates.
A bucket holds about 1/`buckets` of the fingerprints: `duplicate_buckets`
sizes the count from the input so that a bucket stays small whatever the
dataset's size. The parts add up in the driver (`merge_parts`) to the same
result whatever the bucket count, bundling, runner or worker count.
"""

from __future__ import annotations

from typing import Iterable, NamedTuple, Sequence

import apache_beam as beam
import numpy as np
from apache_beam.typehints import Tuple

from ..schemas.dead_letters import dead_letter
from ..schemas.duplicates import (DuplicatesPart, FingerprintBatch, Removal, find_and_remove,
                                  find_duplicates, key_value)
from .batch_coder import Batch, TaggedBatch
from .splits import HashedExamples
from .tagged import select

__all__ = ["DropDuplicateRows", "DuplicateFindings", "FindDuplicates", "SourcedExamples",
           "duplicate_buckets"]

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


def by_bucket(batch: FingerprintBatch, buckets: int
              ) -> Iterable[tuple[int, FingerprintBatch]]:
    """(bucket, the batch's fingerprints in it), one per bucket the batch meets."""
    if buckets == 1:
        return [(0, batch)]
    of_row = batch.buckets(buckets)
    return [(bucket, batch.take(np.flatnonzero(of_row == bucket)))
            for bucket in np.unique(of_row).tolist()]


def bucket_duplicates(bucket_and_batches: tuple[int, Iterable[FingerprintBatch]]
                      ) -> DuplicatesPart:
    """The duplicates among every fingerprint of one bucket."""
    _, batches = bucket_and_batches
    return find_duplicates(batches)


def bucket_removals(bucket_and_batches: tuple[int, Iterable[FingerprintBatch]], mode: str
                    ) -> Iterable[tuple[str, object]]:
    """("found", DuplicatesPart), ("left", DuplicatesPart: what stays once
    the later copies are removed) and, when any, ("removals", [Removal,
    ...]) of one bucket."""
    _, batches = bucket_and_batches
    found, left, removals = find_and_remove(batches, mode)
    yield "found", found
    yield "left", left
    if removals:
        yield "removals", removals


class DuplicateFindings(NamedTuple):
    """What `FindDuplicates` gives with removal: per bucket the duplicates
    `found` and those `left` once removed (`DuplicatesPart`s), and the
    `removals` (lists of `Removal`, as large as the duplicates)."""

    found: beam.PCollection
    left: beam.PCollection
    removals: beam.PCollection


class FindDuplicates(beam.PTransform):
    """Takes `FingerprintBatch`es; gives one `DuplicatesPart` per
    digest bucket that holds any row (`merge_parts` adds them up), or with
    `dedupe` (one of `DEDUPE_MODES`) a `DuplicateFindings`.
    buckets: how many digest buckets (`duplicate_buckets`); it changes how
    the work is spread, never the result."""

    def __init__(self, buckets: int, dedupe: str | None = None):
        super().__init__()
        if buckets < 1:
            raise ValueError(f"buckets must be at least 1, not {buckets}")
        self._buckets = buckets
        self._dedupe = dedupe

    def expand(self, batches):
        grouped = (batches
                   # (bucket, FingerprintBatch) per bucket a batch meets; each
                   # batch is pickled whole (BatchCoder), not row by row
                   | "ByBucket" >> beam.FlatMap(by_bucket, self._buckets
                                                ).with_output_types(Tuple[int, Batch])
                   # (bucket, [FingerprintBatch, ...])
                   | "GroupBuckets" >> beam.GroupByKey())
        if self._dedupe is None:
            # DuplicatesPart per bucket
            return grouped | "FindInBucket" >> beam.Map(bucket_duplicates)
        # ("found" | "left", DuplicatesPart) | ("removals", [Removal, ...])
        tagged = grouped | "FindInBucket" >> beam.FlatMap(bucket_removals, self._dedupe)
        return DuplicateFindings(
            found=tagged | "SelectFound" >> beam.FlatMap(select, "found"),
            left=tagged | "SelectLeft" >> beam.FlatMap(select, "left"),
            removals=tagged | "SelectRemovals" >> beam.FlatMap(select, "removals"))


class SourcedExamples(HashedExamples):
    """A HashedExamples that also names each row's input: ``(source, row)``
    per example and its `origin_of` bytes, for duplicate removal, which
    drops a row by its origin and names it in its dead letter."""

    def __init__(self, rows: Iterable = (), salt: bytes = b"", digests: Sequence[bytes] = (),
                 sources: Sequence[tuple] = (), origins: Sequence[bytes] = (), **columns):
        super().__init__(rows, salt, digests, **columns)
        self.sources = list(sources)
        self.origins = list(origins)


class _DropRowsFn(beam.DoFn):
    """SourcedExamples -> ("examples", HashedExamples of the rows kept) and
    ("dead_letter", dict) per row removed. The removals (a side input as
    large as the duplicates) become one dict per worker."""

    def __init__(self, split_names: Sequence[str], mode: str):
        self._split_names = tuple(split_names)
        self._mode = mode
        self._removed: dict[bytes, Removal] | None = None

    def process(self, batch, removals):
        if self._removed is None:
            self._removed = {removal.origin: removal
                             for part in removals for removal in map(Removal._make, part)}
        removed = self._removed
        if not removed or not isinstance(batch, SourcedExamples) \
                or not any(origin in removed for origin in batch.origins):
            yield "examples", batch
            return
        keys, examples, digests = [], [], []
        for key, example, digest, (source, number), origin in zip(
                batch.keys, batch.examples, batch.digests, batch.sources, batch.origins):
            removal = removed.get(origin)
            if removal is None:
                keys.append(key)
                examples.append(example)
                digests.append(digest)
            else:
                yield "dead_letter", self._dead_letter(source, number, removal)
        if examples:
            yield "examples", HashedExamples(salt=batch.salt, digests=digests,
                                             columns=(keys, examples))

    def _dead_letter(self, source: str, row: int | None, removal: Removal) -> dict:
        split, key = removal.earlier
        earlier = {"split": self._split_names[split], **key_value(key)}
        named = (f"key {earlier['key']!r}" if earlier["key"] is not None
                 else f"row digest {earlier['row_digest']}")
        return dead_letter(
            source=source, row=row, key=key_value(removal.later[1])["key"], stage="check",
            reason="duplicate", feature=None,
            message=(f"equal to the row with {named} in split {earlier['split']!r}, which is "
                     f"kept (validation.duplicates.dedupe: {self._mode})"),
            input={"duplicate_of": earlier})


class DropDuplicateRows(beam.PTransform):
    """Removes the later copies before the shard writer: takes ExampleBatch
    elements (`SourcedExamples`) and the `removals` of `FindDuplicates`,
    gives (rows kept: ExampleBatch, dead letters: one ``duplicate`` dict per
    row removed). The removals are a side input, so this step waits for
    every row to be fingerprinted; its memory is the duplicates', not the
    dataset's."""

    def __init__(self, removals: beam.PCollection, split_names: Sequence[str], mode: str):
        super().__init__()
        self._removals = removals
        self._split_names = tuple(split_names)
        self._mode = mode

    def expand(self, batches):
        tagged = batches | "DropRows" >> beam.ParDo(
            _DropRowsFn(self._split_names, self._mode),
            beam.pvalue.AsList(self._removals)).with_output_types(TaggedBatch)
        return (tagged | "SelectKept" >> beam.FlatMap(select, "examples").with_output_types(Batch),
                tagged | "SelectRemoved" >> beam.FlatMap(select, "dead_letter"))
