"""A bucket sorted from its runs, in memory or merged (`writer.sorting`)."""

from __future__ import annotations

import gzip
import io
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from recordforge.transforms import tfrecord
from recordforge.transforms.writer import run_format, sorting, spill
from recordforge.transforms.writer.elements import BucketRange, RunInfo
from recordforge.transforms.writer.shard_cuts import (
    row_shard_count,
    row_shard_thresholds,
    shards_touched,
)


# Run files written as `test_run_format` writes them.
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


def _cut_by_brute_force(sizes, count):
    """Row r goes to the shard holding its byte midpoint: the first shard i
    with (i + 1) * total / count above s_r + n_r / 2, in fractions."""
    from fractions import Fraction
    total = sum(sizes)
    shards, start = [], 0
    for size in sizes:
        middle = Fraction(2 * start + size, 2)
        shards.append(min(count - 1, int(middle * count / total)))
        start += size
    return shards


def _written_and_measured(tmp_path, rng, memory_bytes: int, fan_in: int):
    """(runs, bucket, sort options, the bucket sorted and written as plain
    chunks, the same bucket only measured) of 7 runs of 300 random rows."""
    runs = _write_runs(tmp_path, rng, 300, 7)
    bucket = BucketRange("train", 3, b"\x10", None)
    options = dict(scratch_dir=str(tmp_path / "scratch"), memory_bytes=memory_bytes,
                   fan_in=fan_in, prefix_len=8, index_every=4096)
    measured = sorting.measure_bucket(bucket, runs, "plans/runs.json")
    written = _sorted_whole(bucket, runs, sum(chunk.length for chunk in measured.chunks),
                            out_dir=str(tmp_path / "out"), **options)
    return runs, bucket, options, written, measured


def _sorted_whole(bucket, runs, size, *, out_dir, cell_bytes=6000, gzip_level=3, **options):
    """The bucket sorted as a whole split (no seams) into cells; the chunk
    file's path and chunks, as BucketChunks."""
    written, seams = sorting.sort_bucket_cells(bucket, runs, start=0, size=size, total=size,
                                                   cell_bytes=cell_bytes, gzip_level=gzip_level,
                                                   out_dir=out_dir, **options)
    assert not seams
    return written


@pytest.mark.parametrize("memory_bytes, fan_in", [(1 << 30, 64), (20_000, 2)])
def test_a_measured_bucket_gives_each_shard_exactly_its_rows(tmp_path, memory_bytes, fan_in):
    rng = random.Random(11)
    runs, bucket, options, written, measured = _written_and_measured(tmp_path, rng, memory_bytes,
                                                                     fan_in)
    data = gzip.decompress(open(written.path, "rb").read())
    records, position = [], 0
    while position < len(data):
        size = int.from_bytes(data[position:position + 8], "little") + 16
        records.append(size)
        position += size
    assert measured.max_row == max(records)
    assert [chunk.length for chunk in measured.chunks] == [len(data)]
    assert spill.parse_bucket_reference(measured.path) == ("plans/runs.json", bucket)
    # The bucket sits inside a larger split, cut into shards smaller than it.
    start, total = 5_000, len(data) + 9_000
    count = row_shard_count(total, len(data) // 4, max(records))
    thresholds = row_shard_thresholds(total, count)
    expected = [shard for shard in _cut_by_brute_force([start] + records + [4_000], count)][1:-1]
    pieces, rows = [], []
    for shard in shards_touched(start, start + len(data), thresholds):
        out = io.BytesIO()
        got_rows, got_bytes = sorting.write_bucket_rows(out, bucket, start, thresholds, shard,
                                                            runs, **options)
        assert got_bytes == len(out.getvalue())
        pieces.append(out.getvalue())
        rows += [shard] * got_rows
    assert b"".join(pieces) == data
    assert rows == expected and len(set(rows)) >= 3


class _CollectingWriter:
    """A bucket writer that keeps every byte it is given."""

    def __init__(self):
        self.data = bytearray()
        self.sizes: list[int] = []

    def needs_bytes(self, nbytes: int) -> bool:
        return True

    def write_framed(self, data, sizes) -> None:
        assert len(data) == int(sizes.sum())
        self.data += data
        self.sizes += sizes.tolist()


@settings(max_examples=60, deadline=None)
@given(slices=st.lists(st.lists(st.tuples(st.binary(min_size=1, max_size=3),
                                          st.binary(max_size=40)), max_size=30),
                       min_size=1, max_size=6),
       gaps=st.lists(st.integers(0, 50), min_size=7, max_size=7),
       one_buffer=st.booleans(), block=st.sampled_from([1, 64, 1 << 20]))
def test_write_sorted_gathers_the_rows_of_slices_in_one_buffer_or_in_several(
        slices, gaps, one_buffer, block):
    """Slices read into one buffer with other bytes between them (the rows
    of a run outside the bucket), or each in a buffer of its own, give the
    rows in (key, example) order, a block at a time."""
    slices = [sorted(rows) for rows in slices if rows] or [[(b"k", b"")]]
    framed = [tfrecord.frame_records([example for _, example in rows]) for rows in slices]
    if one_buffer:
        arena = bytearray()
        places = []
        for data, gap in zip(framed, gaps):
            arena += b"\xee" * gap  # bytes no slice holds
            places.append((len(arena), len(data)))
            arena += data
        whole = memoryview(arena)
        views = [whole[start:start + size] for start, size in places]
    else:
        views = [memoryview(bytes(data)) for data in framed]
    run_slices = [run_format.RunSlice([key for key, _ in rows], view, np.array(
        [len(example) + 16 for _, example in rows], dtype=np.int64))
        for rows, view in zip(slices, views)]
    writer = _CollectingWriter()
    original = sorting.BLOCK
    sorting.BLOCK = block  # several blocks: gathered ahead of the one written
    try:
        sorting.write_sorted(writer, run_slices, run_format.KEY_VARIABLE)
    finally:
        sorting.BLOCK = original
    ordered = sorted(row for rows in slices for row in rows)
    assert bytes(writer.data) == tfrecord.frame_records([example for _, example in ordered])
    assert writer.sizes == [len(example) + 16 for _, example in ordered]


def _write_runs(tmp_path, rng, count_per_run, runs):
    infos = []
    for index in range(runs):
        rows = _rows(rng, count_per_run)
        path = str(tmp_path / f"run{index}.run")
        with open(path, "wb") as fileobj:
            _write_rows(fileobj, rows, "variable", prefix_len=8, index_every=4096)
        infos.append(RunInfo("train", path, len(rows), 0))
    return infos


def test_external_merge_writes_the_same_bucket_as_the_in_memory_sort(tmp_path):
    rng = random.Random(5)
    runs = _write_runs(tmp_path, rng, 400, 9)
    bucket = BucketRange("train", 0, b"\x20", b"\xe0")
    size = sum(chunk.length for chunk in
               sorting.measure_bucket(bucket, runs, "runs.json").chunks)
    options = dict(cell_bytes=8000, gzip_level=3, prefix_len=8, index_every=4096)
    in_memory = _sorted_whole(bucket, runs, size, out_dir=str(tmp_path / "a"),
                              scratch_dir=str(tmp_path / "sa"), memory_bytes=1 << 30,
                              fan_in=64, **options)
    merged = _sorted_whole(bucket, runs, size, out_dir=str(tmp_path / "b"),
                           scratch_dir=str(tmp_path / "sb"), memory_bytes=0, fan_in=2, **options)
    with open(in_memory.path, "rb") as one, open(merged.path, "rb") as two:
        assert one.read() == two.read()
    assert in_memory.chunks == merged.chunks
    assert not list((tmp_path / "sb").iterdir())  # intermediate merges removed

    expected = sorted(row for run in runs
                      for row in _pairs(run_format.RunFile(run.path).read(bucket.lo, bucket.hi)))
    data = open(in_memory.path, "rb").read()
    records = []
    for chunk in in_memory.chunks:
        # each chunk is one complete member
        piece = gzip.decompress(data[chunk.offset:chunk.offset + chunk.length])
        chunk_records = list(tfrecord.iter_records(io.BytesIO(piece), compression="none"))
        assert len(chunk_records) == chunk.num_records
        records += chunk_records
    assert records == [example for _, example in expected]
    assert len(in_memory.chunks) > 3


def test_buckets_written_one_after_another_reuse_the_read_buffer_safely(tmp_path):
    # Shards read their buckets into one buffer per thread, reused from
    # bucket to bucket (larger, smaller, after a release): every range must
    # still have the bytes of its bucket written as chunks.
    rng = random.Random(8)
    runs = _write_runs(tmp_path, rng, 400, 5)
    options = dict(scratch_dir=str(tmp_path / "scratch"), memory_bytes=1 << 30, fan_in=64,
                   prefix_len=8, index_every=4096)
    buckets = [BucketRange("train", 0, b"", b"\xc0"), BucketRange("train", 1, b"\xc0", b"\xd0"),
               BucketRange("train", 2, b"\x20", b"\x90"), BucketRange("train", 3, b"\xd0", None)]
    for _ in range(2):
        for bucket in buckets:
            # What the bucket holds, read without the shared buffer.
            expected = sorted(row for run in runs for row in
                              _pairs(run_format.RunFile(run.path).read(bucket.lo, bucket.hi)))
            size = sum(len(tfrecord.frame_records([example])) for _, example in expected)
            out = io.BytesIO()
            sorting.write_bucket_rows(out, bucket, 0, row_shard_thresholds(size, 1), 0, runs,
                                          **options)
            records = list(tfrecord.iter_records(io.BytesIO(out.getvalue()), compression="none"))
            assert records == [example for _, example in expected] and records
        sorting.release_read_arena()


@pytest.mark.parametrize("kind", ["variable", "fixed"])
@pytest.mark.parametrize("shards", [2, 3])
def test_consecutive_shards_of_one_bucket_read_and_sort_it_once(tmp_path, monkeypatch, kind,
                                                                shards):
    """Shards that share a bucket, written one after the other, write
    exactly the rows they hold (together the sorted bucket) while the runs
    are read only for the first; another bucket, or the same key range of
    other runs, is read anew."""
    rng = random.Random(11)
    runs = []
    for index in range(4):
        rows = _rows(rng, 300, width=6 if kind == "fixed" else None)
        path = str(tmp_path / f"run{index}.run")
        with open(path, "wb") as fileobj:
            _write_rows(fileobj, rows, kind, prefix_len=8, index_every=2048)
        runs.append(RunInfo("train", path, len(rows), 0))
    reads = []
    real_read = run_format.RunFile.read
    monkeypatch.setattr(run_format.RunFile, "read",
                        lambda self, *args, **kwargs: reads.append(self.path) or
                        real_read(self, *args, **kwargs))
    options = dict(scratch_dir=str(tmp_path / "scratch"), memory_bytes=1 << 30, fan_in=64,
                   prefix_len=8, index_every=2048)

    def expected(bucket, of_runs):
        return sorted(row for run in of_runs for row in
                      _pairs(real_read(run_format.RunFile(run.path), bucket.lo, bucket.hi)))

    sorting.release_read_arena()
    try:
        for bucket, of_runs in [(BucketRange("train", 0, b"", None), runs),
                                (BucketRange("train", 1, b"\x40", b"\xc0"), runs),
                                (BucketRange("train", 1, b"\x40", b"\xc0"), runs[1:])]:
            rows = expected(bucket, of_runs)
            size = sum(len(tfrecord.frame_records([example])) for _, example in rows)
            thresholds = row_shard_thresholds(size, shards)
            reads.clear()
            written = []
            for shard in range(shards):
                out = io.BytesIO()
                sorting.write_bucket_rows(out, bucket, 0, thresholds, shard, of_runs, **options)
                written += tfrecord.iter_records(io.BytesIO(out.getvalue()), compression="none")
            assert written == [example for _, example in rows]
            assert sorted(reads) == sorted(run.path for run in of_runs)  # once each
    finally:
        sorting.release_read_arena()


@given(order=st.permutations(range(6)))
@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_shards_of_several_buckets_in_any_order_write_what_each_writes_alone(tmp_path, order):
    """However a worker's shards come (here six shards over three buckets
    that they share), each writes the bytes it writes with nothing held
    from the shard before."""
    runs = _write_runs(tmp_path, random.Random(13), 200, 3)
    options = dict(scratch_dir=str(tmp_path / "scratch"), memory_bytes=1 << 30, fan_in=64,
                   prefix_len=8, index_every=4096)
    buckets = [BucketRange("train", 0, b"", b"\x60"), BucketRange("train", 1, b"\x60", b"\xb0"),
               BucketRange("train", 2, b"\xb0", None)]
    sizes = [sum(chunk.length for chunk in sorting.measure_bucket(bucket, runs, "r").chunks)
             for bucket in buckets]
    starts = np.cumsum([0] + sizes[:-1]).tolist()
    thresholds = row_shard_thresholds(sum(sizes), 6)

    def shard_bytes(shard):
        out = io.BytesIO()
        for bucket, start in zip(buckets, starts):
            sorting.write_bucket_rows(out, bucket, start, thresholds, shard, runs, **options)
        return out.getvalue()

    alone = []
    for shard in range(6):
        sorting.release_read_arena()
        alone.append(shard_bytes(shard))
    try:
        assert {shard: shard_bytes(shard) for shard in order} == dict(enumerate(alone))
    finally:
        sorting.release_read_arena()
    assert b"".join(alone) == b"".join(
        tfrecord.frame_records([example]) for _, example in sorted(
            row for run in runs for row in _pairs(run_format.RunFile(run.path).read(b"", None))))


def test_sort_bucket_cells_rejects_a_run_that_does_not_match_its_report(tmp_path):
    runs = _write_runs(tmp_path, random.Random(2), 20, 1)
    wrong = [runs[0]._replace(num_records=21)]
    with pytest.raises(run_format.RunFileError, match="run0.run"):
        _sorted_whole(BucketRange("train", 0, b"", None), wrong, 10_000, out_dir=str(tmp_path),
                      scratch_dir=str(tmp_path), cell_bytes=100, memory_bytes=1 << 20, fan_in=4,
                      prefix_len=8, index_every=4096)


def test_sort_bucket_cells_rejects_a_bucket_of_other_bytes_than_measured(tmp_path):
    runs = _write_runs(tmp_path, random.Random(2), 20, 1)
    bucket = BucketRange("train", 0, b"", None)
    size = sum(chunk.length for chunk in
               sorting.measure_bucket(bucket, runs, "runs.json").chunks)
    with pytest.raises(run_format.RunFileError, match="sorted .* bytes, measured"):
        _sorted_whole(bucket, runs, size + 1, out_dir=str(tmp_path), scratch_dir=str(tmp_path),
                      cell_bytes=100, memory_bytes=1 << 20, fan_in=4, prefix_len=8,
                      index_every=4096)
