"""The kernel's hash of text for theta sketches (`text_theta_hashes`) is DataSketches' own, and filtering text by it changes no sketch."""

from __future__ import annotations

import datasketches
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from recordforge.schemas.stats import FeatureStatistics, distinct

# Text that has a UTF-8 form (no lone surrogates), of every length class
# of the hash: empty, under 8 bytes, 8-16, whole 16-byte blocks and tails.
texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)


@settings(max_examples=200, deadline=None)
@given(st.lists(texts, max_size=200))
def test_text_hashes_are_the_ones_datasketches_keeps(native, values):
    """Below its capacity a sketch keeps every hash: the kernel's, for the
    same texts, are those (DataSketches skips the empty text)."""
    sketch = datasketches.update_theta_sketch(distinct.THETA_LG_K)
    for value in values:
        sketch.update(value)
    hashes = np.frombuffer(native.text_theta_hashes(values), dtype="<u8").tolist()
    assert len(hashes) == len(values)
    assert sorted(int(h) for h in sketch.compact()) == sorted(
        {h for h, value in zip(hashes, values) if value})


def test_what_the_kernel_does_not_hash(native):
    assert native.text_theta_hashes([]) == b""
    assert native.text_theta_hashes(["a", b"a"]) is None  # bytes: not text
    assert native.text_theta_hashes(["a", 1]) is None
    assert native.text_theta_hashes(["\ud800"]) is None  # no UTF-8 form


def _string_theta(batches: list[list[str]]) -> bytes:
    stats = FeatureStatistics("string", "string")
    for values in batches:
        stats.add_values(len(values), values)
    return distinct.compact_theta(stats.theta).serialize()


@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_a_filtered_text_sketch_equals_one_given_every_text(native, data):
    """Past its first thousands of distinct texts a sketch is given only
    those whose hash is below its theta; it ends the same as one given
    every text in the same order, whatever the batches hold."""
    size = data.draw(st.sampled_from([10, 5000, 30_000]), label="size")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    drawn = data.draw(st.lists(texts, max_size=50), label="texts")
    values = drawn + [f"t{n:x}é" * int(n % 5) for n in rng.integers(0, 2**40, size)] \
        + [str(n) for n in rng.integers(0, 50, size // 2)]
    rng.shuffle(values)
    cut = data.draw(st.integers(0, len(values)), label="cut")
    batches = [values[:cut], values[cut:]]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(distinct, "kernels", lambda: native)
        filtered = _string_theta(batches)
        patch.setattr(distinct, "kernels", lambda: None)
        every_text = _string_theta(batches)
    assert filtered == every_text


def test_the_filter_is_used(native, monkeypatch):
    """The comparison above means something: past its exact mode, a
    sketch's theta turns most texts away before they reach it."""
    monkeypatch.setattr(distinct, "kernels", lambda: native)
    sketch = distinct.add_texts(None, [f"x{n}" for n in range(20_000)])
    assert sketch.theta < 1.0
    offered = [f"y{n}" for n in range(10_000)]
    hashes = np.frombuffer(native.text_theta_hashes(offered), dtype="<u8")
    assert (hashes >= np.uint64(sketch.theta64)).sum() > len(offered) // 2
