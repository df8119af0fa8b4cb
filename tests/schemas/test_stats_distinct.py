"""Theta sketches (schemas/stats/distinct.py): the array-wide hash is DataSketches' own, and filtering by it changes nothing."""

from __future__ import annotations

import datasketches
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from recordforge.schemas.stats import FeatureStatistics, distinct


@pytest.mark.parametrize("values", [
    np.array([0, 1, -1, 2**53 + 1, 2**62, -2**63, 2**63 - 1], dtype=np.int64),
    np.array([0.0, 1.5, -2.25, 1e300, -1e-300, 5e-324, np.finfo(np.float64).max]),
])
def test_theta_hashes_are_the_ones_datasketches_keeps(values):
    sketch = datasketches.update_theta_sketch(distinct.THETA_LG_K)
    for value in values.tolist():
        sketch.update(value)
    assert sorted(int(h) for h in sketch.compact()) == sorted(
        distinct.theta_hashes(values).tolist())


_INTS = st.one_of(st.integers(-2**63, 2**63 - 1), st.integers(-50, 50))


_FLOATS = st.floats(allow_nan=False, allow_infinity=False, width=32).map(lambda x: x + 0.0)


def _numeric_theta(stored: str, batches: list[list]) -> bytes:
    stats = FeatureStatistics("numeric", stored)
    for values in batches:
        stats.add_values(len(values), values)
    return stats.theta.compact().serialize()


def _datasketches_theta(stored: str, values: list, lg_k: int = distinct.THETA_LG_K) -> bytes:
    """The reference: DataSketches' update sketch given each value (as the
    statistics describe it: ints as int64, floats as doubles of float32
    values), in canonical form."""
    sketch = datasketches.update_theta_sketch(lg_k)
    for value in values:
        sketch.update(int(value) if stored == "int64" else float(np.float32(value)) + 0.0)
    union = datasketches.theta_union(lg_k)
    union.update(sketch)
    return union.get_result().serialize()


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(["int64", "float"]), st.data())
def test_a_hashed_theta_sketch_equals_one_given_every_value(stored, data):
    """The statistics keep a numeric sketch as the hashes it keeps,
    screened per batch (`HashedTheta`); it must end as DataSketches' own
    sketch given every value, whatever the batches hold, below and past
    the nominal size and the rebuilds."""
    size = data.draw(st.sampled_from([10, 5000, 30_000]), label="size")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    if stored == "int64":
        drawn = data.draw(st.lists(_INTS, max_size=50), label="ints")
        values = drawn + rng.integers(-2**63, 2**63 - 1, size, dtype=np.int64).tolist() \
            + rng.integers(-100, 100, size // 2).tolist()
        if data.draw(st.booleans(), label="small ints only"):
            values = [value % 2**40 for value in values]
    else:
        drawn = data.draw(st.lists(_FLOATS, max_size=50), label="floats")
        values = drawn + rng.standard_normal(size).astype(np.float32).tolist() \
            + np.round(rng.uniform(-5, 5, size // 2), 1).tolist()
    rng.shuffle(values)
    cut = data.draw(st.integers(0, len(values)), label="cut")
    batches = [values[:cut], values[cut:]]
    assert _numeric_theta(stored, batches) == _datasketches_theta(stored, values)


@settings(max_examples=200, deadline=None)
@given(batches=st.lists(st.lists(_INTS, max_size=80), min_size=1, max_size=6),
       lg_k=st.integers(5, 7))
def test_hashed_theta_at_small_sizes_is_datasketches_sketch(batches, lg_k):
    """Small nominal sizes put a few hundred values through every state:
    empty, one entry, exact, cut to the nominal size and screened after."""
    held = distinct.HashedTheta(lg_k)
    for batch in batches:
        held.add(distinct.theta_hashes(np.array(batch, dtype=np.int64)))
    every = [value for batch in batches for value in batch]
    assert held.compact().serialize() == _datasketches_theta("int64", every, lg_k)


@settings(max_examples=200, deadline=None)
@given(batches=st.lists(st.lists(_INTS, max_size=80), min_size=1, max_size=6),
       lg_k=st.integers(5, 7), ordered=st.lists(st.booleans(), min_size=6, max_size=6))
def test_ascending_hashes_cut_to_theta_most_end_as_every_hash(batches, lg_k, ordered):
    """Batches given as the kernel gives them (ascending, distinct, the
    `theta_most` smallest, merged without a full sort) among batches given
    whole and unordered: the sketch of every value all the same."""
    held = distinct.HashedTheta(lg_k)
    for batch, ascending in zip(batches, ordered):
        hashes = distinct.theta_hashes(np.array(batch, dtype=np.int64))
        if ascending:
            hashes = np.unique(hashes[hashes < np.uint64(distinct.theta_bound(held))])
            hashes = hashes[:distinct.theta_most(held)]
        held.add(hashes, ascending)
    every = [value for batch in batches for value in batch]
    assert held.compact().serialize() == _datasketches_theta("int64", every, lg_k)


def test_a_hashed_theta_unites_with_compact_sketches():
    """Merging, pickling and reading back take the compact form; a sketch
    read back and given more values unites the two (`add_numbers`)."""
    first = distinct.add_numbers(None, np.arange(3000, dtype=np.int64))
    again = distinct.add_numbers(distinct.compact_theta(first),
                                 np.arange(2000, 9000, dtype=np.int64))
    assert isinstance(again, datasketches.compact_theta_sketch)
    assert again.serialize() == _datasketches_theta("int64", range(9000))
    assert distinct.theta_union(first, first).serialize() == \
        _datasketches_theta("int64", range(3000))


def _sketch_of(hashes: np.ndarray, form: str):
    """A sketch of values with these `theta_hashes`: as a `HashedTheta`,
    or compact (canonical), as merges meet them."""
    held = distinct.HashedTheta()
    held.add(hashes)
    return held if form == "hashed" else held.compact()


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_united_sketches_are_datasketches_union(data):
    """A merge unites its partials' sketches into one `HashedTheta`
    (`united`): it must end as the DataSketches union of them, folded
    pairwise, byte for byte: empty, single, exact and estimating sketches
    with different thetas, sharing hashes, in any order."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    span = data.draw(st.sampled_from([2**63 - 1, 10**6, 50_000]), label="hash span")
    sketches = []
    for _ in range(data.draw(st.integers(1, 7), label="sketches")):
        size = data.draw(st.sampled_from([0, 1, 3, 2000, 4096, 4097, 9000, 30_000]), label="size")
        hashes = rng.integers(1, span, size, dtype=np.uint64)
        sketches.append(_sketch_of(hashes, data.draw(st.sampled_from(["hashed", "compact"]))))
    expected = distinct.compact_theta(sketches[0])
    for sketch in sketches[1:]:
        expected = distinct.theta_union(expected, sketch)
    held = sketches[0]
    for sketch in sketches[1:]:
        held = distinct.united(held, sketch)
    assert distinct.compact_theta(held).serialize() == expected.serialize()


def test_united_takes_update_sketches_and_owns_what_it_adds_to():
    """The Python text path's update sketch unites as its compact form; a
    compact sketch given first is never changed, a `HashedTheta` is added to."""
    texts = datasketches.update_theta_sketch(distinct.THETA_LG_K)
    for value in range(5000):
        texts.update(f"t{value}")
    numbers = distinct.add_numbers(None, np.arange(3000, dtype=np.int64)).compact()
    before = numbers.serialize()
    held = distinct.united(numbers, texts)
    assert isinstance(held, distinct.HashedTheta)
    assert numbers.serialize() == before
    assert distinct.united(held, numbers) is held
    assert held.compact().serialize() == distinct.theta_union(numbers, texts).serialize()
