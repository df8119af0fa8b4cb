"""The native header walk of index files against the Python reference: same
lines, same record count, same error (words, offset, record index), however
the stream is cut into writes."""

from __future__ import annotations

import io
import struct
from unittest import mock

import pytest
from hypothesis import given, settings, strategies as st

from recordforge.transforms.tfrecord import TFRecordError, frame_records, index
from recordforge.transforms.tfrecord.framing import MAX_RECORD_BYTES, masked_crc32c


def _header(length: int) -> bytes:
    packed = struct.pack("<Q", length)
    return packed + struct.pack("<I", masked_crc32c(packed))


@st.composite
def streams(draw) -> bytes:
    """Framed records (some long enough to span writes), then maybe damage:
    a byte flipped, a header over the cap, a header claiming more than the
    stream holds, or garbage."""
    records = draw(st.lists(st.binary(max_size=60) | st.just(b"r" * 5000), max_size=12))
    buffer = bytearray(frame_records(records))
    if buffer and draw(st.booleans()):
        buffer[draw(st.integers(0, len(buffer) - 1))] ^= draw(st.integers(1, 255))
    tail = draw(st.sampled_from(["none", "huge", "long", "garbage"]))
    if tail == "huge":
        buffer += _header(draw(st.integers(MAX_RECORD_BYTES + 1, 2**64 - 1)))
    elif tail == "long":
        buffer += _header(draw(st.integers(1, MAX_RECORD_BYTES))) + b"x" * 3
    elif tail == "garbage":
        buffer += draw(st.binary(min_size=1, max_size=30))
    return bytes(buffer)


def _indexed(data: bytes, cuts: list[int], path: str = "s.tfrecord"):
    """(lines written, records, error as its parts) of a `RecordIndexer`
    given `data` cut at `cuts`, finished."""
    out = io.BytesIO()
    indexer = index.RecordIndexer(out, path)
    edges = [0, *sorted(cut % (len(data) + 1) for cut in cuts), len(data)]
    try:
        for start, end in zip(edges[:-1], edges[1:]):
            indexer.write(memoryview(data)[start:end])
        indexer.finish()
        error = None
    except TFRecordError as raised:
        error = (str(raised), raised.offset, raised.record_index)
    return out.getvalue(), indexer.records, error


@settings(max_examples=400, deadline=None)
@given(data=streams(), cuts=st.lists(st.integers(min_value=0), max_size=12))
def test_native_index_matches_the_reference(native, data, cuts):
    with mock.patch.object(index, "kernels", lambda: None):
        reference = _indexed(data, cuts)
    with mock.patch.object(index, "kernels", lambda: native):
        assert _indexed(data, cuts) == reference


def test_the_native_walk_indexes_a_write_in_one_call(native, monkeypatch):
    """The kernel, not a Python line per record, indexes whole headers."""
    calls = []

    class Counting:
        def __getattr__(self, name):
            calls.append(name)
            return getattr(native, name)

    monkeypatch.setattr(index, "kernels", lambda: Counting())
    monkeypatch.setattr(index, "index_line", lambda *_: pytest.fail("a line made in Python"))
    out = io.BytesIO()
    indexer = index.RecordIndexer(out, "s.tfrecord")
    indexer.write(frame_records([b"a" * 10] * 1000))
    assert (indexer.finish(), calls) == (1000, ["index_lines"])
    assert out.getvalue().splitlines()[:2] == [b"0 26", b"26 26"]


@pytest.mark.parametrize("offset", [-1, 2**63])
def test_the_kernel_refuses_an_offset_outside_a_stream(native, offset):
    with pytest.raises((ValueError, OverflowError)):
        native.index_lines(b"", 0, offset)
