"""Whole builds with and without the native kernels: same shards, dead letters, stats.json."""

from __future__ import annotations

import datetime as dt
import hashlib
import math
import os
import pathlib
import random
import subprocess
import sys

import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
FLIGHTS = REPO / "configs" / "examples" / "flights.yaml"
LABELS = [f"class_{i}" for i in range(10)]
# Values of every class the rules judge, mixed into a clean table.
BAD_FIELDS = {"id": ["", " 7", "1_0", "x", "-1", "9223372036854775808", "3.0"],
              "count": ["", "1e3", "nan", "99999999999999999999", "+5", "0x1", "true"],
              "score": ["", "nan", "inf", "1e40", "1_0.5", " 2.5", "-0", ".5", "1."],
              "text": ["", "x" * 201, "\u00e9t\u00e9"],
              "label": ["", "class_10", "Class_1", " class_1"]}


def _digests(version_dir: pathlib.Path) -> dict[str, str]:
    files = sorted(p for p in version_dir.rglob("*")
                   if p.is_file() and (".tfrecord" in p.name or p.suffix == ".jsonl"
                                       or p.name == "stats.json"))
    assert files, f"nothing published under {version_dir}"
    return {str(p.relative_to(version_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in files}


def _build(config: pathlib.Path, output: pathlib.Path, pure_python: bool,
           mode: tuple[str, ...] = ("--direct_running_mode=in_memory", "--direct_num_workers=1"),
           ) -> dict[str, str]:
    """A build in its own process (the path is chosen once per process)."""
    env = {**os.environ, "RECORDFORGE_PURE_PYTHON": "1" if pure_python else "0"}
    code = ("import sys; from recordforge.pipelines import build; "
            "sys.exit(build.run(sys.argv[1:]))")
    run = subprocess.run([sys.executable, "-c", code, str(config), "--output", str(output), "--",
                          *mode],
                         env=env, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert run.returncode == 0, run.stdout + run.stderr
    return _digests(output / (output / "LATEST").read_text().strip())


def _table(directory: pathlib.Path, rows: int) -> pathlib.Path:
    rng = random.Random(37)
    lines = ["id,count,score,text,label"]
    for i in range(rows):
        fields = {"id": str(i), "count": str(rng.randint(-1000, 100_000)),
                  "score": repr(round(rng.uniform(-100.0, 100.0), 4)),
                  "text": "word " * rng.randint(1, 20), "label": rng.choice(LABELS)}
        if rng.random() < 0.02:
            column = rng.choice(list(BAD_FIELDS))
            fields[column] = rng.choice(BAD_FIELDS[column])
        lines.append(",".join(fields.values()))
    lines.insert(rows // 2, "1,2,3")  # a ragged row: the reader's dead letter
    table = directory / "table.csv"
    table.write_text("\n".join(lines) + "\n", encoding="utf-8")
    config = directory / "table.yaml"
    config.write_text(yaml.safe_dump({
        "name": "native_check", "version": "1",
        "source": {"type": "csv", "path": str(table)},
        "features": {"id": {"type": "int64", "min": 0}, "count": {"type": "int64"},
                     "score": {"type": "float"},
                     "text": {"type": "string", "max_bytes": 200},
                     "label": {"type": "int64", "vocabulary": LABELS}},
        "key": "id", "splits": {"train": 0.8, "test": 0.2},
        "output": {"shard_size": "1MB", "shuffle": True},
        "dead_letter": {"max_error_rate": 0.5}}, sort_keys=False))
    return config


def _tsv_table(directory: pathlib.Path, rows: int) -> pathlib.Path:
    """The table of `_table` as a tab-separated dialect (``source.csv``),
    with a quoted field holding tabs and a line break now and then."""
    config = _table(directory, rows)
    lines = (directory / "table.csv").read_text(encoding="utf-8").split("\n")
    for at in range(3, len(lines), 997):
        lines[at] = lines[at].replace("word ", '"word\tword\n"', 1)
    (directory / "table.csv").write_text("\n".join(line.replace(",", "\t") for line in lines),
                                         encoding="utf-8")
    settings = yaml.safe_load(config.read_text())
    settings["source"]["csv"] = {"delimiter": "\t"}
    config.write_text(yaml.safe_dump(settings, sort_keys=False))
    return config


def _parquet_table(directory: pathlib.Path, rows: int) -> pathlib.Path:
    """The table of `_table` as typed Parquet columns, in several row
    groups, with values of every class the rules judge (nulls, out of
    range, NaN and infinities, float32 overflow, long text, unknown labels)
    mixed in."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(37)
    bad = {"id": [None, -1], "count": [None], "score": [None, math.nan, math.inf, 1e40, -0.0],
           "text": [None, "", "x" * 201, "\u00e9t\u00e9"], "label": [None, "class_10", " class_1"]}
    columns: dict[str, list] = {name: [] for name in bad}
    for i in range(rows):
        values = {"id": i, "count": rng.randint(-1000, 100_000),
                  "score": round(rng.uniform(-100.0, 100.0), 4),
                  "text": "word " * rng.randint(1, 20), "label": rng.choice(LABELS)}
        if rng.random() < 0.02:
            column = rng.choice(list(bad))
            values[column] = rng.choice(bad[column])
        for name, value in values.items():
            columns[name].append(value)
    table = directory / "table.parquet"
    pq.write_table(pa.table({"id": pa.array(columns["id"], pa.int64()),
                             "count": pa.array(columns["count"], pa.int32()),
                             "score": pa.array(columns["score"], pa.float64()),
                             "text": pa.array(columns["text"], pa.string()),
                             "label": pa.array(columns["label"], pa.string())}),
                   table, row_group_size=4096)
    config = _table(directory, 0)
    settings = yaml.safe_load(config.read_text())
    settings["source"] = {"type": "parquet", "path": str(table)}
    config.write_text(yaml.safe_dump(settings, sort_keys=False))
    return config


def _jsonl_table(directory: pathlib.Path, rows: int) -> pathlib.Path:
    """The table of `_table` as JSONL (a byte-order mark first), with
    values and lines of every class the JSON rules judge mixed in: strings
    where numbers go, nulls, bools, missing keys, integers beyond int64,
    1e999, NaN and Infinity literals, escapes, lone surrogates, duplicate
    keys, nested values (one feature reads a nested path), blank lines,
    lines that are not JSON objects."""
    import json

    rng = random.Random(37)
    bad = {"id": ["7", None, True, -1, 2**63, 1.0], "count": ["12", "1e3", 2**70, "NaN", []],
           "score": [None, "2.5", 3, "1e999", "NaN", "Infinity", 1e40, -0.0, {"x": 1}],
           "text": [None, "", "x" * 201, "\u00e9t\u00e9", "tab\t", 5, "\\ud800", "quo\\\"te"],
           "label": [None, "class_10", " class_1", "class_\\u0031"]}
    lines = []
    for i in range(rows):
        values = {"id": i, "count": rng.randint(-1000, 100_000),
                  "score": round(rng.uniform(-100.0, 100.0), 4),
                  "text": "word " * rng.randint(1, 20), "label": rng.choice(LABELS),
                  # (read by a nested path: absent, not an object, or holding it)
                  "meta": rng.choice([{"n": rng.randint(0, 9), "m": "x"}, {"m": 1}, [1], None])}
        line = json.dumps(values)
        if rng.random() < 0.03:
            column = rng.choice(list(bad))
            value = rng.choice(bad[column])
            # (written as they stand: NaN, 1e999 and escapes are literals)
            literal = (value if isinstance(value, str) and value in ("NaN", "Infinity", "1e999")
                       else f'"{value}"' if isinstance(value, str) else json.dumps(value))
            line = line.replace(f'"{column}": {json.dumps(values[column])}',
                                f'"{column}": {literal}') if rng.random() < 0.8 else (
                line[:-1] + f', "{column}": {literal}}}')
        lines.append(line)
    for at, hostile in ((rows // 2, "{not json"), (rows // 3, ""), (rows // 4, "[1, 2]"),
                        (rows // 5, '{"id": 5, "extra": {"deep": [1, {"x": null}]}}')):
        lines.insert(at, hostile)
    table = directory / "table.jsonl"
    table.write_text("\ufeff" + "\n".join(lines) + "\n", encoding="utf-8")
    config = _table(directory, 0)
    settings = yaml.safe_load(config.read_text())
    settings["source"] = {"type": "jsonl", "path": str(table)}
    settings["features"]["meta_n"] = {"type": "int64", "from": ["meta", "n"], "required": False}
    config.write_text(yaml.safe_dump(settings, sort_keys=False))
    return config


def _timestamped_table(directory: pathlib.Path, rows: int) -> pathlib.Path:
    """A CSV table with an ISO 8601 timestamp column (`Z`, offsets,
    fractions, dates, naive text, impossible dates, hostile text) and
    declared null texts (`source.csv.null_values` and a feature's own)."""
    rng = random.Random(37)
    bad_times = ["2024-02-30", "2024-01-01T25:00Z", "yesterday", " 2024-01-01", "2262-04-12Z",
                 "2024-01-01T12:30.5Z", "-", "1e9"]
    lines = ["id,when,count,score,label"]
    for i in range(rows):
        seconds = rng.randint(-2_000_000_000, 4_000_000_000)
        when = (dt.datetime(1970, 1, 1) + dt.timedelta(seconds=seconds)).isoformat()
        shape = rng.random()
        if shape < 0.6:
            when += "." + str(rng.randint(0, 10**9 - 1)).zfill(9)[:rng.randint(1, 12)] + "Z"
        elif shape < 0.7:
            when += rng.choice(["+02:00", "-05:30", "+00:00"])
        elif shape < 0.75:
            when = when[:10]
        fields = {"id": str(i), "when": when,
                  "count": rng.choice(["NA", ""]) if rng.random() < 0.05 else
                  str(rng.randint(-1000, 1000)),
                  "score": "-" if rng.random() < 0.03 else repr(round(rng.uniform(-9, 9), 3)),
                  "label": rng.choice(LABELS + ["NA"])}
        if rng.random() < 0.02:
            fields["when"] = rng.choice(bad_times + ["NA", ""])
        lines.append(",".join(fields.values()))
    table = directory / "table.csv"
    table.write_text("\n".join(lines) + "\n", encoding="utf-8")
    config = directory / "table.yaml"
    config.write_text(yaml.safe_dump({
        "name": "native_check", "version": "1",
        "source": {"type": "csv", "path": str(table), "csv": {"null_values": ["", "NA"]}},
        "features": {"id": {"type": "int64"},
                     "when": {"type": "timestamp", "unit": "ms"},
                     "count": {"type": "int64", "required": False},
                     "score": {"type": "float", "null_values": ["-"], "default": 0.5},
                     "label": {"type": "int64", "vocabulary": LABELS, "required": False}},
        "key": "id", "splits": {"train": 0.8, "test": 0.2},
        "output": {"shard_size": "1MB", "shuffle": True},
        "dead_letter": {"max_error_rate": 0.5}}, sort_keys=False))
    return config


def _tfrecord_source(directory: pathlib.Path, rows: int) -> pathlib.Path:
    """A TFRecord file of Examples in the encodings readers meet: recordforge's
    own (names sorted by bytes), protobuf's deterministic one (upb writes
    ``label/text`` before ``label``), valid ones in another encoding (an
    unpacked int, a name twice), values the rules refuse (a negative id,
    two values, another kind, an infinite float) and records that are not
    Examples."""
    from recordforge.schemas import example
    from recordforge.transforms.tfrecord.framing import frame_records

    rng = random.Random(41)
    records = []
    for i in range(rows):
        label = rng.randint(0, 9)
        features = {"id": [i], "label": [label], "label/text": [LABELS[label].encode()],
                    "score": [rng.uniform(-100.0, 100.0)],
                    "text": [("word " * rng.randint(1, 20)).encode()]}
        fault = rng.random()
        if fault < 0.01:
            features[rng.choice(["id", "score"])] = [-1, 2]
        elif fault < 0.02:
            features["id"] = [b"seven"]
        elif fault < 0.03:
            features["id"], features["score"] = [-i - 1], [float("inf")]
        if rng.random() < 0.5:
            message = example.example_class()()
            for name, values in features.items():
                kind = ("bytes_list" if isinstance(values[0], bytes) else
                        "float_list" if isinstance(values[0], float) else "int64_list")
                getattr(message.features.feature[name], kind).value.extend(values)
            record = message.SerializeToString(deterministic=True)
        else:
            record = example.encode_example(dict(sorted(features.items())))
        draw = rng.random()
        if draw < 0.005:
            record = b"\x0f" + record  # not an Example (wire type 7)
        elif draw < 0.01:
            record = b"\x08\x01" + record  # a field of the wrong wire type: protobuf skips it
        elif draw < 0.02:  # the id again, a second features field: protobuf keeps the last
            record += example.encode_example({"id": [i + rows]})
        elif draw < 0.03:  # the id again, unpacked
            record += _unpacked_id(i + rows)
        records.append(record)
    source = directory / "examples.tfrecord"
    source.write_bytes(frame_records(records))
    config = directory / "tfrecord.yaml"
    config.write_text(yaml.safe_dump({
        "name": "native_check", "version": "1",
        "source": {"type": "tfrecord", "path": str(source)},
        "features": {"id": {"type": "int64", "min": 0}, "score": {"type": "float"},
                     "text": {"type": "string", "max_bytes": 200},
                     "label": {"type": "int64", "min": 0, "max": 9},
                     "label/text": {"type": "string"}},
        "key": "id", "splits": {"train": 0.8, "test": 0.2},
        "output": {"shard_size": "1MB", "shuffle": True},
        "dead_letter": {"max_error_rate": 0.5}}, sort_keys=False))
    return config


def _unpacked_id(value: int) -> bytes:
    """An Example of one feature, ``id``, its int64 value not packed (valid
    protobuf that no serializer writes)."""
    def field(tag: int, payload: bytes) -> bytes:
        assert len(payload) < 128
        return bytes([tag, len(payload)]) + payload

    varint = bytearray()
    while value >= 0x80:
        varint.append(value & 0x7F | 0x80)
        value >>= 7
    varint.append(value)
    feature = field(0x1a, b"\x08" + bytes(varint))
    return field(0x0a, field(0x0a, field(0x0a, b"id") + field(0x12, feature)))


@pytest.fixture(scope="module")
def native_built():
    try:
        from recordforge import _native  # noqa: F401
    except ImportError as error:
        pytest.skip(f"the native extension is not built ({error})")


@pytest.mark.parametrize("which", ["flights", "table", "tsv", "parquet", "jsonl",
                                   "timestamped", "tfrecord"])
def test_a_build_gives_the_same_bytes_on_both_paths(native_built, tmp_path, which):
    make = {"flights": lambda: FLIGHTS, "table": lambda: _table(tmp_path, 20_000),
            "parquet": lambda: _parquet_table(tmp_path, 20_000),
            "tsv": lambda: _tsv_table(tmp_path, 20_000),
            "jsonl": lambda: _jsonl_table(tmp_path, 20_000),
            "timestamped": lambda: _timestamped_table(tmp_path, 20_000),
            "tfrecord": lambda: _tfrecord_source(tmp_path, 20_000)}
    config = make[which]()
    native = _build(config, tmp_path / "native", pure_python=False)
    python = _build(config, tmp_path / "python", pure_python=True)
    assert native == python


@pytest.mark.parametrize("which", ["jsonl", "tfrecord"])
def test_two_workers_write_the_bytes_of_one(native_built, tmp_path, which):
    """The sources read as batches of raw lines or records (their rows'
    values made only where asked for): two worker processes write the
    bytes one process writes."""
    make = {"jsonl": _jsonl_table, "tfrecord": _tfrecord_source}
    config = make[which](tmp_path, 5_000)
    one = _build(config, tmp_path / "one", pure_python=False)
    two = _build(config, tmp_path / "two", pure_python=False,
                 mode=("--direct_running_mode=multi_processing", "--direct_num_workers=2"))
    assert one == two


def test_the_build_says_which_path_runs(tmp_path):
    """Once, in the summary: the path and why (here: forced to Python)."""
    env = {**os.environ, "RECORDFORGE_PURE_PYTHON": "1"}
    code = ("import sys; from recordforge.pipelines import build; "
            "sys.exit(build.run(sys.argv[1:]))")
    run = subprocess.run([sys.executable, "-c", code, str(FLIGHTS), "--output",
                          str(tmp_path / "out")], env=env, capture_output=True, text=True,
                         timeout=600, cwd=REPO)
    assert run.returncode == 0, run.stdout + run.stderr
    said = [line for line in (run.stdout + run.stderr).splitlines() if "row path" in line]
    assert said == ["row path: pure Python (RECORDFORGE_PURE_PYTHON is set)"]
