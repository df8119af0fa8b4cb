"""decode_features: one or two features of an Example, as decode_example gives them."""

import pytest

from recordforge.schemas.example import (ExampleDecodeError, decode_example, decode_features,
                                         encode_example)


def _example():
    return encode_example({"label": 3, "image/encoded": b"\x89PNG...", "score": 0.5,
                           "tags": [b"a", b"b"], "empty": ("int64", [])})


def test_named_features_match_decode_example():
    data = _example()
    full = decode_example(data)
    assert decode_features(data, ["label", "tags", "empty"]) == {
        name: full[name] for name in ("label", "tags", "empty")}


def test_absent_names_are_left_out():
    assert decode_features(_example(), ["label", "missing"]) == {"label": ("int64", [3])}
    assert decode_features(_example(), []) == {}


def test_damaged_bytes_raise_like_decode_example():
    damaged = _example()[:-3]
    with pytest.raises(ExampleDecodeError):
        decode_example(damaged)
    with pytest.raises(ExampleDecodeError):
        decode_features(damaged, ["label"])
