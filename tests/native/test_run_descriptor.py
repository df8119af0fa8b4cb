"""Runs the kernel writes straight to a local file's descriptor, with the
CRC32C it keeps, against the Python writer's bytes and the crc32c package."""

from __future__ import annotations

import io
import os
import tempfile

import crc32c
import fsspec
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from recordforge.transforms import page_cache
from recordforge.transforms.splits import SplitAssigner
from recordforge.transforms.writer import CheckedFile, prepare, run_kernel, spill

from .test_run_kernel import _drawn_order_and_keys, _patched, _python_run, examples


class _Memory(io.BytesIO):
    """An in-memory file (an object store's stands in): written through
    `write`, its bytes kept after it is closed."""

    def close(self):
        self.kept = self.getvalue()
        super().close()


def _opened(path, opener: int):
    """The files the piece writer and the spill step write runs to:
    `open`'s and fsspec's local ones (whose `LocalFileOpener` wraps
    `open`'s), written through their descriptor, and an in-memory one."""
    if opener == 0:
        return open(path, "wb")
    if opener == 1:
        return fsspec.filesystem("file").open(str(path), "wb")
    return _Memory()


@settings(max_examples=150, deadline=None)
@given(rows=examples, data=st.data(), kind=st.sampled_from(["fixed", "variable", "example"]),
       index_every=st.integers(1, 300), block=st.integers(1, 500),
       before=st.binary(max_size=20), opener=st.integers(0, 2), behind=st.booleans())
def test_a_run_written_to_a_descriptor_is_the_python_writers(
        native, tmp_path_factory, rows, data, kind, index_every, block, before, opener, behind):
    """Any order and keys of every kind, after bytes the file object still
    buffers: the file holds those bytes then `RunWriter`'s run, the file
    object's position is past it (a write after lands after it), and the
    CRC32C and size kept are the crc32c package's of the whole file; the
    same through an in-memory file's `write`, and through a `WriteBehind`
    (the piece writer's: its advice given by the kernel, a small window)."""
    order, key_width, keys = _drawn_order_and_keys(data, rows, kind)
    options = dict(prefix_len=4, index_every=index_every)
    path = tmp_path_factory.mktemp("runs") / "one.run"
    with _opened(path, opener) as fileobj:
        assert (run_kernel._descriptor(fileobj) is None) == (opener == 2)
        on_disk = page_cache.WriteBehind(fileobj, window=64) if behind else fileobj
        checked = CheckedFile(on_disk)
        checked.write(before)
        written = run_kernel.write_ordered(checked, b"".join(keys) if kind == "fixed" else keys,
                                           rows, order, key_width=key_width, block=block,
                                           **options)
        if behind:
            on_disk.finish(durable=False)
        fileobj.write(b"after")
    content = fileobj.kept if opener == 2 else path.read_bytes()
    assert written == len(order)
    run = _python_run(keys, rows, order, key_width, [], **options)
    assert content == before + run + b"after"
    assert (checked.size, checked.crc) == (len(before + run), crc32c.crc32c(before + run))


def _spilled(kernels, directory, name: str, batches, *, splits: int, shuffle: bool,
             index_every: int, checked: bool = True) -> dict:
    """Each split's run of a `RunBuffer` of `batches` written to a local
    file as the piece writer does (`CheckedFile`; the spill step's plain
    file when not `checked`), with `kernels` or without (None): its rows,
    bytes, and the size and CRC32C kept."""
    assigner = SplitAssigner("runs", [(f"s{i}", 1.0) for i in range(splits)])
    with pytest.MonkeyPatch.context() as patch:
        _patched(patch, kernels)
        buffer = spill.RunBuffer(assigner, shuffle=shuffle, sample_every=200, prefix_len=5,
                                 index_every=index_every)
        for rows in batches:
            buffer.add([(None, row) for row in rows])
        runs = {}
        for split in buffer.splits_held():
            path = directory / f"{name}{split}.run"
            with open(path, "wb") as fileobj:
                target = CheckedFile(fileobj) if checked else fileobj
                count = buffer.write(split, target)
            kept = (target.size, target.crc) if checked else None
            runs[split] = (count, path.read_bytes(), kept)
    return runs


@settings(max_examples=100, deadline=None)
@given(batches=st.lists(st.lists(st.binary(max_size=60), max_size=40), max_size=4),
       splits=st.integers(1, 3), index_every=st.integers(1, 300))
def test_a_spilled_run_and_its_crc_are_the_same_through_the_descriptor(
        native, tmp_path_factory, batches, splits, index_every):
    """A shuffled `RunBuffer`'s runs written to local files as the piece
    writer does (`CheckedFile`), with and without the kernels: the same
    files, sizes and CRC32Cs."""
    directory = tmp_path_factory.mktemp("spill")
    options = dict(splits=splits, shuffle=True, index_every=index_every)
    assert (_spilled(native, directory, "native", batches, **options)
            == _spilled(None, directory, "python", batches, **options))


# Rows the size of images among small ones: a block whose records are
# large on average is written where they lie (`writev`), else copied.
_large_rows = st.lists(st.tuples(st.sampled_from([0, 3, 900, 5000, 20000, 70000]),
                                 st.integers(0, 255)).map(lambda drawn: bytes([drawn[1]]) * drawn[0]),
                       max_size=12)


@settings(max_examples=40, deadline=None)
@given(batches=st.lists(_large_rows, max_size=3), shuffle=st.booleans(),
       index_every=st.sampled_from([1, 3000, 1 << 20]), checked=st.booleans())
def test_large_spilled_records_write_the_run_the_python_writer_does(
        native, tmp_path_factory, batches, shuffle, index_every, checked):
    """A `RunBuffer` of large framed records (and small ones) written to a
    local file by the kernel (its records written where they lie) is the
    Python writer's run, and so are the CRC32C and size kept."""
    directory = tmp_path_factory.mktemp("large")
    options = dict(splits=2, shuffle=shuffle, index_every=index_every, checked=checked)
    assert (_spilled(native, directory, "native", batches, **options)
            == _spilled(None, directory, "python", batches, **options))


def test_what_is_not_written_to_a_descriptor(native, tmp_path):
    """In-memory and spooled files take the kernel's calls to `write` (a
    spooled file would be rolled over to disk by `fileno`); a closed
    descriptor is an OSError and a negative one a ValueError, and a run
    the kernel refuses leaves the file as it was."""
    assert run_kernel._descriptor(io.BytesIO()) is None
    with tempfile.SpooledTemporaryFile(max_size=100) as spooled:
        assert run_kernel._descriptor(spooled) is None
        assert not spooled._rolled
    with open(tmp_path / "read", "wb"):
        pass
    with open(tmp_path / "read", "rb") as reading:
        assert run_kernel._descriptor(reading) is None
    rows = [b"a", b"bb"]
    order = np.array([1, 0], "<i8").view(np.uint8)
    descriptor = os.open(tmp_path / "closed", os.O_WRONLY | os.O_CREAT)
    os.close(descriptor)
    with pytest.raises(OSError):
        native.write_run(None, rows, order, None, 0, 4, 64, 100, fd=descriptor)
    with pytest.raises(ValueError, match="descriptor"):
        native.write_run(None, rows, order, None, 0, 4, 64, 100, fd=-1)
    with open(tmp_path / "refused", "wb") as fileobj:
        checked = CheckedFile(fileobj)
        assert run_kernel.write_ordered(checked, None, [b"a", "b"], [1, 0], key_width=0,
                                        prefix_len=4, index_every=64, block=100) is None
        assert (checked.size, checked.crc) == (0, 0)
    assert (tmp_path / "refused").read_bytes() == b""


def test_the_crc_is_kept_only_when_asked(native, tmp_path):
    """A run written for a spill (no `CheckedFile`) has no CRC32C computed
    (None), through a descriptor or a file's `write`; asked, it is the
    crc32c package's of the bytes written, continued from the one given."""
    rows = [b"a", b"bb", b"ccc"]
    order = np.array([2, 0, 1], "<i8").view(np.uint8)
    memory = io.BytesIO()
    assert native.write_run(memory, rows, order, None, 0, 4, 64, 5)[2] is None
    run = memory.getvalue()
    assert native.write_run(io.BytesIO(), rows, order, None, 0, 4, 64, 5,
                            crc=7)[2] == crc32c.crc32c(run, 7)
    for crc, expected in ((None, None), (7, crc32c.crc32c(run, 7))):
        with open(tmp_path / "run", "wb") as fileobj:
            written = native.write_run(None, rows, order, None, 0, 4, 64, 5,
                                       fd=fileobj.fileno(), crc=crc)
        assert written == (3, len(run), expected)
        assert (tmp_path / "run").read_bytes() == run


def test_all_rows_are_ordered_without_a_list_of_them(native):
    """`fixed_key_order` with rows None orders every row, as the rows
    0..n given one by one."""
    generator = np.random.default_rng(5)
    rows = [bytes([b % 3]) for b in generator.integers(0, 256, 300).tolist()]
    blob = generator.integers(0, 2, 300 * 3, dtype=np.uint8).tobytes()  # many ties
    every = np.arange(300, dtype="<i8").view(np.uint8)
    assert native.fixed_key_order(blob, 3, rows, None) == native.fixed_key_order(
        blob, 3, rows, every)


class _Bytes(bytes):
    """A bytes subclass: not a key `prepare` takes (keys are bytes exactly)."""


@settings(max_examples=300, deadline=None)
@given(keys=st.lists(st.one_of(st.none(), st.binary(max_size=4), st.integers(),
                               st.binary(max_size=3).map(_Bytes), st.text(max_size=2)),
                     max_size=30))
def test_key_nones_counts_and_checks_as_python_does(native, keys):
    """Keys None, bytes, and neither (a bytes subclass too): the kernel's
    count of Nones where every other key is bytes, else None; and
    `prepare._key_nones` gives the same count or the same error naming
    the row with and without the kernel."""
    valid = all(key is None or type(key) is bytes for key in keys)
    assert native.key_nones(keys) == (keys.count(None) if valid else None)

    def counted(kernels):
        with pytest.MonkeyPatch.context() as patch:
            _patched(patch, kernels)
            try:
                return prepare._key_nones(keys)
            except TypeError as error:
                return str(error)

    assert counted(native) == counted(None)


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.tuples(st.binary(max_size=10).map(lambda key: bytes(b % 2 for b in key)),
                               st.binary(max_size=4).map(lambda data: bytes(b % 3 for b in data))),
                     max_size=60),
       data=st.data(), keyed=st.booleans())
def test_sorted_rows_of_some_rows_sort_as_python_sorts_them(native, rows, data, keyed):
    """Some rows of the lists (a split's), keys sharing their first 8 bytes
    or prefixes of one another: their positions in Python's order of the
    same values (rows equal in both interchangeable); a row outside the
    lists is an IndexError."""
    keys = [key for key, _ in rows] if keyed else None
    examples = [example for _, example in rows]
    selected = data.draw(st.lists(st.integers(0, len(rows) - 1), unique=True) if rows
                         else st.just([]))
    order = run_kernel.sorted_rows(keys, examples, np.asarray(selected, dtype=np.int64)).tolist()
    value = (lambda row: rows[row]) if keyed else examples.__getitem__
    assert sorted(order) == sorted(selected)
    assert [value(row) for row in order] == sorted(map(value, selected))
    with pytest.raises(IndexError):
        native.sorted_rows(keys, examples, np.array([len(rows)], "<i8").view(np.uint8))
