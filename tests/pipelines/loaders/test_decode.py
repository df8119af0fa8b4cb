"""Example -> numpy values by the manifest's features, as recordforge.tf's
parse spec reads them: dtypes, shapes, defaults, and records that do not
fit named by shard, record and feature."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

from recordforge.pipelines.loaders import ExampleDecoder, RecordDecodeError
from recordforge.schemas.example import encode_example

FEATURES = {"n": {"type": "int64", "shape": []},
            "vec": {"type": "float", "shape": [2]},
            "many": {"type": "int64", "shape": [-1]},
            "maybe": {"type": "float", "required": False},
            "word": {"type": "bytes", "text": True},
            "blobs": {"type": "bytes", "shape": [-1]},
            "d": {"type": "int64", "default": 7},
            "dv": {"type": "float", "shape": [2], "default": ["nan", 1.5]},
            "db": {"type": "bytes", "default": {"base64": "AAE="}}}

float32s = st.floats(width=32, allow_nan=False)


@given(st.integers(-2**63, 2**63 - 1), st.lists(float32s, min_size=2, max_size=2),
       st.lists(st.integers(-2**63, 2**63 - 1), min_size=1, max_size=5), st.binary(max_size=20),
       st.lists(st.binary(max_size=5), min_size=1, max_size=3))
def test_values_come_back_with_the_manifest_dtypes_and_shapes(n, vec, many, word, blobs):
    record = encode_example({"n": [n], "vec": vec, "many": many, "word": [word],
                             "blobs": blobs})
    row = ExampleDecoder(FEATURES).decode(record, "s.tfrecord", 3)
    assert row["n"].dtype == np.int64 and row["n"].shape == () and int(row["n"]) == n
    assert row["vec"].dtype == np.float32 and row["vec"].tolist() == vec
    assert row["many"].dtype == np.int64 and row["many"].tolist() == many
    assert row["maybe"].dtype == np.float32 and row["maybe"].shape == (0,)
    assert row["word"] == word and row["blobs"] == blobs
    assert int(row["d"]) == 7 and row["db"] == b"\x00\x01"
    assert math.isnan(row["dv"][0]) and row["dv"][1] == 1.5


@pytest.mark.parametrize("values,problem", [
    ({"vec": [1.0, 2.0]}, "feature 'n' is missing and the manifest gives it no default"),
    ({"n": [1, 2], "vec": [1.0, 2.0]}, r"feature 'n' holds 2 values, but its shape is \[\]"),
    ({"n": [1], "vec": [1.0]}, r"feature 'vec' holds 1 values, but its shape is \[2\]"),
    ({"n": [1.5], "vec": [1.0, 2.0]}, "feature 'n' holds float values, but the manifest "
                                      "says int64"),
])
def test_a_record_that_does_not_fit_is_named(values, problem):
    record = encode_example({"word": [b"w"], **values})
    with pytest.raises(RecordDecodeError, match=rf"^s\.tfrecord: record 3: {problem}"):
        ExampleDecoder(FEATURES).decode(record, "s.tfrecord", 3)


def test_bytes_that_are_no_example_are_named():
    with pytest.raises(RecordDecodeError, match=r"s\.tfrecord: record 0: not a tf.train.Example"):
        ExampleDecoder(FEATURES).decode(b"\xff\xff\xff", "s.tfrecord", 0)
