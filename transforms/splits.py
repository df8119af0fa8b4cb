"""Which split a row belongs to: a keyed hash of its key, mapped onto the fractions.

Every decision here is a function of the row's key (its serialized example
when it has none), the dataset name and the configured fractions: never of
arrival order, bundling or worker count. The step that makes Examples
hashes each row here (to count labels per split) and hands the digests on
in `HashedExamples`, so the shard writer, which orders shuffled rows by the
same digest, never hashes a row twice.
"""

from __future__ import annotations

import bisect
import hashlib
import math
from typing import Iterable, Sequence

import numpy as np

from ..schemas.columns import rows_as_bytes
from ..schemas.native import kernels

__all__ = ["HASH_SIZE", "ExampleRows", "HashedExamples", "SplitAssigner", "assign_split",
           "dataset_salt", "validate_splits"]

HASH_SIZE = 16  # blake2b digest bytes: a row's digest, the shuffle order key
_SALT_LIMIT = 64  # blake2b's longest key
_TWO_64 = 1 << 64


def validate_splits(splits: Sequence[tuple[str, float]]) -> tuple[tuple[str, float], ...]:
    """Checks ``[(name, fraction), ...]``: at least one split, unique
    non-empty names, fractions >= 0 and not all zero."""
    splits = tuple((str(name), float(fraction)) for name, fraction in splits)
    if not splits:
        raise ValueError("splits: at least one split is required")
    names = [name for name, _ in splits]
    if len(set(names)) != len(names):
        raise ValueError(f"splits: duplicate split names in {names}")
    for name, fraction in splits:
        if not name:
            raise ValueError("splits: a split name is empty")
        if not (fraction >= 0 and math.isfinite(fraction)):
            raise ValueError(f"splits.{name}: fraction must be a finite number >= 0, got {fraction}")
    if sum(fraction for _, fraction in splits) <= 0:
        raise ValueError("splits: the fractions add up to 0")
    return splits


def dataset_salt(dataset_name: str) -> bytes:
    """The blake2b key that salts every row hash of a dataset."""
    salt = dataset_name.encode("utf-8")
    if len(salt) > _SALT_LIMIT:
        # blake2b keys stop at 64 bytes; longer names are hashed down, which
        # keeps every character significant.
        salt = hashlib.blake2b(salt, digest_size=_SALT_LIMIT).digest()
    return salt


class ExampleRows(list):
    """An ExampleBatch (list of ``(key, example)``) that also keeps the two
    columns it was zipped from, ``(keys, examples)``, as `columns`: the step
    that makes Examples has them as columns, and the shard writer wants
    them so (`writer.prepare.batch_columns`), which unzipping a tuple per
    row cost again. The columns must not change while the batch is in use
    (nothing changes a batch once made); a pickled batch is a plain list."""

    columns: tuple[list, list] | None = None

    @classmethod
    def zipped(cls, keys: list, examples: list) -> "ExampleRows":
        rows = cls(zip(keys, examples))
        rows.columns = (keys, examples)
        return rows

    def __reduce__(self):
        return (list, (list(self),))


class HashedExamples(ExampleRows):
    """An ExampleBatch that carries its rows' digests: `SplitAssigner.hash_rows`
    of each row's key (its example when the key is None) under `salt`. The
    step that makes Examples hashes them anyway, to count labels per split;
    the shard writer takes the digests from here rather than hashing every
    row a second time (`hash_batch`). joined: the digests back to back,
    when the maker has them so (the shard writer keeps them so); columns:
    as `ExampleRows`."""

    def __init__(self, rows: Iterable = (), salt: bytes = b"", digests: Sequence[bytes] = (),
                 *, joined: bytes | None = None, columns: tuple[list, list] | None = None):
        super().__init__(rows)
        self.salt = salt
        self.digests = list(digests)
        self.joined = joined
        self.columns = columns

    def __reduce__(self):
        return (HashedExamples, (list(self), self.salt, self.digests))


class SplitAssigner:
    """Maps a row hash onto the configured split fractions.

    The fractions become cumulative thresholds on the hash's first 8 bytes
    (a little-endian uint64), so a row's split never depends on anything but
    its key, the dataset name and the fractions.
    """

    def __init__(self, dataset_name: str, splits: Sequence[tuple[str, float]]):
        splits = validate_splits(splits)
        self.names = tuple(name for name, _ in splits)
        self.salt = dataset_salt(dataset_name)
        total = sum(fraction for _, fraction in splits)
        thresholds = []
        running = 0.0
        for _, fraction in splits:
            running += fraction
            thresholds.append(min(_TWO_64, round(running / total * _TWO_64)))
        thresholds[-1] = _TWO_64  # rounding must never leave a row without a split
        self.thresholds = tuple(thresholds)
        # A row's split is the number of thresholds at or below its hash; the
        # last threshold (2**64) is above every hash.
        self._lower_thresholds = tuple(np.uint64(threshold) for threshold in thresholds
                                       if threshold < _TWO_64)

    def hash_rows(self, keys_or_examples: Sequence[bytes]) -> tuple[list[bytes], np.ndarray]:
        """The digests of many rows, and the same as an (n, 2) array of
        little-endian uint64 words (word 0 picks the split)."""
        digests, joined, words = self.hash_rows_joined(keys_or_examples)
        return digests, words

    def hash_rows_joined(self, keys_or_examples: Sequence[bytes]
                         ) -> tuple[list[bytes], bytes, np.ndarray]:
        """`hash_rows`, with the digests also back to back (one bytes)."""
        native = kernels()
        if native is not None:
            rows = (keys_or_examples if isinstance(keys_or_examples, list)
                    else list(keys_or_examples))
            joined = native.hash_rows(self.salt, rows)
            if joined is not None:  # None: a row is not bytes; Python takes any buffer
                digests = rows_as_bytes(np.frombuffer(joined, dtype=np.uint8)
                                        .reshape(len(rows), HASH_SIZE)) if rows else []
                return digests, joined, _joined_words(joined, len(rows))
        digests, words = self.python_hash_rows(keys_or_examples)
        return digests, words.tobytes(), words

    def python_hash_rows(self, keys_or_examples: Sequence[bytes]
                         ) -> tuple[list[bytes], np.ndarray]:
        """`hash_rows` in Python: the reference and the fallback."""
        # Copying a keyed hasher skips blake2b's keyword parsing per row.
        copy = hashlib.blake2b(key=self.salt, digest_size=HASH_SIZE).copy

        def digest(source: bytes) -> bytes:
            hasher = copy()
            hasher.update(source)
            return hasher.digest()

        digests = list(map(digest, keys_or_examples))
        return digests, _digest_words(digests)

    def hash_batch(self, batch: Sequence, keys_or_examples: Sequence[bytes]
                   ) -> tuple[list[bytes], bytes, np.ndarray]:
        """`hash_rows_joined(keys_or_examples)` of an ExampleBatch's rows:
        the batch's own digests when it is a HashedExamples made with this
        dataset's salt."""
        if (isinstance(batch, HashedExamples) and batch.salt == self.salt
                and len(batch.digests) == len(batch) == len(keys_or_examples)):
            joined = batch.joined
            if joined is None or len(joined) != HASH_SIZE * len(batch):
                joined = b"".join(batch.digests)
            return batch.digests, joined, _joined_words(joined, len(batch))
        return self.hash_rows_joined(keys_or_examples)

    def split_indices(self, words: np.ndarray) -> np.ndarray:
        """The split index of each row, from `hash_rows`' words."""
        splits = np.zeros(len(words), dtype=np.intp)
        for threshold in self._lower_thresholds:
            splits += words[:, 0] >= threshold
        return splits

    def digest(self, key_or_example: bytes) -> bytes:
        return hashlib.blake2b(key_or_example, key=self.salt, digest_size=HASH_SIZE).digest()

    def split_index(self, digest: bytes) -> int:
        return bisect.bisect_right(self.thresholds, int.from_bytes(digest[:8], "little"))

    def split_of(self, key_or_example: bytes) -> str:
        return self.names[self.split_index(self.digest(key_or_example))]


def _digest_words(digests: list[bytes]) -> np.ndarray:
    return _joined_words(b"".join(digests), len(digests))


def _joined_words(joined: bytes, count: int) -> np.ndarray:
    """`count` digests, one after another -> (count, 2) little-endian uint64 words."""
    return np.frombuffer(joined, dtype="<u8").reshape(count, 2)



def assign_split(key_or_example: bytes, dataset_name: str,
                 splits: Sequence[tuple[str, float]]) -> str:
    """The split of a row: a stable hash of its key (or, without a key, its
    serialized example) salted by the dataset name, mapped onto the fractions."""
    return SplitAssigner(dataset_name, splits).split_of(key_or_example)
