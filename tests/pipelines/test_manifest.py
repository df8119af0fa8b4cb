"""Tests for recordforge.pipelines.manifest: shape, determinism, checks."""

import datetime as dt
import hashlib
import json
import subprocess

import pytest

from recordforge.pipelines.publish import checksums
from recordforge.pipelines.publish import manifest as m
from recordforge.transforms import layout
from recordforge.pipelines.version import __version__

SHA_A = "a" * 64
SHA_B = "b" * 64


def _shard(split, index, count, examples, size, sha, compression="gzip"):
    return {"split": split, "file": layout.shard_file_name(split, index, count, compression),
            "num_examples": examples, "num_bytes": size, "sha256": sha}


def _manifest(**overrides):
    kwargs = dict(
        name="flowers", version="1.0.0", created="2026-11-22T03:00:00Z", compression="gzip",
        features={"label": {"type": "int64", "shape": []},
                  "image/encoded": {"type": "bytes", "shape": []}},
        vocabularies={"label": ["daisy", "roses"]},
        split_names=["train", "test"],
        # Deliberately out of order: the manifest sorts shards by file.
        shards=[_shard("train", 1, 2, 4, 40, SHA_B), _shard("test", 0, 1, 2, 20, SHA_A),
                _shard("train", 0, 2, 5, 50, SHA_A)],
        num_input_rows=13,
        dead_letter={"num_rows": 2, "by_reason": {"out_of_range": 1, "image_truncated": 1},
                     "files": ["dead_letter/part-00001.jsonl", "dead_letter/part-00000.jsonl"],
                     "samples": {"out_of_range": {"reason": "out_of_range"}}},
        config={"name": "flowers", "output": {"path": "out"}},
        runner="DirectRunner")
    kwargs.update(overrides)
    return m.build_manifest(**kwargs)


def test_manifest_has_contract_keys_in_order_and_sorted_shards():
    manifest = _manifest()
    assert list(manifest) == ["format", "name", "version", "created", "compression", "features",
                              "vocabularies", "splits", "num_input_rows", "dead_letter",
                              "config", "tool"]
    assert manifest["format"] == "recordforge.manifest/1"
    assert manifest["compression"] == "GZIP"
    assert list(manifest["splits"]) == ["train", "test"]
    train = manifest["splits"]["train"]
    assert [s["file"] for s in train["shards"]] == ["train-00000-of-00002.tfrecord.gz",
                                                    "train-00001-of-00002.tfrecord.gz"]
    assert train["num_examples"] == 9 and train["num_bytes"] == 90
    assert list(train["shards"][0]) == ["file", "num_examples", "num_bytes", "sha256"]
    assert manifest["dead_letter"] == {
        "num_rows": 2, "by_reason": {"image_truncated": 1, "out_of_range": 1},
        "files": ["dead_letter/part-00000.jsonl", "dead_letter/part-00001.jsonl"]}
    assert manifest["tool"] == {"name": "recordforge", "version": __version__,
                                "runner": "DirectRunner"}


def test_dumps_is_deterministic_indented_json():
    first = m.dumps_manifest(_manifest())
    again = m.dumps_manifest(_manifest(shards=[
        _shard("train", 0, 2, 5, 50, SHA_A), _shard("test", 0, 1, 2, 20, SHA_A),
        _shard("train", 1, 2, 4, 40, SHA_B)]))
    assert first == again
    assert first.endswith(b"}\n")
    assert b'\n  "format": "recordforge.manifest/1",\n' in first
    assert json.loads(first)["num_input_rows"] == 13


def test_load_manifest_round_trips():
    manifest = _manifest()
    assert m.load_manifest(m.dumps_manifest(manifest)) == json.loads(m.dumps_manifest(manifest))


@pytest.mark.parametrize("shards, field", [
    ([_shard("train", 0, 2, 5, 50, SHA_A), _shard("test", 0, 1, 8, 20, SHA_A)], "splits.train.shards"),
    ([_shard("train", 0, 1, 5, 50, SHA_A), _shard("train", 0, 1, 4, 40, SHA_B),
      _shard("test", 0, 1, 4, 20, SHA_A)], "splits.train.shards"),
    ([_shard("train", 0, 1, 9, 50, SHA_A, "none"), _shard("test", 0, 1, 4, 20, SHA_A)],
     "splits.train.shards"),
    ([_shard("valid", 0, 1, 9, 50, SHA_A), _shard("test", 0, 1, 4, 20, SHA_A)], "splits"),
    ([dict(_shard("train", 0, 1, 9, 50, SHA_A), sha256="xyz"), _shard("test", 0, 1, 4, 20, SHA_A)],
     "splits.train.shards"),
])
def test_build_rejects_inconsistent_shards(shards, field):
    # a gap (00001 of 2 missing), a repeated index, a wrong suffix, an
    # unknown split, a malformed checksum
    with pytest.raises(m.ManifestError) as caught:
        _manifest(shards=shards)
    assert caught.value.field.startswith(field)


def test_load_rejects_broken_accounting_and_sums():
    manifest = json.loads(m.dumps_manifest(_manifest()))
    manifest["num_input_rows"] = 14
    with pytest.raises(m.ManifestError, match="num_input_rows: 14 input rows but 11 examples"):
        m.load_manifest(json.dumps(manifest))
    manifest = json.loads(m.dumps_manifest(_manifest()))
    manifest["splits"]["train"]["num_bytes"] += 1
    with pytest.raises(m.ManifestError, match="splits.train.num_bytes"):
        m.load_manifest(json.dumps(manifest))
    manifest = json.loads(m.dumps_manifest(_manifest()))
    manifest["splits"]["test"]["shards"][0]["num_examples"] = True
    with pytest.raises(m.ManifestError, match=r"splits.test.shards\[0\].num_examples"):
        m.load_manifest(json.dumps(manifest))
    with pytest.raises(m.ManifestError, match="format"):
        m.load_manifest(json.dumps({"format": "other/2"}))
    with pytest.raises(m.ManifestError, match="not valid JSON"):
        m.load_manifest(b"{")
    manifest = json.loads(m.dumps_manifest(_manifest()))
    manifest["dead_letter"]["files"] = ["../escape.jsonl"]
    with pytest.raises(m.ManifestError, match="dead_letter.files"):
        m.load_manifest(json.dumps(manifest))


def test_sha256sums_round_trip_and_coreutils_accepts_it(tmp_path):
    (tmp_path / "dead_letter").mkdir()
    files = {"b.tfrecord": b"bbb", "a.tfrecord": b"a", "dead_letter/part-00000.jsonl": b"{}\n"}
    entries = []
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
        entries.append((name, hashlib.sha256(data).hexdigest()))
    text = checksums.format_sha256sums(entries)
    assert text.decode().splitlines()[0].endswith("  a.tfrecord")
    (tmp_path / "SHA256SUMS").write_bytes(text)
    run = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=tmp_path, capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert checksums.parse_sha256sums(text) == dict(entries)
    # coreutils' own output parses too
    produced = subprocess.run(["sha256sum", "--", *files], cwd=tmp_path, capture_output=True,
                              check=True).stdout
    assert checksums.parse_sha256sums(produced) == dict(entries)
    with pytest.raises(m.ManifestError):
        checksums.parse_sha256sums(b"nothex  file\n")
    with pytest.raises(m.ManifestError):
        checksums.format_sha256sums([("bad\nname", SHA_A)])


def test_shard_names_and_compression_labels():
    assert layout.shard_file_name("train", 3, 12, "gzip") == "train-00003-of-00012.tfrecord.gz"
    assert layout.parse_shard_file_name("my-split-00003-of-00012.tfrecord") == ("my-split", 3, 12, "none")
    assert layout.parse_shard_file_name("train-3-of-12.tfrecord") is None
    assert m.compression_label("none") == "NONE"
    assert m.compression_from_label("GZIP") == "gzip"
    with pytest.raises(m.ManifestError):
        m.compression_label("zstd")


def test_utc_timestamp():
    moment = dt.datetime(2026, 11, 22, 4, 5, 6, tzinfo=dt.timezone(dt.timedelta(hours=1)))
    assert m.utc_timestamp(moment) == "2026-11-22T03:05:06Z"
    with pytest.raises(ValueError):
        m.utc_timestamp(dt.datetime(2026, 1, 1))
