"""The native JSONL kernel against the Python path.

Generated JSONL files (objects of every value class: integers beyond int64,
-0, floats with exponents, 1e999, NaN and Infinity literals, bools, nulls,
lists and nested objects, strings with escapes, non-ASCII text, unpaired
surrogates, duplicate and escaped keys, missing keys; and hostile lines:
not JSON, not an object, invalid UTF-8, a byte-order mark, blank lines of
any whitespace, deep nesting, huge numbers) are read by the reader with and
without the kernel: the rows and read dead letters must be the same. Each
`JsonlRunBatch` is then converted by a converter with the kernel and one
without, and Examples, keys, labels, dead letters, statistics and digests
must be equal, byte for byte.
"""

from __future__ import annotations

import importlib.util
import json
import pickle
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from recordforge.schemas.feature_config import parse_features
from recordforge.schemas.stats import FREQUENT_CAPACITY
from recordforge.transforms.native_rows import kernel_examples
from recordforge.transforms.readers import jsonl as jsonl_reader
from recordforge.transforms.readers.jsonl import JsonlRunBatch, iter_jsonl
from recordforge.transforms.readers.rows import each_row
from recordforge.transforms.sources.outputs import JSONL_BATCH_BYTES, ROWS, batched
from recordforge.transforms.to_examples import BatchConversion

_spec = importlib.util.spec_from_file_location("kernel_cases",
                                               Path(__file__).with_name("kernel_cases.py"))
cases = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cases)

KEYS = ["a", "b", "c", "d"]
VOCABULARY = cases.VOCABULARY
# Nested `from:` paths (the generated objects nest these keys two deep).
PATHS = [["a", "b"], ["b", "a"], ["a", "c", "d"], ["d", "d"]]
# Number literals written as they stand (json.dumps would not make most).
LITERALS = ["0", "-0", "1", "-7", "12", "9223372036854775807", "9223372036854775808",
            "-9223372036854775808", "-9223372036854775809", "1" * 30, "1.5", "-0.0", "2.5e3",
            "1E-2", "1e999", "-1e999", "3.4028235677973366e38", "3.4028234663852886e38",
            "5e-324", "0.1", "1e308", "NaN", "Infinity", "-Infinity", "1.0", "2"]
TEXTS = ["", " ", "x", "cat", "dog", "é", " cat", "12", "-3", "0.5", "1e3", "nan", "\x00",
         "tab\there", 'quo"te', "back\\slash", "\u2028", "\ud800", "\udc00x", "x" * 9]


@st.composite
def json_values(draw, depth: int = 0):
    kind = draw(st.integers(0, 9))
    if kind <= 2:
        return draw(st.sampled_from(LITERALS)) if kind == 0 else str(draw(
            st.integers(-2**70, 2**70) if kind == 1 else st.integers(-6, 6)))
    if kind <= 5:
        text = draw(st.one_of(st.sampled_from(TEXTS + VOCABULARY), st.text(max_size=5)))
        # Escaped as json.dumps does, or non-ASCII as it stands (a lone
        # surrogate can only be written escaped).
        ascii = draw(st.booleans()) or any(0xD800 <= ord(ch) <= 0xDFFF for ch in text)
        return json.dumps(text, ensure_ascii=ascii)
    if kind == 6:
        return draw(st.sampled_from(["true", "false", "null"]))
    if kind == 7 and depth < 2:
        items = draw(st.lists(json_values(depth + 1), max_size=3))
        return "[" + ", ".join(items) + "]"
    if kind == 8 and depth < 2:
        return draw(json_objects(depth + 1))
    return repr(draw(st.floats(-1e6, 1e6))) if kind == 9 else "null"


@st.composite
def json_objects(draw, depth: int = 0):
    keys = draw(st.lists(st.sampled_from(KEYS + ["\\u0061", "e", "a\\n"]), max_size=6))
    members = [f'"{key}"{draw(st.sampled_from([":", " : "]))}{draw(json_values(depth))}'
               for key in keys]
    return "{" + draw(st.sampled_from([",", ", "])).join(members) + "}"


HOSTILE = [b"", b" ", b"\t\r", b"\x0c", b"\xc2\xa0", b"{", b"[1, 2]", b"3", b'"a"', b"null",
           b'{"a": 1} x', b'{"a": 1,}', b"{'a': 1}", b'{"a": 01}', b'{"a": 1.}',
           b'{"a": "\xff"}', b'{"a": "\xed\xa0\x80"}', b'\xef\xbb\xbf{"a": 1}',
           b'{"a": "\\x"}', b'{"a": "\t"}', b'{"a": tru}', b'{"a": -}',
           b'{"a": ' + b"[" * 70 + b"]" * 70 + b"}", b'{"a": ' + b"[" * 40 + b"]" * 40 + b"}",
           b'{"a": ' + b"1" * 5000 + b"}", b'{"a": 1}\r', b' {"a": 2} ',
           # (a line that ends inside a value; text past 8 bytes around what ends a plain run)
           b'{"a": "abcdefghijklmnop', b'{"a": 12', b'{"a"\r:\r1\r}\t',
           b'{"a": "abcdefgh\\"ijklmnop\\u00e9qrstuvw\xc3\xa9xyz"}', b'{"a": "abcdefghij\x1fklm"}',
           b'{"a": "abcdefghij\x7fklmnopq"}']


@st.composite
def jsonl_files(draw) -> bytes:
    lines = draw(st.lists(st.one_of(json_objects().map(str.encode), json_objects().map(str.encode),
                                    st.sampled_from(HOSTILE)), max_size=14))
    if draw(st.integers(0, 5)) == 0:
        lines.insert(0, b"\xef\xbb\xbf" + (lines.pop(0) if lines else b'{"a": 1}'))
    return b"\n".join(lines) + draw(st.sampled_from([b"", b"\n"]))


schemas = cases.schemas(cases.feature_bodies(KEYS * 3 + ["absent"] + PATHS), KEYS, most=4,
                        nested=True)


def _items(path, kernels, start=0, end=None, start_line=None):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(jsonl_reader, "kernels", lambda: kernels)
        return list(iter_jsonl(str(path), start=start, end=end, start_line=start_line,
                               columns=True))


def _seen(batch, watched) -> list:
    """The ("columns_seen", names) a convert step yields for `batch` first
    in a bundle."""
    conversion = BatchConversion((), {}, None, None, watch_columns=watched)
    conversion.setup()
    return list(conversion._columns_seen(batch))


# A label read from a nested path, on a line the kernel declines (a byte-order
# mark, a repeated key): labelled from the value the feature stores.
_NESTED_LABEL_LINE = (b'\xef\xbb\xbf{"d":{"a":0,"a":0,"a":0,"a":0,"a":0,"d":%s},'
                      b'"a":0,"a":0,"a":0,"a":0,"a":0}')


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=jsonl_files(), schema=schemas, salt=cases.salts,
       batch_bytes=st.sampled_from([1, 40, 1 << 20]))
@example(data=_NESTED_LABEL_LINE % b"0",
         schema=(tuple(parse_features({"f0": {"type": "float", "from": ["d", "d"],
                                              "values": [0.0]}}, nested=True)), None, "f0"),
         salt=None, batch_bytes=1)
@example(data=_NESTED_LABEL_LINE % b'"0"',
         schema=(tuple(parse_features({"f0": {"type": "string", "from": ["d", "d"],
                                              "required": False}}, nested=True)), None, "f0"),
         salt=None, batch_bytes=1)
def test_kernel_and_python_path_agree(native, outcome, tmp_path_factory, data, schema, salt,
                                      batch_bytes):
    """The reader gives the same rows and dead letters with the kernel as
    without, batched alike (`batched`, by the bytes of their lines); each
    batch converts alike on both paths and as the plain list of its
    SourceRows."""
    path = tmp_path_factory.mktemp("jsonl") / "t.jsonl"
    path.write_bytes(data)
    with_kernel = _items(path, native)
    without = _items(path, None)
    assert cases.same(list(each_row(with_kernel)), list(each_row(without)))
    native_out = list(batched(with_kernel, 1000, "t", batch_bytes))
    python_out = list(batched(without, 1000, "t", batch_bytes))
    assert cases.same([(tag, list(value) if tag == ROWS else value) for tag, value in native_out],
                 [(tag, list(value) if tag == ROWS else value) for tag, value in python_out])
    specs, key, label = schema
    for (tag, batch), (_, python_batch) in zip(native_out, python_out):
        if tag != ROWS:
            continue
        assert isinstance(batch, JsonlRunBatch) and batch.lines == python_batch.lines
        rows = list(python_batch)
        # (the rows a duplicate's dead letter names: lines need not be consecutive)
        assert [batch.row_number(at) for at in range(len(batch))] == [row.row for row in rows]
        assert cases.same(list(pickle.loads(pickle.dumps(batch))), rows)
        assert set(batch.column_names()) == {name for row in rows for name in row.values}
        expected = outcome(cases.converter(specs, key, None, salt), specs, rows, label)
        assert cases.same(outcome(cases.converter(specs, key, native, salt), specs, batch, label),
                     expected)
        assert cases.same(outcome(cases.converter(specs, key, None, salt), specs, python_batch, label),
                     expected)
        # The columns a build watches for: seen alike (and the first row's named).
        assert _seen(batch, KEYS + ["e"]) == _seen(rows, KEYS + ["e"])


def test_a_batch_holds_a_runs_bytes_of_lines_on_both_paths(native, tmp_path):
    """A JSONL batch holds about a CSV run's bytes of lines (JSONL_BATCH_BYTES),
    cut at the same lines with the kernel and without: many more rows of
    free text than the statistics' text capacity, so that a batch's text
    partial is purged before it is merged, not carried whole."""
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"id": at, "text": f"free text {at} " + "x" * 60}) + "\n"
                            for at in range(15000)))
    cuts = []
    for kernels in (native, None):
        batches = [value for tag, value in batched(_items(path, kernels), 1000, "t")
                   if tag == ROWS]
        assert sum(map(len, batches)) == 15000
        longest = max(len(line) for batch in batches for line in batch.lines)
        *whole, rest = batches
        assert whole and all(JSONL_BATCH_BYTES <= batch.num_bytes < JSONL_BATCH_BYTES + longest
                             and len(batch) > FREQUENT_CAPACITY for batch in whole)
        assert rest.num_bytes < JSONL_BATCH_BYTES
        cuts.append([list(batch.rows) for batch in batches])
    assert cuts[0] == cuts[1]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=jsonl_files(), cut=st.integers(0, 400))
def test_byte_ranges_read_the_same_rows(native, tmp_path_factory, data, cut):
    """A file read as two byte ranges gives, with the kernel, the rows
    (and line numbers) the Python reader gives for the same ranges."""
    path = tmp_path_factory.mktemp("jsonl") / "t.jsonl"
    path.write_bytes(data)
    cut = min(cut, len(data))
    for start, end in ((0, cut), (cut, None)):
        assert cases.same(list(each_row(_items(path, native, start, end))),
                     list(each_row(_items(path, None, start, end))))


def test_a_clean_run_takes_the_kernel_and_makes_no_python_values(native, outcome, tmp_path):
    """The comparison above means something: object lines come as one run
    the kernel converts whole, making no Python value but the text the
    statistics read."""
    path = tmp_path / "t.jsonl"
    path.write_text('{"n": 0}\n{"n": 2, "s": "a\\u00e9\\ud83d\\ude00\\n", "x": [1]}\n'
                    '{"s": "é", "n": 1}\n')
    first, batch = _items(path, native)
    # (the file's first line is Python's: its byte-order mark)
    assert list(first.rows) == [1] and list(batch.rows) == [2, 3]
    specs = parse_features({"n": {"type": "int64", "from": "n"},
                            "s": {"type": "string", "from": "s"}}, nested=False)
    converter = cases.converter(specs, "n", native, b"salt")
    examples, keys, _, texts, digests, declined = converter._native.convert(batch)
    assert declined == 0
    # (escapes decoded as json does: a surrogate pair is one character)
    assert examples == [converter._encoder.encode({"n": 2, "s": "aé😀\n"}),
                        converter._encoder.encode({"n": 1, "s": "é"})]
    assert keys == [b"\x02\x81\x02", b"\x02\x81\x01"] and texts == {"s": ["aé😀\n", "é"]}
    assert len(digests) == 32
    outcome(converter, specs, batch, "n")
    assert batch._values is None


def test_declined_rows_are_pythons_dead_letters(native, outcome, tmp_path):
    """Values the kernel does not model (an integer beyond int64, an escape,
    a bool, a repeated key: the last counts) go down the Python row path,
    which converts them or writes their dead letter naming the line."""
    path = tmp_path / "t.jsonl"
    path.write_text('{"z": 0}\n{"n": 99999999999999999999}\n{"n": "\\u0031"}\n{"n": true}\n'
                    '{"n": 3, "n": 4}\n')
    [_, batch] = _items(path, native)
    specs = parse_features({"n": {"type": "int64", "from": "n"}}, nested=False)
    native_side = outcome(cases.converter(specs, None, native, None), specs, batch, None)
    assert cases.same(native_side, outcome(cases.converter(specs, None, None, None), specs, batch, None))
    examples, _, dead_letters, *_ = native_side
    assert [letter["row"] for letter in dead_letters] == [2]
    assert dead_letters[0]["reason"] == "int64_overflow"
    assert len(examples) == 3


def test_nested_paths_take_the_kernel(native, outcome, tmp_path):
    """A nested `from:` path is read by the kernel (null where a key is
    absent or a value on the way is not an object, as `dig`)."""
    path = tmp_path / "t.jsonl"
    path.write_text('{}\n{"u": {"id": 3, "name": "x"}}\n{"u": {"id": 4}, "u": {"id": 5}}\n'
                    '{"u": [1], "k": 1}\n')
    [_, batch] = _items(path, native)
    specs = parse_features({"id": {"type": "int64", "from": ["u", "id"], "required": False},
                            "name": {"type": "string", "from": ["u", "name"],
                                     "required": False}}, nested=True)
    converter = cases.converter(specs, None, native, None)
    examples, *_ = converter._native.convert(batch)
    assert examples == [converter._encoder.encode({"u": {"id": 3, "name": "x"}}),
                        converter._encoder.encode({"u": {"id": 5}}),
                        converter._encoder.encode({"u": [1]})]
    assert cases.same(outcome(converter, specs, batch, "id"),
                 outcome(cases.converter(specs, None, None, None), specs, list(batch), "id"))


@pytest.mark.parametrize("run, count, taken", [
    (b"", 1, None), (b"\xff", 1, None), (b'{"a": 1}', 2, None), (b"{", 1, [False]),
    (b'{"a": 1}\n[', 2, [True, False]), (b'{"a": 1}\n{"a": NaN}', 2, [True, False]),
    (b'{"a": "abcdefghijkl\n{"a": 1}\n', 2, [False, True]), (b'{"a": 1}\n\n{"a": 2}', 3, [True, False, True])])
def test_lines_the_kernel_cannot_read_are_declined(native, run, count, taken):
    """convert_jsonl_run refuses (None) a run that is not `count` lines of
    UTF-8, and declines each line it does not model (Python converts it)."""
    plan = native.CsvPlan(1, [(b"a", 0, ("int", -5, 5, None))])
    answer = native.convert_jsonl_run(run, count, plan, [[b"a"]])
    assert (None if answer is None else
            [example is not None for example in kernel_examples(*answer[:2], answer[-1])]) == taken
