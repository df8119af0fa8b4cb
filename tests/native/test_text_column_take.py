"""The native take of a text column's rows (`text_column_take`) against `TextColumn.python_take`."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from recordforge.schemas.text_column import TextColumn

TEXTS = st.lists(st.one_of(st.sampled_from(["", "a", "é", "€", "😀", "a😀b"]),
                           st.text(max_size=12)), max_size=40)


def _rows(rows) -> np.ndarray:
    return np.asarray(rows, dtype="<i8").view(np.uint8)


@settings(max_examples=300, deadline=None)
@given(texts=TEXTS, data=st.data())
def test_the_kernel_takes_the_reference_rows(native, texts, data):
    column = TextColumn.of(texts)
    rows = data.draw(st.lists(st.integers(0, max(len(texts) - 1, 0)),
                              max_size=60 if texts else 0))
    expected = column.python_take(rows)
    assert native.text_column_take(column.data, column.offsets, _rows(rows)) == (
        expected.data, expected.offsets)
    taken = column.take(np.array(rows, dtype=np.int64) - len(texts))  # (from the end)
    assert (taken.data, taken.offsets) == (expected.data, expected.offsets)


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=20), bounds=st.lists(st.integers(-3, 25), max_size=8),
       rows=st.lists(st.integers(-2, 9), max_size=12))
def test_bounds_and_rows_out_of_range_are_declined(native, data, bounds, rows):
    """Offsets that fall or run past the data, and rows past the column,
    give None (the reference then raises or picks as numpy does), never a
    read out of bounds; what it does take is the reference's bytes."""
    offsets = np.array(bounds, dtype="<i8").tobytes()
    taken = native.text_column_take(data, offsets, _rows(rows))
    picks = [(bounds[row], bounds[row + 1]) for row in rows if 0 <= row < len(bounds) - 1]
    fits = bool(bounds) and len(picks) == len(rows) and all(0 <= start <= end <= len(data) for start, end in picks)
    assert (taken is not None) == fits
    if fits:
        assert taken[0] == b"".join(data[start:end] for start, end in picks)
        expected = TextColumn(data, offsets).python_take(rows)
        assert taken == (expected.data, expected.offsets)


def test_buffers_not_a_whole_number_of_words_are_refused(native):
    with pytest.raises(ValueError):
        native.text_column_take(b"ab", b"\0" * 12, _rows([0]))
    with pytest.raises(ValueError):
        native.text_column_take(b"ab", np.array([0, 2], dtype="<i8").tobytes(), b"\0" * 4)
