"""The native theta sketch of a batch's texts against DataSketches' own, byte for byte."""

from __future__ import annotations

import random

import datasketches
import pytest
from hypothesis import given, settings, strategies as st

# Every UTF-8 length class (1-4 byte characters), every MurmurHash3 tail
# length (texts up to 40 bytes), the empty text DataSketches skips, repeats.
TEXTS = st.lists(st.one_of(st.text(max_size=40), st.sampled_from(["", "a", "é", "€", "😀"])),
                 max_size=300)


def _datasketches(texts, lg_k):
    """The reference: an update sketch given each text, in canonical form
    (`distinct.compact_theta`, with lg_k nominal entries), serialized."""
    sketch = datasketches.update_theta_sketch(lg_k)
    for text in texts:
        sketch.update(text)
    union = datasketches.theta_union(lg_k)
    union.update(sketch)
    return union.get_result().serialize()


@settings(max_examples=300, deadline=None)
@given(texts=TEXTS, lg_k=st.integers(5, 12))
def test_text_sketches_are_datasketches_bytes(native, texts, lg_k):
    """Small lg_k puts a few hundred texts in estimation mode, where the
    sketch keeps the smallest hashes and theta is the next one."""
    assert native.text_theta(texts, lg_k) == _datasketches(texts, lg_k)


@pytest.mark.parametrize("count", [4095, 4096, 4097, 7680, 7681, 20_000])
def test_around_the_nominal_size_and_the_rebuild(native, count):
    """DataSketches rebuilds its update table past 15/16 of 2 * 4096
    entries; the canonical form is the same on both sides of it."""
    rng = random.Random(count)
    texts = [f"{rng.random()}-{index % (count - 7)}" for index in range(count)]
    assert native.text_theta(texts, 12) == _datasketches(texts, 12)


def test_what_is_not_utf8_text_is_declined(native):
    assert native.text_theta(["a", b"b"], 12) is None
    assert native.text_theta(["a", "\ud800"], 12) is None
    with pytest.raises(ValueError, match="lg_k"):
        native.text_theta(["a"], 4)
