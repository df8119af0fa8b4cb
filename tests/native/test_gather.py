"""The native gather of a block's records (`sorting._gather`) against Arrow's take, the reference, byte for byte."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from recordforge.transforms.tfrecord import frame_records
from recordforge.transforms.writer import sorting
from recordforge.transforms.writer.run_format import RunSlice


def _slice(data: memoryview, examples: list[bytes]) -> RunSlice:
    return RunSlice(None, data, np.array([len(example) + 16 for example in examples],
                                         dtype=np.int64))


def _slices(drawn: list[list[bytes]], gaps: list[int], one_buffer: bool) -> list[RunSlice]:
    """Run slices of framed examples, each in a buffer of its own, or all in
    one, as a bucket is read: each after a record that is in none (a run's
    rows outside the bucket)."""
    if not one_buffer:
        return [_slice(memoryview(frame_records(examples)), examples) for examples in drawn]
    whole = memoryview(frame_records([row for gap, examples in zip(gaps, drawn)
                                      for row in [b"\xee" * gap, *examples]]))
    slices, start = [], 0
    for gap, examples in zip(gaps, drawn):
        start += gap + 16
        end = start + sum(len(example) + 16 for example in examples)
        slices.append(_slice(whole[start:end], examples))
        start = end
    return slices


def _gathered(kernels, records, rows) -> bytes:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sorting, "kernels", lambda: kernels)
        return bytes(sorting._gather(records, rows))


@settings(max_examples=300, deadline=None)
@given(drawn=st.lists(st.lists(st.binary(max_size=40), min_size=1, max_size=12),
                      min_size=1, max_size=5),
       gaps=st.lists(st.integers(0, 30), min_size=5, max_size=5),
       one_buffer=st.booleans(), picks=st.lists(st.integers(min_value=0), max_size=40))
def test_the_native_gather_gives_the_bytes_of_arrows_take(native, drawn, gaps, one_buffer,
                                                           picks):
    """Any rows, in any order, repeated or not, from slices in one buffer
    (the gaps between them are values of the array too) or in several."""
    slices = _slices(drawn, gaps, one_buffer)
    sizes = np.concatenate([rows.sizes for rows in slices])
    sources = np.repeat(np.arange(len(slices)), [len(rows.sizes) for rows in slices])
    records, positions = sorting._as_arrow(slices, sizes, sources)
    rows = positions[np.array([pick % len(positions) for pick in picks], dtype=np.int64)]
    expected = _gathered(None, records, rows)
    assert _gathered(native, records, rows) == expected
    framed = [frame_records([example]) for examples in drawn for example in examples]
    assert expected == b"".join(framed[pick % len(framed)] for pick in picks)


def test_positions_or_offsets_outside_the_array_are_refused(native):
    offsets = np.array([0, 2, 5], dtype="<i8").view(np.uint8)
    data = np.frombuffer(b"abcde", dtype=np.uint8)

    def gather(positions, offsets=offsets):
        return native.gather_values(offsets, data, np.array(positions, dtype="<i8").view(np.uint8))

    assert gather([1, 0, 1]) == b"cdeabcde"
    assert gather([]) == b""
    for positions in ([2], [-1], [0, 7]):
        with pytest.raises(ValueError, match="outside"):
            gather(positions)
    with pytest.raises(ValueError, match="spans"):
        gather([0], np.array([3, 2], dtype="<i8").view(np.uint8))
    with pytest.raises(ValueError, match="spans"):
        gather([0], np.array([0, 6], dtype="<i8").view(np.uint8))
    with pytest.raises(ValueError, match="int64"):
        gather([0], offsets[:-1])
