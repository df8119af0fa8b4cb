"""Exact duplicates as plain code: each good row's content digest, and the duplicates among a group of fingerprints.

A row's content digest is BLAKE2b-128 (unkeyed) of its serialized Example
restricted to the checked features: the Example itself when every feature
is checked, else an Example rebuilt from the map entries of the checked
features only (`restricted_example`). Examples are deterministic (entries
in key order, one encoding per value), so two rows have the same digest
exactly when they store the same values in the checked features, whichever
row path (native kernel or Python) made them.

What leaves a row is a `Fingerprint` (digest, split index, key): about 40
bytes. `find_duplicates` takes every fingerprint of one digest bucket and
gives a `DuplicatesPart`; parts add up (`merge_parts`) in any order to the
same result, so bucketing, bundling and worker count never change it.
Nothing here knows about Beam.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import math
import struct
from typing import Iterable, NamedTuple, Sequence

import numpy as np

from .example import example_from_entries
from .native import kernels

__all__ = ["DEDUPE_MODES", "DIGEST_SIZE", "MAX_PAIRS", "DuplicatePair", "DuplicatesPart",
           "Fingerprint", "FingerprintBatch", "Removal", "content_digests", "find_and_remove",
           "find_duplicates", "key_value", "keyless_key", "merge_parts", "origin_of",
           "render_part", "restricted_example"]

# What `validation.duplicates.dedupe` may remove: the later copies within
# each split, or every copy after the first anywhere.
DEDUPE_MODES = ("within_split", "across_splits")

DIGEST_SIZE = 16
# duplicates.json lists at most this many example pairs: its size is bounded
# whatever the dataset holds.
MAX_PAIRS = 100
# A keyless row's stand-in key: its row digest behind a tag below every
# `sortable_key` tag (0x01..0x05), so keyless and keyed rows never mix.
_KEYLESS_TAG = b"\x00"


class Fingerprint(NamedTuple):
    """What duplicate detection keeps of a good row: its content digest, its
    split (index in configured order), its key (`sortable_key` bytes, or
    `keyless_key` of its row digest) and, when later copies are removed,
    its origin (`origin_of` its input file and row: rows equal in key and
    content are still told apart); with near-duplicate images, the image's
    perceptual hash (None: it could not be hashed) and path."""

    digest: bytes
    split: int
    key: bytes
    origin: bytes = b""
    image_hash: int | None = None
    path: str | None = None


class Removal(NamedTuple):
    """A later copy that duplicate removal drops: its `origin` (which input
    row), its (split index, key) and the (split index, key) of the row it
    duplicates, which is kept."""

    origin: bytes
    later: tuple[int, bytes]
    earlier: tuple[int, bytes]


class DuplicatePair(NamedTuple):
    """A row (`later`) equal to an earlier one: kind 0 within a split, 1
    across splits; each side a (split index, key). Sorted by these fields."""

    kind: int
    earlier: tuple[int, bytes]
    later: tuple[int, bytes]


class DuplicatesPart(NamedTuple):
    """Duplicates found among some digests: `within` per split index the
    rows equal to an earlier row of the same split; `across` per (a, b)
    split indices (a < b) the rows of b equal to a row of a; `duplicate_rows`
    rows equal to an earlier row anywhere; `cross_split_rows` rows equal to
    a row of an earlier split; `rows` fingerprints seen; `pairs` the first
    `MAX_PAIRS` pairs in sort order; `unhashed` images that near-duplicate
    detection could not hash."""

    within: dict
    across: dict
    duplicate_rows: int
    cross_split_rows: int
    rows: int
    pairs: tuple
    unhashed: int = 0


def origin_of(source: str, row: int | None) -> bytes:
    """8 bytes that tell an input row from every other of the build: a
    hash of its file (or an image's path) and its row number."""
    text = f"{source}\0{'' if row is None else row}".encode("utf-8", "surrogatepass")
    return hashlib.blake2b(text, digest_size=8).digest()


def keyless_key(row_digest: bytes) -> bytes:
    """The stand-in key of a row without a key column: its row digest (the
    hash that assigns its split), which orders keyless rows deterministically."""
    return _KEYLESS_TAG + row_digest


def _varint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7


def _entries(example: bytes) -> Iterable[tuple[bytes, int, int]]:
    """(feature name, start, end) of each map entry of a serialized Example
    as `ExampleEncoder` makes it (`example_head`, then the entries, each a
    tag, a length and a body that starts with its key field), in order."""
    _, position = _varint(example, 1)
    end = len(example)
    while position < end:
        entry_start = position
        size, body = _varint(example, position + 1)
        name_size, name_at = _varint(example, body + 1)
        yield example[name_at:name_at + name_size], entry_start, body + size
        position = body + size


def restricted_example(example: bytes, names: frozenset[bytes]) -> bytes:
    """The serialized Example holding only the features in `names` (UTF-8
    names), in the original order: what the digest of a row checked on a
    subset of its features is computed over."""
    kept = b"".join(example[start:end] for name, start, end in _entries(example)
                    if name in names)
    return example_from_entries(kept)


def content_digests(examples: Sequence[bytes], names: frozenset[bytes] | None = None) -> bytes:
    """The content digest of each serialized Example, one after another:
    BLAKE2b-128 of the Example restricted to `names` (None: all of it). The
    native kernel's `hash_rows` with an empty key is plain BLAKE2b, as
    hashlib's."""
    rows = (list(examples) if names is None
            else [restricted_example(example, names) for example in examples])
    native = kernels()
    if native is not None:
        joined = native.hash_rows(b"", rows)
        if joined is not None:
            return bytes(joined)
    return b"".join(hashlib.blake2b(row, digest_size=DIGEST_SIZE).digest() for row in rows)


class FingerprintBatch:
    """The `Fingerprint`s of a batch of rows held column by column, so that
    a batch crosses the runner's shuffle as a few byte strings and one list
    of keys (pickled once, `batch_coder`) rather than an object per row:
    `digests` (16 bytes a row), `splits` (little-endian uint16 a row),
    `keys`, and optionally `origins` (8 bytes a row), `image_hashes` and
    `paths` (lists)."""

    __slots__ = ("digests", "splits", "keys", "origins", "image_hashes", "paths")

    def __init__(self, digests: bytes, splits: bytes, keys: list, origins: bytes = b"",
                 image_hashes: list | None = None, paths: list | None = None):
        self.digests, self.splits, self.keys = digests, splits, keys
        self.origins, self.image_hashes, self.paths = origins, image_hashes, paths

    def __len__(self) -> int:
        return len(self.keys)

    def __reduce__(self):
        return (FingerprintBatch, (self.digests, self.splits, self.keys, self.origins,
                                   self.image_hashes, self.paths))

    @classmethod
    def of(cls, fingerprints: Sequence[Fingerprint]) -> "FingerprintBatch":
        """The batch of these fingerprints (all with or all without origins
        and image hashes)."""
        first = fingerprints[0] if fingerprints else Fingerprint(b"", 0, b"")
        return cls(b"".join(f.digest for f in fingerprints),
                   np.array([f.split for f in fingerprints], dtype="<u2").tobytes(),
                   [f.key for f in fingerprints], b"".join(f.origin for f in fingerprints),
                   [f.image_hash for f in fingerprints] if first.path is not None else None,
                   [f.path for f in fingerprints] if first.path is not None else None)

    @classmethod
    def joined(cls, batches: Iterable["FingerprintBatch"]) -> "FingerprintBatch":
        batches = list(batches)
        hashed = bool(batches) and batches[0].paths is not None
        return cls(b"".join(b.digests for b in batches), b"".join(b.splits for b in batches),
                   [key for b in batches for key in b.keys],
                   b"".join(b.origins for b in batches),
                   [h for b in batches for h in b.image_hashes] if hashed else None,
                   [p for b in batches for p in b.paths] if hashed else None)

    def split_indices(self) -> np.ndarray:
        return np.frombuffer(self.splits, dtype="<u2")

    def origin(self, index: int) -> bytes:
        return self.origins[index * 8:index * 8 + 8]

    def take(self, indices: Sequence[int]) -> "FingerprintBatch":
        """The rows at `indices`, in that order."""
        digests = np.frombuffer(self.digests, dtype=np.uint8).reshape(-1, DIGEST_SIZE)
        origins = (np.frombuffer(self.origins, dtype=np.uint8).reshape(-1, 8)[indices].tobytes()
                   if self.origins else b"")
        return FingerprintBatch(digests[indices].tobytes(), self.split_indices()[indices].tobytes(),
                                [self.keys[i] for i in indices], origins,
                                None if self.image_hashes is None
                                else [self.image_hashes[i] for i in indices],
                                None if self.paths is None else [self.paths[i] for i in indices])

    def buckets(self, count: int) -> np.ndarray:
        """Each row's digest bucket: its digest's last 4 bytes (digests are
        uniform: any bytes do), little-endian, modulo `count`."""
        words = np.frombuffer(self.digests, dtype="<u4").reshape(-1, DIGEST_SIZE // 4)
        return words[:, -1] % np.uint32(count)

    def unhashed(self) -> int:
        """Images whose perceptual hash could not be made."""
        return 0 if self.image_hashes is None else sum(h is None for h in self.image_hashes)


def _groups(batch: FingerprintBatch) -> list[list[tuple[bytes, int, bytes]]]:
    """The rows of each digest that more than one row has, as (key, split,
    origin), earliest first. Rows are sorted by digest in numpy; only the
    duplicates become Python objects."""
    words = np.frombuffer(batch.digests, dtype="<u8").reshape(-1, 2)
    if len(words) < 2:
        return []
    order = np.lexsort((words[:, 1], words[:, 0]))
    ordered = words[order]
    same = (ordered[1:] == ordered[:-1]).all(axis=1)  # row i+1 equals row i
    starts = np.flatnonzero(~np.concatenate(([False], same)))
    ends = np.append(starts[1:], len(order))
    splits = batch.split_indices()
    groups = []
    for start, end in zip(starts[ends - starts > 1].tolist(), ends[ends - starts > 1].tolist()):
        groups.append(sorted((batch.keys[i], int(splits[i]), batch.origin(i))
                             for i in order[start:end].tolist()))
    return groups


def _count(groups: Iterable[list[tuple[bytes, int, bytes]]], rows: int) -> DuplicatesPart:
    """The duplicates among groups of equal rows (each earliest first) of
    `rows` rows."""
    within: dict[int, int] = {}
    across: dict[tuple[int, int], int] = {}
    duplicate_rows = cross_split_rows = 0
    pairs: list[DuplicatePair] = []
    for members in groups:
        if len(members) == 1:
            continue
        duplicate_rows += len(members) - 1
        first_of: dict[int, tuple[int, bytes]] = {}
        count_of: dict[int, int] = {}
        for key, split, _ in members:
            count_of[split] = count_of.get(split, 0) + 1
            if split in first_of:
                within[split] = within.get(split, 0) + 1
                pairs.append(DuplicatePair(0, first_of[split], (split, key)))
            else:
                first_of[split] = (split, key)
        present = sorted(count_of)
        cross_split_rows += sum(count_of[split] for split in present[1:])
        for a, b in itertools.combinations(present, 2):
            across[(a, b)] = across.get((a, b), 0) + count_of[b]
        earliest = (members[0][1], members[0][0])
        pairs += [DuplicatePair(1, earliest, first) for split, first in sorted(first_of.items())
                  if first != earliest]
    pairs.sort()
    return DuplicatesPart(within, across, duplicate_rows, cross_split_rows, rows,
                          tuple(pairs[:MAX_PAIRS]))


def find_duplicates(batches: Iterable[FingerprintBatch]) -> DuplicatesPart:
    """The duplicates among fingerprint batches that hold every row of their
    digests. In a digest's group the earlier row is the one with the
    smallest key, then the smaller split index (then origin); within a
    split a row duplicates its split's first row, across splits each
    split's first row pairs with the group's first row of an earlier split."""
    batch = FingerprintBatch.joined(batches)
    return _count(_groups(batch), len(batch))._replace(unhashed=batch.unhashed())


def _removed(members: list[tuple[bytes, int, bytes]], mode: str
             ) -> tuple[list[tuple[bytes, int, bytes]], list[Removal]]:
    """(the rows kept, the rows removed) of one group of equal rows: every
    row but its split's first (within_split), or but the group's first
    (across_splits)."""
    kept, removed = [], []
    first_of: dict[int, tuple[int, bytes]] = {}
    earliest = (members[0][1], members[0][0])
    for key, split, origin in members:
        keeper = first_of.get(split) if mode == "within_split" else (
            None if (split, key) == earliest and not kept else earliest)
        if keeper is None:
            first_of[split] = (split, key)
            kept.append((key, split, origin))
        else:
            removed.append(Removal(origin, (split, key), keeper))
    return kept, removed


def find_and_remove(batches: Iterable[FingerprintBatch], mode: str
                    ) -> tuple[DuplicatesPart, DuplicatesPart, list[Removal]]:
    """(the duplicates found, those left once the later copies are removed,
    the removals) among fingerprint batches that hold every row of their
    digests; `mode` is one of `DEDUPE_MODES`."""
    if mode not in DEDUPE_MODES:
        raise ValueError(f"dedupe must be one of {', '.join(DEDUPE_MODES)}, not {mode!r}")
    batch = FingerprintBatch.joined(batches)
    groups = _groups(batch)
    kept_groups, removals = [], []
    for members in groups:
        kept, removed = _removed(members, mode)
        kept_groups.append(kept)
        removals += removed
    return (_count(groups, len(batch))._replace(unhashed=batch.unhashed()),
            _count(kept_groups, len(batch) - len(removals)), removals)


def merge_parts(parts: Iterable[DuplicatesPart]) -> DuplicatesPart:
    """The sum of parts found in disjoint digest buckets: the same whatever
    their number and order."""
    within: dict[int, int] = {}
    across: dict[tuple[int, int], int] = {}
    duplicate_rows = cross_split_rows = rows = unhashed = 0
    pairs: list = []
    for part in parts:
        unhashed += part.unhashed
        for split, count in part.within.items():
            within[split] = within.get(split, 0) + count
        for pair, count in part.across.items():
            across[pair] = across.get(pair, 0) + count
        duplicate_rows += part.duplicate_rows
        cross_split_rows += part.cross_split_rows
        rows += part.rows
        pairs = sorted(pairs + [DuplicatePair(*pair) for pair in part.pairs])[:MAX_PAIRS]
    return DuplicatesPart(within, across, duplicate_rows, cross_split_rows, rows, tuple(pairs),
                          unhashed)


def key_value(key: bytes) -> dict:
    """How duplicates.json names a row by its key: ``{"key": value}`` with
    the key column's value (text, int, float, bool; bytes as
    ``{"base64": ...}``), or ``{"key": null, "row_digest": hex}`` for a row
    without a key column."""
    tag, body = key[:1], key[1:]
    if tag == _KEYLESS_TAG:
        return {"key": None, "row_digest": body.hex()}
    if tag == b"\x04":
        return {"key": body.decode("utf-8")}
    if tag == b"\x02":
        size = body[0] - 0x80 if body[0] >= 0x80 else 0x7F - body[0]
        magnitude = int.from_bytes(body[1:1 + size], "big")
        return {"key": magnitude if body[0] >= 0x80 else magnitude - (1 << (8 * size))}
    if tag == b"\x03":
        bits = int.from_bytes(body, "big")
        bits = bits ^ (1 << 63) if bits >> 63 else bits ^ ((1 << 64) - 1)
        number = struct.unpack(">d", bits.to_bytes(8, "big"))[0]
        return {"key": number if math.isfinite(number) else repr(number)}
    if tag == b"\x01":
        return {"key": body == b"\x01"}
    return {"key": {"base64": base64.b64encode(body).decode("ascii")}}


def render_part(part: DuplicatesPart, split_names: Sequence[str]) -> dict:
    """The JSON form of a whole build's `DuplicatesPart`: every split and
    every pair of splits (in configured order) with its count, zeros
    included; pairs naming their rows by split name and key."""
    def side(split_and_key: tuple[int, bytes]) -> dict:
        split, key = split_and_key
        return {"split": split_names[split], **key_value(key)}

    return {
        "within_split": {name: part.within.get(index, 0) for index, name in enumerate(split_names)},
        "across_splits": {f"{split_names[a]}/{split_names[b]}": part.across.get((a, b), 0)
                          for a, b in itertools.combinations(range(len(split_names)), 2)},
        "duplicate_rows": part.duplicate_rows,
        "cross_split_rows": part.cross_split_rows,
        "rows_checked": part.rows,
        "images_not_hashed": part.unhashed,
        "pairs": [{"kind": ("within_split", "across_splits")[pair.kind],
                   "earlier": side(pair.earlier), "later": side(pair.later)}
                  for pair in map(DuplicatePair._make, part.pairs)],
    }
