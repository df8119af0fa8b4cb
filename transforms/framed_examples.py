"""A batch's serialized Examples held framed, back to back, in one buffer.

The step that makes Examples and the shard writer's spill pass a batch's
Examples as one `FramedExamples` rather than one bytes object per row: the
records are framed once, in row order, exactly as a TFRecord file holds
them, and a run or a shard takes them by slicing the buffer. The class
reads as a sequence of the unframed Examples (a row's bytes object is made
only when read), so code that wants bytes per row keeps working.
"""

from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np

from .tfrecord import FRAMING, HEADER_SIZE, frame_records

__all__ = ["FramedExamples", "Spans"]


class Spans(Sequence):
    """Rows held as spans of one buffer at int64 `offsets` (one more than
    the rows): the indexing `FramedExamples` and `FramedKeys` share. A
    slice of step 1 is one span, cut by `_spans`; a row is read by `_row`."""

    __slots__ = ()
    _unit = "rows"  # (what an IndexError calls them)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, index):
        count = len(self)
        if isinstance(index, slice):
            start, stop, step = index.indices(count)
            if step != 1:
                return [self[position] for position in range(start, stop, step)]
            stop = max(start, stop)
            return self._spans(start, stop, int(self.offsets[start]), int(self.offsets[stop]))
        if index < 0:
            index += count
        if not 0 <= index < count:
            raise IndexError(f"{type(self).__name__} index {index} out of range "
                             f"({count} {self._unit})")
        return self._row(index)


class FramedExamples(Spans):
    """Framed TFRecord records back to back: record ``i`` spans
    ``framed[offsets[i]:offsets[i + 1]]`` and reads as the Example between
    its 12-byte header and its 4-byte CRC.

    framed: the records, bytes; offsets: int64, one more than the records,
    from 0 to ``len(framed)``, each record at least `FRAMING` bytes. The
    offsets are checked when made (a pickled batch is data from another
    process); the CRCs are not: they were computed by whoever framed them,
    and every run and shard is checked again when read."""

    __slots__ = ("framed", "offsets")

    def __init__(self, framed: bytes, offsets: np.ndarray):
        offsets = np.asarray(offsets, dtype=np.int64)
        if offsets.ndim != 1 or len(offsets) == 0 or offsets[0] != 0 or offsets[-1] != len(framed):
            raise ValueError(f"FramedExamples: offsets must run from 0 to {len(framed)}, "
                             f"got {len(offsets)} offsets")
        if len(offsets) > 1 and int(np.diff(offsets).min()) < FRAMING:
            raise ValueError(f"FramedExamples: a record is shorter than its {FRAMING}-byte framing")
        self.framed, self.offsets = framed, offsets

    @classmethod
    def of(cls, examples: Sequence[bytes],
           framed_sizes: np.ndarray | None = None) -> "FramedExamples":
        """`examples` framed into one buffer (by the native kernel where
        present); framed_sizes: each one's framed size (int64), when the
        caller has them."""
        if isinstance(examples, FramedExamples):
            return examples
        examples = examples if isinstance(examples, list) else list(examples)
        sizes = framed_sizes if framed_sizes is not None else np.fromiter(
            map(len, examples), dtype=np.int64, count=len(examples)) + FRAMING
        offsets = np.zeros(len(examples) + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        return cls(frame_records(examples), offsets)

    def framed_sizes(self) -> np.ndarray:
        """Each record's framed size (int64), from the offsets."""
        return np.diff(self.offsets)

    _unit = "records"

    def _spans(self, start: int, stop: int, base: int, end: int) -> "FramedExamples":
        return FramedExamples(self.framed[base:end], self.offsets[start:stop + 1] - base)

    def _row(self, index: int) -> bytes:
        return self.framed[int(self.offsets[index]) + HEADER_SIZE:
                           int(self.offsets[index + 1]) - (FRAMING - HEADER_SIZE)]

    def __iter__(self) -> Iterator[bytes]:
        framed = self.framed
        ends = self.offsets.tolist()
        for start, end in zip(ends, ends[1:]):
            yield framed[start + HEADER_SIZE:end - (FRAMING - HEADER_SIZE)]

    def __eq__(self, other) -> bool:
        if isinstance(other, FramedExamples):
            return self.framed == other.framed and np.array_equal(self.offsets, other.offsets)
        return isinstance(other, (list, tuple)) and list(self) == list(other)

    __hash__ = None  # (as a list's)

    def __reduce__(self):
        return FramedExamples, (self.framed, self.offsets)

    def __repr__(self) -> str:
        return f"FramedExamples({len(self)} records, {len(self.framed)} bytes)"
