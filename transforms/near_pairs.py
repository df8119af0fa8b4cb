"""Near-duplicate images in a build (`FindNearImages`): the fingerprints' image hashes to `FindNearDuplicates`, its pairs counted into one bounded summary.

The image reader hashes each image where its bytes are in hand
(`readers.images`, column ``image_hash``: `image_hash.image_fingerprint`,
the hash and its signature in one integer); `RowsToExamples` puts it and
the path in each row's `Fingerprint`. Here the hashed images become
`ImageFingerprint`s, `near_duplicates.FindNearDuplicates` gives the pairs
within the threshold, and `NearPairsSummary` counts them per split and
pair of splits and keeps the first `MAX_PAIRS`: the summary's size does
not grow with the number of pairs.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Iterable, Iterator, Sequence

import apache_beam as beam

from ..schemas.duplicates import MAX_PAIRS, FingerprintBatch, key_value
from ..schemas.image_hash import split_fingerprint
from .near_duplicates import FindNearDuplicates, ImageFingerprint, NearPair

__all__ = ["FindNearImages", "NearPairsSummary", "image_fingerprints"]


def image_fingerprints(batch: FingerprintBatch, split_names: Sequence[str]
                       ) -> Iterator[ImageFingerprint]:
    """The hashed images of a batch of fingerprints, keyed by their key's
    value (a keyless row's by its row digest)."""
    if batch.image_hashes is None:
        return
    splits = batch.split_indices().tolist()
    for key, split, fingerprint, path in zip(batch.keys, splits, batch.image_hashes, batch.paths):
        if fingerprint is None:
            continue
        named = key_value(key)
        yield ImageFingerprint(split_names[split],
                               named["key"] if named["key"] is not None else named["row_digest"],
                               path, *split_fingerprint(fingerprint))


class NearPairsSummary(beam.CombineFn):
    """NearPair -> ``{"pairs", "within_split", "across_splits", "examples"}``:
    counts per split and per pair of splits in configured order (``a/b``,
    a listed first), and the first `MAX_PAIRS` pairs by distance, then
    split and key. The accumulator is bounded whatever the pair count."""

    def __init__(self, split_names: Sequence[str]):
        self._order = {name: index for index, name in enumerate(split_names)}
        self._names = tuple(split_names)

    def create_accumulator(self):
        return {}, []  # (split index pair -> count, heap of the first pairs)

    def _sort_key(self, pair: NearPair) -> tuple:
        a, b = self._order[pair.split_a], self._order[pair.split_b]
        first, second = ((a, pair.key_a, pair.path_a), (b, pair.key_b, pair.path_b))
        if second < first:
            first, second = second, first
        return (pair.distance, *first, *second)

    def add_input(self, accumulator, pair: NearPair):
        counts, first = accumulator
        sort_key = self._sort_key(pair)
        splits = (sort_key[1], sort_key[4]) if sort_key[1] <= sort_key[4] else (
            sort_key[4], sort_key[1])
        counts[splits] = counts.get(splits, 0) + 1
        # The smallest MAX_PAIRS, kept sorted (merged with heapq.merge).
        if len(first) < MAX_PAIRS or sort_key < first[-1]:
            first.append(sort_key)
            first.sort()
            del first[MAX_PAIRS:]
        return counts, first

    def merge_accumulators(self, accumulators: Iterable):
        counts: dict = {}
        firsts = []
        for part_counts, part_first in accumulators:
            for splits, count in part_counts.items():
                counts[splits] = counts.get(splits, 0) + count
            firsts.append(part_first)
        return counts, list(itertools.islice(heapq.merge(*firsts), MAX_PAIRS))

    def extract_output(self, accumulator) -> dict:
        counts, first = accumulator
        names = self._names
        return {
            "pairs": sum(counts.values()),
            "within_split": {name: counts.get((index, index), 0)
                             for index, name in enumerate(names)},
            "across_splits": {f"{names[a]}/{names[b]}": counts.get((a, b), 0)
                              for a, b in itertools.combinations(range(len(names)), 2)},
            "examples": [{"distance": distance,
                          "a": {"split": names[split_a], "key": key_a, "path": path_a},
                          "b": {"split": names[split_b], "key": key_b, "path": path_b}}
                         for distance, split_a, key_a, path_a, split_b, key_b, path_b in first]}


class FindNearImages(beam.PTransform):
    """`FingerprintBatch`es -> one near-duplicate summary
    (`NearPairsSummary`) of the images hashed, at Hamming distance at most
    `threshold` (`near_duplicates.FindNearDuplicates`)."""

    def __init__(self, threshold: int, split_names: Sequence[str]):
        super().__init__()
        self._threshold = threshold
        self._split_names = tuple(split_names)

    def expand(self, batches):
        return (batches
                # ImageFingerprint per hashed image
                | "ImageFingerprints" >> beam.FlatMap(image_fingerprints, self._split_names)
                # NearPair per pair within the threshold
                | "FindNearDuplicates" >> FindNearDuplicates(self._threshold)
                # one summary dict
                | "SummarizeNear" >> beam.CombineGlobally(NearPairsSummary(self._split_names)))
