"""The (key, example) order of rows (`writer.row_order`)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from recordforge.transforms.writer import row_order


def test_sorted_order_breaks_ties_by_example():
    keys = [b"b", b"a", b"b", b"a", b"c", b"b"]
    examples = [b"3", b"9", b"1", b"2", b"0", b"2"]
    fixed = np.frombuffer(b"".join(keys), dtype="S1")
    expected = sorted(range(6), key=lambda row: (keys[row], examples[row]))
    assert row_order.sorted_order(fixed, examples.__getitem__) == expected
    assert row_order.sorted_order(keys, examples.__getitem__) == expected
    assert row_order.sorted_positions(fixed, examples.__getitem__).tolist() == expected


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.tuples(st.binary(min_size=2, max_size=2).filter(lambda k: k[-1:] != b"\0"),
                               st.binary(max_size=3)), max_size=200))
def test_sorted_positions_order_by_key_then_example(rows):
    keys = np.array([key for key, _ in rows], dtype="S2")
    examples = [example for _, example in rows]
    expected = sorted(range(len(rows)), key=lambda row: (rows[row][0], examples[row]))
    positions = row_order.sorted_positions(keys, examples.__getitem__)
    assert positions.dtype == np.int64
    assert [rows[row] for row in positions.tolist()] == [rows[row] for row in expected]

@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.tuples(st.sampled_from([b"\0" * 8, b"\x7f" * 7 + b"\xff"])
                               | st.binary(min_size=8, max_size=8),
                               st.binary(min_size=8, max_size=8), st.binary(max_size=3)),
                     max_size=120))
def test_sorted_positions_of_digest_wide_keys(rows):
    """Keys of 16 bytes whose first 8 bytes may repeat (then the order
    falls back to whole keys and examples) or not (then it is taken from
    those 8 bytes alone): either way, byte order of the keys, then the
    examples."""
    raw = [head + tail for head, tail, _ in rows]
    keys = np.frombuffer(b"".join(raw), dtype="S16") if rows else np.array([], dtype="S16")
    examples = [example for _, _, example in rows]
    expected = sorted(range(len(rows)), key=lambda row: (raw[row], examples[row]))
    positions = row_order.sorted_positions(keys, examples.__getitem__)
    assert positions.dtype == np.int64
    assert [(raw[row], examples[row]) for row in positions.tolist()] == [
        (raw[row], examples[row]) for row in expected]
