"""Exact duplicates as plain code: content digests against protobuf's own serialization,
keys named back from their sortable bytes, and the duplicates found in any bucketing
against a brute-force count over planted duplicates (hypothesis)."""

from __future__ import annotations

import hashlib
import itertools
import math
import pickle

import pytest
from hypothesis import given, settings, strategies as st

from recordforge.schemas import duplicates as dup
from recordforge.schemas.example import encode_example
from recordforge.schemas.keys import sortable_key
from recordforge.transforms.duplicates import by_bucket, bucket_duplicates, duplicate_buckets

NAMES = ("a", "b/c", "label", "text")

values = st.fixed_dictionaries({
    "a": st.lists(st.integers(-2**63, 2**63 - 1), max_size=3),
    "b/c": st.lists(st.floats(width=32, allow_nan=False), max_size=2),
    "label": st.lists(st.binary(max_size=20), min_size=1, max_size=2),
    "text": st.lists(st.binary(max_size=300), max_size=2)})


def _protobuf(features: dict, names) -> bytes:
    """An independent serialization: protobuf's Example, map keys sorted."""
    from tfrecord import example_pb2
    example = example_pb2.Example()
    for name in names:
        feature = example.features.feature[name]
        kind, items = features[name]
        getattr(feature, {"int64": "int64_list", "float": "float_list",
                          "bytes": "bytes_list"}[kind]).value.extend(items)
    return example.SerializeToString(deterministic=True)


@settings(max_examples=150, deadline=None)
@given(values, st.sets(st.sampled_from(NAMES), min_size=1))
def test_a_restricted_example_is_protobufs_example_of_those_features(row, chosen):
    typed = {"a": ("int64", row["a"]), "b/c": ("float", row["b/c"]),
             "label": ("bytes", row["label"]), "text": ("bytes", row["text"])}
    example = encode_example(typed)
    assert example == _protobuf(typed, NAMES)
    restricted = dup.restricted_example(example, frozenset(n.encode() for n in chosen))
    assert restricted == _protobuf(typed, sorted(chosen))
    assert dup.content_digests([example], frozenset(n.encode() for n in chosen)) == \
        hashlib.blake2b(restricted, digest_size=16).digest()


@settings(max_examples=50, deadline=None)
@given(st.lists(st.binary(max_size=200), max_size=30))
def test_native_and_python_digests_agree(examples):
    native = dup.content_digests(examples)
    import recordforge.schemas.duplicates as module
    original = module.kernels
    module.kernels = lambda: None
    try:
        python = dup.content_digests(examples)
    finally:
        module.kernels = original
    assert native == python == b"".join(hashlib.blake2b(e, digest_size=16).digest()
                                        for e in examples)


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.integers(-2**63, 2**63 - 1), st.text(max_size=20), st.booleans(),
                 st.floats(allow_nan=False), st.binary(max_size=10)))
def test_a_key_is_named_by_the_value_it_was_made_from(value):
    named = dup.key_value(sortable_key(value))["key"]
    if isinstance(value, bytes):
        import base64
        assert base64.b64decode(named["base64"]) == value
    elif isinstance(value, float) and not math.isfinite(value):
        assert named == repr(value)
    else:
        assert named == value and type(named) is type(value)


def test_a_keyless_row_is_named_by_its_row_digest():
    digest = bytes(range(16))
    assert dup.key_value(dup.keyless_key(digest)) == {"key": None, "row_digest": digest.hex()}
    assert dup.keyless_key(digest) < sortable_key(False)  # below every key's tag


def _reference(rows):
    """Brute force over (content, split, key) rows, each count by its definition."""
    within, across, duplicate, cross = {}, {}, 0, 0
    for content, split, key in rows:
        equal = [(s, k) for c, s, k in rows if c == content]
        duplicate += any((k, s) < (key, split) for s, k in equal)
        if any(s == split and k < key for s, k in equal):
            within[split] = within.get(split, 0) + 1
        earlier_splits = {s for s, _ in equal if s < split}
        cross += bool(earlier_splits)
        for earlier in earlier_splits:
            across[(earlier, split)] = across.get((earlier, split), 0) + 1
    return within, across, duplicate, cross


planted = st.lists(st.tuples(st.integers(0, 12), st.integers(0, 2)), min_size=1, max_size=80)


@settings(max_examples=200, deadline=None)
@given(planted, st.sampled_from([1, 2, 4, 64]), st.randoms(use_true_random=False))
def test_every_planted_duplicate_is_found_and_counted_in_any_bucketing(rows, buckets, rng):
    # Distinct keys (rows are distinct rows), contents planted from a few values.
    keyed = [(content, split, sortable_key(index)) for index, (content, split) in enumerate(rows)]
    fingerprints = [dup.Fingerprint(hashlib.blake2b(bytes([c]), digest_size=16).digest(), s, k)
                    for c, s, k in keyed]
    rng.shuffle(fingerprints)
    batches = [dup.FingerprintBatch.of(fingerprints[i:i + 7])
               for i in range(0, len(fingerprints), 7)]
    grouped = {}
    for batch in batches:
        for bucket, items in by_bucket(batch, buckets):
            grouped.setdefault(bucket, []).append(items)
    # Every row went to one bucket, and a pickled batch is the same batch.
    assert sum(len(b) for lists in grouped.values() for b in lists) == len(fingerprints)
    assert pickle.loads(pickle.dumps(batches[0])).keys == batches[0].keys
    parts = [bucket_duplicates(item) for item in grouped.items()]
    rng.shuffle(parts)
    found = dup.merge_parts(parts)
    within, across, duplicate, cross = _reference(keyed)
    assert found.within == within and found.across == across
    assert (found.duplicate_rows, found.cross_split_rows, found.rows) == (
        duplicate, cross, len(rows))
    whole = dup.find_duplicates([dup.FingerprintBatch.of(fingerprints)])  # one bucket
    assert found == whole
    # Every later row of a split is paired with its split's first equal row.
    pairs = {(p.earlier, p.later) for p in map(dup.DuplicatePair._make, whole.pairs)}
    if duplicate <= dup.MAX_PAIRS // 2:
        for (c, s, k), (c2, s2, k2) in itertools.permutations(keyed, 2):
            if c == c2 and s == s2 and k2 > k and k == min(
                    kk for cc, ss, kk in keyed if cc == c and ss == s):
                assert ((s, k), (s2, k2)) in pairs


def test_pairs_are_bounded():
    fingerprints = [dup.Fingerprint(b"\x01" * 16, 0, sortable_key(i)) for i in range(500)]
    found = dup.find_duplicates([dup.FingerprintBatch.of(fingerprints)])
    assert found.duplicate_rows == 499 and len(found.pairs) == dup.MAX_PAIRS
    assert found.pairs[0] == (0, (0, sortable_key(0)), (0, sortable_key(1)))


@pytest.mark.parametrize("size, buckets", [(None, 64), (0, 1), (1, 1), (4 << 20, 1),
                                           ((4 << 20) + 1, 2), (1 << 40, 1 << 14)])
def test_buckets_grow_with_the_input(size, buckets):
    assert duplicate_buckets(size) == buckets


@settings(max_examples=200, deadline=None)
@given(planted, st.sampled_from(dup.DEDUPE_MODES), st.randoms(use_true_random=False))
def test_removal_keeps_one_row_per_split_or_per_group(rows, mode, rng):
    # Keys repeat too (i % 5): rows equal in key and content differ by origin.
    fingerprints = [dup.Fingerprint(hashlib.blake2b(bytes([c]), digest_size=16).digest(), s,
                                    sortable_key(i % 5), dup.origin_of("t.csv", i))
                    for i, (c, s) in enumerate(rows)]
    rng.shuffle(fingerprints)
    batch = dup.FingerprintBatch.of(fingerprints)
    found, left, removals = dup.find_and_remove([batch], mode)
    assert found == dup.find_duplicates([batch])
    removed = {removal.origin for removal in removals}
    assert len(removed) == len(removals)
    kept = [f for f in fingerprints if f.origin not in removed]
    assert left == dup.find_duplicates([dup.FingerprintBatch.of(kept)])
    if mode == "across_splits":
        assert len(removals) == found.duplicate_rows and left.duplicate_rows == 0
        assert len({f.digest for f in kept}) == len(kept)
    else:
        assert len(removals) == sum(found.within.values()) and not left.within
        assert len({(f.digest, f.split) for f in kept}) == len(kept)
    # Each removed row names a kept row with its content, never itself.
    by_origin = {f.origin: f for f in fingerprints}
    kept_named = {(f.digest, f.split, f.key) for f in kept}
    for removal in removals:
        row = by_origin[removal.origin]
        assert (row.digest, *removal.earlier) in kept_named
        assert (row.split, row.key) == removal.later
    # Deterministic: the same removals whatever the order the rows came in.
    rng.shuffle(fingerprints)
    again = dup.find_and_remove([dup.FingerprintBatch.of(fingerprints)], mode)[2]
    assert sorted(again) == sorted(removals)
