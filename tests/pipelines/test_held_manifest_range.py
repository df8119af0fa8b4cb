"""`checked_records` and the record readers cut to a range of records (issue 39).

A reader of a slice of a shard (a DataLoader worker's share) asks for
records ``start <= i < stop``: it must get exactly those, with the same
errors as a whole read for damage inside what it reads, and the shard's
size and sha256 must still be checked at its end, so damage anywhere in the
shard, past `stop` too, raises. Checked against a whole read sliced, and
against a second reader (`hashlib`).
"""

import hashlib
import io

from hypothesis import HealthCheck, given, settings, strategies as st

from recordforge.pipelines.publish import held_manifest
from recordforge.transforms import tfrecord

_records = st.lists(st.binary(max_size=200), min_size=1, max_size=12)
# monkeypatch only sets READ_BLOCK, which every example sets again.
_fixture_ok = [HealthCheck.function_scoped_fixture]
_bounds = st.tuples(st.integers(0, 14), st.one_of(st.none(), st.integers(0, 14)))


def _held(data: bytes) -> held_manifest.HeldShard:
    return held_manifest.HeldShard("train-0.tfrecord", "out/train-0.tfrecord", len(data),
                                   hashlib.sha256(data).hexdigest())


def _read(data: bytes, held, views: bool, **bounds):
    got = []
    try:
        for record in held_manifest.checked_records(
                lambda: io.BytesIO(data), held, compression="none",
                read_manifest=lambda: None, views=views, **bounds):
            got.append(bytes(record))
    except (held_manifest.DatasetCorrupt, tfrecord.TFRecordError) as error:
        return got, type(error)
    return got, None


@settings(max_examples=150, deadline=None, suppress_health_check=_fixture_ok)
@given(records=_records, bounds=_bounds, views=st.booleans(), block=st.integers(1, 400))
def test_a_range_of_an_intact_shard_is_its_slice(monkeypatch, records, bounds, views, block):
    monkeypatch.setattr("recordforge.transforms.tfrecord.reading.READ_BLOCK", block)
    start, stop = bounds
    data = tfrecord.frame_records(records)
    assert _read(data, _held(data), views, start=start, stop=stop) \
        == (records[start:stop], None)


@settings(max_examples=150, deadline=None, suppress_health_check=_fixture_ok)
@given(records=_records, bounds=_bounds, flip=st.integers(0, 10 ** 6),
       block=st.integers(1, 400))
def test_damage_anywhere_raises_whatever_the_range(monkeypatch, records, bounds, flip, block):
    """A byte flipped before, inside or past the range: the reader raises
    DatasetCorrupt (the sha256 covers what it does not walk), after at
    most the intact records of its range."""
    monkeypatch.setattr("recordforge.transforms.tfrecord.reading.READ_BLOCK", block)
    start, stop = bounds
    written = tfrecord.frame_records(records)
    damaged = bytearray(written)
    damaged[flip % len(damaged)] ^= 1
    got, error = _read(bytes(damaged), _held(written), True, start=start, stop=stop)
    assert error is not None and issubclass(error, held_manifest.DatasetCorrupt)
    assert got == records[start:stop][:len(got)]


@settings(max_examples=100, deadline=None, suppress_health_check=_fixture_ok)
@given(records=_records, bounds=_bounds, block=st.integers(1, 400))
def test_iter_record_views_range_is_the_slice(monkeypatch, records, bounds, block):
    monkeypatch.setattr("recordforge.transforms.tfrecord.reading.READ_BLOCK", block)
    start, stop = bounds
    data = io.BytesIO(tfrecord.frame_records(records))
    got = [bytes(view) for view in tfrecord.iter_record_views(
        data, compression="none", start=start, stop=stop)]
    assert got == records[start:stop]
