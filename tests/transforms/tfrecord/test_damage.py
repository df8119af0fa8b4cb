"""`RecordStreamCheck` (`damage`): checked as it is written, a stream fails where reading would."""

import io
import itertools

import pytest
from hypothesis import given, settings, strategies as st

from recordforge.transforms import tfrecord


def _check_in_pieces(data: bytes, compression: str, cuts: list[int], walk_from: int = 1) -> int:
    """RecordStreamCheck fed `data` cut at `cuts`, walking its records
    whenever `walk_from` bytes wait; its record count."""
    check = tfrecord.RecordStreamCheck("shard.bin", compression)
    check._WALK_FROM = walk_from
    for start, end in itertools.pairwise([0, *sorted(set(cuts)), len(data)]):
        check.write(data[start:end])
    return check.finish()


def _pull_outcome(data: bytes, compression: str):
    """count_records' answer: the count, or the damage's (offset, index)."""
    try:
        return tfrecord.count_records(io.BytesIO(data), path="shard.bin",
                                      compression=compression)
    except tfrecord.TFRecordError as error:
        return ("error", error.offset, error.record_index)


def _push_outcome(data: bytes, compression: str, cuts: list[int], walk_from: int):
    try:
        return _check_in_pieces(data, compression, cuts, walk_from)
    except tfrecord.TFRecordError as error:
        return ("error", error.offset, error.record_index)


_CUTS = st.lists(st.integers(0, 1 << 20), max_size=8)
_WALK_FROM = st.sampled_from([1, 100, 5000, 1 << 20])  # bytes waiting before a walk


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["none", "gzip"]), st.data(), _CUTS, _WALK_FROM)
def test_a_stream_checked_in_any_pieces_counts_its_records(damage_case, write_file, compression,
                                                           data, cuts, walk_from):
    records, _ = damage_case
    count = data.draw(st.integers(0, len(records)), label="count")
    written = write_file(records[:count], compression)
    cuts = [c % (len(written) + 1) for c in cuts]
    assert _check_in_pieces(written, compression, cuts, walk_from) == count


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["none", "gzip"]), st.data())
def test_a_stream_check_catches_what_the_reader_catches(damage_case, compression, data):
    """Any byte flip or truncation: the stream check fails exactly when
    `count_records` does (plain: at the same offset and record), however
    the bytes are cut into writes."""
    original = damage_case[1][compression]
    damaged = bytearray(original)
    if data.draw(st.booleans(), label="truncate"):
        damaged = damaged[:data.draw(st.integers(1, len(original) - 1), label="cut")]
    else:
        damaged[data.draw(st.integers(0, len(original) - 1), label="at")] ^= data.draw(
            st.integers(1, 255), label="xor")
    cuts = [c % (len(damaged) + 1) for c in data.draw(_CUTS, label="cuts")]
    pulled = _pull_outcome(bytes(damaged), compression)
    pushed = _push_outcome(bytes(damaged), compression, cuts, data.draw(_WALK_FROM))
    if compression == "none":
        assert pushed == pulled
    else:  # gzip damage is found where decompression stops, which depends on the pieces
        assert isinstance(pushed, tuple) == isinstance(pulled, tuple), (pushed, pulled)
        if not isinstance(pulled, tuple):
            assert pushed == pulled


def test_a_stream_check_names_the_first_damaged_record(make_records, write_file):
    records = make_records(seed=7, count=10)
    data = bytearray(write_file(records, "none"))
    offset = sum(16 + len(r) for r in records[:4])
    data[offset + 13] ^= 0xFF  # inside record 4's data
    with pytest.raises(tfrecord.TFRecordError, match="bad data CRC") as info:
        _check_in_pieces(bytes(data), "none", [5, offset + 2])
    assert (info.value.path, info.value.offset, info.value.record_index) == (
        "shard.bin", offset, 4)


def test_a_stream_check_refuses_an_unknown_compression():
    with pytest.raises(ValueError, match="compression must be one of"):
        tfrecord.RecordStreamCheck("shard.bin", "zstd")
