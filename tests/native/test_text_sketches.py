"""The native theta sketch of a batch's texts against DataSketches' own, byte for byte."""

from __future__ import annotations

import json
import random

import datasketches
import pytest
from hypothesis import given, settings, strategies as st

from recordforge.schemas.stats import FeatureStatistics, distinct, text

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


def _string_statistics(batches, native):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(distinct, "kernels", lambda: native)
        patch.setattr(text, "kernels", lambda: native)
        stats = [FeatureStatistics.from_values("string", "bytes", len(batch), batch)
                 for batch in batches]
        merged = stats[0]
        for other in stats[1:]:
            merged.merge(other)
        return json.dumps(merged.to_state(), sort_keys=True), json.dumps(merged.to_json(),
                                                                         sort_keys=True)


@settings(max_examples=60, deadline=None)
@given(batches=st.lists(st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=400),
                        min_size=1, max_size=3))
def test_string_statistics_are_the_same_on_both_paths(native, batches):
    assert _string_statistics(batches, native) == _string_statistics(batches, None)


def test_many_texts_and_long_ones_give_the_same_statistics(native):
    rng = random.Random(11)
    batches = [[f"text {rng.randrange(30_000)}" for _ in range(10_000)] for _ in range(2)]
    batches.append(["x" * 5000, "y" * 1025, "z"] * 3)  # bounded keys, hashed as such
    assert _string_statistics(batches, native) == _string_statistics(batches, None)
