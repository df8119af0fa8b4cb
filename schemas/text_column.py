"""A text column held whole: every row's UTF-8 value in one buffer, read as a sequence of str.

The native table kernels give a string feature's checked values so
(`native/src/text_column.rs`): one bytes object and the offsets that cut
it (little-endian int64, one more than the rows), rather than a str per
row that only the statistics read. `TextColumn` reads as the list of str
it stands for, making a str only for a row asked for; the text statistics
(`schemas/stats/text.py`) hand its buffers to the kernel whole, and picking
rows (`take`, or indexing with an array) gives another `TextColumn`, its
bytes copied by the kernel (`text_column_take`) where it runs.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import pairwise

import numpy as np

from .native import kernels

__all__ = ["TextColumn"]


class TextColumn(Sequence):
    """data: the rows' UTF-8 values back to back; offsets: where each row's
    value starts and ends (row i is ``data[offsets[i]:offsets[i + 1]]``),
    as little-endian int64 bytes or an int64 array."""

    __slots__ = ("_ends", "data", "offsets")

    def __init__(self, data: bytes, offsets):
        self.data = data
        self._ends = np.frombuffer(offsets, dtype="<i8")
        self.offsets = offsets if type(offsets) is bytes else self._ends.tobytes()
        if not len(self._ends):
            raise ValueError("a text column's offsets hold at least one bound")

    @classmethod
    def of(cls, texts: Sequence[str]) -> TextColumn:
        """The column of `texts` (str)."""
        encoded = [text.encode("utf-8") for text in texts]
        ends = np.zeros(len(encoded) + 1, dtype="<i8")
        np.cumsum([len(text) for text in encoded], out=ends[1:])
        return cls(b"".join(encoded), ends.tobytes())

    def __len__(self) -> int:
        return len(self._ends) - 1

    def __getitem__(self, at):
        if isinstance(at, np.ndarray):
            return self.take(np.flatnonzero(at) if at.dtype == bool else at)
        if isinstance(at, slice):
            return self.take(np.arange(len(self))[at])
        row = at + len(self) if at < 0 else at
        if not 0 <= row < len(self):
            raise IndexError("text column index out of range")
        return self.data[self._ends[row]:self._ends[row + 1]].decode("utf-8")

    def __iter__(self) -> Iterator[str]:
        ends = self._ends.tolist()
        data = self.data
        if data.isascii():  # (one str for all: a character per byte, cut at the same offsets)
            data = data.decode("ascii")
            return (data[start:end] for start, end in pairwise(ends))
        return (data[start:end].decode("utf-8") for start, end in pairwise(ends))

    def take(self, rows) -> TextColumn:
        """The column of the rows at `rows` (int positions), in that order:
        by the native kernel (`text_column_take`) where it runs, else as
        `python_take` picks them (the reference, and the path that says
        what is wrong with offsets the kernel declines)."""
        rows = self._checked_rows(rows)
        native = kernels()
        if native is not None:
            taken = native.text_column_take(self.data, self.offsets,
                                            rows.astype("<i8", copy=False).view(np.uint8))
            if taken is not None:
                return TextColumn(*taken)
        return self._picked(rows)

    def python_take(self, rows) -> TextColumn:
        """`take` with numpy: the reference the kernel is held to."""
        return self._picked(self._checked_rows(rows))

    def _checked_rows(self, rows) -> np.ndarray:
        """`rows` as non-negative int positions (negative ones count from
        the end); an IndexError for one out of range."""
        rows = np.asarray(rows, dtype=np.intp)
        rows = np.where(rows < 0, rows + len(self), rows)
        if len(rows) and not (0 <= rows.min() and rows.max() < len(self)):
            raise IndexError("text column index out of range")
        return rows

    def _picked(self, rows: np.ndarray) -> TextColumn:
        starts, ends = self._ends[rows], self._ends[rows + 1]
        lengths = ends - starts
        taken = np.zeros(len(rows) + 1, dtype="<i8")
        np.cumsum(lengths, out=taken[1:])
        # Each byte taken, at its source position: its row's start, moved
        # along by how far into the taken row it lies.
        source = np.repeat(starts - taken[:-1], lengths) + np.arange(taken[-1])
        picked = np.frombuffer(self.data, dtype=np.uint8)[source]
        return TextColumn(picked.tobytes(), taken.tobytes())

    def __eq__(self, other) -> bool:
        """Equal to a list of the same str, as the list it stands for is."""
        if isinstance(other, TextColumn):
            return len(self) == len(other) and list(self) == list(other)
        if isinstance(other, list):
            return list(self) == other
        return NotImplemented

    __hash__ = None  # (as a list's: the values may be compared, not hashed)

    def __reduce__(self):
        return TextColumn, (self.data, self.offsets)

    def __repr__(self) -> str:
        return f"TextColumn({len(self)} texts, {len(self.data)} bytes)"
