"""The merge of sorted run slices (`run_merge`) against the sort it replaces, position for position."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from recordforge.transforms.framed_keys import FramedKeys
from recordforge.transforms.tfrecord import frame_records
from recordforge.transforms.writer import run_merge, sorting
from recordforge.transforms.writer.run_format import KEY_VARIABLE, RunSlice

# Small alphabets: keys and examples that tie, whole or in part, NUL bytes too.
_bytes = st.binary(max_size=10).map(lambda data: bytes(b % 3 for b in data))
# Keys that share their first 8 bytes (the kernel's integer head) now and then.
_keys = st.tuples(st.sampled_from([b"", b"", b"\0\1\2\0\1\2\0", b"\0\1\2\0\1\2\0\1"]),
                  _bytes).map(b"".join)


def _slice(rows: list[tuple[bytes, bytes]], fixed: int = 0, column: bool = False) -> RunSlice:
    """A run slice of (key, example) rows: keys of `fixed` bytes in a numpy
    array (0: a list of bytes, or with `column` a `FramedKeys`, as a run
    file's reader gives them), framed records back to back."""
    records = [frame_records([example]) for _, example in rows]
    keys = [key for key, _ in rows]
    if fixed:
        keys = np.array(keys, dtype=f"S{fixed}")
    elif column:
        keys = FramedKeys.of(keys)
    return RunSlice(keys, memoryview(b"".join(records)),
                    np.array([len(record) for record in records], dtype=np.int64))


def _reference(slices) -> list[int]:
    """The sort the merge replaces (`row_order`, through `_Ordered`)."""
    if not slices:
        return []
    return np.asarray(sorting._Ordered(slices, KEY_VARIABLE)._sort(KEY_VARIABLE)).tolist()


@settings(max_examples=300, deadline=None)
@given(drawn=st.lists(st.lists(st.tuples(_keys, _bytes), max_size=12), max_size=6),
       in_order=st.booleans(), columns=st.lists(st.booleans(), min_size=6, max_size=6))
def test_the_merge_gives_the_positions_the_sort_gives(native, drawn, in_order, columns):
    """Slices in order merge to the sort's very positions (ties in slice,
    then row order), their keys listed or in key columns alike; a slice out
    of order gives None, and `_Ordered` sorts instead."""
    _check_merge(native, drawn, in_order, columns)


@settings(max_examples=200, deadline=None)
@given(drawn=st.lists(st.lists(st.tuples(st.binary(max_size=12), _bytes), max_size=12),
                      max_size=6),
       in_order=st.booleans(), columns=st.lists(st.booleans(), min_size=6, max_size=6))
def test_keys_of_any_bytes_merge_as_the_sort(native, drawn, in_order, columns):
    """Keys of any bytes mostly differ in their first 8: the kernel orders
    those by their heads alone, with the same positions as the sort."""
    _check_merge(native, drawn, in_order, columns)


def _check_merge(native, drawn, in_order, columns):
    if in_order:
        drawn = [sorted(rows) for rows in drawn]
    slices = [_slice(rows, column=column) for rows, column in zip(drawn, columns)]
    expected = _reference(slices)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(run_merge, "kernels", lambda: native)
        merged = run_merge.merged_positions(slices)
        ordered = sorting._Ordered(slices, KEY_VARIABLE, sorted_slices=len(slices) > 1)
    if all(rows == sorted(rows) for rows in drawn):
        assert merged is not None and merged.tolist() == expected
    else:
        assert merged is None
    assert (ordered.order is None and not slices) or ordered.order.tolist() == expected


@pytest.mark.parametrize("column", [False, True])
@pytest.mark.parametrize("drawn", [
    [[(b"k", b"e"), (b"k", b"e")], [(b"a", b"z"), (b"k", b"e")]],  # ties: slice, then row order
    [[], [(b"a", b"1"), (b"a", b"2")], []],  # empty slices around one
    [[(b"b", b"")], [], [(b"a", b"")]],
    [[(b"abcdefgh\0", b""), (b"abcdefgh\0\0", b"")],  # the first 8 bytes tie; prefixes first
     [(b"abcdefgh", b"z"), (b"abcdefgh\0", b"")], [(b"abc", b"")]],
])
def test_ties_empty_slices_and_prefixes_merge_as_the_sort(native, monkeypatch, drawn, column):
    monkeypatch.setattr(run_merge, "kernels", lambda: native)
    slices = [_slice(rows, column=column) for rows in drawn]
    assert run_merge.merged_positions(slices).tolist() == _reference(slices)


def test_one_slice_merges_as_it_is(native, monkeypatch):
    monkeypatch.setattr(run_merge, "kernels", lambda: native)
    one = _slice([(b"a", b"1"), (b"a", b"2"), (b"b", b"")], column=True)
    assert run_merge.merged_positions([one]).tolist() == [0, 1, 2]


def test_mixed_key_kinds_merge_as_the_bytes_python_compares(native, monkeypatch):
    """A fixed-width slice among variable ones (no shuffle): numpy gives its
    keys without their trailing NULs, and both paths compare those."""
    monkeypatch.setattr(run_merge, "kernels", lambda: native)
    slices = [_slice([(b"a", b"2"), (b"b\0", b"1")], fixed=2), _slice([(b"a\0", b"1"), (b"b", b"0")])]
    assert run_merge.merged_positions(slices).tolist() == _reference(slices) == [0, 2, 3, 1]


def test_buffers_that_disagree_are_refused(native, monkeypatch):
    monkeypatch.setattr(run_merge, "kernels", lambda: native)
    good = _slice([(b"k", b"e")])
    with pytest.raises(ValueError):
        run_merge.merged_positions([good._replace(sizes=good.sizes + 1)])
    with pytest.raises(ValueError):
        run_merge.merged_positions([good._replace(sizes=np.array([3], dtype=np.int64),
                                                  data=memoryview(b"abc"))])


def test_a_key_column_that_does_not_fit_its_records_is_refused(native, monkeypatch):
    monkeypatch.setattr(run_merge, "kernels", lambda: native)
    good = _slice([(b"k", b"e"), (b"l", b"f")], column=True)
    with pytest.raises(ValueError):
        run_merge.merged_positions([good._replace(keys=FramedKeys.of([b"k"]))])
    with pytest.raises(ValueError):  # offsets past the buffer
        native.merged_order([((b"kl", np.array([0, 1, 3], dtype="<i8").view(np.uint8)),
                              good.data, good.sizes.view(np.uint8))])


def test_without_the_kernel_the_caller_sorts(monkeypatch):
    monkeypatch.setattr(run_merge, "kernels", lambda: None)
    assert run_merge.merged_positions([_slice([(b"k", b"e")])]) is None


def test_keys_not_bytes_are_left_to_the_sort(native, monkeypatch):
    monkeypatch.setattr(run_merge, "kernels", lambda: native)
    rows = _slice([(b"k", b"e")])
    assert run_merge.merged_positions([rows, rows._replace(keys=["k"])]) is None
