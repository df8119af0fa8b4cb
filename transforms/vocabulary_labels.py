"""A batch's labels as vocabulary ids: counted per split with numpy, named only when asked.

The native kernel gives a vocabulary label feature's checked values as an
int64 array of ids. Naming every row's label (a list of texts) only to count
them costs a Python object and a dict look-up per row; `VocabularyLabels`
keeps the ids and counts them with `numpy.bincount`, a split at a time, and
names a row's label (`label_text`) only where a caller indexes it (a batch
whose declined rows take the row path).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..schemas.features import label_text

__all__ = ["VocabularyLabels"]


class VocabularyLabels(Sequence):
    """Each good row's label text, held as its vocabulary id.

    Build it with `of`, which checks that every id names an entry of the
    vocabulary (the counts' size is the vocabulary's, never a raw id's)."""

    __slots__ = ("_ids", "_vocabulary")

    def __init__(self, ids: np.ndarray, vocabulary: Sequence[str]):
        self._ids = ids
        self._vocabulary = vocabulary

    @classmethod
    def of(cls, ids: np.ndarray, vocabulary: Sequence[str] | None) -> VocabularyLabels | None:
        """The labels of int64 `ids`, or None when some id is outside the
        vocabulary (its label is then its number: the caller's list names it)."""
        if vocabulary is None or ids.dtype.kind != "i":
            return None
        if len(ids) and (ids.min() < 0 or ids.max() >= len(vocabulary)):
            return None
        return cls(ids, vocabulary)

    def __len__(self) -> int:
        return len(self._ids)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [label_text(value, self._vocabulary) for value in self._ids[index].tolist()]
        return label_text(int(self._ids[index]), self._vocabulary)

    def counts(self, split_of: np.ndarray, splits: int) -> list[dict[str, int]]:
        """Per split index (0 .. splits-1): label text -> rows, of the rows
        whose split_of is that index (labels without rows left out)."""
        size = len(self._vocabulary)
        if splits == 1:
            per_split = [np.bincount(self._ids, minlength=size)]
        else:
            per_split = [np.bincount(self._ids[split_of == split], minlength=size)
                         for split in range(splits)]
        return [self._named(counted.tolist()) for counted in per_split]

    def _named(self, counted: list[int]) -> dict[str, int]:
        # Two entries with the same text (which a vocabulary should not
        # have) add up, as a Counter of the texts would.
        named: dict[str, int] = {}
        for label_id, count in enumerate(counted):
            if count:
                text = label_text(label_id, self._vocabulary)
                named[text] = named.get(text, 0) + count
        return named
