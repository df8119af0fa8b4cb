"""Bucket ranges, hash buckets and sampled bounds (`writer.bucket_plan`)."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st
from recordforge.transforms.splits import SplitAssigner
from recordforge.transforms.writer import (
    run_format,
    shuffle_packets,
    tuning,
)
from recordforge.transforms.writer.bucket_plan import (
    bucket_bounds_of,
    hash_buckets_of,
    plan_bucket_ranges,
    runs_of,
    sample_of,
)
from recordforge.transforms.writer.elements import RunInfo, SampleEntry, SpillRecord


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
    assert 4000 <= len(ranges) <= tuning.MAX_BUCKETS == 4096
    assert ranges[0].lo == b"" and ranges[-1].hi is None


def test_hash_buckets_are_equal_ranges_in_digest_order():
    rng = random.Random(3)
    digests = sorted(rng.randbytes(16) for _ in range(5000)) + [b"\0" * 16, b"\xff" * 16]
    digests.sort()
    for count in (1, 3, 64, 256):
        buckets = hash_buckets_of(b"".join(digests), count).tolist()
        assert buckets == sorted(buckets) and 0 <= buckets[0] and buckets[-1] == count - 1
        assert buckets == [int.from_bytes(d[:4], "big") * count >> 32 for d in digests]

@settings(max_examples=150, deadline=None)
@given(keys=st.lists(st.binary(max_size=6), max_size=300), count=st.integers(1, 40),
       prefix_len=st.integers(1, 8))
def test_bounds_of_sampled_keys_share_them_evenly_and_keep_equal_prefixes_together(
        keys, count, prefix_len):
    bounds = bucket_bounds_of(keys, count, prefix_len)
    assert bounds[0] == b"" and list(bounds) == sorted(set(bounds)) and len(bounds) <= count
    buckets = shuffle_packets.bucket_of_keys(bounds, run_format.KEY_VARIABLE, keys).tolist()
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
