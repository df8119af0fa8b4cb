"""Near-duplicate images: pairs of images whose perceptual hashes
(`schemas.image_hash`) differ in at most `threshold` bits, found by banding.

`FindNearDuplicates(threshold)` takes a PCollection of `ImageFingerprint`
and gives a PCollection of `NearPair`, each pair once, ordered so that
``(split_a, key_a) < (split_b, key_b)``; identical hashes (distance 0) are
pairs too. The search never compares all pairs:

* Banding (pigeonhole). The 64 bits are cut into ``threshold + 2`` bands of
  nearly equal width. Two hashes within `threshold` bits differ in at most
  `threshold` bands, so at least two bands are equal in both; every image
  is therefore keyed by each *pair* of its bands (``C(threshold + 2, 2)``
  bucket keys: the pair's index and the two bands' bits), and any two
  images within the threshold share at least one bucket. Only images in a
  common bucket are compared (Hamming distance, confirmed <= threshold).
  Keying by a pair of bands rather than by one band doubles the bits of a
  key (10-12 bits at the default threshold instead of 5-6): a bucket holds
  about 1/1,600 of the images rather than 1/40, so buckets stay small as
  the data grows, for ``C(threshold + 2, 2)`` keys per image (66 at the
  default) instead of ``threshold + 1``.
* Each pair once. Two close images share several buckets; a pair is given
  only by the first of them (in key order) that was compared, a rule each
  bucket decides from the two hashes alone: no second shuffle to dedupe.
* Bounded buckets. A bucket with more than `max_bucket` members is not
  compared: its members are counted in the Beam counter
  ``near_duplicate_bucket_members_skipped``. Buckets fill up in two ways: a
  group of many near-identical images (blank or solid-colour pictures hash
  alike), and sheer size (a key of b bits averages images / 2**b members:
  at the default threshold the 10-bit keys pass 1,000 members near a
  million images). What is given up: a pair is missed when every bucket the
  two share is over the cap (inside a large group of near-identical images,
  most pairs). In return the work is at most ``max_bucket / 2`` comparisons
  per image and bucket key, and a worker holds one bucket of at most
  `max_bucket` fingerprints at a time.

Per-image and per-bucket logic are plain functions (`Banding`,
`bucket_pairs`), tested without Beam; the result is the same on every
runner and worker count (the tests run 1 and 2 DirectRunner workers).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from typing import Any, Iterable, Iterator, Mapping, NamedTuple

import apache_beam as beam
import numpy as np

from ..schemas.image_hash import HASH_BITS
from .metrics import METRICS_NAMESPACE

__all__ = ["DEFAULT_MAX_BUCKET", "DEFAULT_THRESHOLD", "Banding", "FindNearDuplicates",
           "ImageFingerprint", "NearPair", "bucket_pairs"]

# Chosen from benchmarks/bench_image_hash.py (docs/near_duplicates.md):
# every planted copy but the rare worst crops within it, and no two distinct
# natural-looking images of the benchmark within it.
DEFAULT_THRESHOLD = 10
DEFAULT_MAX_BUCKET = 1000
# Bands of at least 2 bits: beyond this threshold a bucket key has so few
# bits that buckets fill past any cap.
MAX_THRESHOLD = 30


class ImageFingerprint(NamedTuple):
    """One image: its split, row key (str or bytes; keys of one dataset are
    one type, so they order), path (for messages and reports) and 64-bit
    perceptual hash."""
    split: str
    key: Any
    path: str
    hash: int


class NearPair(NamedTuple):
    """Two images within the threshold, ``(split_a, key_a) < (split_b, key_b)``."""
    split_a: str
    key_a: Any
    path_a: str
    split_b: str
    key_b: Any
    path_b: str
    distance: int


def _masks(threshold: int) -> tuple[int, ...]:
    """`threshold + 2` bit masks of nearly equal width covering 64 bits."""
    count = threshold + 2
    masks, start = [], 0
    for band in range(count):
        width = HASH_BITS // count + (band < HASH_BITS % count)
        masks.append(((1 << width) - 1) << start)
        start += width
    return tuple(masks)


@dataclasses.dataclass(frozen=True)
class Banding:
    """The bands of one threshold and the bucket keys they give a hash."""

    threshold: int

    def __post_init__(self):
        if not (isinstance(self.threshold, int) and 0 <= self.threshold <= MAX_THRESHOLD):
            raise ValueError(f"near-duplicate threshold: expected an integer 0-{MAX_THRESHOLD} "
                             f"(bits of 64 that may differ), got {self.threshold!r}")

    @functools.cached_property
    def masks(self) -> tuple[int, ...]:
        return _masks(self.threshold)

    @functools.cached_property
    def pairs(self) -> tuple[tuple[int, int], ...]:
        """The band pairs, in key order: index i of a key is pairs[i]."""
        return tuple(itertools.combinations(range(len(self.masks)), 2))

    def key(self, index: int, value: int) -> tuple[int, int]:
        first, second = self.pairs[index]
        return index, value & (self.masks[first] | self.masks[second])

    def keys(self, value: int) -> list[tuple[int, int]]:
        """The bucket keys of a hash: (pair index, the hash's bits of the pair)."""
        return [self.key(index, value) for index in range(len(self.pairs))]

    def first_key(self, a: int, b: int, skipped: Mapping) -> tuple[int, int] | None:
        """The first bucket key (in key order) two hashes share that is not
        in `skipped`; None when they share none."""
        equal = [not (a ^ b) & mask for mask in self.masks]
        for index, (first, second) in enumerate(self.pairs):
            if equal[first] and equal[second]:
                key = self.key(index, a)
                if key not in skipped:
                    return key
        return None


def check_fingerprint(fp: ImageFingerprint) -> ImageFingerprint:
    """The fingerprint, or ValueError naming the image when its hash is not
    a 64-bit unsigned integer (a programming error upstream, never data)."""
    if not (isinstance(fp.hash, int) and 0 <= fp.hash < 1 << HASH_BITS):
        raise ValueError(f"{fp.path} (split {fp.split!r}, key {fp.key!r}): image hash "
                         f"{fp.hash!r} is not a 64-bit unsigned integer")
    return fp


if hasattr(np, "bitwise_count"):  # numpy >= 2.0
    _popcount = np.bitwise_count
else:
    _BYTE_BITS = np.array([bin(v).count("1") for v in range(256)], dtype=np.uint8)

    def _popcount(values: np.ndarray) -> np.ndarray:
        return _BYTE_BITS[values.view(np.uint8)].reshape(-1, 8).sum(axis=1)


def _ordered(a: ImageFingerprint, b: ImageFingerprint, distance: int) -> NearPair:
    if (b.split, b.key) < (a.split, a.key):
        a, b = b, a
    return NearPair(a.split, a.key, a.path, b.split, b.key, b.path, distance)


def bucket_pairs(key: tuple[int, int], members: Iterable[ImageFingerprint], banding: Banding,
                 skipped: Mapping) -> Iterator[NearPair]:
    """The pairs one bucket reports: members within the threshold whose
    first shared bucket outside `skipped` is this one (so each pair comes
    from exactly one bucket)."""
    members = sorted(members, key=lambda fp: (fp.split, fp.key))
    hashes = np.array([fp.hash for fp in members], dtype=np.uint64)
    for i in range(len(members) - 1):
        distances = _popcount(hashes[i + 1:] ^ hashes[i])
        for j in np.flatnonzero(distances <= banding.threshold):
            a, b = members[i], members[i + 1 + j]
            if (a.split, a.key) != (b.split, b.key) and \
                    banding.first_key(a.hash, b.hash, skipped) == key:
                yield _ordered(a, b, int(distances[j]))


def _bucket_keys(fp: ImageFingerprint, banding: Banding
                 ) -> Iterator[tuple[tuple[int, int], ImageFingerprint]]:
    fp = check_fingerprint(fp)
    for key in banding.keys(fp.hash):
        yield key, fp


def _over_cap(entry: tuple[Any, int], max_bucket: int) -> bool:
    return entry[1] > max_bucket


class _DropFullBuckets(beam.DoFn):
    """Passes (key, fingerprint) of buckets within the cap; counts the rest."""

    def __init__(self):
        self._skipped = beam.metrics.Metrics.counter(
            METRICS_NAMESPACE, "near_duplicate_bucket_members_skipped")

    def process(self, element, skipped):
        if element[0] in skipped:
            self._skipped.inc()
        else:
            yield element


def _pairs_of(entry, banding: Banding, skipped: Mapping) -> Iterator[NearPair]:
    key, members = entry
    return bucket_pairs(key, members, banding, skipped)


class FindNearDuplicates(beam.PTransform):
    """PCollection[ImageFingerprint] -> PCollection[NearPair] (module docstring)."""

    def __init__(self, threshold: int = DEFAULT_THRESHOLD,
                 max_bucket: int = DEFAULT_MAX_BUCKET):
        super().__init__()
        self._banding = Banding(threshold)
        if not (isinstance(max_bucket, int) and max_bucket >= 2):
            raise ValueError(f"max_bucket: expected an integer >= 2, got {max_bucket!r}")
        self._max_bucket = max_bucket

    def expand(self, fingerprints):
        # ((pair index, bits), ImageFingerprint), C(threshold + 2, 2) per image
        keyed = fingerprints | "BucketKeys" >> beam.FlatMap(_bucket_keys, self._banding)
        # {(pair index, bits): members} of the buckets over the cap only: at
        # most C(threshold + 2, 2) * images / max_bucket entries.
        full = (keyed
                | "KeysOnly" >> beam.Keys()
                | "CountBuckets" >> beam.combiners.Count.PerElement()
                | "OverCap" >> beam.Filter(_over_cap, self._max_bucket))
        skipped = beam.pvalue.AsDict(full)
        return (keyed
                | "DropFullBuckets" >> beam.ParDo(_DropFullBuckets(), skipped)
                # ((pair index, bits), [ImageFingerprint]) of at most max_bucket
                | "GroupBuckets" >> beam.GroupByKey()
                | "PairsInBucket" >> beam.FlatMap(_pairs_of, self._banding, skipped))
