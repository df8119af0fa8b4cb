"""Near-duplicate images: pairs of images whose perceptual hashes
(`schemas.image_hash`) differ in at most `threshold` bits and whose
signatures agree, found by banding.

`FindNearDuplicates(threshold)` takes a PCollection of `ImageFingerprint`
and gives a PCollection of `NearPair`, each pair once, ordered so that
``(split_a, key_a) < (split_b, key_b)``; identical hashes (distance 0) are
pairs too. The search never compares all pairs:

* Banding (pigeonhole). The 64 bits are cut into ``threshold + 1`` bands of
  nearly equal width (5-6 bits at the default threshold). Two hashes within
  `threshold` bits differ in at most `threshold` bands, so at least one
  band is equal in both; every image is keyed by each of its bands (the
  band's index and bits), so any two images within the threshold share a
  bucket. Only images in a common bucket are compared (Hamming distance,
  vectorised, confirmed <= threshold). ``bands_per_key=2`` cuts
  ``threshold + 2`` bands instead and keys an image by every *pair* of
  them (at least two bands are then equal): keys of twice the bits, so
  buckets 32-64 times smaller, for ``C(threshold + 2, 2)`` keys per
  image (66 at the default threshold, against 11): for collections of
  millions of images.
* Confirmation. A pair within the threshold is reported only when the two
  images' signatures (`image_hash.similar`: their DCT coefficients, not
  only the coefficients' sides of the median) agree too, or either image
  has none. This is what lets the default threshold be 10 bits: at 10
  bits unrelated pictures collide on the hash (0.74% of generated scenes
  in a pair), never on both (docs/near_duplicates.md).
* Batches. Fingerprints are bucketed a batch at a time, and a batch sends
  one element per bucket it touches: the runner's cost is per element, and
  with 11 keys of 5-6 bits a batch of 4,096 touches at most 640 buckets.
* Each pair once. Two close images may share several buckets; a pair is
  given only by the first of them (in key order) that was compared, a rule
  each bucket decides from the two hashes alone: no second shuffle. It is
  decided for all of a bucket's close pairs at once in numpy: copies of
  one picture share every bucket, and a rule applied pair by pair in
  Python cost ~0.3 ms an image on the 3,000-image benchmark set.
* Bounded buckets. A bucket with more than `max_bucket` members is not
  compared: its members are counted in the Beam counter
  ``near_duplicate_bucket_members_skipped``. Buckets fill up in two ways: a
  group of many near-identical images (blank or solid-colour pictures hash
  alike), and sheer size (a key of b bits averages images / 2**b members:
  at the default threshold and cap, past about 320,000 images with one
  band per key, about 10 million with two). What is given up: a pair is
  missed when every bucket the two share is over the cap (inside a large
  group of near-identical images, most pairs). In return the work is at most
  ``max_bucket / 2`` comparisons per image and key (vectorised: about 20 µs
  per image and key at the cap), and a worker holds one bucket of at most
  `max_bucket` fingerprints at a time.

Per-image and per-bucket logic are plain functions (`Banding`,
`bucket_pairs`), tested without Beam; the result is the same on every
runner and worker count (the tests run 1 and 2 DirectRunner workers).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import operator
from typing import Any, Iterable, Iterator, Mapping, NamedTuple

import apache_beam as beam
import numpy as np

from ..schemas.image_hash import HASH_BITS, SIGNATURE_BYTES, signature_array, similar
from .metrics import METRICS_NAMESPACE

__all__ = ["DEFAULT_BANDS_PER_KEY", "DEFAULT_MAX_BUCKET", "DEFAULT_THRESHOLD", "Banding",
           "FindNearDuplicates", "ImageFingerprint", "NearPair", "bucket_members",
           "bucket_pairs"]

# Chosen from benchmarks/bench_image_hash.py (docs/near_duplicates.md): with
# the signatures confirming, no two of 1,495 distinct generated scenes pair
# at 6-14 bits; at 10, 99.45% of planted 5% crops and >= 99.95% of other
# planted copies are found (98.40% of crops at 8; 99.80% at 12, where a
# bucket key has 4-5 bits and buckets fill twice as soon).
DEFAULT_THRESHOLD = 10
DEFAULT_MAX_BUCKET = 10_000
DEFAULT_BANDS_PER_KEY = 1
# Fingerprints keyed together: a batch sends one element per bucket key it
# touches, not one per image and key (the runner's cost is per element).
_BATCH = 4096
# Bands of at least 2 bits: beyond this threshold a bucket key has so few
# bits that buckets fill past any cap.
MAX_THRESHOLD = 30


class ImageFingerprint(NamedTuple):
    """One image: its split, row key (str or bytes; keys of one dataset are
    one type, so they order), path (for messages and reports), 64-bit
    perceptual hash and signature (0: none; `schemas.image_hash`)."""
    split: str
    key: Any
    path: str
    hash: int
    signature: int = 0


class NearPair(NamedTuple):
    """Two images within the threshold, ``(split_a, key_a) < (split_b, key_b)``."""
    split_a: str
    key_a: Any
    path_a: str
    split_b: str
    key_b: Any
    path_b: str
    distance: int


def _masks(count: int) -> tuple[int, ...]:
    """`count` bit masks of nearly equal width covering the 64 bits, the
    wider ones last: the last holds the DC bit (bit 63), which is almost
    always set, so it needs a bit more to spread its images as widely."""
    masks, start = [], 0
    for band in range(count):
        width = HASH_BITS // count + (band >= count - HASH_BITS % count)
        masks.append(((1 << width) - 1) << start)
        start += width
    return tuple(masks)


@dataclasses.dataclass(frozen=True)
class Banding:
    """The bands of one threshold and the bucket keys they give a hash:
    ``threshold + bands_per_key`` bands, keyed by every `bands_per_key` of them."""

    threshold: int
    bands_per_key: int = DEFAULT_BANDS_PER_KEY

    def __post_init__(self):
        if not (isinstance(self.threshold, int) and 0 <= self.threshold <= MAX_THRESHOLD):
            raise ValueError(f"near-duplicate threshold: expected an integer 0-{MAX_THRESHOLD} "
                             f"(bits of 64 that may differ), got {self.threshold!r}")
        if self.bands_per_key not in (1, 2):
            raise ValueError(f"bands_per_key: expected 1 or 2, got {self.bands_per_key!r}")

    @functools.cached_property
    def masks(self) -> tuple[int, ...]:
        return _masks(self.threshold + self.bands_per_key)

    @functools.cached_property
    def combinations(self) -> tuple[tuple[int, ...], ...]:
        """The bands of each key, in key order: index i of a key is combinations[i]."""
        return tuple(itertools.combinations(range(len(self.masks)), self.bands_per_key))

    @functools.cached_property
    def _key_masks(self) -> tuple[int, ...]:
        return tuple(functools.reduce(operator.or_, (self.masks[b] for b in bands))
                     for bands in self.combinations)

    def keys(self, value: int) -> list[tuple[int, int]]:
        """The bucket keys of a hash: (key index, the hash's bits of its bands)."""
        return [(index, value & mask) for index, mask in enumerate(self._key_masks)]

    def first_key(self, a: int, b: int, skipped: Mapping) -> tuple[int, int] | None:
        """The first bucket key (in key order) two hashes share that is not
        in `skipped`; None when they share none."""
        differ = a ^ b
        for index, mask in enumerate(self._key_masks):
            if not differ & mask and (index, a & mask) not in skipped:
                return index, a & mask
        return None

    def shares_earlier_key(self, index: int, a: np.ndarray, b: np.ndarray,
                           skipped: Mapping) -> np.ndarray:
        """Per pair of uint64 hashes: whether they share a bucket key before
        key `index` that is not in `skipped` (`first_key` for many pairs)."""
        earlier = np.zeros(len(a), dtype=bool)
        differ = a ^ b
        for before, mask in enumerate(self._key_masks[:index]):
            shared = (differ & np.uint64(mask)) == 0
            if skipped:
                for at in np.flatnonzero(shared):
                    shared[at] = (before, int(a[at]) & mask) not in skipped
            earlier |= shared
        return earlier


def check_fingerprint(fp: ImageFingerprint) -> ImageFingerprint:
    """The fingerprint, or ValueError naming the image when its hash is not
    a 64-bit unsigned integer or its signature not one of 63 bytes (a
    programming error upstream, never data)."""
    if not (isinstance(fp.hash, int) and 0 <= fp.hash < 1 << HASH_BITS):
        raise ValueError(f"{fp.path} (split {fp.split!r}, key {fp.key!r}): image hash "
                         f"{fp.hash!r} is not a 64-bit unsigned integer")
    if not (isinstance(fp.signature, int) and 0 <= fp.signature < 1 << 8 * SIGNATURE_BYTES):
        raise ValueError(f"{fp.path} (split {fp.split!r}, key {fp.key!r}): image signature "
                         f"is not an unsigned integer of {SIGNATURE_BYTES} bytes")
    return fp


_BYTE_BITS = np.array([bin(v).count("1") for v in range(256)], dtype=np.uint8)


def popcount_bytes(values: np.ndarray) -> np.ndarray:
    """Bits set in each uint64, by a table of bytes (numpy < 2.0 has no
    bitwise_count, and setup.py allows numpy 1.24)."""
    octets = np.ascontiguousarray(values).view(np.uint8).reshape(*values.shape, 8)
    return _BYTE_BITS[octets].sum(axis=-1, dtype=np.uint8)


_popcount = getattr(np, "bitwise_count", popcount_bytes)


_split_and_key = operator.itemgetter(0, 1)


def _ordered(a: ImageFingerprint, b: ImageFingerprint, distance: int) -> NearPair:
    if (b.split, b.key) < (a.split, a.key):
        a, b = b, a
    return NearPair(a.split, a.key, a.path, b.split, b.key, b.path, distance)


def bucket_pairs(key: tuple[int, int], members: Iterable[ImageFingerprint], banding: Banding,
                 skipped: Mapping) -> Iterator[NearPair]:
    """The pairs one bucket reports: members (ImageFingerprint or its plain
    tuple) within the threshold whose signatures agree and whose first
    shared bucket outside `skipped` is this one (so each pair comes from
    exactly one bucket)."""
    members = sorted(members, key=_split_and_key)
    hashes = np.array([m[3] for m in members], dtype=np.uint64)
    signatures = None
    for first, second, distances in _close_pairs(hashes, banding.threshold):
        keep = ~banding.shares_earlier_key(key[0], hashes[first], hashes[second], skipped)
        if signatures is None:  # decoded once a bucket has a close pair
            signatures = signature_array([m[4] for m in members])
        keep &= similar(signatures[first], signatures[second])
        for i, j, distance in zip(first[keep].tolist(), second[keep].tolist(),
                                  distances[keep].tolist()):
            a, b = ImageFingerprint._make(members[i]), ImageFingerprint._make(members[j])
            if (a.split, a.key) != (b.split, b.key):
                yield _ordered(a, b, distance)


# Distances computed per block of rows: at most this many at a time (2 MB
# of uint64, cache-sized), whatever the bucket's size.
_BLOCK_CELLS = 1 << 18


def _close_pairs(hashes: np.ndarray, threshold: int
                 ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per block of rows, arrays (i, j, distance) of the pairs i < j with
    distance <= threshold, vectorised."""
    count = len(hashes)
    rows = max(1, _BLOCK_CELLS // max(1, count))
    for start in range(0, count - 1, rows):
        # The block's rows against the columns from its first row on: the
        # upper triangle and the block's own small square.
        distances = _popcount(hashes[start:start + rows, None] ^ hashes[None, start:])
        close = distances <= threshold
        if np.count_nonzero(close) <= min(rows, count - start):
            continue  # the diagonal only (each hash with itself): the usual case
        i, j = np.nonzero(close)
        upper = i < j
        i, j = i[upper], j[upper]
        yield start + i, start + j, distances[i, j]


def bucket_members(batch: Iterable[ImageFingerprint], banding: Banding
                   ) -> Iterator[tuple[tuple[int, int], list[tuple]]]:
    """(bucket key, the batch's members of that bucket), for a batch of
    fingerprints (checked). Members travel as plain tuples: Beam's coder
    writes a tuple of str/int in about a third of a NamedTuple's bytes."""
    buckets: dict[tuple[int, int], list[tuple]] = {}
    for fp in batch:
        member = tuple(check_fingerprint(fp))
        for key in banding.keys(fp.hash):
            buckets.setdefault(key, []).append(member)
    return iter(buckets.items())


def _size(entry: tuple[Any, list]) -> tuple[Any, int]:
    return entry[0], len(entry[1])


def _over_cap(entry: tuple[Any, int], max_bucket: int) -> bool:
    return entry[1] > max_bucket


class _DropFullBuckets(beam.DoFn):
    """Passes (key, members) of buckets within the cap; counts the rest."""

    def __init__(self):
        self._skipped = beam.metrics.Metrics.counter(
            METRICS_NAMESPACE, "near_duplicate_bucket_members_skipped")

    def process(self, element, skipped):
        if element[0] in skipped:
            self._skipped.inc(len(element[1]))
        else:
            yield element


def _pairs_of(entry, banding: Banding, skipped: Mapping) -> Iterator[NearPair]:
    key, parts = entry
    return bucket_pairs(key, itertools.chain.from_iterable(parts), banding, skipped)


class FindNearDuplicates(beam.PTransform):
    """PCollection[ImageFingerprint] -> PCollection[NearPair] (module docstring)."""

    def __init__(self, threshold: int = DEFAULT_THRESHOLD,
                 max_bucket: int = DEFAULT_MAX_BUCKET,
                 bands_per_key: int = DEFAULT_BANDS_PER_KEY):
        super().__init__()
        self._banding = Banding(threshold, bands_per_key)
        if not (isinstance(max_bucket, int) and max_bucket >= 2):
            raise ValueError(f"max_bucket: expected an integer >= 2, got {max_bucket!r}")
        self._max_bucket = max_bucket

    def expand(self, fingerprints):
        keyed = (fingerprints
                 | "Batch" >> beam.BatchElements(min_batch_size=_BATCH, max_batch_size=_BATCH)
                 # ((key index, bits), [ImageFingerprint]): a batch's members of a bucket
                 | "BucketKeys" >> beam.FlatMap(bucket_members, self._banding))
        # {(key index, bits): members} of the buckets over the cap only: at
        # most (keys per image) * images / max_bucket entries.
        full = (keyed
                | "BucketSizes" >> beam.Map(_size)
                | "SumSizes" >> beam.CombinePerKey(sum)
                | "OverCap" >> beam.Filter(_over_cap, self._max_bucket))
        skipped = beam.pvalue.AsDict(full)
        return (keyed
                | "DropFullBuckets" >> beam.ParDo(_DropFullBuckets(), skipped)
                # ((key index, bits), [[ImageFingerprint]]): at most max_bucket in all
                | "GroupBuckets" >> beam.GroupByKey()
                | "PairsInBucket" >> beam.FlatMap(_pairs_of, self._banding, skipped))
