"""RowEncoder.encode's one-call-per-feature path against the reference path
(convert, then ExampleEncoder): same bytes for every good row, the same
RowError for every bad one, over a seeded mix of good and bad values."""

import random

import pytest

from recordforge.schemas.dead_letters import RowError
from recordforge.schemas.example import decode_example
from recordforge.schemas.feature_config import parse_features
from recordforge.schemas.row_encoder import RowEncoder

SCHEMA = {
    "id": {"type": "int64", "min": 0},
    "count": {"type": "int64", "values": [1, 2, 3, 70000], "required": False},
    "score": {"type": "float", "min": -1e6, "max": 1e6},
    "text": {"type": "string", "max_bytes": 12},
    "blob": {"type": "bytes", "default": "none"},
    "label": {"type": "int64", "from": "label_text", "vocabulary": ["cat", "dog", "ü"]},
    "tags": {"type": "string", "shape": [-1], "required": False},
    "a/b": {"type": "float", "shape": [2], "default": [0.5, 1.5]},
}

# column -> (values that pass, values that fail or take the complete rules)
CHOICES = {
    "id": ([0, 7, 20000, 2 ** 62, "12", " 5", 1.0, True],
           ["1_0", "-1", "x", 1.5, None, "\u0663"]),
    "count": ([1, 3, 70000, "2", None, "", "70000"], [4, "x"]),
    "score": ([0.25, "1e3", -3, 2.5e-40, "1.5"], ["nan", "inf", 1e7, "0x1", None, "", "  "]),
    "text": (["hello", "h\u00e9llo", "x" * 12, b"bytes"],
             ["", "x" * 13, b"\xff", 3, None, "\ud800"]),
    "blob": ([b"\x00\x01", "text", b"", None, bytearray(b"ab")], [5]),
    "label_text": (["cat", "dog", "\u00fc", b"cat"], ["Cat", " dog", None, 1]),
    "tags": ([["a", "b"], [], "one", None], [["a", None], [1]]),
    "a/b": ([[1, 2], [1.5, "2"], None], [[1], "3"]),
}


def reference(encoder, values):
    try:
        return encoder.encode_converted(encoder.convert(values)), None
    except RowError as error:
        return None, (error.reason, error.feature, error.message)


def fused(encoder, values):
    try:
        return encoder.encode(values), None
    except RowError as error:
        return None, (error.reason, error.feature, error.message)


def test_random_rows_encode_like_the_reference_path():
    encoder = RowEncoder(parse_features(SCHEMA))
    rng = random.Random(1234)
    good = bad = 0
    for _ in range(3000):
        values = {column: rng.choice(good_values if rng.random() < 0.93 else bad_values)
                  for column, (good_values, bad_values) in CHOICES.items()}
        if rng.random() < 0.1:
            del values[rng.choice(list(values))]
        expected = reference(encoder, values)
        assert fused(encoder, values) == expected, values
        good += expected[0] is not None
        bad += expected[1] is not None
    # Both paths were exercised.
    assert good > 100 and bad > 100


@pytest.mark.parametrize("value", [0, 127, 128, 16383, 16384, 2 ** 21 - 1, 2 ** 21, -1,
                                   -(2 ** 63), 2 ** 63 - 1])
def test_int64_scalars_at_varint_boundaries(value):
    encoder = RowEncoder(parse_features({"n": {"type": "int64"}}))
    data = encoder.encode({"n": value})
    assert data == encoder.encode_converted(encoder.convert({"n": value}))
    assert decode_example(data) == {"n": ("int64", [value])}


@pytest.mark.parametrize("size", [0, 1, 127, 128, 16383, 16384, 70000])
def test_bytes_scalars_of_every_length_prefix_size(size):
    encoder = RowEncoder(parse_features({"b": {"type": "bytes"}}))
    value = bytes(range(256)) * (size // 256) + bytes(size % 256)
    data = encoder.encode({"b": value})
    assert data == encoder.encode_converted(encoder.convert({"b": value}))
