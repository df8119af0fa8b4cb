"""Sources: listing, planning, labelling, and the Beam transforms on every output."""

import csv
import hashlib
import io
import json
import os

import apache_beam as beam
import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings, strategies as st
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to
from PIL import Image

from recordforge.transforms import sources
from recordforge.transforms.readers import csv as csv_reader, image_items, listing, tables
from recordforge.transforms.readers.images import ImageOptions
from recordforge.transforms.readers.jsonl import JsonlRunBatch, iter_jsonl
from recordforge.transforms.readers.rows import each_row
from recordforge.transforms.sources.outputs import COUNTS, DEAD, ROWS, batched


def encode(im, fmt, **params):
    buffer = io.BytesIO()
    im.save(buffer, fmt, **params)
    return buffer.getvalue()


def jpeg(color, size=(32, 24), mode="RGB"):
    return encode(Image.new(mode, size, color), "JPEG")


# ---------------------------------------------------------------------------
# corpora


@pytest.fixture
def csv_corpus(tmp_path):
    """A directory of CSV files with good rows around bad ones. Returns
    (root, expected rows, expected dead letters, number of input rows)."""
    root = tmp_path / "csv"
    root.mkdir()
    huge = "h" * 200_000
    (root / "a.csv").write_bytes(
        b"id,text\n"
        b"1,one\n"
        b'2,"two\nlines"\n'
        b"3,too,many\n"
        b"4,bad\xffutf8\n"
        + f"5,{huge}\n".encode()
        + b"6,nul\x00byte\n")
    (root / "b.csv").write_bytes(b"")
    (root / "c.csv").write_bytes(b"id,id\n1,2\n")
    (root / "_SUCCESS").write_bytes(b"")
    (root / ".hidden.csv").write_bytes(b"junk")
    rows = {("a.csv", 2, ("1", "one")), ("a.csv", 3, ("2", "two\nlines")),
            ("a.csv", 7, ("5", short(huge))), ("a.csv", 8, ("6", "nul\x00byte"))}
    dead = {("a.csv", 5, "csv_ragged_row"), ("a.csv", 6, "invalid_utf8"),
            ("b.csv", None, "empty_file"), ("c.csv", 1, "csv_bad_header")}
    # the empty b.csv holds no rows; c.csv's rows are unknown, counted as one
    return root, rows, dead, len(rows) + len(dead) - 1


def make_images(root, outside):
    """An image tree with good images around bad ones; `outside` is a directory
    beside it. Returns (good {rel: label}, dead {(rel, reason)})."""
    (root / "cat").mkdir(parents=True)
    (root / "dog" / "puppies").mkdir(parents=True)
    good = {"cat/a.jpg": "cat", "cat/b.JPG": "cat", "dog/c.png": "dog",
            "dog/puppies/d.jpg": "puppies"}
    (root / "cat" / "a.jpg").write_bytes(jpeg("red"))
    (root / "cat" / "b.JPG").write_bytes(jpeg("blue"))
    (root / "dog" / "c.png").write_bytes(encode(Image.new("RGBA", (10, 12), "green"), "PNG"))
    (root / "dog" / "puppies" / "d.jpg").write_bytes(jpeg("white"))
    full = jpeg("yellow", (64, 64))
    (root / "cat" / "truncated.jpg").write_bytes(full[: len(full) // 2])
    (root / "cat" / "empty.jpg").write_bytes(b"")
    (root / "dog" / "text.jpg").write_text("not an image")
    (root / "dog" / "gif.jpg").write_bytes(encode(Image.new("RGB", (8, 8)), "GIF"))
    (root / "dog" / "cmyk.jpg").write_bytes(jpeg((0, 0, 0, 0), mode="CMYK"))
    (root / "dog" / "tiny.jpg").write_bytes(jpeg("red", (2, 2)))
    (root / "loose.jpg").write_bytes(jpeg("red"))
    (root / "cat" / "notes.txt").write_text("not listed: extension")
    (root / "cat" / ".DS_Store").write_bytes(b"\0\0")
    (root / "cat" / "._a.jpg").write_bytes(b"resource fork")
    outside.mkdir()
    (outside / "secret.jpg").write_bytes(jpeg("red"))
    os.symlink(outside / "secret.jpg", root / "cat" / "link_out.jpg")
    os.symlink(outside, root / "dog" / "dir_out")
    os.symlink(root / "cat" / "missing.jpg", root / "cat" / "dangling.jpg")
    os.symlink(root, root / "dog" / "loop")  # a loop: must not hang listing
    os.symlink(root / "cat" / "a.jpg", root / "dog" / "alias.jpg")  # inside: read as a file
    good["dog/alias.jpg"] = "dog"
    dead = {("cat/truncated.jpg", "image_truncated"), ("cat/empty.jpg", "empty_file"),
            ("dog/text.jpg", "image_corrupt"), ("dog/gif.jpg", "image_format_not_allowed"),
            ("dog/cmyk.jpg", "image_format_not_allowed"), ("dog/tiny.jpg", "image_too_small"),
            ("cat/link_out.jpg", "path_outside_root"), ("dog/dir_out", "path_outside_root"),
            ("cat/dangling.jpg", "read_error")}
    return good, dead


IMAGE_OPTIONS = ImageOptions(decode="full", min_size=(4, 4), modes=("RGB", "RGBA", "L"))


# ---------------------------------------------------------------------------
# plain functions


def test_list_files(tmp_path, csv_corpus):
    root, *_ = csv_corpus
    _, files = listing.list_files(str(root))
    assert [os.path.basename(f) for f in files] == ["a.csv", "b.csv", "c.csv"]
    _, files = listing.list_files(str(root / "*.csv"))
    assert [os.path.basename(f) for f in files] == ["a.csv", "b.csv", "c.csv"]
    _, files = listing.list_files(str(root / "a.csv"))
    assert files == [str(root / "a.csv")]
    assert listing.list_files(str(tmp_path / "none*.csv"))[1] == []


def test_plan_table_ranges_partition_a_file(tmp_path):
    path = tmp_path / "big.csv"
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["k", "v"])
        writer.writerows([[i, f"line\n{i}" if i % 5 == 0 else i] for i in range(500)])
    fs = fsspec.filesystem("file")
    units = tables.plan_table_ranges(fs, str(path), "csv", range_bytes=600)
    assert len(units) > 5
    assert units[0].start == 0 and units[-1].end is None
    assert all(a.end == b.start for a, b in zip(units, units[1:]))
    got = [item for unit in units for item in each_row(tables.read_range(fs, unit, "csv"))]
    assert got == list(csv_reader.iter_csv(str(path)))
    assert len(tables.plan_table_ranges(fs, str(path), "csv", range_bytes=0)) == 1


def test_plan_parquet_by_row_groups(tmp_path):
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"x": list(range(1000))}), path, row_group_size=100)
    fs = fsspec.filesystem("file")
    units = tables.plan_table_ranges(fs, str(path), "parquet", range_bytes=1)
    assert [(u.start, u.end) for u in units] == [(i, i + 1) for i in range(10)]
    got = [item.values["x"] for unit in units
           for item in each_row(tables.read_range(fs, unit, "parquet"))]
    assert got == list(range(1000))
    assert len(tables.plan_table_ranges(fs, str(path), "parquet")) == 1


def rel_of(letter):
    value = letter["input"]
    return value.get("path") or value.get("file") if isinstance(value, dict) else value


def test_plan_images_directory_labels(tmp_path):
    good, dead = make_images(tmp_path / "img", tmp_path / "outside")
    batches, problems = image_items.plan_images(str(tmp_path / "img"), [".jpg", "png"],
                                            "directory", batch_size=3)
    assert all(1 <= len(b) <= 3 for b in batches)
    items = [item for batch in batches for item in batch]
    listed = {item.rel: item.label for item in items}
    decode_failures = {rel for rel, reason in dead if reason.startswith(("image", "empty"))}
    assert listed == {**good, **{rel: rel.split("/")[0] for rel in decode_failures}}
    assert {(rel_of(p), p["reason"]) for p in problems} == {
        ("cat/link_out.jpg", "path_outside_root"), ("dog/dir_out", "path_outside_root"),
        ("cat/dangling.jpg", "read_error"), ("loose.jpg", "unlabeled_image")}
    assert image_items.known_labels(str(tmp_path / "img"), "directory", [".jpg", ".png"]) == [
        "cat", "dog", "puppies"]


def test_plan_images_labels_table(tmp_path):
    make_images(tmp_path / "img", tmp_path / "outside")
    labels = tmp_path / "labels.csv"
    labels.write_text(
        "file,label\n"
        "cat/a.jpg,kitty\n"            # 2
        "./dog/c.png,doggo\n"          # 3 normalised
        "/etc/passwd,x\n"              # 4 absolute
        "../outside/secret.jpg,x\n"    # 5 escapes
        "cat/../../x.jpg,x\n"          # 6 escapes after normalising
        "cat/missing.jpg,kitty\n"      # 7 no such file
        "cat/a.jpg,other\n"            # 8 listed twice
        "dog/text.jpg\n"               # 9 ragged
        "loose.jpg,\n"                 # 10 no label
        "cat/link_out.jpg,x\n")        # 11 reported by the listing already
    batches, problems = image_items.plan_images(str(tmp_path / "img"), [".jpg", ".png"],
                                            str(labels))
    items = {item.rel: item.label for batch in batches for item in batch}
    assert items == {"cat/a.jpg": "kitty", "dog/c.png": "doggo"}
    from_table = {(p["row"], p["reason"]) for p in problems if p["source"] == str(labels)}
    assert from_table == {(4, "path_outside_root"), (5, "path_outside_root"),
                          (6, "path_outside_root"), (7, "read_error"), (8, "labels_invalid"),
                          (9, "csv_ragged_row"), (10, "labels_invalid")}
    unlabeled = {rel_of(p) for p in problems if p["reason"] == "unlabeled_image"}
    assert "cat/b.JPG" in unlabeled and "dog/puppies/d.jpg" in unlabeled
    assert "cat/link_out.jpg" not in unlabeled
    assert image_items.known_labels(str(tmp_path / "img"), str(labels), [".jpg"]) == [
        "doggo", "kitty", "x"]


def test_read_image_items_reports_vanished_files(tmp_path):
    make_images(tmp_path / "img", tmp_path / "outside")
    batches, _ = image_items.plan_images(str(tmp_path / "img"), [".jpg"], "directory")
    items = [item for batch in batches for item in batch if item.rel == "cat/a.jpg"]
    os.remove(tmp_path / "img" / "cat" / "a.jpg")
    [letter] = list(image_items.read_image_items(fsspec.filesystem("file"), items, IMAGE_OPTIONS))
    assert letter["reason"] == "read_error" and "cat/a.jpg" in letter["message"]
    assert letter["input"] == {"path": "cat/a.jpg", "label": "cat"}


def test_scan_distinct(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"c": "x"}\n{"c": "y"}\nbad\n{"d": 1}\n')
    (tmp_path / "b.jsonl").write_text('{"c": "x"}\n{"c": 3}\n{"c": null}\n')
    assert tables.scan_distinct(str(tmp_path), "jsonl", "c") == ["3", "x", "y"]


# ---------------------------------------------------------------------------
# Beam


def short(text):
    """Long values compared by length and content hash, to keep failure messages readable."""
    if not isinstance(text, str) or len(text) < 100:
        return text
    return len(text), hashlib.md5(text.encode("utf-8")).hexdigest()


def flat_rows(rows):
    return (rows
            | "Flatten batches" >> beam.FlatMap(lambda batch: batch)
            | "Key rows" >> beam.Map(
                lambda r: (os.path.basename(r.source), r.row,
                           (r.values["id"], short(r.values["text"])))))


def run_csv(csv_corpus, options=None):
    root, rows, dead, total = csv_corpus
    with TestPipeline(options=options) as p:
        out = p | sources.ReadTable(str(root), "csv", batch_size=2, range_bytes=16)
        assert_that(out.rows | "Batch sizes" >> beam.Map(len),
                    lambda sizes: all(1 <= s <= 2 for s in sizes) or sizes.fail(),
                    label="batches")
        assert_that(flat_rows(out.rows), equal_to(sorted(rows)), label="rows")
        assert_that(out.dead_letter | beam.Map(
            lambda d: (os.path.basename(d["source"]), d["row"], d["reason"])),
            equal_to(sorted(dead, key=str)), label="dead")
        assert_that(out.counts | "Total" >> beam.combiners.Count.Globally()
                    | beam.Map(lambda n: n > 0), equal_to([True]), label="has_counts")
        assert_that(out.counts | beam.Values() | beam.CombineGlobally(sum),
                    equal_to([total]), label="counts")


def test_read_table_csv_corpus(csv_corpus):
    run_csv(csv_corpus)


def test_read_table_multi_processing(csv_corpus):
    run_csv(csv_corpus, PipelineOptions(["--direct_running_mode=multi_processing",
                                         "--direct_num_workers=2"]))


def test_jsonl_batches_are_joined_and_cut_by_the_bytes_of_their_lines():
    """JSONL rows come in runs or single lines and go on in batches cut by
    the bytes of their lines, each ending with the line that brings it to
    the bound; the values already read go with their rows."""
    lines = [b'{"a": %d}' % at for at in range(10)]  # 8 bytes each
    pieces = [JsonlRunBatch("t", lines[:3], [1, 2, 3]),
              JsonlRunBatch("t", lines[3:4], [5], [{"a": 3}]),
              JsonlRunBatch("t", lines[4:], list(range(6, 12)))]
    whole = JsonlRunBatch.concatenated(pieces)
    assert whole.lines == lines and whole.rows == [1, 2, 3, 5, 6, 7, 8, 9, 10, 11]
    assert whole.num_bytes == 80
    batches, rest = whole.cut(20)
    assert [batch.rows for batch in batches] == [[1, 2, 3], [5, 6, 7], [8, 9, 10]]
    assert rest.rows == [11]
    assert batches[1]._values == [{"a": 3}, None, None]
    assert [row.values for row in batches[1]] == [{"a": 3}, {"a": 4}, {"a": 5}]
    assert whole.cut(80) == ([whole], None) and whole.cut(81) == ([], whole)
    with pytest.raises(ValueError):
        JsonlRunBatch.concatenated([pieces[0], JsonlRunBatch("u", lines[:1], [1])])


def _cut_by_lines(lines: list[bytes], batch_bytes: int) -> list[list[bytes]]:
    """The batches (the last: the rest) of `JsonlRunBatch.cut`, line by line."""
    batches, batch, held = [], [], 0
    for line in lines:
        batch.append(line)
        held += len(line)
        if held >= batch_bytes:
            batches.append(batch)
            batch, held = [], 0
    return batches + [batch] if batch else batches


@settings(max_examples=200, deadline=None)
@given(lines=st.lists(st.binary(min_size=1, max_size=12).map(lambda b: b.replace(b"\n", b"x")),
                      min_size=1, max_size=40),
       batch_bytes=st.integers(1, 60), first=st.integers(1, 5))
def test_jsonl_batches_cut_at_the_lines_the_bytes_reach(lines, batch_bytes, first):
    """Cutting a run where its LFs are counted ends each batch at the line
    that brings it to the bound, as adding the lines one by one does; a
    batch's lines, numbers and values follow them."""
    rows = range(first, first + len(lines))
    batch = JsonlRunBatch("t", lines, rows, [{"at": at} for at in rows])
    whole, rest = batch.cut(batch_bytes)
    expected = _cut_by_lines(lines, batch_bytes)
    got = whole + ([rest] if rest is not None else [])
    assert [part.lines for part in got] == expected
    assert (rest is None) == (sum(map(len, expected[-1])) >= batch_bytes)
    assert [at for part in got for at in part.rows] == list(rows)
    assert [row.values for part in got for row in part] == [{"at": at} for at in rows]
    assert [part.line(len(part) - 1) for part in got] == [part[-1] for part in expected]
    assert [len(part) for part in got] == [len(part) for part in expected]


def test_jsonl_rows_are_batched_by_bytes_without_the_kernel(tmp_path, monkeypatch):
    """Without the native kernels the reader gives each row as a batch of
    one line with its values, so its rows are batched as the kernel's runs
    are: by the bytes of their lines, not their number."""
    monkeypatch.setattr("recordforge.transforms.readers.jsonl.kernels", lambda: None)
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"".join(b'{"a": %d}\n' % at for at in range(10)) + b"[1]\n")
    items = list(iter_jsonl(str(path), source="t", columns=True))
    assert all(isinstance(item, JsonlRunBatch) and item._values is not None
               for item in items[:10])
    out = list(batched(items, 1000, "t", 20))
    assert [(tag, list(value.rows) if tag == ROWS else value) for tag, value in out] == [
        (ROWS, [1, 2, 3]), (ROWS, [4, 5, 6]), (ROWS, [7, 8, 9]), (DEAD, items[10]),
        (ROWS, [10]), (COUNTS, ("t", 11))]


def test_read_table_memory_filesystem_jsonl():
    fs = fsspec.filesystem("memory")
    fs.pipe("/rt/part-0.jsonl", b'{"id": 1, "text": "a"}\n[1]\n{"id": 2, "text": "b"}\n')
    fs.pipe("/rt/part-1.jsonl", b'{"id": 3, "text": "c"}\n{broken\n')
    with TestPipeline() as p:
        out = p | sources.ReadTable("memory://rt", "jsonl")
        assert_that(flat_rows(out.rows), equal_to([
            ("part-0.jsonl", 1, (1, "a")), ("part-0.jsonl", 3, (2, "b")),
            ("part-1.jsonl", 1, (3, "c"))]), label="rows")
        assert_that(out.dead_letter | beam.Map(lambda d: (d["source"], d["row"], d["reason"])),
                    equal_to([("memory:///rt/part-0.jsonl", 2, "json_invalid"),
                              ("memory:///rt/part-1.jsonl", 2, "json_invalid")]), label="dead")
        assert_that(out.counts | beam.CombinePerKey(sum), equal_to([
            ("memory:///rt/part-0.jsonl", 3), ("memory:///rt/part-1.jsonl", 2)]),
            label="counts")


def test_read_table_parquet_and_no_match(tmp_path):
    pq.write_table(pa.table({"id": list(range(30)), "text": [str(i) for i in range(30)]}),
                   tmp_path / "t.parquet", row_group_size=7)
    (tmp_path / "bad.parquet").write_bytes(b"nope")
    with TestPipeline() as p:
        out = p | sources.ReadTable(str(tmp_path), "parquet", batch_size=4, range_bytes=1)
        assert_that(flat_rows(out.rows), equal_to(
            [("t.parquet", i + 1, (i, str(i))) for i in range(30)]), label="rows")
        assert_that(out.dead_letter | beam.Map(lambda d: d["reason"]),
                    equal_to(["parquet_invalid"]), label="dead")
        assert_that(out.counts | beam.Values() | beam.CombineGlobally(sum), equal_to([31]),
                    label="counts")
    with TestPipeline() as p:
        out = p | sources.ReadTable("memory://nothing/here*.csv", "csv")
        assert_that(out.rows, equal_to([]), label="rows")
        assert_that(out.dead_letter | beam.Map(lambda d: (d["reason"], d["message"])),
                    equal_to([("read_error", "no input files match memory://nothing/here*.csv")]),
                    label="dead")
        assert_that(out.counts, equal_to([("memory://nothing/here*.csv", 1)]), label="counts")


def test_read_images(tmp_path):
    good, dead = make_images(tmp_path / "img", tmp_path / "outside")
    dead = dead | {("loose.jpg", "unlabeled_image")}
    with TestPipeline() as p:
        out = p | sources.ReadImages(str(tmp_path / "img"), (".jpg", ".png"), "directory",
                                     IMAGE_OPTIONS, batch_size=2)
        assert_that(out.rows | beam.FlatMap(lambda b: b) | beam.Map(
            lambda r: (r.values["path"], r.values["label"], r.row, r.values["format"],
                       r.values["width"], r.source.endswith(r.values["path"]))),
            equal_to([("cat/a.jpg", "cat", None, "JPEG", 32, True),
                      ("cat/b.JPG", "cat", None, "JPEG", 32, True),
                      ("dog/alias.jpg", "dog", None, "JPEG", 32, True),
                      ("dog/c.png", "dog", None, "PNG", 10, True),
                      ("dog/puppies/d.jpg", "puppies", None, "JPEG", 32, True)]), label="rows")
        assert_that(out.dead_letter | beam.Map(lambda d: (rel_of(d), d["reason"])),
                    equal_to(sorted(dead)), label="dead")
        assert_that(out.dead_letter | "Provenance" >> beam.Map(
            lambda d: d["source"].startswith(str(tmp_path / "img")) and d["row"] is None
            and json.dumps(d) is not None), equal_to([True] * len(dead)), label="provenance")
        assert_that(out.counts | beam.Values() | beam.CombineGlobally(sum),
                    equal_to([len(good) + len(dead)]), label="counts")


def test_read_images_memory_filesystem_with_labels_table():
    fs = fsspec.filesystem("memory")
    fs.pipe("/ri/imgs/x/1.jpg", jpeg("red"))
    fs.pipe("/ri/imgs/x/2.jpg", jpeg("blue")[:100])
    fs.pipe("/ri/labels.jsonl", b'{"file": "x/1.jpg", "label": "one"}\n'
                                b'{"file": "x/2.jpg", "label": "two"}\n'
                                b'{"file": "x/3.jpg", "label": "three"}\n')
    with TestPipeline() as p:
        out = p | sources.ReadImages("memory://ri/imgs", (".jpg",), "memory://ri/labels.jsonl",
                                     ImageOptions())
        assert_that(out.rows | beam.FlatMap(lambda b: b) | beam.Map(
            lambda r: (r.source, r.values["path"], r.values["label"], r.values["height"])),
            equal_to([("memory:///ri/imgs/x/1.jpg", "x/1.jpg", "one", 24)]), label="rows")
        assert_that(out.dead_letter | beam.Map(lambda d: (d["source"], d["row"], d["reason"])),
                    equal_to([("memory:///ri/imgs/x/2.jpg", None, "image_truncated"),
                              ("memory://ri/labels.jsonl", 3, "read_error")]), label="dead")
        assert_that(out.counts | beam.Values() | beam.CombineGlobally(sum), equal_to([3]),
                    label="counts")


def test_transforms_validate_arguments():
    with pytest.raises(ValueError, match="format"):
        sources.ReadTable("x", "xml")
    with pytest.raises(ValueError, match="labels"):
        sources.ReadImages("x", (".jpg",), "labels.txt", ImageOptions())
    with pytest.raises(ValueError, match="extensions"):
        sources.ReadImages("x", (), "directory", ImageOptions())


def test_read_table_on_dask(csv_corpus):
    distributed = pytest.importorskip("dask.distributed")
    from apache_beam.runners.dask.dask_runner import DaskRunner

    root, rows, dead, total = csv_corpus
    # Worker processes with one thread each, as the shipped Dask profile and
    # the end-to-end Dask build use: Beam 2.77's Dask runner has been seen to
    # repeat elements when one in-process worker runs bundles on two threads.
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        options = PipelineOptions([f"--dask_client_address={cluster.scheduler_address}"])
        pipeline = beam.Pipeline(runner=DaskRunner(), options=options)
        out = pipeline | sources.ReadTable(str(root), "csv", batch_size=2, range_bytes=16)
        assert_that(flat_rows(out.rows), equal_to(sorted(rows)), label="rows")
        assert_that(out.dead_letter | beam.Map(lambda d: d["reason"]),
                    equal_to(sorted(r for _, _, r in dead)), label="dead")
        assert_that(out.counts | beam.Values() | beam.CombineGlobally(sum),
                    equal_to([total]), label="counts")
        result = pipeline.run()
        try:
            result.wait_until_finish()
        finally:
            result.client.close()  # the runner's own client to the cluster
