"""Run files written by the native kernels against `run_format.RunWriter`, byte for byte."""

from __future__ import annotations

import io

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from recordforge.transforms.splits import ExampleRows, HashedExamples, SplitAssigner
from recordforge.transforms.tfrecord import iter_records
from recordforge.transforms.framed_examples import FramedExamples
from recordforge.transforms.framed_keys import FramedKeys
from recordforge.transforms.writer import (framed_runs, prepare, row_order, run_format, run_kernel,
                                           spill)

# Small alphabets: keys that tie (whole or in their first 8 bytes), NUL bytes, trailing too.
examples = st.lists(st.binary(max_size=40).map(lambda data: bytes(b % 3 for b in data)),
                    max_size=50)


def _patched(patch, native):
    for module in (row_order, run_kernel, prepare):
        patch.setattr(module, "kernels", lambda: native)


def _python_run(keys, rows, order, key_width, steps, **options) -> bytes:
    """The reference: `RunWriter` fed the ordered rows in `steps` cuts."""
    out = io.BytesIO()
    writer = run_format.RunWriter(out, key_width=key_width, **options)
    ordered = [rows[row] for row in order]
    ordered_keys = None if keys is None else [keys[row] for row in order]
    cuts = sorted({0, len(order), *[cut for cut in steps if cut < len(order)]})
    for start, end in zip(cuts, cuts[1:]):
        writer.add(None if keys is None else ordered_keys[start:end], ordered[start:end])
    writer.close()
    return out.getvalue()


def _drawn_order_and_keys(data, rows, kind) -> tuple[list[int], int, list[bytes] | None]:
    """An order of `rows` (repeats too) and, by `kind`, the run's key width
    and a key per row: "fixed" 9 bytes each, "variable" 0-12 bytes, or
    "example" (None: the examples are the keys)."""
    order = data.draw(st.lists(st.integers(0, len(rows) - 1), max_size=60) if rows
                      else st.just([]))
    key_width = {"fixed": 9, "variable": run_format.KEY_VARIABLE,
                 "example": run_format.KEY_IS_EXAMPLE}[kind]
    keys = None
    if kind != "example":
        sizes = st.just(9) if kind == "fixed" else st.integers(0, 12)
        keys = [data.draw(sizes.flatmap(lambda size: st.binary(min_size=size, max_size=size)))
                for _ in rows]
    return order, key_width, keys


@settings(max_examples=300, deadline=None)
@given(rows=examples, data=st.data(), kind=st.sampled_from(["fixed", "variable", "example"]),
       prefix_len=st.integers(0, 10), index_every=st.integers(1, 300),
       block=st.integers(1, 500))
def test_write_run_writes_the_file_run_writer_writes(native, rows, data, kind, prefix_len,
                                                     index_every, block):
    """Any order (repeats too), keys of every kind, index entries and blocks
    crossing records anywhere: the same file as `RunWriter` given the rows
    in that order in any cuts (`run_steps`)."""
    order, key_width, keys = _drawn_order_and_keys(data, rows, kind)
    steps = data.draw(st.lists(st.integers(0, 60), max_size=5))
    options = dict(prefix_len=prefix_len, index_every=index_every)
    out = io.BytesIO()
    given_keys = b"".join(keys) if kind == "fixed" else keys
    written = run_kernel.write_ordered(out, given_keys, rows, order, key_width=key_width,
                                       block=block, **options)
    assert written == len(order)
    assert out.getvalue() == _python_run(keys, rows, order, key_width, steps, **options)
    if kind == "variable":  # the same keys as one buffer (a table kernel's)
        framed = io.BytesIO()
        assert run_kernel.write_ordered(framed, FramedKeys.of(keys), rows, order,
                                        key_width=key_width, block=block, **options) == len(order)
        assert framed.getvalue() == out.getvalue()


@settings(max_examples=300, deadline=None)
@given(rows=examples, data=st.data(), width=st.integers(1, 20))
def test_fixed_key_order_is_sorted_positions(native, rows, data, width):
    """Keys tying whole, or in their first 8 bytes only, and examples
    breaking the ties: the rows in `row_order.sorted_positions`' order (rows
    equal in key and example are interchangeable)."""
    keys = [bytes(b % 2 for b in data.draw(st.binary(min_size=width, max_size=width)))
            for _ in rows]
    selected = data.draw(st.lists(st.integers(0, len(rows) - 1), unique=True) if rows
                         else st.just([]))
    blob = np.frombuffer(b"".join(keys), dtype=np.uint8)
    order = native.fixed_key_order(blob, width, rows, np.asarray(selected, "<i8").view(np.uint8))
    got = [(keys[row], rows[row]) for row in np.frombuffer(order, "<i8").tolist()]
    fixed = np.frombuffer(b"".join(keys), dtype=f"V{width}")[selected] if selected else \
        np.zeros(0, f"V{width}")
    expected = row_order.sorted_positions(fixed.view(f"S{width}"),
                                          lambda at: rows[selected[at]]).tolist()
    assert got == [(keys[selected[at]], rows[selected[at]]) for at in expected]



@settings(max_examples=300, deadline=None)
@given(heads=st.lists(st.binary(min_size=9, max_size=9), max_size=2000),
       alphabet=st.integers(2, 256), width=st.integers(1, 20))
def test_head_order_is_the_numpy_order_by_head(native, heads, alphabet, width):
    """Keys of any width whose first 8 bytes repeat (few byte values) or
    not, digests' sizes too: the kernel's order by those bytes is numpy's
    stable sort of them (`row_order.python_order_by_head`, the reference),
    and it is None exactly where numpy finds two keys sharing them."""
    keys = [bytes(b % alphabet for b in head).ljust(width, b"\1")[:width] for head in heads]
    fixed = np.frombuffer(b"".join(keys), dtype=f"S{width}") if keys else np.zeros(0, f"S{width}")
    expected = row_order.python_order_by_head(fixed)
    if len(keys) < 2:  # (left to its caller by the reference: they are in order)
        expected = np.arange(len(keys))
    found = native.head_order(np.ascontiguousarray(fixed).view(np.uint8), width)
    if expected is None:
        assert found is None
    else:
        assert np.frombuffer(found, dtype="<i8").tolist() == expected.tolist()


def test_head_order_refuses_keys_cut_short(native):
    with pytest.raises(ValueError):
        native.head_order(np.zeros(3, dtype=np.uint8), 2)
    with pytest.raises(ValueError):
        native.head_order(np.zeros(4, dtype=np.uint8), 0)

batches = st.lists(st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=6)),
                                      st.binary(max_size=60)), max_size=30), max_size=5)


@settings(max_examples=150, deadline=None)
@given(batches=batches, shuffle=st.booleans(), splits=st.integers(1, 3),
       hashed=st.booleans(), index_every=st.integers(1, 300), framed=st.booleans())
def test_a_run_buffer_writes_the_same_runs_with_and_without_the_kernels(
        native, batches, shuffle, splits, hashed, index_every, framed):
    """Whole spills: batches with and without keys of their own, with their
    digests or not, their keys in one buffer (a table kernel's `FramedKeys`)
    or not, one to three splits, shuffled or in key order."""
    assigner = SplitAssigner("runs", [(f"s{i}", 1.0) for i in range(splits)])

    def batch(rows, kernels):
        if framed and kernels is not None:
            rows = ExampleRows.zipped(FramedKeys.of([key for key, _ in rows]),
                                      [row for _, row in rows])
        if not hashed:
            return rows
        digests, joined, _ = assigner.hash_rows_joined(
            [example if key is None else key for key, example in rows])
        return HashedExamples(rows, assigner.salt, digests, joined=joined)

    def spilled(kernels):
        with pytest.MonkeyPatch.context() as patch:
            _patched(patch, kernels)
            buffer = spill.RunBuffer(assigner, shuffle=shuffle, sample_every=200,
                                     prefix_len=5, index_every=index_every)
            held = [buffer.add(batch(rows, kernels)) for rows in batches]
            runs = {}
            for split in buffer.splits_held():
                out = io.BytesIO()
                runs[split] = (buffer.write(split, out), out.getvalue())
        return held, runs

    assert spilled(native) == spilled(None)


def test_a_written_run_reads_back_with_an_independent_reader(native, tmp_path):
    """The records section is plain TFRecord framing: the package's reader
    gives the rows back in key order."""
    rows = [bytes([i % 7]) * (i % 13) for i in range(500)]
    keys = np.frombuffer(np.random.default_rng(3).bytes(16 * len(rows)), dtype="V16")
    path = tmp_path / "one.run"
    held = framed_runs.FramedBatches()
    held.add(FramedExamples.of(rows))
    with open(path, "wb") as out:
        assert framed_runs.write_fixed_key_run(out, keys, held, np.arange(len(rows)),
                                               prefix_len=8, index_every=100) == len(rows)
    run = run_format.RunFile(str(path))
    data = path.read_bytes()[:run.data_size]
    expected = [rows[i] for i in np.argsort(keys.view("S16"), kind="stable").tolist()]
    assert list(iter_records(io.BytesIO(data), path=str(path), compression="none")) == expected
    assert [example for _, example, _ in run.stream(b"", None)] == expected


class _Failing:
    def __init__(self):
        self.calls = 0

    def write(self, data):
        self.calls += 1
        raise OSError("disk full")


def test_what_the_kernels_refuse(native):
    rows = [b"a", b"bb", b"c"]
    order = np.array([2, 0], "<i8").view(np.uint8)
    out = io.BytesIO()
    assert native.write_run(out, [b"a", b"b", "c"], order, None, 0, 4, 64, 100) is None
    assert native.write_run(out, rows, order, ["k", b"k", b"k"], -1, 4, 64, 100) is None
    assert out.getvalue() == b""  # refused before a byte is written
    with pytest.raises(IndexError):
        native.write_run(out, rows, np.array([3], "<i8").view(np.uint8), None, 0, 4, 64, 100)
    with pytest.raises(ValueError, match="negative"):
        native.write_run(out, rows, np.array([-1], "<i8").view(np.uint8), None, 0, 4, 64, 100)
    with pytest.raises(ValueError, match="multiple of 8"):
        native.write_run(out, rows, b"\0" * 7, None, 0, 4, 64, 100)
    with pytest.raises(ValueError, match="key bytes"):
        native.write_run(out, rows, order, b"\0" * 5, 2, 4, 64, 100)
    with pytest.raises(ValueError, match="keys for"):
        native.write_run(out, rows, order, [b"k"], -1, 4, 64, 100)
    with pytest.raises(ValueError, match="key width"):
        native.write_run(out, rows, order, b"kk", 0, 4, 64, 100)
    column = FramedKeys.of([b"k", b"", b"kk"]).native()
    for wrong, why in ((FramedKeys.of([b"k", b"kk"]).native(), "keys for"),
                       ((b"k", column[1]), "run from"),
                       ((column[0],), "tuple"), ("k", "tuple"),
                       ((column[0], np.array([0, 2, 1, 3], "<i8").view(np.uint8)), "goes back")):
        with pytest.raises(ValueError, match=why):
            native.write_run(out, rows, order, wrong, -1, 4, 64, 100)
        with pytest.raises(ValueError, match=why):
            native.sorted_rows(wrong, rows)
    with pytest.raises(IndexError):
        native.sorted_rows(column, rows, np.array([3], "<i8").view(np.uint8))
    with pytest.raises(ValueError, match="index_every"):
        native.write_run(out, rows, order, None, 0, 4, 0, 100)
    with pytest.raises(ValueError, match="key bytes"):
        native.fixed_key_order(b"\0" * 5, 2, rows, order)
    with pytest.raises(ValueError, match="outside"):
        native.fixed_key_order(b"\0" * 6, 2, rows, np.array([3], "<i8").view(np.uint8))
    every = np.arange(3, dtype="<i8").view(np.uint8)
    assert native.fixed_key_order(b"\0" * 6, 2, [b"a", 1, b"c"], every) is None  # tied: Python
    assert native.fixed_key_order(b"\0" * 6, 2, [b"a", 1, b"c"], order) is not None  # not compared
    failing = _Failing()
    with pytest.raises(OSError, match="disk full"):
        native.write_run(failing, rows, order, None, 0, 4, 64, 100)
    assert failing.calls == 1


odd_rows = st.lists(st.tuples(
    st.one_of(st.none(), st.binary(max_size=6), st.integers(), st.just(np.zeros(2))),
    st.one_of(st.binary(max_size=30), st.binary(max_size=30), st.text(max_size=3))), max_size=20)


def _prepared(batch, kernels):
    """What `prepare_batch` gives (as plain values), or the error it raises."""
    assigner = SplitAssigner("prepare", [("a", 0.5), ("b", 0.5)])
    with pytest.MonkeyPatch.context() as patch:
        _patched(patch, kernels)
        try:
            found = prepare.prepare_batch(assigner, batch, shuffle=True, sample_every=64,
                                          prefix_len=4)
        except TypeError as error:
            return str(error)
    if found is None:
        return None
    return (list(found.examples), list(found.order_keys), found.splits.tolist(),
            found.sizes.tolist(), found.samples, found.keyed, found.digests.tobytes())


@settings(max_examples=300, deadline=None)
@given(rows=odd_rows, columns=st.booleans())
def test_prepare_batch_is_the_same_with_and_without_the_kernel(native, rows, columns):
    """Rows with and without keys, keys and examples of the wrong type (a
    numpy array, whose comparison with None is no bool, too): the same
    prepared batch, or the same error naming the row."""
    batch = (ExampleRows.zipped([key for key, _ in rows], [example for _, example in rows])
             if columns else rows)
    assert _prepared(batch, native) == _prepared(batch, None)
    examples = [example for _, example in rows]
    if all(type(example) is bytes for example in examples):
        assert np.frombuffer(native.framed_sizes(examples), "<i8").tolist() == [
            len(example) + 16 for example in examples]
    else:
        assert native.framed_sizes(examples) is None


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(st.tuples(st.binary(max_size=4).map(lambda key: bytes(b % 2 for b in key)),
                               st.binary(max_size=4).map(lambda data: bytes(b % 3 for b in data))),
                     max_size=60),
       keyed=st.booleans())
def test_sorted_rows_sort_as_python_sorts(native, rows, keyed):
    """Keys of any width (empty, prefixes of one another, tying) and
    examples breaking the ties, or examples alone: Python's order of the
    same values (rows equal in both are interchangeable)."""
    keys = [key for key, _ in rows] if keyed else None
    examples = [example for _, example in rows]
    order = np.frombuffer(native.sorted_rows(keys, examples), "<i8").tolist()
    value = (lambda row: rows[row]) if keyed else examples.__getitem__
    assert [value(row) for row in order] == sorted(map(value, range(len(rows))))
    assert sorted(order) == list(range(len(rows)))
    if keyed:  # the same keys as one buffer (a table kernel's)
        framed = np.frombuffer(native.sorted_rows(FramedKeys.of(keys).native(), examples), "<i8")
        assert framed.tolist() == order
        assert run_kernel.sorted_rows(FramedKeys.of(keys), examples).tolist() == order
    assert native.sorted_rows(None, [b"a", "b"]) is None
    assert native.sorted_rows([b"k", 1], [b"a", b"b"]) is None
    with pytest.raises(ValueError, match="keys for"):
        native.sorted_rows([b"k"], [b"a", b"b"])
