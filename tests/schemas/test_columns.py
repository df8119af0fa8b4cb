"""RowEncoder.encode_many (a column at a time) against RowEncoder.encode (a
row at a time): every row encode_many encodes has encode's bytes, every row
it leaves to the row path is one the column path cannot vouch for, and
clean columns really take the column path."""

import math
import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recordforge.schemas.dead_letters import RowError
from recordforge.schemas.feature_config import parse_features
from recordforge.schemas.row_encoder import RowEncoder

SCHEMA = {
    "id": {"type": "int64", "min": 0},
    "count": {"type": "int64", "values": [1, 2, 3, 70000], "required": False},
    "score": {"type": "float", "min": -1e6, "max": 1e6},
    "ratio": {"type": "float", "values": [0.5, -0.0, 2.0], "required": False},
    "text": {"type": "string", "max_bytes": 12},
    "blob": {"type": "bytes", "default": "none"},
    "label": {"type": "int64", "from": "label_text", "vocabulary": ["cat", "dog", "ü"]},
    "tags": {"type": "string", "shape": [-1], "required": False},
}

# column -> (values of the column path's own type that pass, everything else:
# values that fail, or pass only through the complete rules)
CHOICES = {
    "id": ([0, 7, 127, 128, 20000, 2 ** 62, 2 ** 63 - 1],
           ["12", " 5", 1.0, True, "1_0", "-1", "x", 1.5, None, "\u0663", -3]),
    "count": ([1, 3, 70000], ["2", None, "", "70000", 4, "x", 2.0]),
    "score": ([0.25, -3.0, 2.5e-40, 1e6, -1e6, -0.0, 1e-45, 0.1],
              ["1e3", -3, "nan", "inf", 1e7, "0x1", None, "", "  ", math.nan]),
    "ratio": ([0.5, -0.0, 0.0, 2.0], ["0.5", 1.0, None, math.inf]),
    "text": (["hello", "h\u00e9llo", "x" * 12, "\u00fc" * 6],
             [b"bytes", "", "x" * 13, "\u00fc" * 7, 3, None, "\ud800"]),
    "blob": ([b"\x00\x01", b"", b"x" * 300, b"\x00"], ["text", None, bytearray(b"ab"), 5]),
    "label_text": (["cat", "dog", "\u00fc"], [b"cat", "Cat", " dog", None, 1]),
    "tags": ([["a", "b"], [], "one"], [None, ["a", None], [1]]),
}


def row_path(encoder, values):
    try:
        return encoder.encode(values)
    except RowError:
        return None


def check_batch(encoder, rows):
    examples, checked = encoder.encode_many(rows)
    assert len(examples) == len(rows)
    for values, example in zip(rows, examples):
        if example is not None:
            assert example == encoder.encode(values), values
    for name, column in checked.items():
        assert len(column) == len(rows)
        convert, source = encoder.converter(name), encoder.source_of(name)
        for values, value in zip(rows, column):
            assert convert(values.get(source)) == [value], (name, values)
    return examples, checked


def test_mixed_batches_encode_like_the_row_path():
    encoder = RowEncoder(parse_features(SCHEMA))
    rng = random.Random(99)
    by_column = taken = left = 0
    for _ in range(400):
        size = rng.choice([1, 2, 7, 40])
        # Some columns are clean in this batch (column path), others mixed.
        clean = {column: rng.random() < 0.6 for column in CHOICES}
        rows = []
        for _ in range(size):
            rows.append({column: rng.choice(good if clean[column] or rng.random() < 0.8
                                            else bad)
                         for column, (good, bad) in CHOICES.items()})
        examples, checked = check_batch(encoder, rows)
        by_column += len(checked)
        taken += sum(example is not None for example in examples)
        for values, example in zip(rows, examples):
            if example is None:
                left += 1
                # Only rows with a value outside the column path's own
                # types and checks are left to the row path.
                assert any(values[column] not in good
                           for column, (good, _) in CHOICES.items()), values
    assert by_column > 500 and taken > 1000 and left > 100


def test_clean_columns_take_the_column_path():
    encoder = RowEncoder(parse_features(SCHEMA))
    rows = [{column: good[i % len(good)] for column, (good, _) in CHOICES.items()}
            for i in range(50)]
    examples, checked = check_batch(encoder, rows)
    assert None not in examples
    # Every scalar feature went column-wise; the shaped one row by row.
    assert set(checked) == {"id", "count", "score", "ratio", "text", "blob", "label"}


def test_csv_text_columns_take_the_column_path():
    encoder = RowEncoder(parse_features({
        "id": {"type": "int64"}, "score": {"type": "float"}, "name": {"type": "string"}}))
    rows = [{"id": str(i * 7919 - 5000), "score": f"{i / 7:.5f}", "name": f"row {i}"}
            for i in range(300)]
    examples, checked = check_batch(encoder, rows)
    assert None not in examples and set(checked) == {"id", "score", "name"}


def test_one_bad_value_leaves_only_its_row():
    encoder = RowEncoder(parse_features({"id": {"type": "int64", "min": 0},
                                         "name": {"type": "string"}}))
    rows = [{"id": str(i), "name": "n"} for i in range(10)]
    rows[3]["id"] = "-4"
    rows[6]["name"] = ""
    examples, checked = check_batch(encoder, rows)
    assert [i for i, example in enumerate(examples) if example is None] == [3, 6]
    assert checked == {}  # neither column passed whole


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(min_value=-(2 ** 63), max_value=2 ** 63 - 1), min_size=1,
                max_size=30), st.booleans())
def test_int64_columns_at_every_varint_length(numbers, as_text):
    encoder = RowEncoder(parse_features({"n": {"type": "int64"}}))
    rows = [{"n": str(n) if as_text else n} for n in numbers]
    examples, checked = check_batch(encoder, rows)
    assert None not in examples and checked["n"] == numbers


@settings(max_examples=150, deadline=None)
@given(st.lists(st.floats(allow_nan=False, allow_infinity=False,
                          max_value=3.4028234663852886e38, min_value=-3.4028234663852886e38),
                min_size=1, max_size=30), st.booleans())
def test_float_columns_round_like_struct(numbers, as_text):
    encoder = RowEncoder(parse_features({"x": {"type": "float"}}))
    rows = [{"x": repr(x) if as_text else x} for x in numbers]
    examples, _ = check_batch(encoder, rows)
    assert None not in examples
    for x, example in zip(numbers, examples):
        assert example.endswith(struct.pack("<f", x))


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 3.4028235677973366e38])
def test_floats_that_need_the_complete_rules_leave_their_rows(value):
    encoder = RowEncoder(parse_features({"x": {"type": "float", "allow_nan": True}}))
    rows = [{"x": 1.0}, {"x": value}, {"x": 2.0}]
    examples, checked = check_batch(encoder, rows)
    assert examples[0] is not None and examples[2] is not None and "x" not in checked


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=40), min_size=1, max_size=20),
       st.sampled_from([0, 1, 200, 20000]))
def test_text_columns_of_any_size(texts, pad):
    encoder = RowEncoder(parse_features({"t": {"type": "string"}}))
    rows = [{"t": text + "p" * pad} for text in texts]
    examples, checked = check_batch(encoder, rows)
    valid = all(not any(0xD800 <= ord(c) <= 0xDFFF for c in text) for text in texts)
    assert ("t" in checked) == valid


def _wrapped(value, rng):
    """A value as a TFRecord source gives it: a list of one (or a tuple)."""
    return (value,) if rng.random() < 0.2 else [value]


def test_columns_of_one_item_lists_take_the_column_path():
    """An Example's features are lists: a column of one-item lists of clean
    values takes the column path as the values themselves would, with the
    row path's bytes and checked values."""
    encoder = RowEncoder(parse_features(SCHEMA))
    rng = random.Random(5)
    rows = [{column: (good[i % len(good)] if column == "tags"
                      else _wrapped(good[i % len(good)], rng))
             for column, (good, _) in CHOICES.items()} for i in range(50)]
    examples, checked = check_batch(encoder, rows)
    assert None not in examples
    assert set(checked) == {"id", "count", "score", "ratio", "text", "blob", "label"}
    plain = [{column: value[0] if column != "tags" else value for column, value in row.items()}
             for row in rows]
    assert examples == encoder.encode_many(plain)[0]


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_lists_of_anything_encode_like_the_row_path(data):
    """Columns of lists (one item, good or bad, None, blank text; none or
    two items) mixed with bare values: every row the column path encodes
    has the row path's bytes, and its checked values are the row path's."""
    encoder = RowEncoder(parse_features(SCHEMA))
    size = data.draw(st.integers(1, 12))
    wrapped = st.sampled_from(["one", "one", "one", "tuple", "bare", "empty", "two"])
    rows = []
    for _ in range(size):
        row = {}
        for column, (good, bad) in CHOICES.items():
            value = data.draw(st.sampled_from(good + bad + ["", "  ", None]))
            form = data.draw(wrapped)
            row[column] = {"one": [value], "tuple": (value,), "bare": value, "empty": [],
                           "two": [value, value]}[form]
        rows.append(row)
    check_batch(encoder, rows)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=8).map(str.encode) | st.binary(max_size=14)
                | st.sampled_from([b"\xc3", b"\xa9", b"\xed\xa0\x80", b"", b"\xff"]),
                min_size=1, max_size=20))
def test_bytes_in_a_text_column_are_stored_when_they_are_utf8(values):
    """A text feature read as bytes (an Example's bytes_list): a column of
    UTF-8 bytes (any length up to max_bytes, b"" too) takes the column path
    with the row path's bytes; a value that is not UTF-8 on its own (half a
    character, one its neighbour would complete, an encoded surrogate) or
    too long leaves the column to the row path."""
    encoder = RowEncoder(parse_features({"text": {"type": "string", "max_bytes": 12}}))
    examples, checked = check_batch(encoder, [{"text": value} for value in values])

    def stored(value):
        try:
            value.decode("utf-8")
        except UnicodeDecodeError:
            return False
        return len(value) <= 12

    assert ("text" in checked) == all(map(stored, values))
    if "text" in checked:
        assert checked["text"] == values
