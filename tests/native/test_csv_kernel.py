"""The native CSV kernel against the Python path: Examples, keys, labels, dead letters, statistics.

Generated schemas (int64, float, string, bytes and vocabulary features with
bounds, allowed values, size limits, optional features and defaults) read
generated CSV files (every value class of docs/reasons.md for these types,
hostile text, NaN/inf, huge numbers, empty fields, missing and ragged
columns, quotes, CRLF, a byte-order mark, bytes that are not UTF-8) through
the reader; each batch is converted by a converter with the kernel and one
without, and everything they give must be equal.
"""

from __future__ import annotations

import importlib.util
import pickle
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from recordforge.schemas.feature_config import parse_features
from recordforge.transforms import batch_converter, splits
from recordforge.transforms.batch_converter import BatchConverter
from recordforge.transforms.framed_examples import FramedExamples
from recordforge.transforms.readers import csv as csv_reader
from recordforge.transforms.readers.csv import CsvRunBatch, iter_csv
from recordforge.transforms.readers.rows import ColumnBatch
from recordforge.transforms.splits import SplitAssigner
from recordforge.transforms.int_labels import IntLabels

_spec = importlib.util.spec_from_file_location("kernel_cases",
                                               Path(__file__).with_name("kernel_cases.py"))
cases = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cases)

COLUMNS = ["c0", "c1", "c2", "c3", "c4"]
VOCABULARY = cases.VOCABULARY

# Text that every rule must judge as the Python path does.
HOSTILE = ["", " ", "\t", " 1", "1 ", "1_000", "\u0663", "0x10", "true", "False", "TRUE",
           "nan", "NaN", "-nan", "inf", "-inf", "Infinity", "+infinity", "1.0", "1e3",
           "3.5", "-0", "+0", "-0.0", "++1", "--1", "1e", "e1", ".", "1.", ".5", "é",
           "\x00", "\x1c5", "5\x1f", "\u00a05", "9223372036854775807",
           "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
           "00000000000000000000000000000000000000000000000000000000000000000000001",
           "1" * 80, "1e400", "-1e400", "3.4028235677973366e38", "3.4028234663852886e38",
           "3.4028235677973362e38", "1e-400", "4.9e-324", "1.17549435e-38", "cat", "dog",
           "Cat", " cat", "1.5e10", "123456789012345678901234567890", "0.1", "2.5e-3"]

number_text = st.one_of(
    st.integers(-2**66, 2**66).map(str),
    st.integers(-1000, 1000).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.floats(width=32).map(repr),
    st.decimals(allow_nan=False, allow_infinity=False).map(str),
)
field_text = st.one_of(
    number_text,
    st.sampled_from(HOSTILE),
    st.sampled_from(VOCABULARY),
    st.text(st.characters(blacklist_characters=',"\r\n', blacklist_categories=("Cs",)),
            max_size=12),
)


CSV_KINDS = [kind for kind in cases.KINDS if kind != "bool"]  # (no CSV field is a bool)
schemas = cases.schemas(cases.feature_bodies(COLUMNS * 4 + ["absent"], CSV_KINDS), COLUMNS)


@st.composite
def csv_files(draw) -> bytes:
    header = draw(st.sampled_from([COLUMNS, COLUMNS[:3], COLUMNS[::-1]]))
    lines = []
    # Most files are clean, so that their lines make plain runs (the
    # kernel's input); the others mix in every kind of damage.
    damaged = draw(st.integers(0, 3)) == 0
    for _ in range(draw(st.integers(0, 12))):
        line = ",".join(draw(field_text) for _ in header)
        damage = draw(st.integers(0, 12)) if damaged else -1
        if damage == 0:
            line += ",extra"  # ragged
        elif damage == 1:
            line = '"' + line.replace('"', '""') + '"' + ",x" * (len(header) - 1)
        elif damage == 2:
            line = ""  # blank line
        lines.append(line.encode("utf-8", "surrogatepass"))
        if damage == 3:
            lines[-1] += b"\xff\xfe"  # not UTF-8
    newline = draw(st.sampled_from([b"\n", b"\r\n"]))
    bom = b"\xef\xbb\xbf" if draw(st.booleans()) else b""
    return bom + newline.join([",".join(header).encode()] + lines) + newline


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=schemas, data=csv_files(), salt=cases.salts)
def test_kernel_and_python_path_agree(native, outcome, tmp_path_factory, schema, data, salt):
    """Both paths give the same; with a salt, the digests of the convert
    call are hashlib's (`outcome`), in batches with bad rows too."""
    specs, key, label = schema
    path = tmp_path_factory.mktemp("csv") / "t.csv"
    path.write_bytes(data)
    with_kernel = cases.converter(specs, key, native, salt)
    without = cases.converter(specs, key, None, salt)
    for item in iter_csv(str(path), columns=True):
        if isinstance(item, dict):
            continue  # a read dead letter: the reader's, the same on both paths
        batch = item if isinstance(item, ColumnBatch) else [item]
        assert outcome(with_kernel, specs, batch, label) == \
            outcome(without, specs, batch, label)


KINDS = [{"type": "int64"}, {"type": "int64", "min": -5, "max": 2**63 - 1},
         {"type": "float"}, {"type": "float", "allow_nan": True, "min": -1, "max": 1e30},
         {"type": "string"}, {"type": "string", "max_bytes": 2}, {"type": "bytes"},
         {"type": "int64", "vocabulary": VOCABULARY}, {"type": "int64", "required": False},
         {"type": "float", "default": "7"}]


@pytest.mark.parametrize("body", KINDS, ids=lambda body: "-".join(map(str, body.values())))
def test_every_hostile_value_in_a_plain_run(native, outcome, tmp_path, body):
    """Each value class, alone in its column of a plain run, beside a good
    row: both paths give the same rows, keys, labels, dead letters and
    statistics, with the value's column as the key and as the label."""
    specs = parse_features({"v": {**body, "from": "c0"}, "w": {"type": "int64", "from": "c1"}},
                           nested=False)
    for index, text in enumerate(HOSTILE):
        path = tmp_path / f"t{index}.csv"
        path.write_bytes(f"c0,c1\n{text},1\n5,2\n".encode("utf-8", "surrogatepass"))
        items = list(iter_csv(str(path), columns=True))
        for key, label in ((None, None), ("c0", "v"), ("c1", "w")):
            outcomes = [outcome(cases.converter(specs, key, kernels), specs, items[0], label)
                        for kernels in (native, None)]
            assert outcomes[0] == outcomes[1], (text, key)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(st.tuples(st.one_of(st.sampled_from(VOCABULARY), st.sampled_from(VOCABULARY),
                                         st.sampled_from(HOSTILE)),
                               st.integers(-2**63, 2**63 - 1)), min_size=1, max_size=30))
def test_vocabulary_labels_count_as_the_python_path(native, outcome, tmp_path_factory, rows):
    """A vocabulary label column, clean (the kernel's ids, counted as ids)
    or not: both paths give the same labels, label counts (one split and
    two) and statistics."""
    specs = parse_features({"v": {"type": "int64", "vocabulary": VOCABULARY, "from": "c0"},
                            "n": {"type": "int64", "from": "c1"}}, nested=False)
    path = tmp_path_factory.mktemp("csv") / "t.csv"
    path.write_bytes("c0,c1\n".encode() + "".join(
        f"{label},{number}\n" for label, number in rows).encode("utf-8", "surrogatepass"))
    for batch in iter_csv(str(path), columns=True):
        if isinstance(batch, dict):
            continue
        with_kernel = cases.converter(specs, "c1", native)
        assert outcome(with_kernel, specs, batch, "v") == \
            outcome(cases.converter(specs, "c1", None), specs, batch, "v")
        if all(label in VOCABULARY for label, _ in rows) and isinstance(batch, CsvRunBatch):
            labels = with_kernel.convert_observed_batch(batch, "v", tuple(VOCABULARY))[1]
            assert isinstance(labels, IntLabels)  # the ids were counted
            numbers = with_kernel.convert_observed_batch(batch, "n", None)[1]
            assert isinstance(numbers, IntLabels)  # and a label of plain numbers too
            assert list(numbers) == [str(number) for _, number in rows]


def test_a_plain_run_takes_the_kernel(native, outcome, tmp_path):
    """The comparison above means something: plain runs reach the kernel,
    which converts their good rows itself."""
    path = tmp_path / "t.csv"
    path.write_bytes(b"c0,c1\n1,a\n2,b\n")
    [batch] = list(iter_csv(str(path), columns=True))
    assert isinstance(batch, CsvRunBatch)
    specs = parse_features({"n": {"type": "int64", "from": "c0"},
                            "s": {"type": "string", "from": "c1"}}, nested=False)
    examples, keys, checked, texts, _, declined = cases.converter(specs, "c0",
                                                             native)._native.convert(batch)
    assert declined == 0 and isinstance(examples, FramedExamples)
    # The kernel vouched for the run and read its bytes: no field was split.
    assert batch._split is None
    assert examples == [
        BatchConverter(specs, {}, "c0")._encoder.encode({"c0": "1", "c1": "a"}),
        BatchConverter(specs, {}, "c0")._encoder.encode({"c0": "2", "c1": "b"})]
    assert keys == [b"\x02\x81\x01", b"\x02\x81\x02"]
    # Text columns are the reader's str values (what the statistics read).
    assert checked["s"] == ["a", "b"] and texts == {"c1": ["a", "b"]}
    # Numbers stay the kernel's array: no list of Python ints is made.
    assert isinstance(checked["n"], np.ndarray) and checked["n"].tolist() == [1, 2]
    # Converting with statistics leaves the fields unsplit too.
    outcome(cases.converter(specs, "c0", native), specs, batch, "n")
    assert batch._split is None
    assert batch.columns == {"c0": ["1", "2"], "c1": ["a", "b"]}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(st.text(st.characters(blacklist_characters=',"\r\n\ufeff',
                                            blacklist_categories=("Cs",)), min_size=1, max_size=40)
                      | st.sampled_from(["a", "x" * 17, "é", "aé", "\x7f", "\x00"]),
                      min_size=1, max_size=30),
       pad=st.text("0123456789", min_size=1, max_size=9))
def test_text_columns_are_the_readers_str_values(native, tmp_path, texts, pad):
    """A text column's checked values are the str the reader splits, as
    text: ASCII fields (copied into an ASCII str as they are) and the rest
    (decoded), starting at any byte of the run (`pad` shifts them)."""
    path = tmp_path / "t.csv"
    path.write_text("c0,c1\n" + "".join(f"{pad},{text}\n" for text in texts), encoding="utf-8")
    [batch] = [item for item in iter_csv(str(path), columns=True) if not isinstance(item, dict)]
    assume(isinstance(batch, CsvRunBatch))
    specs = parse_features({"n": {"type": "int64", "from": "c0"},
                            "s": {"type": "string", "from": "c1"}}, nested=False)
    done = cases.converter(specs, None, native)._native.convert(batch)
    assert done is not None
    found = done[2]["s"]
    assert found == texts and [type(text) for text in found] == [str] * len(texts)
    # Equal strings hash, compare and encode alike whichever way they were made.
    assert [hash(text) for text in found] == [hash(text) for text in texts]
    assert [text.encode("utf-8") for text in found] == [text.encode("utf-8") for text in texts]


def _fails(*_):
    raise AssertionError("the rows were hashed outside the convert call")


@pytest.mark.parametrize("key", ["c0", "c1", None])
def test_a_clean_run_is_hashed_in_the_convert_call_alone(native, tmp_path, monkeypatch, key):
    """The convert call gives every row's digest (of its key, or its
    Example without one): the batch carries them, and neither the
    converter nor the label count hashes a row again. A row the kernel
    declines has 16 zero bytes; of those, only the rows the row path
    converts are hashed by Python, the others' digests are the kernel's."""
    specs = parse_features({"n": {"type": "int64", "from": "c0"},
                            "s": {"type": "string", "from": "c1", "required": False}},
                           nested=False)
    assigner = SplitAssigner("flights", [("train", 0.5), ("test", 0.5)])
    clean, declined = tmp_path / "clean.csv", tmp_path / "declined.csv"
    clean.write_bytes(b"c0,c1\n1,a\n2,b\n-3,c\n")
    # "2.5" is no int64 (a dead letter); an empty optional text the kernel
    # declines and the row path converts (without a key column "c1").
    declined.write_bytes(b"c0,c1\n1,a\n2.5,b\n4,\n-3,c\n")
    [batch] = list(iter_csv(str(clean), columns=True))
    converter = cases.converter(specs, key, native, assigner.salt)
    examples, keys, _, _, digests, refused = converter._native.convert(batch)
    assert refused == 0
    sources = examples if key is None else keys
    assert digests == b"".join(assigner.python_hash_rows(sources)[0])
    hashed_here = []

    def counted(salt, rows):
        hashed_here.extend(rows)
        return splits.row_digests(salt, rows)

    with monkeypatch.context() as patch:
        patch.setattr(batch_converter, "row_digests", _fails)
        patch.setattr(splits, "row_digests", _fails)
        hashed = converter.convert_observed_batch(batch, None)[0]
        assert hashed.joined == digests and assigner.hashed(hashed) is hashed
    [batch] = list(iter_csv(str(declined), columns=True))
    examples, keys, _, _, digests, refused = converter._native.convert(batch)
    assert examples[1] is None and examples[2] is None and digests[16:48] == bytes(32)
    assert not isinstance(examples, FramedExamples)  # (a list for the row path to fill in)
    assert refused == examples.count(None) == 2
    with monkeypatch.context() as patch:
        patch.setattr(batch_converter, "row_digests", counted)
        hashed, _, dead_letters, _ = converter.convert_observed_batch(batch, None)
    rows = [example if row_key is None else row_key for row_key, example in hashed]
    assert hashed.joined_digests() == b"".join(assigner.python_hash_rows(rows)[0])
    assert len(dead_letters) == 1 + (key == "c1")  # the empty key too
    assert hashed_here == ([] if key == "c1" else [rows[1]])


def _items(path, kernels):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(csv_reader, "kernels", lambda: kernels)
        return list(iter_csv(str(path), columns=True))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=csv_files(), block=st.sampled_from([16, 64, 1 << 20]))
def test_the_reader_gives_the_same_batches_with_the_kernel(native, tmp_path_factory, data,
                                                           block):
    """A run the kernel vouches for (`check_csv_run`) is the batch, rows and
    dead letters the reader gives without it, its columns split on demand."""
    path = tmp_path_factory.mktemp("csv") / "t.csv"
    path.write_bytes(data)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(csv_reader, "_BLOCK", block)  # runs cut at many places
        with_kernel, without = _items(path, native), _items(path, None)
    assert list(map(type, with_kernel)) == list(map(type, without))
    assert with_kernel == without
    for item in with_kernel:
        if isinstance(item, ColumnBatch):
            assert pickle.loads(pickle.dumps(item)) == item


# (b"\xc3" and b"\xe2\x82" alone: a run cut inside a multi-byte character)
run_bytes = st.lists(st.sampled_from([b"1", b"a", b",", b"\n", b"\r\n", b"\r", b"\xc3\xa9",
                                      b"\xff", b"\x00", b" ", b"\xc3", b"\xe2\x82", b"\xe2\x82\xac",
                                      b'"']), max_size=40).map(b"".join)


@settings(max_examples=2000, deadline=None)
@given(run=run_bytes, width=st.integers(1, 4))
def test_check_csv_run_takes_what_the_reader_takes(native, run, width):
    """The kernel's test of a run is the reader's (`_plain_lines`): where
    the reader's promise holds (a CR only in CRLF) they agree exactly, and
    on any bytes the kernel never takes a run the reader would refuse."""
    _assert_check_is_the_readers(native, run, width)


def _assert_check_is_the_readers(native, run: bytes, width: int) -> None:
    lines = csv_reader._plain_lines(run, width)
    checked = native.check_csv_run(run, width)
    rows = None if checked is None else len(checked)
    if rows:
        assert lines is not None and len(lines) == rows
    if run.count(b"\r") == run.count(b"\r\n"):
        assert (rows or None) == (len(lines) if lines else None)


# Runs longer than the kernel's 64-byte blocks of marks (`csv_marks.rs`):
# fields of any length put the commas, CRs, LFs and bad bytes at every
# offset of a block, and across a block's end.
long_run_bytes = st.lists(st.one_of(
    st.sampled_from([b",", b"\n", b"\r\n", b"\r", b"\xc3\xa9", b"\xff", b"\xc3", b"\xe2\x82", b'"']),
    st.integers(0, 90).map(lambda length: b"x" * length)), max_size=30).map(b"".join)


@settings(max_examples=1000, deadline=None)
@given(run=long_run_bytes, width=st.integers(1, 4))
def test_check_csv_run_takes_what_the_reader_takes_across_blocks(native, run, width):
    """As above, on runs spanning many of the kernel's blocks."""
    _assert_check_is_the_readers(native, run, width)


def test_a_run_the_reader_refuses_names_its_lines(native):
    """Should the kernel ever take a run the reader refuses, the batch says
    where, rather than giving columns of the wrong length."""
    # (a stand-in for the kernel's answer: only its length, 2 rows, is read)
    batch = CsvRunBatch("t.csv", 2, None, b"1,2\n3\n", ("a", "b"), range(2))
    with pytest.raises(RuntimeError, match="t.csv lines 2-3"):
        batch.columns


@st.composite
def hostile_runs(draw) -> tuple[bytes, int]:
    """A run as the reader might hand one over, or worse: lines of
    generated fields (some ragged, blank, quoted or not UTF-8), LF or CRLF
    line ends, a final line end or none, and possibly cut at any byte
    (inside a multi-byte character too)."""
    width = draw(st.integers(1, 4))
    lines = []
    for _ in range(draw(st.integers(1, 8))):
        count = width + (draw(st.integers(-1, 1)) if draw(st.integers(0, 4)) == 0 else 0)
        line = ",".join(draw(field_text) for _ in range(max(count, 0)))
        line = line.encode("utf-8", "surrogatepass")
        extra = draw(st.sampled_from([b"", b"", b"", b"\xff", b"\xc3", b'"', b"\r", b"\xe2\x82"]))
        lines.append(line + extra)
    run = b"".join(line + draw(st.sampled_from([b"\n", b"\r\n"])) for line in lines)
    if draw(st.booleans()):
        run = run[:draw(st.integers(0, len(run)))]
    return run, width


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(generated=hostile_runs(), schema=schemas)
def test_a_checked_run_converts_as_an_unchecked_one(native, outcome, generated, schema):
    """The convert call on the fields the reader's check kept
    (`convert_checked_run`) gives what the run's own parse gives
    (`convert_csv_run`); and the reader's batches of any run, converted
    with the kernel, give the rows, dead letters and statistics of the
    Python path (a run the check refuses is read record by record)."""
    run, width = generated
    specs, key, label = schema
    names = COLUMNS[:width]
    checked = native.check_csv_run(run, width)
    with_kernel = cases.converter(specs, key if key in names else None, native)
    if checked is not None and with_kernel._native is not None:
        plan = with_kernel._native._plan(tuple(names))
        if plan is not None:
            assert native.convert_checked_run(checked, plan[0]) == \
                native.convert_csv_run(run, len(checked), plan[0])
    without = cases.converter(specs, key if key in names else None, None)
    items = {}
    for kernels in (native, None):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(csv_reader, "kernels", lambda: kernels)
            items[kernels] = list(csv_reader._plain_csv_rows(run, 2, names, "t.csv", True))
    assert items[native] == items[None]
    # (the kernel's check decides: a run it takes is one batch of its fields)
    assert any(isinstance(item, CsvRunBatch) and item.checked is not None
               for item in items[native]) == bool(checked)
    for item in items[native]:
        if isinstance(item, dict):
            continue
        batch = item if isinstance(item, ColumnBatch) else [item]
        assert outcome(with_kernel, specs, batch, label) == outcome(without, specs, batch, label)


def test_a_checked_run_is_not_parsed_again(native, tmp_path):
    """The reader's check keeps the run's fields, and the convert call
    takes them: the run's own parse (`convert_csv_run`) is not called."""
    path = tmp_path / "t.csv"
    path.write_bytes("c0,c1\n1,é\r\n2,b\n".encode())
    [batch] = list(iter_csv(str(path), columns=True))
    assert isinstance(batch, CsvRunBatch) and len(batch.checked) == 2
    specs = parse_features({"n": {"type": "int64", "from": "c0"},
                            "s": {"type": "string", "from": "c1"}}, nested=False)
    converter = cases.converter(specs, "c0", native)
    expected = converter._native.convert(batch)
    converter._native._native = SimpleNamespace(**{**vars(converter._native._native),
                                                   "convert_csv_run": _fails})
    again = converter._native.convert(batch)
    assert again[:2] == expected[:2] and again[4] == expected[4]
    assert again[2]["s"] == expected[2]["s"] == ["é", "b"]
    assert again[2]["n"].tolist() == expected[2]["n"].tolist() == [1, 2]


def test_only_the_check_makes_a_checked_run(native):
    """A `CsvRun` comes from `check_csv_run` alone, of immutable bytes:
    Python cannot make one for a run the check never saw."""
    with pytest.raises(TypeError):
        type(native.check_csv_run(b"1\n", 1))()
    with pytest.raises(TypeError):
        native.check_csv_run(bytearray(b"1\n"), 1)
