"""Inputs are fingerprinted in the manifest (size, a version token and a
content token per file, what the listing skipped); an input rewritten, truncated, appended to,
removed or added while a build reads fails it, and nothing is published."""

import json
import os
import textwrap

import pytest
import xxhash
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from recordforge.transforms.readers import inputs as inputs_lib
from recordforge.transforms.sources import images as image_source
from recordforge.transforms import unit_conversion


def _table_config(tmp_path, data, cache: bool = True) -> str:
    config = tmp_path / "tables.yaml"
    config.write_text(textwrap.dedent(f"""\
        name: changing
        version: "1.0.0"
        source: {{type: csv, path: {data}}}
        features:
          id: {{type: int64}}
        output: {{path: {tmp_path / 'out'}, shard_size: 1MB}}
        cache: {{enabled: {str(cache).lower()}}}
        """))
    return config


def _rows(first: int, count: int) -> str:
    return "id\n" + "".join(f"{i}\n" for i in range(first, first + count))


def _keeping_mtime(path, write):
    before = os.stat(path)
    write(path)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


CHANGES = {
    "truncated": lambda data: (data / "a.csv").write_text(_rows(0, 10)),
    "appended": lambda data: open(data / "a.csv", "a").write("999999\n"),
    "rewritten_same_size": lambda data: (data / "a.csv").write_text(
        _rows(0, 500).replace("1", "2")),
    # rsync -t / cp -p: other bytes of the same size under the old mtime.
    "rewritten_same_size_and_mtime": lambda data: _keeping_mtime(
        data / "a.csv", lambda path: path.write_text(_rows(0, 500).replace("1", "2"))),
    "removed": lambda data: (data / "b.csv").unlink(),
    "added": lambda data: (data / "c.csv").write_text(_rows(5000, 5)),
}


@pytest.mark.parametrize("cache", [True, False], ids=["cache", "no-cache"])
@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_table_changed_while_the_build_reads_fails_it(tmp_path, run_build, monkeypatch,
                                                        change, cache):
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.csv").write_text(_rows(0, 500))
    (data / "b.csv").write_text(_rows(1000, 500))
    read_range = unit_conversion.read_range
    changed = []

    def read_and_change(fs, unit, *args, **kwargs):
        # A writer touching the source while the build reads it (once).
        if not changed:
            changed.append(change)
            CHANGES[change](data)
        return read_range(fs, unit, *args, **kwargs)

    # (the units of a table are read where they are converted, with the
    # cache or without)
    monkeypatch.setattr(unit_conversion, "read_range", read_and_change)
    status, _, err = run_build(_table_config(tmp_path, data, cache))
    assert changed and status == 1
    assert "the inputs changed while the build read them; nothing was published" in err
    assert not (tmp_path / "out" / "1.0.0").exists()
    assert not (tmp_path / "out" / "LATEST").exists()
    assert not any((tmp_path / "out" / ".staging").glob("*"))


@settings(max_examples=4, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(change=st.sampled_from(["truncated", "appended", "rewritten_same_size",
                               "rewritten_same_size_and_mtime"]))
def test_pieces_of_a_file_written_while_read_are_never_reused(tmp_path_factory, run_build,
                                                              monkeypatch, change):
    # a.csv changes after its key is taken and before it is read; once it
    # holds its first bytes again, its rows must be read again, not taken
    # from pieces of the bytes read in between.
    tmp_path = tmp_path_factory.mktemp("written-while-read")
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.csv").write_text(_rows(0, 500))
    (data / "b.csv").write_text(_rows(1000, 500))
    first_bytes = (data / "a.csv").read_bytes()
    read_range = unit_conversion.read_range
    changed = []

    def read_and_change(fs, unit, *args, **kwargs):
        if not changed and unit.source.endswith("a.csv"):
            changed.append(change)
            CHANGES[change](data)
        return read_range(fs, unit, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(unit_conversion, "read_range", read_and_change)
        status, _, err = run_build(_table_config(tmp_path, data))
    assert changed and status == 1, err
    (data / "a.csv").write_bytes(first_bytes)
    status, _, err = run_build(_table_config(tmp_path, data))
    assert status == 0, err
    manifest = json.loads((tmp_path / "out" / "1.0.0" / "manifest.json").read_text())
    assert manifest["cache"]["files_reused"] == 1 and manifest["cache"]["files_converted"] == 1
    assert manifest["num_input_rows"] == 1000


def test_an_image_changed_while_the_build_reads_fails_it(tmp_path, run_build, monkeypatch):
    root = tmp_path / "images" / "cats"
    root.mkdir(parents=True)
    for name in ("a.png", "b.png"):
        Image.new("RGB", (4, 4), "red").save(root / name)
    read_image_items = image_source.read_image_items

    def read_and_change(fs, items, options):
        Image.new("RGB", (5, 5), "blue").save(root / "b.png")
        return read_image_items(fs, items, options)

    monkeypatch.setattr(image_source, "read_image_items", read_and_change)
    config = tmp_path / "images.yaml"
    config.write_text(textwrap.dedent(f"""\
        name: changing
        version: "1.0.0"
        source: {{type: images, path: {tmp_path / 'images'}, extensions: [.png]}}
        features:
          image: {{type: bytes}}
        output: {{path: {tmp_path / 'out'}, shard_size: 1MB}}
        """))
    status, _, err = run_build(config)
    assert status == 1 and "b.png" in err and "changed" in err
    assert not (tmp_path / "out" / "1.0.0").exists()


def test_the_manifest_fingerprints_every_input(tmp_path, run_build):
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.csv").write_text(_rows(0, 50))
    (data / "b.csv.gz").write_bytes(__import__("gzip").compress(_rows(50, 5).encode()))
    (data / "_SUCCESS").write_text("")
    (data / "notes.txt").write_text("not a table")
    status, _, err = run_build(_table_config(tmp_path, data))
    assert status == 0, err
    assert "input files: 2 read, 2 skipped (extension 1, hidden 1)" in err
    manifest = json.loads((tmp_path / "out" / "1.0.0" / "manifest.json").read_text())
    expected = [{"path": str(data / name), "size": os.stat(data / name).st_size,
                 "mtime_ns": os.stat(data / name).st_mtime_ns,
                 "content": "xxh3_128:" + xxhash.xxh3_128((data / name).read_bytes()).hexdigest()}
                for name in ("a.csv", "b.csv.gz")]
    assert manifest["inputs"] == {"files": expected, "skipped": {"extension": 1, "hidden": 1}}
    assert list(manifest).index("inputs") == list(manifest).index("dead_letter") + 1


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abcde"), st.integers(0, 3), st.integers(0, 2)),
                max_size=6, unique_by=lambda entry: entry[0]),
       st.lists(st.tuples(st.sampled_from("abcde"), st.integers(0, 3), st.integers(0, 2)),
                max_size=6, unique_by=lambda entry: entry[0]))
def test_changed_inputs_reports_exactly_the_files_that_differ(before, after):
    def inputs(entries):
        return {"files": [{"path": name, "size": size, "mtime_ns": mtime}
                          for name, size, mtime in sorted(entries)], "skipped": {}}

    lines = inputs_lib.changed_inputs(inputs(before), inputs(after), limit=100)
    differing = set(before) ^ set(after)
    assert {line.split()[0] for line in lines} == {name for name, _, _ in differing}
    assert (not lines) == (sorted(before) == sorted(after))


def test_the_report_counts_the_input_files(tmp_path, run_build):
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.csv").write_text(_rows(0, 20))
    (data / ".hidden.csv").write_text("junk")
    (data / "notes.md").write_text("not a table")
    status, _, err = run_build(_table_config(tmp_path, data))
    assert status == 0, err
    page = (tmp_path / "out" / "1.0.0" / "report.html").read_text()
    assert "input files: 1 read, 2 skipped (extension 1, hidden 1)" in page
