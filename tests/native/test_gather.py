"""The native gather of a block's records (`sorting._gather`) against Arrow's take, the reference, byte for byte."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from recordforge.transforms.tfrecord import frame_records
from recordforge.transforms.writer import sorting
from recordforge.transforms.writer.run_format import RunSlice


def _slices(drawn: list[list[bytes]], gaps: list[int], one_buffer: bool) -> list[RunSlice]:
    """Run slices of framed examples: in one buffer with other bytes between
    them (as a bucket is read), or each in a buffer of its own."""
    framed = [frame_records(examples) for examples in drawn]
    if one_buffer:
        arena = bytearray()
        places = []
        for data, gap in zip(framed, gaps):
            arena += b"\xee" * gap
            places.append((len(arena), len(data)))
            arena += data
        whole = memoryview(arena)
        views = [whole[start:start + size] for start, size in places]
    else:
        views = [memoryview(bytes(data)) for data in framed]
    return [RunSlice(None, view, np.array([len(example) + 16 for example in examples],
                                          dtype=np.int64))
            for examples, view in zip(drawn, views)]


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
