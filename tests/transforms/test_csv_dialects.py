"""CSV dialects (`source.csv`): written by Python's csv module in any dialect
and encoding, read back by `iter_csv_dialect` as the same rows; errors as
dead letters; the default dialect still goes through the fast reader."""

import csv
import io

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recordforge.transforms.readers.csv_dialect import (CsvOptions, iter_csv_dialect,
                                                        read_dialect_header)
from recordforge.transforms.readers.csv import iter_csv
from recordforge.transforms.readers.rows import SourceRow, each_row
from recordforge.transforms.readers.tables import (iter_table, plan_table_ranges,
                                                   read_range)

ENCODINGS = ["utf-8", "utf-8-sig", "latin-1", "cp1252", "utf-16"]
# Characters every encoding above can write (cp1252 lacks some latin-1 controls).
TEXT = st.text(alphabet=st.sampled_from(list("ab yzAZ09,;|\t\"'\n-éüß")), max_size=12)


def _write(path, rows, options: CsvOptions, names):
    buffer = io.StringIO(newline="")
    quoting = csv.QUOTE_NONE if options.quote is None else csv.QUOTE_MINIMAL
    kwargs = {"quotechar": options.quote} if options.quote else {"escapechar": None}
    writer = csv.writer(buffer, delimiter=options.delimiter, quoting=quoting,
                        lineterminator="\n", **kwargs)
    if options.header:
        writer.writerow(names)
    writer.writerows(rows)
    path.write_bytes(buffer.getvalue().encode(options.encoding))


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(delimiter=st.sampled_from([",", ";", "|", "\t"]),
       quote=st.sampled_from(['"', "'"]),
       header=st.booleans(),
       encoding=st.sampled_from(ENCODINGS),
       rows=st.lists(st.lists(TEXT, min_size=3, max_size=3), max_size=8))
def test_any_dialect_round_trips(tmp_path, delimiter, quote, header, encoding, rows):
    names = ["a", "b", "c"]
    rows = [row for row in rows if row != ["", "", ""]]  # a line of nothing is blank
    options = CsvOptions(delimiter=delimiter, quote=quote, header=header,
                         columns=None if header else tuple(names), encoding=encoding)
    if options.is_default:
        options = CsvOptions(delimiter=delimiter, quote=quote, header=header,
                             columns=None, encoding="latin-1")
    path = tmp_path / "t.csv"
    _write(path, rows, options, names)
    read = list(iter_csv_dialect(str(path), options))
    if not rows and not header:  # nothing at all in the file
        assert [item["reason"] for item in read] == ["empty_file"]
        return
    assert all(isinstance(item, SourceRow) for item in read), read
    assert [list(item.values.values()) for item in read] == rows
    assert all(list(item.values) == names for item in read)
    # rows are numbered by the line they start on
    assert [item.row for item in read] == sorted(item.row for item in read)
    if read:
        assert read[0].row == (2 if header else 1)


def test_tab_separated_without_header_and_null_texts_stay_text(tmp_path):
    path = tmp_path / "t.tsv"
    path.write_bytes("1\tZürich\tNA\n\n2\tOslo\t3.5\n".encode("latin-1"))
    options = CsvOptions(delimiter="\t", header=False, columns=("id", "city", "score"),
                         encoding="latin-1")
    rows = list(iter_csv_dialect(str(path), options))
    assert rows == [SourceRow(str(path), 1, {"id": "1", "city": "Zürich", "score": "NA"}),
                    SourceRow(str(path), 3, {"id": "2", "city": "Oslo", "score": "3.5"})]
    assert read_dialect_header(str(path), options) == ["id", "city", "score"]


def test_utf16_with_bom_and_a_quoted_newline(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes('x;y\n1;"two\nlines"\n3;4\n'.encode("utf-16"))
    options = CsvOptions(delimiter=";", encoding="utf-16")
    rows = list(iter_csv_dialect(str(path), options))
    assert [(r.row, r.values) for r in rows] == [(2, {"x": "1", "y": "two\nlines"}),
                                                 (4, {"x": "3", "y": "4"})]
    assert read_dialect_header(str(path), options) == ["x", "y"]


def test_ragged_rows_bad_header_and_bad_encoding_are_dead_letters(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes(b"a|b\n1|2\n1|2|3\n4|5\n")
    rows = list(iter_csv_dialect(str(path), CsvOptions(delimiter="|")))
    assert [r["reason"] if isinstance(r, dict) else r.values for r in rows] == [
        {"a": "1", "b": "2"}, "csv_ragged_row", {"a": "4", "b": "5"}]
    assert rows[1]["row"] == 3
    dup = tmp_path / "dup.csv"
    dup.write_bytes(b"a|a\n1|2\n")
    [problem] = iter_csv_dialect(str(dup), CsvOptions(delimiter="|"))
    assert problem["reason"] == "csv_bad_header" and "'a'" in problem["message"]
    # cp1252 has no character for byte 0x81: that record is the dead letter,
    # and every row around it is read
    bad = tmp_path / "bad.csv"
    bad.write_bytes(b"a;b\n" + b"1;2\n" * 5000 + b"3;\x81\n" + b"4;5\n")
    out = list(iter_csv_dialect(str(bad), CsvOptions(delimiter=";", encoding="cp1252")))
    assert isinstance(out[0], SourceRow) and out[0].values == {"a": "1", "b": "2"}
    assert out[-2]["reason"] == "invalid_encoding" and "cp1252" in out[-2]["message"]
    assert out[-2]["row"] == 5002 and "byte 0x81" in out[-2]["message"]
    assert sum(isinstance(item, SourceRow) for item in out) == 5001
    empty = tmp_path / "empty.csv"
    empty.write_bytes(b"")
    assert [r["reason"] for r in iter_csv_dialect(str(empty), CsvOptions(delimiter=";"))] == [
        "empty_file"]


def test_no_quoting_keeps_quotes_as_data(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes(b'a,b\n"x,y\n')
    rows = list(iter_csv_dialect(str(path), CsvOptions(quote=None)))
    assert rows[0].values == {"a": '"x', "b": "y"}


def test_default_dialect_keeps_the_fast_reader_and_others_read_whole_files(tmp_path):
    import fsspec
    fs = fsspec.filesystem("file")
    path = tmp_path / "big.csv"
    path.write_bytes(b"a;b\n" + b"1;2\n" * 50000)
    default_units = plan_table_ranges(fs, str(path), "csv", range_bytes=50000,
                                      options=CsvOptions())
    assert len(default_units) > 1  # byte ranges, as without options
    units = plan_table_ranges(fs, str(path), "csv", range_bytes=50000,
                              options=CsvOptions(delimiter=";"))
    assert len(units) == 1
    # (its plain lines as one batch, as the default dialect gives them)
    rows = list(each_row(read_range(fs, units[0], "csv", CsvOptions(delimiter=";"))))
    assert len(rows) == 50000 and rows[0].values == {"a": "1", "b": "2"}
    # the default reader splits nothing at ";"
    first = next(iter(iter_table(str(path), "csv", CsvOptions())))
    assert first.values == {"a;b": "1;2"}


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_every_encoding_reads_non_ascii_text(tmp_path, encoding):
    text = "Zoë" if encoding == "latin-1" else "Zoë Œuvre"  # no Œ in latin-1
    path = tmp_path / "t.csv"
    path.write_bytes(f"name|v\n{text}|1\n".encode(encoding))
    [row] = iter_csv_dialect(str(path), CsvOptions(delimiter="|", encoding=encoding))
    assert row.values == {"name": text, "v": "1"}


def _csv_text(rows, names, delimiter, header) -> str:
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer, delimiter=delimiter, lineterminator="\n")
    if header:
        writer.writerow(names)
    writer.writerows(rows)
    return buffer.getvalue()


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(width=st.integers(1, 3), data=st.data(), delimiter=st.sampled_from([",", ";", "\t"]),
       header=st.booleans(), encoding=st.sampled_from(ENCODINGS), bom=st.booleans(),
       bad=st.booleans())
def test_every_dialect_reads_what_the_default_reader_reads(tmp_path, width, data, delimiter,
                                                         header, encoding, bom, bad):
    """Issues 38.3 and 38.6: a quoted empty record ``""`` is a row, a UTF-8
    byte-order mark is dropped, and a record that is not UTF-8 is that
    record's dead letter, in every dialect and encoding, as the default
    reader does: the same records give the same rows and dead letters."""
    rows = data.draw(st.lists(st.lists(TEXT, min_size=width, max_size=width), min_size=1,
                              max_size=6))
    if bad and encoding in ("utf-8", "utf-8-sig"):  # a byte that is not UTF-8 in one value
        at = data.draw(st.integers(0, len(rows) - 1))
        rows[at][0] += "\u00a4"  # (replaced by 0xff in both files below)
    names = ["a", "b", "c"][:width]
    mark = b"\xef\xbb\xbf" if bom else b""
    default = tmp_path / "default.csv"
    unbreak = lambda raw: raw.replace("\u00a4".encode(), b"\xff")  # noqa: E731
    default.write_bytes(mark + unbreak(_csv_text(rows, names, ",", True).encode("utf-8")))
    options = CsvOptions(delimiter=delimiter, header=header,
                         columns=None if header else tuple(names), encoding=encoding)
    dialect = tmp_path / "dialect.csv"
    # (Python's utf-8-sig and utf-16 codecs write their own mark)
    dialect.write_bytes((b"" if encoding == "utf-16" else mark) + unbreak(_csv_text(
        rows, names, delimiter, header).encode("utf-8" if encoding == "utf-8-sig" else encoding)))
    expected = [(item.row, item.values) if isinstance(item, SourceRow)
                else (item["row"], item["reason"]) for item in iter_csv(str(default))]
    shift = 0 if header else 1  # the default file's header is its line 1
    got = [(item.row + shift, item.values) if isinstance(item, SourceRow)
           else (item["row"] + shift, item["reason"])
           for item in iter_csv_dialect(str(dialect), options)]
    assert got == expected
    assert len(got) == len(rows)
