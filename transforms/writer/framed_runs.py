"""A spill's batches held framed, and run files written from them in a row order.

No Beam. `spill.RunBuffer` keeps each batch's Examples as one
`FramedExamples` (framed once, in arrival order: no bytes object per row
held). `FramedBatches` reads those batches as one sequence of rows (row
numbers in arrival order) and hands them to the kernels as
``(buffers, offsets)`` (`native`). A run takes its rows' framed records by
copying them from the buffers in the run's order: `write_framed_run`, by
the kernel's `write_run` (`run_kernel.write_ordered`) or by
`run_format.RunWriter.add_framed`, the reference; both write the bytes
`run_format.write_sorted_run` writes of the same rows as bytes objects.
"""

from __future__ import annotations

from typing import BinaryIO, Sequence

import numpy as np

from ..framed_examples import FramedExamples
from .row_order import sorted_positions, take
from .run_format import BLOCK, KEY_IS_EXAMPLE, KEY_VARIABLE, RunWriter
from .run_kernel import fixed_key_order, sorted_rows, write_ordered

__all__ = ["FramedBatches", "key_ordered_rows", "write_fixed_key_run", "write_framed_run"]


class FramedBatches(Sequence):
    """Batches of framed Examples, read as one sequence of the unframed
    Examples: row ``i`` is the ``i``-th row added."""

    def __init__(self):
        self._batches: list[FramedExamples] = []
        self._starts = [0]  # each batch's first row, and the rows in all
        self._native = None
        self._table = None

    def add(self, batch: FramedExamples) -> None:
        self._batches.append(batch)
        self._starts.append(self._starts[-1] + len(batch))
        self._native = self._table = None

    def __len__(self) -> int:
        return self._starts[-1]

    def batches(self) -> list[FramedExamples]:
        return self._batches

    def __getitem__(self, row: int) -> bytes:
        if not 0 <= row < len(self):
            raise IndexError(f"row {row} outside {len(self)} rows")
        batch = int(np.searchsorted(self._starts, row, "right")) - 1
        return self._batches[batch][row - self._starts[batch]]

    def native(self) -> tuple[list[bytes], np.ndarray]:
        """``(buffers, offsets)`` as the kernels take them: every batch's
        framed buffer, and their offsets one batch after the other (int64,
        as bytes: a uint8 array)."""
        if self._native is None:
            offsets = [batch.offsets for batch in self._batches]
            joined = np.concatenate(offsets) if offsets else np.zeros(0, np.int64)
            self._native = ([batch.framed for batch in self._batches],
                            np.ascontiguousarray(joined, dtype="<i8").view(np.uint8))
        return self._native

    def _records(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each row's batch, and its record's start and end in that batch."""
        if self._table is None:
            batches = np.repeat(np.arange(len(self._batches)), np.diff(self._starts))
            starts = [batch.offsets[:-1] for batch in self._batches]
            ends = [batch.offsets[1:] for batch in self._batches]
            self._table = (batches, np.concatenate(starts) if starts else np.zeros(0, np.int64),
                           np.concatenate(ends) if ends else np.zeros(0, np.int64))
        return self._table

    def framed_sizes(self, rows: np.ndarray) -> np.ndarray:
        """The framed size of each of `rows` (int64)."""
        _, starts, ends = self._records()
        return ends[rows] - starts[rows]

    def framed(self, rows: np.ndarray) -> tuple[bytes, np.ndarray]:
        """The framed records of `rows` back to back, and each one's framed
        size (int64): the Python gather, the reference of the kernel's."""
        batches, starts, ends = self._records()
        buffers = [batch.framed for batch in self._batches]
        picked = zip(batches[rows].tolist(), starts[rows].tolist(), ends[rows].tolist())
        return (b"".join([buffers[batch][start:end] for batch, start, end in picked]),
                ends[rows] - starts[rows])


def write_framed_run(fileobj: BinaryIO, keys, rows: FramedBatches, order: np.ndarray, *,
                     key_width: int, prefix_len: int, index_every: int) -> int:
    """Writes ``rows[i] for i in order`` (keys alike) as a run file, copying
    their framed records; returns the number of rows. keys: None
    (KEY_IS_EXAMPLE), a list of bytes or a `FramedKeys`, one per row
    (KEY_VARIABLE), or a
    numpy array of fixed-width "V" items, one per row (key_width > 0)."""
    native_keys = np.ascontiguousarray(keys).view(np.uint8) if key_width > 0 else keys
    written = write_ordered(fileobj, native_keys, rows.native(), order, key_width=key_width,
                            prefix_len=prefix_len, index_every=index_every, block=BLOCK)
    if written is not None:
        return written
    writer = RunWriter(fileobj, key_width=key_width, prefix_len=prefix_len,
                       index_every=index_every)
    order = np.asarray(order, dtype=np.int64)
    total = int(rows.framed_sizes(order).sum())
    step = max(1, len(order) * BLOCK // max(1, total))
    for start in range(0, len(order), step):
        step_rows = order[start:start + step]
        framed, sizes = rows.framed(step_rows)
        listed = step_rows.tolist()
        if key_width > 0:
            blob = keys[step_rows].tobytes()
            writer.add_framed(_JoinedKeys(blob, key_width), sizes, framed, None, (blob, None))
        else:
            writer.add_framed(None if keys is None else take(keys, listed), sizes, framed,
                              lambda at, listed=listed: rows[listed[at]])
    return writer.close()


def write_fixed_key_run(fileobj: BinaryIO, keys: np.ndarray, rows: FramedBatches,
                        selected: np.ndarray, *, prefix_len: int, index_every: int) -> int:
    """`run_format.write_sorted_run` of the rows `selected` (int64
    positions) of `rows`, whose keys are one numpy array of fixed-width "V"
    items (the shuffled rows' digests), one per row: sorted by the kernel
    (`run_kernel.fixed_key_order`) or numpy, never a bytes object per key."""
    order = fixed_key_order(keys, rows.native(), selected)
    if order is None:
        picked = keys[selected]
        order = selected[sorted_positions(picked.view(f"S{keys.dtype.itemsize}"),
                                          lambda at: rows[int(selected[at])])]
    return write_framed_run(fileobj, keys, rows, order, key_width=keys.dtype.itemsize,
                            prefix_len=prefix_len, index_every=index_every)


def key_ordered_rows(fileobj: BinaryIO, keys: Sequence[bytes] | None, rows: FramedBatches,
                     selected: np.ndarray, *, prefix_len: int, index_every: int) -> int:
    """`run_format.write_sorted_run` of the rows `selected` of `rows` by
    ``(key, example)``: keys a list or a `FramedKeys`, one per row
    (KEY_VARIABLE), or None (KEY_IS_EXAMPLE: the example is the key)."""
    order = sorted_rows(keys, rows.native(), selected)
    if order is None:
        by = rows.__getitem__ if keys is None else (lambda row: (keys[row], rows[row]))
        order = np.asarray(sorted(selected.tolist(), key=by), dtype=np.int64)
    return write_framed_run(fileobj, keys, rows, order,
                            key_width=KEY_IS_EXAMPLE if keys is None else KEY_VARIABLE,
                            prefix_len=prefix_len, index_every=index_every)


class _JoinedKeys:
    """Fixed-width keys back to back, as a sequence of bytes: the exact
    bytes of each (a numpy "S" item would lose trailing NULs)."""

    __slots__ = ("blob", "width")

    def __init__(self, blob: bytes, width: int):
        self.blob, self.width = blob, width

    def __getitem__(self, index: int) -> bytes:
        if not 0 <= index < len(self):
            raise IndexError(index)
        return self.blob[index * self.width:(index + 1) * self.width]

    def __len__(self) -> int:
        return len(self.blob) // self.width
