"""Builds from CSV dialects, JSON arrays with nested fields and timestamps,
read back with the independent `tfrecord` package; their config errors."""

import datetime as dt
import json
from pathlib import Path

import pytest
import yaml
from tfrecord import example_pb2
from tfrecord.reader import tfrecord_iterator

from recordforge.pipelines.cli import main
from recordforge.pipelines.config import config_from_dict
from recordforge.schemas.errors import ConfigError


def _records(version_dir: Path) -> list[dict]:
    rows = []
    for shard in sorted(p for p in version_dir.glob("*.tfrecord*") if p.suffix != ".index"):
        gz = "gzip" if shard.suffix == ".gz" else None
        for raw in tfrecord_iterator(str(shard), compression_type=gz):
            example = example_pb2.Example()
            example.ParseFromString(bytes(raw))
            row = {}
            for name, feature in example.features.feature.items():
                kind = feature.WhichOneof("kind")
                row[name] = list(getattr(feature, kind).value)
            rows.append(row)
    return rows


def _build(tmp_path, config: dict) -> tuple[int, Path]:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    code = main(["build", str(path)])
    return code, tmp_path / "out" / config["version"]


def test_tab_separated_latin1_without_header_with_null_texts(tmp_path):
    data = tmp_path / "a.tsv"
    data.write_bytes("1\tZürich\tNA\n2\tOslo\t3.5\n3\t-\t\n".encode("latin-1"))
    code, out = _build(tmp_path, {
        "name": "t", "version": "1",
        "source": {"type": "csv", "path": str(data), "extensions": [".tsv"],
                   "csv": {"delimiter": "\t", "header": False, "columns": ["id", "city", "score"],
                           "encoding": "latin-1", "null_values": ["", "NA"]}},
        "features": {"id": {"type": "int64"},
                     "city": {"type": "string", "null_values": ["-"], "default": "?"},
                     "score": {"type": "float", "required": False}},
        "output": {"path": str(tmp_path / "out")}})
    assert code == 0
    rows = sorted(_records(out), key=lambda r: r["id"])
    assert rows == [{"id": [1], "city": ["Zürich".encode()]},
                    {"id": [2], "city": [b"Oslo"], "score": [3.5]},
                    {"id": [3], "city": [b"?"]}]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["source"]["csv"]["delimiter"] == "\t"


def test_json_array_with_nested_paths_lists_and_timestamps(tmp_path):
    data = tmp_path / "people.json"
    people = [{"id": i, "user": {"address": {"city": f"c{i}"}, "a.b": i * 10},
               "tags": ["x"] * i, "seen": f"2024-03-0{i}T12:00:00+01:00"}
              for i in range(1, 5)]
    data.write_text(json.dumps(people, indent=1))
    code, out = _build(tmp_path, {
        "name": "j", "version": "1",
        "source": {"type": "json", "path": str(data)},
        "features": {"id": {"type": "int64"},
                     "city": {"type": "string", "from": ["user", "address", "city"]},
                     "ab": {"type": "int64", "from": ["user", "a.b"]},
                     "tags": {"type": "string", "shape": [-1]},
                     "seen": {"type": "timestamp", "unit": "ms"}},
        "output": {"path": str(tmp_path / "out")}})
    assert code == 0
    rows = sorted(_records(out), key=lambda r: r["id"])
    for person, row in zip(people, rows):
        seen = dt.datetime.fromisoformat(person["seen"])
        assert row == {"id": [person["id"]],
                       "city": [person["user"]["address"]["city"].encode()],
                       "ab": [person["user"]["a.b"]],
                       "tags": [b"x"] * person["id"],
                       "seen": [int(seen.timestamp() * 1000)]}
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["features"]["seen"]["timestamp"] == {"unit": "ms", "timezone": "UTC"}
    assert manifest["features"]["seen"]["type"] == "int64"


def test_parquet_dates_timestamps_and_structs(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq
    table = pa.table({
        "day": pa.array([dt.date(2024, 1, 1), dt.date(1969, 12, 31)], pa.date32()),
        "at": pa.array([dt.datetime(2024, 1, 1, 0, 0, 1), dt.datetime(2024, 1, 1)],
                       pa.timestamp("us")),
        "s": pa.array([{"v": 1}, {"v": 2}]),
    })
    pq.write_table(table, tmp_path / "t.parquet")
    code, out = _build(tmp_path, {
        "name": "p", "version": "1",
        "source": {"type": "parquet", "path": str(tmp_path / "t.parquet")},
        "features": {"day": {"type": "timestamp", "unit": "days"},
                     "at": {"type": "timestamp", "unit": "s", "timezone": "Europe/Oslo"},
                     "v": {"type": "int64", "from": ["s", "v"]}},
        "output": {"path": str(tmp_path / "out")}})
    assert code == 0
    rows = sorted(_records(out), key=lambda r: r["v"])
    assert rows == [{"day": [19723], "at": [1704067201 - 3600], "v": [1]},
                    {"day": [-1], "at": [1704067200 - 3600], "v": [2]}]


@pytest.mark.parametrize("csv_section, key, words", [
    ({"delimiter": ";;"}, "source.csv.delimiter", "one character"),
    ({"header": "no"}, "source.csv.header", "true"),
    ({"header": False}, "source.csv.columns", "missing"),
    ({"columns": ["a"]}, "source.csv.columns", "header: false"),
    ({"encoding": "ebcdic"}, "source.csv.encoding", "utf-16"),
    ({"null_values": [None]}, "source.csv.null_values", "list of text"),
    ({"quote": ","}, "source.csv.quote", "cannot quote"),
    ({"delimiters": ","}, "source.csv.delimiters", "did you mean"),
])
def test_bad_csv_sections_are_config_errors_naming_the_key(tmp_path, csv_section, key, words):
    data = tmp_path / "a.csv"
    data.write_text("a\n1\n")
    with pytest.raises(ConfigError) as error:
        config_from_dict({"name": "t", "version": "1",
                          "source": {"type": "csv", "path": str(data), "csv": csv_section},
                          "features": {"a": {"type": "int64"}},
                          "output": {"path": str(tmp_path / "out")}})
    assert error.value.key == key and words in str(error.value)


@pytest.mark.parametrize("feature, key", [
    ({"type": "timestamp", "unit": "minutes"}, "features.f.unit"),
    ({"type": "timestamp", "format": "yyyy-mm-dd"}, "features.f.format"),
    ({"type": "timestamp", "timezone": "Mars/Olympus"}, "features.f.timezone"),
    ({"type": "int64", "unit": "s"}, "features.f.unit"),
    ({"type": "int64", "null_values": [1]}, "features.f.null_values"),
    ({"type": "int64", "from": ["a", ""]}, "features.f.from"),
    ({"type": "int64", "from": "b.c"}, "features.f.from"),  # CSV: no column "b.c"
])
def test_bad_feature_keys_are_config_errors(tmp_path, feature, key):
    data = tmp_path / "a.csv"
    data.write_text("a,f\n1,2\n")
    with pytest.raises(ConfigError) as error:
        config_from_dict({"name": "t", "version": "1",
                          "source": {"type": "csv", "path": str(data)},
                          "features": {"f": feature},
                          "output": {"path": str(tmp_path / "out")}})
    assert error.value.key == key


def test_class_folders_differing_only_by_case_are_a_config_error(tmp_path):
    from PIL import Image
    for folder in ("Cat", "cat", "dog"):
        (tmp_path / "img" / folder).mkdir(parents=True)
        Image.new("RGB", (2, 2)).save(tmp_path / "img" / folder / "a.png")
    with pytest.raises(ConfigError) as error:
        config_from_dict({"name": "t", "version": "1",
                          "source": {"type": "images", "path": str(tmp_path / "img")},
                          "features": {"label": {"type": "int64", "vocabulary": "auto"}},
                          "output": {"path": str(tmp_path / "out")}})
    assert error.value.key == "source.path"
    assert "'Cat' and 'cat'" in str(error.value)


def test_avro_with_nested_records_and_logical_types(tmp_path):
    import fastavro
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "id", "type": "long"},
        {"name": "user", "type": {"type": "record", "name": "U", "fields": [
            {"name": "name", "type": "string"}, {"name": "tags", "type": {"type": "array",
                                                                          "items": "string"}}]}},
        {"name": "born", "type": {"type": "int", "logicalType": "date"}},
        {"name": "blob", "type": ["null", "bytes"]}]}
    records = [{"id": i, "user": {"name": f"n{i}", "tags": ["a"] * i},
                "born": dt.date(2000, 1, 1 + i), "blob": None if i % 2 else b"\x00\xff"}
               for i in range(5)]
    with open(tmp_path / "r.avro", "wb") as out:
        fastavro.writer(out, schema, records)
    code, out = _build(tmp_path, {
        "name": "a", "version": "1",
        "source": {"type": "avro", "path": str(tmp_path / "r.avro")},
        "features": {"id": {"type": "int64"}, "name": {"type": "string", "from": ["user", "name"]},
                     "tags": {"type": "string", "from": ["user", "tags"], "shape": [-1]},
                     "born": {"type": "timestamp", "unit": "days"},
                     "blob": {"type": "bytes", "required": False}},
        "output": {"path": str(tmp_path / "out")}})
    assert code == 0
    rows = sorted(_records(out), key=lambda r: r["id"])
    for record, row in zip(records, rows):
        expected = {"id": [record["id"]], "name": [record["user"]["name"].encode()],
                    "tags": [b"a"] * record["id"],
                    "born": [(record["born"] - dt.date(1970, 1, 1)).days]}
        if record["blob"] is not None:
            expected["blob"] = [record["blob"]]
        assert row == expected
    # a feature naming no Avro field is a config error (the schema is read up front)
    with pytest.raises(ConfigError) as error:
        config_from_dict({"name": "a", "version": "1",
                          "source": {"type": "avro", "path": str(tmp_path / "r.avro")},
                          "features": {"idd": {"type": "int64"}},
                          "output": {"path": str(tmp_path / "o2")}})
    assert error.value.key == "features.idd.from" and "`id`" in str(error.value)


def test_existing_tfrecords_are_checked_resharded_and_corrupt_records_dead_lettered(tmp_path):
    from recordforge.schemas.example import encode_example
    from recordforge.transforms.tfrecord import frame_records, gzip_compress
    src = tmp_path / "in"
    src.mkdir()
    examples = [encode_example({"x": [i], "name": [f"r{i}".encode()]}) for i in range(300)]
    for part in range(30):  # many tiny files, half of them gzip
        data = frame_records(examples[part * 10:(part + 1) * 10])
        if part % 2:
            (src / f"p{part:02d}.tfrecord.gz").write_bytes(gzip_compress(data))
        else:
            (src / f"p{part:02d}.tfrecord").write_bytes(data)
    # one damaged file: its 3rd record's data CRC is wrong; one record not an Example
    bad = bytearray(frame_records([examples[0], examples[1], examples[2]]))
    bad[-1] ^= 0xFF
    (src / "zz-bad.tfrecord").write_bytes(bytes(bad))
    (src / "zz-junk.tfrecord").write_bytes(frame_records([b"\xff\xff\xff"]))
    code, out = _build(tmp_path, {
        "name": "t", "version": "1",
        "source": {"type": "tfrecord", "path": str(src)},
        "features": {"x": {"type": "int64", "max": 1000},
                     "name": {"type": "string"}},
        # (the damaged file's unread rest holds an unknown number of records,
        # which fails any budget that does not admit every row failing)
        "dead_letter": {"max_error_rate": 1.0},
        "output": {"path": str(tmp_path / "out"), "compression": "gzip"}})
    assert code == 0
    rows = _records(out)
    # the bad file's first two records are kept; its damaged third is a dead letter
    assert sorted(r["x"][0] for r in rows) == sorted(list(range(300)) + [0, 1])
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["dead_letter"]["by_reason"] == {"tfrecord_corrupt": 1, "example_invalid": 1}
    assert manifest["dead_letter"]["uncounted"] == 1
    letters = [json.loads(line) for f in sorted((out / "dead_letter").glob("*.jsonl"))
               for line in f.read_text().splitlines()]
    corrupt = next(d for d in letters if d["reason"] == "tfrecord_corrupt")
    assert corrupt["source"].endswith("zz-bad.tfrecord") and corrupt["row"] == 3
    assert "byte offset" in corrupt["message"]


def test_a_feature_whose_column_no_row_holds_fails_the_build(tmp_path, capsys):
    data = tmp_path / "a.jsonl"
    data.write_text("".join(json.dumps({"id": i, "colour": "red"}) + "\n" for i in range(50)))
    config = {"name": "t", "version": "1", "source": {"type": "jsonl", "path": str(data)},
              "features": {"id": {"type": "int64"},
                           "color": {"type": "string", "required": False},
                           "size": {"type": "int64", "default": 0, "from": "size"}},
              "output": {"path": str(tmp_path / "out")}}
    code, out = _build(tmp_path, config)
    assert code == 1
    err = capsys.readouterr().err
    assert "features.color.from: column 'color' appears in no row; did you mean `colour`?" in err
    assert "features.size.from" in err
    assert not (tmp_path / "out" / "1" / "manifest.json").exists()
    # one row holding the column is enough
    with open(data, "a") as f:
        f.write(json.dumps({"id": 99, "color": "blue", "size": 3}) + "\n")
    code, out = _build(tmp_path, config)
    assert code == 0


def test_rows_are_watched_only_while_a_column_is_unseen():
    from recordforge.transforms.readers.rows import ColumnBatch, SourceRow
    from recordforge.transforms.to_examples import BatchConversion
    fn = BatchConversion((), {}, None, None, watch_columns=("b", "c"))
    fn.start_bundle()
    rows = [SourceRow("s", 1, {"a": 1}), SourceRow("s", 2, {"a": 1, "b": 2})]
    assert list(fn._columns_seen(rows)) == [("columns_seen", ("a", "b"))]
    assert fn._unseen == {"c"}
    assert list(fn._columns_seen(ColumnBatch("s", 3, {"c": [1]}))) == [("columns_seen", ("c",))]
    assert fn._unseen == set()


def test_report_shows_the_schema_and_the_manifest_the_shard_size_spread(tmp_path):
    data = tmp_path / "t.json"
    data.write_text(json.dumps([{"id": i, "u": {"t": "2024-01-01"}, "n": None if i % 2 else "x"}
                                for i in range(20)]))
    code, out = _build(tmp_path, {
        "name": "r", "version": "1", "source": {"type": "json", "path": str(data)},
        "features": {"id": {"type": "int64"},
                     "when": {"type": "timestamp", "from": ["u", "t"], "unit": "days"},
                     "note": {"type": "string", "default": "n/a", "from": "n"}},
        "output": {"path": str(tmp_path / "out")}})
    assert code == 0
    report = (out / "report.html").read_text()
    schema = report[report.index("id='schema'"):]
    schema = schema[:schema.index("</table>")]
    assert "<td>when</td><td>timestamp (stored as int64), days since 1970 UTC" in schema
    # A path is shown as its keys: dotted text would name one column "u.t".
    assert "<td>[&quot;u&quot;, &quot;t&quot;]</td>" in schema and "no (default)" in schema and "&quot;n/a&quot;" in schema
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["splits"]["train"]["shard_size_spread"] == {"max_deviation": 0.0}


def test_shard_size_spread_says_why_beyond_ten_percent():
    from recordforge.pipelines.publish.manifest import shard_size_spread
    even = [{"num_bytes": 1000, "num_examples": 100}, {"num_bytes": 1050, "num_examples": 100}]
    assert shard_size_spread(even) == {"max_deviation": 0.0244}
    big = [{"num_bytes": 3_000_000, "num_examples": 3}, {"num_bytes": 2_000_000,
                                                          "num_examples": 2}]
    spread = shard_size_spread(big)
    assert spread["max_deviation"] == 0.2 and "records are large" in spread["why"]
    coarse = [{"num_bytes": 1300, "num_examples": 500}, {"num_bytes": 700, "num_examples": 500}]
    assert "chunks" in shard_size_spread(coarse)["why"]
    assert "compression ratios" in shard_size_spread(coarse, compressed_at_rows=True)["why"]


def test_tfrecord_labels_give_an_auto_vocabulary(tmp_path):
    from recordforge.schemas.example import encode_example
    from recordforge.transforms.tfrecord import frame_records
    (tmp_path / "a.tfrecord").write_bytes(frame_records(
        [encode_example({"label": [name.encode()]}) for name in ("dog", "cat", "dog")]))
    code, out = _build(tmp_path, {
        "name": "v", "version": "1",
        "source": {"type": "tfrecord", "path": str(tmp_path / "a.tfrecord")},
        "features": {"label": {"type": "int64", "vocabulary": "auto"}},
        "output": {"path": str(tmp_path / "out")}})
    assert code == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["vocabularies"] == {"label": ["cat", "dog"]}
    assert sorted(r["label"][0] for r in _records(out)) == [0, 1, 1]


def test_a_dotted_column_and_a_nested_path_of_the_same_keys_each_read_their_own(tmp_path, capsys):
    # issue 38.2: `from: a.b` is the column "a.b", `from: [a, b]` the key b of a
    data = tmp_path / "a.jsonl"
    data.write_text("".join(json.dumps({"id": i, "a.b": i, "a": {"b": -i}}) + "\n"
                            for i in range(1, 6)))
    config = {"name": "t", "version": "1", "source": {"type": "jsonl", "path": str(data)},
              "features": {"id": {"type": "int64"}, "col": {"type": "int64", "from": "a.b"},
                           "path": {"type": "int64", "from": ["a", "b"]}},
              "output": {"path": str(tmp_path / "out")}}
    code, out = _build(tmp_path, config)
    assert code == 0
    assert sorted(_records(out), key=lambda r: r["id"]) == [
        {"id": [i], "col": [i], "path": [-i]} for i in range(1, 6)]
    # a dotted text meant as a path fails the build with the list form
    config["features"] = {"id": {"type": "int64"},
                          "city": {"type": "string", "from": "a.c", "required": False}}
    config["version"] = "2"
    code, _ = _build(tmp_path, config)
    assert code == 1
    assert ("features.city.from: column 'a.c' appears in no row; did you mean "
            "`from: [a, c]` (a path into nested values)?") in capsys.readouterr().err


def test_json_array_rows_read_are_examples_plus_dead_letters(tmp_path):
    # issues 38.5, 38.7: a large number or a lone surrogate is that row's
    # dead letter, as in JSONL; the rows after it are still read (the
    # variants are generated in tests/transforms/test_json_array.py)
    literals = ["1", "-9223372036854775808", "9223372036854775808", "1e400", '"\\ud800"',
                '"\\udc00"', '"x"', "-1E999", '"y"']
    data = tmp_path / "a.json"
    data.write_text("[" + ",".join(f'{{"id": {i}, "v": {v}}}' for i, v in enumerate(literals))
                    + "]")
    code, out = _build(tmp_path, {
        "name": "t", "version": "1", "source": {"type": "json", "path": str(data)},
        "features": {"id": {"type": "int64"}, "v": {"type": "string", "required": False}},
        "dead_letter": {"max_error_rate": 1.0}, "output": {"path": str(tmp_path / "out")}})
    assert code == 0
    manifest = json.loads((out / "manifest.json").read_text())
    examples = sum(s["num_examples"] for s in manifest["splits"].values())
    assert manifest["num_input_rows"] == len(literals) == examples + manifest["dead_letter"][
        "num_rows"]
    assert sorted(r["v"][0] for r in _records(out)) == [b"x", b"y"]
    assert manifest["dead_letter"]["by_reason"] == {"type_mismatch": 5, "invalid_utf8": 2}


@pytest.mark.parametrize("csv_options, text", [
    ({"delimiter": ";"}, 'name\na\n""\nb\n'),
    ({"header": False, "columns": ["name"]}, 'a\n""\nb\n'),
    ({"encoding": "cp1252"}, '\ufeffname\na\n""\nb\n'),
])
def test_a_dialects_quoted_empty_row_is_counted_and_a_bom_is_not_data(tmp_path, csv_options,
                                                                      text):
    # issues 38.3, 38.6: rows read = examples + dead letters in every dialect
    data = tmp_path / "a.csv"
    data.write_bytes(text.encode("utf-8"))
    code, out = _build(tmp_path, {
        "name": "t", "version": "1", "source": {"type": "csv", "path": str(data),
                                               "csv": csv_options},
        "features": {"name": {"type": "string"}},
        "dead_letter": {"max_error_rate": 1.0}, "output": {"path": str(tmp_path / "out")}})
    assert code == 0
    manifest = json.loads((out / "manifest.json").read_text())
    examples = sum(s["num_examples"] for s in manifest["splits"].values())
    assert (manifest["num_input_rows"], examples, manifest["dead_letter"]["by_reason"]) == (
        3, 2, {"missing_value": 1})
    assert sorted(r["name"][0] for r in _records(out)) == [b"a", b"b"]


def test_a_json_object_file_says_it_is_not_an_array_when_no_row_holds_the_column(tmp_path,
                                                                                 capsys):
    # issue 38.18: the build said only "column 'v' appears in no row"
    data = tmp_path / "a.json"
    data.write_text('{"v": [1, 2]}')
    code, _ = _build(tmp_path, {
        "name": "t", "version": "1", "source": {"type": "json", "path": str(data)},
        "features": {"v": {"type": "int64", "required": False}},
        "dead_letter": {"max_error_rate": 1.0}, "output": {"path": str(tmp_path / "out")}})
    assert code == 1
    err = capsys.readouterr().err
    # Every row failed, so the build says that first, with the reason the
    # file was not read, naming the file once.
    assert "every input row failed (1 of 1 rows are dead letters" in err
    assert "json_array_invalid: 1 rows" in err and "one JSON object, not an array" in err
    assert err.count(f"{data}:") == 1
