"""`recordforge init`: the inferred config builds without edits, and the dataset
reads back (with the independent `tfrecord` package) equal to the input as
pandas reads it, for CSV, JSONL, Parquet and an image directory."""

import datetime as dt
import json
import math
import random
from pathlib import Path

import numpy as np
import pytest
import yaml
from tfrecord import example_pb2
from tfrecord.reader import tfrecord_iterator

from recordforge.pipelines.cli import main
from recordforge.pipelines.init import infer_config

pd = pytest.importorskip("pandas")


def _records(version_dir: Path) -> list[dict]:
    rows = []
    for shard in sorted(p for p in version_dir.glob("*.tfrecord*") if p.suffix != ".index"):
        gz = "gzip" if shard.suffix == ".gz" else None
        for raw in tfrecord_iterator(str(shard), compression_type=gz):
            example = example_pb2.Example()
            example.ParseFromString(bytes(raw))
            rows.append({name: list(getattr(f, f.WhichOneof("kind")).value)
                         for name, f in example.features.feature.items()})
    return rows


def _init_and_build(tmp_path, source: Path, *extra) -> tuple[dict, list[dict]]:
    config = tmp_path / "config.yaml"
    out = tmp_path / "out"
    assert main(["init", str(source), "-o", str(config), "--output-path", str(out),
                 *extra]) == 0
    assert main(["build", str(config)]) == 0
    parsed = yaml.safe_load(config.read_text())
    return parsed, _records(out / "1.0.0")


def _same(expected, ours: list | None, feature: dict) -> bool:
    if expected is None or (isinstance(expected, float) and math.isnan(expected)) \
            or expected is pd.NA or expected is pd.NaT:
        return ours is None
    assert ours is not None, (expected, feature)
    if feature["type"] == "float":
        return np.float32(expected) == np.float32(ours[0])
    if feature["type"] == "string":
        return ours == [str(expected).encode()]
    if feature["type"] == "timestamp":
        stamp = pd.Timestamp(expected)
        stamp = stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp
        per = {"days": 86400 * 10**9, "us": 1000, "s": 10**9}[feature["unit"]]
        return ours == [stamp.value // per]
    return ours == [int(expected)]


def _compare(frame, config: dict, rows: list[dict]) -> None:
    by_id = {row["id"][0]: row for row in rows}
    assert sorted(by_id) == sorted(frame["id"].tolist())
    for name, feature in config["features"].items():
        column = feature.get("from", name)
        # A string is one top-level column; a nested value is a list of keys.
        values = frame[column] if isinstance(column, str) else frame[column[0]].map(
            lambda d, keys=column[1:]: _dig(d, keys))
        for ident, expected in zip(frame["id"], values):
            assert _same(expected, by_id[ident].get(name), feature), (name, ident, expected,
                                                                      by_id[ident].get(name))


def _dig(value, keys):
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def test_csv_with_null_tokens_dates_and_a_semicolon_dialect(tmp_path):
    rng = random.Random(3)
    lines = ["id;count;price;city;day"]
    for i in range(300):
        count = rng.choice([str(rng.randint(-50, 50)), "NA", ""])
        price = rng.choice([f"{rng.uniform(0, 100):.3f}", "n/a"])
        city = rng.choice(["Oslo", "Zürich", "Lyon", "São Paulo"])
        day = (dt.date(2020, 1, 1) + dt.timedelta(days=rng.randint(0, 900))).isoformat()
        lines.append(f"{i};{count};{price};{city};{day}")
    path = tmp_path / "t.csv"
    path.write_text("\n".join(lines) + "\n", encoding="cp1252")
    config, rows = _init_and_build(tmp_path, path)
    assert config["source"]["csv"] == {"delimiter": ";", "encoding": "cp1252"}
    assert config["features"]["count"]["required"] is False
    assert config["features"]["day"] == {"type": "timestamp", "unit": "days"}
    frame = pd.read_csv(path, sep=";", encoding="cp1252")
    _compare(frame, config, rows)


def test_jsonl_with_nested_objects_lists_and_nulls(tmp_path):
    rng = random.Random(5)
    path = tmp_path / "t.jsonl"
    with open(path, "w") as out:
        for i in range(200):
            row = {"id": i, "score": rng.choice([None, rng.random()]),
                   "user": {"name": f"u{i % 7}", "age": rng.randint(1, 90)},
                   "seen": f"2024-05-{1 + i % 28:02d}T10:00:00Z"}
            if i % 3:
                row["note"] = "x" * (i % 4)
            out.write(json.dumps(row) + "\n")
    config, rows = _init_and_build(tmp_path, path)
    assert config["features"]["user/name"]["from"] == ["user", "name"]
    assert config["features"]["note"]["required"] is False
    assert config["features"]["note"]["null_values"] == []  # "" is text here, as for pandas
    frame = pd.read_json(path, lines=True, dtype=False)
    _compare(frame, config, rows)


def test_parquet_with_native_dates_and_timestamps(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    n = 250
    table = pa.table({
        "id": pa.array(range(n), pa.int64()),
        "x": pa.array([None if i % 9 == 0 else i * 0.5 for i in range(n)], pa.float64()),
        "flag": pa.array([i % 2 == 0 for i in range(n)]),
        "day": pa.array([dt.date(2021, 1, 1) + dt.timedelta(days=i) for i in range(n)],
                        pa.date32()),
        "at": pa.array([dt.datetime(2022, 3, 1) + dt.timedelta(seconds=37 * i)
                        for i in range(n)], pa.timestamp("us")),
        "name": pa.array([f"n{i % 5}" for i in range(n)]),
    })
    path = tmp_path / "t.parquet"
    pq.write_table(table, path)
    config, rows = _init_and_build(tmp_path, path)
    assert config["features"]["at"] == {"type": "timestamp", "unit": "us"}
    _compare(pd.read_parquet(path), config, rows)


def test_image_directory_with_a_broken_image_and_class_vocabulary(tmp_path):
    from PIL import Image
    root = tmp_path / "img"
    files = {}
    for label in ("cat", "dog"):
        (root / label).mkdir(parents=True)
        for i in range(6):
            path = root / label / f"{i}.png"
            Image.new("RGB", (8 + i, 5), (i * 30, 0, 0)).save(path)
            files[f"{label}/{i}.png"] = (label, path.read_bytes())
    (root / "dog" / "broken.png").write_bytes(files["dog/0.png"][1][:40])
    config, rows = _init_and_build(tmp_path, root)
    assert config["features"]["label"]["vocabulary"] == "auto"
    assert config["dead_letter"]["max_error_rate"] > 1 / 13
    got = {row["image/filename"][0].decode(): row for row in rows}
    assert sorted(got) == sorted(files)
    for rel, (label, data) in files.items():
        assert got[rel]["image/encoded"] == [data]
        assert got[rel]["label/text"] == [label.encode()]
        assert got[rel]["label"] == [["cat", "dog"].index(label)]


def test_flights_sample_gets_its_null_spelling_and_builds(tmp_path):
    sample = Path(__file__).resolve().parents[2] / "examples" / "tables" / "flights.csv"
    text = infer_config(str(sample), output=str(tmp_path / "out"))
    config = yaml.safe_load(text)
    assert config["features"]["distance_km"]["null_values"] == ["n/a"]
    assert config["features"]["date"] == {"type": "timestamp", "unit": "days"}
    assert "# observed 100000 .. 100299" in text


def test_refuses_to_overwrite_and_unknown_types(tmp_path, capsys):
    (tmp_path / "c.yaml").write_text("x")
    (tmp_path / "t.csv").write_text("a\n1\n")
    assert main(["init", str(tmp_path / "t.csv"), "-o", str(tmp_path / "c.yaml")]) == 2
    (tmp_path / "t.weird").write_text("a\n1\n")
    assert main(["init", str(tmp_path / "t.weird")]) == 2
    assert "--type" in capsys.readouterr().err
