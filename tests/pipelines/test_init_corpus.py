"""Acceptance for `recordforge init` (issue 38): for a generated corpus of tables
(integers up to int64's edges and beyond, floats, nulls, dates in the common
formats, odd column names, non-ASCII text, UTF-8 and latin-1, nested objects)
in CSV, JSON, JSONL, Parquet and Avro, the inferred config builds unedited
and the records, read back with the independent `tfrecord` package, equal the
table as pandas reads it, every value exact (no column made float)."""

import csv
import datetime as dt
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st
from tfrecord import example_pb2
from tfrecord.reader import tfrecord_iterator

from recordforge.pipelines.cli import main
from recordforge.schemas.timestamps import UNIT_NANOS

pd = pytest.importorskip("pandas")

# Each example runs a build: a handful, no shrinking (a failure prints its table).
_SETTINGS = dict(max_examples=10, deadline=None, phases=(Phase.explicit, Phase.generate),
                 suppress_health_check=[HealthCheck.function_scoped_fixture,
                                        HealthCheck.too_slow, HealthCheck.data_too_large])
_FORMATS = ("csv", "json", "jsonl", "parquet", "avro")
_DATE_FORMATS = ("%Y-%m-%d", "%Y/%m/%d", "%m/%d/%Y", "%b %d %Y", "%Y/%m/%d %H:%M",
                 "%d.%m.%Y", "%Y-%m-%dT%H:%M:%S")
_NAMES = ("True", "Yes", "ON", "NULL", "null", "a b", "Zürich", "n#1", "x: y", "~", "1.5",
          "- z", "'q'")
# Latin-1's printable characters: its C1 controls (0x80-0x9F) are, in real
# files, cp1252 text, which is how init reads them.
_TEXT = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF,
                              blacklist_categories=("Cc",)), min_size=1, max_size=6)


def _maybe(values, nulls: bool):
    return st.one_of(st.none(), values) if nulls else values


@st.composite
def _tables(draw):
    """(format, encoding, date format, {column: (kind, values)}) with an `id`."""
    fmt = draw(st.sampled_from(_FORMATS))
    rows = draw(st.integers(1, 12))
    date_format = draw(st.sampled_from(_DATE_FORMATS))
    # (A JSON array holding an integer beyond int64 is unreadable from there
    # on, issue 38.7, a reader's fix: init refuses it, tested elsewhere.)
    kinds = ["int", "float", "date", "text"] + (["wide"] if fmt in ("csv", "jsonl")
                                                else []) + (["nested"] if fmt != "csv" else [])
    chosen = draw(st.lists(st.sampled_from(kinds), min_size=1, max_size=5))
    # Avro names are identifiers ("True" and "NULL" are). Dotted top-level
    # names outside CSV: `test_dotted_top_level_names_are_plain_columns`.
    allowed = [n for n in _NAMES if n.isidentifier() or (fmt != "avro" and "." not in n)
               or fmt == "csv"]
    chosen = chosen[:len(allowed)]
    names = draw(st.lists(st.sampled_from(allowed), min_size=len(chosen),
                          max_size=len(chosen), unique=True))
    strategies = {
        "int": st.integers(-2 ** 63, 2 ** 63 - 1),
        "wide": st.one_of(st.integers(2 ** 63, 2 ** 80), st.integers(-2 ** 80, -2 ** 63 - 1)),
        "float": st.floats(width=32, allow_nan=False, allow_infinity=False),
        "date": st.datetimes(dt.datetime(1900, 1, 1), dt.datetime(2100, 1, 1)).map(
            lambda m: m.replace(second=0, microsecond=0, fold=0)),
        "text": _TEXT,
        "nested": st.fixed_dictionaries({"city": _TEXT, "zip": st.integers(0, 99999)}),
    }
    columns = {"id": ("int", list(range(rows)))}
    for name, kind in zip(names, chosen):
        nulls = draw(st.booleans()) and kind != "nested"
        columns[name] = (kind, draw(st.lists(_maybe(strategies[kind], nulls),
                                             min_size=rows, max_size=rows)))
    encoding = draw(st.sampled_from(["utf-8", "latin-1"])) if fmt == "csv" else "utf-8"
    return fmt, encoding, date_format, columns


def _cell(kind: str, value, date_format: str, native_dates: bool):
    if value is None or kind not in ("date", "float"):
        return value
    if kind == "float":
        return float(np.float32(value))
    return (value.date() if "%H" not in date_format else value) if native_dates \
        else value.strftime(date_format)


def _write(path: Path, fmt: str, encoding: str, date_format: str, columns: dict) -> None:
    native = fmt in ("parquet", "avro")
    names = list(columns)
    rows = [{name: _cell(columns[name][0], columns[name][1][i], date_format, native)
             for name in names} for i in range(len(columns["id"][1]))]
    if fmt == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(names)
        writer.writerows([["" if row[n] is None else (repr(row[n]) if isinstance(row[n], float)
                                                      else row[n]) for n in names]
                          for row in rows])
        path.write_bytes(buffer.getvalue().encode(encoding))
    elif fmt == "jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    elif fmt == "json":
        path.write_text(json.dumps(rows))
    elif fmt == "parquet":
        import pyarrow.parquet as pq
        pq.write_table(_arrow(rows, columns), path)
    else:
        import fastavro
        with open(path, "wb") as out:
            fastavro.writer(out, fastavro.parse_schema(_avro_schema(columns, date_format)), rows)


def _arrow(rows, columns):
    import pyarrow as pa
    types = {"int": pa.int64(), "float": pa.float64(), "text": pa.string(),
             "nested": pa.struct([("city", pa.string()), ("zip", pa.int64())])}
    fields = []
    for name, (kind, values) in columns.items():
        if kind == "date":
            has_time = any(isinstance(row[name], dt.datetime) for row in rows)
            fields.append(pa.field(name, pa.timestamp("us") if has_time else pa.date32()))
        else:
            fields.append(pa.field(name, types[kind]))
    return pa.Table.from_pylist(rows, schema=pa.schema(fields))


def _avro_schema(columns: dict, date_format: str) -> dict:
    types = {"int": "long", "float": "double", "text": "string",
             "date": ({"type": "long", "logicalType": "timestamp-micros"} if "%H" in date_format
                      else {"type": "int", "logicalType": "date"}),
             "nested": {"type": "record", "name": "place", "fields": [
                 {"name": "city", "type": "string"}, {"name": "zip", "type": "long"}]}}
    fields = [{"name": f"f{i}", "type": ["null", dict(types[kind], name=f"place{i}")
                                         if kind == "nested" else types[kind]]}
              for i, (kind, _) in enumerate(columns.values())]
    for field, name in zip(fields, columns):
        field["name"] = name
    return {"type": "record", "name": "row", "fields": fields}


def _pandas(path: Path, fmt: str, encoding: str):
    """The table as pandas reads it, every value exact: pandas' default dtypes
    turn an integer column holding a null into float64, which rounds 2**63 - 1
    to 2**63 (and any integer past 2**53), a wrong reference for the exact
    int64 the build stores. So CSV columns are text (as init reads them: its wide
    integers stay text), Parquet columns Arrow-backed (ints stay int64 beside
    nulls, nested structs too), and the rows of JSON, JSONL and Avro objects,
    as their readers give them."""
    if fmt == "csv":
        return pd.read_csv(path, dtype=str, encoding=encoding)
    if fmt == "parquet":
        return pd.read_parquet(path, dtype_backend="pyarrow")
    if fmt == "avro":
        import fastavro
        with open(path, "rb") as f:
            rows = list(fastavro.reader(f))
    elif fmt == "jsonl":
        rows = [json.loads(line) for line in path.read_text().splitlines()]
    else:
        rows = json.loads(path.read_text())
    return pd.DataFrame(rows, dtype=object)


def _records(folder: Path) -> dict:
    rows = {}
    for shard in sorted(folder.glob("*.tfrecord")):
        for raw in tfrecord_iterator(str(shard)):
            example = example_pb2.Example()
            example.ParseFromString(bytes(raw))
            row = {name: list(getattr(f, f.WhichOneof("kind")).value)
                   for name, f in example.features.feature.items()}
            rows[row["id"][0]] = row
    return rows


def _missing(value) -> bool:
    return value is None or value is pd.NaT or value is pd.NA or (
        isinstance(value, float) and math.isnan(value))


def _expected(value, feature: dict):
    kind = feature["type"]
    if kind == "int64":
        return [int(value)]
    if kind == "float":
        return [np.float32(float(value))]
    if kind in ("string", "bytes"):
        return [str(value).encode()]
    fmt = feature.get("format")
    stamp = pd.to_datetime(value, format=fmt) if isinstance(value, str) else pd.Timestamp(value)
    stamp = stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp
    return [stamp.value // UNIT_NANOS[feature["unit"]]]


def _column(frame, source):
    if isinstance(source, str):
        return list(frame[source])
    return [None if _missing(top) else top.get(source[1]) for top in frame[source[0]]]


def _int_beside_null(fmt: str, value: int):
    return fmt, "utf-8", "%Y-%m-%d", {"id": ("int", [0, 1]), "NULL": ("int", [None, value])}


@pytest.mark.slow
@settings(**_SETTINGS)
@given(table=_tables())
# Int columns holding a null beside a value float64 rounds, kept exact.
@example(table=_int_beside_null("parquet", 2 ** 63 - 1))
@example(table=_int_beside_null("jsonl", 2 ** 63 - 1))
@example(table=_int_beside_null("json", 2 ** 53 + 1))
@example(table=_int_beside_null("avro", -2 ** 63 + 1))
def test_init_then_build_reads_back_as_pandas_reads_the_table(tmp_path, table):
    fmt, encoding, date_format, columns = table
    for child in tmp_path.iterdir():
        child.unlink() if child.is_file() else None
    path = tmp_path / f"t.{fmt}"
    _write(path, fmt, encoding, date_format, columns)
    config_path, out = tmp_path / "c.yaml", tmp_path / "out"
    assert main(["init", str(path), "-o", str(config_path), "--output-path", str(out)]) == 0
    assert main(["build", str(config_path), "--overwrite"]) == 0
    text = config_path.read_text()
    config = yaml.safe_load(text)
    features = config["features"]
    for name, (kind, _) in columns.items():
        if kind == "wide" and fmt != "csv":
            # A known gap, stated in the config: JSON integers beyond int64
            # have no exact feature type until string features take numbers.
            assert f"# {yaml.safe_dump(name, allow_unicode=True).splitlines()[0]}: no feature: " \
                in text, text
        elif kind != "nested":
            assert name in features, (name, text)
    frame = _pandas(path, fmt, encoding)
    records = _records(out / "1.0.0")
    assert sorted(records) == sorted(int(i) for i in frame["id"])
    for name, feature in features.items():
        for ident, value in zip(frame["id"], _column(frame, feature.get("from", name))):
            ours = records[int(ident)].get(name)
            if _missing(value):
                assert ours is None, (name, ident, ours, text)
            else:
                assert ours == _expected(value, feature), (name, ident, value, ours, text)


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_dotted_top_level_names_are_plain_columns(tmp_path, fmt):
    rows = [{"id": i, "a.b": i * 7, "a": {"b": -i}} for i in range(4)]
    path = tmp_path / f"t.{fmt}"
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq
        pq.write_table(pa.Table.from_pylist(rows), path)
    config_path, out = tmp_path / "c.yaml", tmp_path / "out"
    assert main(["init", str(path), "-o", str(config_path), "--output-path", str(out)]) == 0
    features = yaml.safe_load(config_path.read_text())["features"]
    assert features["a.b"] == {"type": "int64"} and features["a/b"]["from"] == ["a", "b"]
    assert main(["build", str(config_path)]) == 0
    records = _records(out / "1.0.0")
    assert all(records[i]["a.b"] == [i * 7] and records[i]["a/b"] == [-i] for i in range(4))
