"""The native text partial (frequent values and theta sketch in one call) against the Python reference."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from recordforge.schemas.stats import FeatureStatistics, distinct, frequent, text
from recordforge.schemas.stats.frequent import MAX_VALUE_BYTES
from recordforge.schemas.text_column import TextColumn

# Every value class the statistics meet: the empty text, 1-4 byte
# characters, every MurmurHash3 tail length, values at and over the bound
# of `bounded_text` (the kernel declines those), and repeats from a small
# pool so that counts tie.
POOL = st.sampled_from(["", "a", "b", "é", "€", "😀", "a" * 16, "x" * MAX_VALUE_BYTES,
                        "é" * (MAX_VALUE_BYTES // 2)])
VALUES = st.lists(st.one_of(POOL, st.text(max_size=40), st.text(max_size=3, alphabet="ab")),
                  min_size=1, max_size=300)


def _pure(values, capacity=frequent.FREQUENT_CAPACITY):
    """The reference with no kernel at all (DataSketches updates for theta)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(distinct, "kernels", lambda: None)
        patch.setattr(frequent, "FREQUENT_CAPACITY", capacity)
        found, theta = text.python_text_parts(values)
        return found, distinct.compact_theta(theta).serialize()


def _native(native, values, capacity=frequent.FREQUENT_CAPACITY):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(text, "kernels", lambda: native)
        patch.setattr(text, "FREQUENT_CAPACITY", capacity)
        parts = text.native_text_parts(values)
        if parts is None:
            return None
        found, theta = parts
        assert isinstance(theta, distinct.SerializedTheta)  # (the kernel's bytes, as they are)
        return found, theta.data


@settings(max_examples=300, deadline=None)
@given(values=VALUES, capacity=st.integers(0, 12), as_bytes=st.booleans())
def test_the_kernel_gives_the_reference_parts(native, values, capacity, as_bytes):
    """Small capacities put a few hundred values through every purge
    (all kept, all distinct, a threshold of 1, a threshold among ties)."""
    if as_bytes:
        values = [value.encode("utf-8") for value in values]
    found = _native(native, values, capacity)
    if max(len(value.encode("utf-8") if isinstance(value, str) else value)
           for value in values) > MAX_VALUE_BYTES:
        assert found is None  # a bounded key needs sha256: Python makes it
    else:
        assert found == _pure(values, capacity)


@pytest.mark.parametrize("count, distinct_values", [(10_000, 30_000), (10_000, 900),
                                                    (10_000, 1025), (5000, 5000), (3000, 1)])
def test_batches_of_the_build_size(native, count, distinct_values):
    """Batches as a build makes them, around the real capacity and the
    theta sketch's nominal size."""
    rng = random.Random(count + distinct_values)
    values = [f"text {rng.randrange(distinct_values)}" for _ in range(count)]
    assert _native(native, values) == _pure(values)


def test_what_the_kernel_declines(native):
    """Mixed types, no UTF-8 form, bytes that are not UTF-8, a value over
    the bound, not a list: Python's answer, reached through `text_parts`."""
    for values in (["a", b"a"], [b"a", "a"], ["a", "\ud800"], [b"\xff"],
                   ["a", "b" * (MAX_VALUE_BYTES + 1)], ("a", "b")):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(text, "kernels", lambda: native)
            assert text.native_text_parts(values) is None
    with pytest.raises(ValueError, match="lg_k"):
        native.text_partial(["a"], 8, 8, 4)


@settings(max_examples=300, deadline=None)
@given(values=VALUES, capacity=st.integers(0, 12))
def test_a_text_column_gives_the_parts_of_its_list(native, values, capacity):
    """The table kernels' form of a column (one buffer, offsets) taken
    whole: what the list of its str gives, and the reference's parts."""
    column = TextColumn.of(values)
    found = _native(native, column, capacity)
    assert found == _native(native, values, capacity)
    if found is not None:
        assert found == _pure(values, capacity) == _pure(column, capacity)


def test_what_the_kernel_declines_of_a_text_column(native):
    """Offsets that are not int64, fall, start below 0 or run past the
    data; a value that is not UTF-8 or is over the bound: None (Python's)."""
    def ends(*at):
        return np.array(at, dtype="<i8").tobytes()
    for data, offsets in ((b"ab", b"\0" * 7), (b"ab", b""), (b"ab", ends(0, 3)),
                          (b"ab", ends(0, 2, 1)), (b"ab", ends(-1, 1)), (b"\xff", ends(0, 1)),
                          (b"\xc3\xa9", ends(0, 1, 2))):
        assert native.text_column_partial(data, offsets, 8, MAX_VALUE_BYTES, 12) is None
    assert native.text_column_partial(b"ab", ends(0, 1, 2), 8, 1, 12) is not None
    assert native.text_column_partial(b"ab", ends(0, 2), 8, 1, 12) is None
    with pytest.raises(ValueError, match="lg_k"):
        native.text_column_partial(b"a", ends(0, 1), 8, 8, 27)


def test_a_kernel_failure_costs_speed_not_the_statistics(caplog):
    class Broken:
        def text_partial(self, *args):
            raise RuntimeError("recordforge native kernel failed: a bug")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(text, "kernels", lambda: Broken())
        found, theta = text.text_parts(["a", "b", "a"])
    assert found == frequent.FrequentValues({"a": 2, "b": 1})
    assert "native text statistics failed" in caplog.text


def _string_statistics(batches, native):
    """stats.json's entry and the state of a split's string statistics
    merged from per-batch partials, with or without the kernels."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(distinct, "kernels", lambda: native)
        patch.setattr(text, "kernels", lambda: native)
        stats = [FeatureStatistics.from_values("string", "bytes", len(batch), batch)
                 for batch in batches]
        merged = stats[0]
        for other in stats[1:]:
            merged.merge(other)
        return (json.dumps(merged.to_state(), sort_keys=True),
                json.dumps(merged.to_json(), sort_keys=True))


@settings(max_examples=60, deadline=None)
@given(batches=st.lists(VALUES, min_size=1, max_size=3))
def test_string_statistics_are_the_same_on_both_paths(native, batches):
    assert _string_statistics(batches, native) == _string_statistics(batches, None)


def test_many_texts_and_long_ones_give_the_same_statistics(native):
    rng = random.Random(11)
    batches = [[f"text {rng.randrange(30_000)}" for _ in range(10_000)] for _ in range(2)]
    batches.append(["x" * 5000, "y" * 1025, "z"] * 3)  # bounded keys, hashed as such
    assert _string_statistics(batches, native) == _string_statistics(batches, None)


@settings(max_examples=60, deadline=None)
@given(batches=st.lists(VALUES, min_size=1, max_size=3))
def test_text_columns_give_the_statistics_of_their_lists(native, batches):
    columns = [TextColumn.of(batch) for batch in batches]
    assert _string_statistics(columns, native) == _string_statistics(batches, None)


def test_many_batches_past_the_capacity_merge_the_same(native):
    rng = random.Random(3)
    batches = [[f"v{int(rng.paretovariate(1.2))}" for _ in range(5000)] for _ in range(4)]
    assert _string_statistics(batches, native) == _string_statistics(batches, None)
