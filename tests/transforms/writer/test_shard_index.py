"""Index files from WriteShards on every way a shard is written (file and
shuffle exchanges, shuffled and key order, one process and two, the local
disk and a store through fsspec): byte for byte what the `tfrecord`
package's own index writer makes of each shard, and what its reader takes
to read a shard whole or split between workers."""

from __future__ import annotations

import hashlib
import json
import os
import random
import uuid

import apache_beam as beam
import fsspec
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from tfrecord import example_pb2
from tfrecord.reader import tfrecord_iterator
from tfrecord.tools.tfrecord2idx import create_index

from recordforge.transforms.writer import ShardTuning, WriteShards

SPLITS = [("train", 0.75), ("test", 0.25)]
TUNING = ShardTuning(run_bytes=200_000, bucket_bytes=150_000, hash_buckets=5, lanes=3,
                     route_bytes=20_000)
SHARD_SIZE = 250_000


def _rows(count=1500, seed=3):
    """Keyed Example rows of unequal sizes (a few of several KB)."""
    rng = random.Random(seed)
    rows = []
    for number in range(count):
        example = example_pb2.Example()
        feature = example.features.feature
        feature["id"].int64_list.value.append(number)
        feature["blob"].bytes_list.value.append(
            rng.randbytes(rng.choice([0, 40, 300, 600, 5000])))
        rows.append((b"%08d" % rng.randrange(10**8), example.SerializeToString()))
    return rows


ROWS = _rows()


class _Save(beam.DoFn):
    def __init__(self, directory):
        self._directory = directory

    def process(self, element):
        os.makedirs(self._directory, exist_ok=True)
        with open(os.path.join(self._directory, f"{uuid.uuid4().hex}.json"), "w") as out:
            json.dump(element, out)


def _write(staging, metadata_dir, *, exchange, shuffle=True, args=(), index=None,
           compression="none"):
    """The shard metadata dicts WriteShards gives for ROWS."""
    pipeline = beam.Pipeline(options=PipelineOptions(list(args)))
    _ = (pipeline
         | beam.Create([ROWS[i:i + 100] for i in range(0, len(ROWS), 100)])
         | WriteShards(staging, dataset_name="index", splits=SPLITS, shuffle=shuffle,
                       shard_size=SHARD_SIZE, compression=compression, tuning=TUNING,
                       exchange=exchange, index=index)
         | beam.ParDo(_Save(metadata_dir)))
    pipeline.run().wait_until_finish()
    items = [json.load(open(os.path.join(metadata_dir, name)))
             for name in os.listdir(metadata_dir)]
    return sorted(items, key=lambda item: item["file"])


def _records(path):
    return [bytes(view) for view in tfrecord_iterator(path)]


def _check_indexes(staging, metadata, tmp_path):
    """Every shard's index, fetched from `staging` (any fsspec URL), is the
    `tfrecord` package's index of the shard; its reader reads the shard
    whole through it, and split 2, 3 and 5 ways (as it splits a shard
    between DataLoader workers) into parts that are the shard's records
    exactly once."""
    fs, root = fsspec.core.url_to_fs(staging)
    assert len({item["split"] for item in metadata}) == 2
    for item in metadata:
        index = item["index"]
        assert index["file"] == item["file"] + ".index"
        shard_path, index_path = tmp_path / item["file"], tmp_path / index["file"]
        shard_path.write_bytes(fs.cat_file(f"{root}/{item['file']}"))
        index_path.write_bytes(fs.cat_file(f"{root}/{index['file']}"))
        data = index_path.read_bytes()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (index["num_bytes"],
                                                                 index["sha256"])
        create_index(str(shard_path), str(tmp_path / "reference.index"))
        assert data == (tmp_path / "reference.index").read_bytes()
        records = _records(str(shard_path))
        # The package reads a one-line index as a vector and fails; shards here hold more.
        assert len(records) == item["num_examples"] > 1
        for workers in (1, 2, 3, 5):
            parts = [[bytes(view) for view in tfrecord_iterator(
                str(shard_path), str(index_path), shard=(worker, workers))]
                for worker in range(workers)]
            assert [record for part in parts for record in part] == records
    files = fs.ls(root, detail=False)
    shards = {item["file"] for item in metadata}
    indexes = {item["index"]["file"] for item in metadata}
    assert {os.path.basename(path) for path in files} - {"_tmp"} == shards | indexes


CASES = {
    "files-shuffled": dict(exchange="files"),
    "files-key-order": dict(exchange="files", shuffle=False),
    "shuffle-shuffled": dict(exchange="shuffle"),
    "shuffle-key-order": dict(exchange="shuffle", shuffle=False),
    "files-two-processes": dict(exchange="files", args=(
        "--direct_running_mode=multi_processing", "--direct_num_workers=2")),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_shard_has_the_index_the_tfrecord_package_makes(tmp_path, case):
    staging = str(tmp_path / "staging")
    metadata = _write(staging, str(tmp_path / "metadata"), **CASES[case])
    (tmp_path / "read").mkdir()
    _check_indexes(staging, metadata, tmp_path / "read")


def test_indexes_on_a_store_written_through_fsspec(tmp_path):
    staging = f"memory://shard-index-{uuid.uuid4().hex}/staging"
    try:
        metadata = _write(staging, str(tmp_path / "metadata"), exchange="shuffle")
        _check_indexes(staging, metadata, tmp_path)
    finally:
        fs, path = fsspec.core.url_to_fs(staging)
        fs.rm(path, recursive=True)


def test_without_an_index_the_shards_are_the_same_bytes(tmp_path):
    with_index = _write(str(tmp_path / "a"), str(tmp_path / "ma"), exchange="files")
    without = _write(str(tmp_path / "b"), str(tmp_path / "mb"), exchange="files", index=False)
    assert "index" not in without[0] and all("index" in item for item in with_index)
    # The same shards; the writer's CRC-32Cs name the index files too.
    assert [{key: item[key] for key in item if key not in ("index", "written_crc32c")}
             for item in with_index] == [
        {key: item[key] for key in item if key != "written_crc32c"} for item in without]
    assert [{file: crc for file, crc in item["written_crc32c"].items()
             if not file.endswith(".index")} for item in with_index] == [
        item["written_crc32c"] for item in without]
    assert sorted(os.listdir(tmp_path / "b")) == [item["file"] for item in without]


def test_gzip_shards_have_no_index_and_cannot_be_asked_for_one(tmp_path):
    metadata = _write(str(tmp_path / "gz"), str(tmp_path / "m"), exchange="files",
                      compression="gzip")
    assert all("index" not in item for item in metadata)
    assert not [name for name in os.listdir(tmp_path / "gz") if name.endswith(".index")]
    with pytest.raises(ValueError, match="gzip has no random access"):
        WriteShards(str(tmp_path), dataset_name="index", splits=SPLITS, shuffle=True,
                    shard_size=SHARD_SIZE, compression="gzip", index=True)


def test_the_tfrecord_packages_torch_dataset_reads_every_record_through_the_index(tmp_path):
    """`tfrecord.torch.TFRecordDataset(path, index_path)`, where torch is
    installed (the `readers` extra brings it; the core never needs it)."""
    pytest.importorskip("torch")
    from tfrecord.torch.dataset import TFRecordDataset

    staging = str(tmp_path / "staging")
    metadata = _write(staging, str(tmp_path / "metadata"), exchange="files")
    for item in metadata:
        shard = os.path.join(staging, item["file"])
        ids = sorted(int(example["id"][0]) for example in TFRecordDataset(
            shard, os.path.join(staging, item["index"]["file"]), {"id": "int"}))
        expected = sorted(example_pb2.Example.FromString(record).features.feature["id"]
                          .int64_list.value[0] for record in _records(shard))
        assert ids == expected
    # Two DataLoader workers: the dataset splits the shard between them by
    # its index, each record read once.
    import torch.utils.data

    item = metadata[0]
    shard = os.path.join(staging, item["file"])
    loader = torch.utils.data.DataLoader(TFRecordDataset(
        shard, os.path.join(staging, item["index"]["file"]), {"id": "int"}),
        batch_size=None, num_workers=2)
    ids = [int(example["id"][0]) for example in loader]
    assert sorted(ids) == sorted(example_pb2.Example.FromString(record).features.feature["id"]
                                 .int64_list.value[0] for record in _records(shard))
