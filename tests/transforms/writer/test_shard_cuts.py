"""Shards cut at rows and between chunks (`writer.shard_cuts`)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from recordforge.transforms.writer.elements import BucketChunks, Chunk
from recordforge.transforms.writer.shard_cuts import (
    plan_row_shards,
    plan_shards,
    row_shard_count,
    row_shard_thresholds,
    shards_of_rows,
    shards_touched,
)


def _buckets(sizes_per_bucket):
    return [BucketChunks("train", index, f"/b/{index}",
                         tuple(Chunk(sum(sizes[:j]), size, 3) for j, size in enumerate(sizes)))
            for index, sizes in enumerate(sizes_per_bucket)]


@pytest.mark.parametrize("shard_size", [1_000_000, 1_300_000, 2_500_000, 7_000_000])
def test_shard_plan_sizes(shard_size):
    rng = random.Random(shard_size)
    chunk = shard_size // 25  # the largest cell: a shard within one of the mean
    buckets = _buckets([[rng.randint(chunk // 2, chunk) for _ in range(rng.randint(1, 60))]
                        for _ in range(12)])
    shards = plan_shards("train", buckets, shard_size)
    total = sum(c.length for b in buckets for c in b.chunks)
    assert len(shards) == math.ceil(total / shard_size)
    sizes = [shard.num_bytes for shard in shards]
    assert sum(sizes) == total
    mean = total / len(shards)
    assert all(abs(size - mean) <= 0.1 * mean for size in sizes), (sizes, mean)
    assert max(sizes) <= 1.1 * shard_size
    assert sum(shard.num_examples for shard in shards) == 3 * sum(len(b.chunks) for b in buckets)
    # Pieces follow bucket and chunk order, contiguous ranges merged.
    pieces = [piece for shard in shards for piece in shard.pieces]
    order = [int(path.rsplit("/", 1)[1]) for path, _, _ in pieces]
    assert order == sorted(order)


def test_shard_plan_ignores_bucket_order_and_repeats():
    buckets = _buckets([[30_000] * 40, [25_000] * 50, [10_000] * 7])
    plan = plan_shards("train", buckets, 1_000_000)
    assert plan_shards("train", buckets[::-1] + buckets[:1], 1_000_000) == plan


def test_shard_plan_with_records_larger_than_a_shard():
    # As with rows: no more shards than total // largest chunk, so none is empty.
    buckets = _buckets([[3_000_000, 2_000_000]])
    shards = plan_shards("train", buckets, 1_000_000)
    assert [shard.num_bytes for shard in shards] == [5_000_000]
    buckets = _buckets([[3_000_000, 2_000_000], [1_000_000] * 4])
    assert [shard.num_bytes for shard in plan_shards("train", buckets, 1_000_000)] == [
        3_000_000, 3_000_000, 3_000_000]
    assert plan_shards("train", [], 1_000_000) == []


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.integers(1, 5_000), max_size=8), min_size=1, max_size=8),
       st.integers(1, 20_000))
def test_a_chunks_shard_follows_from_its_own_place(sizes_per_bucket, shard_size):
    """Every chunk is in the shard holding its midpoint, whichever bucket
    holds it; no shard is empty; shards follow one another in key order."""
    buckets = _buckets(sizes_per_bucket)
    shards = plan_shards("train", buckets, shard_size)
    lengths = [size for sizes in sizes_per_bucket for size in sizes]
    if not lengths:
        assert shards == []
        return
    total = sum(lengths)
    count = min(math.ceil(total / shard_size), total // max(lengths))
    assert len(shards) == max(1, count)
    assert all(shard.num_bytes > 0 for shard in shards)
    assert sum(shard.num_bytes for shard in shards) == total
    start, expected = 0, [0] * len(shards)
    for length in lengths:
        expected[min(len(shards) - 1, (2 * start + length) * len(shards) // (2 * total))] += length
        start += length
    assert [shard.num_bytes for shard in shards] == expected


def _cut_by_brute_force(sizes, count):
    """Row r goes to the shard holding its byte midpoint: the first shard i
    with (i + 1) * total / count above s_r + n_r / 2, in fractions."""
    from fractions import Fraction
    total = sum(sizes)
    shards, start = [], 0
    for size in sizes:
        middle = Fraction(2 * start + size, 2)
        shards.append(min(count - 1, int(middle * count / total)))
        start += size
    return shards


@pytest.mark.parametrize("seed", range(6))
def test_row_cuts_follow_midpoints_and_never_leave_a_shard_empty(seed):
    rng = random.Random(seed)
    sizes = [rng.choice([rng.randint(16, 200), rng.randint(16, 5_000)])
             for _ in range(rng.randint(1, 400))]
    shard_size = rng.randint(100, 20_000)
    total = sum(sizes)
    count = row_shard_count(total, shard_size, max(sizes))
    assert 1 <= count <= math.ceil(total / shard_size)
    array = np.array(sizes, dtype=np.int64)
    shards = shards_of_rows(np.cumsum(array) - array, array, row_shard_thresholds(total, count))
    assert shards.tolist() == _cut_by_brute_force(sizes, count)
    assert sorted(set(shards.tolist())) == list(range(count))  # every shard holds a row
    # Any byte range of the split reaches only the shards it is said to touch.
    starts = (np.cumsum(array) - array).tolist()
    for _ in range(20):
        first = rng.randrange(len(sizes))
        last = rng.randrange(first, len(sizes)) + 1
        touched = shards_touched(starts[first], starts[last - 1] + sizes[last - 1],
                                 row_shard_thresholds(total, count))
        assert set(shards[first:last].tolist()) <= set(touched)


def test_row_shard_count_is_ceil_unless_rows_are_larger_than_a_shard():
    assert row_shard_count(10_000, 1_000, 100) == 10
    assert row_shard_count(10_001, 1_000, 100) == 11
    assert row_shard_count(10_000, 1_000, 2_500) == 4  # a shard spans at least a row
    assert row_shard_count(10_000, 1_000, 20_000) == 1
    assert row_shard_count(0, 1_000, 0) == 0

def test_row_shard_plan_lists_the_buckets_each_shard_may_take_rows_from():
    sizes = [40_000, 0, 25_000, 7_000, 50_000]
    buckets = [BucketChunks("train", index, f"ref/{index}",
                            (Chunk(0, size // 2, 3), Chunk(size // 2, size - size // 2, 3))
                            if size else (), 900)
               for index, size in enumerate(sizes)]
    shards = plan_row_shards("train", buckets[::-1] + buckets[:2], 30_000)
    total = sum(sizes)
    assert len(shards) == math.ceil(total / 30_000) == 5
    thresholds = row_shard_thresholds(total, 5)
    starts = {"ref/0": 0, "ref/2": 40_000, "ref/3": 65_000, "ref/4": 72_000}
    for shard in shards:
        assert shard.cut == (total, 5) and shard.num_examples == shard.num_bytes == -1
        assert [path for path, _, _ in shard.pieces] == sorted(
            path for path, start in starts.items()
            if shard.index in shards_touched(start, start + sizes[int(path[-1])], thresholds))
        assert all(offset == starts[path] for path, offset, _ in shard.pieces)
    assert plan_row_shards("train", [], 30_000) == []
    # Rows larger than a shard: fewer shards, each spanning at least a row.
    large = [bucket._replace(max_row=45_000) for bucket in buckets]
    assert len(plan_row_shards("train", large, 30_000)) == total // 45_000
