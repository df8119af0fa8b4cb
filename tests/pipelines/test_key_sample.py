"""Bucket bounds sampled before the run for key-ordered plain output."""

from __future__ import annotations

import collections
import json
import pathlib

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

import recordforge
from recordforge.pipelines import key_sample
from recordforge.pipelines.graph import known_vocabularies
from recordforge.schemas.keys import sortable_key
from recordforge.transforms.writer import run_format, shuffle_packets
from recordforge.transforms.batch_converter import BatchConverter
from recordforge.transforms.readers.tables import iter_table
from recordforge.transforms.writer import ShardTuning

TUNING = ShardTuning(hash_buckets=8)
REPO = pathlib.Path(__file__).resolve().parents[2]


def _config(path, source_type, *, key="id", shuffle=False, compression="none", **source):
    return recordforge.load_config({
        "name": "sampled", "version": "1",
        "source": {"type": source_type, "path": str(path), **source},
        "features": {"id": {"type": "int64"}, "name": {"type": "string"}},
        **({"key": key} if key else {}),
        "output": {"path": str(path.parent / "out"), "shuffle": shuffle,
                   "compression": compression, "shard_size": "1MB"},
    })


def _write_tables(directory, source_type, files=12, rows=500):
    """Files whose ids run in ranges interleaved by file name, so that
    neither file order nor text order is key order."""
    directory.mkdir()
    for index in range(files):
        ids = [(index % 3) * 100_000 + index * 1000 + row for row in range(rows)]
        path = directory / f"part-{index:03d}.{source_type}"
        if source_type == "csv":
            path.write_text("id,name\n" + "".join(f"{i},n{i}\n" for i in ids))
        elif source_type == "jsonl":
            path.write_text("".join(json.dumps({"id": i, "name": f"n{i}"}) + "\n" for i in ids))
        elif source_type == "json":  # one JSON array, read whole
            path.write_text(json.dumps([{"id": i, "name": f"n{i}"} for i in ids]))
        else:
            pq.write_table(pa.table({"id": ids, "name": [f"n{i}" for i in ids]}), path)


def _pipeline_keys(config) -> list[bytes]:
    """Every row's order key as the pipeline's conversion gives it."""
    converter = BatchConverter(config.features, known_vocabularies(config), config.key)
    keys = []
    for path in sorted(pathlib.Path(config.source.path).iterdir()):
        rows = key_sample._first_rows(
            iter_table(str(path), config.source.type, config.source.csv), 1 << 30)
        examples, dead = converter.convert_batch(rows)
        assert not dead
        keys += [example if key is None else key for key, example in examples]
    return keys


def _count_reads(monkeypatch, directory) -> list[int]:
    """The sizes of the reads the sample makes from `directory`'s files
    (appended as they happen)."""
    fs, files = key_sample.list_files(str(directory), None)
    read: list[int] = []
    real_open = fs.open

    def counting_open(path, mode="rb", **kwargs):
        handle = real_open(path, mode, **kwargs)
        real_read = handle.read

        def counted(*args):
            data = real_read(*args)
            read.append(len(data))
            return data

        handle.read = counted
        return handle

    monkeypatch.setattr(fs, "open", counting_open)
    monkeypatch.setattr(key_sample, "list_files", lambda *args: (fs, files))
    return read


@pytest.mark.parametrize("source_type", ["csv", "jsonl", "parquet", "json"])
def test_sampled_bounds_split_the_keys_the_pipeline_gives_evenly(tmp_path, source_type):
    _write_tables(tmp_path / "in", source_type)
    config = _config(tmp_path / "in", source_type)
    assert key_sample.uses_sampled_bounds(config, "shuffle")
    bounds = key_sample.sample_bucket_bounds(config, {}, TUNING)
    assert bounds[0] == b"" and list(bounds) == sorted(set(bounds))
    keys = _pipeline_keys(config)
    # CSV ids are converted to int64 keys, so 99,999 sorts before 100,000.
    assert sortable_key(99_999) < sortable_key(100_000) and keys[0] == sortable_key(0)
    buckets = shuffle_packets.bucket_of_keys(bounds, run_format.KEY_VARIABLE, keys)
    counts = collections.Counter(buckets.tolist())
    assert len(counts) == TUNING.hash_buckets
    assert max(counts.values()) <= 1.5 * len(keys) / TUNING.hash_buckets


def test_key_ordered_gzip_input_of_known_size_gets_buckets_of_at_least_64_cells(tmp_path):
    _write_tables(tmp_path / "in", "csv")
    plain = _config(tmp_path / "in", "csv")
    gzip = _config(tmp_path / "in", "csv", compression="gzip")
    cell = TUNING.chunk_bytes(gzip.output.shard_size)  # 1MB shards: 40 KB cells
    assert len(key_sample.sample_bucket_bounds(plain, {}, TUNING, 10 << 20)) == 8
    assert len(key_sample.sample_bucket_bounds(gzip, {}, TUNING, None)) == 8
    few = key_sample.sample_bucket_bounds(gzip, {}, TUNING, 3 * 64 * cell)
    assert len(few) == 3 and few[0] == b""


def test_only_the_first_rows_of_some_files_are_read(tmp_path, monkeypatch):
    _write_tables(tmp_path / "in", "csv", files=12, rows=500)
    monkeypatch.setattr(key_sample, "SAMPLE_FILES", 4)
    monkeypatch.setattr(key_sample, "SAMPLE_ROWS", 8)
    bounds = key_sample.sample_bucket_bounds(_config(tmp_path / "in", "csv"), {}, TUNING)
    # Files 0, 3, 6 and 9 of the sorted listing, two rows each.
    read = {sortable_key(index % 3 * 100_000 + index * 1000 + row)
            for index in (0, 3, 6, 9) for row in (0, 1)}
    assert set(bounds[1:]) <= read and len(bounds) > 2


def test_a_file_read_as_one_unit_is_still_read_only_up_to_its_first_rows(tmp_path,
                                                                        monkeypatch):
    # A JSON array whose end is broken: reading its first rows never gets there.
    _write_tables(tmp_path / "in", "json", files=1, rows=400)
    path = tmp_path / "in" / "part-000.json"
    path.write_text(path.read_text()[:-200] + "}, {broken")
    monkeypatch.setattr(key_sample, "SAMPLE_ROWS", 50)
    config = _config(tmp_path / "in", "json")
    reads = []
    real = key_sample.iter_table

    def counted(*args, **kwargs):
        for item in real(*args, **kwargs):
            reads.append(item)
            yield item

    monkeypatch.setattr(key_sample, "iter_table", counted)
    bounds = key_sample.sample_bucket_bounds(config, {}, TUNING)
    assert len(bounds) > 2 and not any(isinstance(item, dict) for item in reads)
    assert sum(len(item) if hasattr(item, "columns") else 1 for item in reads) < 400


def test_without_a_key_the_examples_are_the_order_keys(tmp_path):
    _write_tables(tmp_path / "in", "jsonl", files=3, rows=200)
    config = _config(tmp_path / "in", "jsonl", key=None)
    bounds = key_sample.sample_bucket_bounds(config, {}, TUNING)
    keys = _pipeline_keys(config)
    assert set(bounds[1:]) <= {key[:TUNING.prefix_len] for key in keys} and len(bounds) > 2


def test_a_file_that_cannot_be_read_is_left_to_the_pipeline(tmp_path, monkeypatch):
    _write_tables(tmp_path / "in", "parquet", files=2, rows=300)
    (tmp_path / "in" / "part-999.parquet").write_bytes(b"not a Parquet file")
    config = _config(tmp_path / "in", "parquet")
    listed = key_sample.list_files(str(tmp_path / "in"), None)
    vanished = (listed[0], [*listed[1], str(tmp_path / "in" / "vanished.parquet")])
    monkeypatch.setattr(key_sample, "list_files", lambda *args: vanished)
    bounds = key_sample.sample_bucket_bounds(config, {}, TUNING)
    good = {sortable_key(index * 101_000 + row) for index in range(2) for row in range(300)}
    assert set(bounds[1:]) <= {key[:TUNING.prefix_len] for key in good} and len(bounds) > 2


def test_rows_that_fail_their_checks_are_left_out_and_empty_inputs_give_one_bucket(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "bad.csv").write_text("id,name\nnot-a-number,x\n")
    assert key_sample.sample_bucket_bounds(_config(tmp_path / "in", "csv"), {}, TUNING) == (b"",)


@pytest.mark.parametrize("changes, exchange, expected", [
    ({}, "shuffle", True),
    ({}, "files", False),
    ({"shuffle": True}, "shuffle", False),
    ({"compression": "gzip"}, "shuffle", True),
    ({"compression": "gzip"}, "files", False),
    ({"source_type": "json"}, "shuffle", True),
    ({"source_type": "parquet"}, "shuffle", True),
    ({"source_type": "parquet", "key": None}, "shuffle", True),
    ({"csv": {"quote": None}}, "shuffle", True),
])
def test_bounds_are_sampled_for_key_ordered_output_on_the_shuffle_exchange(
        tmp_path, changes, exchange, expected):
    changes = dict(changes)
    source_type = changes.pop("source_type", "csv")
    source = {"csv": changes.pop("csv")} if "csv" in changes else {}
    _write_tables(tmp_path / "in", source_type, files=1, rows=2)
    config = _config(tmp_path / "in", source_type, **changes, **source)
    assert key_sample.uses_sampled_bounds(config, exchange) is expected


@pytest.mark.parametrize("source, compression", [
    ("table", "none"), ("table", "gzip"), ("images", "none"), ("unkeyed images", "none")])
def test_a_build_on_a_distributed_runner_packs_key_ordered_rows_by_sampled_bounds(
        tmp_path, source, compression):
    """The build's graph: sampled bounds spare key-ordered rows, plain or
    gzip, the wait in lanes for their split's own sample."""
    import apache_beam as beam
    dask_runner = pytest.importorskip("apache_beam.runners.dask.dask_runner")
    from recordforge.pipelines.graph import build_pipeline

    if source == "table":
        _write_tables(tmp_path / "in", "csv", files=2, rows=50)
        config = _config(tmp_path / "in", "csv", compression=compression)
    else:
        config = _flowers(tmp_path, None if source.startswith("unkeyed") else "path")
    pipeline = beam.Pipeline(runner=dask_runner.DaskRunner())
    build_pipeline(pipeline, config, staging_url=str(tmp_path / "staging"),
                   vocabularies=known_vocabularies(config))
    names = [transform.unique_name
             for transform in pipeline.to_runner_api().components.transforms.values()]
    assert any(name.endswith("/Exchange/Pack") for name in names)
    assert not any(name.endswith("/Exchange/JoinPlan") for name in names)


def _flowers(tmp_path, key):
    config = yaml.safe_load((REPO / "configs" / "examples" / "flowers.yaml").read_text())
    config["source"]["path"] = str(REPO / "examples" / "flowers")
    config["key"] = key
    config["output"] = {"path": str(tmp_path / "out"), "shuffle": False, "compression": "none"}
    return recordforge.load_config(config)


def _image_keys(config, vocabularies):
    """(every listed image, every image's order key as the pipeline gives
    it: the example when there is no key)."""
    from recordforge.transforms.readers import image_items

    converter = BatchConverter(config.features, vocabularies, config.key)
    batches, _ = image_items.plan_images(config.source.path, config.source.extensions,
                                         config.source.labels)
    items = [item for batch in batches for item in batch]
    rows = key_sample._first_rows(image_items.read_image_items(
        fsspec.filesystem("file"), items, config.source.image), 1 << 30)
    examples, _ = converter.convert_batch(rows)
    return items, [example if row_key is None else row_key for row_key, example in examples]


@pytest.mark.parametrize("key", ["path", "label"])
def test_images_keyed_by_a_listed_column_give_bounds_without_reading_an_image(
        tmp_path, monkeypatch, key):
    from recordforge.transforms.readers import image_items

    config = _flowers(tmp_path, key)
    vocabularies = known_vocabularies(config)
    assert key_sample.uses_sampled_bounds(config, "shuffle")
    _, keys = _image_keys(config, vocabularies)

    def no_reading(fs, paths):
        for _ in paths:
            yield no_read

    def no_read():
        raise AssertionError("an image was read")

    monkeypatch.setattr(image_items, "read_files_once", no_reading)
    bounds = key_sample.sample_bucket_bounds(config, vocabularies, TUNING)
    assert set(bounds[1:]) <= {row_key[:TUNING.prefix_len] for row_key in keys}
    buckets = collections.Counter(
        shuffle_packets.bucket_of_keys(bounds, run_format.KEY_VARIABLE, keys).tolist())
    if key == "path":  # distinct keys: shared evenly
        assert len(buckets) == TUNING.hash_buckets
        assert max(buckets.values()) <= 1.5 * len(keys) / TUNING.hash_buckets
    else:  # one key per class: a bucket per class at most
        assert 1 < len(buckets) <= len(vocabularies["label"])


@pytest.mark.parametrize("key", ["height", None])
def test_images_keyed_by_what_only_the_image_gives_read_a_few_images(tmp_path, monkeypatch,
                                                                    key):
    from recordforge.transforms.readers import image_items

    config = _flowers(tmp_path, key)
    vocabularies = known_vocabularies(config)
    assert key_sample.uses_sampled_bounds(config, "shuffle")
    items, keys = _image_keys(config, vocabularies)

    read = []
    real_reads = image_items.read_files_once

    def counted(fs, paths):
        for path, real_read in zip(paths, real_reads(fs, paths)):
            yield lambda path=path, real_read=real_read: (read.append(path), real_read())[1]

    monkeypatch.setattr(image_items, "read_files_once", counted)
    monkeypatch.setattr(key_sample, "SAMPLE_IMAGES", 40)
    bounds = key_sample.sample_bucket_bounds(config, vocabularies, TUNING)
    # 40 of the listed images, spread over the listing (both ends' classes).
    assert len(read) == len(set(read)) == 40 < len(items)
    assert {path.rsplit("/", 2)[-2] for path in read} == set(vocabularies["label"])
    assert 2 < len(bounds) and set(bounds[1:]) <= {row_key[:TUNING.prefix_len]
                                                   for row_key in keys}
    buckets = collections.Counter(
        shuffle_packets.bucket_of_keys(bounds, run_format.KEY_VARIABLE, keys).tolist())
    assert len(buckets) > 2


def test_a_parquet_file_gives_its_first_keys_from_the_key_columns_first_pages(tmp_path,
                                                                              monkeypatch):
    """A row group is often hundreds of MB: the sample reads the key
    column's first pages, not the whole row group (here under 1/8 of 20 MB)."""
    import os

    (tmp_path / "in").mkdir()
    count = 200_000
    ids = list(range(count))
    pq.write_table(pa.table({"id": ids, "name": [os.urandom(48).hex() for _ in ids]}),
                   tmp_path / "in" / "one.parquet", row_group_size=count)
    size = (tmp_path / "in" / "one.parquet").stat().st_size
    read = _count_reads(monkeypatch, tmp_path / "in")
    monkeypatch.setattr(key_sample, "SAMPLE_ROWS", 1000)
    bounds = key_sample.sample_bucket_bounds(_config(tmp_path / "in", "parquet"), {}, TUNING)
    assert len(bounds) == TUNING.hash_buckets and set(bounds[1:]) <= {
        sortable_key(i) for i in range(20_000)}
    assert 0 < sum(read) < size / 8, (sum(read), size)


def test_unkeyed_parquet_reads_the_first_pages_of_the_feature_columns_only(tmp_path,
                                                                           monkeypatch):
    """Without a key the examples are the order keys, so every feature's
    column is read, from its first pages; a column no feature reads is not
    (here a 20 MB one)."""
    import os

    (tmp_path / "in").mkdir()
    count = 50_000
    ids = list(range(count))
    table = pa.table({"id": ids, "name": [f"n{i}" for i in ids],
                      "unused": [os.urandom(400) for _ in ids]})
    pq.write_table(table, tmp_path / "in" / "one.parquet", row_group_size=count,
                   compression="none")
    size = (tmp_path / "in" / "one.parquet").stat().st_size
    config = _config(tmp_path / "in", "parquet", key=None)
    assert key_sample.uses_sampled_bounds(config, "shuffle")
    keys = _pipeline_keys(config)[:1000]
    read = _count_reads(monkeypatch, tmp_path / "in")
    monkeypatch.setattr(key_sample, "SAMPLE_ROWS", 1000)
    bounds = key_sample.sample_bucket_bounds(config, {}, TUNING)
    assert len(bounds) == TUNING.hash_buckets
    assert set(bounds[1:]) <= {key[:TUNING.prefix_len] for key in keys}
    assert 0 < sum(read) < size / 8, (sum(read), size)


def test_a_wide_unkeyed_parquet_source_reads_fewer_files(tmp_path, monkeypatch):
    """A page per column read: SAMPLE_FILES column heads in all."""
    _write_tables(tmp_path / "in", "parquet", files=12, rows=100)
    monkeypatch.setattr(key_sample, "SAMPLE_FILES", 8)
    opened = []
    real = key_sample.read_parquet_head

    def counted(path, rows, columns, **kwargs):
        opened.append((path, tuple(columns)))
        return real(path, rows, columns, **kwargs)

    monkeypatch.setattr(key_sample, "read_parquet_head", counted)
    key_sample.sample_bucket_bounds(_config(tmp_path / "in", "parquet", key=None), {}, TUNING)
    assert len(opened) == 4 and {columns for _, columns in opened} == {("id", "name")}
    opened.clear()
    key_sample.sample_bucket_bounds(_config(tmp_path / "in", "parquet"), {}, TUNING)
    assert len(opened) == 8 and {columns for _, columns in opened} == {("id",)}


def test_bounds_of_given_rows_are_those_of_the_same_rows_read_from_files(tmp_path):
    """WriteDataset's key sample: raw row dicts give the bounds their
    rows give when read from a table (text values converted alike)."""
    _write_tables(tmp_path / "in", "csv", files=1, rows=500)
    config = _config(tmp_path / "in", "csv")
    from_files = key_sample.sample_bucket_bounds(config, {}, TUNING)
    lines = (tmp_path / "in" / "part-000.csv").read_text().splitlines()[1:]
    rows = iter([dict(zip(("id", "name"), line.split(","))) for line in lines]
                + [{"id": "not a number", "name": "x"}])  # left out
    assert key_sample.bounds_of_rows(config, {}, rows, TUNING) == from_files
    assert key_sample.bounds_of_rows(config, {}, [], TUNING) == (b"",)


@pytest.mark.parametrize("source_type", ["csv", "jsonl", "parquet"])
def test_wide_rows_give_fewer_rows_not_a_longer_read(tmp_path, monkeypatch, source_type):
    """20 MB of 10 KB rows in one file: the sample stops near SAMPLE_BYTES
    (here 2 MB) instead of reading SAMPLE_ROWS rows (the whole file)."""
    (tmp_path / "in").mkdir()
    count, wide = 2000, "x" * 10_000
    path = tmp_path / "in" / f"wide.{source_type}"
    if source_type == "csv":
        path.write_text("id,name\n" + "".join(f"{i},{wide}{i}\n" for i in range(count)))
    elif source_type == "jsonl":
        path.write_text("".join(json.dumps({"id": i, "name": f"{wide}{i}"}) + "\n"
                                for i in range(count)))
    else:
        # Pages of about 1 MB (a page is read whole; by default Arrow
        # checks a page's size every 1024 values, here 10 MB), no dictionary.
        pq.write_table(pa.table({"id": list(range(count)),
                                 "name": [f"{wide}{i}" for i in range(count)]}), path,
                       row_group_size=count, compression="none", write_batch_size=100,
                       use_dictionary=False)
    size = path.stat().st_size
    read = _count_reads(monkeypatch, tmp_path / "in")
    monkeypatch.setattr(key_sample, "SAMPLE_BYTES", 2 << 20)
    # Without a key, so that the wide column is part of every key.
    bounds = key_sample.sample_bucket_bounds(_config(tmp_path / "in", source_type, key=None),
                                             {}, TUNING)
    assert len(bounds) == TUNING.hash_buckets
    assert 2 << 20 <= sum(read) < 5 << 20 < size, (sum(read), size)


def test_a_file_that_cannot_tell_its_place_leaves_the_row_limit(tmp_path):
    """A decompressing reader without tell() must not fail the sample."""
    import io

    class NoTell(io.BytesIO):
        def tell(self):
            raise io.UnsupportedOperation("tell")

    class Store:
        def open(self, path, mode="rb", **kwargs):
            return NoTell(b"id,name\n1,a\n")

    heads = key_sample._HeadReads(Store())
    handle = heads.open("any")
    other = key_sample._HeadReads(fsspec.filesystem("file"))
    (tmp_path / "t.csv").write_bytes(b"0123456789")
    with other.open(str(tmp_path / "t.csv")) as opened:
        opened.read(4)
        assert other.position() == 4
    assert heads.position() == 0 and not handle.closed and other.position() == 0
