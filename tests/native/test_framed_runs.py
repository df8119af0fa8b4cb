"""Runs written from batches held framed (`framed_runs`, `spill.RunBuffer`)
against runs written from lists of bytes (`run_format.write_sorted_run`),
byte for byte, with and without the kernels."""

from __future__ import annotations

import io

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from recordforge.transforms.framed_examples import FramedExamples
from recordforge.transforms.splits import ExampleRows, SplitAssigner
from recordforge.transforms.tfrecord import framing
from recordforge.transforms.writer import (framed_runs, prepare, row_order, run_format,
                                           run_kernel, spill)

# Small alphabets: keys and examples that tie, NUL bytes, trailing too.
_bytes = st.binary(max_size=30).map(lambda data: bytes(b % 3 for b in data))
batches = st.lists(st.lists(st.tuples(st.one_of(st.none(), _bytes), _bytes), max_size=25),
                   max_size=6)


def _patched(patch, native):
    for module in (row_order, run_kernel, prepare, framing):
        patch.setattr(module, "kernels", lambda: native)


def _expected_runs(assigner, batches, shuffle) -> dict[int, bytes]:
    """Each split's run as written from lists of its rows' bytes (the
    reference writer, no kernel): digests as fixed-width keys when
    shuffling, else each row's key (its example without one) where a
    batch with rows of the split has a key, else the examples themselves."""
    rows = [row for batch in batches for row in batch]
    batch_keyed = [any(key is not None for key, _ in batch) for batch in batches
                   for _ in batch]
    if not rows:
        return {}
    sources = [example if key is None else key for key, example in rows]
    digests, _, words = assigner.hash_rows_joined(sources)
    splits = assigner.split_indices(words).tolist()
    runs = {}
    for split in sorted(set(splits)):
        mine = [at for at, found in enumerate(splits) if found == split]
        examples = [rows[at][1] for at in mine]
        keyed = any(batch_keyed[at] for at in mine) and not shuffle
        if shuffle:
            keys, key_width = [digests[at] for at in mine], len(digests[0])
        elif keyed:
            keys, key_width = [sources[at] for at in mine], run_format.KEY_VARIABLE
        else:
            keys, key_width = None, run_format.KEY_IS_EXAMPLE
        out = io.BytesIO()
        assert run_format.write_sorted_run(out, keys, examples, key_width=key_width,
                                           prefix_len=5, index_every=40) == len(mine)
        runs[split] = out.getvalue()
    return runs


@settings(max_examples=200, deadline=None)
@given(batches=batches, shuffle=st.booleans(), splits=st.integers(1, 3),
       framed=st.booleans(), kernels=st.booleans())
def test_a_run_buffer_writes_the_runs_lists_of_its_rows_write(native, batches, shuffle, splits,
                                                              framed, kernels):
    """Every key kind (digests, keys of any width, the example as key),
    empty batches, many batches, rows of every split, batches given as
    lists of pairs or with their Examples framed: each split's run is the
    file the reference writes from lists of the split's rows."""
    assigner = SplitAssigner("framed", [(f"s{i}", 1.0) for i in range(splits)])
    with pytest.MonkeyPatch.context() as patch:
        _patched(patch, None)
        expected = _expected_runs(assigner, batches, shuffle)
        _patched(patch, native if kernels else None)
        buffer = spill.RunBuffer(assigner, shuffle=shuffle, sample_every=200, prefix_len=5,
                                 index_every=40)
        for rows in batches:
            if framed:
                keys = [key for key, _ in rows]
                rows = ExampleRows.zipped(keys, FramedExamples.of([row for _, row in rows]))
            buffer.add(rows)
        written = {}
        for split in buffer.splits_held():
            out = io.BytesIO()
            buffer.write(split, out)
            written[split] = out.getvalue()
    assert written == expected
    held = sum(len(example) + 16 for batch in batches for _, example in batch)
    assert buffer.buffered_bytes >= held  # the framed records at least


def _held(batches: list[list[bytes]]) -> framed_runs.FramedBatches:
    held = framed_runs.FramedBatches()
    for batch in batches:
        held.add(FramedExamples.of(batch))
    return held


@settings(max_examples=200, deadline=None)
@given(batches=st.lists(st.lists(_bytes, max_size=12), max_size=5), data=st.data(),
       kind=st.sampled_from(["fixed", "variable", "example"]), index_every=st.integers(1, 200))
def test_any_order_of_framed_rows_writes_the_run_of_those_rows(native, batches, data, kind,
                                                               index_every):
    """Any order (repeats too), every key kind: the kernel's copy of framed
    records and the Python gather write the file `RunWriter` writes of the
    rows as bytes objects."""
    held = _held(batches)
    rows = [row for batch in batches for row in batch]
    order = data.draw(st.lists(st.integers(0, len(rows) - 1), max_size=40) if rows
                      else st.just([]))
    keys = width = None
    if kind == "fixed":
        blob = data.draw(st.binary(min_size=3 * len(rows), max_size=3 * len(rows)))
        keys, width, listed = np.frombuffer(blob, "V3"), 3, [blob[i:i + 3] for i in range(0, len(blob), 3)]
    elif kind == "variable":
        listed = keys = [data.draw(_bytes) for _ in rows]
        width = run_format.KEY_VARIABLE
    else:
        listed, width = None, run_format.KEY_IS_EXAMPLE
    expected = io.BytesIO()
    writer = run_format.RunWriter(expected, key_width=width, prefix_len=4, index_every=index_every)
    writer.add(None if listed is None else [listed[i] for i in order], [rows[i] for i in order])
    writer.close()
    order = np.asarray(order, dtype=np.int64)
    for kernels in (native, None):
        with pytest.MonkeyPatch.context() as patch:
            _patched(patch, kernels)
            out = io.BytesIO()
            assert framed_runs.write_framed_run(out, keys, held, order, key_width=width,
                                                prefix_len=4,
                                                index_every=index_every) == len(order)
        assert out.getvalue() == expected.getvalue()


def test_framed_rows_read_as_their_examples():
    held = _held([[b"a", b""], [], [b"bcd"]])
    assert list(held) == [b"a", b"", b"bcd"] and len(held) == 3
    framed, sizes = held.framed(np.array([2, 0], np.int64))
    assert framed == framing.frame_records([b"bcd", b"a"]) and sizes.tolist() == [19, 17]
    with pytest.raises(IndexError):
        held[3]


def test_the_kernels_refuse_offsets_that_do_not_cut_the_buffers(native):
    """Offsets from another process are data: the kernel checks them and
    never reads past a buffer."""
    buffers, offsets = _held([[b"ab", b"c"]]).native()
    order = np.array([0, 1], "<i8").view(np.uint8)
    bad = [np.array(values, "<i8").view(np.uint8)
           for values in ([0, 18], [0, 18, 36], [0, 10, 35], [1, 18, 35], [0, 18, 35, 0])]
    for wrong in bad:
        with pytest.raises(ValueError):
            native.write_run(io.BytesIO(), (buffers, wrong), order, None, 0, 4, 64, 100)
        with pytest.raises(ValueError):
            native.sorted_rows(None, (buffers, wrong))
    with pytest.raises(ValueError):
        native.write_run(io.BytesIO(), (buffers, offsets, 1), order, None, 0, 4, 64, 100)
    with pytest.raises(ValueError):
        native.write_run(io.BytesIO(), ([bytearray(buffers[0])], offsets), order, None, 0, 4, 64, 100)
    with pytest.raises(IndexError):
        native.write_run(io.BytesIO(), (buffers, offsets), np.array([2], "<i8").view(np.uint8),
                         None, 0, 4, 64, 100)
    with pytest.raises(ValueError):
        native.fixed_key_order(b"\0" * 6, 2, (buffers, offsets))
