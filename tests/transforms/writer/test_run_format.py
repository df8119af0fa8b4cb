"""The sorted run file format (`writer.run_format`)."""

from __future__ import annotations

import io
import os
import random
import struct

import fsspec
import numpy as np
import pytest
from recordforge.transforms import tfrecord
from recordforge.transforms.writer import (
    bucket_plan,
    elements,
    run_format,
    spill,
)


def _rows(rng, count, key_is_example=False, width=None):
    """Random (key, example) rows, sorted; keys of `width` bytes when given
    (with zero bytes, which fixed-width comparisons must keep)."""
    rows = []
    for _ in range(count):
        example = rng.randbytes(rng.randint(0, 300))
        if key_is_example:
            key = example
        elif width:
            key = bytes(rng.choice(b"\0\1\x7f\xff") for _ in range(width))
        else:
            key = rng.randbytes(rng.randint(1, 20))
        rows.append((key, example))
    rows.sort()
    return rows


def _write_rows(fileobj, rows, kind, **options):
    keys = None if kind == "example" else [key for key, _ in rows]
    width = {"example": run_format.KEY_IS_EXAMPLE, "variable": run_format.KEY_VARIABLE,
             "fixed": 6}[kind]
    return run_format.write_sorted_run(fileobj, keys, [example for _, example in rows],
                                      key_width=width, **options)


def _pairs(run_slice):
    keys = run_slice.keys
    if isinstance(keys, np.ndarray):
        blob = keys.tobytes()
        keys = [blob[i:i + keys.itemsize] for i in range(0, len(blob), keys.itemsize)]
    return list(zip(keys, run_slice.examples()))


@pytest.mark.parametrize("kind", ["variable", "example", "fixed"])
def test_run_file_ranges_hold_exactly_the_keys_in_range(tmp_path, kind):
    rng = random.Random(11)
    rows = _rows(rng, 3000, kind == "example", width=6 if kind == "fixed" else None)
    path = str(tmp_path / "r.run")
    with open(path, "wb") as fileobj:
        shuffled = rows[:]
        rng.shuffle(shuffled)  # write_sorted_run sorts
        assert _write_rows(fileobj, shuffled, kind, prefix_len=6, index_every=2000) == len(rows)
    run = run_format.RunFile(path)
    assert run.num_records == len(rows) and len(run.offsets) > 50
    assert _pairs(run.read(b"", None)) == rows
    for _ in range(60):
        lo = bytes(rng.choice(b"\0\1\x7f\xff") for _ in range(rng.randint(0, 7)))
        hi = rng.choice([None, bytes(rng.choice(b"\0\1\x7f\xff")
                                     for _ in range(rng.randint(1, 7)))])
        if hi is not None and hi < lo:
            lo, hi = hi, lo
        expected = [row for row in rows if lo <= row[0] and (hi is None or row[0] < hi)]
        assert _pairs(run.read(lo, hi)) == expected, (lo, hi)
        streamed = list(run.stream(lo, hi))
        assert [(key, example) for key, example, _ in streamed] == expected
        assert b"".join(framed for _, _, framed in streamed) == tfrecord.frame_records(
            [example for _, example in expected])

@pytest.mark.parametrize("kind", ["variable", "fixed"])
def test_a_range_read_into_a_buffer_reads_only_its_rows_records(tmp_path, kind):
    """The indexed range runs past the key range at both ends; only the
    rows within it are read (the rest of the buffer is left as it was)."""
    rows = _rows(random.Random(13), 2000, width=6 if kind == "fixed" else None)
    path = str(tmp_path / "r.run")
    with open(path, "wb") as fileobj:
        _write_rows(fileobj, rows, kind, prefix_len=8, index_every=20_000)
    run = run_format.RunFile(path)
    lo, hi = rows[700][0], rows[1300][0]
    expected = [row for row in rows if lo <= row[0] < hi]
    buffer = np.full(run.estimate(lo, hi)[1], 0xEE, dtype=np.uint8)
    read = run.read(lo, hi, into=memoryview(buffer))
    assert _pairs(read) == expected
    framed = tfrecord.frame_records([example for _, example in expected])
    assert len(framed) < len(buffer)  # the indexed range holds rows outside the key range
    assert bytes(buffer[:len(framed)]) == framed
    assert not (buffer[len(framed):] != 0xEE).any()


def test_run_file_damage_is_reported_with_the_file_name(tmp_path):
    path = tmp_path / "r.run"
    buffer = io.BytesIO()
    _write_rows(buffer, _rows(random.Random(1), 50), "variable", prefix_len=8, index_every=100)
    path.write_bytes(buffer.getvalue()[:-3])
    with pytest.raises(run_format.RunFileError, match="r.run"):
        run_format.RunFile(str(path))


@pytest.mark.parametrize("where", ["local", "memory"])
def test_run_file_reads_mapped_local_runs_and_other_filesystems_alike(tmp_path, where):
    # Local runs are mapped, runs on other filesystems read: same rows.
    rows = _rows(random.Random(12), 800)
    path = (str(tmp_path / "r.run") if where == "local"
            else f"memory://{tmp_path.name}-{where}/r.run")
    with fsspec.open(path, "wb") as fileobj:
        _write_rows(fileobj, rows, "variable", prefix_len=8, index_every=2000)
    run = run_format.RunFile(path)
    lo, hi = rows[200][0], rows[600][0]
    for mapped in (False, True):
        assert _pairs(run.read(b"", None, mapped)) == rows
        assert _pairs(run.read(lo, hi, mapped)) == [row for row in rows if lo <= row[0] < hi]
    run.release()
    assert _pairs(run.read(lo, hi, mapped=True)) == [row for row in rows if lo <= row[0] < hi]
    assert [(key, example) for key, example, _ in run.stream(lo, None)] == [
        row for row in rows if lo <= row[0]]


def test_run_whose_sizes_overrun_its_records_is_reported(tmp_path):
    path = tmp_path / "r.run"
    buffer = io.BytesIO()
    _write_rows(buffer, _rows(random.Random(2), 50), "variable", prefix_len=8, index_every=100)
    data = bytearray(buffer.getvalue())
    sizes_offset = struct.unpack_from("<Q", data, len(data) - 64)[0]  # footer: first field
    struct.pack_into("<I", data, sizes_offset + 4 * 49, 1 << 20)  # the last row's size
    path.write_bytes(bytes(data))
    for mapped in (False, True):
        with pytest.raises(run_format.RunFileError, match="r.run: record cut short"):
            run_format.RunFile(str(path)).read(b"", None, mapped)


def test_run_whose_key_sizes_overrun_its_keys_is_reported(tmp_path):
    # Variable-width keys are read as one buffer: one read cut short by the
    # file's end names the file and the byte, rather than giving short keys.
    path = tmp_path / "r.run"
    buffer = io.BytesIO()
    _write_rows(buffer, _rows(random.Random(3), 50), "variable", prefix_len=8, index_every=100)
    data = bytearray(buffer.getvalue())
    key_sizes_offset = struct.unpack_from("<Q", data, len(data) - 64 + 16)[0]  # footer: third field
    struct.pack_into("<I", data, key_sizes_offset + 4 * 49, 1 << 20)  # the last row's key size
    path.write_bytes(bytes(data))
    for mapped in (False, True):
        with pytest.raises(run_format.RunFileError, match=r"r.run: keys cut short at byte \d+"):
            run_format.RunFile(str(path)).read(b"", None, mapped)


@pytest.mark.parametrize("how", ["renamed", "rewritten", "removed"])
def test_a_run_file_replaced_at_its_path_is_read_anew(tmp_path, how):
    """Local run layouts are kept by path between buckets; another file at
    the path (or none) is never read through the kept layout."""
    path = tmp_path / "r.run"
    first, second = _rows(random.Random(3), 300), _rows(random.Random(4), 500)
    with open(path, "wb") as fileobj:
        _write_rows(fileobj, first, "variable", prefix_len=8, index_every=500)
    assert _pairs(run_format.RunFile(str(path)).read(b"", None)) == first
    if how == "removed":
        path.unlink()
        with pytest.raises(run_format.RunFileError, match="r.run"):
            run_format.RunFile(str(path))
        return
    target = tmp_path / "new.run" if how == "renamed" else path
    with open(target, "wb") as fileobj:
        _write_rows(fileobj, second, "variable", prefix_len=8, index_every=500)
    if how == "renamed":
        os.replace(target, path)
    run = run_format.RunFile(str(path))
    assert run.num_records == len(second) and _pairs(run.read(b"", None)) == second


def test_runs_of_the_build_cache_stay_in_the_page_cache_when_read(tmp_path, monkeypatch):
    """A spill run's pages are dropped as the bucket reads them; the build
    cache's runs (read again by the next build) are not, and say so from
    the spill record to the run list the bucket sorters read."""
    path = tmp_path / "r.run"
    with open(path, "wb") as fileobj:
        _write_rows(fileobj, _rows(random.Random(5), 200), "variable", prefix_len=8,
                    index_every=500)
    dropped = []
    monkeypatch.setattr(run_format, "drop_behind", lambda *args: dropped.append(args[1:]))
    size = run_format.RunFile(str(path)).estimate(b"", None)[1]
    for keep in (False, True):
        arena = memoryview(bytearray(size))
        run_format.RunFile(str(path), keep_pages=keep).read(b"", None, into=arena)
    assert dropped == [(0, size)]

    records = [elements.SpillRecord("train", str(path), 200, size, (), kept=True),
               elements.SpillRecord("train", str(tmp_path / "s.run"), 5, 50, ())]
    runs = bucket_plan.runs_of(records)
    assert [run.kept for run in runs] == [True, False]
    spill.write_run_list(str(tmp_path / "runs.json"), runs)
    assert spill.read_run_list(str(tmp_path / "runs.json")) == runs


def test_run_stream_reads_records_larger_than_a_block(tmp_path):
    rows = sorted((bytes([index]), bytes([index]) * (5 << 20)) for index in range(3))
    path = str(tmp_path / "big.run")
    with open(path, "wb") as fileobj:
        _write_rows(fileobj, rows, "variable", prefix_len=4, index_every=1 << 30)
    run = run_format.RunFile(path)
    assert [(key, example) for key, example, _ in run.stream(b"", None)] == rows




