"""Builds with ``output.format: array_record``: the flowers sample's records,
read by the `array_record` package's own reader, are record for record and
byte for byte the Examples of the same build with TFRecord output as Beam's
ReadFromTFRecord reads them; the manifest records the format and SHA256SUMS
lists the shards; verify (and --deep) passes, and catches a damaged or
truncated shard; inspect and the TFDS description follow the format."""

from __future__ import annotations

import hashlib
import io
import json
import pathlib
import shutil

import apache_beam as beam
import crc32c
import pytest
from apache_beam.io.tfrecordio import ReadFromTFRecord
from apache_beam.testing.util import assert_that, equal_to
from tfrecord import example_pb2
from tfrecord.reader import tfrecord_iterator

import recordforge
from recordforge.pipelines.publish import inspect, verify
from recordforge.pipelines.publish.checksums import parse_sha256sums
from recordforge.pipelines.publish.manifest import ManifestError, load_manifest

array_record_module = pytest.importorskip("array_record.python.array_record_module")

REPO = pathlib.Path(__file__).resolve().parents[2]
FLOWERS = REPO / "configs" / "examples" / "flowers.yaml"
IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
# Plain TFRecord shards for the reference, so that Beam's reader reads them as written.
SAME = {"output.compression": "none", "output.shard_size": "1MB"}


@pytest.fixture(scope="module")
def builds(tmp_path_factory, monkeypatch_module):
    monkeypatch_module.chdir(REPO)  # the sample config's paths are relative to the repository
    root = tmp_path_factory.mktemp("flowers")
    array = recordforge.build(str(FLOWERS), output=str(root / "ar"), beam_args=IN_MEMORY,
                              overrides={**SAME, "output.format": "array_record"})
    plain = recordforge.build(str(FLOWERS), output=str(root / "tf"), beam_args=IN_MEMORY,
                              overrides=SAME)
    return pathlib.Path(array.path), pathlib.Path(plain.path)


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def _manifest(version_dir):
    return json.loads((version_dir / "manifest.json").read_text())


def _array_records(path):
    reader = array_record_module.ArrayRecordReader(str(path))
    try:
        return reader.read(0, reader.num_records())
    finally:
        reader.close()


def test_records_equal_the_tfrecord_builds_in_the_same_order(builds):
    array_dir, plain_dir = builds
    ours, theirs = _manifest(array_dir), _manifest(plain_dir)
    assert ours["file_format"] == "array_record" and "file_format" not in theirs
    assert ours["compression"] == "NONE"
    for split in theirs["splits"]:
        shards = ours["splits"][split]["shards"]
        assert [shard["file"] for shard in shards] == [
            shard["file"].replace(".tfrecord", ".array_record")
            for shard in theirs["splits"][split]["shards"]]
        read = [record for shard in shards for record in _array_records(array_dir / shard["file"])]
        # Beam reads a file's records in order within one bundle; one file at a time.
        expected = []
        for shard in theirs["splits"][split]["shards"]:
            with beam.Pipeline() as pipeline:
                records = (pipeline
                           | ReadFromTFRecord(str(plain_dir / shard["file"]),
                                              coder=beam.coders.BytesCoder()))
                assert_that(records, equal_to(_array_records(
                    array_dir / shard["file"].replace(".tfrecord", ".array_record"))))
            expected += [bytes(record) for record in _tfrecord_records(plain_dir / shard["file"])]
        assert read == expected and len(read) == ours["splits"][split]["num_examples"]


def _tfrecord_records(path):
    return [bytes(view) for view in tfrecord_iterator(str(path))]


def test_shards_are_summed_described_and_verified(builds):
    array_dir, _ = builds
    manifest = _manifest(array_dir)
    sums = parse_sha256sums((array_dir / "SHA256SUMS").read_bytes())
    for split in manifest["splits"].values():
        for shard in split["shards"]:
            data = (array_dir / shard["file"]).read_bytes()
            assert shard["num_bytes"] == len(data) and "index" not in shard
            assert sums[shard["file"]] == shard["sha256"] == hashlib.sha256(data).hexdigest()
            assert len(_array_records(array_dir / shard["file"])) == shard["num_examples"]
    assert not list(array_dir.glob("*.index"))
    info = json.loads((array_dir / "dataset_info.json").read_text())
    assert info["fileFormat"] == "array_record"
    assert not (array_dir / "croissant.json").exists()
    assert verify.verify_dataset(str(array_dir)).ok
    assert verify.verify_dataset(str(array_dir), deep=True).ok


def _damaged_copy(array_dir, tmp_path, damage):
    copy = tmp_path / "copy" / array_dir.name
    shutil.copytree(array_dir.parent, copy.parent)
    shard = next(iter(_manifest(copy)["splits"].values()))["shards"][0]["file"]
    path = copy / shard
    data = bytearray(path.read_bytes())
    path.write_bytes(damage(data))
    return copy, shard


def _flip(data):
    data[len(data) // 3] ^= 0xFF
    return bytes(data)


def _truncate(data):
    return bytes(data[:len(data) // 2])


@pytest.mark.parametrize("damage,codes", [(_flip, {"sha256"}), (_truncate, {"size", "sha256"})])
def test_verify_catches_a_damaged_or_truncated_shard(builds, tmp_path, damage, codes):
    copy, shard = _damaged_copy(builds[0], tmp_path, damage)
    for deep in (False, True):
        result = verify.verify_dataset(str(copy), deep=deep)
        assert not result.ok
        found = {problem.code for problem in result.problems if problem.file == shard}
        assert codes <= found, result.problems
    if damage is _truncate:  # the package opens a truncated file with no records
        deep = verify.verify_dataset(str(copy), deep=True)
        assert "count" in {problem.code for problem in deep.problems if problem.file == shard}


def test_a_manifest_naming_another_format_is_refused(builds):
    manifest = _manifest(builds[0])
    for value, field in (("riegeli", "file_format"), ("tfrecord", "splits")):
        broken = dict(manifest, file_format=value)
        with pytest.raises(ManifestError) as error:
            load_manifest(json.dumps(broken))
        assert error.value.field.startswith(field)
    with pytest.raises(ManifestError, match="NONE"):
        load_manifest(json.dumps(dict(manifest, compression="GZIP")))


def test_inspect_reads_array_record_shards(builds):
    out = io.StringIO()
    assert inspect.main([str(builds[0]), "--limit", "3"], out=out) == 0
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    first = next(iter(_manifest(builds[0])["splits"].values()))["shards"][0]["file"]
    assert [(line["file"], line["record"]) for line in lines] == [(first, n) for n in range(3)]
    assert all({"label", "image/encoded"} <= set(line["features"]) for line in lines)


def test_read_dataset_reads_every_row_of_an_array_record_version(builds):
    """Beam's ReadDataset over the ArrayRecord version gives the rows the
    TFRecord version's records hold (parsed by the `tfrecord` package's
    own Example message)."""
    array_dir, plain_dir = builds
    expected = []
    for shard in _manifest(plain_dir)["splits"]["train"]["shards"]:
        for record in _tfrecord_records(plain_dir / shard["file"]):
            example = example_pb2.Example.FromString(record)
            expected.append(example.features.feature["image/filename"].bytes_list.value[0].decode())
    with beam.Pipeline() as pipeline:
        rows = pipeline | recordforge.ReadDataset(str(array_dir), split="train")
        assert_that(rows | beam.Map(lambda row: row["image/filename"]), equal_to(expected))


def test_early_read_back_reads_an_array_record_shard(builds):
    """What publishing reads while the pipeline runs (`read_back`) counts an
    ArrayRecord shard's records and takes its CRC-32C; judged later against the
    manifest it passes, and fails for another count."""
    from recordforge.pipelines.publish.file_checks import check_read_back, read_back
    array_dir, _ = builds
    shard = next(iter(_manifest(array_dir)["splits"].values()))["shards"][0]
    path = str(array_dir / shard["file"])
    read = read_back(path, shard["file"], compression="none")
    whole_crc = crc32c.crc32c(pathlib.Path(path).read_bytes())
    assert (read.check.records, read.check.crc32c) == (shard["num_examples"], whole_crc)
    expected = dict(read=read, compression="none", expected_size=shard["num_bytes"],
                    expected_crc32c=whole_crc)
    assert check_read_back(path, shard["file"], expected_records=shard["num_examples"],
                           **expected).problems == []
    [problem] = check_read_back(path, shard["file"], expected_records=shard["num_examples"] + 1,
                                **expected).problems
    assert problem.code == "count"


def test_write_dataset_publishes_array_record_shards(tmp_path):
    """A user's pipeline publishing with ``output.format: array_record``
    (`WriteDataset`): the manifest records the format, and the package's
    reader finds every row in the shards."""
    rows = [{"id": i, "score": i / 4} for i in range(60)]
    config = {"name": "scores", "version": "1.0.0", "key": "id", "splits": {"train": 1.0},
              "features": {"id": {"type": "int64"}, "score": {"type": "float"}},
              "output": {"path": str(tmp_path / "unused")}}
    out = tmp_path / "scores"
    with beam.Pipeline() as pipeline:
        _ = pipeline | beam.Create(rows) | recordforge.WriteDataset(
            config, **{"output.path": str(out), "output.format": "array_record"})
    manifest = _manifest(out / "1.0.0")
    assert manifest["file_format"] == "array_record"
    ids = sorted(example_pb2.Example.FromString(record).features.feature["id"].int64_list.value[0]
                 for shard in manifest["splits"]["train"]["shards"]
                 for record in _array_records(out / "1.0.0" / shard["file"]))
    assert ids == list(range(60))
    assert verify.verify_dataset(str(out / "1.0.0"), deep=True).ok
