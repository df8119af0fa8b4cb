"""What the shard writer knows of a row before it buffers it: split, order key, framed size, sample.

Every exchange of the shard writer starts here (`prepare_batch`), so all of
them place rows alike.
"""

from __future__ import annotations

from typing import Iterator, NamedTuple, Sequence

import numpy as np

from ...schemas.native import kernels
from ..framed_examples import FramedExamples
from ..framed_keys import FramedKeys
from ..splits import HASH_SIZE, SplitAssigner, hashed_sources
from ..tfrecord import FRAMING
from .elements import SampleEntry

__all__ = ["PreparedBatch", "batch_columns", "prepare_batch"]


def batch_columns(batch) -> tuple[Sequence, Sequence[bytes]]:
    """(keys, examples) of an ExampleBatch, checked: examples bytes (or a
    `FramedExamples`), keys bytes or None. Errors name the row."""
    keys, examples = _columns(batch)
    _check_examples(batch, examples)
    _check_keys(keys)
    return keys, examples


def _columns(batch) -> tuple[Sequence, Sequence]:
    """(keys, examples) of an ExampleBatch, unchecked."""
    if not batch:
        return (), ()
    # A batch made by the step that makes Examples is its columns
    # (`splits.ExampleRows`): no tuple per row made or unzipped.
    columns = getattr(batch, "columns", None)
    return columns if columns is not None else tuple(zip(*batch))


def _check_examples(batch, examples: Sequence) -> None:
    if isinstance(examples, FramedExamples):  # bytes by construction
        return
    if set(map(type, examples)) != {bytes}:
        for position, (key, example) in enumerate(batch):
            if type(example) is not bytes:
                raise TypeError(f"ExampleBatch row {position} (key {key!r:.80}): example must "
                                f"be bytes, got {type(example).__name__}")


def _check_keys(keys: Sequence) -> None:
    if isinstance(keys, FramedKeys):  # bytes or None by construction
        return
    if not set(map(type, keys)) <= {bytes, type(None)}:
        for position, key in enumerate(keys):
            if key is not None and type(key) is not bytes:
                raise TypeError(f"ExampleBatch row {position}: key must be bytes or None, "
                                f"got {type(key).__name__} {key!r:.80}")


def _framed_sizes(batch, examples: Sequence) -> np.ndarray:
    """Each example's framed size (int64), the examples checked: from a
    `FramedExamples`' offsets, by the native kernel in one call where it
    can (a list of bytes), else in Python."""
    if isinstance(examples, FramedExamples):
        return examples.framed_sizes()
    native = kernels()
    if native is not None and isinstance(examples, list):
        sizes = native.framed_sizes(examples)
        if sizes is not None:
            return np.frombuffer(sizes, dtype="<i8")
    _check_examples(batch, examples)
    return np.fromiter(map(len, examples), dtype=np.int64, count=len(examples)) + FRAMING


def _key_nones(keys: Sequence) -> int:
    """How many keys are None, the others checked to be bytes (a TypeError
    names the first that is not): a `FramedKeys` knows (its keys are
    bytes by construction); by the native kernel in one pass where it can
    (a list), else in Python."""
    if isinstance(keys, FramedKeys):
        return keys.nones
    native = kernels()
    if native is not None and isinstance(keys, list):
        nones = native.key_nones(keys)
        if nones is not None:
            return nones
    # Counting Nones is a C loop (identity first): most batches have no
    # keys at all, and then no key's type needs looking at. A key whose
    # comparison with None fails is not bytes: the check says which.
    try:
        nones = keys.count(None)
    except Exception:
        _check_keys(keys)
        raise
    if nones < len(keys):
        _check_keys(keys)
    return nones


class PreparedBatch(NamedTuple):
    """An ExampleBatch's rows as the shard writer sees them, as columns.

    examples: the serialized Examples (a list, or a `FramedExamples`); order_keys: what each row is sorted
    by (its digest when shuffling, else its key, or its example when it has
    none); splits: each row's split index; sizes: framed sizes (int64);
    samples: split index -> the rows of the batch sampled for bucket
    boundaries; keyed: some row has a key of its own (no shuffle: the order
    keys are not all the examples themselves); digests: when shuffling, the
    order keys as one array of fixed-width digests (`numpy` "V" items, which
    keep trailing NUL bytes), for a caller that keeps them so.
    """

    examples: Sequence[bytes]
    order_keys: Sequence[bytes]
    splits: np.ndarray
    sizes: np.ndarray
    samples: dict
    keyed: bool
    digests: np.ndarray | None = None

    def by_split(self) -> Iterator[tuple[int, np.ndarray, list[int]]]:
        """(split index, row positions as an array, the same as a list) for
        each split the batch has rows of, in split order."""
        for split in np.unique(self.splits).tolist():
            rows = np.flatnonzero(self.splits == split)
            yield split, rows, rows.tolist()


def prepare_batch(assigner: SplitAssigner, batch, *, shuffle: bool, sample_every: int,
                  prefix_len: int) -> PreparedBatch | None:
    """Hashes an ExampleBatch's rows, picks each row's split and order key,
    and samples rows for the bucket boundaries; None for an empty batch.
    The per-row work is done on the whole batch (C loops and numpy); only
    sampled rows are looked at one by one. Every exchange of the shard
    writer starts here, so all of them place rows alike."""
    keys, examples = _columns(batch)
    count = len(examples)
    if not count:
        return None
    sizes = _framed_sizes(batch, examples)
    # (the maker of an `ExampleRows` may know how many keys are None)
    nones = getattr(batch, "key_nones", None)
    sources = hashed_sources(keys, examples, _key_nones(keys) if nones is None else nones)
    digests, joined, words = assigner.hash_batch(batch, sources)
    splits = assigner.split_indices(words)
    order_keys = digests if shuffle else sources
    samples = sample_rows(words[:, 1], sizes, splits, order_keys, sample_every=sample_every,
                          prefix_len=prefix_len)
    return PreparedBatch(examples, order_keys, splits, sizes, samples,
                         keyed=not shuffle and sources is not examples,
                         digests=np.frombuffer(joined, dtype=f"V{HASH_SIZE}") if shuffle
                         else None)


def sample_rows(words: np.ndarray, sizes: np.ndarray, splits: np.ndarray,
                order_keys: Sequence[bytes], *, sample_every: int,
                prefix_len: int) -> dict[int, list[SampleEntry]]:
    """Priority sampling on content alone: the sample, hence the bucket
    boundaries, never depends on bundling. A row is sampled when
    ``size << 64 >= sample_every * (u64 + 1)`` (u64: hash bytes 8-15, in
    `words`); a float test with slack picks the candidates, the exact test
    decides. Returns split index -> sampled rows."""
    scale = float(1 << 64) / sample_every * (1 + 1e-9)
    candidates = np.flatnonzero(words.astype(np.float64) <= sizes * scale + 2)
    samples: dict[int, list[SampleEntry]] = {}
    for row in candidates.tolist():
        size = int(sizes[row])
        u64 = int(words[row])
        if (size << 64) >= sample_every * (u64 + 1):
            samples.setdefault(int(splits[row]), []).append(
                SampleEntry((size << 64) // (u64 + 1), order_keys[row][:prefix_len], size))
    return samples
