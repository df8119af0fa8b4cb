"""output.shard_count_multiple: a split's shard count is a multiple of N,
every shard holds records and keeps the size bounds the docs promise, on
both exchanges; a split too small for N shards fails, naming it."""

from __future__ import annotations

import collections
import os
import random

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from hypothesis import HealthCheck, Phase, given, settings, strategies as st
from recordforge.transforms import tfrecord
from recordforge.transforms.layout import parse_shard_file_name
from recordforge.transforms.writer import ShardTuning, WriteShards
from recordforge.transforms.writer.shard_cuts import (ShardCountError, row_shard_count,
                                                      row_shard_thresholds, shards_of_rows)


def _old_count(total, shard_size, largest, written=None):
    """The count before shard_count_multiple existed, written out again."""
    written = total if written is None else written
    return max(1, min(-(-written // shard_size), total // max(1, largest)))


@settings(max_examples=300, deadline=None)
@given(sizes=st.lists(st.integers(min_value=16, max_value=5000), min_size=1, max_size=400),
       shard_size=st.integers(min_value=1000, max_value=200_000),
       multiple=st.integers(min_value=1, max_value=12))
def test_the_count_divides_and_every_shard_keeps_its_bounds(sizes, shard_size, multiple):
    sizes = np.array(sizes, dtype=np.int64)
    total, largest = int(sizes.sum()), int(sizes.max())
    if multiple == 1:  # unset: the count of today
        assert row_shard_count(total, shard_size, largest) == _old_count(
            total, shard_size, largest)
    room = total // largest
    if room < multiple:
        with pytest.raises(ShardCountError, match="split 'train': output.shard_count_multiple "
                                                  f"is {multiple}, but"):
            row_shard_count(total, shard_size, largest, multiple=multiple, split="train")
        return
    count = row_shard_count(total, shard_size, largest, multiple=multiple, split="train")
    assert count % multiple == 0 and count >= multiple
    wanted = -(-total // shard_size)
    if wanted <= room // multiple * multiple:
        assert count - multiple < max(wanted, multiple) <= count  # rounded up, no further
    starts = np.cumsum(sizes) - sizes
    shards = shards_of_rows(starts, sizes, row_shard_thresholds(total, count))
    held = np.bincount(shards, weights=sizes, minlength=count)
    assert (np.bincount(shards, minlength=count) > 0).all()  # every shard holds a record
    mean = total / count
    assert np.abs(held - mean).max() <= largest  # within a record of the mean
    if count >= wanted:
        # At most shard_size plus a record: 1.1 x shard_size where records
        # are a tenth of a shard or less, as docs/contract.md promises.
        assert held.max() <= shard_size + largest


# -- in Beam, both exchanges -------------------------------------------------

SPLITS = [("train", 0.8), ("test", 0.2)]
TUNING = ShardTuning(run_bytes=100_000, bucket_bytes=60_000, hash_buckets=4, lanes=3,
                     route_bytes=10_000, max_chunk_bytes=4_000)


def _rows(count, seed, small=200, large=1200):
    rng = random.Random(seed)
    return [(b"%010d" % rng.randrange(10**10), rng.randbytes(rng.randint(small, large)))
            for _ in range(count)]


def _write(staging, rows, *, exchange, multiple, shard_size, compression="none",
           shuffle=True):
    pipeline = beam.Pipeline(options=PipelineOptions(["--direct_running_mode=in_memory"]))
    _ = (pipeline
         | beam.Create([rows[i:i + 50] for i in range(0, len(rows), 50)])
         | WriteShards(staging, dataset_name="multiple", splits=SPLITS, shuffle=shuffle,
                       shard_size=shard_size, compression=compression, tuning=TUNING,
                       exchange=exchange, shard_count_multiple=multiple, index=False))
    pipeline.run().wait_until_finish()


def _check(staging, rows, multiple, shard_size, compression):
    """Every split's shards: a multiple of `multiple`, named 0..count-1 of
    count, each holding records, all rows once, sizes within the bounds."""
    by_split = collections.defaultdict(list)
    for name in os.listdir(staging):
        split, index, count, _ = parse_shard_file_name(name)
        by_split[split].append((index, count, os.path.getsize(os.path.join(staging, name)),
                                sum(1 for _ in tfrecord.read_records(
                                    os.path.join(staging, name), compression=compression))))
    assert set(by_split) == {"train", "test"}
    assert sum(records for shards in by_split.values() for *_, records in shards) == len(rows)
    largest = max(len(example) for _, example in rows) + tfrecord.FRAMING
    for split, shards in by_split.items():
        count = shards[0][1]
        assert count % multiple == 0 and sorted(index for index, *_ in shards) == list(
            range(count)) and {of for _, of, *_ in shards} == {count}
        assert all(records > 0 for *_, records in shards)
        if compression == "none":
            sizes = [size for _, _, size, _ in shards]
            assert max(sizes) - min(sizes) <= 2 * largest
            assert max(sizes) <= shard_size + largest


# A pipeline run per example: a few of them, not shrunk (a failure names its example).
@settings(max_examples=3, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(count=st.integers(min_value=150, max_value=700), seed=st.integers(0, 1000),
       multiple=st.integers(min_value=2, max_value=6),
       shard_size=st.integers(min_value=20_000, max_value=120_000))
@pytest.mark.parametrize("exchange", ["files", "shuffle"])
def test_both_exchanges_give_a_multiple_of_shards(tmp_path_factory, exchange, count, seed,
                                                  multiple, shard_size):
    rows = _rows(count, seed)
    staging = str(tmp_path_factory.mktemp("multiple") / "staging")
    _write(staging, rows, exchange=exchange, multiple=multiple, shard_size=shard_size)
    _check(staging, rows, multiple, shard_size, "none")


@pytest.mark.parametrize("exchange", ["files", "shuffle"])
@pytest.mark.parametrize("shuffle", [True, False])
def test_gzip_shards_divide_too(tmp_path, exchange, shuffle):
    """Shuffled gzip (counted from the ratio sample) and key-ordered gzip
    (cut between chunks)."""
    rows = _rows(600, 7)
    _write(str(tmp_path / "s"), rows, exchange=exchange, multiple=4, shard_size=40_000,
           compression="gzip", shuffle=shuffle)
    _check(str(tmp_path / "s"), rows, 4, 40_000, "gzip")


@pytest.mark.parametrize("exchange", ["files", "shuffle"])
def test_a_split_too_small_for_the_multiple_fails_naming_it(tmp_path, exchange):
    rows = _rows(40, 1)  # about 32 rows in train, 8 in test: 16 shards need more
    with pytest.raises(Exception, match="split '(train|test)': output.shard_count_multiple is 16, but "):
        _write(str(tmp_path / "s"), rows, exchange=exchange, multiple=16, shard_size=20_000)


def test_the_multiple_must_be_a_positive_integer(tmp_path):
    for bad in (0, -2, True, 2.0):
        with pytest.raises(ValueError, match="shard_count_multiple must be a positive integer"):
            WriteShards(str(tmp_path), dataset_name="m", splits=SPLITS, shuffle=True,
                        shard_size=1000, compression="none", shard_count_multiple=bad)
