"""`TextColumn` (one UTF-8 buffer and its offsets) reads as the list of str it stands for."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from recordforge.schemas.text_column import TextColumn

# The empty text, 1-4 byte characters (astral too), lone ASCII, and any text.
TEXTS = st.lists(st.one_of(st.sampled_from(["", "a", "é", "€", "😀", "a😀b", "plain ascii"]),
                           st.text(max_size=12)), max_size=40)


@settings(max_examples=300, deadline=None)
@given(texts=TEXTS, data=st.data())
def test_a_column_reads_as_its_list(texts, data):
    column = TextColumn.of(texts)
    assert len(column) == len(texts)
    assert list(column) == texts and column == texts
    assert [column[at] for at in range(-len(texts), len(texts))] == texts + texts
    rows = data.draw(st.lists(st.integers(0, max(len(texts) - 1, 0)),
                              max_size=30 if texts else 0))
    assert list(column.take(rows)) == [texts[at] for at in rows]
    assert list(column[np.array(rows, dtype=np.int64)]) == [texts[at] for at in rows]
    mask = np.array(data.draw(st.lists(st.booleans(), min_size=len(texts), max_size=len(texts))),
                    dtype=bool)
    assert column[mask] == [text for text, keep in zip(texts, mask) if keep]
    assert column[1::2] == texts[1::2]
    again = pickle.loads(pickle.dumps(column))
    assert (again.data, again.offsets) == (column.data, column.offsets) and again == texts
    assert all(text in column for text in texts)


def test_the_empty_column_and_bounds():
    empty = TextColumn.of([])
    assert len(empty) == 0 and list(empty) == [] and empty == [] and empty.take([]) == []
    column = TextColumn.of(["a", "é"])
    for at in (2, -3):
        with pytest.raises(IndexError):
            column[at]
    with pytest.raises(IndexError):
        column.take([0, 2])
    with pytest.raises(ValueError):
        TextColumn(b"", b"")
    assert column != ["a"] and column != ("a", "é") and column == TextColumn.of(["a", "é"])


def test_offsets_may_be_an_array():
    ends = np.array([0, 1, 3], dtype="<i8")
    column = TextColumn(b"a\xc3\xa9", ends)
    assert column == ["a", "é"] and column.offsets == ends.tobytes()
