"""`recordforge inspect` on shards, directories and dead-letter files."""

import base64
import io
import json

import pytest

from recordforge.pipelines.publish import inspect
from recordforge.schemas.example import encode_example
from recordforge.transforms import tfrecord

IMAGE = b"\xff\xd8\xff\xe0" + bytes(range(256))


def _examples(n):
    return [encode_example({"id": i, "name": f"row {i}", "score": i / 2, "image": IMAGE,
                            "nan": float("nan")}) for i in range(n)]


def _write(path, records, compression):
    with open(path, "wb") as f, tfrecord.TFRecordWriter(f, compression) as writer:
        writer.write_many(records)


def _run(argv):
    out = io.StringIO()
    code = inspect.main(argv, out=out)
    return code, [json.loads(line) for line in out.getvalue().splitlines()]


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_prints_every_record_as_a_json_line(tmp_path, compression):
    path = tmp_path / ("s" + tfrecord.suffix_for(compression))
    _write(path, _examples(3), compression)
    code, lines = _run([str(path)])
    assert code == 0 and len(lines) == 3
    first = lines[0]
    assert first["record"] == 0 and first["file"] == path.name
    features = first["features"]
    assert features["id"] == [0] and features["name"] == ["row 0"] and features["score"] == [0.0]
    assert features["image"] == [{"bytes": len(IMAGE),
                                  "head": base64.b64encode(IMAGE[:32]).decode()}]
    assert features["nan"] == ["nan"]


def _publish(root, counts=(4, 4)):
    """A published version of shards of _examples, through begin_build/finalize."""
    import hashlib

    import fsspec

    from recordforge.pipelines import publish
    from recordforge.transforms.layout import shard_file_name

    staging = publish.begin_build(str(root), "v1")
    shards = []
    for index, count in enumerate(counts):
        data = tfrecord.frame_records(_examples(count))
        file = shard_file_name("train", index, len(counts), "none")
        with fsspec.open(f"{staging.url}/{file}", "wb") as handle:
            handle.write(data)
        shards.append({"split": "train", "file": file, "num_examples": count,
                       "num_bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    with fsspec.open(staging.result_url, "wb") as handle:
        handle.write(json.dumps({"shards": shards, "num_input_rows": sum(counts),
                                 "dead_letter": {"num_rows": 0, "by_reason": {}, "files": [],
                                                 "samples": {}}}).encode())
    publish.finalize(staging, name="t", compression="none",
                     features={"id": {"type": "int64", "shape": []}}, vocabularies={},
                     config={}, split_names=["train"], max_error_rate=0.0, verify=False)
    return root / "v1"


def test_directory_and_limit(tmp_path):
    _publish(tmp_path)
    for path in (tmp_path, tmp_path / "v1"):  # the output root (LATEST) or the version
        code, lines = _run([str(path), "--limit", "6"])
        assert code == 0 and len(lines) == 6
        assert [line["file"] for line in lines] == ["train-00000-of-00002.tfrecord"] * 4 + [
            "train-00001-of-00002.tfrecord"] * 2


def test_a_directory_without_a_manifest_is_not_published(tmp_path, capsys):
    """What a killed object-store overwrite leaves: shards, no manifest."""
    version = _publish(tmp_path)
    (version / "manifest.json").unlink()
    (version / "train-00001-of-00002.tfrecord").unlink()
    for path in (tmp_path, version):
        code, lines = _run([str(path)])
        assert code == 1 and lines == []
        assert "manifest.json: missing: the version is not published" in capsys.readouterr().err


def test_damaged_file_prints_records_before_the_damage_then_fails(tmp_path, capsys):
    records = _examples(5)
    data = bytearray(tfrecord.frame_records(records))
    offset = sum(16 + len(r) for r in records[:3])
    data[offset + 20] ^= 0x40
    path = tmp_path / "bad.tfrecord"
    path.write_bytes(bytes(data))
    code, lines = _run([str(path)])
    assert code == 1 and [line["record"] for line in lines] == [0, 1, 2]
    err = capsys.readouterr().err
    assert "bad.tfrecord" in err and f"byte offset {offset}" in err and "record 3" in err


def test_dead_letter_file(tmp_path):
    path = tmp_path / "part-00000.jsonl"
    rows = [{"source": "a.csv", "row": 3, "reason": "out_of_range"},
            {"source": "a.csv", "row": 9, "reason": "missing_value"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, lines = _run([str(path)])
    assert code == 0 and lines == rows


def test_missing_path_is_a_usage_error(tmp_path, capsys):
    assert inspect.main([str(tmp_path / "nope.tfrecord")]) == 2
    assert "no such file" in capsys.readouterr().err
