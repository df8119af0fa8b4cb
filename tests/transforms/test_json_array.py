"""The JSON-array reader: rows, dead letters, and memory that does not grow
with the file (it is parsed as a stream)."""

import json
import tracemalloc
from decimal import Decimal
from unittest import mock

from hypothesis import HealthCheck, given, settings, strategies as st

from recordforge.schemas.feature_config import parse_features
from recordforge.schemas.features import INT64_MAX, INT64_MIN
from recordforge.transforms.batch_converter import BatchConverter
from recordforge.transforms.readers import json_array
from recordforge.transforms.readers.json_array import iter_json_array
from recordforge.transforms.readers.jsonl import iter_jsonl
from recordforge.transforms.readers.rows import SourceRow


def _read(path):
    return list(iter_json_array(str(path)))


def test_elements_become_rows_numbered_from_one(tmp_path):
    path = tmp_path / "a.json"
    path.write_bytes(b"\xef\xbb\xbf \n" + json.dumps(
        [{"a": 1, "b": {"c": [1, 2.5]}}, {"a": "x", "d": None}]).encode())
    assert _read(path) == [SourceRow(str(path), 1, {"a": 1, "b": {"c": [1, 2.5]}}),
                           SourceRow(str(path), 2, {"a": "x", "d": None})]


def test_faults_are_dead_letters(tmp_path):
    path = tmp_path / "a.json"
    path.write_text('[{"a": 1}, 7, [1], {"a": 2}]')
    out = _read(path)
    assert [o.row if isinstance(o, SourceRow) else o["reason"] for o in out] == [
        1, "json_array_invalid", "json_array_invalid", 4]
    assert "a JSON number" in out[1]["message"] and "array" in out[2]["message"]
    path.write_text('[{"a": 1}, {"a": tru')
    out = _read(path)
    assert isinstance(out[0], SourceRow) and out[1]["reason"] == "json_array_invalid"
    assert out[1]["row"] == 2 and "not read" in out[1]["message"]
    path.write_text('{"a": 1}\n{"a": 2}\n')
    [problem] = _read(path)
    assert problem["reason"] == "json_array_invalid" and "jsonl" in problem["message"]
    path.write_text("  ")
    assert [o["reason"] for o in _read(path)] == ["empty_file"]
    path.write_text("[" + "[" * 100 + "]" * 100 + "]")
    assert [o["reason"] for o in _read(path)] == ["json_array_invalid"]
    path.write_text('[{"a": ' + "[" * 80 + "]" * 80 + "}]")
    [deep] = _read(path)
    assert deep["reason"] == "json_array_invalid" and "64 levels" in deep["message"]


def test_memory_does_not_grow_with_the_file(tmp_path):
    path = tmp_path / "big.json"
    row = {"id": 0, "text": "x" * 200, "nested": {"values": list(range(20))}}
    with open(path, "w") as out:
        out.write("[")
        for i in range(40_000):  # ~12 MB
            row["id"] = i
            out.write(("," if i else "") + json.dumps(row))
        out.write("]")
    tracemalloc.start()
    count = 0
    for item in iter_json_array(str(path)):
        assert isinstance(item, SourceRow)
        count += 1
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert count == 40_000
    assert peak < 2 << 20, peak  # the file is 12 MB


# --- one rule with JSONL (issue 38.5, 38.7) ----------------------------------------

_WIDE_INTS = st.one_of(st.integers(), st.sampled_from([INT64_MIN, INT64_MAX, INT64_MAX + 1,
                                                       INT64_MIN - 1, 10 ** 30]))
_NUMBER_TEXTS = st.one_of(
    _WIDE_INTS.map(str), st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.sampled_from(["1e400", "-1e400", "1E999", "2.5e-400", "-0.0"]))
# text of any code point, lone surrogates of both halves included
_TEXTS = st.text(st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=6)


@st.composite
def _element(draw):
    """(JSON text of one object, as written in a file) holding numbers of
    any size, text with lone surrogates, nested values."""
    fields = []
    for name in draw(st.lists(st.text("abc", min_size=1, max_size=3), max_size=4, unique=True)):
        kind = draw(st.sampled_from(["number", "text", "nested"]))
        if kind == "number":
            value = draw(_NUMBER_TEXTS)
        elif kind == "text":
            value = json.dumps(draw(_TEXTS), ensure_ascii=draw(st.booleans()))
        else:
            value = json.dumps({"x": [draw(_WIDE_INTS), draw(_TEXTS)]})
        fields.append(f"{json.dumps(name)}:{draw(st.sampled_from(['', ' ', chr(10)]))}{value}")
    return "{" + ", ".join(fields) + "}"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(elements=st.lists(_element(), min_size=1, max_size=6), buffer=st.sampled_from([1, 3, 7, 64, 1 << 16]),
       space=st.sampled_from(["", " ", "\n  "]))
def test_each_element_reads_as_its_jsonl_line_reads(tmp_path_factory, elements, buffer, space):
    """Whatever numbers or text an element holds, and wherever the read
    blocks cut it, the array gives one row per element with the values the
    JSONL reader gives for the same object on a line."""
    folder = tmp_path_factory.mktemp("j")
    encode = lambda text: text.encode("utf-8", "surrogatepass")  # noqa: E731
    (folder / "a.json").write_bytes(encode("[" + space + ("," + space).join(elements)
                                           + space + "]"))
    (folder / "a.jsonl").write_bytes(encode("".join(e.replace("\n", " ") + "\n"
                                                    for e in elements)))
    with mock.patch.object(json_array, "_BUFFER", buffer):
        array = _read(folder / "a.json")
    lines = list(iter_jsonl(str(folder / "a.jsonl")))
    assert len(array) == len(lines) == len(elements)
    for got, want in zip(array, lines):
        if isinstance(want, SourceRow):
            assert isinstance(got, SourceRow) and _same(got.values, want.values)
        else:
            assert got["reason"] == "invalid_utf8" and want["reason"] == "invalid_utf8"


def _same(a, b) -> bool:
    # -0.0 == 0.0 in Python; compare the JSON text, which keeps the sign
    # (a Decimal, a number beyond a double, as its exact text)
    return json.dumps(a, sort_keys=True, default=repr) == json.dumps(b, sort_keys=True,
                                                                     default=repr)


@settings(max_examples=100, deadline=None)
@given(literal=st.sampled_from(["9223372036854775808", "-9223372036854775808",
                                "-9223372036854775809", "1e400", "-1E400"])
       .flatmap(lambda base: st.sampled_from([base, base + "0" * 3])),
       before=st.integers(0, 3), after=st.integers(1, 3), kind=st.sampled_from(["int64", "float"]))
def test_a_large_number_is_that_rows_overflow_and_later_rows_are_read(
        tmp_path_factory, literal, before, after, kind):
    path = tmp_path_factory.mktemp("j") / "a.json"
    rows = [f'{{"x": {i}}}' for i in range(before)] + [f'{{"x": {literal}}}'] + [
        f'{{"x": {i}}}' for i in range(after)]
    path.write_text("[" + ",".join(rows) + "]")
    read = _read(path)
    assert all(isinstance(row, SourceRow) for row in read) and len(read) == len(rows)
    converter = BatchConverter(parse_features({"x": {"type": kind}}), {}, None)
    examples, letters = converter.convert_batch(read)
    assert len(examples) + len(letters) == len(rows)
    if kind == "float":
        expected = ["float32_overflow"] if "e" in literal.lower() else []
    else:
        expected = [] if INT64_MIN <= Decimal(literal) <= INT64_MAX else ["int64_overflow"]
    assert [letter["reason"] for letter in letters] == expected


@settings(max_examples=100, deadline=None)
@given(count=st.integers(1, 5), bad_at=st.data(), byte=st.integers(0x80, 0xFF))
def test_bytes_that_are_not_utf8_are_that_elements_dead_letter(tmp_path_factory, count,
                                                               bad_at, byte):
    bad = bad_at.draw(st.integers(1, count))
    path = tmp_path_factory.mktemp("j") / "a.json"
    rows = [b'{"x": "a%sb", "n": %d}' % (bytes([byte]) if i == bad else b"", i)
            for i in range(1, count + 1)]
    path.write_bytes(b"[" + b",".join(rows) + b"]")
    read = _read(path)
    assert [r.row if isinstance(r, SourceRow) else (r["reason"], r["row"]) for r in read] == [
        ("invalid_utf8", i) if i == bad else i for i in range(1, count + 1)]
    (letter,) = [r for r in read if isinstance(r, dict)]
    assert "\n" not in letter["message"] and f"element {bad}" in letter["message"]


def test_a_top_level_object_says_it_is_not_an_array(tmp_path):
    path = tmp_path / "a.json"
    path.write_text('{"v": [1, 2]}')
    [letter] = _read(path)
    assert letter["reason"] == "json_array_invalid"
    assert "one JSON object, not an array" in letter["message"]
