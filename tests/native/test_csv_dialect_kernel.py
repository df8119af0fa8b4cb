"""A UTF-8 CSV dialect's plain runs through the table kernel, against the csv module's reading.

Generated files of generated dialects (a delimiter of ``,``, tab, ``;``,
``|`` or space; a quote of ``"`` or ``'``, or none; a header or declared
columns; UTF-8 with or without a byte-order mark) hold records of every
kind the csv module reads: plain lines, quoted fields holding delimiters,
quotes and line ends, stray quotes, CRLF and lone CRs, blank lines,
ragged lines, NUL, bytes that are not UTF-8. Cut into blocks of a few
bytes to a megabyte, each file is read as a build reads it (its plain runs
as `CsvRunBatch`es), with the kernel and without: the rows and dead
letters must be the csv module's reading of the whole file (the
reference, `iter_csv_dialect` without `columns`), batched alike on both
paths; each batch then converts alike with the kernel and without.
"""

from __future__ import annotations

import importlib.util
import pickle
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from recordforge.schemas.feature_config import parse_features
from recordforge.transforms.readers import csv as csv_reader
from recordforge.transforms.readers import csv_dialect
from recordforge.transforms.readers.csv import CsvRunBatch
from recordforge.transforms.readers.csv_dialect import CsvOptions, iter_csv_dialect
from recordforge.transforms.readers.rows import ColumnBatch, each_row
from recordforge.transforms.sources.outputs import ROWS, batched

_spec = importlib.util.spec_from_file_location("kernel_cases",
                                               Path(__file__).with_name("kernel_cases.py"))
cases = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cases)

COLUMNS = ["c0", "c1", "c2"]
CSV_KINDS = [kind for kind in cases.KINDS if kind != "bool"]
schemas = cases.schemas(cases.feature_bodies(COLUMNS * 3 + ["absent"], CSV_KINDS), COLUMNS,
                        most=3)


@st.composite
def dialects(draw) -> CsvOptions:
    header = draw(st.booleans())
    return CsvOptions(delimiter=draw(st.sampled_from([",", "\t", ";", "|", " "])),
                      quote=draw(st.sampled_from(['"', "'", None])), header=header,
                      columns=None if header else tuple(COLUMNS),
                      encoding=draw(st.sampled_from(["utf-8", "utf-8-sig"])))


@st.composite
def fields(draw, options: CsvOptions) -> str:
    plain = st.one_of(st.integers(-1000, 1000).map(str), st.sampled_from(cases.VOCABULARY),
                      st.sampled_from(["", " ", "1.5", "x", "é", "\x00", "nan", "1e3"]))
    if draw(st.integers(0, 9)) > 0:
        return draw(plain)
    quote = options.quote or '"'
    text = draw(st.sampled_from([options.delimiter, "\n", "\r\n", quote * 2, "a b"]))
    return draw(st.sampled_from([quote + text + quote, "a" + quote, quote, text]))


@st.composite
def dialect_files(draw, options: CsvOptions) -> bytes:
    width = len(COLUMNS)
    lines = [options.delimiter.join(COLUMNS)] if options.header else []
    for _ in range(draw(st.integers(0, 30))):
        way = draw(st.integers(0, 19))
        count = width if way > 1 else draw(st.integers(0, width + 1))  # (ragged now and then)
        line = options.delimiter.join(draw(fields(options)) for _ in range(count))
        lines.append(line)
    ends = draw(st.sampled_from(["\n", "\r\n", "mixed"]))
    text = "".join(line + (ends if ends != "mixed" else draw(st.sampled_from(["\n", "\r\n", "\r"])))
                   for line in lines)
    data = text.encode("utf-8")
    if draw(st.integers(0, 5)) == 0 and data:  # bytes that are not UTF-8, somewhere
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80"])) + data[at:]
    if draw(st.booleans()):
        data = data.rstrip(b"\r\n")  # (no line end after the last line)
    if draw(st.integers(0, 4)) == 0:
        data = b"\xef\xbb\xbf" + data
    return data


def _read(path: Path, options: CsvOptions, kernels, block: int, columns: bool = True) -> list:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(csv_reader, "kernels", lambda: kernels)
        patch.setattr(csv_dialect, "_BLOCK", block)
        return list(iter_csv_dialect(str(path), options, columns=columns))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(options=dialects(), drawn=st.data(), schema=schemas, salt=cases.salts,
       block=st.sampled_from([4, 16, 64, 1 << 20]))
def test_plain_runs_read_and_convert_as_the_csv_module_reads(native, outcome, tmp_path_factory,
                                                             options, drawn, schema, salt,
                                                             block):
    path = tmp_path_factory.mktemp("dialect") / "t.csv"
    path.write_bytes(drawn.draw(dialect_files(options)))
    reference = _read(path, options, None, block, columns=False)
    with_kernel = _read(path, options, native, block)
    without = _read(path, options, None, block)
    assert cases.same(list(each_row(with_kernel)), reference)
    assert cases.same(list(each_row(without)), reference)
    assert list(map(type, with_kernel)) == list(map(type, without))
    native_out = list(batched(with_kernel, 1000, "t"))
    python_out = list(batched(without, 1000, "t"))
    assert cases.same([(tag, list(value) if tag == ROWS else value) for tag, value in native_out],
                      [(tag, list(value) if tag == ROWS else value) for tag, value in python_out])
    specs, key, label = schema
    for (tag, batch), (_, python_batch) in zip(native_out, python_out):
        if tag != ROWS or not isinstance(batch, ColumnBatch):
            continue
        assert batch.delimiter == options.delimiter
        rows = list(python_batch)
        assert pickle.loads(pickle.dumps(batch)) == batch
        expected = outcome(cases.converter(specs, key, None, salt), specs, rows, label)
        assert cases.same(outcome(cases.converter(specs, key, native, salt), specs, batch, label),
                          expected)
        assert cases.same(outcome(cases.converter(specs, key, None, salt), specs, python_batch,
                                  label), expected)


def test_a_tab_separated_file_comes_as_runs_the_kernel_converts(native, outcome, tmp_path):
    """The comparison above means something: the plain lines of a TSV
    file are one `CsvRunBatch` per block, checked by the kernel (no field
    split), whose rows the kernel converts whole."""
    path = tmp_path / "t.tsv"
    path.write_text("n\ts\tl\n" + "".join(f"{at}\tword {at}, more\tdog\n" for at in range(500)))
    options = CsvOptions(delimiter="\t")
    items = _read(path, options, native, 1 << 20)
    assert [type(item) for item in items] == [CsvRunBatch]
    (batch,) = items
    assert batch.checked is not None and len(batch) == 500 and batch.first_row == 2
    specs = parse_features({"n": {"type": "int64", "from": "n"},
                            "s": {"type": "string", "from": "s"},
                            "l": {"type": "int64", "from": "l", "vocabulary": ["cat", "dog"]}},
                           nested=False)
    converter = cases.converter(specs, "n", native, b"salt")
    examples, keys, checked, texts, digests, declined = converter._native.convert(batch)
    assert declined == 0 and list(texts["s"])[:2] == ["word 0, more", "word 1, more"]
    outcome(converter, specs, batch, "l")
    assert batch._split is None  # (no field split in Python)
    assert cases.same(list(batch), list(iter_csv_dialect(str(path), options)))


def test_other_encodings_are_read_by_the_csv_module_alone(tmp_path):
    """A dialect of another encoding (its text is not UTF-8) gives rows one
    by one, as without `columns`."""
    path = tmp_path / "t.csv"
    path.write_bytes("a;b\n1;é\n".encode("latin-1"))
    options = CsvOptions(delimiter=";", encoding="latin-1")
    items = list(iter_csv_dialect(str(path), options, columns=True))
    assert items == list(iter_csv_dialect(str(path), options))
    assert [row.values for row in items] == [{"a": "1", "b": "é"}]
