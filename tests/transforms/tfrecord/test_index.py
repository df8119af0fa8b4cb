"""Index files: made from a stream of framed bytes however it is cut into
writes, byte for byte what the `tfrecord` package's own index writer makes
of the file; and an index compared with its records line by line."""

import io

import pytest
from hypothesis import given, settings, strategies as st
from tfrecord.tools.tfrecord2idx import create_index

from recordforge.transforms import tfrecord

records_st = st.lists(st.binary(max_size=300), max_size=40)


def _framed(records):
    buffer = io.BytesIO()
    with tfrecord.TFRecordWriter(buffer) as writer:
        writer.write_many(records)
    return buffer.getvalue()


def _reference_index(tmp_path, data: bytes) -> bytes:
    """What `tfrecord.tools.tfrecord2idx.create_index` writes for `data`."""
    shard, index = tmp_path / "s.tfrecord", tmp_path / "s.tfrecord.index"
    shard.write_bytes(data)
    create_index(str(shard), str(index))
    return index.read_bytes()


def _indexed(data: bytes, cuts) -> tuple[bytes, int]:
    """(the index `RecordIndexer` writes for `data` given in pieces cut
    at `cuts`, the records it counted)."""
    out = io.BytesIO()
    indexer = tfrecord.RecordIndexer(out, "s.tfrecord")
    edges = [0, *sorted(cut % (len(data) + 1) for cut in cuts), len(data)]
    for start, end in zip(edges[:-1], edges[1:]):
        indexer.write(memoryview(data)[start:end])
    return out.getvalue(), indexer.finish()


@settings(max_examples=200, deadline=None)
@given(records=records_st, cuts=st.lists(st.integers(min_value=0), max_size=30))
def test_the_index_is_the_tfrecord_packages_index_however_the_bytes_are_written(
        tmp_path_factory, records, cuts):
    data = _framed(records)
    index, count = _indexed(data, cuts)
    assert count == len(records)
    assert index == _reference_index(tmp_path_factory.mktemp("index"), data)


@settings(max_examples=100, deadline=None)
@given(records=records_st.filter(bool), cut=st.integers(min_value=1))
def test_a_stream_ending_inside_a_record_is_an_error(records, cut):
    data = _framed(records)
    short = data[:-(1 + cut % (len(records[-1]) + tfrecord.FRAMING - 1))]  # inside the last
    indexer = tfrecord.RecordIndexer(io.BytesIO(), "s.tfrecord")
    indexer.write(short)
    with pytest.raises(tfrecord.TFRecordError, match="s.tfrecord: truncated record"):
        indexer.finish()


def test_misframed_bytes_are_not_indexed():
    data = bytearray(_framed([b"a" * 10, b"b" * 20]))
    data[26 + 9] ^= 1  # the second record's length CRC
    indexer = tfrecord.RecordIndexer(io.BytesIO(), "s.tfrecord")
    with pytest.raises(tfrecord.TFRecordError, match="bad length CRC at byte offset 26 "
                                                      r"\(record 1\)"):
        indexer.write(bytes(data))


def test_gzip_files_have_no_index():
    assert tfrecord.indexable("none") and not tfrecord.indexable("gzip")


def _match(index: bytes, records) -> tuple[int, str] | None:
    lines = io.BytesIO(index)
    match = tfrecord.IndexMatch(lines.readline)
    for record in records:
        match.record(len(record) + tfrecord.FRAMING)
    return match.finish()


@settings(max_examples=100, deadline=None)
@given(records=records_st)
def test_an_index_matches_its_records(tmp_path_factory, records):
    index = _reference_index(tmp_path_factory.mktemp("index"), _framed(records))
    assert _match(index, records) is None


damage_st = st.one_of(
    st.tuples(st.just("flip"), st.integers(min_value=0), st.integers(min_value=1, max_value=255)),
    st.tuples(st.just("truncate"), st.integers(min_value=1), st.just(0)),
    st.tuples(st.just("extend"), st.binary(min_size=1, max_size=30), st.just(0)),
)


@settings(max_examples=200, deadline=None)
@given(records=records_st.filter(bool), damage=damage_st)
def test_an_index_that_disagrees_with_its_records_is_found(tmp_path_factory, records, damage):
    index = bytearray(_reference_index(tmp_path_factory.mktemp("index"), _framed(records)))
    kind, where, what = damage
    if kind == "flip":
        index[where % len(index)] ^= what
    elif kind == "truncate":
        del index[-(1 + where % len(index)):]
    else:
        index += where
    found = _match(bytes(index), records)
    assert found is not None
    line, message = found
    assert 1 <= line <= len(records) + 1 and f"line {line} reads" in message
