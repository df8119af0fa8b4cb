"""File and folder names that are not valid UTF-8 (any bytes but ``/`` and
NUL, as Linux allows): a table file is read, its name shown with its
undecodable bytes as ``\\xNN``; an image whose path is not UTF-8 is an
``invalid_utf8`` dead letter; never a crash at listing, planning or between
the build's steps."""

import json
import os
import shutil
import textwrap

from apache_beam.coders import coders
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from recordforge.schemas.dead_letters import printable_name
from recordforge.transforms.readers import image_items, listing, tables
from recordforge.transforms.readers.rows import SourceRow, each_row

# One path component: any bytes but "/" and NUL, not hidden ("." or "_").
NAME = st.binary(min_size=1, max_size=30).map(
    lambda raw: b"n" + raw.replace(b"/", b"s").replace(b"\0", b"z"))
_CODER = coders.FastPrimitivesCoder()


def _png() -> bytes:
    import io
    out = io.BytesIO()
    Image.new("RGB", (3, 2), (9, 9, 9)).save(out, format="PNG")
    return out.getvalue()


PNG = _png()


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _coded(record) -> None:
    assert _CODER.decode(_CODER.encode(record)) == record
    json.dumps(record, ensure_ascii=False).encode("utf-8")


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(folders=st.lists(NAME, min_size=1, max_size=3, unique=True),
       files=st.lists(NAME, min_size=1, max_size=4, unique=True))
def test_image_trees_with_any_byte_names(tmp_path, folders, files):
    root = os.fsencode(tmp_path) + b"/images"
    shutil.rmtree(root, ignore_errors=True)
    expected = {}
    for folder in folders:
        os.makedirs(os.path.join(root, folder))
        for name in files:
            path = os.path.join(root, folder, name + b".png")
            with open(path, "wb") as f:
                f.write(PNG)
            expected[(folder, name)] = _is_utf8(folder) and _is_utf8(name)
    batches, problems = image_items.plan_images(os.fsdecode(root), [".png"], "directory")
    items = [item for batch in batches for item in batch]
    assert len(items) + len(problems) == len(expected)
    assert len(items) == sum(expected.values())
    for problem in problems:
        _coded(problem)
        assert problem["reason"] == "invalid_utf8"
        assert "\\x" in problem["input"]["path"]
    fs, _, _ = listing.list_images(os.fsdecode(root), [".png"])
    rows = list(image_items.read_image_items(fs, items, image_items.ImageOptions()))
    assert all(isinstance(row, SourceRow) for row in rows)
    assert sorted(row.values["label"] for row in rows) == sorted(
        folder.decode() for (folder, name), good in expected.items() if good)
    assert image_items.known_labels(os.fsdecode(root), "directory", [".png"]) == sorted(
        {folder.decode() for (folder, _), good in expected.items() if good})


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(names=st.lists(NAME, min_size=1, max_size=5, unique=True))
def test_table_directories_with_any_byte_names(tmp_path, names):
    root = os.fsencode(tmp_path) + b"/tables"
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    for number, name in enumerate(names):
        with open(os.path.join(root, name + b".csv"), "wb") as f:
            f.write(b"id,text\n%d,x\n" % number)
    fs, files = listing.list_files(os.fsdecode(root), [".csv"])
    assert len(files) == len(names)
    ids = []
    for fs_path in files:
        units = tables.plan_table_ranges(fs, fs_path, "csv")
        assert _CODER.decode(_CODER.encode(units[0])) == units[0]  # (pickled)
        for item in each_row(tables.read_range(fs, units[0], "csv")):
            assert isinstance(item, SourceRow)
            item.source.encode("utf-8")
            assert item.source == printable_name(fs_path)
            ids.append(int(item.values["id"]))
    assert sorted(ids) == list(range(len(names)))


def test_builds_with_names_that_are_not_utf8(tmp_path, run_build):
    images = os.fsencode(tmp_path / "images")
    for folder in (b"cats", b"dog\xe9"):
        os.makedirs(os.path.join(images, folder))
        for name in (b"a.png", b"b\xff.png"):
            with open(os.path.join(images, folder, name), "wb") as f:
                f.write(PNG)
    tables_dir = os.fsencode(tmp_path / "tables")
    os.makedirs(tables_dir)
    for number, name in enumerate((b"a.csv", b"b\xe9.csv", b"c\xff\xfe.csv")):
        with open(os.path.join(tables_dir, name), "wb") as f:
            f.write(b"id,text\n%d,x\n" % number)
    image_config = tmp_path / "images.yaml"
    image_config.write_text(textwrap.dedent(f"""\
        name: images
        version: "1.0.0"
        source: {{type: images, path: {tmp_path / 'images'}, extensions: [.png]}}
        features:
          image: {{type: bytes}}
          path: {{type: string}}
          label: {{type: int64, vocabulary: auto}}
        key: path
        output: {{path: {tmp_path / 'out-images'}, shard_size: 1MB}}
        dead_letter: {{max_error_rate: 0.9}}
        """))
    status, _, err = run_build(image_config)
    assert status == 0, err
    version = tmp_path / "out-images" / "1.0.0"
    manifest = json.loads((version / "manifest.json").read_text())
    assert manifest["vocabularies"] == {"label": ["cats"]}
    assert manifest["dead_letter"]["by_reason"] == {"invalid_utf8": 3}
    letters = [json.loads(line) for line in
               (version / "dead_letter" / "part-00000.jsonl").read_text().splitlines()]
    assert sorted(letter["key"] for letter in letters) == \
        ["cats/b\\xff.png", "dog\\xe9/a.png", "dog\\xe9/b\\xff.png"]

    table_config = tmp_path / "tables.yaml"
    table_config.write_text(textwrap.dedent(f"""\
        name: tables
        version: "1.0.0"
        source: {{type: csv, path: {tmp_path / 'tables'}}}
        features:
          id: {{type: int64}}
          text: {{type: string}}
        output: {{path: {tmp_path / 'out-tables'}, shard_size: 1MB}}
        """))
    status, _, err = run_build(table_config, "--", "--direct_running_mode=multi_processing",
                               "--direct_num_workers=2", beam_args=[])
    assert status == 0, err
    manifest = json.loads((tmp_path / "out-tables" / "1.0.0" / "manifest.json").read_text())
    assert manifest["splits"]["train"]["num_examples"] == 3
