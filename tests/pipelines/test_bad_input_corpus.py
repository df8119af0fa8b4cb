"""A corpus of bad inputs, each built end to end by `recordforge build`.

Every bad row or file must land in the published dead-letter output with the
expected reason and its provenance (file and row), the good rows around it must
come out unchanged (read back with independently generated protobuf code), and
for every file: input rows == good examples + dead letters.
"""

import gzip
import json
import pathlib
import struct
import zlib

import pyarrow as pa
import pyarrow.parquet as pq
import yaml
from PIL import Image
from tfrecord import example_pb2

from recordforge.pipelines import build
from recordforge.schemas.dead_letters import counted_rows
from recordforge.transforms import tfrecord


def _run_build(tmp_path, source, features, **extra):
    config = {"name": "corpus", "version": "1", "source": source, "features": features,
              "output": {"path": str(tmp_path / "out"), "compression": "gzip",
                         "shard_size": "1MB"},
              "dead_letter": {"max_error_rate": 1.0}, **extra}
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(config))
    assert build.run([str(config_path), "--", "--direct_running_mode=in_memory"]) == 0
    version_dir = tmp_path / "out" / "1"
    manifest = json.loads((version_dir / "manifest.json").read_text())
    examples = []
    for split in manifest["splits"].values():
        for shard in split["shards"]:
            for record in tfrecord.read_records(str(version_dir / shard["file"])):
                message = example_pb2.Example()
                message.ParseFromString(record)
                examples.append(message.features.feature)
    dead = [json.loads(line) for name in manifest["dead_letter"]["files"]
            for line in (version_dir / name).read_text().splitlines()]
    # A dead letter for a file stands for its rows (none for an empty
    # file; one when unknown, `counted_rows`).
    assert manifest["num_input_rows"] == len(examples) + sum(map(counted_rows, dead))
    assert manifest["dead_letter"]["num_rows"] == sum(map(counted_rows, dead))
    return manifest, examples, dead


def _where(record):
    """A dead letter's provenance: (file name, row) or (file name, path)."""
    name = pathlib.PurePosixPath(record["source"]).name
    if record["row"] is not None or not isinstance(record["input"], dict):
        return (name, record["row"])
    return (name, record["input"].get("path"))


def _reasons(dead):
    return {_where(d): d["reason"] for d in dead}


def _ints(features, name):
    return list(features[name].int64_list.value)


# --- tables -----------------------------------------------------------------

TABLE_FEATURES = {
    "id": {"type": "int64", "min": 0},
    "name": {"type": "string", "max_bytes": 12},
    "score": {"type": "float", "min": 0, "max": 100},
    "weight": {"type": "float"},
    "color": {"type": "string", "values": ["red", "green", "blue"]},
    "label": {"type": "int64", "vocabulary": ["cat", "dog", "fish"]},
}

CSV_ROWS = [  # (line number, text, expected reason or None for a good row)
    (2, "1,ann,10.5,1,red,cat", None),
    (3, ",bob,1,1,red,cat", "missing_value"),
    (4, "abc,cid,1,1,red,cat", "type_mismatch"),
    (5, "4,dan,150,1,red,cat", "out_of_range"),
    (6, "5,eve,1,1,purple,cat", "not_allowed"),
    (7, "6,fay,1,1,red,zebra", "unknown_label"),
    (8, "7,abcdefghijklmnop,1,1,red,cat", "too_long"),
    (9, "8,gil,nan,1,red,cat", "nan_or_inf"),
    (10, "9,hal,1,1e39,red,cat", "float32_overflow"),
    (11, "9223372036854775808,ian,1,1,red,cat", "int64_overflow"),
    (12, "12,jon,99,2.5,blue,fish", None),
    (13, "13,kim,1,1,red,cat,EXTRA", "csv_ragged_row"),
    (14, "14,l\xffz,1,1,red,cat", "invalid_utf8"),
    (15, '15,"multi\nline",3,3,green,dog', None),
    (17, "-16,mo,1,1,red,cat", "out_of_range"),
    (18, "18,ned,inf,1,red,cat", "nan_or_inf"),
]


def _csv_bytes():
    lines = ["id,name,score,weight,color,label"] + [text for _, text, _ in CSV_ROWS]
    text = "\r\n".join(lines) + "\r\n"
    # Line 14 holds a byte that is not UTF-8 (written as latin-1).
    return b"\xef\xbb\xbf" + text.encode("latin-1").replace(b"\xc3\xbf", b"\xff")


def test_csv_corpus(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "rows.csv").write_bytes(_csv_bytes())
    (data / "empty.csv").write_bytes(b"")
    (data / "duplicate_header.csv").write_text("id,id,name\n1,2,x\n")
    (data / "gzipped.csv.gz").write_bytes(gzip.compress(
        b"id,name,score,weight,color,label\n20,ora,5,5,red,dog\n21,pat,x,5,red,dog\n"))
    (data / "unterminated.csv").write_text(
        'id,name,score,weight,color,label\n30,quin,1,1,red,cat\n31,"never closed,1,1,red,cat\n')
    manifest, examples, dead = _run_build(tmp_path, {"type": "csv", "path": str(data)},
                                          TABLE_FEATURES)
    expected = {("rows.csv", line): reason for line, _, reason in CSV_ROWS if reason}
    expected.update({("empty.csv", None): "empty_file",
                     ("duplicate_header.csv", 1): "csv_bad_header",
                     ("gzipped.csv.gz", 3): "type_mismatch",
                     ("unterminated.csv", 3): "csv_malformed"})
    got = {(pathlib.PurePosixPath(d["source"]).name, d["row"]): d["reason"] for d in dead}
    assert got == expected
    for record in dead:
        assert record["input"] is not None and record["message"]
    by_id = {_ints(f, "id")[0]: f for f in examples}
    assert sorted(by_id) == [1, 12, 15, 20, 30]
    assert by_id[15]["name"].bytes_list.value == [b"multi\nline"]
    assert by_id[12]["label"].int64_list.value == [2]
    assert by_id[12]["weight"].float_list.value == [2.5]
    # Per file: every input row is a good example or a dead letter.
    good_per_file = {"rows.csv": 3, "gzipped.csv.gz": 1, "unterminated.csv": 1}
    for name, good in good_per_file.items():
        rows_in_file = sum(1 for d in dead if _where(d)[0] == name) + good
        assert rows_in_file == {"rows.csv": len(CSV_ROWS), "gzipped.csv.gz": 2,
                                "unterminated.csv": 2}[name]


JSONL_FEATURES = {
    "id": {"type": "int64"},
    "tags": {"type": "string", "shape": [-1]},
    "pair": {"type": "int64", "shape": [2]},
}


def test_jsonl_corpus(tmp_path):
    nested = "[" * 200 + "]" * 200
    lines = [
        ('{"id": 1, "tags": ["a", "b"], "pair": [1, 2]}', None),
        ('{not json', "json_invalid"),
        ('[1, 2]', "json_invalid"),
        ('{"id": 4, "tags": [], "pair": [1, 2, 3]}', "wrong_length"),
        ('{"tags": [], "pair": [1, 2]}', "missing_value"),
        (f'{{"id": 6, "tags": {nested}, "pair": [1, 2]}}', "json_invalid"),
        ('{"id": 7, "tags": ["a", null], "pair": [1, 2]}', "type_mismatch"),
        ('{"id": 8, "tags": ["ünï"], "pair": [-1, 9223372036854775807]}', None),
        ('{"id": 1.5, "tags": [], "pair": [1, 2]}', "type_mismatch"),
        ('{"id": 10, "tags": "solo", "pair": "12"}', "wrong_length"),
    ]
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(text for text, _ in lines) + "\n", encoding="utf-8")
    manifest, examples, dead = _run_build(tmp_path, {"type": "jsonl", "path": str(path)},
                                          JSONL_FEATURES)
    expected = {("rows.jsonl", n): reason for n, (_, reason) in enumerate(lines, 1) if reason}
    assert _reasons(dead) == expected
    by_id = {_ints(f, "id")[0]: f for f in examples}
    assert sorted(by_id) == [1, 8]
    assert by_id[8]["tags"].bytes_list.value == ["ünï".encode()]
    assert _ints(by_id[8], "pair") == [-1, 2**63 - 1]


def test_parquet_corpus(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    table = pa.table({"id": pa.array([1, None, 3, 4, 5], pa.int64()),
                      "score": pa.array([0.5, 1.0, float("nan"), -1.0, 2.0], pa.float64())})
    pq.write_table(table, data / "rows.parquet", row_group_size=2)
    (data / "broken.parquet").write_bytes(b"PAR1 this is not a parquet file PAR1")
    manifest, examples, dead = _run_build(
        tmp_path, {"type": "parquet", "path": str(data)},
        {"id": {"type": "int64"}, "score": {"type": "float", "min": 0}})
    got = _reasons(dead)
    assert got == {("rows.parquet", 2): "missing_value", ("rows.parquet", 3): "nan_or_inf",
                   ("rows.parquet", 4): "out_of_range", ("broken.parquet", None): "parquet_invalid"}
    assert sorted(_ints(f, "id")[0] for f in examples) == [1, 5]


# --- images -------------------------------------------------------------------

def _jpeg(path, size=(32, 24), mode="RGB", color=(200, 30, 30)):
    Image.new(mode, size, color if mode != "CMYK" else (0, 200, 30, 0)).save(path, "JPEG")


def _png(path, size=(20, 20), mode="RGB"):
    Image.new(mode, size).save(path, "PNG")


def _png_with_ihdr(path, width, height):
    """A tiny PNG whose header declares width x height (a decompression bomb)."""
    import io
    buffer = io.BytesIO()
    Image.new("L", (1, 1)).save(buffer, "PNG")
    data = bytearray(buffer.getvalue())
    ihdr = data.index(b"IHDR")
    struct.pack_into(">II", data, ihdr + 4, width, height)
    chunk = bytes(data[ihdr:ihdr + 17])
    struct.pack_into(">I", data, ihdr + 17, zlib.crc32(chunk))
    path.write_bytes(bytes(data))


IMAGE_SOURCE = {"extensions": [".jpg", ".png", ".gif"],
                "image": {"formats": ["JPEG", "PNG"], "modes": ["RGB", "L"],
                          "min_size": [8, 8], "max_size": [1000, 1000], "decode": "full"}}
IMAGE_FEATURES = {"image/encoded": {"type": "bytes", "from": "image"},
                  "image/filename": {"type": "string", "from": "path"},
                  "image/height": {"type": "int64", "from": "height"},
                  "label": {"type": "int64", "from": "label", "vocabulary": "auto"}}


def test_image_folder_corpus(tmp_path):
    # key: path, so even images that fail before checking carry their key.
    root = tmp_path / "images"
    cat, dog = root / "cat", root / "dog"
    cat.mkdir(parents=True)
    dog.mkdir()
    _jpeg(cat / "good 1.jpg")
    _jpeg(cat / "ünïcode.jpg", size=(40, 30))
    _png(dog / "good.png")
    _jpeg(dog / "gray.jpg", mode="L", color=128)
    good = cat / "good 1.jpg"
    (cat / "truncated.jpg").write_bytes(good.read_bytes()[:-200])
    broken = bytearray((dog / "good.png").read_bytes())
    broken[broken.index(b"IDAT") + 6] ^= 0xFF  # inside the compressed data: CRC no longer matches
    (dog / "broken_chunk.png").write_bytes(bytes(broken))
    (cat / "zero.jpg").write_bytes(b"")
    (cat / "text.jpg").write_text("this is not an image\n")
    _jpeg(dog / "cmyk.jpg", mode="CMYK")
    _png_with_ihdr(dog / "bomb.png", 100_000, 100_000)
    _png(cat / "tiny.png", size=(4, 4))
    Image.new("RGB", (16, 16)).save(dog / "animated.gif", "GIF", save_all=True,
                                    append_images=[Image.new("RGB", (16, 16), (9, 9, 9))])
    _jpeg(root / "no_class_folder.jpg")
    manifest, examples, dead = _run_build(
        tmp_path, {"type": "images", "path": str(root), "labels": "directory", **IMAGE_SOURCE},
        IMAGE_FEATURES, key="path")
    got = {d["input"]["path"]: d["reason"] for d in dead}
    assert got == {
        "cat/truncated.jpg": "image_truncated",
        "dog/broken_chunk.png": "image_corrupt",
        "cat/zero.jpg": "empty_file",
        "cat/text.jpg": "image_corrupt",
        "dog/cmyk.jpg": "image_format_not_allowed",
        "dog/bomb.png": "image_too_large",
        "cat/tiny.png": "image_too_small",
        "dog/animated.gif": "image_format_not_allowed",
        "no_class_folder.jpg": "unlabeled_image",
    }
    for record in dead:
        assert "image" not in record["input"], "dead letters never embed image bytes"
        assert record["key"] == record["input"]["path"], "key: path names the failed image"
    by_name = {f["image/filename"].bytes_list.value[0].decode(): f for f in examples}
    assert sorted(by_name) == ["cat/good 1.jpg", "cat/ünïcode.jpg", "dog/good.png",
                               "dog/gray.jpg"]
    assert by_name["cat/good 1.jpg"]["image/encoded"].bytes_list.value[0] == good.read_bytes()
    assert manifest["vocabularies"]["label"] == ["cat", "dog"]
    assert _ints(by_name["dog/good.png"], "label") == [1]


def test_labels_table_corpus(tmp_path):
    root = tmp_path / "images"
    root.mkdir()
    _jpeg(root / "a.jpg")
    _jpeg(root / "b.jpg")
    _jpeg(root / "c.jpg")
    _jpeg(tmp_path / "outside.jpg")
    (root / "link_out.jpg").symlink_to(tmp_path / "outside.jpg")
    labels = tmp_path / "labels.csv"
    labels.write_text("file,label\n"
                      "a.jpg,cat\n"
                      f"{tmp_path / 'outside.jpg'},cat\n"
                      "../outside.jpg,dog\n"
                      "missing.jpg,cat\n"
                      "link_out.jpg,dog\n"
                      "c.jpg,dog\n")
    manifest, examples, dead = _run_build(
        tmp_path, {"type": "images", "path": str(root), "labels": str(labels), **IMAGE_SOURCE},
        IMAGE_FEATURES)
    reasons = sorted(d["reason"] for d in dead)
    assert reasons == ["path_outside_root", "path_outside_root", "path_outside_root",
                       "read_error", "unlabeled_image"]
    outside = {_where(d) for d in dead if d["reason"] == "path_outside_root"}
    # Two table rows name paths outside the root; the symlink leading out is
    # caught when the folder is listed, before the table is consulted.
    assert outside == {("labels.csv", 3), ("labels.csv", 4), ("link_out.jpg", "link_out.jpg")}
    names = sorted(f["image/filename"].bytes_list.value[0].decode() for f in examples)
    assert names == ["a.jpg", "c.jpg"]
