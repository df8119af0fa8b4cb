"""ShardTuning: what follows the input size and what never does (`writer.tuning`)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from recordforge.transforms.writer.tuning import (
    KEY_GZIP_BUCKET_CELLS,
    MAX_BUCKETS,
    ShardTuning,
)


def test_hash_buckets_follow_the_input_size_within_bounds():
    default = ShardTuning().hash_buckets
    assert [ShardTuning.for_input(size).hash_buckets for size in (None, 0, 1, 100 << 30)] == [
        default] * 4
    assert ShardTuning.for_input((300 << 30) + 1).hash_buckets == 301
    assert ShardTuning.for_input(10 * 10**12).hash_buckets == MAX_BUCKETS == 4096


# Every size but the bucket count decides bytes: none may follow the input,
# or `WriteDataset` (which cannot know its input's size) and `build` would
# write different shards from the same rows.
@settings(max_examples=200, deadline=None)
@given(st.one_of(st.none(), st.integers(min_value=0, max_value=1 << 50)))
def test_only_the_bucket_count_follows_the_input_size(input_bytes):
    sized = ShardTuning.for_input(input_bytes)
    assert {**vars(sized), "hash_buckets": 0} == {**vars(ShardTuning()), "hash_buckets": 0}


def test_key_ordered_gzip_buckets_hold_enough_cells_that_few_are_shared():
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
