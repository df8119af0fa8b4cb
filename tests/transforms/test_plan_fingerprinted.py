"""The range plan made while the file is hashed: the same units and fingerprint as the two
passes it replaces, and a content token equal to xxhash's of the file's bytes."""

from __future__ import annotations

import gzip

import fsspec
import pytest
import xxhash
from hypothesis import given, settings, strategies as st

from recordforge.transforms.readers import ranges, tables
from recordforge.transforms.readers.inputs import input_fingerprint

# Lines that matter to the split points: quotes that open and close across
# lines, CRLF, blank lines.
_lines = st.lists(st.sampled_from([b"a,b", b'"x\n', b'y",1', b'""', b"", b"\r", b"1,2\r",
                                   b'{"k": "v"}', b"\xff\xfe"]), max_size=200)


@settings(max_examples=120, deadline=None)
@given(lines=_lines, format=st.sampled_from(["csv", "jsonl"]),
       range_bytes=st.integers(min_value=1, max_value=300), block=st.integers(1, 64),
       gzipped=st.booleans())
def test_one_read_equals_the_plan_and_the_hash(tmp_path_factory, lines, format, range_bytes,
                                               block, gzipped):
    data = b"h1,h2\n" + b"\n".join(lines)
    folder = tmp_path_factory.mktemp("plan")
    path = str(folder / (f"t.{format}" + (".gz" if gzipped else "")))
    with open(path, "wb") as f:
        f.write(gzip.compress(data, mtime=0) if gzipped else data)
    fs = fsspec.filesystem("file")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ranges, "BLOCK", block)  # block edges inside lines and quotes
        units, version = tables.plan_fingerprinted(fs, path, format, range_bytes)
        planned = tables.plan_table_ranges(fs, path, format, range_bytes)
    assert version == input_fingerprint(fs, path)
    with open(path, "rb") as f:
        assert version["content"] == "xxh3_128:" + xxhash.xxh3_128(f.read()).hexdigest()
    # Units come with the hash exactly where the plan reads the whole file.
    fused = not gzipped and version["size"] > range_bytes
    assert (units is not None) == fused
    if fused:
        assert units == planned
        assert len(units) > 1 or units[0].end is None


def test_other_files_are_fingerprinted_as_before(tmp_path):
    memory = fsspec.filesystem("memory")
    memory.pipe("/pf/t.csv", b"a\n1\n2\n" * 100)
    # A store: its own token where it keeps one, and no units.
    assert tables.plan_fingerprinted(memory, "/pf/t.csv", "csv", 10) == (
        None, input_fingerprint(memory, "/pf/t.csv"))
    local = fsspec.filesystem("file")
    assert tables.plan_fingerprinted(local, str(tmp_path / "gone.csv"), "csv", 10) == (
        None, {"path": str(tmp_path / "gone.csv"), "missing": True})
    path = tmp_path / "t.parquet"
    path.write_bytes(b"not parquet" * 10)
    units, version = tables.plan_fingerprinted(local, str(path), "parquet", 10)
    assert units is None and version == input_fingerprint(local, str(path))


def test_a_failing_read_gives_the_two_passes_answer(tmp_path, monkeypatch):
    path = tmp_path / "t.csv"
    path.write_bytes(b"a,b\n1,2\n" * 100)
    local = fsspec.filesystem("file")

    def fail(*args, **kwargs):
        raise OSError("disk gone")

    monkeypatch.setattr(tables, "scan_split_points", fail)
    units, version = tables.plan_fingerprinted(local, str(path), "csv", 10)
    assert units is None and version == input_fingerprint(local, str(path))
