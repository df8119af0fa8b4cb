"""The Example codec against independently generated protobuf code."""

import math
import struct

import pytest
from hypothesis import given, settings, strategies as st
from tfrecord import example_pb2  # independent generated tensorflow.Example

from recordforge.schemas import example

_FIELD = {"int64": "int64_list", "float": "float_list", "bytes": "bytes_list"}

FLOAT32_MAX = struct.unpack("<f", struct.pack("<I", 0x7F7FFFFF))[0]
FLOAT32_MIN_SUBNORMAL = struct.unpack("<f", struct.pack("<I", 1))[0]
FLOAT32_MIN_NORMAL = struct.unpack("<f", struct.pack("<I", 0x00800000))[0]


def _as_float32(value):
    return struct.unpack("<f", struct.pack("<f", value))[0]


def _independent(features):
    """Serializes with the tfrecord package's generated message."""
    message = example_pb2.Example()
    for name, (kind, values) in features.items():
        field = getattr(message.features.feature[name], _FIELD[kind])
        field.SetInParent()
        field.value.extend(values)
    return message


def _independent_decode(data):
    message = example_pb2.Example()
    message.ParseFromString(data)
    out = {}
    for name, feature in message.features.feature.items():
        which = feature.WhichOneof("kind")
        out[name] = (which, list(getattr(feature, which).value))
    return out


def _same(a, b):
    """Value equality where NaN equals NaN."""
    return len(a) == len(b) and all(
        (isinstance(x, float) and math.isnan(x) and math.isnan(y)) or x == y for x, y in zip(a, b))


CASES = {
    "int64 extremes": {"i": ("int64", [0, 1, -1, 127, 128, 16383, 16384, 2**63 - 1, -(2**63)])},
    "float32 extremes": {"f": ("float", [0.0, -0.0, 1.5, FLOAT32_MAX, -FLOAT32_MAX,
                                         FLOAT32_MIN_SUBNORMAL, FLOAT32_MIN_NORMAL,
                                         float("inf"), float("-inf")])},
    "bytes": {"b": ("bytes", [b"", b"\x00\xff\x80", "naïve ünïcode ✓".encode("utf-8")])},
    "empty lists": {"ei": ("int64", []), "ef": ("float", []), "eb": ("bytes", [])},
    "long lists": {"li": ("int64", list(range(-5000, 5000))),
                   "lf": ("float", [i / 7 for i in range(3000)]),
                   "lb": ("bytes", [bytes([i % 256]) * (i % 50) for i in range(2000)])},
    "big value": {"big": ("bytes", [b"\x01" * 300_000])},
    "unicode keys": {"é": ("int64", [1]), "e": ("int64", [2]), "ß/ẞ": ("bytes", [b"x"]),
                     "": ("float", [2.0])},
    "prefix keys": {"label": ("int64", [1]), "label/text": ("bytes", [b"cat"]),
                    "image": ("bytes", [b"\xff\xd8"]), "image/height": ("int64", [4])},
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_our_bytes_decode_with_independent_code(name):
    features = CASES[name]
    decoded = _independent_decode(example.encode_example(features))
    assert set(decoded) == set(features)
    for key, (kind, values) in features.items():
        which, got = decoded[key]
        assert which == _FIELD[kind]
        expected = [_as_float32(v) for v in values] if kind == "float" else values
        assert _same(got, expected), key


@pytest.mark.parametrize("name", sorted(CASES))
def test_independent_bytes_decode_with_our_decoder(name):
    features = CASES[name]
    data = _independent(features).SerializeToString()
    decoded = example.decode_example(data)
    for key, (kind, values) in features.items():
        got_kind, got = decoded[key]
        assert got_kind == kind
        expected = [_as_float32(v) for v in values] if kind == "float" else values
        assert _same(got, expected), key


@pytest.mark.parametrize("name", sorted(CASES))
def test_encoding_is_byte_identical_to_protobuf_with_key_ordered_entries(name):
    features = CASES[name]
    ours = example.encode_example(features)
    # Independent serialization of the same Example, one map entry at a time
    # in UTF-8 key order (C++ protobuf's deterministic order).
    entries = b""
    for key in sorted(features, key=lambda k: k.encode("utf-8")):
        single = _independent({key: features[key]}).features.SerializeToString()
        entries += single
    expected = b"\x0a" + _varint(len(entries)) + entries
    assert ours == expected


def _varint(n):
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def test_nan_survives():
    [value] = example.decode_example(example.encode_example({"x": float("nan")}))["x"][1]
    assert math.isnan(value)


def test_the_same_input_always_gives_the_same_bytes_whatever_the_mapping_order():
    a = {"b": [1], "a": [b"x"], "c": [1.0]}
    b = {"c": [1.0], "a": [b"x"], "b": [1]}
    assert example.encode_example(a) == example.encode_example(b)


@pytest.mark.parametrize("features, message", [
    ({"x": 2**63}, "does not fit in int64"),
    ({"x": -(2**63) - 1}, "does not fit in int64"),
    ({"x": 3.5e38}, "does not fit in float32"),
    ({"x": [1, "a"]}, "values must all be"),
    ({"x": []}, "empty list has no type"),
    ({"x": [True]}, "values must all be"),
    ({"x": ("int64", [1.5])}, "not an integer"),
])
def test_values_that_do_not_fit_are_errors(features, message):
    with pytest.raises(example.ExampleValueError, match=message):
        example.encode_example(features)


def test_largest_double_that_rounds_to_a_finite_float32_is_accepted():
    just_below = math.nextafter(3.4028235677973366e38, 0)
    [value] = example.decode_example(example.encode_example({"x": just_below}))["x"][1]
    assert value == FLOAT32_MAX


def test_encoder_with_declared_kinds_skips_missing_features_and_pickles():
    import pickle
    encoder = pickle.loads(pickle.dumps(example.ExampleEncoder({"a": "int64", "b": "bytes"})))
    assert example.decode_example(encoder.encode({"a": [5]})) == {"a": ("int64", [5])}
    assert example.decode_example(encoder.encode({"a": [5], "b": None})) == {"a": ("int64", [5])}


def test_decode_rejects_garbage():
    with pytest.raises(example.ExampleDecodeError):
        example.decode_example(b"\x0a\xff\xff\xff")


_values = {
    "int64": st.lists(st.integers(-(2**63), 2**63 - 1), max_size=20),
    "float": st.lists(st.floats(width=32, allow_nan=False), max_size=20),
    "bytes": st.lists(st.binary(max_size=40), max_size=10),
}
_feature = st.sampled_from(sorted(_values)).flatmap(lambda kind: st.tuples(st.just(kind), _values[kind]))


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=12), _feature, max_size=8))
def test_round_trip_and_independent_agreement(features):
    data = example.encode_example(features)
    assert example.decode_example(data) == {k: (kind, list(v)) for k, (kind, v) in features.items()}
    assert _independent_decode(data) == {k: (_FIELD[kind], list(v)) for k, (kind, v) in features.items()}
    # Re-encoding what was decoded gives the same bytes (canonical form).
    assert example.encode_example(example.decode_example(data)) == data
