"""WriteShards in Beam pipelines: the same bytes on every runner, shards that
independent readers accept, a shuffle that mixes a class-sorted input,
metrics, and clean temporary directories."""

from __future__ import annotations

import collections
import glob
import gzip
import hashlib
import json
import os
import random
import struct
import uuid

import apache_beam as beam
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to
from recordforge.transforms.metrics import METRICS_NAMESPACE
from recordforge.transforms.splits import SplitAssigner
from recordforge.transforms.writer import ShardTuning, WriteShards, bucket_bounds_of
from tfrecord import example_pb2

SPLITS = [("train", 0.8), ("test", 0.2)]
TUNING = ShardTuning(run_bytes=400_000, bucket_bytes=300_000)
SHARD_SIZE = 1_000_000
LABELS = 10
split_of = SplitAssigner("flowers", SPLITS).split_of


def _examples(count=3000, seed=0):
    """Image-like Examples sorted by label (the worst case for a shuffle)."""
    rng = random.Random(seed)
    examples = []
    for index in range(count):
        example = example_pb2.Example()
        features = example.features.feature
        features["label"].int64_list.value.append(index * LABELS // count)
        features["image"].bytes_list.value.append(rng.randbytes(rng.randint(300, 1200)))
        examples.append(example.SerializeToString(deterministic=True))
    return examples


EXAMPLES = _examples()


def _batches(examples, size=100):
    rows = [(None, example) for example in examples]
    return [rows[i:i + size] for i in range(0, len(rows), size)]


class _SaveJson(beam.DoFn):
    """Writes each element as a JSON file (works on every runner)."""

    def __init__(self, directory):
        self._directory = directory

    def process(self, element):
        os.makedirs(self._directory, exist_ok=True)
        with open(os.path.join(self._directory, f"{uuid.uuid4().hex}.json"), "w") as out:
            json.dump(element, out)


def _build(pipeline, staging, batches, *, compression="gzip", shuffle=True, temp_dir=None,
           key_bounds=None, spread=True):
    metadata = (pipeline
                | "Batches" >> beam.Create(batches)
                | "Write" >> WriteShards(staging, dataset_name="flowers", splits=SPLITS,
                                         shuffle=shuffle, shard_size=SHARD_SIZE,
                                         compression=compression, temp_dir=temp_dir,
                                         tuning=TUNING, key_bounds=key_bounds,
                                         spread=spread))
    metadata | "Save" >> beam.ParDo(_SaveJson(staging + "-metadata"))
    return metadata


def _run(staging, batches, args=(), **kwargs):
    pipeline = beam.Pipeline(options=PipelineOptions(list(args)))
    _build(pipeline, staging, batches, **kwargs)
    result = pipeline.run()
    result.wait_until_finish()
    return result


def _metadata(staging):
    items = []
    for path in glob.glob(os.path.join(staging + "-metadata", "*.json")):
        with open(path) as lines:
            items.append(json.load(lines))
    return sorted(items, key=lambda item: item["file"])


def _disk_digests(staging):
    digests = {}
    for name in os.listdir(staging):
        path = os.path.join(staging, name)
        if os.path.isfile(path):
            digests[name] = hashlib.sha256(open(path, "rb").read()).hexdigest()
    return digests


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The in_memory DirectRunner output, gzip, shuffled."""
    staging = str(tmp_path_factory.mktemp("reference") / "staging")
    result = _run(staging, _batches(EXAMPLES))
    return staging, result


def _assert_consistent(staging):
    metadata = _metadata(staging)
    digests = _disk_digests(staging)
    # Every file written is a shard or a shard's index, as its metadata says.
    files = [entry for item in metadata for entry in (item, item.get("index")) if entry]
    assert {entry["file"]: entry["sha256"] for entry in files} == digests
    for entry in files:
        assert os.path.getsize(os.path.join(staging, entry["file"])) == entry["num_bytes"]
    assert not os.path.exists(os.path.join(staging, "_tmp"))  # temporary files removed
    return digests


def test_reference_output_is_complete_and_clean(reference):
    staging, _ = reference
    digests = _assert_consistent(staging)
    metadata = _metadata(staging)
    counts = collections.Counter(split_of(example) for example in EXAMPLES)
    for split, _ in SPLITS:
        assert sum(item["num_examples"] for item in metadata if item["split"] == split) == \
            counts[split]
    assert sorted(digests) == ["test-00000-of-00001.tfrecord.gz",
                               "train-00000-of-00002.tfrecord.gz",
                               "train-00001-of-00002.tfrecord.gz"]


def test_same_bytes_for_a_rerun_and_for_other_batching_and_order(reference, tmp_path):
    staging, _ = reference
    rows = list(reversed(EXAMPLES))
    random.Random(1).shuffle(rows)
    _run(str(tmp_path / "reordered"), _batches(rows, size=73))
    assert _assert_consistent(str(tmp_path / "reordered")) == _disk_digests(staging)


def test_same_bytes_on_multi_processing_direct_runner(reference, tmp_path):
    staging, _ = reference
    multi = ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]
    _run(str(tmp_path / "multi"), _batches(EXAMPLES), args=multi)
    assert _assert_consistent(str(tmp_path / "multi")) == _disk_digests(staging)
    # Key-ordered gzip: cells sorted, and seams compressed, in two processes.
    _run(str(tmp_path / "ordered-gzip"), _batches(EXAMPLES), shuffle=False)
    _run(str(tmp_path / "multi-ordered-gzip"), _batches(EXAMPLES[::-1]), args=multi,
         shuffle=False)
    assert (_assert_consistent(str(tmp_path / "multi-ordered-gzip"))
            == _disk_digests(str(tmp_path / "ordered-gzip")))


@pytest.mark.parametrize("compression", ["gzip", "none"])
@pytest.mark.parametrize("shuffle", [True, False])
def test_same_bytes_without_the_spread_steps(tmp_path, compression, shuffle):
    """spread=False (one local worker: `graph.spreads`) leaves out the file
    exchange's Reshuffles of buckets, cells (key-ordered gzip) and shards;
    the shards are byte for byte those of the spread graph, every row in
    them once."""
    examples = EXAMPLES[:1200]
    digests = []
    for spread in (True, False):
        staging = str(tmp_path / f"spread-{spread}")
        _run(staging, _batches(examples), compression=compression, shuffle=shuffle,
             spread=spread)
        digests.append(_assert_consistent(staging))
        written = sum(item["num_examples"] for item in _metadata(staging))
        assert written == len(examples)
    assert len(digests[0]) > 1 and digests[0] == digests[1]


def test_same_bytes_on_dask_runner(reference, tmp_path):
    distributed = pytest.importorskip("distributed")
    staging, _ = reference
    # Key-ordered output as the DirectRunner's file exchange writes it: on
    # Dask its rows wait in lanes for their split's sample (or go to the
    # buckets of bounds known before the run), then are cut at rows like
    # shuffled ones (plain), or sorted into cells, those two buckets share
    # compressed by a seam step, each placed by its midpoint (gzip).
    ordered = str(tmp_path / "ordered")
    _run(ordered, _batches(EXAMPLES), compression="none", shuffle=False)
    ordered_gzip = str(tmp_path / "ordered-gzip")
    _run(ordered_gzip, _batches(EXAMPLES), shuffle=False)
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                  dashboard_address=None) as cluster:
        dask = ["--runner=apache_beam.runners.dask.dask_runner.DaskRunner",
                f"--dask_client_address={cluster.scheduler_address}", "--dask_npartitions=4"]
        _run(str(tmp_path / "dask"), _batches(EXAMPLES), args=dask).client.close()
        _run(str(tmp_path / "dask-ordered"), _batches(EXAMPLES[::-1]), args=dask,
             compression="none", shuffle=False).client.close()
        _run(str(tmp_path / "dask-ordered-gzip"), _batches(EXAMPLES[::-1]), args=dask,
             shuffle=False).client.close()
        _run(str(tmp_path / "dask-ordered-gzip-bounds"), _batches(EXAMPLES[::-1]), args=dask,
             shuffle=False, key_bounds=bucket_bounds_of(EXAMPLES[::7], 9, TUNING.prefix_len)
             ).client.close()
    assert _assert_consistent(str(tmp_path / "dask")) == _disk_digests(staging)
    assert _assert_consistent(str(tmp_path / "dask-ordered")) == _disk_digests(ordered)
    gzip_shards = _assert_consistent(str(tmp_path / "dask-ordered-gzip"))
    assert len(gzip_shards) > 2 and gzip_shards == _disk_digests(ordered_gzip)
    assert _assert_consistent(str(tmp_path / "dask-ordered-gzip-bounds")) == gzip_shards


def _hand_parse(stream: bytes) -> list[bytes]:
    """TFRecord framing read by hand (lengths only; CRCs checked elsewhere)."""
    records, position = [], 0
    while position < len(stream):
        (length,) = struct.unpack_from("<Q", stream, position)
        records.append(stream[position + 12:position + 12 + length])
        position += 12 + length + 4
    assert position == len(stream)
    return records


def test_shards_read_back_with_python_gzip_and_tfrecord_protos(reference):
    staging, _ = reference
    for split, _ in SPLITS:
        records = []
        for path in sorted(glob.glob(os.path.join(staging, f"{split}-*.tfrecord.gz"))):
            records += _hand_parse(gzip.decompress(open(path, "rb").read()))
        expected = [example for example in EXAMPLES if split_of(example) == split]
        assert sorted(records) == sorted(expected)
        for record in records[:50]:
            parsed = example_pb2.Example.FromString(record)
            assert parsed.features.feature["label"].int64_list.value[0] in range(LABELS)


def test_shards_read_back_with_beam(reference):
    staging, _ = reference
    with beam.Pipeline() as pipeline:
        for split, _ in SPLITS:
            read = pipeline | f"Read[{split}]" >> beam.io.ReadFromTFRecord(
                os.path.join(staging, f"{split}-*.tfrecord.gz"),
                compression_type=beam.io.filesystem.CompressionTypes.AUTO)
            assert_that(read, equal_to([e for e in EXAMPLES if split_of(e) == split]),
                        label=f"Check[{split}]")


def test_shuffle_mixes_a_class_sorted_input_in_every_shard(reference):
    staging, _ = reference
    expected = [e for e in EXAMPLES if split_of(e) == "train"]
    overall = collections.Counter(
        example_pb2.Example.FromString(e).features.feature["label"].int64_list.value[0]
        for e in expected)
    for path in sorted(glob.glob(os.path.join(staging, "train-*.tfrecord.gz"))):
        records = _hand_parse(gzip.decompress(open(path, "rb").read()))
        labels = collections.Counter(
            example_pb2.Example.FromString(r).features.feature["label"].int64_list.value[0]
            for r in records)
        assert len(records) > 900
        for label in range(LABELS):
            share = labels[label] / len(records)
            # Each shard holds ~1200 rows: a class's share has a standard
            # deviation under 0.009; 0.05 allows 5 sigma.
            assert abs(share - overall[label] / len(expected)) < 0.05, (path, labels)
        # ...and the order inside a shard is mixed too, not 10 sorted runs.
        sequence = [example_pb2.Example.FromString(r).features.feature["label"]
                    .int64_list.value[0] for r in records]
        changes = sum(a != b for a, b in zip(sequence, sequence[1:]))
        assert changes > 0.8 * len(sequence)


def test_counters(reference):
    staging, result = reference
    counters = {counter.key.metric.name: counter.committed for counter in
                result.metrics().query(MetricsFilter().with_namespace(METRICS_NAMESPACE))
                ["counters"]}
    metadata = _metadata(staging)
    assert counters["examples_written"] == len(EXAMPLES)
    assert counters["bytes_written"] == sum(item["num_bytes"] for item in metadata)


def test_orphans_of_a_failed_run_change_nothing_and_temp_dir_is_removed(reference, tmp_path):
    staging, _ = reference
    target = str(tmp_path / "orphans")
    orphan_dir = os.path.join(target, "_tmp", "recordforge-shards-0000", "runs")
    os.makedirs(orphan_dir)
    with open(os.path.join(orphan_dir, "junk-0.run"), "wb") as junk:
        junk.write(b"\0" * 1000)
    temp_dir = str(tmp_path / "elsewhere")
    _run(target, _batches(EXAMPLES), temp_dir=temp_dir)
    digests = _disk_digests(target)
    assert digests == _disk_digests(staging)
    # This writer's own directories are gone; another run's are not touched.
    assert os.listdir(os.path.join(target, "_tmp")) == ["recordforge-shards-0000"]
    assert os.listdir(temp_dir) == []


def test_no_shuffle_plain_output_is_ordered_by_content(tmp_path):
    staging = str(tmp_path / "plain")
    _run(staging, _batches(EXAMPLES[::-1], size=250), compression="none", shuffle=False)
    _assert_consistent(staging)
    for split, _ in SPLITS:
        records = []
        for path in sorted(glob.glob(os.path.join(staging, f"{split}-*.tfrecord"))):
            records += _hand_parse(open(path, "rb").read())
        assert records == sorted(e for e in EXAMPLES if split_of(e) == split)


def test_empty_input_writes_nothing(tmp_path):
    staging = str(tmp_path / "empty")
    os.makedirs(staging)
    _run(staging, [])
    assert os.listdir(staging) == []
    assert _metadata(staging) == []
