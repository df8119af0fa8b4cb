"""The native Arrow kernel (Parquet record batches) against the Python path.

Generated tables of typed columns (integers of every width, uint64 beyond
int64, float32 and float64 with NaN, infinities and float32 overflow,
bools, text and binary with hostile values, nulls) are written as Parquet
and read back by the reader; each batch is converted by a converter with
the kernel and one without, and Examples, keys, labels, dead letters and
statistics must be equal. The reader's batches themselves must equal those
it gives without the kernels, and slices of a batch (buffers with an
offset) convert alike. Hostile buffers are refused, never read past.
"""

from __future__ import annotations

import importlib.util
import math
import pickle
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from recordforge.schemas.feature_config import parse_features
from recordforge.transforms import native_rows
from recordforge.transforms.native_rows import kernel_examples, kernel_keys
from recordforge.transforms.merge_statistics import OMITTED, PRESENT, UNCHECKED
from recordforge.transforms.readers import parquet as parquet_reader
from recordforge.transforms.readers.arrow_batch import ArrowBatch, arrow_buffers
from recordforge.transforms.readers.parquet import iter_parquet
from recordforge.transforms.readers.rows import ColumnBatch

_spec = importlib.util.spec_from_file_location("kernel_cases",
                                               Path(__file__).with_name("kernel_cases.py"))
cases = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cases)

COLUMNS = ["c0", "c1", "c2", "c3", "c4"]
VOCABULARY = cases.VOCABULARY
TEXT = ["", " ", " 1", "1_000", "\u0663", "nan", "inf", "1e3", "3.5", "-0", "+7", "-5",
        "9223372036854775807", "9223372036854775808", "1e400", "3.4028235677973366e38",
        "cat", "dog", "Cat", " cat", "é", "\x00", "x" * 9, "12", "0.1"]
INT_TYPES = {"int8": (-2**7, 2**7 - 1), "int16": (-2**15, 2**15 - 1),
             "int32": (-2**31, 2**31 - 1), "int64": (-2**63, 2**63 - 1),
             "uint8": (0, 2**8 - 1), "uint32": (0, 2**32 - 1), "uint64": (0, 2**64 - 1)}
FLOATS = [0.0, -0.0, 1.5, -3.25, 2.5, 0.1, 1.0, math.nan, math.inf, -math.inf, 1e39, -1e39,
          3.4028235677973366e38, 3.4028234663852886e38, 5e-324, 1e300]


# Arrow types a feature's column most often has (the rest: any type).
MATCHING = {"int64": ["int8", "int16", "int32", "int64", "uint8", "uint32", "uint64", "string"],
            "float": ["float", "double", "string"], "string": ["string", "large_string"],
            "bytes": ["binary", "large_binary"], "bool": ["bool"]}
KINDS = list(INT_TYPES) + ["float", "double", "bool", "string", "large_string", "binary",
                           "large_binary"]


def _values(draw, kind: str, rows: int) -> pa.Array:
    """A column of `rows` values of Arrow type `kind`: most columns clean
    (the kernel's input), the others with every value class and nulls."""
    clean = draw(st.integers(0, 2)) > 0
    null = st.nothing() if clean or draw(st.booleans()) else st.none()
    if kind in INT_TYPES:
        lo, hi = INT_TYPES[kind]
        small = st.integers(max(lo, -6), min(hi, 6))
        element = small if clean else st.one_of(st.integers(lo, hi), small, null)
    elif kind in ("float", "double"):
        width = 32 if kind == "float" else 64
        finite = st.floats(-1e6, 1e6, width=width)
        element = finite if clean else st.one_of(st.sampled_from(FLOATS),
                                                 st.floats(width=width), null)
    elif kind == "bool":
        element = st.one_of(st.booleans(), null)
    elif kind in ("string", "large_string"):
        words = st.sampled_from(VOCABULARY + ["12", "-3", "0.5", "ab"])
        element = words if clean else st.one_of(
            st.sampled_from(TEXT + VOCABULARY), st.integers(-2**64, 2**64).map(str),
            st.text(st.characters(blacklist_categories=("Cs",)), max_size=6), null)
    else:
        element = st.binary(max_size=4) if clean else st.one_of(
            st.binary(max_size=6), st.sampled_from([b"", b"cat", b"\xff"]), null)
    values = draw(st.lists(element, min_size=rows, max_size=rows))
    return pa.array(values, type=pa.type_for_alias(kind))


def _table(draw, specs) -> pa.Table:
    """A table of typed columns, each most often of a type its feature reads."""
    rows = draw(st.integers(0, 14))
    names = draw(st.sampled_from([COLUMNS, COLUMNS[:3], COLUMNS[::-1]]))
    read = {spec.source: "bool" if spec.type == "bool" else
            "string" if spec.vocabulary is not None else spec.stored_kind
            for spec in specs}
    columns = {}
    for name in names:
        kinds = MATCHING.get(read.get(name), KINDS)
        kind = draw(st.sampled_from(kinds if draw(st.integers(0, 3)) else KINDS))
        columns[name] = _values(draw, kind, rows)
    return pa.table(columns)


schemas = cases.schemas(cases.feature_bodies(COLUMNS * 4 + ["absent"]), COLUMNS)


def _items(path, kernels, batch_size=None):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(parquet_reader, "kernels", lambda: kernels)
        return list(iter_parquet(str(path), columns=True, batch_size=batch_size))


def _contents(item):
    """A reader's item as plain values: a batch's source, first row and
    columns (its repr names only the columns)."""
    if isinstance(item, ColumnBatch):
        return "batch", item.source, item.first_row, item.columns
    return item


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=schemas, data=st.data(), batch_size=st.sampled_from([None, 3]),
       cut=st.integers(0, 14), salt=cases.salts)
def test_kernel_and_python_path_agree(native, outcome, tmp_path_factory, schema, data,
                                      batch_size, cut, salt):
    """Through the reader (batches of a Parquet file) and as slices of a
    record batch (buffers with an offset), both paths give the same; with
    a salt, the digests of the convert call are hashlib's (`outcome`)."""
    specs, key, label = schema
    table = data.draw(st.composite(_table)(specs))
    path = tmp_path_factory.mktemp("parquet") / "t.parquet"
    pq.write_table(table, path)
    with_kernel = _items(path, native, batch_size)
    assert cases.same(list(map(_contents, with_kernel)),
                 list(map(_contents, _items(path, None, batch_size))))
    for batch in with_kernel:
        if isinstance(batch, dict):
            continue  # a read dead letter (an empty file): the reader's, on both paths
        assert isinstance(batch, ArrowBatch)
        assert cases.same(pickle.loads(pickle.dumps(batch)).columns, batch.columns)
        cases.agree(native, outcome, specs, key, label, batch, salt)
    [record_batch] = table.combine_chunks().to_batches() or [None]
    if record_batch is not None:
        sliced = ArrowBatch("t", 1 + cut, record_batch.slice(cut, 5))
        cases.agree(native, outcome, specs, key, label, sliced, salt)
        plain = ColumnBatch("t", 1 + cut, record_batch.slice(cut, 5).to_pydict())
        assert cases.same(list(sliced), list(plain)) and cases.same(sliced.columns, plain.columns)


def test_a_batch_takes_the_kernel_and_makes_no_python_values(native, outcome, tmp_path):
    """The comparison above means something: a clean batch is converted by
    the kernel whole, and the only Python values made are the text the
    statistics read."""
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"n": pa.array([2, 1], pa.int32()), "s": ["a", "é"],
                             "x": pa.array([1.5, None])}), path)
    [batch] = _items(path, native)
    specs = parse_features({"n": {"type": "int64", "from": "n"},
                            "s": {"type": "string", "from": "s"}}, nested=False)
    converter = cases.converter(specs, "n", native)
    examples, keys, checked, texts, _, declined = converter._native.convert(batch)
    assert declined == 0
    assert examples == [converter._encoder.encode({"n": 2, "s": "a"}),
                        converter._encoder.encode({"n": 1, "s": "é"})]
    assert keys == [b"\x02\x81\x02", b"\x02\x81\x01"]
    assert texts == {"s": ["a", "é"]}
    assert isinstance(checked["n"], np.ndarray) and checked["n"].tolist() == [2, 1]
    outcome(converter, specs, batch, "n")
    assert batch._converted is None and batch._some == {}


def test_text_that_is_not_utf8_is_the_readers_dead_letter(native, tmp_path):
    """Parquet does not check its text: a batch holding bytes that are not
    UTF-8 is converted by the reader, whose dead letters name the row, on
    both paths alike."""
    text = pa.Array.from_buffers(pa.string(), 2, [None, pa.py_buffer(
        np.array([0, 1, 2], dtype=np.int32).tobytes()), pa.py_buffer(b"a\xff")])
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"s": text, "n": [1, 2]}), path)
    items = _items(path, native)
    assert items == _items(path, None)
    assert [item["reason"] if isinstance(item, dict) else type(item).__name__
            for item in items] == ["SourceRow", "invalid_utf8"]


def _validates(batch) -> bool:
    try:
        batch.validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


@settings(max_examples=300, deadline=None)
@given(values=st.lists(st.one_of(st.none(), st.binary(max_size=5),
                                 st.text(max_size=3).map(str.encode)), max_size=12),
       large=st.booleans(), start=st.integers(0, 12), binary=st.booleans())
def test_text_validity_is_arrows_full_validation(native, values, large, start, binary):
    # Text of any bytes (as Parquet holds it: unchecked), nulls among it,
    # sliced from `start`, beside an int column and a binary one.
    kind = pa.large_string() if large else pa.string()
    text = pa.array(values, type=pa.large_binary() if large else pa.binary()).view(kind)
    numbers = pa.array(range(len(values)), type=pa.int64())
    columns = [text, numbers] + ([pa.array(values, type=pa.binary())] if binary else [])
    batch = pa.record_batch(columns, names=[str(i) for i in range(len(columns))])
    batch = batch.slice(min(start, len(values)))
    assert native.arrow_text_valid(arrow_buffers(batch)) == _validates(batch)


@settings(max_examples=300, deadline=None)
@given(values=st.lists(st.one_of(st.binary(max_size=5), st.text(max_size=3).map(str.encode)),
                       min_size=1, max_size=12),
       large=st.booleans(), start=st.integers(0, 11), dictionary=st.booleans())
def test_text_the_reader_found_utf8_converts_as_text_scanned_again(native, values, large,
                                                                    start, dictionary):
    """`utf8_known` (the reader's `_valid` passed the batch) skips the
    kernel's own UTF-8 scan: the same answer for text that is UTF-8; text
    that is not never reaches the kernel so (the reader makes it a dead
    letter), and were it handed over, it is still read within its buffers."""
    start = min(start, len(values) - 1)
    kind = pa.large_string() if large else pa.string()
    text = pa.array(values, type=pa.large_binary() if large else pa.binary()).view(kind)
    if dictionary:
        text = pa.DictionaryArray.from_arrays(pa.array(range(len(values)), pa.int32()), text)
    batch = pa.record_batch([pa.array(range(len(values)), pa.int64()),
                             pa.array([0.5] * len(values)), text], names=["a", "b", "c"])
    batch = batch.slice(start)
    described = arrow_buffers(batch)
    scanned = native.convert_arrow_batch(described, batch.num_rows, _plan(native))
    known = native.convert_arrow_batch(described, batch.num_rows, _plan(native), True)
    assert known is not None
    if native.arrow_text_valid(described):
        assert known == scanned
    elif not dictionary:  # (a dictionary's text the slice does not use may fail it)
        assert scanned is None


def _described(record_batch):
    return arrow_buffers(record_batch)


def _plan(native):
    # a: int64, b: float, c: a string feature; keyed by a.
    return native.CsvPlan(3, [(b"a", 0, ("int", -2**63, 2**63 - 1, None)),
                              (b"b", 1, ("float", -1e38, 1e38, None)),
                              (b"c", 2, ("text", None, None, True))], ("feature", 0))


@settings(max_examples=500, deadline=None)
@given(column=st.integers(0, 2), part=st.integers(0, 5), offset=st.integers(0, 2**64 - 1),
       length=st.integers(0, 2**64 - 1), data=st.binary(max_size=64),
       count=st.integers(0, 2**64 - 1))
def test_buffers_that_do_not_hold_their_lengths_are_refused(native, column, part, offset,
                                                            length, data, count):
    """Any offset, length, count or buffer in place of a column's own:
    the kernel answers None (refused) or rows within the buffers, never
    reads past them and never fails."""
    record_batch = pa.record_batch({"a": pa.array([1, 2, 3], pa.int64()),
                                    "b": pa.array([1.5, 2.5, None]),
                                    "c": pa.array(["x", "yy", "z"])})
    described = [list(item) for item in _described(record_batch)]
    target = described[column]
    if part == 1:
        target[1] = offset
    elif part == 2:
        target[2] = length
    elif part == 3:
        target[3] = data
    elif part == 4:
        target[4] = data
    else:
        target[5] = data
    done = native.convert_arrow_batch([tuple(item) for item in described], count % 8
                                      if part else count, _plan(native))
    if done is not None:
        framed, offsets, keys, _, digests, declined = done
        examples = kernel_examples(framed, offsets, declined)
        assert digests is None  # a plan made without a salt
        assert declined == list(examples).count(None)
        assert len(examples) == len(kernel_keys(keys)) == (count % 8 if part else count)


def test_offsets_outside_the_data_are_refused(native):
    values = pa.py_buffer(b"abc")
    for offsets in ([0, 4], [2, 1], [-1, 1], [0, 2**31 - 1]):
        text = (["string", 0, 1, None, values,
                 pa.py_buffer(np.array(offsets, dtype=np.int32).tobytes())])
        columns = [("int64", 0, 1, None, pa.py_buffer(np.int64(1).tobytes()), None),
                   ("double", 0, 1, None, pa.py_buffer(np.float64(1).tobytes()), None),
                   tuple(text)]
        assert native.convert_arrow_batch(columns, 1, _plan(native)) is None, offsets


def test_allowed_values_compile_into_a_plan(native):
    """`values:` of int64 and string features reach the kernel as the sets
    it takes (a list made every batch of such a schema fail its plan and
    take the Python path, with a warning)."""
    specs = parse_features({"n": {"type": "int64", "from": "c0", "values": [1, 2.0]},
                            "s": {"type": "string", "from": "c1", "values": ["a", "b"]},
                            "x": {"type": "float", "from": "c2", "values": [0.5]}},
                           nested=False)
    rows = native_rows.NativeRows(specs, {}, None, None)
    assert rows._plan(("c0", "c1", "c2")) is not None
    batch = ArrowBatch("t", 1, pa.record_batch({"c0": [2, 3], "c1": ["a", "a"],
                                                "c2": [0.5, 0.5]}))
    examples, _, checked, _, _, _ = rows.convert(batch)
    assert examples[0] is not None and examples[1] is None
    assert checked["n"].states.tolist() == [PRESENT, UNCHECKED]  # (3 is not allowed)


def test_a_null_leaves_out_an_optional_feature(native, outcome):
    """A null in an optional feature without a default: the kernel takes
    the row, without that feature (as the complete rules leave it out); a
    null in a required one, or one with a default, declines the row."""
    specs = parse_features({"o": {"type": "int64", "from": "c0", "required": False},
                            "r": {"type": "float", "from": "c1"},
                            "d": {"type": "string", "from": "c2", "default": "x"}},
                           nested=False)
    converter = cases.converter(specs, None, native)
    batch = ArrowBatch("t", 1, pa.record_batch({"c0": [None, 1, 2], "c1": [0.5, None, 1.5],
                                                "c2": ["a", "b", None]}))
    examples, _, checked, _, _, _ = converter._native.convert(batch)
    assert examples == [converter._encoder.encode({"c1": 0.5, "c2": "a"}), None, None]
    assert checked["o"].states.tolist() == [OMITTED, PRESENT, PRESENT]
    assert checked["o"].values[1:].tolist() == [1, 2]
    cases.agree(native, outcome, specs, None, "o", batch)


def _dictionary(draw, column: pa.Array) -> pa.Array:
    """`column` as a dictionary array: its values (hostile ones, nulls,
    repeats) as the dictionary and indices drawn into it (some null), in
    any integer width, often sliced (indices with an offset)."""
    if not len(column):
        return column.dictionary_encode() if draw(st.booleans()) else column
    index = st.integers(0, len(column) - 1)
    picks = draw(st.lists(st.one_of(index, st.none()) if draw(st.booleans()) else index,
                          min_size=len(column) + 2, max_size=len(column) + 2))
    kind = draw(st.sampled_from([pa.int8(), pa.int16(), pa.int32(), pa.int64()]))
    array = pa.DictionaryArray.from_arrays(pa.array(picks, kind), column)
    start = draw(st.integers(0, 2))
    return array.slice(start, len(column))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=schemas, data=st.data(), batch_size=st.sampled_from([None, 3]), salt=cases.salts)
def test_dictionary_columns_convert_as_their_values(native, outcome, tmp_path_factory, schema,
                                                    data, batch_size, salt):
    """Dictionary arrays (pandas' categoricals; a Parquet file read back
    keeps them) convert as the plain arrays of their values: a value
    failing a rule fails each row pointing at it, with that row's number."""
    specs, key, label = schema
    table = data.draw(st.composite(_table)(specs))
    columns = {name: table[name].combine_chunks() for name in table.column_names}
    columns = {name: _dictionary(data.draw, column) if data.draw(st.booleans()) else column
               for name, column in columns.items()}
    batch = ArrowBatch("t", 1, pa.record_batch(columns))
    cases.agree(native, outcome, specs, key, label, batch, salt)
    assert cases.same(list(batch), list(ColumnBatch("t", 1, batch.record_batch.to_pydict())))
    if any(pa.types.is_dictionary(column.type) and column.dictionary.null_count
           for column in columns.values()):
        return  # (Parquet cannot hold a null in a dictionary)
    path = tmp_path_factory.mktemp("parquet") / "t.parquet"
    pq.write_table(pa.table(columns), path)
    with_kernel = _items(path, native, batch_size)
    assert cases.same(list(map(_contents, with_kernel)),
                      list(map(_contents, _items(path, None, batch_size))))
    for item in with_kernel:
        if isinstance(item, ArrowBatch):
            cases.agree(native, outcome, specs, key, label, item, salt)


def test_a_dictionary_column_takes_the_kernel(native, tmp_path):
    """A Parquet file of categoricals is read as ArrowBatches the kernel
    converts whole: no Python values are made but the statistics' text."""
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"n": [2, 1, 2], "s": pa.array(["a", "é", "a"]).dictionary_encode()}),
                   path)
    [batch] = _items(path, native)
    assert pa.types.is_dictionary(batch.record_batch.schema.field("s").type)
    specs = parse_features({"n": {"type": "int64", "from": "n"},
                            "s": {"type": "string", "from": "s"}}, nested=False)
    converter = cases.converter(specs, "n", native)
    examples, _, _, texts, _, declined = converter._native.convert(batch)
    assert declined == 0 and texts == {"s": ["a", "é", "a"]}
    assert examples[1] == converter._encoder.encode({"n": 1, "s": "é"})
    assert batch._converted is None


@pytest.mark.parametrize("index", [3, -1, 127])
def test_an_index_outside_the_dictionary_is_refused(native, index):
    """Indices that do not lie in their dictionary (which Arrow's own
    constructors refuse, but buffers can hold) are malformed input: the
    kernel refuses the batch, never reads past the dictionary."""
    dictionary = pa.array(["x", "yy", "z"])
    indices = pa.Array.from_buffers(pa.int8(), 2, [None, pa.py_buffer(
        np.array([0, index], dtype=np.int8).tobytes())])
    numbers = ("int64", 0, 2, None, pa.py_buffer(np.int64([1, 2]).tobytes()), None)
    floats = ("double", 0, 2, None, pa.py_buffer(np.float64([1, 2]).tobytes()), None)
    text = ArrowBatch("t", 1, pa.record_batch({"c": dictionary}))
    described = (("int8", 0, 2, None, indices.buffers()[1], None),
                 arrow_buffers(text.record_batch)[0])
    assert native.convert_arrow_batch([numbers, floats, described], 2, _plan(native)) is None
    assert not native.arrow_text_valid([described])
    inside = (("int8", 0, 1, None, indices.buffers()[1], None), described[1])
    assert native.arrow_text_valid([inside])
