"""FIFOs, sockets and devices among the inputs (issue 41.3).

Opening a FIFO blocks until something writes to it, and a device can be read
forever, so a listing never opens them: each is counted as skipped
(``special_file``), for tables and images, in a directory, as a glob match,
as `source.path` itself, or behind a link inside the root. Listings are
checked over generated trees; one real build over a directory holding a
FIFO runs as a process with a timeout, as the old code hung in it.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recordforge.transforms.readers.inputs import source_inputs
from recordforge.transforms.readers.listing import list_image_files, list_tables

KINDS = ("fifo", "socket", "device", "link_to_fifo")


def _make(path: Path, kind: str) -> None:
    """Creates a non-regular file of `kind` at `path`."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(path))
        server.close()  # the socket file stays
    elif kind == "device":  # /dev/zero's numbers: reading it never ends
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5))
    else:
        target = path.with_name(path.name + ".target")
        os.mkfifo(target)
        path.symlink_to(target.name)


def _tree(root: Path, regular: list[str], special: list[tuple[str, str]], suffix: str) -> None:
    for index, name in enumerate(regular):
        folder = root / f"d{index % 2}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}{suffix}").write_bytes(b"id\n1\n")
    for index, (name, kind) in enumerate(special):
        folder = root / f"d{index % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        _make(folder / f"s{name}{suffix}", kind)


names = st.lists(st.text("abcxyz", min_size=1, max_size=6), unique=True, max_size=4)
specials = st.lists(st.tuples(st.text("abcxyz", min_size=1, max_size=6),
                              st.sampled_from(KINDS)),
                    min_size=1, max_size=4, unique_by=lambda item: item[0])


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(regular=names, special=specials, images=st.booleans(), glob=st.booleans())
def test_special_files_are_counted_and_never_listed(tmp_path_factory, regular, special,
                                                    images, glob):
    root = tmp_path_factory.mktemp("src")
    suffix = ".png" if images else ".csv"
    _tree(root, regular, special, suffix)
    if images:
        listing = list_image_files(str(root), [".png"])
        listed = [fs_path for fs_path, _ in listing.files]
    else:
        listing = list_tables(str(root / "*" / f"*{suffix}") if glob else str(root), [".csv"])
        listed = listing.files
    assert all(stat.S_ISREG(os.stat(path).st_mode) for path in listed), listed
    assert len(listed) == len(regular)
    assert listing.skipped.get("special_file", 0) == len(special)
    assert not listing.problems
    fingerprints = source_inputs("images" if images else "csv", str(root), [suffix])
    assert fingerprints["skipped"].get("special_file", 0) == len(special)


@pytest.mark.parametrize("kind", KINDS)
def test_a_special_file_as_the_source_path_is_not_read(tmp_path, kind):
    path = tmp_path / "rows.csv"
    _make(path, kind)
    listing = list_tables(str(path), [".csv"])
    assert listing.files == [] and listing.skipped == {"special_file": 1}


def test_a_build_over_a_directory_with_a_fifo_publishes_the_other_files(tmp_path,
                                                                        cli_command):
    data = tmp_path / "data"
    data.mkdir()
    (data / "rows.csv").write_text("id\n" + "".join(f"{i}\n" for i in range(20)))
    os.mkfifo(data / "pipe.csv")
    config = tmp_path / "config.yaml"
    config.write_text(textwrap.dedent(f"""\
        name: fifo
        version: "1.0.0"
        source: {{type: csv, path: {data}}}
        features:
          id: {{type: int64}}
        key: id
        output: {{path: {tmp_path / 'out'}, compression: none}}
        """))
    try:
        done = subprocess.run([cli_command, "build", str(config), "--",
                               "--direct_running_mode=in_memory"],
                              capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("the build hung on a FIFO among its inputs")
    assert done.returncode == 0, done.stderr[-3000:]
    manifest = json.loads((tmp_path / "out" / "1.0.0" / "manifest.json").read_text())
    assert manifest["inputs"]["skipped"] == {"special_file": 1}
    assert [entry["path"].rsplit("/", 1)[-1] for entry in manifest["inputs"]["files"]] == [
        "rows.csv"]
    assert sum(split["num_examples"] for split in manifest["splits"].values()) == 20
