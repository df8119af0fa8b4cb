"""A batch's int labels as an array: counted per split with numpy, named only when asked.

The native kernel gives the checked values of an int64 label feature as an
int64 array: vocabulary ids, or the numbers themselves. Naming every row's
label (a list of texts) only to count them costs a Python object and a dict
look-up per row; `IntLabels` keeps the array, counts its distinct values
with numpy a split at a time, and names each distinct value once
(`label_text`), and a row's label only where a caller indexes it (a batch
whose declined rows take the row path).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..schemas.features import label_text

__all__ = ["IntLabels"]

# Values spanning fewer than these many integers are counted with
# `numpy.bincount` (one pass, a count array of the span's size); wider ones
# with `numpy.unique` (a sort).
_BINCOUNT_SPAN = 1 << 16


class IntLabels(Sequence):
    """Each good row's label text, held as its int64 value: a vocabulary
    id, or a number named by its digits (`label_text` names both, and an id
    outside the vocabulary by its digits too).

    Build it with `of`, which takes only int64 arrays."""

    __slots__ = ("_values", "_vocabulary")

    def __init__(self, values: np.ndarray, vocabulary: Sequence[str] | None):
        self._values = values
        self._vocabulary = vocabulary

    @classmethod
    def of(cls, values: np.ndarray, vocabulary: Sequence[str] | None) -> IntLabels | None:
        """The labels of `values`, or None when they are not integers (the
        caller's list names them)."""
        if values.dtype != np.int64:
            return None
        return cls(values, vocabulary)

    def __len__(self) -> int:
        return len(self._values)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [label_text(value, self._vocabulary) for value in self._values[index].tolist()]
        return label_text(int(self._values[index]), self._vocabulary)

    def counts(self, split_of: np.ndarray, splits: int) -> list[dict[str, int]]:
        """Per split index (0 .. splits-1): label text -> rows, of the rows
        whose split_of is that index (labels without rows left out)."""
        if splits == 1:
            return [self._named(self._values)]
        return [self._named(self._values[split_of == split]) for split in range(splits)]

    def _named(self, values: np.ndarray) -> dict[str, int]:
        if not len(values):
            return {}
        low, high = int(values.min()), int(values.max())
        if high - low < _BINCOUNT_SPAN:
            counted = np.bincount(values - low)  # (no overflow: the span is small)
            present = np.flatnonzero(counted)
            distinct, counts = (present + low).tolist(), counted[present].tolist()
        else:
            found, counted = np.unique(values, return_counts=True)
            distinct, counts = found.tolist(), counted.tolist()
        # Two values with the same text (a vocabulary repeating an entry, or
        # an entry that is another value's digits) add up, as a Counter of
        # the texts would.
        named: dict[str, int] = {}
        for value, count in zip(distinct, counts):
            text = label_text(value, self._vocabulary)
            named[text] = named.get(text, 0) + count
        return named
