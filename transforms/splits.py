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
from typing import Iterable, Iterator, Sequence

import numpy as np

from ..schemas.columns import rows_as_bytes
from ..schemas.native import kernels

__all__ = ["HASH_SIZE", "ExampleRows", "HashedExamples", "JoinedDigests", "SplitAssigner",
           "assign_split", "dataset_salt", "hashed_sources", "python_row_digests", "row_digests",
           "validate_splits"]

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


class ExampleRows(Sequence):
    """An ExampleBatch held as its two columns, ``keys`` and ``examples``
    (one key, bytes or None, and one serialized Example per row): the step
    that makes Examples has them so, and the shard writer and the build
    cache read them so (`writer.prepare.batch_columns`). A ``(key,
    example)`` pair is made only for a row read as one (iterating,
    indexing), so a batch holds no tuple per row for the cyclic collector
    to walk. It reads like a list of pairs and equals one; it is not a
    list, and nothing changes it once made. rows: pairs, or another
    ExampleRows (its columns shared); key_nones: how many keys are None,
    when the maker knows (None: count them)."""

    def __init__(self, rows: Iterable = (), *, columns: tuple[list, list] | None = None,
                 key_nones: int | None = None):
        if columns is None and isinstance(rows, ExampleRows):
            columns, key_nones = rows.columns, rows.key_nones
        if columns is None:
            rows = rows if isinstance(rows, list) else list(rows)
            columns = ([key for key, _ in rows], [example for _, example in rows])
        self.keys, self.examples = columns
        self.key_nones = key_nones

    @classmethod
    def zipped(cls, keys: list, examples: list, key_nones: int | None = None) -> "ExampleRows":
        return cls(columns=(keys, examples), key_nones=key_nones)

    @property
    def columns(self) -> tuple[list, list]:
        return self.keys, self.examples

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index):
        if isinstance(index, slice):  # (a plain ExampleRows: digests are not sliced)
            return ExampleRows(columns=(self.keys[index], self.examples[index]))
        return self.keys[index], self.examples[index]

    def __iter__(self) -> Iterator[tuple]:
        return zip(self.keys, self.examples)

    def __eq__(self, other) -> bool:
        if isinstance(other, ExampleRows):
            return self.columns == other.columns
        return isinstance(other, (list, tuple)) and list(self) == list(other)

    __hash__ = None  # (as a list's)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({list(self)!r})"


class HashedExamples(ExampleRows):
    """An ExampleBatch that carries its rows' digests: `row_digests` of
    each row's key (its example when the key is None) under `salt`. The
    step that makes Examples hashes them anyway (in the convert call, or
    to count labels per split); the shard writer takes them from here
    rather than hashing every row a second time (`hash_batch`).
    digests: one bytes per row; joined: the same back to back, when the
    maker has them so (the native convert call, which then gives no list:
    `digests` makes it when first read, and the shard writer reads only
    `joined`); rows, columns, key_nones: as `ExampleRows`."""

    def __init__(self, rows: Iterable = (), salt: bytes = b"", digests: Sequence[bytes] = (),
                 *, joined: bytes | None = None, columns: tuple[list, list] | None = None,
                 key_nones: int | None = None):
        super().__init__(rows, columns=columns, key_nones=key_nones)
        self.salt = salt
        self._listed = list(digests) if digests or joined is None else None
        self.joined = joined

    @property
    def digests(self) -> list[bytes]:
        """One bytes per row, made from `joined` when first read."""
        if self._listed is None:
            self._listed = list(JoinedDigests(self.joined))
        return self._listed

    @digests.setter
    def digests(self, digests: Sequence[bytes]) -> None:
        self._listed = list(digests)

    def joined_digests(self) -> bytes:
        """The digests back to back: `joined` when it holds one digest
        per listed one (or there is no list), else the list joined."""
        listed, joined = self._listed, self.joined
        if listed is None:
            return joined
        if joined is None or len(joined) != HASH_SIZE * len(listed):
            joined = b"".join(listed)
        return joined

    def words(self) -> np.ndarray:
        """The digests as `hash_rows`' (n, 2) little-endian uint64 words."""
        return _joined_words(self.joined_digests(), len(self))

    def __getstate__(self) -> dict:
        # The digests once: joined, or the list when there is one.
        state = dict(self.__dict__)
        if state["_listed"] is not None:
            state["joined"] = None
        return state


class JoinedDigests(Sequence):
    """Digests back to back read as a sequence of bytes, a row's made only
    when it is read: the shard writer reads a few (the sampled rows')."""

    __slots__ = ("_joined",)

    def __init__(self, joined: bytes):
        self._joined = joined

    def __len__(self) -> int:
        return len(self._joined) // HASH_SIZE

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[at] for at in range(*index.indices(len(self)))]
        count = len(self)
        if not -count <= index < count:
            raise IndexError(f"digest {index} of {count}")
        start = (index % count) * HASH_SIZE
        return self._joined[start:start + HASH_SIZE]

    def __iter__(self) -> Iterator[bytes]:
        if not self._joined:
            return iter(())
        # One numpy call for all of them, not a slice per row.
        return iter(rows_as_bytes(np.frombuffer(self._joined, dtype=np.uint8)
                                  .reshape(-1, HASH_SIZE)))

    def __eq__(self, other) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)


def hashed_sources(keys: Sequence, examples: Sequence, nones: int | None = None) -> Sequence:
    """What each row's digest is of: its key, or its example when it has
    none; one of the columns itself when every row has a key or none has.
    nones: how many keys are None, when the caller has counted them."""
    if nones is None:
        nones = keys.count(None) if None in keys else 0
    if not nones:
        return keys
    if nones == len(keys):
        return examples
    return [example if key is None else key for key, example in zip(keys, examples)]


def row_digests(salt: bytes, rows: Sequence[bytes]) -> bytes:
    """The keyed BLAKE2b-128 digest of each row under `salt`, back to
    back: the native kernel's, or Python's when it is absent or a row is
    not bytes."""
    joined = _native_digests(salt, rows)
    return joined if joined is not None else b"".join(python_row_digests(salt, rows))


def _native_digests(salt: bytes, rows: Sequence[bytes]) -> bytes | None:
    """`row_digests` by the native kernel, or None without it or when a
    row is not bytes (Python takes any buffer)."""
    native = kernels()
    if native is None:
        return None
    return native.hash_rows(salt, rows if isinstance(rows, list) else list(rows))


def python_row_digests(salt: bytes, rows: Iterable[bytes]) -> list[bytes]:
    """`row_digests` in Python, one bytes per row: the reference and the fallback."""
    # Copying a keyed hasher skips blake2b's keyword parsing per row.
    copy = hashlib.blake2b(key=salt, digest_size=HASH_SIZE).copy

    def digest(source: bytes) -> bytes:
        hasher = copy()
        hasher.update(source)
        return hasher.digest()

    return list(map(digest, rows))


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
        joined = _native_digests(self.salt, keys_or_examples)
        if joined is None:
            digests = python_row_digests(self.salt, keys_or_examples)
            joined = b"".join(digests)
        else:
            digests = list(JoinedDigests(joined))
        return digests, joined, _joined_words(joined, len(digests))

    def python_hash_rows(self, keys_or_examples: Sequence[bytes]
                         ) -> tuple[list[bytes], np.ndarray]:
        """`hash_rows` in Python: the reference and the fallback."""
        digests = python_row_digests(self.salt, keys_or_examples)
        return digests, _digest_words(digests)

    def hashed(self, batch: Sequence) -> HashedExamples:
        """An ExampleBatch as a HashedExamples under this dataset's salt:
        the batch itself when it is one already (the convert call hashed
        its rows), else its rows hashed here."""
        if self._own_digests(batch, len(batch)) is not None:
            return batch
        rows = ExampleRows(batch)  # (its own columns when it has them)
        joined = row_digests(self.salt, hashed_sources(rows.keys, rows.examples,
                                                       rows.key_nones))
        return HashedExamples(salt=self.salt, joined=joined, columns=rows.columns,
                              key_nones=rows.key_nones)

    def hash_batch(self, batch: Sequence, keys_or_examples: Sequence[bytes]
                   ) -> tuple[Sequence[bytes], bytes, np.ndarray]:
        """`hash_rows_joined(keys_or_examples)` of an ExampleBatch's rows:
        the batch's own digests when it is a HashedExamples made with this
        dataset's salt (as a `JoinedDigests` when it has them only joined)."""
        joined = self._own_digests(batch, len(keys_or_examples))
        if joined is None:
            return self.hash_rows_joined(keys_or_examples)
        digests = batch._listed if batch._listed is not None else JoinedDigests(joined)
        return digests, joined, _joined_words(joined, len(batch))

    def _own_digests(self, batch: Sequence, count: int) -> bytes | None:
        """The joined digests of `batch`'s `count` rows when it carries them
        under this salt, else None."""
        if not (isinstance(batch, HashedExamples) and batch.salt == self.salt
                and len(batch) == count):
            return None
        if batch._listed is not None and len(batch._listed) != count:
            return None
        joined = batch.joined_digests()
        return joined if joined is not None and len(joined) == HASH_SIZE * count else None

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
