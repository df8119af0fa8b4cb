"""Long records given in pieces (`iter_record_views(stream_from=...)`,
`StreamedRecord`): the same records, and the same damage at the same offset
and record index, as gathering them whole; Python's own gzip writes the
compressed files, and each record is read in pieces of generated sizes."""

import gzip
import io

from hypothesis import given, settings, strategies as st

from recordforge.transforms import tfrecord


def _outcome(items, piece_sizes):
    """(records as bytes, the damage raised as (offset, record index) or None)."""
    records = []
    try:
        for item in items:
            if isinstance(item, tfrecord.StreamedRecord):
                parts, sizes = [], iter(piece_sizes)
                # Read only part of some records: the walk reads and checks the rest.
                want = next(sizes, None)
                while (piece := item.read(want or 1)):
                    parts.append(piece)
                    want = next(sizes, None)
                    if want == 0:
                        break
                records.append((item.length, b"".join(parts)))
            else:
                records.append((len(item), bytes(item)))
    except tfrecord.TFRecordError as error:
        return records, (error.offset, error.record_index)
    return records, None


@settings(max_examples=200, deadline=None)
@given(records=st.lists(st.binary(max_size=300), max_size=6), stream_from=st.integers(1, 200),
       compression=st.sampled_from(["none", "gzip"]),
       damage=st.one_of(st.none(), st.tuples(st.sampled_from(["flip", "cut"]),
                                              st.integers(0, 10 ** 6))),
       piece_sizes=st.lists(st.integers(0, 64), max_size=8))
def test_streamed_records_match_records_read_whole(records, stream_from, compression, damage,
                                                    piece_sizes):
    data = bytearray(tfrecord.frame_records(records))
    if damage and data:
        kind, where = damage
        if kind == "flip":
            data[where % len(data)] ^= 1 << (where % 8)
        else:
            del data[where % len(data):]
    if compression == "gzip":
        data = gzip.compress(bytes(data))
    whole, whole_damage = _outcome(
        tfrecord.iter_record_views(io.BytesIO(data), compression=compression), [])
    streamed, streamed_damage = _outcome(
        tfrecord.iter_record_views(io.BytesIO(data), compression=compression,
                                   stream_from=stream_from), piece_sizes)
    assert streamed_damage == whole_damage
    if whole_damage is not None and len(streamed) == len(whole) + 1:
        # A long record is handed out from its header on, before its end is
        # read: damage inside it is raised while it is read, after it came.
        assert streamed[-1][0] >= stream_from
        streamed = streamed[:-1]
    assert [length for length, _ in streamed] == [length for length, _ in whole]
    for (length, part), (_, full) in zip(streamed, whole):
        assert full.startswith(part)  # a record read in part gives its head
        if length < stream_from or len(part) == length:
            assert part == full
    count = tfrecord.count_records
    if whole_damage is None:
        assert count(io.BytesIO(data), compression=compression) == len(whole)
