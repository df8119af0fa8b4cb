"""ArrayRecord shards from WriteShards (`file_format="array_record"`): on
both exchanges, in one process and two, on the local disk and on a store
through fsspec, the `array_record` package's own reader finds in each
shard exactly the records of the TFRecord shard of the same build, in the
same order, and a rerun writes the same bytes."""

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

from recordforge.transforms.writer import ShardTuning, WriteShards

array_record_module = pytest.importorskip("array_record.python.array_record_module")

SPLITS = [("train", 0.75), ("test", 0.25)]
TUNING = ShardTuning(run_bytes=200_000, bucket_bytes=150_000, hash_buckets=5, lanes=3,
                     route_bytes=20_000)
SHARD_SIZE = 250_000
MULTI = ("--direct_running_mode=multi_processing", "--direct_num_workers=2")


def _rows(count=1200, seed=5):
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


def _write(staging, metadata_dir, *, exchange="files", shuffle=True, args=(),
           file_format="array_record"):
    pipeline = beam.Pipeline(options=PipelineOptions(list(args)))
    _ = (pipeline
         | beam.Create([ROWS[i:i + 100] for i in range(0, len(ROWS), 100)])
         | WriteShards(staging, dataset_name="ar", splits=SPLITS, shuffle=shuffle,
                       shard_size=SHARD_SIZE, compression="none", tuning=TUNING,
                       exchange=exchange, file_format=file_format)
         | beam.ParDo(_Save(metadata_dir)))
    pipeline.run().wait_until_finish()
    items = [json.load(open(os.path.join(metadata_dir, name)))
             for name in os.listdir(metadata_dir)]
    return sorted(items, key=lambda item: item["file"])


def _array_records(path):
    reader = array_record_module.ArrayRecordReader(path)
    try:
        return reader.read(0, reader.num_records())
    finally:
        reader.close()


def _tfrecord_records(path):
    return [bytes(view) for view in tfrecord_iterator(path)]


@pytest.fixture(scope="module")
def tfrecord_build(tmp_path_factory):
    """The reference: the same rows written as TFRecord shards."""
    root = tmp_path_factory.mktemp("tfrecord")
    metadata = _write(str(root / "staging"), str(root / "meta"), file_format="tfrecord")
    return root / "staging", metadata


def _check_against(tfrecord_build, staging, metadata):
    """The ArrayRecord shards hold the TFRecord shards' records, in order,
    shard for shard, and their metadata is true of the files."""
    reference_dir, reference = tfrecord_build
    assert [item["file"].replace(".tfrecord", ".array_record") for item in reference] \
        == [item["file"] for item in metadata]
    for ours, theirs in zip(metadata, reference):
        path = os.path.join(staging, ours["file"])
        records = _array_records(path)
        assert records == _tfrecord_records(str(reference_dir / theirs["file"]))
        assert ours["num_examples"] == len(records) == theirs["num_examples"]
        data = open(path, "rb").read()
        assert ours["num_bytes"] == len(data)
        assert ours["sha256"] == hashlib.sha256(data).hexdigest()
        assert "index" not in ours
    assert sorted(os.listdir(staging)) == [item["file"] for item in metadata]


@pytest.mark.parametrize("exchange,args", [("files", ()), ("shuffle", ()), ("files", MULTI)],
                         ids=["files", "shuffle", "files-2-workers"])
def test_array_record_shards_hold_the_tfrecord_shards_records(tmp_path, tfrecord_build,
                                                              exchange, args):
    staging = str(tmp_path / "staging")
    metadata = _write(staging, str(tmp_path / "meta"), exchange=exchange, args=args)
    _check_against(tfrecord_build, staging, metadata)


def test_same_bytes_on_a_rerun_and_on_two_workers(tmp_path):
    one = _write(str(tmp_path / "a"), str(tmp_path / "ma"))
    two = _write(str(tmp_path / "b"), str(tmp_path / "mb"), args=MULTI)
    assert [(item["file"], item["sha256"]) for item in one] \
        == [(item["file"], item["sha256"]) for item in two]


def test_shards_written_to_a_store_through_fsspec(tmp_path, tfrecord_build):
    """A store that is not the local disk: each shard is written locally,
    then copied into place through fsspec and fingerprinted."""
    root = f"memory://ar-{uuid.uuid4().hex}/staging"
    metadata = _write(root, str(tmp_path / "meta"))
    fs = fsspec.filesystem("memory")
    local = tmp_path / "copy"
    local.mkdir()
    for item in metadata:
        assert item["stored"]["size"] == item["num_bytes"]
        (local / item["file"]).write_bytes(fs.cat(f"{root}/{item['file']}"))
    _check_against(tfrecord_build, str(local), metadata)


@pytest.mark.parametrize("options", [dict(compression="gzip"), dict(index=True)])
def test_gzip_or_an_index_is_refused(tmp_path, options):
    arguments = dict(dataset_name="ar", splits=SPLITS, shuffle=True, shard_size=SHARD_SIZE,
                     compression="none", file_format="array_record")
    arguments.update(options)
    with pytest.raises(ValueError, match="array_record output takes neither gzip nor an index"):
        WriteShards(str(tmp_path), **arguments)


def _publish(staging, records, *, framed=None):
    from recordforge.transforms import tfrecord
    from recordforge.transforms.writer import shard_files
    data = tfrecord.frame_records(records) if framed is None else framed

    def write(out) -> int:
        for start in range(0, len(data), 7000):  # in pieces, as the writer writes
            out.write(data[start:start + 7000])
        return len(records)

    return shard_files.publish_shard("train-00000-of-00001.array_record", write,
                                     staging_dir=str(staging), temp_dir=str(staging / "_tmp"),
                                     compression="none", file_format="array_record")


def test_a_retried_shard_writer_puts_the_same_bytes_under_the_same_name(tmp_path):
    records = [bytes([n % 256]) * (n * 37 % 3000) for n in range(500)]
    first = _publish(tmp_path, records)
    data = (tmp_path / "train-00000-of-00001.array_record").read_bytes()
    again = _publish(tmp_path, records)
    assert again == first and first.num_examples == 500 and first.index is None
    assert (tmp_path / "train-00000-of-00001.array_record").read_bytes() == data
    assert first.sha256 == hashlib.sha256(data).hexdigest() and first.num_bytes == len(data)
    assert os.listdir(tmp_path / "_tmp") == []  # no temporary file left behind
    assert _array_records(str(tmp_path / "train-00000-of-00001.array_record")) == records


def test_damaged_framing_fails_the_shard_and_leaves_no_file(tmp_path):
    from recordforge.transforms import tfrecord
    from recordforge.transforms.writer.shard_files import ShardCheckError
    framed = bytearray(tfrecord.frame_records([b"r" * 400] * 20))
    framed[5000] ^= 1  # record 12's length CRC (records of 416 framed bytes)
    with pytest.raises(ShardCheckError, match=r"train-00000-of-00001.array_record as "
                                              r"written: .*bad length CRC at byte offset "
                                              r"4992 \(record 12\)"):
        _publish(tmp_path, [b"r" * 400] * 20, framed=bytes(framed))
    assert not (tmp_path / "train-00000-of-00001.array_record").exists()
    assert os.listdir(tmp_path / "_tmp") == []
