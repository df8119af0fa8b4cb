"""Gzip members (`gzip_members`): whole or streamed, stored or deflated, read as one stream."""

import gzip
import io
import random

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to
from hypothesis import given, settings, strategies as st

from recordforge.transforms import tfrecord
# The room itself, for its probe and its compressors (patched below).
from recordforge.transforms.tfrecord import gzip_members


def test_multi_member_gzip_reads_as_one_stream(make_records):
    records = make_records(seed=3)
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


def test_gzip_members_are_deterministic(make_records):
    data = tfrecord.frame_records(make_records(seed=4))
    assert tfrecord.gzip_compress(data) == tfrecord.gzip_compress(data)


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
    stores = gzip_members._stores
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(gzip_members, "_stores",
                        lambda probe, level: kept.append(probe) or stores(probe, level))
        for module in (gzip_members.zlib, gzip_members.isal_zlib):
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
