"""Plain (no Beam) tests of the shard writer's planning and spill files."""

from __future__ import annotations

import gzip
import io
import math
import os
import random
import struct

import fsspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recordforge.transforms import (bucket_sort, bucket_writers, exchange_packets, row_order,
                                    run_files, shard_plan, spill, tfrecord)
from recordforge.transforms.shard_plan import (
    BucketChunks,
    BucketRange,
    Chunk,
    RunInfo,
    SampleEntry,
    SpillRecord,
    SplitAssigner,
    assign_split,
    bucket_bounds_of,
    hash_buckets_of,
    plan_bucket_ranges,
    plan_row_shards,
    plan_shards,
    row_shard_count,
    row_shard_thresholds,
    runs_of,
    shards_of_rows,
    shards_touched,
    sample_of,
    validate_splits,
)

SPLITS = [("train", 0.8), ("validation", 0.1), ("test", 0.1)]


# --- split assignment ---------------------------------------------------------

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


# --- spill records, samples and buckets ---------------------------------------

def test_runs_and_samples_ignore_repeated_records():
    entry = SampleEntry(5 << 20, b"k", 100)
    records = [SpillRecord("train", "/r/1", 10, 1000, (entry,)),
               SpillRecord("train", "/r/1", 25, 2600, ()),
               SpillRecord("train", "/r/2", 7, 700, (entry,))]
    expected = [RunInfo("train", "/r/1", 25, 2600), RunInfo("train", "/r/2", 7, 700)]
    assert runs_of(records) == expected
    assert runs_of(records + records[:2]) == expected
    assert sample_of(records + records, 10) == [entry]


def _sample(keys_and_sizes, every):
    entries = []
    for key, size in keys_and_sizes:
        digest = SplitAssigner("d", [("all", 1)]).digest(key)
        u64 = int.from_bytes(digest[8:16], "little")
        if (size << 64) >= every * (u64 + 1):
            entries.append(SampleEntry((size << 64) // (u64 + 1), key, size))
    return entries


def test_bucket_ranges_balance_bytes_and_cover_the_key_space():
    rng = random.Random(3)
    rows = [(rng.randbytes(12), rng.randint(100, 3000)) for _ in range(20_000)]
    total = sum(size for _, size in rows)
    bucket_bytes = total // 10
    ranges = plan_bucket_ranges("all", total, _sample(rows, bucket_bytes // 64), bucket_bytes,
                                sample_bytes=bucket_bytes // 64, sample_size=65536)
    assert [bucket.index for bucket in ranges] == list(range(len(ranges)))
    assert ranges[0].lo == b"" and ranges[-1].hi is None
    assert all(a.hi == b.lo for a, b in zip(ranges, ranges[1:]))
    assert 9 <= len(ranges) <= 11
    loads = [sum(size for key, size in rows if bucket.lo <= key and
                 (bucket.hi is None or key < bucket.hi)) for bucket in ranges]
    assert sum(loads) == total
    # ~64 sampled rows per bucket: loads stay within a factor 2 of the target.
    assert max(loads) < 2 * total / len(ranges)


def test_bucket_ranges_do_not_depend_on_sample_order():
    rows = [(index.to_bytes(4, "big"), 500) for index in range(5000)]
    sample = _sample(rows, 2000)
    one = plan_bucket_ranges("s", 2_500_000, sample, 500_000, sample_bytes=2000, sample_size=100)
    two = plan_bucket_ranges("s", 2_500_000, sample[::-1], 500_000, sample_bytes=2000,
                             sample_size=100)
    assert one == two and len(one) > 1


def test_a_split_is_never_cut_into_more_than_max_buckets_key_ranges():
    """10 TB in 32 MB buckets would be 312,500 ranges: bounds every lane
    gets, and sizes the plan adds up, growing with the data."""
    rows = [(index.to_bytes(4, "big"), 200) for index in range(100_000)]
    ranges = plan_bucket_ranges("s", 10 * 10**12, _sample(rows, 1), 32 << 20, sample_bytes=1,
                                sample_size=100_000)
    assert 4000 <= len(ranges) <= shard_plan.MAX_BUCKETS == 4096
    assert ranges[0].lo == b"" and ranges[-1].hi is None


# --- shard plan ---------------------------------------------------------------

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


# --- cells: the chunks of key-ordered gzip output ---------------------------------


def _cells_of(rows: list[bytes], cuts: list[int], cell_bytes: int) -> list[bytes]:
    """The split's chunks, in key order, when its sorted `rows` (examples)
    are cut into buckets at row positions `cuts`: each bucket's interior
    cells written by its own CellWriter, each seam joined from its
    buckets' pieces and compressed, the units ordered as the plan orders
    them."""
    framed = [tfrecord.frame_records([row]) for row in rows]
    total = sum(map(len, framed))
    edges = sorted({0, len(rows), *cuts})
    units: dict[int, list[bytes]] = {}
    seams: dict[int, list[tuple]] = {}
    start = 0
    for bucket, (first, last) in enumerate(zip(edges[:-1], edges[1:])):
        size = sum(len(record) for record in framed[first:last])
        if not size:
            continue  # no rows: not in the plan
        out = io.BytesIO()
        writer = bucket_writers.CellWriter(out, start=start, size=size, total=total,
                                           cell_bytes=cell_bytes, gzip_level=1)
        for record in framed[first:last]:
            writer.write_framed(record, np.array([len(record)]))
        chunks = writer.close()
        assert writer.offset == start + size
        data = out.getvalue()
        units[shard_plan.interior_unit(bucket)] = [
            data[chunk.offset:chunk.offset + chunk.length] for chunk in chunks]
        for cell, (piece, count) in writer.seams.items():
            seams.setdefault(cell, []).append((bucket, start, start + size, total, count, piece))
        start += size
    for cell, pieces in seams.items():
        # Delivered in any order, one of them twice (a retried step).
        seam = bucket_writers.join_seam("train", cell, cell_bytes,
                                        pieces[::-1] + pieces[:1], 1)
        if seam is not None:
            unit, data, _ = seam
            assert unit not in units
            units[unit] = [data]
    return [chunk for unit in sorted(units) for chunk in units[unit]]


@settings(max_examples=80, deadline=None)
@given(sizes=st.lists(st.integers(0, 300), min_size=1, max_size=60),
       cut_at=st.lists(st.integers(0, 60), max_size=12),
       cell_bytes=st.sampled_from([1, 40, 200, 1000, 1 << 20]))
def test_a_splits_cells_do_not_depend_on_its_buckets(sizes, cut_at, cell_bytes):
    """Cut into any buckets (empty ones, one per row, one in all), the
    chunks are those of the split written as one bucket: each the rows
    whose midpoint is in one cell, one gzip member."""
    rows = [bytes([index % 251]) * size for index, size in enumerate(sizes)]
    whole = _cells_of(rows, [], cell_bytes)
    assert _cells_of(rows, [cut % (len(rows) + 1) for cut in cut_at], cell_bytes) == whole
    framed = [tfrecord.frame_records([row]) for row in rows]
    starts = np.cumsum([len(record) for record in framed]) - [len(record) for record in framed]
    cells = shard_plan.cells_of_rows(starts, np.array([len(record) for record in framed]),
                                     cell_bytes).tolist()
    expected = [b"".join(record for record, cell in zip(framed, cells) if cell == wanted)
                for wanted in sorted(set(cells))]
    assert [gzip.decompress(chunk) for chunk in whole] == expected


def test_a_seam_missing_a_bucket_is_refused():
    # Buckets 0-2 cover bytes 0-120, 120-150, 150-400 of a split of 400;
    # cell 1 (bytes 100-200) holds the boundaries 120 and 150.
    pieces = [(0, 0, 120, 400), (1, 120, 150, 400), (2, 150, 400, 400)]
    assert shard_plan.check_seam("train", 1, 100, pieces) == 4  # the last bucket's seam unit
    for missing in range(3):
        with pytest.raises(ValueError, match="cell 1"):
            shard_plan.check_seam("train", 1, 100, pieces[:missing] + pieces[missing + 1:])


# --- shards cut at rows (shuffled plain output) ---------------------------------

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


def test_hash_buckets_are_equal_ranges_in_digest_order():
    rng = random.Random(3)
    digests = sorted(rng.randbytes(16) for _ in range(5000)) + [b"\0" * 16, b"\xff" * 16]
    digests.sort()
    for count in (1, 3, 64, 256):
        buckets = hash_buckets_of(b"".join(digests), count).tolist()
        assert buckets == sorted(buckets) and 0 <= buckets[0] and buckets[-1] == count - 1
        assert buckets == [int.from_bytes(d[:4], "big") * count >> 32 for d in digests]


def test_hash_buckets_follow_the_input_size_within_bounds():
    from recordforge.transforms.shards import ShardTuning
    default = ShardTuning().hash_buckets
    assert [ShardTuning.for_input(size).hash_buckets for size in (None, 0, 1, 100 << 30)] == [
        default] * 4
    assert ShardTuning.for_input((300 << 30) + 1).hash_buckets == 301
    assert ShardTuning.for_input(10 * 10**12).hash_buckets == shard_plan.MAX_BUCKETS == 4096


# Every size but the bucket count decides bytes: none may follow the input,
# or `WriteDataset` (which cannot know its input's size) and `build` would
# write different shards from the same rows.
@settings(max_examples=200, deadline=None)
@given(st.one_of(st.none(), st.integers(min_value=0, max_value=1 << 50)))
def test_only_the_bucket_count_follows_the_input_size(input_bytes):
    from recordforge.transforms.shards import ShardTuning
    sized = ShardTuning.for_input(input_bytes)
    assert {**vars(sized), "hash_buckets": 0} == {**vars(ShardTuning()), "hash_buckets": 0}


def test_key_ordered_gzip_buckets_hold_enough_cells_that_few_are_shared():
    from recordforge.transforms.shards import KEY_GZIP_BUCKET_CELLS, ShardTuning
    tuning = ShardTuning.for_input(10 << 30)  # 256 buckets
    cell = tuning.chunk_bytes(256 << 20)  # 4 MB
    assert cell == 4 << 20

    def count(compression, input_bytes):
        return tuning.key_bucket_count(compression=compression, shard_size=256 << 20,
                                       input_bytes=input_bytes)

    assert count("none", 10 << 30) == 256  # plain: no cell is shared
    assert count("gzip", None) == 256  # size unknown (`WriteDataset`)
    assert count("gzip", 10 << 30) == (10 << 30) // (KEY_GZIP_BUCKET_CELLS * cell) == 40
    assert count("gzip", 1) == 1
    assert count("gzip", 1 << 50) == 256  # never more than the tuning's
    assert tuning.key_gzip_bucket_bytes(256 << 20) == KEY_GZIP_BUCKET_CELLS * cell
    assert tuning.key_gzip_bucket_bytes(1 << 20) == tuning.bucket_bytes  # 20 KB cells


def test_the_ratio_sample_is_the_rows_whose_digest_starts_with_six_zero_bits():
    from recordforge.transforms.shards import ShardTuning
    assert ShardTuning().ratio_sample_bound == shard_plan.RATIO_SAMPLE_BOUND
    digests = [bytes([first]) + bytes(15) for first in (0, 3, 4, 255)]
    assert shard_plan.rows_below(b"".join(digests), shard_plan.RATIO_SAMPLE_BOUND).tolist() == [0, 1]


def test_gzip_shard_counts_follow_the_estimated_compressed_size_in_integers():
    # total * sample_written // sample_bytes, at least 1, the plain total
    # without a sample.
    assert shard_plan.estimated_written_bytes(10_000, 2_500, 10_000) == 2_500
    assert shard_plan.estimated_written_bytes(10_001, 1, 3) == 3_333
    assert shard_plan.estimated_written_bytes(7, 1, 1_000) == 1
    assert shard_plan.estimated_written_bytes(10_000, 0, 0) == 10_000
    assert shard_plan.estimated_written_bytes(0, 5, 10) == 0
    huge = 10**15  # exact far beyond a float's 53 bits
    assert shard_plan.estimated_written_bytes(huge + 1, 333_333_333_333, 10**12) == (
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
    below = shard_plan.rows_below(b"".join(digests), bound).tolist()
    assert below == [row for row, digest in enumerate(digests)
                     if int.from_bytes(digest, "big") < bound]
    assert shard_plan.rows_below(b"".join(digests), 1 << 128).tolist() == list(
        range(len(digests)))
    assert shard_plan.rows_below(b"".join(digests), 0).tolist() == []


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
    with unittest.mock.patch.object(shard_plan, "RATIO_SAMPLE_LIMIT", 200):
        whole = shard_plan.ratio_sample_of(limit_rows)
        assert sum(len(record) for _, record in whole) <= 200
        assert whole == sorted(limit_rows)[:len(whole)]
        if sum(len(record) for _, record in limit_rows) > 200:
            assert len(whole) < len(limit_rows)  # the limit cut it
        edges = sorted({0, len(limit_rows), *(cut % (len(limit_rows) + 1) for cut in cuts)})
        groups = [limit_rows[a:b] for a, b in zip(edges[:-1], edges[1:])]
        cut = [row for group in reversed(groups) for row in shard_plan.ratio_sample_of(group)]
        assert shard_plan.ratio_sample_of(cut) == whole


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


@settings(max_examples=150, deadline=None)
@given(keys=st.lists(st.binary(max_size=6), max_size=300), count=st.integers(1, 40),
       prefix_len=st.integers(1, 8))
def test_bounds_of_sampled_keys_share_them_evenly_and_keep_equal_prefixes_together(
        keys, count, prefix_len):
    bounds = bucket_bounds_of(keys, count, prefix_len)
    assert bounds[0] == b"" and list(bounds) == sorted(set(bounds)) and len(bounds) <= count
    buckets = exchange_packets.bucket_of_keys(bounds, run_files.KEY_VARIABLE, keys).tolist()
    assert all(0 <= bucket < len(bounds) for bucket in buckets)
    # Key order is bucket order, and keys of one prefix share a bucket.
    ordered = [bucket for _, bucket in sorted(zip(keys, buckets))]
    assert ordered == sorted(ordered)
    by_prefix: dict[bytes, set] = {}
    for key, bucket in zip(keys, buckets):
        by_prefix.setdefault(key[:prefix_len], set()).add(bucket)
    assert all(len(found) == 1 for found in by_prefix.values())
    if len(by_prefix) == len(keys):  # distinct prefixes: no bucket above its share
        sizes = [buckets.count(bucket) for bucket in range(len(bounds))]
        assert max(sizes, default=0) <= -(-len(keys) // count)


def _written_and_measured(tmp_path, rng, memory_bytes: int, fan_in: int):
    """(runs, bucket, sort options, the bucket sorted and written as plain
    chunks, the same bucket only measured) of 7 runs of 300 random rows."""
    runs = _write_runs(tmp_path, rng, 300, 7)
    bucket = BucketRange("train", 3, b"\x10", None)
    options = dict(scratch_dir=str(tmp_path / "scratch"), memory_bytes=memory_bytes,
                   fan_in=fan_in, prefix_len=8, index_every=4096)
    measured = bucket_sort.measure_bucket(bucket, runs, "plans/runs.json")
    written = _sorted_whole(bucket, runs, sum(chunk.length for chunk in measured.chunks),
                            out_dir=str(tmp_path / "out"), **options)
    return runs, bucket, options, written, measured


def _sorted_whole(bucket, runs, size, *, out_dir, cell_bytes=6000, gzip_level=3, **options):
    """The bucket sorted as a whole split (no seams) into cells; the chunk
    file's path and chunks, as BucketChunks."""
    written, seams = bucket_sort.sort_bucket_cells(bucket, runs, start=0, size=size, total=size,
                                                   cell_bytes=cell_bytes, gzip_level=gzip_level,
                                                   out_dir=out_dir, **options)
    assert not seams
    return written


@pytest.mark.parametrize("memory_bytes, fan_in", [(1 << 30, 64), (20_000, 2)])
def test_a_measured_bucket_gives_each_shard_exactly_its_rows(tmp_path, memory_bytes, fan_in):
    rng = random.Random(11)
    runs, bucket, options, written, measured = _written_and_measured(tmp_path, rng, memory_bytes,
                                                                     fan_in)
    data = gzip.decompress(open(written.path, "rb").read())
    records, position = [], 0
    while position < len(data):
        size = int.from_bytes(data[position:position + 8], "little") + 16
        records.append(size)
        position += size
    assert measured.max_row == max(records)
    assert [chunk.length for chunk in measured.chunks] == [len(data)]
    assert spill.parse_bucket_reference(measured.path) == ("plans/runs.json", bucket)
    # The bucket sits inside a larger split, cut into shards smaller than it.
    start, total = 5_000, len(data) + 9_000
    count = row_shard_count(total, len(data) // 4, max(records))
    thresholds = row_shard_thresholds(total, count)
    expected = [shard for shard in _cut_by_brute_force([start] + records + [4_000], count)][1:-1]
    pieces, rows = [], []
    for shard in shards_touched(start, start + len(data), thresholds):
        out = io.BytesIO()
        got_rows, got_bytes = bucket_sort.write_bucket_rows(out, bucket, start, thresholds, shard,
                                                            runs, **options)
        assert got_bytes == len(out.getvalue())
        pieces.append(out.getvalue())
        rows += [shard] * got_rows
    assert b"".join(pieces) == data
    assert rows == expected and len(set(rows)) >= 3



class _CollectingWriter:
    """A bucket writer that keeps every byte it is given."""

    def __init__(self):
        self.data = bytearray()
        self.sizes: list[int] = []

    def needs_bytes(self, nbytes: int) -> bool:
        return True

    def write_framed(self, data, sizes) -> None:
        assert len(data) == int(sizes.sum())
        self.data += data
        self.sizes += sizes.tolist()


@settings(max_examples=60, deadline=None)
@given(slices=st.lists(st.lists(st.tuples(st.binary(min_size=1, max_size=3),
                                          st.binary(max_size=40)), max_size=30),
                       min_size=1, max_size=6),
       gaps=st.lists(st.integers(0, 50), min_size=7, max_size=7),
       one_buffer=st.booleans(), block=st.sampled_from([1, 64, 1 << 20]))
def test_write_sorted_gathers_the_rows_of_slices_in_one_buffer_or_in_several(
        slices, gaps, one_buffer, block):
    """Slices read into one buffer with other bytes between them (the rows
    of a run outside the bucket), or each in a buffer of its own, give the
    rows in (key, example) order, a block at a time."""
    slices = [sorted(rows) for rows in slices if rows] or [[(b"k", b"")]]
    framed = [tfrecord.frame_records([example for _, example in rows]) for rows in slices]
    if one_buffer:
        arena = bytearray()
        places = []
        for data, gap in zip(framed, gaps):
            arena += b"\xee" * gap  # bytes no slice holds
            places.append((len(arena), len(data)))
            arena += data
        whole = memoryview(arena)
        views = [whole[start:start + size] for start, size in places]
    else:
        views = [memoryview(bytes(data)) for data in framed]
    run_slices = [run_files.RunSlice([key for key, _ in rows], view, np.array(
        [len(example) + 16 for _, example in rows], dtype=np.int64))
        for rows, view in zip(slices, views)]
    writer = _CollectingWriter()
    original = bucket_sort.BLOCK
    bucket_sort.BLOCK = block  # several blocks: gathered ahead of the one written
    try:
        bucket_sort.write_sorted(writer, run_slices, run_files.KEY_VARIABLE)
    finally:
        bucket_sort.BLOCK = original
    ordered = sorted(row for rows in slices for row in rows)
    assert bytes(writer.data) == tfrecord.frame_records([example for _, example in ordered])
    assert writer.sizes == [len(example) + 16 for _, example in ordered]


# --- run files ----------------------------------------------------------------

def _rows(rng, count, key_is_example=False, width=None):
    """Random (key, example) rows, sorted; keys of `width` bytes when given
    (with zero bytes, which fixed-width comparisons must keep)."""
    rows = []
    for _ in range(count):
        example = rng.randbytes(rng.randint(0, 300))
        if key_is_example:
            key = example
        elif width:
            key = bytes(rng.choice(b"\0\1\x7f\xff") for _ in range(width))
        else:
            key = rng.randbytes(rng.randint(1, 20))
        rows.append((key, example))
    rows.sort()
    return rows


def _write_rows(fileobj, rows, kind, **options):
    keys = None if kind == "example" else [key for key, _ in rows]
    width = {"example": run_files.KEY_IS_EXAMPLE, "variable": run_files.KEY_VARIABLE,
             "fixed": 6}[kind]
    return run_files.write_sorted_run(fileobj, keys, [example for _, example in rows],
                                      key_width=width, **options)


def _pairs(run_slice):
    keys = run_slice.keys
    if not isinstance(keys, list):
        blob = keys.tobytes()
        keys = [blob[i:i + keys.itemsize] for i in range(0, len(blob), keys.itemsize)]
    return list(zip(keys, run_slice.examples()))


@pytest.mark.parametrize("kind", ["variable", "example", "fixed"])
def test_run_file_ranges_hold_exactly_the_keys_in_range(tmp_path, kind):
    rng = random.Random(11)
    rows = _rows(rng, 3000, kind == "example", width=6 if kind == "fixed" else None)
    path = str(tmp_path / "r.run")
    with open(path, "wb") as fileobj:
        shuffled = rows[:]
        rng.shuffle(shuffled)  # write_sorted_run sorts
        assert _write_rows(fileobj, shuffled, kind, prefix_len=6, index_every=2000) == len(rows)
    run = run_files.RunFile(path)
    assert run.num_records == len(rows) and len(run.offsets) > 50
    assert _pairs(run.read(b"", None)) == rows
    for _ in range(60):
        lo = bytes(rng.choice(b"\0\1\x7f\xff") for _ in range(rng.randint(0, 7)))
        hi = rng.choice([None, bytes(rng.choice(b"\0\1\x7f\xff")
                                     for _ in range(rng.randint(1, 7)))])
        if hi is not None and hi < lo:
            lo, hi = hi, lo
        expected = [row for row in rows if lo <= row[0] and (hi is None or row[0] < hi)]
        assert _pairs(run.read(lo, hi)) == expected, (lo, hi)
        streamed = list(run.stream(lo, hi))
        assert [(key, example) for key, example, _ in streamed] == expected
        assert b"".join(framed for _, _, framed in streamed) == tfrecord.frame_records(
            [example for _, example in expected])


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


def test_run_file_damage_is_reported_with_the_file_name(tmp_path):
    path = tmp_path / "r.run"
    buffer = io.BytesIO()
    _write_rows(buffer, _rows(random.Random(1), 50), "variable", prefix_len=8, index_every=100)
    path.write_bytes(buffer.getvalue()[:-3])
    with pytest.raises(run_files.RunFileError, match="r.run"):
        run_files.RunFile(str(path))


@pytest.mark.parametrize("where", ["local", "memory"])
def test_run_file_reads_mapped_local_runs_and_other_filesystems_alike(tmp_path, where):
    # Local runs are mapped, runs on other filesystems read: same rows.
    rows = _rows(random.Random(12), 800)
    path = (str(tmp_path / "r.run") if where == "local"
            else f"memory://{tmp_path.name}-{where}/r.run")
    with fsspec.open(path, "wb") as fileobj:
        _write_rows(fileobj, rows, "variable", prefix_len=8, index_every=2000)
    run = run_files.RunFile(path)
    lo, hi = rows[200][0], rows[600][0]
    for mapped in (False, True):
        assert _pairs(run.read(b"", None, mapped)) == rows
        assert _pairs(run.read(lo, hi, mapped)) == [row for row in rows if lo <= row[0] < hi]
    run.release()
    assert _pairs(run.read(lo, hi, mapped=True)) == [row for row in rows if lo <= row[0] < hi]
    assert [(key, example) for key, example, _ in run.stream(lo, None)] == [
        row for row in rows if lo <= row[0]]


def test_run_whose_sizes_overrun_its_records_is_reported(tmp_path):
    path = tmp_path / "r.run"
    buffer = io.BytesIO()
    _write_rows(buffer, _rows(random.Random(2), 50), "variable", prefix_len=8, index_every=100)
    data = bytearray(buffer.getvalue())
    sizes_offset = struct.unpack_from("<Q", data, len(data) - 64)[0]  # footer: first field
    struct.pack_into("<I", data, sizes_offset + 4 * 49, 1 << 20)  # the last row's size
    path.write_bytes(bytes(data))
    for mapped in (False, True):
        with pytest.raises(run_files.RunFileError, match="r.run: record cut short"):
            run_files.RunFile(str(path)).read(b"", None, mapped)


@pytest.mark.parametrize("how", ["renamed", "rewritten", "removed"])
def test_a_run_file_replaced_at_its_path_is_read_anew(tmp_path, how):
    """Local run layouts are kept by path between buckets; another file at
    the path (or none) is never read through the kept layout."""
    path = tmp_path / "r.run"
    first, second = _rows(random.Random(3), 300), _rows(random.Random(4), 500)
    with open(path, "wb") as fileobj:
        _write_rows(fileobj, first, "variable", prefix_len=8, index_every=500)
    assert _pairs(run_files.RunFile(str(path)).read(b"", None)) == first
    if how == "removed":
        path.unlink()
        with pytest.raises(run_files.RunFileError, match="r.run"):
            run_files.RunFile(str(path))
        return
    target = tmp_path / "new.run" if how == "renamed" else path
    with open(target, "wb") as fileobj:
        _write_rows(fileobj, second, "variable", prefix_len=8, index_every=500)
    if how == "renamed":
        os.replace(target, path)
    run = run_files.RunFile(str(path))
    assert run.num_records == len(second) and _pairs(run.read(b"", None)) == second


def test_runs_of_the_build_cache_stay_in_the_page_cache_when_read(tmp_path, monkeypatch):
    """A spill run's pages are dropped as the bucket reads them; the build
    cache's runs (read again by the next build) are not, and say so from
    the spill record to the run list the bucket sorters read."""
    path = tmp_path / "r.run"
    with open(path, "wb") as fileobj:
        _write_rows(fileobj, _rows(random.Random(5), 200), "variable", prefix_len=8,
                    index_every=500)
    dropped = []
    monkeypatch.setattr(run_files, "drop_behind", lambda *args: dropped.append(args[1:]))
    size = run_files.RunFile(str(path)).estimate(b"", None)[1]
    for keep in (False, True):
        arena = memoryview(bytearray(size))
        run_files.RunFile(str(path), keep_pages=keep).read(b"", None, into=arena)
    assert dropped == [(0, size)]

    records = [shard_plan.SpillRecord("train", str(path), 200, size, (), kept=True),
               shard_plan.SpillRecord("train", str(tmp_path / "s.run"), 5, 50, ())]
    runs = shard_plan.runs_of(records)
    assert [run.kept for run in runs] == [True, False]
    spill.write_run_list(str(tmp_path / "runs.json"), runs)
    assert spill.read_run_list(str(tmp_path / "runs.json")) == runs


def test_run_stream_reads_records_larger_than_a_block(tmp_path):
    rows = sorted((bytes([index]), bytes([index]) * (5 << 20)) for index in range(3))
    path = str(tmp_path / "big.run")
    with open(path, "wb") as fileobj:
        _write_rows(fileobj, rows, "variable", prefix_len=4, index_every=1 << 30)
    run = run_files.RunFile(path)
    assert [(key, example) for key, example, _ in run.stream(b"", None)] == rows


# --- bucket sorting and chunks ------------------------------------------------

def _write_runs(tmp_path, rng, count_per_run, runs):
    infos = []
    for index in range(runs):
        rows = _rows(rng, count_per_run)
        path = str(tmp_path / f"run{index}.run")
        with open(path, "wb") as fileobj:
            _write_rows(fileobj, rows, "variable", prefix_len=8, index_every=4096)
        infos.append(RunInfo("train", path, len(rows), 0))
    return infos


def test_external_merge_writes_the_same_bucket_as_the_in_memory_sort(tmp_path):
    rng = random.Random(5)
    runs = _write_runs(tmp_path, rng, 400, 9)
    bucket = BucketRange("train", 0, b"\x20", b"\xe0")
    size = sum(chunk.length for chunk in
               bucket_sort.measure_bucket(bucket, runs, "runs.json").chunks)
    options = dict(cell_bytes=8000, gzip_level=3, prefix_len=8, index_every=4096)
    in_memory = _sorted_whole(bucket, runs, size, out_dir=str(tmp_path / "a"),
                              scratch_dir=str(tmp_path / "sa"), memory_bytes=1 << 30,
                              fan_in=64, **options)
    merged = _sorted_whole(bucket, runs, size, out_dir=str(tmp_path / "b"),
                           scratch_dir=str(tmp_path / "sb"), memory_bytes=0, fan_in=2, **options)
    with open(in_memory.path, "rb") as one, open(merged.path, "rb") as two:
        assert one.read() == two.read()
    assert in_memory.chunks == merged.chunks
    assert not list((tmp_path / "sb").iterdir())  # intermediate merges removed

    expected = sorted(row for run in runs
                      for row in _pairs(run_files.RunFile(run.path).read(bucket.lo, bucket.hi)))
    data = open(in_memory.path, "rb").read()
    records = []
    for chunk in in_memory.chunks:
        # each chunk is one complete member
        piece = gzip.decompress(data[chunk.offset:chunk.offset + chunk.length])
        chunk_records = list(tfrecord.iter_records(io.BytesIO(piece), compression="none"))
        assert len(chunk_records) == chunk.num_records
        records += chunk_records
    assert records == [example for _, example in expected]
    assert len(in_memory.chunks) > 3


def test_buckets_written_one_after_another_reuse_the_read_buffer_safely(tmp_path):
    # Shards read their buckets into one buffer per thread, reused from
    # bucket to bucket (larger, smaller, after a release): every range must
    # still have the bytes of its bucket written as chunks.
    rng = random.Random(8)
    runs = _write_runs(tmp_path, rng, 400, 5)
    options = dict(scratch_dir=str(tmp_path / "scratch"), memory_bytes=1 << 30, fan_in=64,
                   prefix_len=8, index_every=4096)
    buckets = [BucketRange("train", 0, b"", b"\xc0"), BucketRange("train", 1, b"\xc0", b"\xd0"),
               BucketRange("train", 2, b"\x20", b"\x90"), BucketRange("train", 3, b"\xd0", None)]
    for _ in range(2):
        for bucket in buckets:
            # What the bucket holds, read without the shared buffer.
            expected = sorted(row for run in runs for row in
                              _pairs(run_files.RunFile(run.path).read(bucket.lo, bucket.hi)))
            size = sum(len(tfrecord.frame_records([example])) for _, example in expected)
            out = io.BytesIO()
            bucket_sort.write_bucket_rows(out, bucket, 0, row_shard_thresholds(size, 1), 0, runs,
                                          **options)
            records = list(tfrecord.iter_records(io.BytesIO(out.getvalue()), compression="none"))
            assert records == [example for _, example in expected] and records
        bucket_sort.release_read_arena()


def test_sort_bucket_cells_rejects_a_run_that_does_not_match_its_report(tmp_path):
    runs = _write_runs(tmp_path, random.Random(2), 20, 1)
    wrong = [runs[0]._replace(num_records=21)]
    with pytest.raises(run_files.RunFileError, match="run0.run"):
        _sorted_whole(BucketRange("train", 0, b"", None), wrong, 10_000, out_dir=str(tmp_path),
                      scratch_dir=str(tmp_path), cell_bytes=100, memory_bytes=1 << 20, fan_in=4,
                      prefix_len=8, index_every=4096)


def test_sort_bucket_cells_rejects_a_bucket_of_other_bytes_than_measured(tmp_path):
    runs = _write_runs(tmp_path, random.Random(2), 20, 1)
    bucket = BucketRange("train", 0, b"", None)
    size = sum(chunk.length for chunk in
               bucket_sort.measure_bucket(bucket, runs, "runs.json").chunks)
    with pytest.raises(run_files.RunFileError, match="sorted .* bytes, measured"):
        _sorted_whole(bucket, runs, size + 1, out_dir=str(tmp_path), scratch_dir=str(tmp_path),
                      cell_bytes=100, memory_bytes=1 << 20, fan_in=4, prefix_len=8,
                      index_every=4096)


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
