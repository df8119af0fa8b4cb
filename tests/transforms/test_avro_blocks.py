"""Compressed Avro blocks are inflated in bounded steps (`avro_blocks`) before
fastavro decodes them: every codec reads what fastavro's own reader reads,
and a block that inflates past the bound is one `avro_invalid` dead letter
naming the file, the block and its byte offset, the records before it kept,
itself never decoded (issue 38's leftover: a deflate bomb filled the memory)."""

import io
import re
import tracemalloc
import zlib

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from recordforge.transforms.readers import avro_blocks
from recordforge.transforms.readers.avro import iter_avro
from recordforge.transforms.readers.rows import SourceRow

SCHEMA = fastavro.parse_schema({"type": "record", "name": "r", "fields": [
    {"name": "x", "type": "long"}, {"name": "b", "type": "bytes"}]})
CODECS = ["null", "deflate", "bzip2", "xz"] + (
    ["zstandard"] if "zstandard" in fastavro.read.BLOCK_READERS and
    fastavro.read.BLOCK_READERS["zstandard"].__name__ != "missing" else [])
_RECORDS = st.lists(st.builds(dict, x=st.integers(-(1 << 63), (1 << 63) - 1),
                              b=st.binary(max_size=200)), max_size=30)


def _write(records, codec, sync_interval=64) -> bytes:
    out = io.BytesIO()
    fastavro.writer(out, SCHEMA, records, codec=codec, sync_interval=sync_interval)
    return out.getvalue()


def _read(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("avro") / "f.avro"
    path.write_bytes(data)
    read = list(iter_avro(str(path)))
    return path, [r.values for r in read if isinstance(r, SourceRow)], \
        [r for r in read if not isinstance(r, SourceRow)]


@settings(max_examples=150, deadline=None)
@given(records=_RECORDS, codec=st.sampled_from(CODECS), interval=st.integers(1, 400))
def test_every_codec_reads_what_fastavro_reads(tmp_path_factory, records, codec, interval):
    data = _write(records, codec, interval)
    _, rows, letters = _read(tmp_path_factory, data)
    assert letters == []
    assert rows == list(fastavro.reader(io.BytesIO(data))) == records


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # the same bound each time
@given(before=_RECORDS, codec=st.sampled_from([c for c in CODECS if c != "null"]),
       over=st.integers(1, 5000))
def test_a_block_inflating_past_the_bound_is_refused_by_name(tmp_path_factory, monkeypatch,
                                                             before, codec, over):
    """The bound scaled down to 64 KiB: a block of zeros `over` bytes past it
    (a few hundred bytes compressed) after generated blocks."""
    monkeypatch.setattr(avro_blocks, "MAX_DECODED_BYTES", 64 << 10)
    bomb = {"x": 7, "b": bytes((64 << 10) + over)}
    data = _write(before + [bomb], codec, sync_interval=1 << 30 if not before else 1)
    path, rows, letters = _read(tmp_path_factory, data)
    assert rows == before  # every block before the bomb is kept, exactly
    [letter] = letters
    assert letter["reason"] == "avro_invalid"
    assert str(path) in letter["message"]
    found = re.search(r"block (\d+) \(at byte (\d+)\) inflates to more than", letter["message"])
    assert found, letter["message"]
    offset = int(found[2])
    assert data[offset - 16:offset] == data[-16:]  # it starts right after a sync marker


def test_a_deflate_bomb_of_1_gib_holds_at_most_the_bound(tmp_path_factory):
    """1 GiB of zeros in about 1 MB of deflate: refused, having made no more
    than the bound (fastavro inflated it whole, 1 GiB)."""
    deflater = zlib.compressobj(9, zlib.DEFLATED, -15)
    chunk = bytes(16 << 20)
    payload = b"".join([deflater.compress(chunk) for _ in range(64)] + [deflater.flush()])
    data = bytearray(_write([{"x": 1, "b": b"small"}], "deflate"))
    sync = bytes(data[-16:])
    # A second block: one record claimed, its deflate data the bomb.
    data += _long(1) + _long(len(payload)) + payload + sync
    path = tmp_path_factory.mktemp("bomb") / "bomb.avro"
    path.write_bytes(bytes(data))
    tracemalloc.start()
    try:
        read = list(iter_avro(str(path)))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [r.values for r in read if isinstance(r, SourceRow)] == [{"x": 1, "b": b"small"}]
    assert "block 1 (at byte" in read[-1]["message"]
    assert peak < avro_blocks.MAX_DECODED_BYTES + (64 << 20), peak


def _long(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | 0x80 if n else low)
        if not n:
            return bytes(out)


@pytest.mark.parametrize("codec", ["snappy", "brotli"])
def test_a_codec_that_cannot_be_inflated_is_named(tmp_path_factory, codec):
    """brotli is no Avro codec; snappy needs cramjam, which is not installed."""
    if codec == "snappy":
        try:
            import cramjam  # noqa: F401
            pytest.skip("cramjam is installed, so snappy blocks are read")
        except ImportError:
            pass
    header = b"\x14avro.codec" + _long(len(codec)) + codec.encode()
    data = _write([{"x": 1, "b": b""}], "null").replace(b"\x14avro.codec\x08null", header)
    _, rows, letters = _read(tmp_path_factory, data)
    assert rows == [] and len(letters) == 1
    assert letters[0]["reason"] == "avro_invalid" and codec in letters[0]["message"]
