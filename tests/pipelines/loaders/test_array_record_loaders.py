"""ArrayRecord versions read by the training readers: recordforge.grain's
RecordSource under the real Grain (MapDataset and DataLoader with two
workers and two simulated hosts) and recordforge.torch read every record
once, equal to the independent reading of the same sample built as
TFRecord; damage, truncation and a replaced shard raise, locally and on a
store the package cannot read directly."""

from __future__ import annotations

import collections
import json
import pathlib
import shutil
import uuid

import fsspec
import grain
import pytest

import recordforge.grain as rf_grain
import recordforge.torch as rf_torch
from recordforge.pipelines.publish.held_manifest import DatasetCorrupt


def _first_shard(root: pathlib.Path, split="train") -> pathlib.Path:
    manifest = json.loads((root / "1.0.0" / "manifest.json").read_text())
    return root / "1.0.0" / manifest["splits"][split]["shards"][0]["file"]


def test_map_dataset_reads_every_record_in_the_tfrecord_builds_order(array_record_sample,
                                                                     built_sample, oracle):
    source = rf_grain.RecordSource(str(array_record_sample), "test")
    theirs = oracle.rows(built_sample / "1.0.0", "test")
    rows = list(grain.MapDataset.source(source))
    assert len(rows) == len(theirs) == len(source)
    assert all(oracle.same(a, b) for a, b in zip(rows, theirs))
    assert not list((array_record_sample / "1.0.0").glob("*.index"))


def test_data_loader_on_two_hosts_reads_every_record_once(array_record_sample, built_sample,
                                                          oracle):
    source = rf_grain.RecordSource(str(array_record_sample), "train")
    theirs = {int(row["id"][0]): row for row in oracle.rows(built_sample / "1.0.0", "train")}
    seen, per_host = collections.Counter(), []
    for host in range(2):
        sampler = grain.samplers.IndexSampler(
            len(source), shard_options=grain.sharding.ShardOptions(host, 2, drop_remainder=True),
            shuffle=True, num_epochs=1, seed=5)
        rows = list(grain.DataLoader(data_source=source, sampler=sampler, worker_count=2))
        per_host.append(len(rows))
        seen.update(int(row["id"]) for row in rows)
        assert all(oracle.same(row, theirs[int(row["id"])]) for row in rows)
    assert per_host[0] == per_host[1] == len(source) // 2
    assert set(seen.values()) == {1}


@pytest.mark.parametrize("check", ["sha256", "crc"])
@pytest.mark.parametrize("shuffle", [False, True])
def test_torch_reads_every_record_once_on_two_ranks(array_record_sample, built_sample, oracle,
                                                    check, shuffle):
    theirs = {int(row["id"][0]): row for row in oracle.rows(built_sample / "1.0.0", "train")}
    seen = collections.Counter()
    for rank in range(2):
        dataset = rf_torch.RecordDataset(str(array_record_sample), "train", rank=rank,
                                         world_size=2, shuffle=shuffle, seed=4, check=check)
        rows = [row for batch in rf_torch.DataLoader(dataset, batch_size=16, num_workers=2,
                                                     collate_fn=list) for row in batch]
        assert len(rows) == len(theirs) // 2
        seen.update(int(row["id"]) for row in rows)
        assert all(oracle.same(row, theirs[int(row["id"])]) for row in rows)
    assert set(seen.values()) == {1}


@pytest.fixture
def damaged_copy(array_record_sample, tmp_path):
    return pathlib.Path(shutil.copytree(array_record_sample, tmp_path / "copy"))


def test_a_truncated_shard_raises(damaged_copy):
    shard = _first_shard(damaged_copy)
    data = shard.read_bytes()
    shard.write_bytes(data[:len(data) // 2])
    source = rf_grain.RecordSource(str(damaged_copy), "train")
    with pytest.raises(DatasetCorrupt, match=f"{shard.name}: holds {len(data) // 2} bytes"):
        source[0]
    with pytest.raises(DatasetCorrupt, match=shard.name):
        list(rf_torch.RecordDataset(str(damaged_copy), "train"))


def test_a_damaged_chunk_raises_where_it_is_read(damaged_copy):
    shard = _first_shard(damaged_copy)
    data = bytearray(shard.read_bytes())
    data[len(data) // 4] ^= 0xFF  # same size: found by the chunk hash, or the sha256
    shard.write_bytes(bytes(data))
    source = rf_grain.RecordSource(str(damaged_copy), "train")
    manifest = json.loads((damaged_copy / "1.0.0" / "manifest.json").read_text())
    count = manifest["splits"]["train"]["shards"][0]["num_examples"]
    with pytest.raises(DatasetCorrupt, match=shard.name):
        for position in range(count):
            source[position]
    with pytest.raises(DatasetCorrupt, match=shard.name):
        list(rf_torch.RecordDataset(str(damaged_copy), "train"))


def _to_memory(root: pathlib.Path) -> str:
    """A copy of the output root on fsspec's in-memory store."""
    url = f"memory://array-record-{uuid.uuid4().hex}/out"
    fs = fsspec.filesystem("memory")
    for path in root.rglob("*"):
        if path.is_file():
            fs.pipe(f"{url}/{path.relative_to(root).as_posix()}", path.read_bytes())
    return url


def test_a_store_version_is_read_from_checked_local_copies(array_record_sample, built_sample,
                                                           oracle):
    url = _to_memory(array_record_sample)
    source = rf_grain.RecordSource(url, "test")
    theirs = oracle.rows(built_sample / "1.0.0", "test")
    assert all(oracle.same(source[i], row) for i, row in enumerate(theirs))
    fs = fsspec.filesystem("memory")
    file = json.loads(fs.cat(f"{url}/1.0.0/manifest.json"))["splits"]["train"]["shards"][0]["file"]
    data = bytearray(fs.cat(f"{url}/1.0.0/{file}"))
    data[-1] ^= 0xFF  # a byte no chunk hash covers: only the sha256 sees it
    fs.pipe(f"{url}/1.0.0/{file}", bytes(data))
    with pytest.raises(DatasetCorrupt, match="sha256"):
        rf_grain.RecordSource(url, "train")[0]


def test_grains_own_array_record_source_reads_the_shards(array_record_sample, built_sample):
    """Grain's ArrayRecordDataSource (which warns unless group_size is 1)
    opens the shards named by the manifest: the raw records of the TFRecord
    build, in order."""
    from tfrecord.reader import tfrecord_iterator
    version = array_record_sample / "1.0.0"
    shards = json.loads((version / "manifest.json").read_text())["splits"]["train"]["shards"]
    source = grain.sources.ArrayRecordDataSource([str(version / s["file"]) for s in shards])
    plain = built_sample / "1.0.0"
    expected = [bytes(view) for s in shards for view in tfrecord_iterator(
        str(plain / s["file"].replace(".array_record", ".tfrecord")))]
    assert len(source) == len(expected)
    assert [source[i] for i in range(len(source))] == expected
