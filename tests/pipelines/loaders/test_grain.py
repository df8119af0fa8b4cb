"""recordforge.grain with the real Grain package: its MapDataset over our
source, and its DataLoader (two worker processes, two simulated hosts by
Grain's own ShardOptions) reading every record once, values equal to the
`tfrecord` package's reading."""

from __future__ import annotations

import collections

import grain
import pytest

import recordforge.grain as rf_grain


def test_map_dataset_reads_the_split_in_shard_order_like_the_oracle(built_sample, oracle):
    source = rf_grain.RecordSource(str(built_sample), "test")
    theirs = oracle.rows(built_sample / "1.0.0", "test")
    rows = list(grain.MapDataset.source(source))
    assert len(rows) == len(theirs) == len(source)
    assert all(oracle.same(a, b) for a, b in zip(rows, theirs))
    shuffled = grain.MapDataset.source(source).shuffle(seed=3)
    assert sorted(int(row["id"]) for row in shuffled) == sorted(int(r["id"]) for r in rows)


@pytest.mark.parametrize("workers", [0, 2])
def test_data_loader_with_shard_options_reads_every_record_once(built_sample, oracle, workers):
    source = rf_grain.RecordSource(str(built_sample), "train")
    theirs = {int(row["id"][0]): row for row in oracle.rows(built_sample / "1.0.0", "train")}
    seen, per_host = collections.Counter(), []
    for host in range(2):
        sampler = grain.samplers.IndexSampler(
            len(source), shard_options=grain.sharding.ShardOptions(host, 2, drop_remainder=True),
            shuffle=True, num_epochs=1, seed=5)
        rows = list(grain.DataLoader(data_source=source, sampler=sampler, worker_count=workers))
        per_host.append(len(rows))
        seen.update(int(row["id"]) for row in rows)
        assert all(oracle.same(row, theirs[int(row["id"])]) for row in rows)
    assert per_host[0] == per_host[1] == len(source) // 2
    assert set(seen.values()) == {1}


def test_gzip_output_is_refused(gzip_sample):
    with pytest.raises(rf_grain.NoIndexFiles, match="gzip output has no random access"):
        rf_grain.RecordSource(str(gzip_sample), "train")
