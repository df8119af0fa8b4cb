"""The table kernels' declared null texts and ISO 8601 timestamps against the Python path.

Generated schemas mix timestamp features (every unit, UTC or a zone with
daylight saving, allowed values, defaults) with number, text and
vocabulary features, any of them with `null_values` (per feature or not)
and required, optional or defaulted. Generated fields hold every listed
null text, blank and whitespace variants, quoted text, and timestamps of
every shape: dates alone, times to the minute or second, fractions of 0-12
digits, `Z`, `z` and offsets, leap days, impossible dates, years near the
int64 nanosecond limit and before 1970, and hostile text. CSV runs, JSONL
runs and Arrow record batches are converted by a converter with the kernel
and one without: Examples, keys, labels, dead letters, statistics and
digests must be equal, byte for byte.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from recordforge.schemas.feature_config import parse_features
from recordforge.transforms.batch_converter import BatchConverter
from recordforge.transforms.merge_statistics import OMITTED, PRESENT, PartlyChecked
from recordforge.transforms.readers.arrow_batch import ArrowBatch
from recordforge.transforms.readers.csv import CsvRunBatch, iter_csv
from recordforge.transforms.readers.jsonl import JsonlRunBatch, iter_jsonl
from recordforge.transforms.readers.rows import ColumnBatch

_spec = importlib.util.spec_from_file_location("kernel_cases",
                                               Path(__file__).with_name("kernel_cases.py"))
cases = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cases)

COLUMNS = ["c0", "c1", "c2", "c3"]
VOCABULARY = ["cat", "dog", "NA"]
NULL_TEXTS = ["", "NA", "-", "null", "n/a", " ", "NaN", "0"]
BLANKS = ["", " ", "  ", "\t", " \t ", "\x1f", "\u00a0", "\u3000", " NA", "NA ", "na", "Na"]
HOSTILE_TIMES = ["2024-02-30", "2023-02-29", "2024-02-29", "2000-02-29", "1900-02-29",
                 "0000-01-01", "0001-01-01", "9999-12-31T23:59:59.999999999Z", "2024-13-01",
                 "2024-00-10", "2024-01-00", "2024-01-32", "2024-1-01", "20240101",
                 "2024-W01-1", "2024-001", " 2024-01-01", "2024-01-01 ", "2024-01-01Z",
                 "2024-01-01T24:00", "2024-01-01T23:60", "2024-01-01T12:00:60", "2024-01-01T12",
                 "2024-01-01T1200", "2024-01-01T12:30.5", "2024-01-01T12:30,5Z",
                 "2024-01-01T12:00:00.", "2024-01-01T12:00:00.Z", "2024-01-01T12:00+0100",
                 "2024-01-01T12:00+01", "2024-01-01T12:00+24:00", "2024-01-01T12:00+01:60",
                 "2024-01-01t12:00Z", "2024-01-01T12:00ZZ", "2024-01-01X12:00",
                 "2262-04-11T23:47:16.854775807Z", "2262-04-11T23:47:16.854775808Z",
                 "1677-09-21T00:12:43.145224192Z", "1677-09-21T00:12:43.145224191Z",
                 "1969-12-31T23:59:59.999999999Z", "1969-12-31T23:59:59.9999999999999Z",
                 "2024-03-31T02:30:00", "2024-10-27T02:30:00", "2024-10-27T02:30:00+01:00",
                 "\u0662024-01-01", "2024-01-01T12:00:00\u00a0", "1e9", "1700000000", "now",
                 "2024-01-01T12:00:00.5-00:00", "2024-06-30T23:59:59,123456789+23:59"]

two = st.integers(0, 99).map("{:02d}".format)


@st.composite
def iso_texts(draw) -> str:
    """ISO 8601 text of every shape, mostly valid, near the edges often."""
    year = draw(st.one_of(st.integers(1, 9999), st.sampled_from([1, 1677, 1678, 1969, 1970,
                                                                 2000, 2024, 2261, 2262, 9999])))
    month = draw(st.one_of(st.integers(1, 12), two))
    day = draw(st.one_of(st.integers(1, 28), st.integers(29, 31), two))
    text = f"{year:04d}-{int(month):02d}-{int(day):02d}"
    if draw(st.integers(0, 4)) == 0:
        return text
    text += draw(st.sampled_from(["T", "T", " ", "t"]))
    minutes = st.integers(0, 59).map("{:02d}".format) | two
    text += f"{draw(st.integers(0, 23) | two)}:{draw(minutes)}"
    if draw(st.booleans()):
        text += f":{draw(minutes)}"
        if draw(st.booleans()):
            text += draw(st.sampled_from([".", ".", ","])) + draw(st.text("0123456789",
                                                                          max_size=12))
    zone = draw(st.integers(0, 4))
    if zone == 1:
        text += draw(st.sampled_from(["Z", "Z", "z"]))
    elif zone >= 2:
        text += (draw(st.sampled_from("+-")) + f"{draw(st.integers(0, 23) | two)}:"
                 f"{draw(minutes)}")
    return text


field_texts = st.one_of(iso_texts(), st.sampled_from(HOSTILE_TIMES), st.sampled_from(NULL_TEXTS),
                        st.sampled_from(BLANKS), st.sampled_from(VOCABULARY),
                        st.integers(-10, 10).map(str), st.sampled_from(["1.5", "-0.0", "x"]))


@st.composite
def feature_bodies(draw, column: str) -> dict:
    kind = draw(st.sampled_from(["timestamp", "timestamp", "int64", "float", "string", "label"]))
    body: dict = {"from": column, "type": kind}
    if kind == "label":  # (an int64 feature with a vocabulary)
        body.update(type="int64", vocabulary=VOCABULARY)
    elif kind == "timestamp":
        body["unit"] = draw(st.sampled_from(["s", "ms", "us", "ns", "days"]))
        if draw(st.integers(0, 3)) == 0:
            body["timezone"] = draw(st.sampled_from(["Europe/Paris", "utc", "America/New_York"]))
        if draw(st.integers(0, 5)) == 0:
            body["values"] = [0, 19723, 1704067200]
    if draw(st.booleans()):
        body["null_values"] = draw(st.lists(st.sampled_from(NULL_TEXTS), max_size=4))
    if draw(st.booleans()):
        body["required"] = False
    elif draw(st.integers(0, 2)) == 0:
        body["default"] = {"timestamp": "2024-01-01", "int64": "3", "float": "0.1",
                           "string": "x", "label": "dog"}[kind]
    return body


schemas = cases.schemas(st.sampled_from(COLUMNS).flatmap(feature_bodies), COLUMNS, most=4,
                        suffixes=("",), source_nulls=st.one_of(
                            st.none(), st.lists(st.sampled_from(NULL_TEXTS), max_size=3)))


rows_of_fields = st.lists(st.lists(field_texts, min_size=len(COLUMNS), max_size=len(COLUMNS)),
                          min_size=1, max_size=12)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=schemas, rows=rows_of_fields, quoted=st.integers(-1, 20))
def test_csv_runs_agree(native, outcome, tmp_path_factory, schema, rows, quoted):
    specs, key, label = schema
    lines = [",".join(fields) for fields in rows]
    if 0 <= quoted < len(lines):
        lines[quoted] = ",".join(f'"{field}"' for field in rows[quoted])  # not a plain run
    path = tmp_path_factory.mktemp("csv") / "t.csv"
    path.write_text("\n".join([",".join(COLUMNS)] + lines) + "\n", encoding="utf-8")
    for item in iter_csv(str(path), columns=True):
        if isinstance(item, dict):
            continue  # a read dead letter: the reader's, the same on both paths
        cases.agree(native, outcome, specs, key, label,
               item if isinstance(item, ColumnBatch) else [item])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=schemas, rows=rows_of_fields, data=st.data())
def test_jsonl_runs_agree(native, outcome, tmp_path_factory, schema, rows, data):
    """JSON strings (null texts among them), nulls, numbers and missing keys."""
    specs, key, label = schema
    lines = []
    for fields in rows:
        values = {}
        for column, text in zip(COLUMNS, fields):
            how = data.draw(st.integers(0, 12))
            if how == 0:
                continue  # a missing key reads as null
            values[column] = None if how == 1 else 1700000000 if how == 2 else text
        lines.append(json.dumps(values, ensure_ascii=data.draw(st.booleans())))
    path = tmp_path_factory.mktemp("jsonl") / "t.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    for item in iter_jsonl(str(path), columns=True):
        if isinstance(item, dict):
            continue
        cases.agree(native, outcome, specs, key, label,
               item if isinstance(item, ColumnBatch) else [item])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=schemas, rows=rows_of_fields, nulls=st.lists(st.booleans(), min_size=12,
                                                             max_size=12))
def test_arrow_string_columns_agree(native, outcome, schema, rows, nulls):
    specs, key, label = schema
    columns = {column: pa.array([None if nulls[at] and index == 1 else fields[index]
                                 for at, fields in enumerate(rows)], pa.string())
               for index, column in enumerate(COLUMNS)}
    batch = ArrowBatch("t", 1, pa.record_batch(columns))
    cases.agree(native, outcome, specs, key, label, batch)


@pytest.mark.parametrize("body", [
    {"type": "timestamp", "unit": "ns"}, {"type": "timestamp", "unit": "days"},
    {"type": "timestamp", "unit": "us", "timezone": "Europe/Paris", "null_values": ["NA"]},
    {"type": "timestamp", "unit": "s", "null_values": ["", "NA"], "required": False},
    {"type": "timestamp", "unit": "ms", "null_values": ["", "NA", " "],
     "default": "1969-12-31T23:59:59.999Z"},
    {"type": "timestamp", "unit": "s", "values": [0, 1704067200]},
    {"type": "int64", "null_values": ["", "NA", "0"], "default": "-4"},
    {"type": "float", "null_values": ["", "NaN"], "required": False},
    {"type": "string", "null_values": ["NA", "-"], "required": False},
    {"type": "string", "null_values": ["NA"], "default": "none"},
    {"type": "int64", "vocabulary": VOCABULARY, "null_values": ["-"], "default": "NA"}],
    ids=lambda body: "-".join(map(str, body.values())))
def test_every_hostile_text_in_a_plain_run(native, outcome, tmp_path, body):
    """Each text in its column of a plain run, between good rows, as the
    value, the key and the label (text with a comma, which a plain run
    cannot hold, reaches the kernel in the JSONL and Arrow tests)."""
    specs = parse_features({"v": {**body, "from": "c0"}, "w": {"type": "int64", "from": "c1"}},
                           nested=False)
    lines = ["c0,c1"]
    texts = [text for text in HOSTILE_TIMES + NULL_TEXTS + BLANKS if "," not in text]
    for at, text in enumerate(texts):
        lines += [f"{text},{at}", f"2024-01-01T00:00:00Z,{at}"]
    path = tmp_path / "t.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    items = [item for item in iter_csv(str(path), columns=True) if not isinstance(item, dict)]
    [batch] = items
    assert isinstance(batch, CsvRunBatch)
    for key, label in ((None, None), ("c0", "v"), ("c1", "w")):
        cases.agree(native, outcome, specs, key, label, batch)


def test_the_kernel_takes_iso_text_and_null_texts(native, tmp_path):
    """The comparisons above mean something: a run of ISO text with `Z` or
    an offset, naive text in UTC, and listed null texts is the kernel's,
    every row taken, the timestamps' counts its int64 array."""
    specs = parse_features({
        "t": {"type": "timestamp", "unit": "ms", "from": "c0"},
        "n": {"type": "int64", "from": "c1", "null_values": ["", "NA"], "required": False},
        "d": {"type": "float", "from": "c2", "null_values": ["NA"], "default": "0.5"}},
        nested=False)
    path = tmp_path / "t.csv"
    path.write_text("c0,c1,c2\n2024-03-01T12:30:00.5+02:00,NA,NA\n1969-12-31T23:59:59.9999Z,,1\n"
                    "1970-01-02,7,2\n", encoding="utf-8")
    [batch] = list(iter_csv(str(path), columns=True))
    assert isinstance(batch, CsvRunBatch)
    examples, _, checked, _, _, _ = cases.converter(specs, None, native)._native.convert(batch)
    assert None not in examples
    assert checked["t"].tolist() == [1709289000500, -1, 86_400_000]
    # Left out in two rows: the statistics take the kernel's values and which rows hold one.
    assert isinstance(checked["n"], PartlyChecked)
    assert checked["n"].states.tolist() == [OMITTED, OMITTED, PRESENT]
    assert checked["n"].values[2] == 7
    assert checked["d"].tolist() == [0.5, 1.0, 2.0]
    python = BatchConverter(specs, {}, None)._encoder
    assert examples == [python.encode(dict(zip(["c0", "c1", "c2"], line.split(","))))
                        for line in path.read_text().splitlines()[1:]]


def test_naive_text_in_another_zone_is_declined(native, tmp_path):
    """Daylight saving stays Python's: naive text outside UTC is declined,
    text with an offset is taken."""
    specs = parse_features({"t": {"type": "timestamp", "timezone": "Europe/Paris",
                                  "from": "c0"}}, nested=False)
    path = tmp_path / "t.csv"
    path.write_text("c0\n2024-03-31T02:30:00\n2024-03-31T02:30:00+02:00\n", encoding="utf-8")
    [batch] = list(iter_csv(str(path), columns=True))
    examples = cases.converter(specs, None, native)._native.convert(batch)[0]
    assert examples[0] is None and examples[1] is not None


def test_a_jsonl_run_with_null_texts_takes_the_kernel(native, tmp_path):
    specs = parse_features({"t": {"type": "timestamp", "from": "a", "null_values": ["NA"],
                                  "required": False}}, nested=True)
    path = tmp_path / "t.jsonl"
    # (the file's first line is Python's, as the reader gives it)
    path.write_text('{"a": "NA"}\n' * 2 + '{"a": "2024-01-01T00:00:00Z"}\n{"a": null}\n',
                    encoding="utf-8")
    *_, batch = iter_jsonl(str(path), columns=True)
    assert isinstance(batch, JsonlRunBatch) and len(batch) == 3
    examples = cases.converter(specs, None, native)._native.convert(batch)[0]
    assert None not in examples
