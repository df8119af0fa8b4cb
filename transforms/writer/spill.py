"""The spill step's files: rows buffered into sorted runs, and run lists.

No Beam. The shard writer's spill step (`shards`) and the build cache
(`cache.pieces`) hold ExampleBatches' rows in a `RunBuffer` and write each
split's rows as a sorted run file (`run_format`). A split's runs are listed
in a small JSON file (`write_run_list`) that the bucket sorters read
(`read_run_list`) and that a measured bucket of shards cut at rows is
named by (`bucket_reference`: the run list and the bucket's key range,
standing in for a bucket file); `remove_runs` deletes the runs and their list. The
paths of the writer's temporary files are made, opened and removed here.
"""

from __future__ import annotations

import json
import posixpath
from typing import BinaryIO, NamedTuple, Sequence

import fsspec
import numpy as np

from ..framed_examples import FramedExamples
from ..framed_keys import FramedKeys
from ..splits import SplitAssigner
from .elements import BucketRange, RunInfo, SampleEntry
from .framed_runs import FramedBatches, key_ordered_rows, write_fixed_key_run
from .prepare import prepare_batch

__all__ = [
    "ROW_OVERHEAD",
    "RunBuffer",
    "SplitRows",
    "bucket_reference",
    "join_path",
    "open_for_write",
    "parse_bucket_reference",
    "read_run_list",
    "remove_file",
    "remove_runs",
    "write_run_list",
]

# Bytes of Python/numpy objects per row held in memory (buffered, or sorted).
ROW_OVERHEAD = 160
# Bytes per row a `RunBuffer` holds besides the framed records: the
# record's offset, its split, its digest (shuffled), and the write's order.
_FRAMED_ROW_OVERHEAD = 48
# Bytes per row a batch's `FramedKeys` holds besides the keys: an offset.
_KEY_OFFSET_SIZE = 8


def join_path(base: str, *parts: str) -> str:
    """Joins path parts with '/', for local paths and fsspec URLs alike."""
    return "/".join([base.rstrip("/"), *parts])


class SplitRows(NamedTuple):
    """What a `RunBuffer` holds of one split after a batch: rows and framed
    bytes in all, and the batch's sampled rows of the split."""

    split: int
    num_records: int
    num_bytes: int
    sample: tuple[SampleEntry, ...]


class RunBuffer:
    """ExampleBatches' rows by split, waiting to be sorted and written as one
    run per split: what the shard writer's spill step and the build cache
    hold between two writes.

    `add` hashes a batch's rows, picks each row's split and order key
    (`prepare.prepare_batch`, on whole batches) and keeps the batch's
    Examples framed in one buffer (`framed_runs.FramedBatches`); `write`
    writes a split's rows as a sorted run, copying their framed records;
    `clear` empties the buffer. `buffered_bytes` estimates the memory
    held: the framed records, a few arrays' items a row, and the keys
    where rows are ordered by keys of their own."""

    def __init__(self, assigner: SplitAssigner, *, shuffle: bool, sample_every: int,
                 prefix_len: int, index_every: int):
        self._assigner = assigner
        self._shuffle = shuffle
        self._sample_every = sample_every
        self._prefix_len = prefix_len
        self._index_every = index_every
        self.clear()

    def clear(self) -> None:
        splits = len(self._assigner.names)
        # Every row held, all splits together in arrival order: a batch is
        # kept as its Examples framed in one buffer and its arrays (no
        # object per row); `write` picks a split's rows. Keys: when
        # shuffling the digests as numpy arrays of fixed-width items, one
        # per batch; else each batch's order keys (a `FramedKeys` from the
        # native kernel, else a list), or None where they are its examples.
        self._rows_held = FramedBatches()
        self._splits: list[np.ndarray] = []
        self._keys: list = []
        self._keyed = [False] * splits  # a row with its own key (no shuffle)
        self._rows = [0] * splits
        self._bytes = [0] * splits
        self.buffered_bytes = 0

    def add(self, batch) -> list[SplitRows]:
        """Keeps a batch's rows; returns what each split it had rows of holds now."""
        prepared = prepare_batch(self._assigner, batch, shuffle=self._shuffle,
                                 sample_every=self._sample_every, prefix_len=self._prefix_len)
        if prepared is None:
            return []
        splits = len(self._rows)
        rows = np.bincount(prepared.splits, minlength=splits).tolist()
        sizes = np.bincount(prepared.splits, weights=prepared.sizes, minlength=splits)
        # Framed once, in arrival order (a sequential pass); the batch's
        # bytes objects are not kept.
        framed = FramedExamples.of(prepared.examples, prepared.sizes)
        self._rows_held.add(framed)
        self._splits.append(prepared.splits.astype(self._split_type, copy=False))
        held_keys = 0
        if prepared.digests is not None:
            self._keys.append(prepared.digests)
        elif isinstance(prepared.order_keys, FramedKeys):  # (keyed: no key is None)
            self._keys.append(prepared.order_keys)
            held_keys = len(prepared.order_keys.buffer) + _KEY_OFFSET_SIZE * len(framed)
        elif prepared.keyed:
            self._keys.append(list(prepared.order_keys))
            held_keys = sum(map(len, prepared.order_keys)) + ROW_OVERHEAD * len(framed)
        else:
            self._keys.append(None)
        held = []
        for split in np.flatnonzero(rows).tolist():
            self._keyed[split] = self._keyed[split] or prepared.keyed
            self._rows[split] += rows[split]
            # float64 sums of sizes: exact below 2**53 bytes a batch
            self._bytes[split] += int(sizes[split])
            held.append(SplitRows(split, self._rows[split], self._bytes[split],
                                  tuple(prepared.samples.get(split, ()))))
        self.buffered_bytes += len(framed.framed) + _FRAMED_ROW_OVERHEAD * len(framed) + held_keys
        return held

    @property
    def _split_type(self):
        # One byte a row where the splits fit one (they nearly always do).
        return np.int8 if len(self._rows) <= 127 else np.intp

    def splits_held(self) -> list[int]:
        """The splits with rows, in split order."""
        return [split for split, rows in enumerate(self._rows) if rows]

    def _rows_of(self, split: int) -> np.ndarray:
        """The positions of a split's rows among those held (int64)."""
        if len(self._splits) > 1:  # joined once, for every split's write
            self._splits = [np.concatenate(self._splits)]
        if not self._splits:
            return np.zeros(0, np.int64)
        return np.flatnonzero(self._splits[0] == split).astype(np.int64, copy=False)

    def write(self, split: int, fileobj: BinaryIO) -> int:
        """Writes a split's rows as a sorted run; returns its number of rows."""
        rows = self._rows_of(split)
        options = {"prefix_len": self._prefix_len, "index_every": self._index_every}
        if self._shuffle:
            if len(self._keys) > 1:  # joined once, for every split's write
                self._keys = [np.concatenate(self._keys)]
            return write_fixed_key_run(fileobj, self._keys[0], self._rows_held, rows, **options)
        return key_ordered_rows(fileobj, self._key_list() if self._keyed[split] else None,
                                self._rows_held, rows, **options)

    def _key_list(self) -> list[bytes] | FramedKeys:
        """Every row's order key, its example where its batch had no key
        of its own (batches with and without keys are rare together): one
        `FramedKeys` when some batch's keys came so (the native kernel's),
        else a list."""
        if len(self._keys) != 1 or self._keys[0] is None:
            parts = [list(batch) if batch_keys is None else batch_keys
                     for batch, batch_keys in zip(self._rows_held.batches(), self._keys)]
            if any(isinstance(part, FramedKeys) for part in parts):
                self._keys = [FramedKeys.joined(list(map(FramedKeys.of, parts)))]
            else:
                self._keys = [[key for part in parts for key in part]]
        return self._keys[0]


_BUCKET_REFERENCE = "bucket:"


def bucket_reference(runs_file: str, bucket: BucketRange) -> str:
    """A measured bucket's stand-in for a file path: its run list and key range."""
    return _BUCKET_REFERENCE + json.dumps(
        [runs_file, bucket.split, bucket.index, bucket.lo.hex(),
         None if bucket.hi is None else bucket.hi.hex()])


def parse_bucket_reference(path: str) -> tuple[str, BucketRange] | None:
    """``(run list file, BucketRange)`` of a `bucket_reference`; None for a
    path to a file."""
    if not path.startswith(_BUCKET_REFERENCE):
        return None
    runs_file, split, index, lo, hi = json.loads(path[len(_BUCKET_REFERENCE):])
    return runs_file, BucketRange(split, index, bytes.fromhex(lo),
                                  None if hi is None else bytes.fromhex(hi))


def write_run_list(path: str, runs: Sequence[RunInfo]) -> None:
    """Writes the run files of a split (JSON) for the bucket sorters."""
    payload = {"runs": [[run.split, run.path, run.num_records, run.num_bytes, run.kept]
                        for run in runs]}
    with open_for_write(path) as fileobj:
        fileobj.write(json.dumps(payload).encode("utf-8"))


def read_run_list(path: str) -> list[RunInfo]:
    """The run files listed by `write_run_list`."""
    with fsspec.open(path, "rb") as fileobj:
        payload = json.loads(fileobj.read().decode("utf-8"))
    return [RunInfo(*item) for item in payload["runs"]]


def remove_runs(runs_file: str) -> None:
    """Deletes the run files named in a run list, then the list itself.
    Files already gone are skipped, so a retried call is harmless."""
    try:
        runs = read_run_list(runs_file)
    except FileNotFoundError:
        return
    for run in runs:
        remove_file(run.path)
    remove_file(runs_file)


def open_for_write(path: str) -> BinaryIO:
    fs, fs_path = fsspec.core.url_to_fs(path)
    fs.makedirs(posixpath.dirname(fs_path), exist_ok=True)
    return fs.open(fs_path, "wb")


def remove_file(path: str) -> None:
    fs, fs_path = fsspec.core.url_to_fs(path)
    try:
        fs.rm(fs_path)
    except FileNotFoundError:
        pass
