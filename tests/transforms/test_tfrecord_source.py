"""The TFRecord source's damaged gzip files (issue 38.18): a broken
``.tfrecord.gz`` keeps the records before the damage and is one
``tfrecord_corrupt`` dead letter, as a plain file is."""

import gzip
import zlib

from hypothesis import given, settings, strategies as st

from recordforge.schemas.example import ExampleEncoder
from recordforge.transforms.readers.rows import SourceRow
from recordforge.transforms.readers.tfrecords import iter_tfrecords
from recordforge.transforms.tfrecord import frame_records


def _intact_records(damaged: bytes, framed: bytes) -> int:
    """How many whole records the decompressible start of `damaged` holds."""
    try:
        data = zlib.decompressobj(31).decompress(damaged)
    except zlib.error:
        data = b""
        for size in range(len(damaged), 0, -1):  # the longest prefix that inflates
            try:
                data = zlib.decompressobj(31).decompress(damaged[:size])
                break
            except zlib.error:
                continue
    count, offset = 0, 0
    while offset + 12 <= len(data):
        length = int.from_bytes(data[offset:offset + 8], "little")
        end = offset + 12 + length + 4
        if end > len(data) or data[offset:end] != framed[offset:end]:
            break
        count, offset = count + 1, end
    return count


@settings(max_examples=150, deadline=None)
@given(count=st.integers(1, 40), size=st.integers(0, 300), data=st.data(),
       how=st.sampled_from(["truncate", "flip"]), suffix=st.sampled_from([".tfrecord.gz",
                                                                          ".tfrecord"]))
def test_damaged_gzip_keeps_the_records_before_the_damage(tmp_path_factory, count, size, data,
                                                          how, suffix):
    encoder = ExampleEncoder({"x": "int64", "b": "bytes"})
    records = [encoder.encode({"x": [i], "b": [bytes([i % 7]) * size]}) for i in range(count)]
    framed = frame_records(records)
    whole = gzip.compress(framed, mtime=0)
    cut = data.draw(st.integers(10, len(whole) - 1))
    damaged = whole[:cut] if how == "truncate" else (
        whole[:cut] + bytes([whole[cut] ^ 0xFF]) + whole[cut + 1:])
    path = tmp_path_factory.mktemp("t") / ("part" + suffix)
    path.write_bytes(damaged)
    read = list(iter_tfrecords(str(path)))
    rows = [item for item in read if isinstance(item, SourceRow)]
    letters = [item for item in read if not isinstance(item, SourceRow)]
    assert [row.values["x"] for row in rows] == [[i] for i in range(len(rows))]
    assert [letter["reason"] for letter in letters] == ["tfrecord_corrupt"], letters
    assert read[-1] is letters[0] and letters[0]["row"] == len(rows) + 1
    if how == "truncate":
        assert len(rows) == _intact_records(damaged, framed)
