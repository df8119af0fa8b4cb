"""The reader (`tfrecord.reading`): other writers' files, compression detection, and damage."""

import gzip
import io
import itertools
import struct
import zlib

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from hypothesis import given, settings, strategies as st

from recordforge.transforms import tfrecord


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_we_read_files_written_by_beam(tmp_path, compression, make_records):
    records = make_records(seed=2, count=100)
    prefix = str(tmp_path / "beam")
    suffix = ".tfrecord.gz" if compression == "gzip" else ".tfrecord"
    with TestPipeline() as p:
        _ = (p | beam.Create(records)
             | beam.io.WriteToTFRecord(prefix, file_name_suffix=suffix, num_shards=1,
                                       compression_type=beam.io.filesystem.CompressionTypes.AUTO))
    [path] = list(tmp_path.glob("beam*"))
    assert sorted(tfrecord.read_records(str(path))) == sorted(records)


def test_auto_detection_by_name_and_by_content(make_records, write_file):
    records = make_records(seed=5, count=20)
    plain, packed = write_file(records, "none"), write_file(records, "gzip")
    assert list(tfrecord.iter_records(io.BytesIO(packed), path="x.tfrecord")) == records
    assert list(tfrecord.iter_records(io.BytesIO(plain), path="x.tfrecord")) == records
    assert list(tfrecord.iter_records(io.BytesIO(packed), path="x.tfrecord.gz")) == records


def test_a_plain_record_whose_length_starts_with_the_gzip_magic_is_not_gunzipped():
    record = b"r" * 0x8B1F  # little-endian length begins 1f 8b
    data = tfrecord.frame_records([record])
    assert data[:2] == b"\x1f\x8b"
    assert list(tfrecord.iter_records(io.BytesIO(data), path="x.tfrecord")) == [record]


def test_huge_declared_length_is_not_allocated():
    length = struct.pack("<Q", 1 << 60)
    data = length + struct.pack("<I", tfrecord.masked_crc32c(length)) + b"tiny"
    with pytest.raises(tfrecord.TFRecordError, match="exceeds the 2 GiB limit") as info:
        list(tfrecord.iter_records(io.BytesIO(data), path="big.tfrecord", compression="none"))
    assert info.value.offset == 0 and info.value.record_index == 0


def _read_all(data, compression, path):
    return list(tfrecord.iter_records(io.BytesIO(data), path=path, compression=compression))


def _expect_error_or_same(data, compression, records, path):
    try:
        got = _read_all(data, compression, path)
    except tfrecord.TFRecordError as error:
        assert error.path == path and path in str(error)
        assert 0 <= error.offset and f"byte offset {error.offset}" in str(error)
        return "error"
    assert got == records, "damaged file read back as different records"
    return "same"


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["none", "gzip"]), st.data())
def test_every_byte_flip_is_caught(damage_case, compression, data):
    records, files = damage_case
    original = files[compression]
    position = data.draw(st.integers(0, len(original) - 1), label="position")
    xor = data.draw(st.integers(1, 255), label="xor")
    damaged = bytearray(original)
    damaged[position] ^= xor
    outcome = _expect_error_or_same(bytes(damaged), compression, records, "shard.bin")
    if outcome == "same":
        # Records may only survive a flip that gzip itself ignores: a header
        # field (mtime, flags, OS) or a deflate bit that does not change the
        # output (Python's gzip, an independent decoder, must then decompress
        # the damaged file to the original stream). A plain file has no such
        # bits: every flip there must be detected.
        assert compression == "gzip"
        assert gzip.decompress(bytes(damaged)) == gzip.decompress(original)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["none", "gzip"]), st.data())
def test_every_truncation_is_caught(damage_case, compression, data):
    records, files = damage_case
    original = files[compression]
    # Byte offsets where a record of the plain file ends.
    record_ends = list(itertools.accumulate(16 + len(record) for record in records))
    cut = data.draw(st.integers(1, len(original) - 1), label="cut")
    if compression == "none" and cut in record_ends:
        # Cut between two records, a plain file is a valid shorter file: only
        # the manifest's size, count and sha256 tell (tests/pipelines/test_verify.py).
        kept = record_ends.index(cut) + 1
        assert _read_all(original[:cut], compression, "shard.bin") == records[:kept]
        return
    outcome = _expect_error_or_same(original[:cut], compression, records, "shard.bin")
    assert outcome == "error"


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_an_empty_file_holds_no_records(compression):
    assert _read_all(b"", compression, "empty") == []


def test_records_before_damage_are_yielded_then_error_names_record(make_records, write_file):
    records = make_records(seed=7, count=10)
    data = bytearray(write_file(records, "none"))
    offset = sum(16 + len(r) for r in records[:4])
    data[offset + 13] ^= 0xFF  # inside record 4's data
    reader = tfrecord.iter_records(io.BytesIO(bytes(data)), path="s.tfrecord")
    got = [next(reader) for _ in range(4)]
    assert got == records[:4]
    with pytest.raises(tfrecord.TFRecordError, match="bad data CRC") as info:
        next(reader)
    assert (info.value.offset, info.value.record_index) == (offset, 4)


def test_garbage_after_last_gzip_member_is_an_error(make_records, write_file):
    data = write_file(make_records(seed=8, count=5), "gzip") + b"junk"
    with pytest.raises(tfrecord.TFRecordError, match="gzip"):
        _read_all(data, "gzip", "x.gz")


def test_read_records_through_fsspec_memory_filesystem(make_records, write_file):
    import fsspec
    records = make_records(seed=9, count=12)
    with fsspec.open("memory://codec/test.tfrecord.gz", "wb") as f:
        f.write(write_file(records, "gzip"))
    assert list(tfrecord.read_records("memory://codec/test.tfrecord.gz")) == records


def test_a_deflate_bit_gzip_ignores_leaves_the_records_intact(damage_case):
    # Found by the flip property: some bits inside the deflate stream do not
    # change what it decompresses to; the reader then returns the original
    # records, exactly as Python's gzip returns the original bytes.
    records, files = damage_case
    original = files["gzip"]
    expected = gzip.decompress(original)
    for position in range(10, len(original)):
        damaged = bytearray(original)
        damaged[position] ^= 0x08
        try:
            if gzip.decompress(bytes(damaged)) == expected:
                break
        except (OSError, EOFError, zlib.error):
            continue
    else:
        pytest.skip("no ignored deflate bit in this stream")
    assert _read_all(bytes(damaged), "gzip", "shard.gz") == records


def _reference_read(stream, masked):
    """A record-at-a-time reading of a plain stream, written from the format
    spec: (intact records, (problem, offset, record index) or None)."""
    records, offset = [], 0
    while offset < len(stream):
        if len(stream) - offset < 12:
            return records, ("truncated record", offset, len(records))
        (length,) = struct.unpack("<Q", stream[offset:offset + 8])
        if struct.unpack("<I", stream[offset + 8:offset + 12])[0] != masked(stream[offset:offset + 8]):
            return records, ("bad length CRC", offset, len(records))
        if length >= 1 << 31:
            return records, ("exceeds the 2 GiB limit", offset, len(records))
        if len(stream) - offset < 16 + length:
            return records, ("truncated record", offset, len(records))
        data = stream[offset + 12:offset + 12 + length]
        if struct.unpack("<I", stream[offset + 12 + length:offset + 16 + length])[0] != masked(data):
            return records, ("bad data CRC", offset, len(records))
        records.append(data)
        offset += 16 + length
    return records, None


class _ShortReads(io.BytesIO):
    """A file whose reads stop after `most` bytes, however many are asked
    for (as a pipe's or a network stream's may): the reader's blocks then
    end anywhere in a record."""

    def __init__(self, data: bytes, most: int):
        super().__init__(data)
        self._most = most

        self.buffers = []  # what readinto was given

    def read(self, size=-1):
        return super().read(self._most if size is None or size < 0 else min(size, self._most))

    def readinto(self, buffer):
        with memoryview(buffer) as view:
            self.buffers.append(view.obj)
            return super().readinto(view[:self._most])


@pytest.mark.parametrize("read_block", [7, 64, 1000, 1 << 20])
def test_batched_reader_and_counter_match_a_record_at_a_time_reading(read_block, spec_masked_crc):
    # The reader checks a buffer of records at a time; whatever the damage
    # and wherever the read blocks end, it must yield the records and raise
    # the error (problem, offset, record index) a record-at-a-time reader
    # finds, and count_records must agree.
    _compare_with_reference(read_block, spec_masked_crc)


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def _compare_with_reference(read_block, masked, data):
    records = data.draw(st.lists(st.binary(max_size=200), max_size=12), label="records")
    stream = bytearray(tfrecord.frame_records(records))
    for _ in range(data.draw(st.integers(0, 3), label="damages")):
        kind = data.draw(st.sampled_from(["flip", "cut", "insert"]), label="kind")
        position = data.draw(st.integers(0, len(stream)), label="position")
        if kind == "flip" and position < len(stream):
            stream[position] ^= data.draw(st.integers(1, 255), label="xor")
        elif kind == "cut":
            del stream[position:]
        else:
            stream[position:position] = data.draw(st.binary(min_size=1, max_size=20))
    stream = bytes(stream)
    expected_records, expected_error = _reference_read(stream, masked)
    got, error = [], None
    try:
        for record in tfrecord.iter_records(_ShortReads(stream, read_block), path="s",
                                            compression="none"):
            got.append(record)
    except tfrecord.TFRecordError as raised:
        error = raised
    assert got == expected_records
    try:
        counted = tfrecord.count_records(_ShortReads(stream, read_block), path="s",
                                         compression="none")
        count_error = None
    except tfrecord.TFRecordError as raised:
        counted, count_error = None, raised
    if expected_error is None:
        assert error is None and count_error is None and counted == len(expected_records)
        return
    problem, offset, index = expected_error
    for raised in (error, count_error):
        assert raised is not None and problem in str(raised)
        assert (raised.offset, raised.record_index) == (offset, index)


def test_count_records_reads_multi_member_gzip(make_records):
    records = make_records(seed=9, count=50)
    members = b"".join(tfrecord.gzip_compress(tfrecord.frame_records(records[i:i + 10]))
                       for i in range(0, 50, 10))
    assert tfrecord.count_records(io.BytesIO(members), compression="gzip") == 50
    with pytest.raises(tfrecord.TFRecordError, match="truncated gzip"):
        tfrecord.count_records(io.BytesIO(members[:-3]), compression="gzip")


@settings(max_examples=60, deadline=None)
@given(records=st.lists(st.binary(max_size=3000), max_size=12),
       most=st.integers(1, 5000), streamed=st.booleans())
def test_plain_streams_are_read_into_one_buffer_whatever_each_read_gives(records, most,
                                                                          streamed):
    """A plain stream is read a block at a time into one reused buffer
    (`readinto`; a new bytes per read cost page faults): short reads,
    records cut between blocks and records streamed past
    (`count_records`' long records) read the same records as the bytes
    hold, counted or yielded."""
    data = tfrecord.frame_records(records)
    with pytest.MonkeyPatch.context() as patch:
        if streamed:
            patch.setattr(tfrecord.reading, "_COUNT_STREAM_FROM", 100)
        source = _ShortReads(data, most)
        assert list(tfrecord.iter_records(source, path="s.tfrecord",
                                          compression="none")) == records
        counted = _ShortReads(data, most)
        assert tfrecord.count_records(counted, path="s.tfrecord",
                                      compression="none") == len(records)
    for reader in (source, counted):
        assert reader.buffers and all(buffer is reader.buffers[0] for buffer in reader.buffers)


class _RawReadOnly(io.RawIOBase):
    """An `io.RawIOBase` that implements only `read` (its `readinto`
    raises NotImplementedError), as some file wrappers do."""

    def __init__(self, data: bytes):
        self._data = io.BytesIO(data)

    def readable(self):
        return True

    def read(self, size=-1):
        return self._data.read(7 if size is None or size < 0 else min(size, 7))


@settings(max_examples=30, deadline=None)
@given(records=st.lists(st.binary(max_size=300), max_size=8))
def test_a_raw_file_that_only_reads_is_read_with_read(records):
    data = tfrecord.frame_records(records)
    assert list(tfrecord.iter_records(_RawReadOnly(data), path="s.tfrecord",
                                      compression="none")) == records
    assert tfrecord.count_records(_RawReadOnly(data), path="s.tfrecord",
                                  compression="none") == len(records)
