"""Tests for recordforge.pipelines.verify: every kind of damage is found and
located; intact datasets pass (and are readable by Beam's own reader)."""

import hashlib
import io
import json
import pathlib
import shutil
import uuid

import crc32c
import fsspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recordforge.pipelines import publish
from recordforge.pipelines.publish import example_checks, file_checks, verify
from recordforge.transforms.layout import shard_file_name
from recordforge.schemas.example import encode_example
from recordforge.transforms import tfrecord

REPO = pathlib.Path(__file__).resolve().parents[2]

FEATURES = {"id": {"type": "int64", "shape": []},
            "label": {"type": "int64", "shape": []},
            "scores": {"type": "float", "shape": [-1]},
            "text": {"type": "bytes", "shape": [], "text": True}}
VOCABULARIES = {"label": ["cat", "dog", "eel"]}


def _example(row):
    return {"id": row, "label": row % 3, "scores": ("float", [row / 4] * (row % 3)),
            "text": f"row {row}"}


def publish_dataset(root, *, compression="gzip", splits=None, examples=_example, version="v1"):
    """Publishes a small dataset through publish.begin_build/finalize
    (verification off, so damaged-by-design records get published)."""
    splits = splits or {"train": [7, 6], "test": [5]}
    staging = publish.begin_build(root, version)
    shards, row = [], 0
    for split, counts in splits.items():
        for index, count in enumerate(counts):
            records = [encode_example(examples(row + i)) for i in range(count)]
            row += count
            data = tfrecord.frame_records(records)
            if compression == "gzip":
                data = tfrecord.gzip_compress(data)
            file = shard_file_name(split, index, len(counts), compression)
            with fsspec.open(f"{staging.url}/{file}", "wb") as handle:
                handle.write(data)
            shards.append({"split": split, "file": file, "num_examples": count,
                           "num_bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    with fsspec.open(f"{staging.url}/dead_letter/part-00000.jsonl", "wb") as handle:
        handle.write(b'{"reason": "out_of_range"}\n')
    with fsspec.open(staging.result_url, "wb") as handle:
        handle.write(json.dumps({
            "shards": shards, "num_input_rows": row + 1,
            "dead_letter": {"num_rows": 1, "by_reason": {"out_of_range": 1},
                            "files": ["dead_letter/part-00000.jsonl"], "samples": {}}}).encode())
    return publish.finalize(staging, name="pets", compression=compression, features=FEATURES,
                            vocabularies=VOCABULARIES, config={}, split_names=list(splits),
                            max_error_rate=0.5, verify=False)


@pytest.fixture
def dataset(tmp_path):
    publish_dataset(str(tmp_path))
    return tmp_path


def shards_of(version_dir):
    manifest = json.loads((version_dir / "manifest.json").read_text())
    return {shard["file"]: shard for split in manifest["splits"].values()
            for shard in split["shards"]}


def damaged(report):
    return {problem.file for problem in report.problems}


def written_crc32c(version_dir):
    """What a build's writer reports of its shards as it writes them: each
    file's CRC-32C (here from the crc32c package, not the extension),
    taken before any damage below."""
    return {file: crc32c.crc32c((version_dir / file).read_bytes())
            for file in shards_of(version_dir)}


# --- intact ---------------------------------------------------------------------------

def test_intact_dataset_exits_zero_from_root_and_version_dir(dataset, capsys):
    assert verify.main([str(dataset)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"OK {dataset}/v1: version v1, 4 files, 18 records")
    assert verify.main([str(dataset / "v1"), "--deep", "--workers", "2"]) == 0
    report = verify.verify_dataset(str(dataset), deep=True)
    assert report.ok and report.records_checked == 18 and report.files_checked == 4


def test_intact_dataset_is_what_beams_reader_reads(dataset):
    import apache_beam as beam
    from apache_beam.testing.util import assert_that, equal_to
    from tfrecord import example_pb2

    expected = [encode_example(_example(row)) for row in range(7)]
    with beam.Pipeline() as pipeline:
        records = pipeline | beam.io.ReadFromTFRecord(
            str(dataset / "v1" / "train-00000-of-00002.tfrecord.gz"))
        assert_that(records, equal_to(expected))
    parsed = example_pb2.Example.FromString(expected[3])
    assert parsed.features.feature["text"].bytes_list.value == [b"row 3"]


def test_memory_dataset_and_process_pool(tmp_path):
    root = f"memory://verify-{uuid.uuid4().hex}/out"
    publish_dataset(root)
    assert verify.verify_dataset(root, deep=True, executor="process").ok  # threads for memory://
    publish_dataset(str(tmp_path))
    assert verify.verify_dataset(str(tmp_path), executor="process", workers=2).ok
    (tmp_path / "v1" / "test-00000-of-00001.tfrecord.gz").write_bytes(b"\x1f\x8b")
    report = verify.verify_dataset(str(tmp_path), executor="process", workers=2)
    assert {p.code for p in report.problems} == {"framing", "size", "sha256"}


# --- damage -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def flip_datasets(tmp_path_factory):
    roots = {}
    for compression in ("none", "gzip"):
        root = tmp_path_factory.mktemp(f"flip-{compression}")
        publish_dataset(str(root), compression=compression, splits={"train": [6, 5]})
        roots[compression] = root / "v1"
    return roots


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), compression=st.sampled_from(["none", "gzip"]),
       judged_by=st.sampled_from(["sha256", "crc32c"]))
def test_every_single_byte_flip_is_caught_and_located(flip_datasets, data, compression,
                                                       judged_by):
    """Against the manifest's sha256 (`recordforge verify`) or against the
    writer's CRC-32C (a build's check of what it staged) alike."""
    version_dir = flip_datasets[compression]
    crcs = written_crc32c(version_dir) if judged_by == "crc32c" else None
    file = data.draw(st.sampled_from(sorted(shards_of(version_dir))))
    path = version_dir / file
    original = path.read_bytes()
    position = data.draw(st.integers(0, len(original) - 1))
    mask = data.draw(st.integers(1, 255))
    flipped = bytearray(original)
    flipped[position] ^= mask
    path.write_bytes(bytes(flipped))
    try:
        report = verify.verify_dataset(str(version_dir), workers=1, written_crc32c=crcs)
    finally:
        path.write_bytes(original)
    assert not report.ok
    assert damaged(report) == {file}
    assert not any(p.code == {"sha256": "crc32c", "crc32c": "sha256"}[judged_by]
                   for p in report.problems)
    located = [p for p in report.problems if p.offset is not None or p.record_index is not None]
    if compression == "none":
        # Every byte of a plain TFRecord file is under a CRC.
        assert located, report.problems
        assert located[0].offset <= position
    elif not located:
        # The records decompress intact: the flip hit gzip container bytes.
        assert any("container bytes" in p.message for p in report.problems)


def test_truncated_shard_names_offset_and_record(dataset, capsys):
    path = dataset / "v1" / "train-00001-of-00002.tfrecord.gz"
    path.write_bytes(path.read_bytes()[:-11])
    report = verify.verify_dataset(str(dataset))
    problems = report.damaged()["train-00001-of-00002.tfrecord.gz"]
    assert problems[0].code == "framing" and problems[0].offset is not None
    assert problems[0].record_index is not None
    assert any(p.code == "size" and "truncated" in p.message for p in problems)
    assert verify.main([str(dataset)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and lines[0].startswith("train-00001-of-00002.tfrecord.gz: record ")


def test_truncated_plain_shard_offset_is_the_cut_record(tmp_path):
    publish_dataset(str(tmp_path), compression="none")
    path = tmp_path / "v1" / "test-00000-of-00001.tfrecord"
    data = path.read_bytes()
    path.write_bytes(data[:-3])
    [framing] = [p for p in verify.verify_dataset(str(tmp_path)).problems if p.code == "framing"]
    assert framing.record_index == 4
    assert framing.offset == sum(len(tfrecord.frame_records([encode_example(_example(r))]))
                                 for r in range(13, 17))


def test_deleted_shard(dataset, capsys):
    (dataset / "v1" / "test-00000-of-00001.tfrecord.gz").unlink()
    report = verify.verify_dataset(str(dataset))
    assert [(p.file, p.code) for p in report.problems] == [
        ("test-00000-of-00001.tfrecord.gz", "missing")]
    assert verify.main([str(dataset)]) == 1
    assert "test-00000-of-00001.tfrecord.gz: missing" in capsys.readouterr().out


def test_swapped_shards_of_a_split(dataset, capsys):
    a = dataset / "v1" / "train-00000-of-00002.tfrecord.gz"
    b = dataset / "v1" / "train-00001-of-00002.tfrecord.gz"
    crcs = written_crc32c(dataset / "v1")
    data_a, data_b = a.read_bytes(), b.read_bytes()
    a.write_bytes(data_b)
    b.write_bytes(data_a)
    # Found by the writer's CRC-32Cs as by the manifest's sha256.
    by_crc = verify.verify_dataset(str(dataset), written_crc32c=crcs)
    assert {p.file for p in by_crc.problems if p.code == "swapped"} == {a.name, b.name}
    report = verify.verify_dataset(str(dataset))
    swapped = {p.file: p for p in report.problems if p.code == "swapped"}
    assert set(swapped) == {a.name, b.name}
    assert b.name in swapped[a.name].message and swapped[a.name].offset == 0
    assert verify.main([str(dataset)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and out[0].startswith(f"{a.name}: byte 0: holds the bytes of {b.name}")


def test_same_size_record_swap_inside_a_shard_is_caught(tmp_path):
    # Two records of equal length swapped: size and CRCs hold, counts hold;
    # only the checksum can tell.
    publish_dataset(str(tmp_path), compression="none",
                    examples=lambda row: {"id": 1000 + row, "label": 0, "scores": ("float", []),
                                          "text": "x"})
    path = tmp_path / "v1" / "test-00000-of-00001.tfrecord"
    records = list(tfrecord.iter_records(path.open("rb")))
    records[0], records[1] = records[1], records[0]
    crcs = written_crc32c(tmp_path / "v1")
    path.write_bytes(tfrecord.frame_records(records))
    report = verify.verify_dataset(str(tmp_path))
    assert [p.code for p in report.problems] == ["sha256"]
    by_crc = verify.verify_dataset(str(tmp_path), written_crc32c=crcs)
    assert [p.code for p in by_crc.problems] == ["crc32c"]
    assert "of the bytes its writer wrote" in by_crc.problems[0].message


def test_deep_finds_schema_violations_by_record(tmp_path):
    def examples(row):
        example = _example(row)
        if row == 3:
            example["label"] = 7          # outside the 3-entry vocabulary
        if row == 9:
            example["text"] = 5           # int64 where bytes are declared
        if row == 15:
            del example["id"]             # a required scalar is missing
        if row == 16:
            example["extra"] = 1
        return example

    publish_dataset(str(tmp_path), examples=examples)
    assert verify.verify_dataset(str(tmp_path)).ok  # bytes are intact
    report = verify.verify_dataset(str(tmp_path), deep=True)
    found = {p.file: p for p in report.problems}
    assert found["train-00000-of-00002.tfrecord.gz"].record_index == 3
    assert "outside its vocabulary" in found["train-00000-of-00002.tfrecord.gz"].message
    assert found["train-00001-of-00002.tfrecord.gz"].record_index == 2
    assert "holds int64 values, manifest says bytes" in found["train-00001-of-00002.tfrecord.gz"].message
    test = found["test-00000-of-00001.tfrecord.gz"]
    assert test.record_index == 2 and "'id' is missing" in test.message
    assert "2 records" in test.message
    assert verify.main([str(tmp_path), "--deep"]) == 1


def test_example_problem_shapes():
    features = {"fixed": {"type": "float", "shape": [2]}, "any": {"type": "int64", "shape": [-1]},
                "opt": {"type": "bytes", "shape": [], "required": False}}
    ok = {"fixed": ("float", [1.0, 2.0]), "any": ("int64", [])}
    assert example_checks.example_problem(ok, features, {}) is None
    # A list of any length is still written into every record; only a
    # feature the manifest declares optional may be absent.
    assert "'any' is missing" in example_checks.example_problem(
        {"fixed": ("float", [1.0, 2.0])}, features, {})
    assert example_checks.example_problem({**ok, "opt": ("bytes", [b"x"])}, features, {}) is None
    assert example_checks.example_problem({"fixed": ("float", [1.0])}, features, {}) == \
        "feature 'fixed' has 1 values, shape [2] needs 2"
    assert example_checks.example_problem({**ok, "any": ("bytes", [])}, features, {}) is None
    assert example_checks.example_problem({**ok, "any": ("int64", [5])}, features, {"any": 5}) == \
        "feature 'any': id 5 is outside its vocabulary (0..4)"


def test_sums_manifest_and_stray_files(dataset):
    version_dir = dataset / "v1"
    (version_dir / "notes.txt").write_text("hi")
    (version_dir / "dead_letter" / "part-00000.jsonl").write_text("changed\n")
    sums = (version_dir / "SHA256SUMS").read_text().splitlines()
    (version_dir / "SHA256SUMS").write_text("\n".join(
        line for line in sums if "test-00000" not in line) + "\n")
    report = verify.verify_dataset(str(dataset))
    codes = {(p.file, p.code) for p in report.problems}
    assert codes == {("notes.txt", "unexpected"), ("dead_letter/part-00000.jsonl", "sha256"),
                     ("SHA256SUMS", "sums")}
    (version_dir / "SHA256SUMS").unlink()
    assert ("SHA256SUMS", "sums") in {(p.file, p.code) for p in verify.verify_dataset(
        str(dataset)).problems}


def test_incomplete_version_latest_and_usage(dataset, tmp_path, capsys):
    (dataset / "v1" / "manifest.json").unlink()
    assert verify.main([str(dataset / "v1")]) == 1
    assert "manifest.json: missing" in capsys.readouterr().out
    (dataset / "LATEST").write_text("v9\n")
    assert verify.main([str(dataset)]) == 1
    assert "LATEST: names version 'v9', which does not exist" in capsys.readouterr().out
    assert verify.main([str(tmp_path / "nowhere")]) == 2
    assert verify.main([]) == 2
    assert verify.main([str(dataset), "--workers", "0"]) == 2
    assert verify.main([str(dataset), "--bogus"]) == 2


def test_manifest_tampering_is_reported(dataset):
    path = dataset / "v1" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["splits"]["train"]["shards"][0]["num_examples"] += 1
    manifest["splits"]["train"]["num_examples"] += 1
    manifest["num_input_rows"] += 1
    path.write_text(json.dumps(manifest))
    report = verify.verify_dataset(str(dataset))
    codes = {(p.file, p.code) for p in report.problems}
    assert ("train-00000-of-00002.tfrecord.gz", "count") in codes
    assert ("split 'train'", "split") in codes
    manifest["num_input_rows"] += 1
    path.write_text(json.dumps(manifest))
    [problem] = verify.verify_dataset(str(dataset)).problems
    assert problem.file == "manifest.json" and "num_input_rows" in problem.message


def test_copy_of_intact_dataset_elsewhere_verifies(dataset, tmp_path_factory):
    # Nothing in a version depends on where it lives.
    target = tmp_path_factory.mktemp("copy") / "v1"
    shutil.copytree(dataset / "v1", target)
    assert verify.verify_dataset(str(target), deep=True).ok


def test_a_large_local_build_is_verified_by_processes(tmp_path, monkeypatch):
    from recordforge.pipelines.publish import finalizing
    from recordforge.pipelines.publish.output import Output

    def manifest(num_bytes: int, shards: int) -> dict:
        return {"splits": {"train": {"num_bytes": num_bytes, "shards": [{}] * shards}}}

    local, remote = Output(str(tmp_path)), Output("memory://rf-verify-executor")
    big = finalizing.VERIFY_PROCESSES_FROM
    monkeypatch.setattr(finalizing.os, "cpu_count", lambda: 2)
    assert finalizing._verify_executor(local, manifest(big, 4)) == "process"
    assert finalizing._verify_executor(local, manifest(big - 1, 4)) == "thread"
    assert finalizing._verify_executor(local, manifest(big, 1)) == "thread"
    assert finalizing._verify_executor(remote, manifest(big, 4)) == "thread"
    monkeypatch.setattr(finalizing.os, "cpu_count", lambda: 1)
    assert finalizing._verify_executor(local, manifest(big, 4)) == "thread"


def test_a_build_verified_by_processes_publishes(tmp_path, monkeypatch):
    """A large local build reads its shards back by processes while the
    pipeline runs (`early_checks`); verification then judges every shard
    from that reading, in threads."""
    import recordforge
    from recordforge.pipelines.publish import finalizing

    used = []
    verify_dataset = finalizing.verify_dataset

    def watched(*args, **kwargs):
        used.append((kwargs.get("executor"), sorted(kwargs.get("read_already") or {})))
        return verify_dataset(*args, **kwargs)

    monkeypatch.setattr(finalizing, "VERIFY_PROCESSES_FROM", 0)
    monkeypatch.setattr(finalizing.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(finalizing, "verify_dataset", watched)
    config = REPO / "configs" / "examples" / "flights.yaml"
    monkeypatch.chdir(REPO)
    result = recordforge.build(str(config), output=str(tmp_path / "out"),
                               beam_args=["--direct_running_mode=in_memory"])
    shards = sorted(shards_of(tmp_path / "out" / result.version))
    assert used == [("thread", shards)] and result.num_examples > 0
    assert verify.verify_dataset(str(tmp_path / "out")).ok


class _ReadOnly:
    """A file object with `read` alone (no `readinto`), giving short reads."""

    def __init__(self, data: bytes, most: int):
        self._data, self._at, self._most = data, 0, most

    def read(self, size: int = -1) -> bytes:
        size = self._most if size < 0 else min(size, self._most)
        piece = self._data[self._at:self._at + size]
        self._at += len(piece)
        return piece


@settings(max_examples=40, deadline=None)
@given(records=st.lists(st.binary(max_size=500), max_size=10), most=st.integers(1, 700),
       flip=st.integers(0, 2**16))
def test_the_hashing_reader_hashes_every_byte_read_either_way(records, most, flip):
    """A shard's read-back reads through `readinto` when the file has it
    and through `read` when it has not (or an `io.RawIOBase` leaves it
    unimplemented): each hashes and counts every byte the walk reads, and
    finds the same records or the same damage."""
    data = bytearray(tfrecord.frame_records(records))
    if data and flip % 2:
        data[flip % len(data)] ^= 0x10
    outcomes = []
    raw_only = type("_RawReadOnly", (_ReadOnly, io.RawIOBase), {})  # readinto unimplemented
    for raw in (_ReadOnly(bytes(data), most), raw_only(bytes(data), most),
                io.BytesIO(bytes(data))):
        reader = file_checks._HashingReader(raw)
        try:
            found = tfrecord.count_records(reader, path="s.tfrecord", compression="none")
        except tfrecord.TFRecordError as error:
            found = str(error)
        reader.drain()
        outcomes.append((found, reader.size, reader.digest.hexdigest()))
    assert outcomes[0] == outcomes[1] == outcomes[2]
    assert outcomes[0][1:] == (len(data), hashlib.sha256(data).hexdigest())


def test_memory_files_open_with_a_read_position_each():
    # memory:// stores one object per file; the checks of a shard and of its
    # index read the index at once, each from its own position.
    fs = fsspec.filesystem("memory")
    fs.pipe_file("/rf-opened-twice/index", b"0 47\n47 48\n")
    try:
        first = file_checks._open_url("memory://rf-opened-twice/index")
        second = file_checks._open_url("memory://rf-opened-twice/index")
        assert first.read() == b"0 47\n47 48\n"
        assert second.read() == b"0 47\n47 48\n"
    finally:
        fs.rm("/rf-opened-twice", recursive=True)
