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
    for shard in sorted(version_dir.glob("*.tfrecord*")):
        for raw in tfrecord_iterator(str(shard)):
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
                     "city": {"type": "string", "from": "user.address.city"},
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
                     "v": {"type": "int64", "from": "s.v"}},
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
