"""Tests for the row checks (schemas/checks.py): conversions, every reason code,
and the encoded bytes read back by an independent Example parser."""

import decimal
import math
import pickle
import struct

import pytest
from tfrecord import example_pb2

from recordforge.schemas.dead_letters import REASONS, RowError
from recordforge.schemas.errors import ConfigError
from recordforge.schemas.feature_config import parse_features
from recordforge.schemas.row_encoder import RowEncoder
from recordforge.schemas.values import FLOAT32_OVERFLOW

FLT_MAX = struct.unpack("<f", b"\xff\xff\x7f\x7f")[0]


def encoder_for(**settings):
    """RowEncoder with one feature "x" read from column "c"."""
    settings.setdefault("from", "c")
    return RowEncoder(parse_features({"x": settings}))


def convert(settings, raw):
    return encoder_for(**settings).convert({"c": raw})


# (feature settings, raw value, stored values)
ACCEPTED = [
    # int64 from text
    ({"type": "int64"}, "42", [42]),
    ({"type": "int64"}, " -7 ", [-7]),
    ({"type": "int64"}, "+5", [5]),
    ({"type": "int64"}, "007", [7]),
    ({"type": "int64"}, "1.0", [1]),
    ({"type": "int64"}, "-3.000", [-3]),
    ({"type": "int64"}, "1e3", [1000]),
    ({"type": "int64"}, "9223372036854775807", [2 ** 63 - 1]),
    ({"type": "int64"}, "-9223372036854775808", [-2 ** 63]),
    ({"type": "int64"}, "9223372036854775807.0", [2 ** 63 - 1]),  # exact, no float rounding
    ({"type": "int64"}, "true", [1]),
    ({"type": "int64"}, "FALSE", [0]),
    ({"type": "int64"}, b"12", [12]),
    # int64 from JSON / Parquet values
    ({"type": "int64"}, 12, [12]),
    ({"type": "int64"}, True, [1]),
    ({"type": "int64"}, False, [0]),
    ({"type": "int64"}, 3.0, [3]),
    ({"type": "int64"}, decimal.Decimal("4.00"), [4]),
    ({"type": "int64"}, [5], [5]),  # one-element list for a scalar
    ({"type": "int64", "min": 0, "max": 10}, "10", [10]),
    ({"type": "int64", "values": [1, 3]}, "3", [3]),
    # float
    ({"type": "float"}, "0.25", [0.25]),
    ({"type": "float"}, " -1.5e3 ", [-1500.0]),
    ({"type": "float"}, ".5", [0.5]),
    ({"type": "float"}, "7", [7.0]),
    ({"type": "float"}, 7, [7.0]),
    ({"type": "float"}, True, [1.0]),
    ({"type": "float"}, "true", [1.0]),
    ({"type": "float"}, decimal.Decimal("0.5"), [0.5]),
    ({"type": "float"}, 1e-50, [1e-50]),  # underflows to 0 in float32: not an error
    ({"type": "float"}, FLT_MAX, [FLT_MAX]),
    ({"type": "float"}, math.nextafter(FLOAT32_OVERFLOW, 0), [math.nextafter(FLOAT32_OVERFLOW, 0)]),
    ({"type": "float", "allow_nan": True}, "inf", [math.inf]),
    ({"type": "float", "allow_nan": True}, "-Infinity", [-math.inf]),
    ({"type": "float", "min": 0, "max": 1}, "1", [1.0]),
    ({"type": "float", "values": [0.5, 1]}, "1.0", [1.0]),
    # string and bytes
    ({"type": "string"}, "héllo", ["héllo".encode()]),
    ({"type": "string"}, "  padded  ", [b"  padded  "]),  # whitespace is data
    ({"type": "string"}, b"caf\xc3\xa9", [b"caf\xc3\xa9"]),
    ({"type": "string", "max_bytes": 2}, "é", ["é".encode()]),  # 2 bytes
    ({"type": "string", "values": ["a", "b"]}, "b", [b"b"]),
    ({"type": "bytes"}, b"\x00\xff", [b"\x00\xff"]),
    ({"type": "bytes"}, bytearray(b"ab"), [b"ab"]),
    ({"type": "bytes"}, memoryview(b"ab"), [b"ab"]),
    ({"type": "bytes"}, "text", [b"text"]),
    ({"type": "bytes", "values": ["ok"]}, b"ok", [b"ok"]),
    # vocabulary
    ({"type": "int64", "vocabulary": ["cat", "dog"]}, "dog", [1]),
    ({"type": "int64", "vocabulary": ["cat", "dog"]}, b"cat", [0]),
    ({"type": "int64", "vocabulary": ["cat", "dog"], "shape": [-1]}, ["dog", "cat", "dog"],
     [1, 0, 1]),
    # shapes
    ({"type": "int64", "shape": [-1]}, [], []),
    ({"type": "int64", "shape": [-1]}, ["1", 2, 3.0], [1, 2, 3]),
    ({"type": "int64", "shape": [-1]}, "4", [4]),  # one value is a list of one
    ({"type": "int64", "shape": [2]}, (1, 2), [1, 2]),
    ({"type": "string", "shape": [-1]}, ["", "a"], [b"", b"a"]),  # "" inside a list is data
    ({"type": "float", "shape": [3], "allow_nan": True}, [1, "nan", 2.5], [1.0, math.nan, 2.5]),
    # missing values and defaults
    ({"type": "int64", "default": 9}, None, (9,)),
    ({"type": "int64", "default": 9}, "", (9,)),
    ({"type": "int64", "default": 9}, "   ", (9,)),
    ({"type": "string", "default": ""}, "", (b"",)),  # how to store empty strings
    ({"type": "int64", "vocabulary": ["a", "b"], "default": "b"}, None, (1,)),
    ({"type": "float", "shape": [2], "default": [0, 1]}, None, (0.0, 1.0)),
]


def _same(a, b):
    return len(a) == len(b) and all(
        (isinstance(x, float) and math.isnan(x) and isinstance(y, float) and math.isnan(y))
        or (x == y and type(x) is type(y)) for x, y in zip(a, b))


@pytest.mark.parametrize("settings, raw, expected", ACCEPTED,
                         ids=[f"{i}-{c[0]['type']}-{c[1]!r:.20}" for i, c in enumerate(ACCEPTED)])
def test_accepted_values(settings, raw, expected):
    got = convert(settings, raw)
    assert _same(got["x"], expected), got


# (feature settings, raw value, reason, words in the message)
REJECTED = [
    ({"type": "int64"}, None, "missing_value", "no value"),
    ({"type": "int64"}, "", "missing_value", "no value"),
    ({"type": "int64"}, " \t", "missing_value", "no value"),
    ({"type": "string"}, "", "missing_value", "no value"),
    ({"type": "int64", "vocabulary": ["a"]}, "", "missing_value", "no value"),
    ({"type": "int64"}, "12x", "type_mismatch", "'12x' is not an integer"),
    ({"type": "int64"}, "1.5", "type_mismatch", "not a whole number"),
    ({"type": "int64"}, "1_000", "type_mismatch", "no '_' separators"),
    ({"type": "int64"}, "١٢", "type_mismatch", "only ASCII digits"),
    ({"type": "int64"}, "0x10", "type_mismatch", "not an integer"),
    ({"type": "int64"}, "nan", "type_mismatch", "not an integer"),
    ({"type": "int64"}, "yes", "type_mismatch", "not an integer"),
    ({"type": "int64"}, 2.5, "type_mismatch", "not a whole number"),
    ({"type": "int64"}, math.inf, "type_mismatch", "not a whole number"),
    ({"type": "int64"}, {"a": 1}, "type_mismatch", "an object"),
    ({"type": "int64"}, b"\xff", "type_mismatch", "not valid UTF-8"),
    ({"type": "int64", "shape": [-1]}, [1, None], "type_mismatch", "element 1 is null"),
    ({"type": "int64", "shape": [-1]}, [1, ""], "type_mismatch", "element 1:"),
    ({"type": "int64"}, [None], "type_mismatch", "null"),
    ({"type": "float"}, "abc", "type_mismatch", "not a number"),
    ({"type": "float"}, "1_0.5", "type_mismatch", "no '_' separators"),
    ({"type": "float"}, [1.0, 2.0], "wrong_length", "expected one value, got a list of 2"),
    ({"type": "string"}, 5, "type_mismatch", "not text"),
    ({"type": "string"}, True, "type_mismatch", "not text"),
    ({"type": "bytes"}, 5, "type_mismatch", "not bytes or text"),
    ({"type": "int64", "vocabulary": ["1", "2"]}, 1, "type_mismatch", "labels are text"),
    ({"type": "int64"}, [], "wrong_length", "got a list of 0"),
    ({"type": "int64", "shape": [3]}, [1, 2], "wrong_length", "expected 3 values, got 2"),
    ({"type": "int64", "shape": [2]}, "1", "wrong_length", "expected 2 values, got 1"),
    ({"type": "int64", "min": 0}, "-1", "out_of_range", "outside [0, None]"),
    ({"type": "int64", "max": 10}, 11, "out_of_range", "outside [None, 10]"),
    ({"type": "float", "min": 0.0, "max": 1.0}, "1.0001", "out_of_range", "outside [0.0, 1.0]"),
    ({"type": "float", "min": 0, "allow_nan": True}, "-inf", "out_of_range", "outside"),
    ({"type": "int64", "shape": [-1], "max": 5}, [1, 9], "out_of_range", "element 1: 9"),
    ({"type": "int64", "values": [1, 2]}, "3", "not_allowed", "not one of [1, 2]"),
    ({"type": "float", "values": [0.5]}, 0.25, "not_allowed", "not one of [0.5]"),
    ({"type": "string", "values": ["a"]}, "A", "not_allowed", "not one of ['a']"),
    ({"type": "bytes", "values": ["a"]}, b"b", "not_allowed", "not one of ['a']"),
    ({"type": "int64", "vocabulary": ["daisy", "roses"]}, "tulips", "unknown_label",
     "'tulips' is not in the vocabulary"),
    ({"type": "int64", "vocabulary": ["daisy", "roses"]}, "daisy ", "unknown_label",
     "did you mean 'daisy'"),
    ({"type": "int64", "vocabulary": ["daisy", "roses"]}, "Roses", "unknown_label",
     "did you mean 'roses'"),
    ({"type": "string", "max_bytes": 3}, "abcd", "too_long", "4 bytes is longer than max_bytes (3)"),
    ({"type": "string", "max_bytes": 1}, "é", "too_long", "2 bytes"),
    ({"type": "bytes", "max_bytes": 2}, b"abc", "too_long", "max_bytes (2)"),
    ({"type": "float"}, "nan", "nan_or_inf", "is NaN"),
    ({"type": "float"}, math.nan, "nan_or_inf", "allow_nan"),
    ({"type": "float"}, "-inf", "nan_or_inf", "infinite"),
    ({"type": "float"}, math.inf, "nan_or_inf", "infinite"),
    ({"type": "float", "shape": [-1]}, [1.0, math.nan], "nan_or_inf", "element 1"),
    ({"type": "float"}, FLOAT32_OVERFLOW, "float32_overflow", "too large for float32"),
    ({"type": "float"}, -FLOAT32_OVERFLOW, "float32_overflow", "too large for float32"),
    ({"type": "float"}, "3.5e38", "float32_overflow", "too large for float32"),
    ({"type": "float"}, "1e400", "float32_overflow", "too large for float32"),
    ({"type": "float"}, 10 ** 400, "float32_overflow", "too large for float32"),
    ({"type": "float"}, decimal.Decimal("1e400"), "float32_overflow", "too large"),
    ({"type": "float", "allow_nan": True}, 1e39, "float32_overflow", "too large for float32"),
    ({"type": "int64"}, "9223372036854775808", "int64_overflow", "does not fit in int64"),
    ({"type": "int64"}, -2 ** 63 - 1, "int64_overflow", "does not fit in int64"),
    ({"type": "int64"}, 1e19, "int64_overflow", "does not fit in int64"),
    ({"type": "int64"}, "1e999999999", "int64_overflow", "does not fit in int64"),
    ({"type": "int64"}, "9" * 5000, "int64_overflow", "does not fit in int64"),
    ({"type": "int64", "min": 0}, "99999999999999999999", "int64_overflow", "int64"),
    ({"type": "string"}, b"\xc3\x28", "invalid_utf8", "not valid UTF-8"),
    ({"type": "string"}, "bad \ud800 text", "invalid_utf8", "unpaired surrogate"),
    ({"type": "bytes"}, "\udcff", "invalid_utf8", "unpaired surrogate"),
    ({"type": "int64", "vocabulary": ["a"]}, b"\xff", "invalid_utf8", "not valid UTF-8"),
]


@pytest.mark.parametrize("settings, raw, reason, words", REJECTED,
                         ids=[f"{i}-{c[2]}" for i, c in enumerate(REJECTED)])
def test_rejected_values_give_reason_and_message(settings, raw, reason, words):
    with pytest.raises(RowError) as raised:
        convert(settings, raw)
    error = raised.value
    assert error.reason == reason
    assert error.feature == "x"
    assert error.stage == "check"
    assert error.message.startswith("feature 'x' (column 'c'): ")
    assert words in error.message


def test_every_check_reason_code_is_covered_by_the_table():
    check_reasons = {"missing_value", "type_mismatch", "wrong_length", "out_of_range",
                     "not_allowed", "unknown_label", "too_long", "nan_or_inf",
                     "float32_overflow", "int64_overflow", "invalid_utf8"}
    assert check_reasons <= set(REASONS)
    assert {case[2] for case in REJECTED} == check_reasons


def test_optional_feature_without_default_is_left_out():
    encoder = RowEncoder(parse_features({
        "a": {"type": "int64"},
        "b": {"type": "string", "required": False},
        "c": {"type": "float", "shape": [-1], "required": False},
    }))
    assert encoder.convert({"a": "1"}) == {"a": [1]}
    assert encoder.convert({"a": "1", "b": "", "c": None}) == {"a": [1]}
    assert encoder.convert({"a": "1", "b": "x", "c": []}) == {"a": [1], "b": [b"x"], "c": []}


def test_missing_column_message_names_the_feature_and_column():
    encoder = RowEncoder(parse_features({"height": {"type": "int64", "from": "h"}}))
    with pytest.raises(RowError) as raised:
        encoder.convert({"w": 3})
    assert raised.value.reason == "missing_value"
    assert raised.value.message == "feature 'height' (column 'h'): no value"


def test_vocabulary_auto_uses_resolved_labels_and_checks_the_default():
    specs = parse_features({"label": {"type": "int64", "vocabulary": "auto", "default": "b"}})
    encoder = RowEncoder(specs, {"label": ("a", "b", "c")})
    assert encoder.convert({"label": "c"}) == {"label": [2]}
    assert encoder.convert({}) == {"label": (1,)}
    with pytest.raises(ConfigError) as raised:
        RowEncoder(specs, {"label": ("x", "y")})
    assert raised.value.key == "features.label.default"
    with pytest.raises(ConfigError) as raised:
        RowEncoder(specs)
    assert raised.value.key == "features.label.vocabulary"


def test_long_values_are_shortened_in_messages():
    with pytest.raises(RowError) as raised:
        convert({"type": "int64"}, "x" * 10_000)
    assert len(raised.value.message) < 200


def test_row_encoder_pickles_as_its_arguments():
    specs = parse_features({"n": {"type": "int64"}, "label": {"type": "int64",
                                                              "vocabulary": "auto"}})
    encoder = RowEncoder(specs, {"label": ["a", "b"]})
    copy = pickle.loads(pickle.dumps(encoder))
    row = {"n": "5", "label": "b"}
    assert copy.encode(row) == encoder.encode(row)
    assert len(pickle.dumps(encoder)) < 2000


FIVE_COLUMNS = {
    "id": {"type": "int64"},
    "count": {"type": "int64", "min": 0},
    "score": {"type": "float"},
    "text": {"type": "string", "max_bytes": 200},
    "label": {"type": "int64", "vocabulary": ["cat", "dog", "bird"]},
    "tags": {"type": "string", "shape": [-1], "required": False},
    "box": {"type": "float", "shape": [2], "default": [0.5, 1.5]},
}


def test_encode_reads_back_with_independent_example_pb2():
    encoder = RowEncoder(parse_features(FIVE_COLUMNS))
    data = encoder.encode({"id": "-12", "count": 3, "score": "0.1", "text": "héllo",
                           "label": "bird", "tags": ["a", "b"]})
    example = example_pb2.Example()
    example.ParseFromString(data)
    feature = example.features.feature
    assert sorted(feature) == ["box", "count", "id", "label", "score", "tags", "text"]
    assert list(feature["id"].int64_list.value) == [-12]
    assert list(feature["count"].int64_list.value) == [3]
    assert list(feature["score"].float_list.value) == [struct.unpack("<f", struct.pack("<f", 0.1))[0]]
    assert list(feature["text"].bytes_list.value) == ["héllo".encode()]
    assert list(feature["label"].int64_list.value) == [2]
    assert list(feature["tags"].bytes_list.value) == [b"a", b"b"]
    assert list(feature["box"].float_list.value) == [0.5, 1.5]
    # deterministic, and equal to protobuf's own deterministic serialization
    assert encoder.encode({"id": "-12", "count": 3, "score": "0.1", "text": "héllo",
                           "label": "bird", "tags": ["a", "b"]}) == data
    assert example.SerializeToString(deterministic=True) == data


def test_fast_and_full_paths_agree():
    # The same values through the fast path (str/int/float scalars) and through
    # the full rules (one-element lists, which the fast path never takes).
    encoder = RowEncoder(parse_features(FIVE_COLUMNS))
    scalars = {"id": "77", "count": 0, "score": 2.5, "text": "abc", "label": "dog"}
    lists = {key: [value] for key, value in scalars.items()}
    assert encoder.convert(scalars) == encoder.convert(lists)
    assert encoder.encode(scalars) == encoder.encode(lists)
