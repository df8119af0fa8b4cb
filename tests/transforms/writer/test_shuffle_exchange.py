"""The shard writer's shuffle exchange: its plain logic without Beam, the same
bytes as the file exchange, nothing on the output store but the shards, and
requests that grow with the data, not with its square."""

from __future__ import annotations

import bisect
import collections
import gzip
import hashlib
import importlib.util
import os
import pathlib
import random
import tempfile
import zlib

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to
from hypothesis import given, settings
from hypothesis import strategies as st
from recordforge.transforms import tfrecord
from recordforge.transforms.splits import SplitAssigner
from recordforge.transforms.writer import (
    ShardTuning,
    WriteShards,
    bucket_bounds_of,
    bucket_output,
    file_exchange,
    ratio_sample,
    run_format,
    shuffle_cells,
    shuffle_packets,
    shuffle_rows,
    sorting,
    spill,
)
from recordforge.transforms.writer.bucket_plan import sample_of
from recordforge.transforms.writer.elements import (
    BucketChunks,
    Chunk,
    SampleEntry,
    SpillRecord,
)
from recordforge.transforms.writer.ratio_sample import ratio_sample_of
from recordforge.transforms.writer.shard_cuts import plan_shards

REPO = pathlib.Path(__file__).resolve().parents[3]
SPLITS = [("train", 0.8), ("test", 0.2)]
TUNING = ShardTuning(run_bytes=400_000, bucket_bytes=300_000)


def _counting_fs():
    spec = importlib.util.spec_from_file_location(
        "counting_fs", REPO / "benchmarks" / "counting_fs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.register()


def _rows(count=3000, seed=0, keyed=False):
    rng = random.Random(seed)
    return [(f"key-{rng.randrange(count // 3)}".encode() if keyed and index % 4 else None,
             rng.randbytes(rng.randint(80, 1200))) for index in range(count)]


def _table_rows(count=4000, seed=0):
    """Text rows that gzip shrinks ~3x."""
    rng = random.Random(seed)
    words = [rng.randbytes(3).hex().encode() for _ in range(400)]
    return [(None, b"id=%d " % index + b" ".join(rng.choices(words, k=rng.randint(40, 140))))
            for index in range(count)]


def _packet(keys, examples, width):
    sizes = np.array([len(example) + 16 for example in examples], dtype="<u4")
    if width > 0:
        key_field = b"".join(keys)
    elif width == run_format.KEY_VARIABLE:
        key_field = tuple(keys)
    else:
        key_field = None
    return width, key_field, tfrecord.frame_records(examples), sizes.tobytes()


# -- plain logic -------------------------------------------------------------


def test_split_stats_add_up_and_keep_the_sample_as_the_file_exchange_does():
    rng = random.Random(1)
    entries = [SampleEntry(rng.randrange(1 << 40), rng.randbytes(16), rng.randrange(100, 999))
               for _ in range(300)]
    parts = [(3, 300, tuple(entries[i:i + 40])) for i in range(0, 300, 20)]  # overlapping
    rows, nbytes, sample = shuffle_cells.merge_split_stats(parts, sample_size=50)
    assert (rows, nbytes) == (45, 4500)
    records = [SpillRecord("train", "run", 1, 1, part[2]) for part in parts]
    assert list(sample) == sample_of(records, 50)
    # Merging in any grouping gives the same result (a combine's contract).
    halves = [shuffle_cells.merge_split_stats(parts[:7], 50),
              shuffle_cells.merge_split_stats(parts[7:], 50)]
    assert shuffle_cells.merge_split_stats(halves, 50) == (rows, nbytes, sample)


@pytest.mark.parametrize("width", [16, run_format.KEY_VARIABLE])
def test_bucket_of_keys_is_the_range_holding_each_key(width):
    rng = random.Random(2)
    if width > 0:
        keys = [rng.randbytes(16) for _ in range(2000)]
        keys[:5] = [b"\0" * 16, b"\xff" * 16, b"ab" + b"\0" * 14, b"ab" + b"\0" * 13 + b"\1",
                    b"ab\1" + b"\0" * 13]
    else:
        keys = [rng.randbytes(rng.randint(0, 6)) for _ in range(2000)] + [b"ab", b"ab\0"]
    bounds = [b""] + sorted({key[:rng.randint(1, 3)] for key in rng.sample(keys, 30)} | {b"ab"})
    field = b"".join(keys) if width > 0 else keys
    got = shuffle_packets.bucket_of_keys(bounds, width, field).tolist()
    for key, bucket in zip(keys, got):
        upper = bounds[bucket + 1] if bucket + 1 < len(bounds) else None
        assert bounds[bucket] <= key and (upper is None or key < upper), (key, bucket)
    assert got == [bisect.bisect_right(bounds, key) - 1 for key in keys]


@pytest.mark.parametrize("width", [16, run_format.KEY_VARIABLE, run_format.KEY_IS_EXAMPLE])
def test_split_packet_gives_every_row_to_its_bucket_once(width):
    rng = random.Random(3)
    examples = [rng.randbytes(rng.randint(1, 50)) for _ in range(500)]
    keys = [rng.randbytes(16) if width > 0 else rng.randbytes(3) for _ in examples]
    bounds = [b""] + sorted({key[:2] for key in rng.sample(keys, 9)})
    pieces = shuffle_packets.split_packet(_packet(keys, examples, width), bounds)
    seen = []
    for bucket, (piece_width, piece_keys, data, sizes) in pieces:
        assert piece_width == width
        rows = run_format.RunSlice(None, memoryview(data),
                                  np.frombuffer(sizes, "<u4").astype(np.int64)).examples()
        if width > 0:
            row_keys = [piece_keys[i:i + 16] for i in range(0, len(piece_keys), 16)]
        elif width == run_format.KEY_VARIABLE:
            row_keys = list(piece_keys)
        else:
            row_keys = rows
        for key in row_keys:
            assert bisect.bisect_right(bounds, key) - 1 == bucket
        seen += list(zip(row_keys, rows))
    expected = list(zip(keys if width != run_format.KEY_IS_EXAMPLE else examples, examples))
    assert sorted(seen) == sorted(expected)


def test_a_bucket_sorted_on_local_disk_equals_the_one_sorted_in_memory(tmp_path):
    rng = random.Random(4)
    examples = [rng.randbytes(rng.randint(20, 400)) for _ in range(3000)]
    examples += examples[:50]  # equal rows: kept, ordered by their bytes
    keys = [hashlib.blake2b(example, digest_size=16).digest() for example in examples]
    packets = [_packet(keys[i:i + 97], examples[i:i + 97], 16)
               for i in range(0, len(examples), 97)]
    size = sum(len(example) + 16 for example in examples)

    def sort(memory_bytes, fan_in):
        with open(tmp_path / f"{memory_bytes}-{fan_in}", "w+b") as out:
            writer = bucket_output.CellWriter(out, start=0, size=size, total=size,
                                               cell_bytes=20_000, gzip_level=3)
            shuffle_packets.sort_bucket_packets(iter(packets), writer,
                                                 memory_bytes=memory_bytes, fan_in=fan_in,
                                                 prefix_len=64, index_every=1000)
            chunks = writer.close()
            out.seek(0)
            return chunks, out.read()

    def scratch_dirs():
        return {name for name in os.listdir(tempfile.gettempdir())
                if name.startswith("recordforge-sort-")}

    in_memory = sort(1 << 30, 64)
    before = scratch_dirs()
    assert sort(60_000, 3) == in_memory  # ~20 local runs, merged through intermediate runs
    assert scratch_dirs() <= before  # the local runs are gone
    chunks, data = in_memory
    assert len(chunks) > 10
    assert _parse(gzip.decompress(data)) == [example for _, example in sorted(zip(keys, examples))]
    assert sum(chunk.num_records for chunk in chunks) == len(examples)


def _parse(stream: bytes) -> list[bytes]:
    records, position = [], 0
    while position < len(stream):
        length = int.from_bytes(stream[position:position + 8], "little")
        records.append(stream[position + 12:position + 12 + length])
        position += 16 + length
    return records


def test_a_bucket_cut_at_rows_sends_each_row_to_the_shard_of_its_midpoint(tmp_path):
    from recordforge.transforms.writer.shard_cuts import (
        row_shard_count,
        row_shard_thresholds,
        shards_of_rows,
        shards_touched,
    )
    rng = random.Random(8)
    examples = [rng.randbytes(rng.randint(20, 400)) for _ in range(2000)]
    keys = [hashlib.blake2b(example, digest_size=16).digest() for example in examples]
    sizes = np.array([len(example) + 16 for example in examples], dtype=np.int64)
    start, total = 123_457, int(sizes.sum()) * 3  # the bucket sits inside a larger split
    count = row_shard_count(total, 40_000, 416)
    thresholds = row_shard_thresholds(total, count)
    packets = [_packet(keys[i:i + 97], examples[i:i + 97], 16)
               for i in range(0, len(examples), 97)]
    ordered = sorted(zip(keys, examples))
    ordered_sizes = np.array([len(example) + 16 for _, example in ordered], dtype=np.int64)
    expected = shards_of_rows(start + np.cumsum(ordered_sizes) - ordered_sizes, ordered_sizes,
                              thresholds).tolist()
    results = []
    for memory_bytes in (1 << 30, 50_000):  # in memory, and through local runs
        with open(tmp_path / f"{memory_bytes}", "w+b") as out:
            cutter = shuffle_rows.ShardCutter(out, start, thresholds)
            shuffle_packets.sort_bucket_packets(iter(packets), cutter,
                                                 memory_bytes=memory_bytes, fan_in=3,
                                                 prefix_len=64, index_every=1000)
            out.seek(0)
            results.append((cutter.segments, out.read(), cutter.offset))
    assert results[0] == results[1]
    segments, data, end = results[0]
    assert end == start + int(sizes.sum())
    assert _parse(data) == [example for _, example in ordered]
    # Segments: runs of rows of one shard, in order, each row where its midpoint says.
    got = [shard for shard, _, _, rows in segments for _ in range(rows)]
    assert got == expected and len(set(got)) > 2
    assert [offset for _, offset, _, _ in segments] == np.cumsum(
        [0] + [length for _, _, length, _ in segments])[:-1].tolist()
    assert set(got) <= set(shards_touched(start, end, thresholds))


def test_a_shard_is_assembled_only_when_every_bucket_reported():
    ends = {3: (2, 10, 900), 4: (0, 0, 0), 5: (1, 4, 300)}
    pieces = {(3, 0): 1, (3, 1): 1, (5, 0): 1}
    assert shuffle_rows.assemble_shard("s", (3, 4, 5), ends, pieces) == [(3, 0), (3, 1), (5, 0)]
    with pytest.raises(run_format.RunFileError, match="bucket 6 did not report"):
        shuffle_rows.assemble_shard("s", (3, 4, 5, 6), ends, pieces)
    with pytest.raises(run_format.RunFileError, match="piece 1 of bucket 3 is missing"):
        shuffle_rows.assemble_shard("s", (3, 4, 5), ends, {(3, 0): 1, (5, 0): 1})
    with pytest.raises(run_format.RunFileError, match="bucket 5 sent rows the plan did not"):
        shuffle_rows.assemble_shard("s", (3, 4), ends, pieces)
    with pytest.raises(run_format.RunFileError, match="got 4 pieces"):
        shuffle_rows.assemble_shard("s", (3, 4, 5), ends, {**pieces, (4, 0): 1})


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_a_shard_whose_pieces_miss_bytes_is_never_named(tmp_path, compression):
    """The buckets' end markers say how many framed bytes the shard gets;
    a shard writer given fewer fails before the shard has its name."""
    framed = tfrecord.frame_records([b"a" * 20, b"b" * 30])
    writer = shuffle_rows.WriteCutShardFn(str(tmp_path / "staging"), str(tmp_path / "tmp"),
                                           compression, 1 << 20)
    writer.setup()
    good = [("spec", (1, (0,))), ("end", (0, (1, 2, len(framed)))), ("piece", (0, 0, framed))]
    (shard,) = writer.process((("train", 0), good))
    assert shard["num_examples"] == 2
    (tmp_path / "staging" / shard["file"]).unlink()
    short = [("spec", (1, (0,))), ("end", (0, (1, 2, len(framed) + 7))),
             ("piece", (0, 0, framed))]
    with pytest.raises(run_format.RunFileError, match=f"wrote {len(framed)} bytes"):
        list(writer.process((("train", 0), short)))
    assert not list((tmp_path / "staging").iterdir())


def test_place_chunks_numbers_each_shards_pieces_and_counts_what_it_sends():
    lengths, records = np.array([10, 20, 25, 25]), np.array([1, 2, 3, 4])
    # The bucket starts at byte 95 of 200 in 2 shards: midpoints 100, 115, 137.5, 162.5.
    shards, numbers, sent = shuffle_cells.place_chunks(lengths, records, 95, 200, 2)
    assert shards.tolist() == [1, 1, 1, 1] and numbers.tolist() == [0, 1, 2, 3]
    assert sent == {0: (0, 0, 0), 1: (4, 10, 80)}  # shard 0, which it might reach, gets nothing
    shards, numbers, sent = shuffle_cells.place_chunks(lengths, records, 60, 200, 2)
    assert shards.tolist() == [0, 0, 1, 1] and numbers.tolist() == [0, 1, 0, 1]
    assert sent == {0: (2, 3, 30), 1: (2, 7, 50)}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(1, 3_000), min_size=1, max_size=6), min_size=1,
                max_size=6), st.integers(1, 8_000))
def test_each_bucket_places_its_chunks_as_the_whole_plan_does(sizes_per_bucket, shard_size):
    """A bucket knowing only the bytes before it places every chunk where
    `plan_shards`, seeing the whole split, puts it (the file exchange)."""
    buckets = [BucketChunks("train", index, str(index), tuple(
        Chunk(sum(sizes[:j]), size, 2) for j, size in enumerate(sizes)))
        for index, sizes in enumerate(sizes_per_bucket)]
    plan = plan_shards("train", buckets, shard_size)
    expected = {(int(path), offset, length): spec.index for spec in plan
                for path, offset, length in spec.pieces}
    total = sum(map(sum, sizes_per_bucket))
    start, got, pieces = 0, {}, collections.Counter()
    for bucket in buckets:
        lengths = np.array([chunk.length for chunk in bucket.chunks])
        shards, numbers, sent = shuffle_cells.place_chunks(
            lengths, np.full(len(lengths), 2), start, total, len(plan))
        for chunk, shard, number in zip(bucket.chunks, shards.tolist(), numbers.tolist()):
            got[(bucket.index, chunk.offset, chunk.length)] = shard
            assert number == pieces[(bucket.index, shard)]
            pieces[(bucket.index, shard)] += 1
        assert all(sent[shard][0] == pieces[(bucket.index, shard)] for shard in sent)
        start += int(lengths.sum())
    # The plan merges a bucket's consecutive chunks into one piece.
    for (bucket, offset, length), shard in got.items():
        assert any(b == bucket and o <= offset and offset + length <= o + n and s == shard
                   for (b, o, n), s in expected.items())
    assert [spec.num_bytes for spec in plan] == [
        sum(length for (_, _, length), shard in got.items() if shard == index)
        for index in range(len(plan))]


class _BucketValues:
    """A bucket's (plan, layout, chunks) as a GroupByKey gives them:
    iterable again and again, each chunk's bytes made as it is reached, as
    a runner reads a large group from its shuffle."""

    def __init__(self, chunks: int, chunk_bytes: int):
        self.chunks, self.chunk_bytes = chunks, chunk_bytes

    def __iter__(self):
        total = self.chunks * self.chunk_bytes
        lengths = np.full(self.chunks, self.chunk_bytes, dtype="<i8")
        yield "layout", (lengths.tobytes(), np.ones(self.chunks, dtype="<i8").tobytes())
        for index in range(self.chunks):
            yield "chunk", (index * self.chunk_bytes, bytes([index % 251]) * self.chunk_bytes)
            if index == 3:  # a retried step's chunk, delivered again
                yield "chunk", (0, bytes([0]) * self.chunk_bytes)
        yield "plan", (0, total, total, 2, self.chunks, 0)


def test_placing_a_bucket_holds_one_chunk_at_a_time():
    """A key shared by most rows puts them in one bucket: placing its
    chunks must not hold them all (here 64 MB in 256 KB chunks)."""
    import tracemalloc

    values = _BucketValues(chunks=256, chunk_bytes=256 << 10)
    place = shuffle_cells.PlaceFn()
    place.setup()
    tracemalloc.start()
    try:
        pieces, ends = collections.Counter(), {}
        for (split, shard), (tag, value) in place.process((("train", 0), values)):
            if tag == "end":
                ends[shard] = value
                continue
            bucket, number, data = value
            assert data == bytes([(number + 128 * shard) % 251]) * len(data)
            pieces[shard] += len(data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert pieces == {0: 32 << 20, 1: 32 << 20}
    assert ends == {0: (0, (128, 128, 32 << 20)), 1: (0, (128, 128, 32 << 20))}
    assert peak < 4 << 20, peak


def test_placing_a_bucket_fails_on_a_missing_or_stray_chunk():
    values = list(_BucketValues(chunks=4, chunk_bytes=10))
    place = shuffle_cells.PlaceFn()
    place.setup()
    missing = [value for value in values if value[0] != "chunk" or value[1][0] != 20]
    with pytest.raises(run_format.RunFileError, match="chunk at byte 20 is missing"):
        list(place.process((("train", 0), missing)))
    stray = values + [("chunk", (5, b"x" * 10))]
    with pytest.raises(run_format.RunFileError, match="byte 5 is not in the unit's layout"):
        list(place.process((("train", 0), stray)))
    with pytest.raises(ValueError, match="without the split's plan"):
        list(place.process((("train", 0), [value for value in values if value[0] != "plan"])))


# -- in Beam -------------------------------------------------------------------


def _write(staging, rows, *, exchange_name, args=("--direct_running_mode=in_memory",),
           compression="gzip", shuffle=True, tuning=TUNING, batch=100, shard_size=1_000_000,
           key_bounds=None) -> int:
    """Writes the rows' shards into `staging`; the bytes the shuffle
    exchange sent through GroupByKeys (its exchange_bytes counter)."""
    batches = [rows[i:i + batch] for i in range(0, len(rows), batch)]
    pipeline = beam.Pipeline(options=PipelineOptions(list(args)))
    _ = (pipeline
         | "Batches" >> beam.Create(batches)
         | "Write" >> WriteShards(staging, dataset_name="exchange", splits=SPLITS,
                                  shuffle=shuffle, shard_size=shard_size,
                                  compression=compression, tuning=tuning,
                                  exchange=exchange_name, key_bounds=key_bounds))
    result = pipeline.run()
    result.wait_until_finish()
    counters = result.metrics().query(MetricsFilter().with_name("exchange_bytes"))["counters"]
    return sum(counter.committed or 0 for counter in counters)


def _digests(staging):
    return {name: hashlib.sha256((pathlib.Path(staging) / name).read_bytes()).hexdigest()
            for name in sorted(os.listdir(staging))}


# A quarter of each split in the gzip ratio sample, so that it is neither
# empty nor everything.
SAMPLED = ShardTuning(run_bytes=400_000, bucket_bytes=300_000, ratio_sample_bound=1 << 126)
SPILLING_KEY_ORDER = ShardTuning(run_bytes=400_000, bucket_bytes=300_000, memory_bytes=40_000,
                                 fan_in=2, lanes=3, route_bytes=30_000)
# (compression, shuffle, rows have keys, tuning)
CASES = {
    "gzip-shuffled": ("gzip", True, False, TUNING),
    "gzip-shuffled-sampled": ("gzip", True, False, SAMPLED),
    "gzip-shuffled-sampled-spilled": (
        "gzip", True, False, ShardTuning(run_bytes=400_000, bucket_bytes=300_000,
                                         memory_bytes=40_000, fan_in=2, hash_buckets=3,
                                         route_bytes=30_000, ratio_sample_bound=1 << 126)),
    "plain-shuffled": ("none", True, False, TUNING),
    "plain-shuffled-spilled": (
        "none", True, False, ShardTuning(run_bytes=400_000, bucket_bytes=300_000,
                                         memory_bytes=40_000, fan_in=2, hash_buckets=3,
                                         route_bytes=30_000)),
    "plain-key-order-spilled": ("none", False, True, SPILLING_KEY_ORDER),
    "plain-ordered-by-example": (
        "none", False, False, ShardTuning(run_bytes=400_000, bucket_bytes=100_000, lanes=5)),
    "gzip-key-order-spilled": ("gzip", False, True, SPILLING_KEY_ORDER),
}


@pytest.mark.parametrize("compression, shuffle, keyed, tuning", CASES.values(),
                         ids=CASES.keys())
def test_shuffle_exchange_writes_the_file_exchange_bytes(tmp_path, compression, shuffle, keyed,
                                                         tuning):
    rows, shard_size = _rows(keyed=keyed), 1_000_000
    if tuning.ratio_sample_bound == SAMPLED.ratio_sample_bound:
        rows, shard_size = _table_rows(), 150_000  # compressible, sampled
    _write(str(tmp_path / "files"), rows, exchange_name="files", compression=compression,
           shuffle=shuffle, tuning=tuning, shard_size=shard_size)
    reordered = list(reversed(rows))
    _write(str(tmp_path / "shuffle"), reordered, exchange_name="shuffle",
           compression=compression, shuffle=shuffle, tuning=tuning, batch=61,
           shard_size=shard_size)
    files = _digests(tmp_path / "files")
    assert len(files) >= 3 and all(".tfrecord" in name for name in files)
    assert _digests(tmp_path / "shuffle") == files  # nothing else left in staging either


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_key_ordered_rows_cross_the_shuffle_once_less_with_bounds_known_before(tmp_path,
                                                                             compression):
    """Any bucket bounds give the file exchange's bytes: key-ordered plain
    shards are cut at rows, gzip ones at cells of the split's framed bytes.
    Bounds given before the run spare the rows their wait in lanes.
    Plain: 2 bytes through the shuffle per framed byte instead of 3 (then
    written once). Gzip: 1 instead of 2, plus each chunk twice (to its
    place, then to its shard) and the rows of the cells two buckets share,
    which cross once more to be compressed together."""
    rows = _rows(keyed=True, seed=3)
    framed = sum(len(example) + 16 for _, example in rows)
    _write(str(tmp_path / "files"), rows, exchange_name="files", compression=compression,
           shuffle=False)
    files = _digests(tmp_path / "files")
    assert len(files) >= 3
    written = sum((tmp_path / "files" / name).stat().st_size for name in files)
    cell_bytes = TUNING.chunk_bytes(1_000_000)
    seam_bytes = cell_bytes + max(len(example) + 16 for _, example in rows)
    order_keys = [key or example for key, example in rows]
    variants = {
        "lanes": None,
        "sampled": bucket_bounds_of(order_keys[::10], 8, TUNING.prefix_len),
        "skewed": (b"", b"\xff\xff"),  # every row in the first bucket
        "one per row": bucket_bounds_of(order_keys, len(rows), TUNING.prefix_len),
    }
    for name, bounds in variants.items():
        staging = tmp_path / name
        sent = _write(str(staging), rows[::-1], exchange_name="shuffle", compression=compression,
                      shuffle=False, batch=37, key_bounds=bounds)
        assert _digests(staging) == files, name
        if compression == "none":
            assert sent == (3 if bounds is None else 2) * framed, name
            continue
        rows_sent = (2 if bounds is None else 1) * framed
        buckets = len(bounds) if bounds else 1
        if name == "sampled":  # a few shared cells
            assert sent <= rows_sent + 2 * written + (buckets - 1) * 2 * seam_bytes, name
        assert rows_sent + 2 * written <= sent <= rows_sent + 2 * written + framed, name


@pytest.mark.slow
def test_rows_larger_than_a_shard_and_empty_buckets_give_the_file_exchange_bytes(tmp_path):
    rng = random.Random(9)
    rows = [(None, rng.randbytes(rng.choice([rng.randint(10, 200), 30_000])))
            for _ in range(200)]
    tuning = ShardTuning(run_bytes=100_000, bucket_bytes=50_000, hash_buckets=512)
    for name in ("files", "shuffle"):
        _write(str(tmp_path / name), rows, exchange_name=name, compression="none",
               tuning=tuning, batch=20, shard_size=20_000)
    files = _digests(tmp_path / "files")
    assert _digests(tmp_path / "shuffle") == files
    for split in ("train", "test"):
        shards = [name for name in files if name.startswith(split) and name.endswith(".tfrecord")]
        count = int(shards[0].split("-of-")[1].split(".")[0])
        assert len(shards) == count > 1
        # No shard is empty although rows are larger than a shard.
        assert all((tmp_path / "files" / name).stat().st_size > 0 for name in shards)


@pytest.mark.slow
def test_shuffle_exchange_on_two_worker_processes_gives_the_same_bytes(tmp_path):
    rows = _rows(seed=5)
    _write(str(tmp_path / "one"), rows, exchange_name="files")
    _write(str(tmp_path / "two"), rows, exchange_name="shuffle",
           args=("--direct_running_mode=multi_processing", "--direct_num_workers=2"))
    assert _digests(tmp_path / "two") == _digests(tmp_path / "one")


def test_auto_picks_files_on_the_direct_runner_and_shuffle_elsewhere():
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    from recordforge.transforms.writer import default_exchange

    from apache_beam.runners.dask.dask_runner import DaskRunner
    from apache_beam.runners.portability.portable_runner import PortableRunner

    class LocalEngine(FnApiRunner):  # a local runner under another name
        pass

    assert default_exchange(beam.Pipeline().runner) == "files"
    assert default_exchange(LocalEngine()) == "files"
    # Made from Beam's BundleBasedDirectRunner, but its workers share no disk.
    assert default_exchange(DaskRunner()) == "shuffle"
    assert default_exchange(PortableRunner()) == "shuffle"


def test_shuffle_exchange_writes_only_the_final_shards_to_the_output_store():
    store = _counting_fs()
    store.reset(part_bytes=64 << 10)
    staging = "counted://bucket/out/.staging/v1"
    _write(staging, _rows(seed=6), exchange_name="shuffle", compression="none")
    files = sorted(path for path in store.store if path.startswith("/bucket/out/"))
    shards = [path for path in files if path.endswith(".tfrecord")]
    assert len(shards) >= 3
    assert all(path.rsplit("/", 1)[1].split("-")[0] in ("train", "test") for path in shards)
    assert files == sorted(shards + [shard + ".index" for shard in shards])
    # Every object ever written is a final shard or its index, written
    # once; none was read, copied, moved or deleted.
    assert sorted(store.log) == files
    counts = store.summary()["by_kind"]
    assert counts["GET"] == counts["COPY"] == counts["DELETE"] == 0


@pytest.mark.slow
def test_requests_grow_linearly_with_the_data():
    store = _counting_fs()
    tuning = ShardTuning(run_bytes=20_000, bucket_bytes=10_000, max_chunk_bytes=2_000,
                         index_every=100, route_bytes=1_000)
    requests = {}
    for count in (1000, 4000):
        store.reset(part_bytes=8_000)
        _write("counted://bucket/linear", _rows(count=count, seed=7), exchange_name="shuffle",
               compression="none", tuning=tuning, batch=10, shard_size=60_000)
        requests[count] = store.summary()["requests"]
    # Four times the data: four times the shards and parts, nothing that
    # grows with runs x buckets (the file exchange's term).
    assert 3.0 <= requests[4000] / requests[1000] <= 4.6, requests


# -- shuffled gzip: shards cut at rows ----------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 300), st.integers(1, 5), st.integers(1, 10_000)),
                min_size=1, max_size=60), st.lists(st.integers(0, 60), max_size=4))
def test_bucket_sizes_add_up_whatever_the_bundles(elements, cuts):
    """One bucket at a time (key-ordered gzip's chunk sizes, ~300,000
    buckets at 10 TB), any bundling: the counts of every bucket (digests
    added mod 2^64), arrays ending at the highest bucket holding rows."""
    combine = shuffle_rows.BucketSizesFn()
    edges = sorted({0, len(elements), *(cut % (len(elements) + 1) for cut in cuts)})
    accumulators = []
    for a, b in zip(edges[:-1], edges[1:]):
        accumulator = combine.create_accumulator()
        for bucket, rows, nbytes in elements[a:b]:
            sizes = np.full(rows, nbytes // rows + 1, dtype=np.int64)
            digests = np.full(rows, _digest(bucket, nbytes), dtype=np.uint64)
            accumulator = combine.add_input(accumulator, (
                *shuffle_packets.bucket_sizes(np.full(rows, bucket), sizes, digests), ()))
        accumulators.append(combine.compact(accumulator))
    rows, nbytes, digests, largest, _ = combine.extract_output(
        combine.merge_accumulators(accumulators))
    highest = max(bucket for bucket, _, _ in elements)
    assert len(rows) == len(nbytes) == len(digests) == highest + 1
    for bucket in range(highest + 1):
        mine = [(r, r * (n // r + 1)) for b, r, n in elements if b == bucket]
        assert (rows[bucket], nbytes[bucket]) == (sum(r for r, _ in mine), sum(n for _, n in mine))
        assert int(digests[bucket]) == sum(
            r * _digest(b, n) for b, r, n in elements if b == bucket) % 2**64
    assert largest == max(n // r + 1 for _, r, n in elements)


def _digest(bucket: int, nbytes: int) -> int:
    """A row digest near 2^64, so that a bucket's sum wraps."""
    return 2**64 - 1 - bucket * 10_007 - nbytes


def _pack_sample(rows, batches, bundles, tuning):
    """The ratio sample of split "train" as the shuffle exchange's combine
    finds it: rows cut into batches at `batches`, the batches' outputs
    added into one accumulator per bundle (cut at `bundles`), merged."""
    from recordforge.transforms.writer.shuffle_steps import PackFn
    pack = PackFn("exchange", SPLITS, True, tuning, hash_buckets=tuning.hash_buckets,
                  ratio_bound=tuning.ratio_sample_bound)
    pack.setup()
    edges = sorted({0, len(rows), *batches})
    sizes = [value for batch in (rows[a:b] for a, b in zip(edges[:-1], edges[1:]))
             for tag, value in pack.process(batch) if tag == "sizes" and value[0] == "train"]
    combine = shuffle_rows.BucketSizesFn()
    cuts = sorted({0, len(sizes), *(cut % (len(sizes) + 1) for cut in bundles)})
    accumulators = []
    for a, b in zip(cuts[:-1], cuts[1:]):
        accumulator = combine.create_accumulator()
        for _, element in sizes[a:b]:
            accumulator = combine.add_input(accumulator, element)
        accumulators.append(combine.compact(accumulator))
    return combine.extract_output(combine.merge_accumulators(accumulators[::-1]))[4]


def _file_exchange_sample(tmp_path, rows, tuning):
    """The ratio sample of split "train" as the file exchange finds it:
    runs spilled, bucket ranges planned, each measured."""
    work = tempfile.mkdtemp(dir=tmp_path)
    spill_fn = file_exchange._SpillFn(os.path.join(work, "runs"), "exchange", SPLITS, True, tuning)
    spill_fn.setup()
    spill_fn.start_bundle()
    records = [record for i in range(0, len(rows), 300)
               for record in spill_fn.process(rows[i:i + 300])]
    spill_fn.finish_bundle()
    tasks = file_exchange._plan_split_buckets(
        ("train", [record for record in records if record.split == "train"]),
        plan_dir=os.path.join(work, "plans"), tuning=tuning)
    assert len(tasks) > 2
    measured = [sorting.measure_bucket(bucket, spill.read_run_list(runs_file), runs_file,
                                           tuning.ratio_sample_bound)
                for runs_file, bucket in tasks]
    if tuning.ratio_sample_bound < 1 << 128:
        assert measured[-1].ratio_sample == ()  # only the lowest buckets have any
    return ratio_sample_of(row for bucket in measured for row in bucket.ratio_sample)


def test_the_ratio_sample_is_the_rows_below_the_bound_in_both_exchanges(tmp_path):
    rows = _table_rows(3000, seed=3)
    tuning = ShardTuning(run_bytes=200_000, bucket_bytes=100_000, hash_buckets=7,
                         ratio_sample_bound=(1 << 128) // 5)
    assigner = SplitAssigner("exchange", SPLITS)
    expected = sorted(
        (assigner.digest(example), tfrecord.frame_records([example]))
        for _, example in rows if assigner.split_of(example) == "train"
        and int.from_bytes(assigner.digest(example), "big") < tuning.ratio_sample_bound)
    assert 300 < len(expected) < 700
    assert list(_pack_sample(rows, range(0, 3000, 100), [3, 9], tuning)) == expected
    assert _file_exchange_sample(tmp_path, rows, tuning) == expected
    # Past the limit, both keep the same first rows.
    few = ShardTuning(run_bytes=200_000, bucket_bytes=100_000, hash_buckets=7,
                      ratio_sample_bound=1 << 128)
    import unittest.mock
    with unittest.mock.patch.object(ratio_sample, "RATIO_SAMPLE_LIMIT", 40_000):
        limited = _file_exchange_sample(tmp_path, rows, few)
        kept = ratio_sample.within_limit(limited)
        assert 0 < sum(len(record) for _, record in kept) <= 40_000
        assert sum(len(record) for _, record in limited) > 40_000
        assert list(_pack_sample(rows, range(0, 3000, 77), [5], few)) == limited


@settings(max_examples=15, deadline=None)
@given(st.lists(st.integers(0, 600), max_size=12), st.lists(st.integers(0, 50), max_size=5))
def test_the_ratio_sample_does_not_depend_on_batches_or_bundles(batches, bundles):
    rows = _TABLE_ROWS
    tuning = ShardTuning(hash_buckets=5, ratio_sample_bound=(1 << 128) // 3)
    assert _pack_sample(rows, batches, bundles, tuning) == _pack_sample(
        rows, [300], [], tuning)


_TABLE_ROWS = _table_rows(600, seed=4)


def _read_shards(staging):
    """Every shard of a staging directory read by Python's gzip and the
    framing parsed by hand: name -> records."""
    return {name: _parse(gzip.decompress((pathlib.Path(staging) / name).read_bytes()))
            for name in sorted(os.listdir(staging))}


@pytest.mark.parametrize("exchange_name", ["files", "shuffle"])
def test_gzip_shards_cut_at_rows_are_one_member_near_the_target_size(tmp_path, exchange_name):
    rows = _table_rows(6000, seed=5)
    shard_size = 150_000
    staging = tmp_path / exchange_name
    _write(str(staging), rows, exchange_name=exchange_name, shard_size=shard_size,
           tuning=ShardTuning(run_bytes=400_000, bucket_bytes=300_000, memory_bytes=200_000,
                              ratio_sample_bound=(1 << 128) // 4))
    shards = _read_shards(staging)
    assert sorted(record for records in shards.values() for record in records) == sorted(
        example for _, example in rows)
    plain = sum(len(example) + 16 for _, example in rows)
    written = sum((staging / name).stat().st_size for name in shards)
    assert written < 0.5 * plain
    for split in ("train", "test"):
        names = [name for name in shards if name.startswith(split)]
        sizes = [(staging / name).stat().st_size for name in names]
        assert len(names) == int(names[0].split("-of-")[1].split(".")[0]) >= 2
        # The count came from the sample's ratio: every shard near the target.
        assert all(0.5 * shard_size <= size <= 1.6 * shard_size for size in sizes[:-1]), sizes
        assert abs(len(sizes) - sum(sizes) / shard_size) <= 1, sizes
        for name in names:
            data = (staging / name).read_bytes()
            # One gzip member, with the deterministic header (mtime 0, no name).
            assert data[:4] == b"\x1f\x8b\x08\x00" and data[4:8] == b"\0" * 4
            member = zlib.decompressobj(31)
            member.decompress(data)
            assert member.eof and member.unused_data == b""
    # Beam's own reader reads the shards.
    with beam.Pipeline() as pipeline:
        read = pipeline | beam.io.ReadFromTFRecord(str(staging / "*.tfrecord.gz"))
        assert_that(read, equal_to([example for _, example in rows]))
