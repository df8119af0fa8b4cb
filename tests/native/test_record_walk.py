"""The native record walk against the Python reference: same records, same damage, same words."""

from __future__ import annotations

import io
import pathlib
import struct

import pytest
from hypothesis import given, settings, strategies as st

from recordforge.transforms.tfrecord import (RecordStreamCheck, TFRecordError, count_records,
                                             frame_records, iter_records)
from recordforge.transforms.tfrecord import damage
from recordforge.transforms.tfrecord.framing import MAX_RECORD_BYTES, masked_crc32c


def _crafted_header(length: int) -> bytes:
    """A header whose length CRC is right for `length` (only the cap can stop it)."""
    packed = struct.pack("<Q", length)
    return packed + struct.pack("<I", masked_crc32c(packed))


@st.composite
def damaged_buffers(draw) -> bytearray:
    """Framed records, then some damage: bytes flipped anywhere, the end
    cut off, a header claiming more than the cap or than the buffer holds,
    or garbage appended."""
    records = draw(st.lists(st.binary(max_size=40), max_size=8))
    buffer = bytearray(frame_records(records))
    for _ in range(draw(st.integers(0, 2))):
        if buffer:
            at = draw(st.integers(0, len(buffer) - 1))
            buffer[at] ^= draw(st.integers(1, 255))
    tail = draw(st.sampled_from(["none", "cut", "huge", "long", "garbage"]))
    if tail == "cut" and buffer:
        del buffer[draw(st.integers(0, len(buffer) - 1)):]
    elif tail == "huge":
        buffer += _crafted_header(draw(st.integers(MAX_RECORD_BYTES + 1, 2**64 - 1)))
    elif tail == "long":
        buffer += _crafted_header(draw(st.integers(1, MAX_RECORD_BYTES))) + b"x" * 3
    elif tail == "garbage":
        buffer += draw(st.binary(min_size=1, max_size=30))
    return buffer


def _walked(result):
    starts, ends, error = result
    return starts, ends, None if error is None else (
        str(error), error.problem, error.path, error.offset, error.record_index)


@settings(max_examples=400, deadline=None)
@given(buffer=damaged_buffers(), position=st.integers(0, 2**40), index=st.integers(0, 2**20))
def test_native_walk_matches_the_reference(native, buffer, position, index):
    assert _walked(damage.native_complete_records(native, buffer, position, index, "f.tfrecord")) \
        == _walked(damage.python_complete_records(buffer, position, index, "f.tfrecord"))


@settings(max_examples=100, deadline=None)
@given(buffer=damaged_buffers())
def test_the_reader_yields_and_fails_alike_on_both_paths(native, buffer):
    """Through `iter_records` (buffers refilled, records handed out, the
    error raised after them): the same records and the same error."""
    outcomes = []
    for path_kernels in (native, None):
        records = []
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(damage, "kernels", lambda found=path_kernels: found)
            try:
                for record in iter_records(io.BytesIO(bytes(buffer)), path="s.tfrecord",
                                           compression="none"):
                    records.append(record)
                error = None
            except TFRecordError as raised:
                error = str(raised)
        outcomes.append((records, error))
    assert outcomes[0] == outcomes[1]


def _counted(result):
    records, end, error = result
    return records, end, None if error is None else (
        str(error), error.problem, error.path, error.offset, error.record_index)


@settings(max_examples=400, deadline=None)
@given(buffer=damaged_buffers(), position=st.integers(0, 2**40), index=st.integers(0, 2**20))
def test_native_count_matches_the_walk(native, buffer, position, index):
    """The count (`count_walk`) is the walk without its lists: its count,
    its last end and its damage, native and reference alike."""
    starts, ends, error = damage.python_complete_records(buffer, position, index, "f.tfrecord")
    walked = (len(starts), ends[-1] if ends else 0, error)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(damage, "kernels", lambda: native)
        native_count = damage.count_complete(buffer, position, index, "f.tfrecord")
    assert _counted(native_count) == _counted(walked)
    assert _counted(damage.python_count_complete(buffer, position, index, "f.tfrecord")) \
        == _counted(walked)


def _count_outcome(count, buffer: bytes):
    try:
        return count(buffer), None
    except TFRecordError as raised:
        return None, (str(raised), raised.offset, raised.record_index)


def _read_count(buffer: bytes) -> int:
    return count_records(io.BytesIO(buffer), path="s.tfrecord", compression="none")


def _stream_count(buffer: bytes) -> int:
    """Written through a `RecordStreamCheck` in pieces of 5 bytes, so that
    records and headers are cut between writes."""
    check = RecordStreamCheck("s.tfrecord", "none")
    check._WALK_FROM = 7  # walk often: many buffer heads, cut records
    for at in range(0, len(buffer), 5):
        check.write(buffer[at:at + 5])
    return check.finish()


@settings(max_examples=150, deadline=None)
@given(buffer=damaged_buffers(), reader=st.sampled_from([_read_count, _stream_count]))
def test_counting_readers_count_and_fail_alike_on_both_paths(native, buffer, reader):
    """`count_records` (a shard's read-back) and `RecordStreamCheck` (a
    shard checked as it is written) give the same count or the same error
    on both paths, and the records `iter_records` reads."""
    outcomes = []
    for path_kernels in (native, None):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(damage, "kernels", lambda found=path_kernels: found)
            outcomes.append(_count_outcome(reader, bytes(buffer)))
    assert outcomes[0] == outcomes[1]
    try:
        expected = len(list(iter_records(io.BytesIO(bytes(buffer)), path="s.tfrecord",
                                         compression="none")))
    except TFRecordError:
        expected = None
    assert outcomes[0][0] == expected


@pytest.mark.parametrize("buffer", [bytearray(), b"", memoryview(b"\x00" * 11)])
def test_the_walk_takes_any_buffer(native, buffer):
    assert native.walk_records(buffer) == ([], [], None)
    assert native.count_walk(buffer) == (0, 0, None)


CORPUS = sorted((pathlib.Path(__file__).resolve().parents[2] / "native" / "corpus" / "walk")
                .glob("*.bin"))


@pytest.mark.parametrize("path", CORPUS, ids=lambda path: path.stem)
def test_the_committed_corpus_walks_alike(native, path):
    """The cargo tests' hostile buffers (native/corpus/walk), every prefix."""
    data = path.read_bytes()
    for cut in range(len(data) + 1):
        buffer = bytearray(data[:cut])
        assert _walked(damage.native_complete_records(native, buffer, 7, 3, "c")) \
            == _walked(damage.python_complete_records(buffer, 7, 3, "c")), cut
        records, end, fault = native.count_walk(buffer)
        starts, ends, _ = native.walk_records(buffer)
        assert (records, end) == (len(starts), ends[-1] if ends else 0), cut


@st.composite
def large_damaged_buffers(draw) -> bytearray:
    """Records long enough for the kernel's three-lane CRC (blocks of 3 KiB,
    then 8-byte words, then bytes), with a bit flipped or not: in a lane, a
    word tail or a byte tail."""
    sizes = draw(st.lists(st.integers(0, 12_000), min_size=1, max_size=4))
    seed = draw(st.integers(0, 255))
    records = [bytes((seed + i * 7) % 256 for i in range(size)) for size in sizes]
    buffer = bytearray(frame_records(records))
    if draw(st.booleans()):
        buffer[draw(st.integers(0, len(buffer) - 1))] ^= 1 << draw(st.integers(0, 7))
    return buffer


@settings(max_examples=60, deadline=None)
@given(buffer=large_damaged_buffers())
def test_native_walk_matches_the_reference_on_large_records(native, buffer):
    assert _walked(damage.native_complete_records(native, buffer, 0, 0, "f.tfrecord")) \
        == _walked(damage.python_complete_records(buffer, 0, 0, "f.tfrecord"))
