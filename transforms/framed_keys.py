"""A batch's row keys held back to back in one buffer.

The native table kernel gives a batch's keys as one buffer with int64
offsets and which rows have none, as `FramedExamples` holds its Examples,
rather than one bytes object per row: most keys are only counted, hashed
(the kernel gives their digests) and, for a key-ordered build, handed to
the run kernels whole (`native`). `FramedKeys` reads as a sequence of
``bytes | None`` (a row's bytes object made only when read), so code that
wants keys per row keeps working.
"""

from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np

from .framed_examples import Spans

__all__ = ["FramedKeys"]


class FramedKeys(Spans):
    """Keys back to back: row ``i``'s key is ``buffer[offsets[i]:offsets[i + 1]]``,
    or None where ``missing[i]`` is set (its span then empty).

    buffer: bytes; offsets: int64, one more than the rows, from 0 to
    ``len(buffer)``, never going back; missing: one uint8 a row (nonzero:
    no key), or None when every row has a key. Checked when made: a
    pickled batch is data from another process."""

    __slots__ = ("buffer", "offsets", "missing", "nones")

    def __init__(self, buffer: bytes, offsets: np.ndarray, missing: np.ndarray | None = None):
        offsets = np.asarray(offsets, dtype=np.int64)
        if offsets.ndim != 1 or len(offsets) == 0 or offsets[0] != 0 or offsets[-1] != len(buffer):
            raise ValueError(f"FramedKeys: offsets must run from 0 to {len(buffer)}, "
                             f"got {len(offsets)} offsets")
        spans = np.diff(offsets)
        if len(spans) and int(spans.min()) < 0:
            raise ValueError("FramedKeys: an offset goes back")
        nones = 0
        if missing is not None:
            missing = np.asarray(missing, dtype=np.uint8)
            if missing.shape != spans.shape:
                raise ValueError(f"FramedKeys: {len(missing)} missing marks for {len(spans)} keys")
            if spans[missing != 0].any():
                raise ValueError("FramedKeys: a row without a key spans bytes")
            nones = int(np.count_nonzero(missing))
            missing = missing if nones else None
        self.buffer, self.offsets, self.missing, self.nones = buffer, offsets, missing, nones

    @classmethod
    def of(cls, keys: Sequence[bytes | None]) -> "FramedKeys":
        """`keys` (bytes or None each) in one buffer."""
        if isinstance(keys, FramedKeys):
            return keys
        keys = keys if isinstance(keys, list) else list(keys)
        missing = np.fromiter((key is None for key in keys), dtype=np.uint8, count=len(keys))
        present = [b"" if key is None else key for key in keys]
        offsets = np.zeros(len(keys) + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, present), dtype=np.int64, count=len(keys)),
                  out=offsets[1:])
        return cls(b"".join(present), offsets, missing)

    @classmethod
    def joined(cls, parts: Sequence["FramedKeys"]) -> "FramedKeys":
        """The keys of `parts`, one after the other, in one buffer."""
        offsets = [np.zeros(1, dtype=np.int64)]
        base = 0
        for part in parts:
            offsets.append(part.offsets[1:] + base)
            base += len(part.buffer)
        marks = None
        if any(part.missing is not None for part in parts):
            marks = np.concatenate([np.zeros(len(part), np.uint8) if part.missing is None
                                    else part.missing for part in parts])
        return cls(b"".join(part.buffer for part in parts), np.concatenate(offsets), marks)

    def native(self) -> tuple[bytes, np.ndarray]:
        """``(buffer, offsets)`` as the run kernels take a key column (the
        offsets as bytes: a uint8 array); only for keys without a None."""
        if self.missing is not None:
            raise ValueError("FramedKeys: the kernels take no missing key")
        return self.buffer, np.ascontiguousarray(self.offsets, dtype="<i8").view(np.uint8)

    def count(self, value) -> int:
        if value is None:
            return self.nones
        return super().count(value)

    _unit = "keys"

    def _spans(self, start: int, stop: int, base: int, end: int) -> "FramedKeys":
        return FramedKeys(self.buffer[base:end], self.offsets[start:stop + 1] - base,
                          None if self.missing is None else self.missing[start:stop])

    def _row(self, index: int) -> bytes | None:
        if self.missing is not None and self.missing[index]:
            return None
        return self.buffer[int(self.offsets[index]):int(self.offsets[index + 1])]

    def __iter__(self) -> Iterator[bytes | None]:
        buffer = self.buffer
        ends = self.offsets.tolist()
        keys = (buffer[start:end] for start, end in zip(ends, ends[1:]))
        if self.missing is None:
            return keys
        return (None if missing else key for key, missing in zip(keys, self.missing.tolist()))

    def __eq__(self, other) -> bool:
        if isinstance(other, FramedKeys):
            return list(self) == list(other)
        return isinstance(other, (list, tuple)) and list(self) == list(other)

    __hash__ = None  # (as a list's)

    def __reduce__(self):
        return FramedKeys, (self.buffer, self.offsets, self.missing)

    def __repr__(self) -> str:
        return f"FramedKeys({len(self)} keys, {self.nones} None, {len(self.buffer)} bytes)"
