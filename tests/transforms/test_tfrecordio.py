"""The TFRecord codec against independent readers and writers, and damage."""

import gzip
import io
import itertools
import random
import struct
import zlib

import apache_beam as beam
import crc32c
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to
from hypothesis import given, settings, strategies as st

from recordforge.transforms import tfrecord


def _records(seed=0, count=300):
    rng = random.Random(seed)
    return [rng.randbytes(rng.choice([0, 1, 7, 100, 1000, 5000])) for _ in range(count)]


def _write(records, compression, batches=3):
    buffer = io.BytesIO()
    with tfrecord.TFRecordWriter(buffer, compression) as writer:
        step = max(1, len(records) // batches)
        for start in range(0, len(records), step):
            writer.write_many(records[start:start + step])
    return buffer.getvalue()


def _masked(data):
    crc = crc32c.crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _hand_parse(stream):
    """An independent reading of the framing, written from the format spec."""
    records, offset = [], 0
    while offset < len(stream):
        (length,) = struct.unpack("<Q", stream[offset:offset + 8])
        assert struct.unpack("<I", stream[offset + 8:offset + 12])[0] == _masked(stream[offset:offset + 8])
        data = stream[offset + 12:offset + 12 + length]
        assert struct.unpack("<I", stream[offset + 12 + length:offset + 16 + length])[0] == _masked(data)
        records.append(data)
        offset += 16 + length
    return records


def test_masked_crc_matches_the_published_definition():
    # Known value: TensorFlow's masked CRC of an empty record's 8 length bytes.
    assert tfrecord.masked_crc32c(b"\x00" * 8) == _masked(b"\x00" * 8)
    assert tfrecord.frame_records([b""]) == b"\x00" * 8 + struct.pack("<I", _masked(b"\x00" * 8)) + struct.pack("<I", _masked(b""))


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_written_files_parse_with_python_gzip_and_a_hand_parser(compression):
    records = _records()
    data = _write(records, compression)
    stream = gzip.decompress(data) if compression == "gzip" else data
    assert _hand_parse(stream) == records


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_beam_reads_our_files(tmp_path, compression):
    records = _records(seed=1)
    path = tmp_path / ("data" + tfrecord.suffix_for(compression))
    path.write_bytes(_write(records, compression))
    with TestPipeline() as p:
        read = p | beam.io.ReadFromTFRecord(
            str(path), compression_type=beam.io.filesystem.CompressionTypes.AUTO)
        assert_that(read, equal_to(records))


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_we_read_files_written_by_beam(tmp_path, compression):
    records = _records(seed=2, count=100)
    prefix = str(tmp_path / "beam")
    suffix = ".tfrecord.gz" if compression == "gzip" else ".tfrecord"
    with TestPipeline() as p:
        _ = (p | beam.Create(records)
             | beam.io.WriteToTFRecord(prefix, file_name_suffix=suffix, num_shards=1,
                                       compression_type=beam.io.filesystem.CompressionTypes.AUTO))
    [path] = list(tmp_path.glob("beam*"))
    assert sorted(tfrecord.read_records(str(path))) == sorted(records)


def test_multi_member_gzip_reads_as_one_stream():
    records = _records(seed=3)
    pieces = [tfrecord.gzip_compress(tfrecord.frame_records(records[i:i + 37]))
              for i in range(0, len(records), 37)]
    data = b"".join(pieces)
    assert list(tfrecord.iter_records(io.BytesIO(data), compression="gzip")) == records
    assert gzip.decompress(data) == tfrecord.frame_records(records)


def _jpegs(count: int) -> list[bytes]:
    """Noisy photographs as JPEG: bytes deflate barely shrinks, yet codes
    with Huffman tables rather than storing."""
    from PIL import Image, ImageFilter

    jpegs = []
    for _ in range(count):
        picture = Image.effect_noise((400, 300), 40).convert("RGB").filter(
            ImageFilter.GaussianBlur(0.6))
        buffer = io.BytesIO()
        picture.save(buffer, "JPEG", quality=90)
        jpegs.append(buffer.getvalue())
    return jpegs


def _first_block_type(member: bytes) -> int:
    """BTYPE of a gzip member's first deflate block: 0 stored, 1 fixed
    Huffman codes, 2 dynamic ones (RFC 1951 3.2.3)."""
    assert member[:3] == b"\x1f\x8b\x08" and member[3] == 0  # no optional header fields
    return (member[10] >> 1) & 3


def test_gzip_stores_what_deflate_barely_shrinks_and_deflates_the_rest(tmp_path):
    images = tfrecord.frame_records(_jpegs(6))
    rows = tfrecord.frame_records([b"id=%d,label=class_%d,text=recordforge row" % (i, i % 10)
                                     for i in range(5000)])
    stored, deflated = tfrecord.gzip_compress(images), tfrecord.gzip_compress(rows)
    assert _first_block_type(stored) == 0
    assert len(stored) <= len(images) * 1.001 + 64
    assert _first_block_type(deflated) != 0 and len(deflated) < len(rows) / 4
    # Independent readers take the mixed members as one stream.
    path = tmp_path / "mixed.tfrecord.gz"
    path.write_bytes(stored + deflated + stored)
    assert gzip.decompress(path.read_bytes()) == images + rows + images
    expected = (list(tfrecord.iter_records(io.BytesIO(images), compression="none")) * 2
                + list(tfrecord.iter_records(io.BytesIO(rows), compression="none")))
    with TestPipeline() as p:
        read = p | beam.io.ReadFromTFRecord(
            str(path), compression_type=beam.io.filesystem.CompressionTypes.AUTO)
        assert_that(read, equal_to(expected))


def test_gzip_members_are_deterministic():
    data = tfrecord.frame_records(_records(seed=4))
    assert tfrecord.gzip_compress(data) == tfrecord.gzip_compress(data)


def test_auto_detection_by_name_and_by_content():
    records = _records(seed=5, count=20)
    plain, packed = _write(records, "none"), _write(records, "gzip")
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


_DAMAGE_RECORDS = _records(seed=6, count=40)
_FILES = {c: _write(_DAMAGE_RECORDS, c) for c in ("none", "gzip")}
# Byte offsets where a record of the plain file ends.
_RECORD_ENDS = list(itertools.accumulate(16 + len(record) for record in _DAMAGE_RECORDS))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["none", "gzip"]), st.data())
def test_every_byte_flip_is_caught(compression, data):
    original = _FILES[compression]
    position = data.draw(st.integers(0, len(original) - 1), label="position")
    xor = data.draw(st.integers(1, 255), label="xor")
    damaged = bytearray(original)
    damaged[position] ^= xor
    outcome = _expect_error_or_same(bytes(damaged), compression, _DAMAGE_RECORDS, "shard.bin")
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
def test_every_truncation_is_caught(compression, data):
    original = _FILES[compression]
    cut = data.draw(st.integers(1, len(original) - 1), label="cut")
    if compression == "none" and cut in _RECORD_ENDS:
        # Cut between two records, a plain file is a valid shorter file: only
        # the manifest's size, count and sha256 tell (tests/pipelines/test_verify.py).
        kept = _RECORD_ENDS.index(cut) + 1
        assert _read_all(original[:cut], compression, "shard.bin") == _DAMAGE_RECORDS[:kept]
        return
    outcome = _expect_error_or_same(original[:cut], compression, _DAMAGE_RECORDS, "shard.bin")
    assert outcome == "error"


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_an_empty_file_holds_no_records(compression):
    assert _read_all(b"", compression, "empty") == []


def test_records_before_damage_are_yielded_then_error_names_record():
    records = _records(seed=7, count=10)
    data = bytearray(_write(records, "none"))
    offset = sum(16 + len(r) for r in records[:4])
    data[offset + 13] ^= 0xFF  # inside record 4's data
    reader = tfrecord.iter_records(io.BytesIO(bytes(data)), path="s.tfrecord")
    got = [next(reader) for _ in range(4)]
    assert got == records[:4]
    with pytest.raises(tfrecord.TFRecordError, match="bad data CRC") as info:
        next(reader)
    assert (info.value.offset, info.value.record_index) == (offset, 4)


def test_garbage_after_last_gzip_member_is_an_error():
    data = _write(_records(seed=8, count=5), "gzip") + b"junk"
    with pytest.raises(tfrecord.TFRecordError, match="gzip"):
        _read_all(data, "gzip", "x.gz")


def test_writer_rejects_unknown_compression():
    with pytest.raises(ValueError, match="compression"):
        tfrecord.TFRecordWriter(io.BytesIO(), "zstd")


def test_read_records_through_fsspec_memory_filesystem():
    import fsspec
    records = _records(seed=9, count=12)
    with fsspec.open("memory://codec/test.tfrecord.gz", "wb") as f:
        f.write(_write(records, "gzip"))
    assert list(tfrecord.read_records("memory://codec/test.tfrecord.gz")) == records


def test_a_deflate_bit_gzip_ignores_leaves_the_records_intact():
    # Found by the flip property: some bits inside the deflate stream do not
    # change what it decompresses to; the reader then returns the original
    # records, exactly as Python's gzip returns the original bytes.
    original = _FILES["gzip"]
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
    assert _read_all(bytes(damaged), "gzip", "shard.gz") == _DAMAGE_RECORDS


def _reference_read(stream):
    """A record-at-a-time reading of a plain stream, written from the format
    spec: (intact records, (problem, offset, record index) or None)."""
    records, offset = [], 0
    while offset < len(stream):
        if len(stream) - offset < 12:
            return records, ("truncated record", offset, len(records))
        (length,) = struct.unpack("<Q", stream[offset:offset + 8])
        if struct.unpack("<I", stream[offset + 8:offset + 12])[0] != _masked(stream[offset:offset + 8]):
            return records, ("bad length CRC", offset, len(records))
        if length >= 1 << 31:
            return records, ("exceeds the 2 GiB limit", offset, len(records))
        if len(stream) - offset < 16 + length:
            return records, ("truncated record", offset, len(records))
        data = stream[offset + 12:offset + 12 + length]
        if struct.unpack("<I", stream[offset + 12 + length:offset + 16 + length])[0] != _masked(data):
            return records, ("bad data CRC", offset, len(records))
        records.append(data)
        offset += 16 + length
    return records, None


@pytest.mark.parametrize("read_block", [7, 64, 1000, 1 << 20])
def test_batched_reader_and_counter_match_a_record_at_a_time_reading(read_block, monkeypatch):
    # The reader checks a buffer of records at a time; whatever the damage
    # and wherever the read blocks end, it must yield the records and raise
    # the error (problem, offset, record index) a record-at-a-time reader
    # finds, and count_records must agree.
    monkeypatch.setattr(tfrecordio, "_READ_BLOCK", read_block)
    _compare_with_reference()


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def _compare_with_reference(data):
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
    expected_records, expected_error = _reference_read(stream)
    got, error = [], None
    try:
        for record in tfrecord.iter_records(io.BytesIO(stream), path="s", compression="none"):
            got.append(record)
    except tfrecord.TFRecordError as raised:
        error = raised
    assert got == expected_records
    try:
        counted = tfrecord.count_records(io.BytesIO(stream), path="s", compression="none")
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


def test_count_records_reads_multi_member_gzip():
    records = _records(seed=9, count=50)
    members = b"".join(tfrecord.gzip_compress(tfrecord.frame_records(records[i:i + 10]))
                       for i in range(0, 50, 10))
    assert tfrecord.count_records(io.BytesIO(members), compression="gzip") == 50
    with pytest.raises(tfrecord.TFRecordError, match="truncated gzip"):
        tfrecord.count_records(io.BytesIO(members[:-3]), compression="gzip")


# --- checking a stream as it is written ---------------------------------------------------


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
@given(st.sampled_from(["none", "gzip"]), st.integers(0, len(_DAMAGE_RECORDS)), _CUTS,
       _WALK_FROM)
def test_a_stream_checked_in_any_pieces_counts_its_records(compression, count, cuts, walk_from):
    data = _write(_DAMAGE_RECORDS[:count], compression)
    cuts = [c % (len(data) + 1) for c in cuts]
    assert _check_in_pieces(data, compression, cuts, walk_from) == count


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["none", "gzip"]), st.data())
def test_a_stream_check_catches_what_the_reader_catches(compression, data):
    """Any byte flip or truncation: the stream check fails exactly when
    `count_records` does (plain: at the same offset and record), however
    the bytes are cut into writes."""
    original = _FILES[compression]
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


def test_a_stream_check_names_the_first_damaged_record():
    records = _records(seed=7, count=10)
    data = bytearray(_write(records, "none"))
    offset = sum(16 + len(r) for r in records[:4])
    data[offset + 13] ^= 0xFF  # inside record 4's data
    with pytest.raises(tfrecord.TFRecordError, match="bad data CRC") as info:
        _check_in_pieces(bytes(data), "none", [5, offset + 2])
    assert (info.value.path, info.value.offset, info.value.record_index) == (
        "shard.bin", offset, 4)


def _table_bytes(count, seed=0):
    rng = random.Random(seed)
    words = [rng.randbytes(3).hex().encode() for _ in range(300)]
    return tfrecord.frame_records([b" ".join(rng.choices(words, k=rng.randint(5, 80)))
                                     for _ in range(count)])


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(["text", "random"]), st.integers(0, 120_000),
       st.lists(st.integers(1, 40_000), max_size=12))
def test_a_gzip_stream_is_a_function_of_its_bytes_not_of_its_writes(kind, size, pieces):
    data = _stream_input(kind, size)
    whole, _ = _gzip_streamed(data, [])
    cut, stream = _gzip_streamed(data, pieces)
    assert cut == whole
    assert stream.plain_bytes == len(data)
    assert gzip.decompress(whole) == data
    # One member with the deterministic header (mtime 0, no file name).
    assert whole[:4] == b"\x1f\x8b\x08\x00" and whole[4:8] == b"\0" * 4
    if len(data) <= _STREAM_TEST_BLOCK:
        assert whole == tfrecord.gzip_compress(data, 1)


def _stream_input(kind: str, size: int) -> bytes:
    """`size` bytes of table rows ("text") or of random bytes."""
    return (_table_bytes(2000) if kind == "text" else random.Random(size).randbytes(150_000))[:size]


# Several blocks, with a probe of 64 KB spanning four.
_STREAM_TEST_BLOCK = 16_384


def _gzip_streamed(data: bytes, pieces) -> tuple[bytes, tfrecord.GzipStream]:
    """`data` through a level-1 GzipStream, written as `pieces` (sizes) and
    then the rest; the member and the closed stream."""
    out = io.BytesIO()
    stream = tfrecord.GzipStream(out, 1, block=_STREAM_TEST_BLOCK)
    position = 0
    for piece in pieces:
        stream.write(memoryview(data)[position:position + piece])
        position += piece
    stream.write(data[position:])
    stream.close()
    return out.getvalue(), stream


class _KeepingCompressor:
    """A compressor that keeps every buffer it is given alive, as a sampling
    profiler does when it holds a frame that was compressing (Dask workers
    run one)."""

    def __init__(self, compressor, kept: list):
        self._compressor = compressor
        self._kept = kept

    def compress(self, data):
        self._kept.append(data)
        return self._compressor.compress(data)

    def flush(self):
        return self._compressor.flush()


@settings(max_examples=15, deadline=None)
@given(st.sampled_from(["text", "random"]), st.integers(0, 120_000),
       st.lists(st.integers(1, 40_000), max_size=8))
def test_a_gzip_stream_never_resizes_a_buffer_whose_views_live_on(kind, size, pieces):
    data = _stream_input(kind, size)
    expected, _ = _gzip_streamed(data, [])
    kept: list = []
    stores = tfrecord._stores
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(tfrecordio, "_stores",
                        lambda probe, level: kept.append(probe) or stores(probe, level))
        for module in (tfrecord.zlib, tfrecord.isal_zlib):
            patched.setattr(module, "compressobj", lambda *args, _make=module.compressobj:
                            _KeepingCompressor(_make(*args), kept))
        streamed, _ = _gzip_streamed(data, pieces)
    assert streamed == expected


def test_a_gzip_stream_stores_what_deflate_barely_shrinks_as_gzip_compress_does():
    noise = random.Random(1).randbytes(3 << 20)
    text = _table_bytes(30_000)[:3 << 20]
    for data, stored in ((noise, True), (text, False)):
        out = io.BytesIO()
        stream = tfrecord.GzipStream(out, tfrecord.DEFAULT_GZIP_LEVEL)
        for start in range(0, len(data), 100_000):
            stream.write(data[start:start + 100_000])
        stream.close()
        assert gzip.decompress(out.getvalue()) == data
        assert (len(out.getvalue()) > len(data)) == stored
        assert (len(tfrecord.gzip_compress(data)) > len(data)) == stored
        assert len(out.getvalue()) < (1.01 * len(data) if stored else 0.6 * len(data))
