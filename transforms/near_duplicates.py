"""Near-duplicate images: pairs of images whose perceptual hashes
(`schemas.image_hash`) differ in at most `threshold` bits and whose
signatures agree, found by banding.

An image may have *views* (`image_fingerprint(..., views=True)`): its
whole picture and four windows (one side trimmed, `image_hash.image_views`),
each a hash with its unsure bits and a signature; an image without them
has its whole picture alone, no unsure bits. Two images are a pair when one's whole picture and the other's
whole picture or one of its windows (windows are never compared with
windows) differ in at most `threshold` bits, unsure bits of either left
out, and the two views' signatures agree; their distance is the least such
count (`pair_distance`). A copy cropped from one side is close to a window
of the original even when its whole-picture hash moved far.

`FindNearDuplicates(threshold)` takes a PCollection of `ImageFingerprint`
and gives a PCollection of `NearPair`, each pair once, ordered so that
``(split_a, key_a) < (split_b, key_b)``; identical hashes (distance 0) are
pairs too. The search never compares all pairs:

* Banding (pigeonhole). The 64 bits are cut into ``threshold + 1`` bands of
  nearly equal width (5-6 bits at the default threshold). Two hashes within
  `threshold` bits differ in at most `threshold` bands, so at least one
  band is equal in both; every image is keyed by each band of each of its
  views (the band's index and bits; a band holding unsure bits by each
  value of them: multi-probe), so any two images within the threshold
  share a bucket. Only images in a common bucket are compared (Hamming distance,
  vectorised, confirmed <= threshold). ``bands_per_key=2`` cuts
  ``threshold + 2`` bands instead and keys an image by every *pair* of
  them (at least two bands are then equal): keys of twice the bits, so
  buckets 32-64 times smaller, for ``C(threshold + 2, 2)`` keys per
  view (66 at the default threshold, against 11): for collections of
  millions of images.
* Confirmation. Two views within the threshold make a pair only when
  their signatures (`image_hash.similar`: their DCT coefficients, not only
  the coefficients' sides of the median) agree too, or either has none. This is what lets the default threshold be 10 bits: at 10
  bits unrelated pictures collide on the hash (0.74% of generated scenes
  in a pair; 5.3% with views), never on both (docs/near_duplicates.md).
* Batches. Fingerprints are bucketed a batch at a time, and a batch sends
  one element per bucket it touches: the runner's cost is per element, and
  with 11 bands of 5-6 bits a batch of 4,096 touches at most 640 buckets
  (however many keys views give each image: about 30). A member's views
  travel as one byte string (`_packed_views`): Beam's coder pickles an int
  above 63 bits, and pickling signatures and hashes once per bucket an
  image is in was about half a search's cost with views.
* Each pair once. Two close images may share several buckets; a pair is
  given only by the first of them (in key order, among the buckets each
  two views share with their bits unsure in both at 0) that was compared,
  a rule each bucket decides from the two images' views alone: no second
  shuffle. It is
  decided for all of a bucket's close pairs at once in numpy: copies of
  one picture share every bucket, and a rule applied pair by pair in
  Python cost ~0.3 ms an image on the 3,000-image benchmark set.
* Bounded buckets. A bucket with more than `max_bucket` members is not
  compared: its members are counted in the Beam counter
  ``near_duplicate_bucket_members_skipped``. Buckets fill up in two ways: a
  group of many near-identical images (blank or solid-colour pictures hash
  alike), and sheer size (a key of b bits averages images / 2**b members:
  at the default threshold and cap, past about 320,000 images with one
  band per key, about 10 million with two; with views, whose image is in
  about 2.7 buckets of each band, 120,000 and 4 million). What is given
  up: a pair is
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

from ..schemas.image_hash import HASH_BITS, SIGNATURE_BYTES, WINDOWS, signature_array, similar
from .metrics import METRICS_NAMESPACE

__all__ = ["DEFAULT_BANDS_PER_KEY", "DEFAULT_MAX_BUCKET", "DEFAULT_THRESHOLD", "Banding",
           "FindNearDuplicates", "ImageFingerprint", "NearPair", "bucket_members",
           "bucket_pairs", "pair_distance"]

# Chosen from benchmarks/bench_image_hash.py (docs/near_duplicates.md): with
# the signatures confirming, no two of 1,495 distinct generated scenes pair
# at 6-14 bits; at 10, 99.45% of planted 5% crops and >= 99.95% of other
# planted copies are found (98.40% of crops at 8; 99.80% at 12, where a
# bucket key has 4-5 bits and buckets fill twice as soon). With views every
# planted copy is found at 10, and distinct scenes pair from 12 bits on.
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
    perceptual hash and signature (0: none), the hash's unsure bits and its
    windows' (hash, unsure bits, signature) (`image_hash.split_fingerprint`)."""
    split: str
    key: Any
    path: str
    hash: int
    signature: int = 0
    unsure: int = 0
    windows: tuple = ()


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

    def keys(self, value: int, unsure: int = 0) -> list[tuple[int, int]]:
        """The bucket keys of a hash: (key index, the hash's bits of its
        bands), a key holding unsure bits once per value of them (at most
        2 ** unsure bits keys more)."""
        keys = []
        for index, mask in enumerate(self._key_masks):
            free = unsure & mask
            base, probe = value & mask & ~free, free
            while True:  # every subset of the free bits, by the usual bit trick
                keys.append((index, base | probe))
                if not probe:
                    break
                probe = (probe - 1) & free
        return keys

    def first_shared_keys(self, a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray],
                          skipped: Mapping, until: int | None = None
                          ) -> tuple[np.ndarray, np.ndarray]:
        """Per pair of images: the first bucket key outside `skipped` they
        share, as (key indices, bits), index -1 when none (up to key index
        `until`). a, b: (hashes, unsure bits), uint64 arrays of (pairs,
        views). For each two views (one of each image) the buckets they
        share at a key are those with their bits equal outside the unsure
        bits of either; of these the one with the bits unsure in both at 0
        counts, the least of those at the first key index that has any."""
        (hash_a, unsure_a), (hash_b, unsure_b) = a, b
        differ = (hash_a[:, :, None] ^ hash_b[:, None, :]) & ~(
            unsure_a[:, :, None] | unsure_b[:, None, :])
        sure = (hash_a & ~unsure_a)[:, :, None] | (hash_b & ~unsure_b)[:, None, :]
        index = np.full(len(hash_a), -1, dtype=np.int64)
        bits = np.zeros(len(hash_a), dtype=np.uint64)
        open_ = np.ones(len(hash_a), dtype=bool)
        for at, mask in enumerate(self._key_masks[:None if until is None else until + 1]):
            shared = (differ & np.uint64(mask)) == 0
            values = sure & np.uint64(mask)
            if skipped:
                for where in zip(*np.nonzero(shared)):
                    shared[where] = (at, int(values[where])) not in skipped
            found = shared.any(axis=(1, 2)) & open_
            least = np.where(shared, values, np.uint64(_HASH_MASK)).min(axis=(1, 2))
            index[found], bits[found] = at, least[found]
            open_ &= ~found
            if not open_.any():
                break
        return index, bits


_HASH_MASK = (1 << HASH_BITS) - 1


def _is_hash(value) -> bool:
    return isinstance(value, int) and 0 <= value <= _HASH_MASK


def _is_signature(value) -> bool:
    return isinstance(value, int) and 0 <= value < 1 << 8 * SIGNATURE_BYTES


def check_fingerprint(fp: ImageFingerprint) -> ImageFingerprint:
    """The fingerprint, or ValueError naming the image when its hash, unsure
    bits or windows are not 64-bit unsigned integers (at most `WINDOWS`
    windows) or its signature not one of 63 bytes (a programming error
    upstream, never data)."""
    if not (_is_hash(fp.hash) and _is_hash(fp.unsure)):
        raise ValueError(f"{fp.path} (split {fp.split!r}, key {fp.key!r}): image hash "
                         f"{fp.hash!r} or its unsure bits {fp.unsure!r} are not a 64-bit "
                         f"unsigned integer")
    if not (isinstance(fp.windows, tuple) and len(fp.windows) <= WINDOWS and all(
            isinstance(w, tuple) and len(w) == 3 and _is_hash(w[0]) and _is_hash(w[1])
            and _is_signature(w[2]) for w in fp.windows)):
        raise ValueError(f"{fp.path} (split {fp.split!r}, key {fp.key!r}): image windows "
                         f"are not at most {WINDOWS} triples of two 64-bit unsigned integers "
                         f"and a signature")
    if not _is_signature(fp.signature):
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


def _ordered(a: tuple, b: tuple, distance: int) -> NearPair:
    """The pair of two members (split, key, path, ...), the lesser first."""
    if _split_and_key(b) < _split_and_key(a):
        a, b = b, a
    return NearPair(a[0], a[1], a[2], b[0], b[1], b[2], distance)


def _views(member: tuple, width: int) -> list[tuple[int, int, int]]:
    """An `ImageFingerprint`'s (hash, unsure bits, signature) of the whole
    picture, then of its windows, padded with the whole picture's to `width`
    views (a copy of a view changes no distance, agreement or shared bucket)."""
    whole = (member[3], member[5], member[4])
    return [whole, *member[6], *[whole] * (width - 1 - len(member[6]))]


def _width(members: list[tuple]) -> int:
    """Views per `ImageFingerprint` of a list: 1 when none has windows."""
    return 1 + max(len(m[6]) for m in members)


# A view as a bucket member carries it: hash and unsure bits (uint64, little
# endian), signature (63 bytes, big endian, as `signature_array` reads it).
_VIEW = np.dtype([("hash", "<u8"), ("unsure", "<u8"), ("signature", "u1", SIGNATURE_BYTES)])


def _packed_views(fp: ImageFingerprint) -> bytes:
    """The views of a (checked) fingerprint as `_VIEW` records, the whole
    picture first. Bytes, not ints: Beam's coder writes an int above 63 bits
    (every signature, half the hashes) by pickling it, which was most of a
    search's cost with views (docs/near_duplicates.md, The cost)."""
    return b"".join(value.to_bytes(8, "little") + unsure.to_bytes(8, "little")
                    + signature.to_bytes(SIGNATURE_BYTES, "big")
                    for value, unsure, signature in
                    ((fp.hash, fp.unsure, fp.signature), *fp.windows))


def _member_views(members: list[tuple]) -> np.ndarray:
    """(members, views) `_VIEW` records of a bucket's members (split, key,
    path, `_packed_views`), each padded with its whole picture's to the
    widest member's views (1 when none has windows: then the search costs
    what it does with whole hashes alone)."""
    size = _VIEW.itemsize
    width = max(len(m[3]) for m in members) // size
    return np.frombuffer(b"".join(
        m[3] + m[3][:size] * (width - len(m[3]) // size) for m in members),
        dtype=_VIEW).reshape(len(members), width)


@functools.cache
def _view_pairs(width: int) -> tuple[tuple[int, int], ...]:
    """The view pairs compared: whole against whole, a window of the first
    against the second's whole, the first's whole against a window of the
    second."""
    return ((0, 0), *((w, 0) for w in range(1, width)), *((0, w) for w in range(1, width)))


def pair_distance(a: ImageFingerprint, b: ImageFingerprint, threshold: int) -> int | None:
    """The distance of two images (module docstring), or None when they are
    not a pair at `threshold`: the per-pair rule `bucket_pairs` applies to
    many pairs at once."""
    width = _width([tuple(a), tuple(b)])
    views_a, views_b = _views(tuple(a), width), _views(tuple(b), width)
    found = []
    for i, j in _view_pairs(width):
        (hash_a, unsure_a, signature_a), (hash_b, unsure_b, signature_b) = views_a[i], views_b[j]
        count = ((hash_a ^ hash_b) & ~(unsure_a | unsure_b)).bit_count()
        if count <= threshold and similar(signature_array([signature_a]),
                                          signature_array([signature_b]))[0]:
            found.append(count)
    return min(found, default=None)


def _confirmed(first: np.ndarray, second: np.ndarray, hashes: np.ndarray, unsure: np.ndarray,
               signatures: np.ndarray, threshold: int) -> np.ndarray:
    """Per candidate pair (member indices), `pair_distance`, threshold + 1
    for none."""
    least = np.full(len(first), threshold + 1, dtype=np.int64)
    for i, j in _view_pairs(hashes.shape[1]):
        counts = _popcount((hashes[first, i] ^ hashes[second, j])
                           & ~(unsure[first, i] | unsure[second, j])).astype(np.int64)
        counts[~similar(signatures[first, i], signatures[second, j])] = threshold + 1
        np.minimum(least, counts, out=least)
    return least


def bucket_pairs(key: tuple[int, int], members: Iterable[tuple], banding: Banding,
                 skipped: Mapping) -> Iterator[NearPair]:
    """The pairs one bucket reports: members (as `bucket_members` gives
    them) within the threshold whose signatures agree and whose first
    shared bucket outside `skipped` is this one (so each pair comes from
    exactly one bucket)."""
    members = sorted(members, key=_split_and_key)
    views = _member_views(members)
    hashes, unsure = views["hash"], views["unsure"]
    signatures = None
    for first, second, _ in _close_pairs(hashes, unsure, banding.threshold):
        index, bits = banding.first_shared_keys(
            (hashes[first], unsure[first]), (hashes[second], unsure[second]), skipped,
            until=key[0])
        ours = (index == key[0]) & (bits == np.uint64(key[1]))
        first, second = first[ours], second[ours]
        if signatures is None:  # as signature_array gives them, once a bucket has a close pair
            signatures = views["signature"].astype(np.int32) - 128
        distances = _confirmed(first, second, hashes, unsure, signatures, banding.threshold)
        keep = distances <= banding.threshold
        for i, j, distance in zip(first[keep].tolist(), second[keep].tolist(),
                                  distances[keep].tolist()):
            a, b = members[i], members[j]
            if (a[0], a[1]) != (b[0], b[1]):
                yield _ordered(a, b, distance)


# Distances computed per block of rows: at most this many at a time (2 MB
# of uint64, cache-sized), whatever the bucket's size.
_BLOCK_CELLS = 1 << 18


def _distances(hashes: np.ndarray, unsure: np.ndarray, rows: slice, columns: slice
               ) -> np.ndarray:
    """(rows, columns) distances of images given as (images, views) hashes
    and unsure bits, before their signatures are compared: the least, over
    `_VIEW_PAIRS`, of the bits differing outside either's unsure bits."""
    least = None
    for i, j in _view_pairs(hashes.shape[1]):
        counts = _popcount((hashes[rows, i, None] ^ hashes[None, columns, j])
                           & ~(unsure[rows, i, None] | unsure[None, columns, j]))
        least = counts if least is None else np.minimum(least, counts, out=least)
    return least


def _close_pairs(hashes: np.ndarray, unsure: np.ndarray, threshold: int
                 ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per block of rows, arrays (i, j, distance) of the pairs i < j with
    distance (`_distances`) <= threshold, vectorised."""
    count = len(hashes)
    rows = max(1, _BLOCK_CELLS // max(1, count * hashes.shape[1]))
    for start in range(0, count - 1, rows):
        # The block's rows against the columns from its first row on: the
        # upper triangle and the block's own small square.
        distances = _distances(hashes, unsure, slice(start, start + rows), slice(start, None))
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
    fingerprints (checked). Members travel as plain tuples (split, key,
    path, `_packed_views`): Beam's coder writes a tuple of str and bytes in
    a fraction of a NamedTuple's bytes, and without pickling big ints."""
    buckets: dict[tuple[int, int], list[tuple]] = {}
    for fp in batch:
        check_fingerprint(fp)
        member = (fp.split, fp.key, fp.path, _packed_views(fp))
        keys = dict.fromkeys(key for value, unsure, _ in _views(fp, 1 + len(fp.windows))
                             for key in banding.keys(value, unsure))
        for key in keys:
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
