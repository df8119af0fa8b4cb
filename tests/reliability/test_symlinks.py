"""Symbolic links in table sources follow the image sources' rule: a link to a
file inside the source is read, one leading outside it (or to nothing) is a
dead letter (``path_outside_root``, ``read_error``), never dropped silently
and never read; globs never read outside the folder they start in."""

import json
import os
import shutil
import textwrap

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recordforge.transforms.readers.listing import list_image_files, list_tables

# Each entry of the source folder: a plain file, or a link to a file inside,
# to a file outside, to nothing, to a folder outside or to a folder inside.
KINDS = st.sampled_from(["file", "inside", "outside", "dangling", "dir_outside", "dir_inside"])


def _layout(tmp_path, kinds, extension):
    base = tmp_path / "layout"
    shutil.rmtree(base, ignore_errors=True)
    root, outside = base / "root", base / "outside"
    (root / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / f"far{extension}").write_bytes(b"id\n1\n")
    (root / "sub" / f"near{extension}").write_bytes(b"id\n2\n")
    expected = {"listed": {f"sub/near{extension}"}, "outside": set(), "dangling": set()}
    for index, kind in enumerate(kinds):
        name = f"e{index}{extension}" if not kind.startswith("dir") else f"d{index}"
        path = root / name
        if kind == "file":
            path.write_bytes(b"id\n3\n")
            expected["listed"].add(name)
        elif kind == "inside":
            os.symlink(root / "sub" / f"near{extension}", path)
            expected["listed"].add(name)
        elif kind == "outside":
            os.symlink(outside / f"far{extension}", path)
            expected["outside"].add(name)
        elif kind == "dangling":
            os.symlink(base / "nothing", path)
            expected["dangling"].add(name)
        elif kind == "dir_outside":
            os.symlink(outside, path)
            expected["outside"].add(name)
        else:
            os.symlink(root / "sub", path)  # an alias of a listed folder
    return root, outside, expected


def _inside(path: str, root) -> bool:
    real_root = os.path.realpath(root)
    return os.path.commonpath([real_root, os.path.realpath(path)]) == real_root


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(KINDS, max_size=8))
def test_table_directories_and_globs_with_any_links(tmp_path, kinds):
    root, _, expected = _layout(tmp_path, kinds, ".csv")
    listing = list_tables(str(root), [".csv"])
    rel = {os.path.relpath(path, root) for path in listing.files}
    assert rel == expected["listed"]
    assert all(_inside(path, root) for path in listing.files)
    by_reason = {}
    for problem in listing.problems:
        assert problem["rows"] is None  # a table file's rows are unknown
        by_reason.setdefault(problem["reason"], set()).add(problem["input"]["path"])
    assert by_reason.get("path_outside_root", set()) == expected["outside"]
    assert by_reason.get("read_error", set()) == expected["dangling"]

    glob = list_tables(f"{root}/*.csv", None)
    assert all(_inside(path, root) for path in glob.files)
    top_level = {name for name in expected["listed"] if "/" not in name}
    assert {os.path.basename(path) for path in glob.files} == top_level
    assert {os.path.basename(problem["input"]["path"]) for problem in glob.problems} == \
        {name for name in expected["outside"] | expected["dangling"] if name.endswith(".csv")}


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(KINDS, max_size=8))
def test_image_and_table_sources_share_the_link_rule(tmp_path, kinds):
    root, _, expected = _layout(tmp_path, kinds, ".png")
    images = list_image_files(str(root), [".png"])
    tables = list_tables(str(root), [".png"])
    assert {rel for _, rel in images.files} == \
        {os.path.relpath(path, root) for path in tables.files}
    assert [(p["reason"], p["input"]) for p in images.problems] == \
        [(p["reason"], p["input"]) for p in tables.problems]


def test_a_build_never_reads_a_table_outside_its_source(tmp_path, run_build):
    data, outside = tmp_path / "data", tmp_path / "elsewhere"
    data.mkdir()
    outside.mkdir()
    (data / "a.csv").write_text("id\n" + "".join(f"{i}\n" for i in range(50)))
    (outside / "secret.csv").write_text("id\n999\n")
    os.symlink(outside / "secret.csv", data / "b.csv")
    config = tmp_path / "c.yaml"
    for path, name in ((data, "dir"), (f"{data}/*.csv", "glob")):
        config.write_text(textwrap.dedent(f"""\
            name: links
            version: "1.0.0"
            source: {{type: csv, path: "{path}"}}
            features:
              id: {{type: int64}}
            output: {{path: {tmp_path / name}, shard_size: 1MB}}
            dead_letter: {{max_error_rate: 1.0}}
            """))
        status, _, err = run_build(config)
        assert status == 0, err
        version = tmp_path / name / "1.0.0"
        letters = (version / "dead_letter" / "part-00000.jsonl").read_text()
        assert '"reason": "path_outside_root"' in letters and "b.csv" in letters
        manifest = json.loads((version / "manifest.json").read_text())
        assert manifest["splits"]["train"]["num_examples"] == 50  # never the 999 outside
        assert manifest["dead_letter"]["by_reason"] == {"path_outside_root": 1}
