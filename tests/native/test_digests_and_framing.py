"""Native row digests and record framing against the Python reference, byte for byte."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from recordforge.transforms import splits
from recordforge.transforms.splits import SplitAssigner, dataset_salt
from recordforge.transforms.tfrecord import framing

rows = st.lists(st.binary(max_size=300), max_size=40)


@settings(max_examples=300, deadline=None)
@given(name=st.text(max_size=100), rows=rows)
def test_digests_match_hashlib(native, name, rows):
    """Every salt (dataset names of any length, the empty one too, hashed
    down past 64 bytes)."""
    assigner = SplitAssigner(name, [("train", 0.7), ("test", 0.3)])
    joined = native.hash_rows(dataset_salt(name), rows)
    digests, words = assigner.python_hash_rows(rows)
    assert joined == b"".join(digests)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(splits, "kernels", lambda: native)
        native_digests, native_words = assigner.hash_rows(rows)
    assert native_digests == digests and all(type(d) is bytes for d in native_digests)
    assert (native_words == words).all()


@settings(max_examples=300, deadline=None)
@given(records=rows)
def test_framing_matches_the_reference(native, records):
    assert native.frame_records(records) == framing.python_frame_records(records)


def test_items_that_are_not_bytes_take_the_python_path(native):
    mixed = [b"a", bytearray(b"b"), memoryview(b"c")]
    assert native.frame_records(mixed) is None
    assert native.hash_rows(b"salt", mixed) is None
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(framing, "kernels", lambda: native)
        assert framing.frame_records(mixed) == framing.python_frame_records([b"a", b"b", b"c"])


def test_a_salt_longer_than_blake2b_takes_is_refused(native):
    with pytest.raises(ValueError, match="longer than BLAKE2b"):
        native.hash_rows(b"x" * 65, [b"row"])
