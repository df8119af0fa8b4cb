"""`recordforge init` proposes, for each column, a feature whose values the
build stores exactly (or no feature, saying why), and writes YAML that reads
back as written; each class is generated with hypothesis and checked with the
build's own converters (`schemas.checks.compile_feature`)."""

import csv
import datetime as dt
import io
import json

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from recordforge.pipelines.config.dataset import config_from_dict
from recordforge.pipelines.config.yaml_safe import safe_load
from recordforge.pipelines.init import infer_config
from recordforge.schemas.checks import compile_feature
from recordforge.schemas.errors import ConfigError
from recordforge.schemas.timestamps import UNIT_NANOS
from recordforge.transforms.readers.csv_dialect import CsvOptions
from recordforge.transforms.readers.rows import SourceRow, each_row
from recordforge.transforms.readers.tables import iter_table

pd = pytest.importorskip("pandas")

_SETTINGS = dict(max_examples=25, deadline=None,
                 suppress_health_check=[HealthCheck.function_scoped_fixture,
                                        HealthCheck.too_slow])
_NULL_TOKENS = ["", "NA", "NULL", "null", "None", "N/A", "n/a", "NaN", "nan", "<NA>", "#N/A"]
_YAML_WORDS = ["True", "true", "Yes", "yes", "ON", "on", "Off", "NULL", "null", "~", "y",
               "n", "1.5", "0x1F", "1e3", ".inf", "-.nan", "2024-01-01", "12:30", "a: b",
               "#c", "- x", "&a", "*a", "!t", "%p", "@x", "`x", "'q", '"q', "{x}", "[x]"]


def _config(text: str):
    return config_from_dict(safe_load(text, origin="test"))


def _specs(text: str) -> dict:
    return {spec.name: spec for spec in _config(text).features}


def _write_csv(path, header, rows, encoding="utf-8"):
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    path.write_bytes(buffer.getvalue().encode(encoding))


def _text_round_trips(spec, text: str) -> None:
    """The build stores CSV `text` under `spec` as exactly what it spells."""
    stored = compile_feature(spec)[0](text)
    if spec.type == "int64":
        assert stored == [int(text)], (spec, text, stored)
    elif spec.type == "string":
        assert stored == [text.encode()], (spec, text, stored)
    elif spec.type == "float":
        assert np.float32(stored[0]) == np.float32(float(text)), (spec, text, stored)
        if text.lstrip("+-").isdigit():  # an integer must survive float32 whole
            assert int(np.float32(stored[0])) == int(text), (spec, text, stored)
    else:
        assert spec.type == "timestamp", spec
        moment = pd.to_datetime(text, format=None if spec.format in (None, "iso8601")
                                else spec.format)
        moment = moment.tz_localize("UTC") if moment.tzinfo is None else moment
        assert stored == [moment.value // UNIT_NANOS[spec.unit]], (spec, text, stored)


# --- 38.1: integers of any width, mixed with fractions -----------------------------

_NUMBER_TEXT = st.one_of(
    st.integers(-(10 ** 22), 10 ** 22).map(str),
    st.integers(-(2 ** 63), 2 ** 63 - 1).map(str),
    st.sampled_from([str(2 ** 63), str(-(2 ** 63) - 1), "9007199254740993",
                     "1234567890123456789", "16777217"]),
    st.floats(allow_nan=False, allow_infinity=False, width=32).map(repr))


@settings(**_SETTINGS)
@given(values=st.lists(_NUMBER_TEXT, min_size=1, max_size=30))
def test_csv_numbers_are_stored_exactly_or_kept_as_text(tmp_path, values):
    path = tmp_path / "t.csv"
    _write_csv(path, ["v"], [[v] for v in values])
    spec = _specs(infer_config(str(path)))["v"]
    assert spec.type in ("int64", "float", "string")
    for text in values:
        _text_round_trips(spec, text)


@settings(**_SETTINGS)
@given(values=st.lists(st.one_of(st.integers(-(2 ** 80), 2 ** 80),
                                 st.floats(allow_nan=False, allow_infinity=False)),
                       min_size=1, max_size=20))
def test_json_numbers_get_an_exact_type_or_no_feature_with_the_reason(tmp_path, values):
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"id": i, "v": v}) + "\n" for i, v in enumerate(values)))
    text = infer_config(str(path))
    spec = _specs(text).get("v")
    if spec is None:
        assert "# v: no feature: " in text
        assert any(isinstance(v, int) and not -2 ** 63 <= v < 2 ** 63 for v in values) or \
            any(abs(v) >= 2 ** 24 and isinstance(v, int) for v in values) or \
            any(isinstance(v, float) and abs(v) > 3.4e38 for v in values)
        return
    convert = compile_feature(spec)[0]
    for value in values:
        stored = convert(value)
        if spec.type == "int64":
            assert stored == [int(value)] and value == int(value)
        else:
            assert spec.type == "float"
            assert np.float32(stored[0]) == np.float32(value)
            if isinstance(value, int):
                assert int(np.float32(stored[0])) == value


# --- 38.15: names and null texts that YAML would read as something else -------------

_NAMES = st.one_of(st.sampled_from(_YAML_WORDS),
                   st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")),
                           min_size=1, max_size=12))


@settings(**_SETTINGS)
@given(names=st.lists(_NAMES, min_size=1, max_size=6, unique=True),
       tokens=st.lists(st.sampled_from(_NULL_TOKENS), min_size=1, max_size=4))
def test_names_and_null_texts_read_back_as_written(tmp_path, names, tokens):
    # Leading/trailing blanks and dots are the reader's business, not YAML's.
    assume(all(n == n.strip() and n and "." not in n for n in names))
    path = tmp_path / "t.csv"
    rows = [[tokens[i % len(tokens)] if j == 0 else str(i) for j in range(len(names))]
            for i in range(6)]
    _write_csv(path, names, rows)
    text = infer_config(str(path))
    document = yaml.safe_load(text)
    features = document["features"]
    assert sorted(features) == sorted(names)
    for name in names:
        assert features[name].get("from", name) == name
    seen = sorted(set(tokens))
    if seen != [""]:  # "" alone is the standard rule: no list needed
        assert features[names[0]]["null_values"] == seen
    _config(text)


# --- 38.15: encodings, overflowing floats, impossible dates, non-ASCII digits ------

@settings(**_SETTINGS)
@given(texts=st.lists(st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF,
                                            blacklist_characters='",\x7f'),
                              min_size=1, max_size=8), min_size=1, max_size=20))
def test_latin1_text_is_read_whole_in_the_encoding_chosen(tmp_path, texts):
    assume(any(ord(ch) > 0x7F for t in texts for ch in t))
    path = tmp_path / "t.csv"
    _write_csv(path, ["id", "v"], [[i, t] for i, t in enumerate(texts)], encoding="latin-1")
    config = _config(infer_config(str(path)))
    options = config.source.csv or CsvOptions()
    items = list(each_row(iter_table(str(path), "csv", options)))
    assert all(isinstance(item, SourceRow) for item in items), items[:3]
    assert len(items) == len(texts)


_ODD_TEXT = st.one_of(
    st.builds(lambda e: f"1e{e}", st.integers(30, 400)),
    st.builds(lambda y, m, d: f"{y:04d}-{m:02d}-{d:02d}", st.integers(1900, 2100),
              st.integers(1, 19), st.integers(1, 45)),
    st.text(st.sampled_from("0123456789٠١٢٣٤٥٦٧٨٩０１２３"), min_size=1, max_size=6),
    st.integers(0, 10 ** 6).map(str))


@settings(**_SETTINGS)
@given(values=st.lists(_ODD_TEXT, min_size=1, max_size=20))
def test_odd_numbers_and_dates_build_as_they_read(tmp_path, values):
    path = tmp_path / "t.csv"
    _write_csv(path, ["v"], [[v] for v in values])
    spec = _specs(infer_config(str(path)))["v"]
    for text in values:
        _text_round_trips(spec, text)


# --- 38.16: dates in the common formats --------------------------------------------

_FORMATS = ["%Y-%m-%d", "%Y/%m/%d", "%Y/%m/%d %H:%M", "%m/%d/%Y", "%d/%m/%Y", "%b %d %Y",
            "%d %b %Y", "%B %d, %Y", "%Y-%m-%d %H:%M:%S", "%d.%m.%Y", "%Y-%m-%dT%H:%M:%SZ"]


@settings(**_SETTINGS)
@given(fmt=st.sampled_from(_FORMATS),
       moments=st.lists(st.datetimes(dt.datetime(1900, 1, 1), dt.datetime(2100, 1, 1)),
                        min_size=1, max_size=20))
def test_dates_in_common_formats_become_timestamps_with_their_pattern(tmp_path, fmt, moments):
    path = tmp_path / "t.csv"
    texts = [m.strftime(fmt) for m in moments]
    _write_csv(path, ["when"], [[t] for t in texts])
    text = infer_config(str(path))
    spec = _specs(text)["when"]
    assert spec.type == "timestamp", text
    ambiguous = "also fits" in text
    convert = compile_feature(spec)[0]
    for moment, written in zip(moments, texts):
        read_back = dt.datetime.strptime(written.replace("Z", ""), fmt.replace("Z", ""))
        if ambiguous:  # day-first and month-first both fit: the comment says so
            _text_round_trips(spec, written)
            continue
        nanos = int((read_back.replace(tzinfo=dt.timezone.utc)
                     - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)).total_seconds()) \
            * 10 ** 9
        assert convert(written) == [nanos // UNIT_NANOS[spec.unit]], (fmt, written, spec)


def test_pandas_parquet_whole_doubles_and_midnight_timestamps(tmp_path):
    frame = pd.DataFrame({"n": pd.array([1.0, None, 3.0, 2.0 ** 40], dtype="float64"),
                          "x": [0.5, 1.0, 2.0, 3.0],
                          "d": pd.to_datetime(["2020-01-01", "2021-06-30", None, "1969-12-31"]),
                          "t": pd.to_datetime(["2020-01-01 10:00"] * 4)})
    frame.to_parquet(tmp_path / "t.parquet")
    text = infer_config(str(tmp_path / "t.parquet"))
    specs = _specs(text)
    assert (specs["n"].type, specs["x"].type) == ("int64", "float")
    assert (specs["d"].unit, specs["t"].unit) == ("days", "us")
    assert "midnight" in text and "whole" in text


def test_whole_doubles_beyond_int64_are_proposed_as_float(tmp_path):
    """A double column of whole values is proposed as int64 only when every
    value fits one: beyond it, the int64 feature would turn rows away."""
    for beyond in (-4.220031131080483e+33, 2.0 ** 63):
        frame = pd.DataFrame({"n": pd.array([1.0, None, beyond], dtype="float64")})
        frame.to_parquet(tmp_path / "t.parquet")
        text = infer_config(str(tmp_path / "t.parquet"))
        assert _specs(text)["n"].type == "float", text
        assert "beyond int64" in text
    frame = pd.DataFrame({"n": pd.array([1.0, None, -(2.0 ** 63)], dtype="float64")})
    frame.to_parquet(tmp_path / "t.parquet")  # int64's least value: still int64
    assert _specs(infer_config(str(tmp_path / "t.parquet")))["n"].type == "int64"


@settings(**_SETTINGS)
@given(values=st.one_of(
    st.lists(st.integers(-(2 ** 63), 2 ** 63 - 1), min_size=1, max_size=20),
    st.lists(st.floats(allow_nan=False, allow_infinity=False, width=32), min_size=1,
             max_size=20)))
def test_the_observed_range_comment_gives_the_least_and_greatest_value_exactly(tmp_path,
                                                                              values):
    """It showed 9.22337e+18 for int64's greatest value: six digits of it."""
    path = tmp_path / "t.csv"
    _write_csv(path, ["v"], [[repr(v)] for v in values])
    text = infer_config(str(path))
    line = next(line for line in text.splitlines() if "observed " in line)
    low, high = line.split("observed ", 1)[1].split(";")[0].split(" .. ")
    if all(isinstance(v, int) for v in values):
        assert (int(low), int(high)) == (min(values), max(values)), line
    else:
        assert (float(low), float(high)) == (min(values), max(values)), line


# --- 38.9: objects inside lists, empty objects, list<struct> -----------------------

_JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(-1000, 1000),
                       st.text(max_size=4))


def _json_containers(inner):
    # A named function: hypothesis reads a lambda cut over lines as not using its argument.
    return st.one_of(st.lists(inner, max_size=3),
                     st.dictionaries(st.sampled_from("abc"), inner, max_size=3))


_JSON = st.recursive(_JSON_LEAF, _json_containers, max_leaves=8)


def _dig(row, spec):
    value = row
    for key in spec.path or (spec.source,):
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


@settings(**_SETTINGS)
@given(rows=st.lists(st.dictionaries(st.sampled_from(["p", "q", "r"]), _JSON, min_size=1),
                     min_size=1, max_size=8))
def test_any_json_rows_give_a_config_whose_features_take_every_value(tmp_path, rows):
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    try:
        text = infer_config(str(path))
    except ConfigError as error:  # only a config error naming why (any other fails)
        assert "no column" in str(error) or "no feature" in str(error) or "can be a feature" \
            in str(error), error
        return
    for spec in _config(text).features:
        convert = compile_feature(spec)[0]
        for row in rows:
            convert(_dig(row, spec))  # raises RowError when the build would dead-letter


def test_parquet_list_of_structs_is_left_out_with_the_reason(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    table = pa.table({"id": [1, 2, 3],
                      "ls": pa.array([[{"a": 1}], [], None],
                                     pa.list_(pa.struct([("a", pa.int64())])))})
    pq.write_table(table, tmp_path / "t.parquet")
    text = infer_config(str(tmp_path / "t.parquet"))
    assert "# ls: no feature: its lists hold objects" in text
    assert set(_specs(text)) == {"id"}


# --- 38.15: a header that names a column twice ---------------------------------------

@settings(**_SETTINGS)
@given(names=st.lists(st.sampled_from(["a", "b", "True", "x y"]), min_size=2, max_size=5))
def test_a_repeated_header_name_is_reported_by_name_without_a_traceback(tmp_path, names,
                                                                        capsys):
    assume(len(set(names)) < len(names))
    path = tmp_path / "t.csv"
    _write_csv(path, names, [[str(i) for i in range(len(names))]])
    from recordforge.pipelines.cli import main
    assert main(["init", str(path)]) == 2
    err = capsys.readouterr().err
    repeated = sorted({n for n in names if names.count(n) > 1})
    assert "duplicate column names" in err and all(repr(n) in err for n in repeated), err
    assert "Traceback" not in err


# --- 38.16: native times keep their precision, dates at midnight become days -------

@settings(**_SETTINGS)
@given(nanos=st.lists(st.one_of(st.integers(-2 ** 62, 2 ** 62),
                                st.integers(-40_000, 40_000).map(lambda d: d * 86400 * 10 ** 9)),
                      min_size=1, max_size=10),
       unit=st.sampled_from(["ns", "us"]))
def test_parquet_times_are_stored_to_their_last_digit(tmp_path, nanos, unit):
    import pyarrow as pa
    import pyarrow.parquet as pq
    if unit == "us":
        nanos = [n // 1000 * 1000 for n in nanos]
    values = pa.array([n // (1000 if unit == "us" else 1) for n in nanos], pa.timestamp(unit))
    pq.write_table(pa.table({"t": values}), tmp_path / "t.parquet")
    spec = _specs(infer_config(str(tmp_path / "t.parquet")))["t"]
    convert = compile_feature(spec)[0]
    read = [row.values["t"] for row in each_row(iter_table(str(tmp_path / "t.parquet"),
                                                           "parquet"))]
    for raw, n in zip(read, nanos, strict=True):
        stored = convert(raw)[0] * UNIT_NANOS[spec.unit]
        assert stored == n, (spec.unit, raw, n, stored)
