"""The gzip ratio sample (`writer.ratio_sample`)."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st
from recordforge.transforms.writer import (
    ratio_sample,
    tuning,
)
from recordforge.transforms.writer.shard_cuts import row_shard_count


def test_the_ratio_sample_is_the_rows_whose_digest_starts_with_six_zero_bits():
    from recordforge.transforms.writer import ShardTuning
    assert ShardTuning().ratio_sample_bound == tuning.RATIO_SAMPLE_BOUND
    digests = [bytes([first]) + bytes(15) for first in (0, 3, 4, 255)]
    assert ratio_sample.rows_below(b"".join(digests), tuning.RATIO_SAMPLE_BOUND).tolist() == [0, 1]


def test_gzip_shard_counts_follow_the_estimated_compressed_size_in_integers():
    # total * sample_written // sample_bytes, at least 1, the plain total
    # without a sample.
    assert ratio_sample.estimated_written_bytes(10_000, 2_500, 10_000) == 2_500
    assert ratio_sample.estimated_written_bytes(10_001, 1, 3) == 3_333
    assert ratio_sample.estimated_written_bytes(7, 1, 1_000) == 1
    assert ratio_sample.estimated_written_bytes(10_000, 0, 0) == 10_000
    assert ratio_sample.estimated_written_bytes(0, 5, 10) == 0
    huge = 10**15  # exact far beyond a float's 53 bits
    assert ratio_sample.estimated_written_bytes(huge + 1, 333_333_333_333, 10**12) == (
        (huge + 1) * 333_333_333_333 // 10**12)
    # The count follows the written bytes; the cap stays on the framed
    # bytes, so that every shard holds a row.
    assert row_shard_count(10_000, 1_000, 100, 2_500) == 3
    assert row_shard_count(10_000, 1_000, 100, 2_000) == 2
    assert row_shard_count(10_000, 1_000, 100, 1) == 1
    assert row_shard_count(10_000, 1_000, 4_000, 9_000) == 2  # 10_000 // 4_000
    assert row_shard_count(10_000, 1_000, 100, 30_000) == 30  # data gzip grows
    assert row_shard_count(10_000, 1_000, 100, None) == row_shard_count(10_000, 1_000, 100)


def test_rows_below_the_bound_compare_whole_digests_big_endian():
    rng = random.Random(8)
    bound = (1 << 128) // 7
    key = bound.to_bytes(16, "big")
    digests = [rng.randbytes(16) for _ in range(3000)]
    # Edges: equal to K, one below, trailing zero bytes (which numpy's
    # fixed-width bytes drop when they give one).
    digests += [key, (bound - 1).to_bytes(16, "big"), key[:8] + b"\0" * 8,
                (bound + 1).to_bytes(16, "big"), b"\0" * 16]
    below = ratio_sample.rows_below(b"".join(digests), bound).tolist()
    assert below == [row for row, digest in enumerate(digests)
                     if int.from_bytes(digest, "big") < bound]
    assert ratio_sample.rows_below(b"".join(digests), 1 << 128).tolist() == list(
        range(len(digests)))
    assert ratio_sample.rows_below(b"".join(digests), 0).tolist() == []


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.binary(min_size=16, max_size=16), st.integers(1, 40)),
                max_size=60),
       st.lists(st.integers(0, 60), max_size=8), st.integers(1, 3))
def test_the_ratio_sample_does_not_depend_on_how_its_rows_are_grouped(rows, cuts, repeats):
    """Any grouping of the rows below K (batches, bundles, buckets), each
    group cut to the limit and the cut groups merged, gives the sample of
    all of them: the first rows in key order up to the limit."""
    import unittest.mock
    limit_rows = [(key, bytes([size % 251]) * size)
                  for key, size in rows] * repeats  # duplicate rows are kept, like rows
    with unittest.mock.patch.object(ratio_sample, "RATIO_SAMPLE_LIMIT", 200):
        whole = ratio_sample.ratio_sample_of(limit_rows)
        kept = ratio_sample.within_limit(whole)
        assert sum(len(record) for _, record in kept) <= 200
        assert whole == sorted(limit_rows)[:len(whole)]
        if sum(len(record) for _, record in limit_rows) > 200:
            # The limit cut it after the row that passed it, which only
            # the estimate drops.
            assert sum(len(record) for _, record in whole) > 200
            assert kept == whole[:-1]
        else:
            assert kept == whole == sorted(limit_rows)
        edges = sorted({0, len(limit_rows), *(cut % (len(limit_rows) + 1) for cut in cuts)})
        groups = [limit_rows[a:b] for a, b in zip(edges[:-1], edges[1:])]
        cut = [row for group in reversed(groups) for row in ratio_sample.ratio_sample_of(group)]
        assert ratio_sample.ratio_sample_of(cut) == whole


def test_a_partial_cut_before_the_row_that_passes_the_limit_lets_no_later_row_in():
    """Rows a < b < c, a and b past the limit together: the whole's
    estimate takes a alone. A partial of {a, b} cut to {a} merged with
    {c} would take c as well; the partial keeps b, which stops the merge."""
    import unittest.mock
    a, b, c = (bytes([1]) * 16, b"a" * 150), (bytes([2]) * 16, b"b" * 100), (bytes([3]) * 16, b"c" * 10)
    with unittest.mock.patch.object(ratio_sample, "RATIO_SAMPLE_LIMIT", 200):
        whole = ratio_sample.ratio_sample_of([a, b, c])
        merged = ratio_sample.ratio_sample_of(
            ratio_sample.ratio_sample_of([a, b]) + ratio_sample.ratio_sample_of([c]))
        assert merged == whole == [a, b]
        assert ratio_sample.within_limit(merged) == [a]
