"""Which split a row belongs to (`transforms.splits`)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st
from recordforge.transforms.splits import SplitAssigner, assign_split, validate_splits

SPLITS = [("train", 0.8), ("validation", 0.1), ("test", 0.1)]


def test_split_fractions_follow_the_config():
    counts = {name: 0 for name, _ in SPLITS}
    total = 30_000
    for index in range(total):
        counts[assign_split(f"row-{index}".encode(), "flowers", SPLITS)] += 1
    for name, fraction in SPLITS:
        # Binomial standard deviation at 30k rows is < 0.0024: 0.012 is 5 sigma.
        assert abs(counts[name] / total - fraction) < 0.012, counts


def test_split_is_stable_and_salted_by_dataset_name():
    keys = [f"file-{index}.jpg".encode() for index in range(2000)]
    first = [assign_split(key, "flowers", SPLITS) for key in keys]
    again = [assign_split(key, "flowers", SPLITS) for key in keys]
    other = [assign_split(key, "cars", SPLITS) for key in keys]
    assert first == again
    # Another dataset name reshuffles the assignment: with 80/10/10 two
    # independent draws agree ~66% of the time.
    agreement = sum(a == b for a, b in zip(first, other)) / len(keys)
    assert 0.55 < agreement < 0.77


def test_split_assigner_matches_assign_split_and_handles_long_names():
    name = "x" * 200  # longer than a blake2b key: hashed down, still salting
    assigner = SplitAssigner(name, SPLITS)
    for index in range(200):
        key = index.to_bytes(4, "big")
        assert assigner.split_of(key) == assign_split(key, name, SPLITS)
    assert SplitAssigner("y" * 200, SPLITS).salt != assigner.salt


def test_zero_fraction_split_gets_nothing_and_fractions_are_normalised():
    splits = [("a", 2.0), ("empty", 0.0), ("b", 2.0)]
    seen = {assign_split(f"k{index}".encode(), "d", splits) for index in range(3000)}
    assert seen == {"a", "b"}


@pytest.mark.parametrize("splits, message", [
    ([], "at least one"),
    ([("a", 0.5), ("a", 0.5)], "duplicate"),
    ([("a", -0.1), ("b", 1.0)], "splits.a"),
    ([("a", 0.0)], "add up to 0"),
    ([("", 1.0)], "empty"),
])
def test_invalid_splits_are_rejected(splits, message):
    with pytest.raises(ValueError, match=message):
        validate_splits(splits)




def test_example_rows_are_their_columns_for_the_writer_and_pickle_so():
    import pickle

    from recordforge.transforms.splits import ExampleRows
    from recordforge.transforms.writer.prepare import batch_columns

    keys, examples = [b"k1", None], [b"e1", b"e2"]
    rows = ExampleRows.zipped(keys, examples)
    assert rows == [(b"k1", b"e1"), (None, b"e2")] and not isinstance(rows, list)
    found = batch_columns(rows)
    assert found[0] is keys and found[1] is examples  # not unzipped again
    copy = pickle.loads(pickle.dumps(rows))
    assert type(copy) is ExampleRows and copy == rows and copy.columns == (keys, examples)
    bad = ExampleRows.zipped([b"k"], ["not bytes"])
    with pytest.raises(TypeError, match="row 0 .*example must be bytes"):
        batch_columns(bad)


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=20)),
                               st.binary(min_size=1, max_size=40)), max_size=30),
       index=st.integers(-40, 40), cut=st.tuples(st.integers(-40, 40), st.integers(-40, 40)),
       hashed=st.booleans())
def test_example_rows_read_as_the_list_of_pairs_they_hold(rows, index, cut, hashed):
    """An ExampleRows (made from pairs or from columns, pickled or not)
    reads as the list of its pairs: length, items, slices, iteration,
    equality both ways; and the shard writer prepares it as that list."""
    import pickle

    from recordforge.transforms.splits import ExampleRows, HashedExamples, hashed_sources
    from recordforge.transforms.writer.prepare import prepare_batch

    keys, examples = [key for key, _ in rows], [example for _, example in rows]
    assigner = SplitAssigner("pets", [("train", 0.5), ("test", 0.5)])
    made = [ExampleRows(rows), ExampleRows.zipped(keys, examples, keys.count(None)),
            HashedExamples(rows, assigner.salt, assigner.python_hash_rows(
                hashed_sources(keys, examples))[0])]
    shared = ExampleRows(made[1])
    assert shared.columns == made[1].columns and shared.key_nones == keys.count(None)
    for batch in made + [pickle.loads(pickle.dumps(batch)) for batch in made]:
        assert len(batch) == len(rows) and bool(batch) == bool(rows)
        assert list(batch) == rows and batch == rows and rows == batch
        assert batch == ExampleRows(rows) and batch != rows + [(None, b"more")]
        assert list(batch[slice(*cut)]) == rows[slice(*cut)]
        if -len(rows) <= index < len(rows):
            assert batch[index] == rows[index]
        else:
            with pytest.raises(IndexError):
                batch[index]
        for shuffle in (True, False):
            ours = prepare_batch(assigner, batch, shuffle=shuffle, sample_every=64,
                                 prefix_len=8)
            theirs = prepare_batch(assigner, list(rows), shuffle=shuffle, sample_every=64,
                                   prefix_len=8)
            if not rows:
                assert ours is None and theirs is None
                continue
            assert list(ours.examples) == list(theirs.examples)
            assert list(ours.order_keys) == list(theirs.order_keys)
            assert (ours.splits == theirs.splits).all() and ours.keyed == theirs.keyed
            assert (ours.sizes == theirs.sizes).all() and ours.samples == theirs.samples


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=20)),
                               st.binary(min_size=1, max_size=40)), max_size=30),
       index=st.integers(-40, 40), cut=st.tuples(st.integers(-40, 40), st.integers(-40, 40)))
def test_a_batch_with_only_joined_digests_reads_as_one_with_a_list(rows, index, cut):
    """A HashedExamples made with the digests back to back (as the convert
    call makes it) gives the shard writer, the counts and a pickle the
    same as one made with a list, which it makes only when read."""
    import pickle

    from recordforge.transforms.splits import HashedExamples, JoinedDigests, hashed_sources

    assigner = SplitAssigner("pets", [("train", 0.5), ("test", 0.5)])
    keys, examples = [key for key, _ in rows], [example for _, example in rows]
    sources = hashed_sources(keys, examples)
    listed, words = assigner.python_hash_rows(sources)  # hashlib, row by row

    def made():
        return HashedExamples(rows, assigner.salt, joined=b"".join(listed),
                              columns=(keys, examples))

    batch = made()
    view, joined, found = assigner.hash_batch(batch, sources)
    assert isinstance(view, JoinedDigests) and batch._listed is None  # no list made
    assert view == listed and len(view) == len(listed) and (found == words).all()
    assert view[slice(*cut)] == listed[slice(*cut)]
    if -len(listed) <= index < len(listed):
        assert view[index] == listed[index]
    else:
        with pytest.raises(IndexError):
            view[index]
    assert assigner.hashed(batch) is batch and (batch.words() == words).all()
    assert assigner.hashed(list(rows)).joined_digests() == joined
    assert batch.digests == listed
    copy = pickle.loads(pickle.dumps(made()))
    assert copy == rows and copy.salt == assigner.salt and copy.digests == listed
    # Digests of another salt, or too few, are not taken for the rows.
    other = HashedExamples(rows, b"other", joined=b"".join(listed))
    short = HashedExamples(rows, assigner.salt, joined=b"".join(listed)[:-1])
    for batch in (other, short) if rows else (other,):
        assert assigner.hashed(batch) is not batch
        assert assigner.hash_batch(batch, sources)[1] == b"".join(listed)
