"""`FramedKeys` against the list of keys it holds: reading, slicing,
counting, joining and pickling (None keys, empty keys, empty batches)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from recordforge.transforms.framed_keys import FramedKeys

keys = st.lists(st.one_of(st.none(), st.binary(max_size=8)), max_size=30)


@settings(max_examples=300, deadline=None)
@given(keys=keys, data=st.data())
def test_framed_keys_read_as_their_list(keys, data):
    framed = FramedKeys.of(keys)
    assert len(framed) == len(keys)
    assert list(framed) == keys and framed == keys and framed == FramedKeys.of(keys)
    assert framed.count(None) == framed.nones == keys.count(None)
    assert (None in framed) == (None in keys)
    assert (framed.missing is None) == (None not in keys)
    for index in range(-len(keys), len(keys)):
        assert framed[index] == keys[index]
    for index in (len(keys), -len(keys) - 1):
        with pytest.raises(IndexError):
            framed[index]
    start, stop = data.draw(st.integers(-35, 35)), data.draw(st.integers(-35, 35))
    step = data.draw(st.sampled_from([None, 1, 2, -1]))
    part = framed[start:stop:step]
    assert list(part) == keys[start:stop:step]
    if step in (None, 1):
        assert isinstance(part, FramedKeys) and part.count(None) == keys[start:stop].count(None)
    copy = pickle.loads(pickle.dumps(framed, pickle.HIGHEST_PROTOCOL))
    assert copy == keys and copy.nones == framed.nones


@settings(max_examples=200, deadline=None)
@given(parts=st.lists(keys, max_size=5))
def test_joined_keys_are_the_parts_one_after_the_other(parts):
    joined = FramedKeys.joined([FramedKeys.of(part) for part in parts])
    assert list(joined) == [key for part in parts for key in part]
    assert joined.nones == sum(part.count(None) for part in parts)


def test_the_kernels_take_keys_without_a_none():
    buffer, offsets = FramedKeys.of([b"ab", b"", b"c"]).native()
    assert buffer == b"abc" and np.frombuffer(offsets, "<i8").tolist() == [0, 2, 2, 3]
    with pytest.raises(ValueError, match="missing"):
        FramedKeys.of([b"a", None]).native()


def test_offsets_that_do_not_cut_the_buffer_are_refused():
    for offsets, missing in (([], None), ([1, 2], None), ([0, 2], None), ([0, 2, 1, 3], None),
                             ([0, 1, 3], [1, 0]), ([0, 3], [0, 0])):
        with pytest.raises(ValueError):
            FramedKeys(b"abc", np.array(offsets, dtype=np.int64), missing)
    assert FramedKeys(b"", np.zeros(1, np.int64)) == []
