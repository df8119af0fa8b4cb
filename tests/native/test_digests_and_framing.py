"""Native row digests and record framing against the Python reference, byte for byte."""

from __future__ import annotations

import io
import os
import pathlib
import tempfile

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from recordforge.transforms import splits
from recordforge.transforms.splits import SplitAssigner, dataset_salt
from recordforge.transforms.tfrecord import framing
from recordforge.transforms.writer import row_order, run_format

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


@settings(max_examples=300, deadline=None)
@given(data=st.data(), records=rows)
def test_gathered_framing_is_the_framing_of_the_gathered_records(native, data, records):
    """Any order over the records (repeats too): the framing of those
    records in that order, and each one's framed size."""
    order = data.draw(st.lists(st.integers(0, max(0, len(records) - 1)), max_size=60)
                      if records else st.just([]))
    framed, sizes = native.frame_gathered(records, order)
    gathered = [records[index] for index in order]
    assert framed == framing.python_frame_records(gathered)
    assert np.frombuffer(sizes, dtype="<i8").tolist() == [len(r) + 16 for r in gathered]


@settings(max_examples=300, deadline=None)
@given(data=st.data(), items=rows)
def test_gathered_join_is_the_join_of_the_gathered_items(native, data, items):
    order = data.draw(st.lists(st.integers(0, max(0, len(items) - 1)), max_size=60)
                      if items else st.just([]))
    joined, sizes = native.join_gathered(items, order)
    gathered = [items[index] for index in order]
    assert joined == b"".join(gathered)
    assert np.frombuffer(sizes, dtype="<i8").tolist() == list(map(len, gathered))


@pytest.mark.parametrize("kernel", ["frame_gathered", "join_gathered"])
def test_what_gathering_refuses(native, kernel):
    gather = getattr(native, kernel)
    assert gather([b"a", "b"], [1]) is None  # not bytes: Python takes it
    assert gather([b"a", "b"], [0]) is not None  # only gathered rows count
    with pytest.raises(IndexError):
        gather([b"a"], [1])
    with pytest.raises(OverflowError):
        gather([b"a"], [-1])


def _run_bytes(keys, examples, key_width, kernels) -> bytes:
    out = io.BytesIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(row_order, "kernels", lambda: kernels)
        patch.setattr(run_format, "BLOCK", 256)  # many blocks: index entries across them
        run_format.write_sorted_run(out, keys, examples, key_width=key_width, prefix_len=4,
                                    index_every=64)
    return out.getvalue()


@settings(max_examples=200, deadline=None)
@given(examples=st.lists(st.binary(max_size=80), max_size=40),
       key_kind=st.sampled_from(["digest", "variable", "example"]), data=st.data())
def test_a_run_written_with_gathered_framing_is_the_same_file(native, examples, key_kind, data):
    """`write_sorted_run` with the kernel writes the run file it writes
    without, byte for byte, whatever the keys (fixed, variable, none)."""
    if key_kind == "digest":
        key_width = 16
        keys = data.draw(st.lists(st.binary(min_size=16, max_size=16),
                                  min_size=len(examples), max_size=len(examples)))
    elif key_kind == "variable":
        key_width = run_format.KEY_VARIABLE
        keys = data.draw(st.lists(st.binary(max_size=6), min_size=len(examples),
                                  max_size=len(examples)))
    else:
        key_width, keys = run_format.KEY_IS_EXAMPLE, None
    with_kernel = _run_bytes(keys, examples, key_width, native)
    assert with_kernel == _run_bytes(keys, examples, key_width, None)
    # And a reader of run files reads the rows back, in (key, example) order.
    path = tempfile.NamedTemporaryFile(suffix=".run", delete=False).name
    try:
        pathlib.Path(path).write_bytes(with_kernel)
        read = [example for _, example, _ in run_format.RunFile(path).stream(b"", None)]
    finally:
        os.unlink(path)
    order = sorted(range(len(examples)), key=lambda i: (
        examples[i] if keys is None else keys[i], examples[i]))
    assert read == [examples[i] for i in order]


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=20000), start=st.integers(0, 2**32 - 1),
       cut=st.integers(0, 20000))
def test_a_continued_crc32c_matches_the_crc32c_package(native, data, start, cut):
    """`crc32c_append` (a whole file's CRC-32C, block by block) against the
    crc32c package's, from any CRC before it and cut anywhere; and
    `framing.crc32c` (which takes the kernel when it is loaded) agrees."""
    import crc32c

    expected = crc32c.crc32c(data, start)
    assert native.crc32c_append(data, start) == expected
    cut = min(cut, len(data))
    assert native.crc32c_append(memoryview(data)[cut:],
                                native.crc32c_append(data[:cut], start)) == expected
    assert framing.crc32c(bytearray(data), start) == expected
