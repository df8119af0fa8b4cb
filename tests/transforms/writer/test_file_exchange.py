"""Shard writer steps run without Beam: shard sizes over several datasets and
shard sizes, key order, and retried bundles.

`_write_locally` drives the same DoFns and plain functions that `WriteShards`
wires together, in the same order, so that many configurations fit in a
few seconds; the Beam pipeline itself is tested in test_write_shards.py.
"""

from __future__ import annotations

import collections
import gzip
import hashlib
import io
import math
import os
import random

import pytest
from recordforge.transforms import tfrecord
from recordforge.transforms.splits import SplitAssigner
from recordforge.transforms.writer import (
    ShardTuning,
    file_cells,
    file_exchange,
    file_shards,
    sorting,
    spill,
)
from recordforge.transforms.writer.shard_cuts import cuts_at_rows
from tfrecord import example_pb2

SPLITS = [("train", 0.75), ("test", 0.25)]
TUNING = ShardTuning(run_bytes=700_000, bucket_bytes=400_000)
split_of = SplitAssigner("dataset", SPLITS).split_of


def _example(**features) -> bytes:
    example = example_pb2.Example()
    for name, value in features.items():
        feature = example.features.feature[name]
        if isinstance(value, int):
            feature.int64_list.value.append(value)
        else:
            feature.bytes_list.value.append(value)
    return example.SerializeToString(deterministic=True)


def uniform_small(rng):
    """12k table-like rows of 250-350 bytes (incompressible payload)."""
    return [_example(id=index, payload=rng.randbytes(rng.randint(230, 330)))
            for index in range(12_000)]


def image_like(rng):
    """500 image-like rows whose sizes vary 20x (1 KB - 20 KB)."""
    return [_example(label=rng.randrange(10), image=rng.randbytes(rng.randint(1_000, 20_000)))
            for _ in range(500)]


def compressible_table(rng):
    """20k text rows that gzip shrinks ~3x."""
    words = [rng.randbytes(3).hex().encode() for _ in range(400)]
    texts = [b" ".join(rng.choices(words, k=100)) for _ in range(500)]
    return [_example(id=index, text=texts[rng.randrange(500)][:rng.randint(300, 700)])
            for index in range(20_000)]


def _bundles(examples, keys=None, batch=500, per_bundle=4):
    rows = list(zip(keys or [None] * len(examples), examples))
    batches = [rows[i:i + batch] for i in range(0, len(rows), batch)]
    return [batches[i:i + per_bundle] for i in range(0, len(batches), per_bundle)]


def _write_locally(bundles, staging, *, shard_size, compression, shuffle=True,
                   splits=SPLITS, tuning=TUNING, retry=False):
    """Runs the writer's steps in order. retry=True runs every bundle and
    every step twice and keeps only the second attempt's output, as a
    runner does after a failed attempt (the first attempt's files remain)."""
    attempts = 2 if retry else 1
    work = os.path.join(staging, "_tmp", "work")
    spill_fn = file_exchange._SpillFn(os.path.join(work, "runs"), "dataset", splits, shuffle, tuning)
    spill_fn.setup()
    records = []
    for bundle in bundles:
        for _ in range(attempts):
            spill_fn.start_bundle()
            output = [record for batch in bundle for record in spill_fn.process(batch)]
            spill_fn.finish_bundle()
        records += output
    by_split = collections.defaultdict(list)
    for record in records:
        by_split[record.split].append(record)
    tasks = []
    for split in sorted(by_split):
        for _ in range(attempts):
            output = file_exchange._plan_split_buckets((split, by_split[split]),
                                                plan_dir=os.path.join(work, "plans"),
                                                tuning=tuning)
        tasks += output
    cut_at_rows = cuts_at_rows(shuffle, compression)
    gzip = compression == "gzip"
    measurer = file_exchange._MeasureBucketFn(tuning.ratio_sample_bound if gzip and shuffle else None)
    measurer.setup()
    buckets = collections.defaultdict(list)
    for task in tasks:
        for _ in range(attempts):
            output = list(measurer.process(task))
        for split, item in output:  # keyed by the measuring step
            assert split == item[1].split
            buckets[split].append(item)
    if not cut_at_rows:
        buckets = _cells_locally(buckets, work, tuning.chunk_bytes(shard_size), tuning, attempts)
    specs = []
    for split in sorted(buckets):
        for _ in range(attempts):
            output = file_exchange._plan_split_shards((split, buckets[split]), shard_size,
                                               delete_runs=gzip and not cut_at_rows,
                                               cut_at_rows=cut_at_rows,
                                               gzip_level=3 if gzip else None)
        specs += output
    if gzip and not cut_at_rows:
        # Planning deleted the reported runs (a failed attempt's runs wait
        # for the writer's cleanup): key-ordered gzip shards are assembled
        # from chunks.
        assert not any(os.path.exists(record.path) for record in records)
    else:
        # Buckets were only planned or measured: shards are written from the runs.
        assert not os.path.exists(os.path.join(work, "buckets"))
        assert all(os.path.exists(record.path) for record in records)
    metadata = []
    writer = file_shards.WriteShardFn(staging, os.path.join(staging, "_tmp", "shards"),
                                      compression, work, tuning, 3)
    writer.setup()
    for spec in specs:
        for _ in range(attempts):
            [output] = writer.process(spec)
        metadata.append(output)
    return metadata


def _cells_locally(measured, work, cell_bytes, tuning, attempts):
    """Key-ordered gzip: the split's cells of the measured buckets, in
    units, as the file exchange's cell steps give them (each step run
    `attempts` times, the last attempt's output kept)."""
    sorter = file_cells.SortRunCellsFn(work, cell_bytes, 3, tuning)
    sorter.setup()
    compressor = file_cells.CompressSeamFn(work, cell_bytes, 3)
    units = collections.defaultdict(list)
    seams = collections.defaultdict(list)
    for split in sorted(measured):
        for task in file_cells.plan_split_cells((split, measured[split])):
            for _ in range(attempts):
                output = list(sorter.process(task))
            for kind, value in output:
                if kind == "unit":
                    units[split].append(value)
                else:
                    seams[value[0]].append(value[1])
    for key in sorted(seams):
        for _ in range(attempts):
            output = list(compressor.process((key, seams[key])))
        units[key[0]] += output
    return units


def _read_split(staging, metadata, split):
    records = []
    for item in metadata:
        if item["split"] == split:
            records += tfrecord.read_records(os.path.join(staging, item["file"]))
    return records


CASES = [
    (uniform_small, "none", 1_000_000),
    (uniform_small, "none", 1_600_000),
    (image_like, "none", 1_000_000),
    (image_like, "gzip", 1_300_000),
    (compressible_table, "gzip", 1_000_000),
    (compressible_table, "gzip", 2_200_000),
    (compressible_table, "none", 1_000_000),
]


@pytest.mark.parametrize("dataset, compression, shard_size", CASES,
                         ids=[f"{d.__name__}-{c}-{s}" for d, c, s in CASES])
def test_shard_count_and_sizes(tmp_path, dataset, compression, shard_size):
    examples = dataset(random.Random(shard_size))
    staging = str(tmp_path)
    metadata = _write_locally(_bundles(examples), staging, shard_size=shard_size,
                              compression=compression)
    expected = collections.Counter(split_of(example)
                                   for example in examples)
    for split, _ in SPLITS:
        shard_meta = [item for item in metadata if item["split"] == split]
        sizes = [os.path.getsize(os.path.join(staging, item["file"])) for item in shard_meta]
        assert sizes == [item["num_bytes"] for item in shard_meta]
        total = sum(sizes)
        assert len(sizes) == math.ceil(total / shard_size), (split, sizes)
        mean = total / len(sizes)
        assert all(abs(size - mean) <= 0.10 * mean for size in sizes), (split, sizes)
        assert max(sizes) <= 1.1 * shard_size
        assert sum(item["num_examples"] for item in shard_meta) == expected[split]
        assert sorted(_read_split(staging, metadata, split)) == sorted(
            example for example in examples
            if split_of(example) == split)
    if compression == "gzip" and dataset is compressible_table:
        assert sum(item["num_bytes"] for item in metadata) < 0.5 * sum(map(len, examples))


def _digests(metadata):
    return {item["file"]: item["sha256"] for item in metadata}


@pytest.mark.parametrize("shuffle", [True, False])
def test_retried_bundles_and_steps_change_nothing(tmp_path, shuffle):
    examples = uniform_small(random.Random(1))[:6000]
    keys = None if shuffle else [b"%05d" % index for index in range(len(examples))]
    clean = _write_locally(_bundles(examples, keys), str(tmp_path / "clean"),
                           shard_size=1_000_000, compression="gzip", shuffle=shuffle)
    retried = _write_locally(_bundles(examples, keys), str(tmp_path / "retried"),
                             shard_size=1_000_000, compression="gzip", shuffle=shuffle,
                             retry=True)
    assert _digests(retried) == _digests(clean)
    assert len(clean) >= 2
    # The failed attempts' runs are still there (the cleanup step removes
    # them) but were never read: no row was lost or written twice.
    work = tmp_path / "retried" / "_tmp" / "work"
    left = {str(work / "runs" / name) for name in os.listdir(work / "runs")}
    listed = {run.path for plan in os.listdir(work / "plans")
              for run in spill.read_run_list(str(work / "plans" / plan))}
    if shuffle:
        # Shards cut at rows are written from the runs, kept to the end.
        assert listed and left > listed
    else:
        # Key-ordered gzip: the committed attempts' runs were deleted once
        # every bucket was sorted into chunks.
        assert not os.listdir(tmp_path / "clean" / "_tmp" / "work" / "runs")
        assert left and listed and not left & listed
        # Several buckets, so cells two of them share, joined through seam
        # files: every attempt wrote its own.
        seams = len(os.listdir(tmp_path / "clean" / "_tmp" / "work" / "seams"))
        assert seams > 2 and len(os.listdir(work / "seams")) == 2 * seams
    assert sorted(_read_split(str(tmp_path / "retried"), retried, "train")
                  + _read_split(str(tmp_path / "retried"), retried, "test")) == sorted(examples)
    # Nothing but complete shards carries a final name.
    finals = sorted(name for name in os.listdir(tmp_path / "retried") if name != "_tmp")
    assert finals == sorted(item["file"] for item in retried)


@pytest.mark.parametrize("shuffle", [False, True])
def test_output_does_not_depend_on_batching_or_arrival_order(tmp_path, shuffle):
    rng = random.Random(2)
    examples = image_like(rng)
    keys = [f"img/{index:04d}.jpg".encode() for index in range(len(examples))]
    keys[5:9] = [b"img/dup.jpg"] * 4  # equal keys: ordered by the example bytes
    first = _write_locally(_bundles(examples, keys, batch=37, per_bundle=3), str(tmp_path / "a"),
                           shard_size=1_000_000, compression="gzip", shuffle=shuffle)
    order = list(range(len(examples)))
    rng.shuffle(order)
    second = _write_locally(
        _bundles([examples[i] for i in order], [keys[i] for i in order], batch=101,
                 per_bundle=1),
        str(tmp_path / "b"), shard_size=1_000_000, compression="gzip", shuffle=shuffle,
        # Other memory settings: bigger runs, every bucket merged as streams.
        tuning=ShardTuning(run_bytes=2_000_000, bucket_bytes=TUNING.bucket_bytes,
                                  memory_bytes=0, fan_in=2, index_every=1000))
    assert _digests(first) == _digests(second)


def test_without_shuffle_rows_are_in_key_order_across_shards(tmp_path):
    rng = random.Random(4)
    count = 12_000
    keys = [rng.randbytes(rng.randint(1, 12)) for _ in range(count)]
    keys[10:20] = [b"same-key"] * 10  # ties: ordered by the example bytes
    examples = [_example(key=key, n=index, pad=rng.randbytes(380)) for index, key in
                enumerate(keys)]
    by_example = dict(zip(examples, keys))
    metadata = _write_locally(_bundles(examples, keys), str(tmp_path), shard_size=1_000_000,
                              compression="none", shuffle=False)
    for split, _ in SPLITS:
        files = sorted(item["file"] for item in metadata if item["split"] == split)
        assert len(files) >= 2
        written = [record for name in files
                   for record in tfrecord.read_records(str(tmp_path / name))]
        expected = sorted((by_example[e], e) for e in examples
                          if split_of(by_example[e]) == split)
        assert written == [example for _, example in expected]


def test_key_none_and_duplicate_rows(tmp_path):
    rng = random.Random(6)
    examples = [_example(v=rng.randbytes(200)) for _ in range(3000)]
    examples += examples[:500]  # identical rows: kept, each once per occurrence
    metadata = _write_locally(_bundles(examples), str(tmp_path), shard_size=1_000_000,
                              compression="none", shuffle=False)
    written = _read_split(str(tmp_path), metadata, "train") + _read_split(str(tmp_path),
                                                                          metadata, "test")
    assert sorted(written) == sorted(examples)
    train = _read_split(str(tmp_path), metadata, "train")
    assert train == sorted(train)  # no key, no shuffle: ordered by content


def test_bad_rows_name_the_row(tmp_path):
    spill_fn = file_exchange._SpillFn(str(tmp_path), "d", SPLITS, True, TUNING)
    spill_fn.setup()
    spill_fn.start_bundle()
    with pytest.raises(TypeError, match="row 1: key must be bytes"):
        list(spill_fn.process([(b"k", b"x"), ("text-key", b"y")]))
    with pytest.raises(TypeError, match="row 0 .*example must be bytes"):
        list(spill_fn.process([(b"k", "not bytes")]))


def test_shards_hash_matches_metadata(tmp_path):
    examples = compressible_table(random.Random(8))[:8000]
    metadata = _write_locally(_bundles(examples), str(tmp_path), shard_size=1_000_000,
                              compression="gzip")
    for item in metadata:
        data = (tmp_path / item["file"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == item["sha256"]
        assert item["file"].endswith(".tfrecord.gz")


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="names synced files by /proc")
@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_every_shard_is_synced_to_disk_before_its_rename(tmp_path, monkeypatch, compression):
    synced, renamed = set(), []
    real_sync, real_replace = os.fdatasync, os.replace

    def sync(fd):
        synced.add(os.readlink(f"/proc/self/fd/{fd}"))
        real_sync(fd)

    def replace(source, target):
        renamed.append((os.path.realpath(source), source in synced or
                        os.path.realpath(source) in synced))
        real_replace(source, target)

    monkeypatch.setattr(os, "fdatasync", sync)
    monkeypatch.setattr(os, "replace", replace)
    examples = compressible_table(random.Random(9))[:6000]
    metadata = _write_locally(_bundles(examples), str(tmp_path), shard_size=1_000_000,
                              compression=compression)
    shard_renames = [was_synced for source, was_synced in renamed if ".tfrecord" in source]
    assert len(shard_renames) == len(metadata) > 1
    assert all(shard_renames)


@pytest.mark.parametrize("seed", range(4))
def test_measuring_a_bucket_gives_what_sorting_it_does(tmp_path, seed):
    """Shards cut at rows plan from a bucket's size and largest row, added
    up from the runs without sorting: the numbers of the bucket sorted."""
    from recordforge.transforms.writer.elements import BucketRange, RunInfo

    rng = random.Random(seed)
    assigner = SplitAssigner("measure", (("train", 1.0),))
    tuning = ShardTuning()
    runs = []
    for index in range(3):
        buffer = spill.RunBuffer(assigner, shuffle=True, sample_every=tuning.sample_every(),
                                 prefix_len=tuning.prefix_len, index_every=256)
        held = buffer.add([(None, rng.randbytes(rng.randint(1, 400))) for _ in range(500)])
        path = tmp_path / f"run-{index}"
        with open(path, "wb") as handle:
            buffer.write(0, handle)
        runs.append(RunInfo("train", str(path), held[-1].num_records, held[-1].num_bytes))
    bounds = sorted(rng.randbytes(16) for _ in range(2))
    for lo, hi in ((b"", None), (bounds[0], bounds[1]), (b"", bounds[0]), (bounds[1], None)):
        bucket = BucketRange("train", 0, lo, hi)
        measured = sorting.measure_bucket(bucket, runs, "runs.json")
        size = sum(c.length for c in measured.chunks)
        written, seams = sorting.sort_bucket_cells(
            bucket, runs, start=0, size=size, total=size, cell_bytes=4096, gzip_level=0,
            out_dir=str(tmp_path / "sorted"), scratch_dir=str(tmp_path), memory_bytes=1 << 30,
            fan_in=64, prefix_len=tuning.prefix_len, index_every=256)
        assert not seams  # the whole split: no neighbour to share a cell with
        data = gzip.decompress(open(written.path, "rb").read())
        sizes = [len(record) + 16 for record in
                 tfrecord.iter_records(io.BytesIO(data), compression="none")]
        assert sum(c.length for c in measured.chunks) == len(data) == sum(sizes)
        assert sum(c.num_records for c in measured.chunks) == len(sizes)
        assert measured.max_row == max(sizes, default=0)
        assert spill.parse_bucket_reference(measured.path) == ("runs.json", bucket)
