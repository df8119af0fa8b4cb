"""A local CSV or JSONL input is read once before its ranges: hashing it finds the split points.

The driver hashes every local input before the pipeline (`ContentTokens`);
a file the cached read cuts into byte ranges is cut in that same read
(`RangeScan`), and the plan step makes its units from the points found
instead of scanning the file again. What is read is counted at the files
the hasher and the planner open.
"""

from __future__ import annotations

import builtins

import fsspec
import pytest
from fsspec.implementations.local import LocalFileOpener

import recordforge
from recordforge.transforms import unit_conversion
from recordforge.transforms.cache.steps import Work, _PlanOrReuse
from recordforge.transforms.readers import inputs as inputs_lib
from recordforge.transforms.readers import ranges, tables
from recordforge.transforms.readers.inputs import ContentTokens, input_fingerprint, source_inputs
from recordforge.transforms.readers.tables import RangeScan


class _CountedFile:
    """A raw file whose bytes read are added to `counts[path]`."""

    def __init__(self, raw, path: str, counts: dict):
        self._raw, self._path, self._counts = raw, path, counts

    def readinto(self, buffer) -> int:
        count = self._raw.readinto(buffer)
        self._counts[self._path] = self._counts.get(self._path, 0) + (count or 0)
        return count

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._raw.close()

    def __getattr__(self, name):
        return getattr(self._raw, name)


def _count_reads(monkeypatch) -> dict:
    """path -> bytes read through fsspec's local files (the planner, the
    readers) and the hasher's own open."""
    counts: dict[str, int] = {}
    read = LocalFileOpener.read

    def counted_read(self, *args, **kwargs):
        data = read(self, *args, **kwargs)
        counts[self.path] = counts.get(self.path, 0) + len(data)
        return data

    def counted_open(path, *args, **kwargs):
        return _CountedFile(builtins.open(path, *args, **kwargs), str(path), counts)

    monkeypatch.setattr(LocalFileOpener, "read", counted_read)
    monkeypatch.setattr(inputs_lib, "open", counted_open, raising=False)
    return counts


def _csv(rows: int) -> bytes:
    # Quoted fields across lines: a split point needs even quote parity.
    lines = ["id,note"] + [f'{row},"{"x" * (row % 50)}\n{row}"' if row % 7 == 0
                           else f"{row},{'y' * (row % 40)}" for row in range(rows)]
    return ("\n".join(lines) + "\n").encode()


@pytest.mark.parametrize("format", ["csv", "jsonl"])
def test_the_plan_step_takes_the_split_points_found_while_hashing(tmp_path, monkeypatch,
                                                                  format):
    path = tmp_path / f"t.{format}"
    data = _csv(400) if format == "csv" else b"".join(
        b'{"id": %d, "note": "%s"}\n' % (row, b"z" * (row % 30)) for row in range(400))
    path.write_bytes(data)
    monkeypatch.setattr(inputs_lib, "SETTLED_NS", -1)  # kept at once
    monkeypatch.setattr(ranges, "BLOCK", 333)  # blocks end inside lines and quotes
    scan = RangeScan(format, 1000)
    tokens = ContentTokens(scan)
    counts = _count_reads(monkeypatch)

    inputs = source_inputs(format, str(path), tokens=tokens)
    plan = _PlanOrReuse(str(path), format, 1000, None, "enc", {}, tokens.known)
    plan.setup()
    works = list(plan.process(("unit", str(path))))
    assert counts == {str(path): len(data)}  # read once, by the hasher

    fs = fsspec.filesystem("file")
    assert inputs["files"] == [input_fingerprint(fs, str(path))]
    planned = tables.plan_table_ranges(fs, str(path), format, 1000)
    assert len(planned) > 3 and [work.unit for work in works] == planned
    assert all(isinstance(work, Work) and work.count == len(planned) for work in works)


def test_points_of_another_cut_are_not_taken(tmp_path, monkeypatch):
    """Split points found for another range size (or format, or dialect)
    are not this step's units: it plans the file itself."""
    path = tmp_path / "t.csv"
    path.write_bytes(_csv(400))
    monkeypatch.setattr(inputs_lib, "SETTLED_NS", -1)
    tokens = ContentTokens(RangeScan("csv", 700))
    source_inputs("csv", str(path), tokens=tokens)
    plan = _PlanOrReuse(str(path), "csv", 1000, None, "enc", {}, tokens.known)
    plan.setup()
    units = [work.unit for work in plan.process(("unit", str(path)))]
    assert units == tables.plan_table_ranges(fsspec.filesystem("file"), str(path), "csv", 1000)


def test_a_build_reads_a_big_local_csv_once_before_its_ranges(tmp_path, monkeypatch):
    """Before the first range is read the input has been read once (to hash
    and cut it), not also by the plan step."""
    path = tmp_path / "big.csv"
    row = "x" * 1000
    with open(path, "w") as f:
        f.write("id,note\n")
        for ident in range(17_000):  # above the 16 MiB of a range: several units
            f.write(f"{ident},{row}\n")
    size = path.stat().st_size
    monkeypatch.setattr(inputs_lib, "SETTLED_NS", -1)  # the file was just written
    counts = _count_reads(monkeypatch)
    before_ranges = []
    read_range = unit_conversion.read_range

    def first_read(fs, unit, *args, **kwargs):
        if not before_ranges:
            before_ranges.append(counts.get(str(path), 0))
        return read_range(fs, unit, *args, **kwargs)

    monkeypatch.setattr(unit_conversion, "read_range", first_read)
    config = {"name": "once", "version": "v1",
              "source": {"type": "csv", "path": str(path)},
              "features": {"id": {"type": "int64"}, "note": {"type": "string"}},
              "output": {"path": str(tmp_path / "out"), "shard_size": "8MB"}}
    result = recordforge.build(config, beam_args=["--direct_running_mode=in_memory",
                                                  "--direct_num_workers=1"])
    assert result.num_examples == 17_000
    # Once in full (hashed and cut), plus the block of its header that the
    # config's check of the columns reads; the base read it twice in full.
    assert size <= before_ranges[0] <= size + ranges.BLOCK
    assert result.manifest["cache"]["units_converted"] == 2
