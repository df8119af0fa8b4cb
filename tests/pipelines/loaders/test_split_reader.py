"""The framework-free reading core (`pipelines/loaders`): equal shares per
rank, every record once per epoch, deterministic shuffles, resuming, and
damage that raises rather than yields wrong data; values checked against
the `tfrecord` package's independent reading."""

from __future__ import annotations

import collections
import hashlib
import json

import fsspec
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from recordforge.pipelines.loaders import NoIndexFiles, RecordSource, SplitReader
from recordforge.pipelines.loaders import plan
from recordforge.pipelines.loaders.permutation import Permutation
from recordforge.pipelines.loaders.records import CHECKS
from recordforge.pipelines.publish.held_manifest import DatasetCorrupt
from recordforge.transforms.tfrecord import frame_records, iter_records


def _ids(reader: SplitReader, worker: int = 0, workers: int = 1) -> list[int]:
    return [int(row["id"]) for row in reader.rows(worker, workers)]


@given(st.integers(0, 3000), st.integers(1, 9), st.sampled_from(plan.REMAINDERS),
       st.integers(1, 5))
def test_plan_gives_every_rank_the_same_count_and_covers_the_order(total, world, remainder,
                                                                     workers):
    share = plan.per_rank(total, world, remainder)
    slices = [[plan.worker_slice(total, world, rank, remainder, w, workers)
               for w in range(workers)] for rank in range(world)]
    assert {sum(s.stop - s.start for s in rank) for rank in slices} == {share}
    positions = [p for rank in slices for s in rank for p in range(s.start, s.stop)]
    assert positions == list(range(world * share))  # contiguous, no overlap
    if remainder == "drop":
        assert total - world < world * share <= total
    else:
        assert total <= world * share < total + world


@settings(max_examples=50)
@given(st.integers(0, 5000), st.integers(0, 2**64 - 1), st.integers(0, 1000))
def test_permutation_is_a_bijection_fixed_by_seed_and_epoch(n, seed, epoch):
    values = Permutation(n, seed, epoch)(np.arange(n))
    assert sorted(values.tolist()) == list(range(n))
    assert np.array_equal(Permutation(n, seed, epoch)(np.arange(n)), values)


@given(st.lists(st.integers(0, 50), min_size=1, max_size=6), st.integers(0, 400),
       st.integers(0, 400), st.integers(0, 5))
def test_segments_cover_positions_of_the_concatenated_shards(counts, start, length, seed):
    order = plan.shard_order(len(counts), seed, 0, True)
    flat = [(shard, i) for shard in order for i in range(counts[shard])]
    got = [(shard, i) for shard, a, b in plan.segments(plan.Slice(start, start + length),
                                                       counts, order) for i in range(a, b)]
    expected = [flat[p % len(flat)] for p in range(start, start + length)] if flat else []
    assert got == expected


@pytest.mark.parametrize("check", ["index", "sha256", "crc"])
def test_sequential_reading_equals_the_independent_reader(built_sample, oracle, check):
    reader = SplitReader(str(built_sample), "train", check=check)
    ours = list(reader.rows())
    theirs = oracle.rows(built_sample / "1.0.0", "train")
    assert len(ours) == len(theirs) == len(reader) > 0
    assert all(oracle.same(a, b) for a, b in zip(ours, theirs))


@pytest.mark.parametrize("sample,shuffle,mode", [("built_sample", False, "sequential"),
                                                  ("built_sample", True, "global"),
                                                  ("gzip_sample", True, "buffer")])
@pytest.mark.parametrize("remainder", plan.REMAINDERS)
@pytest.mark.parametrize("world", [2, 5])  # the split's 492 rows: no remainder, and 2
def test_ranks_of_two_workers_read_every_record_once_in_equal_shares(
        request, sample, shuffle, mode, remainder, world, oracle):
    path = str(request.getfixturevalue(sample))
    counts = collections.Counter()
    per_rank = []
    for rank in range(world):
        reader = SplitReader(path, "test", rank=rank, world_size=world, shuffle=shuffle, seed=3,
                             remainder=remainder, buffer_size=50)
        assert reader.shuffle == mode
        ids = _ids(reader, 0, 2) + _ids(reader, 1, 2)
        per_rank.append(len(ids))
        counts.update(ids)
    total = reader.total
    assert set(per_rank) == {len(reader)}
    assert set(range(oracle.row_count)) >= set(counts)
    if remainder == "drop":
        assert set(counts.values()) == {1} and len(counts) == total - total % world
    else:
        assert len(counts) == total and sum(counts.values()) == -(-total // world) * world
        assert sum(counts.values()) - total == (-total) % world  # each padded row once more


def test_the_global_shuffle_mixes_every_shard_from_the_first_rows(built_sample):
    ordered = SplitReader(str(built_sample), "train")
    in_order = _ids(ordered)
    shard_of, position = {}, 0
    for shard, count in enumerate(ordered.counts):
        shard_of.update((row_id, shard) for row_id in in_order[position:position + count])
        position += count
    first = _ids(SplitReader(str(built_sample), "train", shuffle=True, seed=3))[:60]
    assert len(ordered.counts) == 3 and {shard_of[i] for i in first} == {0, 1, 2}


def test_a_shuffle_is_fixed_by_seed_and_epoch(built_sample, gzip_sample):
    for path in (built_sample, gzip_sample):
        first = _ids(SplitReader(str(path), "train", shuffle=True, seed=1, buffer_size=100))
        again = _ids(SplitReader(str(path), "train", shuffle=True, seed=1, buffer_size=100))
        reader = SplitReader(str(path), "train", shuffle=True, seed=1, buffer_size=100)
        reader.set_epoch(1)
        assert first == again != _ids(reader)
        assert sorted(first) == sorted(_ids(reader))
        assert first != sorted(first)


@pytest.mark.parametrize("sample,shuffle", [("built_sample", False), ("built_sample", True),
                                            ("gzip_sample", True)])
@given(stop=st.integers(0, 300))
@settings(max_examples=5, deadline=None)
def test_resuming_mid_epoch_yields_the_rest_exactly_once(request, sample, shuffle, stop):
    path = str(request.getfixturevalue(sample))
    make = lambda: SplitReader(path, "test", shuffle=shuffle, seed=5, buffer_size=40)  # noqa: E731
    reader = make()
    reader.set_epoch(2)
    rows = reader.rows()
    head = [int(next(rows)["id"]) for _ in range(stop)]
    state = json.loads(json.dumps(reader.state_dict()))  # saved as a checkpoint would be
    resumed = make()
    resumed.load_state_dict(state)
    tail = _ids(resumed)
    everything = _ids(make()) if not shuffle else None
    assert len(head) + len(tail) == len(reader)
    assert sorted(head + tail) == sorted(set(head + tail))
    if everything is not None:
        assert head + tail == everything


def test_resuming_with_other_settings_is_refused(built_sample):
    reader = SplitReader(str(built_sample), "test", shuffle=True, seed=5)
    state = reader.state_dict()
    other = SplitReader(str(built_sample), "test", shuffle=True, seed=6)
    with pytest.raises(ValueError, match="seed"):
        other.load_state_dict(state)


def _flip(path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x40
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("shuffle,check", [(False, "index"), (False, "sha256"), (False, "crc"),
                                           (True, "index")])
def test_a_damaged_shard_raises_and_yields_no_wrong_row(indexed, built_sample, shuffle, check,
                                                        oracle):
    shard = sorted((indexed / "1.0.0").glob("train-*.tfrecord"))[1]
    _flip(shard, shard.stat().st_size // 2)
    theirs = {int(row["id"][0]): row for row in oracle.rows(built_sample / "1.0.0", "train")}
    read = []
    with pytest.raises(DatasetCorrupt, match=rf"{shard.name}.*(damaged|record \d+)"):
        for row in SplitReader(str(indexed), "train", shuffle=shuffle, check=check).rows():
            read.append(row)
    assert read and all(oracle.same(row, theirs[int(row["id"])]) for row in read)


@pytest.mark.parametrize("check", ["index", "sha256", "crc"])
def test_rows_read_before_damage_are_the_intact_ones(indexed, built_sample, oracle, check):
    version = indexed / "1.0.0"
    shard = sorted(version.glob("test-*.tfrecord"))[0]
    _flip(shard, shard.stat().st_size - 30)  # inside the last record
    reader = SplitReader(str(indexed), "test", check=check)
    theirs = oracle.rows(built_sample / "1.0.0", "test")
    read = []
    with pytest.raises(DatasetCorrupt, match=rf"{shard.name}.*record"):
        for row in reader.rows():
            read.append(row)
    assert read and all(oracle.same(a, b) for a, b in zip(read, theirs))


def test_a_truncated_shard_raises_before_its_first_record(indexed):
    shard = sorted((indexed / "1.0.0").glob("test-*.tfrecord"))[0]
    shard.write_bytes(shard.read_bytes()[:-1])
    for reader in (*(SplitReader(str(indexed), "test", check=check) for check in CHECKS),
                   RecordSource(str(indexed), "test")):
        with pytest.raises(DatasetCorrupt, match=rf"{shard.name}: holds \d+ bytes"):
            next(iter(reader.rows())) if isinstance(reader, SplitReader) else reader[0]


def test_a_shard_rewritten_with_valid_records_raises_at_its_end(indexed):
    """Two records of one length swapped: same size, every CRC valid, other
    rows in their places; only the sha256, checked as the shard streams,
    can tell (`VersionReplaced` or `DatasetCorrupt` as the manifest says).
    The default rule misses it, as docs/reading.md says: the records keep
    their index file's spans."""
    shard = sorted((indexed / "1.0.0").glob("train-*.tfrecord"))[0]
    with shard.open("rb") as handle:
        records = list(iter_records(handle, compression="none"))
    by_length = collections.defaultdict(list)
    for position, record in enumerate(records):
        by_length[len(record)].append(position)
    first, second = next(p for p in by_length.values() if len(p) > 1)[:2]
    records[first], records[second] = records[second], records[first]
    shard.write_bytes(frame_records(records))
    with pytest.raises(DatasetCorrupt, match=rf"{shard.name}: it holds .* sha256 .* damaged"):
        list(SplitReader(str(indexed), "train", check="sha256").rows())
    default = SplitReader(str(indexed), "train")
    assert len(list(default.rows())) == len(default)


def test_a_damaged_index_file_raises_naming_it(indexed):
    index = sorted((indexed / "1.0.0").glob("test-*.index"))[0]
    _flip(index, 3)
    with pytest.raises(DatasetCorrupt, match=rf"{index.name}: holds .* sha256"):
        RecordSource(str(indexed), "test")[0]
    with pytest.raises(DatasetCorrupt, match=index.name):
        next(SplitReader(str(indexed), "test", shuffle=True).rows())


def test_an_index_that_does_not_tile_its_shard_raises_naming_the_line(indexed):
    """An index the manifest vouches for (its sha256 listed) that a writer
    got wrong: offsets that skip a byte."""
    version = indexed / "1.0.0"
    manifest = json.loads((version / "manifest.json").read_text())
    entry = manifest["splits"]["test"]["shards"][0]
    index = version / entry["index"]["file"]
    lines = index.read_text().splitlines()
    offset, length = map(int, lines[2].split())
    lines[2] = f"{offset + 1} {length - 1}"
    data = ("\n".join(lines) + "\n").encode()
    index.write_bytes(data)
    entry["index"].update(num_bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    (version / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DatasetCorrupt, match=rf"{index.name}: line 3 "):
        RecordSource(str(indexed), "test")[0]


def test_random_access_equals_the_independent_reader(built_sample, oracle):
    source = RecordSource(str(built_sample), "test")
    theirs = oracle.rows(built_sample / "1.0.0", "test")
    assert len(source) == len(theirs)
    for i in (0, 1, len(theirs) // 2, len(theirs) - 1, -1):
        assert oracle.same(source[i], theirs[i])
    with pytest.raises(IndexError, match=f"record {len(theirs)} of split 'test'"):
        source[len(theirs)]


def test_random_access_to_gzip_output_is_refused_with_the_way_out(gzip_sample):
    with pytest.raises(NoIndexFiles, match="gzip output has no random access.*RecordDataset"):
        RecordSource(str(gzip_sample), "train")


def test_a_record_that_does_not_fit_the_manifest_names_shard_record_and_feature(indexed):
    version = indexed / "1.0.0"
    manifest = json.loads((version / "manifest.json").read_text())
    manifest["features"]["vec"]["shape"] = [4]
    (version / "manifest.json").write_text(json.dumps(manifest))
    first = manifest["splits"]["test"]["shards"][0]["file"]
    with pytest.raises(DatasetCorrupt, match=rf"{first}: record 0: feature 'vec' holds 3 values"):
        next(SplitReader(str(indexed), "test").rows())


def test_a_missing_split_names_the_splits(built_sample):
    with pytest.raises(ValueError, match="no split 'validation'; its splits: train, test"):
        SplitReader(str(built_sample), "validation")


def test_random_access_to_a_damaged_record_names_it_and_reads_the_others(indexed, oracle,
                                                                         built_sample):
    version = indexed / "1.0.0"
    manifest = json.loads((version / "manifest.json").read_text())
    entry = manifest["splits"]["test"]["shards"][0]
    lines = (version / entry["index"]["file"]).read_text().splitlines()
    offset, length = map(int, lines[5].split())
    _flip(version / entry["file"], offset + length // 2)
    source = RecordSource(str(indexed), "test")
    with pytest.raises(DatasetCorrupt, match=rf"{entry['file']}: .* at byte offset {offset} "
                                             r"\(record 5\)"):
        source[5]
    theirs = oracle.rows(built_sample / "1.0.0", "test")
    assert oracle.same(source[4], theirs[4]) and oracle.same(source[6], theirs[6])


@pytest.mark.parametrize("change", [{"consumed": [-1]}, {"consumed": [10**9]},
                                    {"consumed": [1, 2]}, {"consumed": "3"}, {"epoch": None},
                                    {"num_workers": 0}, {"rank": 1}])
def test_a_saved_state_that_cannot_be_this_readers_is_refused(built_sample, change):
    """A negative count would read another worker's rows, too large a one none."""
    reader = SplitReader(str(built_sample), "test")
    with pytest.raises(ValueError, match="saved|state"):
        reader.load_state_dict({**reader.state_dict(), **change})


def test_crc_checking_counts_the_records_of_a_shard_read_to_its_end(indexed):
    """The last record dropped and the one before it grown by as many bytes
    (an unknown field, which protobuf skips): the same size, valid CRCs,
    every record an Example; only the count tells."""
    shard = sorted((indexed / "1.0.0").glob("test-*.tfrecord"))[0]
    with shard.open("rb") as handle:
        records = list(iter_records(handle, compression="none"))
    size = shard.stat().st_size
    grow = len(records[-1]) + 16  # its data and framing
    payload = grow - 3  # field 15 (wire type 2) as one byte, a two-byte length
    assert 128 <= payload < 16384
    unknown = bytes([15 << 3 | 2, payload & 0x7F | 0x80, payload >> 7]) + bytes(payload)
    shard.write_bytes(frame_records(records[:-2] + [records[-2] + unknown]))
    assert shard.stat().st_size == size
    with pytest.raises(DatasetCorrupt, match=rf"{shard.name}: holds {len(records) - 1} records"):
        list(SplitReader(str(indexed), "test", check="crc").rows())
    with pytest.raises(ValueError, match="check must be one of"):
        SplitReader(str(indexed), "test", check="md5")


def test_a_version_behind_an_fsspec_url_reads_like_a_local_one(built_sample, oracle):
    """An output root on another filesystem (fsspec's memory store), LATEST
    followed, read in order and by index."""
    fs = fsspec.filesystem("memory")
    for path in built_sample.rglob("*"):
        if path.is_file():
            fs.pipe(f"/bucket/{path.relative_to(built_sample)}", path.read_bytes())
    theirs = oracle.rows(built_sample / "1.0.0", "test")
    ours = list(SplitReader("memory://bucket", "test").rows())
    assert len(ours) == len(theirs) and all(oracle.same(a, b) for a, b in zip(ours, theirs))
    assert oracle.same(RecordSource("memory://bucket", "test")[7], theirs[7])
    fs.rm("/bucket", recursive=True)
