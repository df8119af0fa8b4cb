"""The default ``check="index"``: records read in chunks through the index
file the manifest vouches for. Every flipped byte, truncation, re-cut or
reordered shard and damaged index raises, naming the record, after the
intact records before it; hypothesis generates the shards and the damage,
the records read are compared with the records framed (and, on a built
sample, with the `tfrecord` package's reading)."""

from __future__ import annotations

import gzip
import io
import json
import re
import shutil

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from recordforge.pipelines.loaders import SplitReader
from recordforge.pipelines.loaders.index_files import _parse
from recordforge.pipelines.loaders.records import CHECKS
from recordforge.pipelines.loaders.spans import chunk_end, read_spans
from recordforge.pipelines.publish.held_manifest import DatasetCorrupt
from recordforge.transforms.tfrecord import FRAMING, frame_records, index_line, iter_records

_records = st.lists(st.binary(max_size=300), min_size=1, max_size=40)
_chunks = st.integers(1, 2000)


def _offsets(records: list[bytes]) -> np.ndarray:
    return np.cumsum([0] + [len(record) + FRAMING for record in records])


def _read(shard: bytes, offsets: np.ndarray, start: int, stop: int, chunk: int,
          got: list[bytes]) -> None:
    """read_spans over `shard`, each record copied into `got` as it comes."""
    for record in read_spans(io.BytesIO(shard), offsets, start, stop, "s.tfrecord", chunk):
        got.append(bytes(record))


@given(_records, st.data(), _chunks)
def test_any_slice_reads_its_records_whatever_the_chunk(records, data, chunk):
    start = data.draw(st.integers(0, len(records)))
    stop = data.draw(st.integers(start, len(records)))
    got: list[bytes] = []
    _read(frame_records(records), _offsets(records), start, stop, chunk, got)
    assert got == records[start:stop]


@given(_records, _chunks, st.data())
def test_a_chunk_holds_whole_records_within_its_size_or_one(records, chunk, data):
    offsets = _offsets(records)
    first = data.draw(st.integers(0, len(records) - 1))
    end = chunk_end(offsets, first, len(records), chunk)
    assert first < end <= len(records)
    assert end == first + 1 or offsets[end] - offsets[first] <= chunk
    assert end == len(records) or offsets[end + 1] - offsets[first] > chunk


@given(_records, st.data(), st.integers(1, 255), _chunks)
def test_a_flipped_byte_anywhere_raises_naming_its_record(records, data, xor, chunk):
    shard = bytearray(frame_records(records))
    at = data.draw(st.integers(0, len(shard) - 1))
    shard[at] ^= xor
    offsets = _offsets(records)
    damaged = int(np.searchsorted(offsets, at, side="right")) - 1
    got: list[bytes] = []
    with pytest.raises(DatasetCorrupt, match=rf"s\.tfrecord: .*record {damaged}\b"):
        _read(bytes(shard), offsets, 0, len(records), chunk, got)
    assert got == records[:damaged]


@given(_records, st.data(), _chunks)
def test_a_shard_cut_otherwise_at_the_same_size_raises(records, data, chunk):
    """Another build's shard of the same size: bytes moved from one
    record to another, every CRC valid; the first record whose span
    differs from its index line is named."""
    assume(len(records) > 1)
    first, second = sorted(data.draw(st.lists(st.integers(0, len(records) - 1), min_size=2,
                                              max_size=2, unique=True)))
    grower, shrinker = data.draw(st.permutations([first, second]))
    assume(records[shrinker])
    moved = data.draw(st.integers(1, len(records[shrinker])))
    other = list(records)
    other[grower] = records[grower] + bytes(moved)
    other[shrinker] = records[shrinker][moved:]
    shard = frame_records(other)
    assert len(shard) == _offsets(records)[-1]
    got: list[bytes] = []
    with pytest.raises(DatasetCorrupt, match=rf"record {first}\b"):
        _read(shard, _offsets(records), 0, len(records), chunk, got)
    assert got == records[:first]


@given(_records, st.data(), _chunks)
def test_a_shard_shorter_than_its_index_raises(records, data, chunk):
    """Cut after its size was checked (it changed as it was read)."""
    shard = frame_records(records)
    keep = data.draw(st.integers(0, len(shard) - 1))
    offsets = _offsets(records)
    got: list[bytes] = []
    with pytest.raises(DatasetCorrupt, match=r"s\.tfrecord: .*record \d+"):
        _read(shard[:keep], offsets, 0, len(records), chunk, got)
    whole = int(np.searchsorted(offsets, keep, side="right")) - 1
    assert got == records[:whole]


def _reference_offsets(data: bytes, count: int) -> np.ndarray | None:
    """An index read line by line as its format says, or None when it is
    not one: `count` lines "<offset> <length>\\n" tiling from 0."""
    if data.count(b"\n") != count or (count and not data.endswith(b"\n")):
        return None
    offsets, at = [], 0
    for line in data.split(b"\n")[:count]:
        match = re.fullmatch(rb"([0-9]{1,18}) ([0-9]{1,18})", line)
        if not match or int(match[1]) != at or int(match[2]) < FRAMING:
            return None
        offsets.append(at)
        at += int(match[2])
    return np.array(offsets + [at])


_lengths = st.lists(st.integers(FRAMING, 10**6), max_size=30)


@given(_lengths)
def test_an_index_parses_to_its_offsets(lengths):
    data = b"".join(index_line(int(offset), length)
                    for offset, length in zip(np.cumsum([0] + lengths), lengths))
    assert np.array_equal(_parse(data, "s.index", len(lengths)),
                          _reference_offsets(data, len(lengths)))


@settings(suppress_health_check=[HealthCheck.filter_too_much])
@given(_lengths, st.data())
def test_a_mutated_index_parses_as_its_format_says_or_raises(lengths, data):
    """Bytes changed, inserted or removed anywhere: the parse agrees with
    a line-by-line reading of the format, or raises naming the index."""
    text = bytearray(b"".join(index_line(int(offset), length)
                              for offset, length in zip(np.cumsum([0] + lengths), lengths)))
    assume(text)
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(text) - 1))
        byte = data.draw(st.sampled_from(b"0123456789 \n\x00-+x\xb2"))
        edit = data.draw(st.sampled_from(["set", "insert", "delete"]))
        if edit == "set":
            text[at] = byte
        elif edit == "insert":
            text.insert(at, byte)
        elif len(text) > 1:
            del text[at]
    expected = _reference_offsets(bytes(text), len(lengths))
    if expected is None:
        with pytest.raises(DatasetCorrupt, match=r"s\.index: (line \d+|\d+ lines)"):
            _parse(bytes(text), "s.index", len(lengths))
    else:
        assert np.array_equal(_parse(bytes(text), "s.index", len(lengths)), expected)


def _shard_entry(version, split: str, position: int) -> dict:
    manifest = json.loads((version / "manifest.json").read_text())
    return manifest["splits"][split]["shards"][position]


def test_the_default_check_is_index_and_an_unknown_one_is_refused(built_sample):
    assert SplitReader(str(built_sample), "test").check == "index" == CHECKS[0]
    with pytest.raises(ValueError, match=r"check must be one of \('index', 'sha256', 'crc'\)"):
        SplitReader(str(built_sample), "test", check="md5")


def test_records_of_different_lengths_swapped_raise_naming_the_first(indexed):
    """Same size, every CRC valid, the count right: what ``check="crc"``
    misses, the spans catch."""
    version = indexed / "1.0.0"
    entry = _shard_entry(version, "train", 0)
    shard = version / entry["file"]
    with shard.open("rb") as handle:
        records = list(iter_records(handle, compression="none"))
    first = next(i for i in range(1, len(records)) if len(records[i]) != len(records[0]))
    records[0], records[first] = records[first], records[0]
    shard.write_bytes(frame_records(records))
    assert len(list(SplitReader(str(indexed), "train", check="crc").rows())) > 0
    with pytest.raises(DatasetCorrupt, match=rf"{entry['file']}: record 0 at byte offset 0 "
                                             "spans .* index file gives it"):
        next(SplitReader(str(indexed), "train").rows())


def test_a_damaged_index_raises_naming_it_when_read_in_order(indexed):
    version = indexed / "1.0.0"
    index = version / _shard_entry(version, "test", 0)["index"]["file"]
    data = bytearray(index.read_bytes())
    data[len(data) // 2] ^= 0x01
    index.write_bytes(bytes(data))
    with pytest.raises(DatasetCorrupt, match=rf"{index.name}: holds .* sha256"):
        next(SplitReader(str(indexed), "test").rows())


def test_a_worker_reads_its_slice_only_and_damage_elsewhere_is_not_its(indexed, built_sample,
                                                                       oracle):
    """Two workers on a one-shard slice each side of a damaged record: the
    worker whose rows hold it raises, the other reads its rows exactly."""
    version = indexed / "1.0.0"
    entry = _shard_entry(version, "test", 0)
    lines = (version / entry["index"]["file"]).read_text().splitlines()
    offset, length = map(int, lines[1].split())
    shard = version / entry["file"]
    data = bytearray(shard.read_bytes())
    data[offset + length // 2] ^= 0x10
    shard.write_bytes(bytes(data))
    reader = SplitReader(str(indexed), "test")
    with pytest.raises(DatasetCorrupt, match=rf"{entry['file']}: .*\(record 1\)"):
        list(reader.rows(0, 2))
    theirs = oracle.rows(built_sample / "1.0.0", "test")
    second = list(reader.rows(1, 2))
    assert second and all(oracle.same(a, b) for a, b in zip(second, theirs[-len(second):]))


def test_a_version_without_index_files_is_checked_by_its_sha256(gzip_sample, tmp_path):
    """gzip output: a shard whose gzip header alone changed (its mtime)
    holds the same records at the same size; only the sha256 tells, and the
    default check computes it."""
    root = shutil.copytree(gzip_sample, tmp_path / "gzip")
    version = root / "1.0.0"
    entry = _shard_entry(version, "test", 0)
    shard = version / entry["file"]
    data = bytearray(shard.read_bytes())
    data[4:8] = (0x01020304).to_bytes(4, "little")  # mtime: no part of what gunzip gives
    shard.write_bytes(bytes(data))
    assert gzip.decompress(bytes(data)) and entry.get("index") is None
    assert len(list(SplitReader(str(root), "test", check="crc").rows())) > 0
    with pytest.raises(DatasetCorrupt, match=rf"{entry['file']}: it holds .* sha256"):
        list(SplitReader(str(root), "test").rows())
