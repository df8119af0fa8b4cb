"""Table readers: good rows against Python's csv/json/pyarrow, bad rows as dead letters."""

import csv
import gzip
import io
import json

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings, strategies as st

from recordforge.transforms import table_readers as tr
from recordforge.transforms.rows import SourceRow


def split(items):
    rows = [i for i in items if isinstance(i, SourceRow)]
    dead = [i for i in items if isinstance(i, dict)]
    assert len(rows) + len(dead) == len(items)
    return rows, dead


def reasons(dead):
    return [(d["reason"], d["row"]) for d in dead]


def read_ranges(path, points, reader=tr.iter_csv, with_lines=True):
    out = []
    for i, point in enumerate(points):
        end = points[i + 1].offset if i + 1 < len(points) else None
        if with_lines:
            out += reader(path, start=point.offset, end=end, start_line=point.line)
        else:
            out += reader(path, start=point.offset, end=end)
    return out


# ---------------------------------------------------------------------------
# CSV

def test_csv_good_rows_match_python_csv(tmp_path):
    path = tmp_path / "good.csv"
    rows = [["id", "text", "n"], ["1", "plain", "10"], ["2", 'with "quotes", comma', "20"],
            ["3", "multi\nline\nfield", "30"], ["4", "", "40"], ["5", "ünïcødé ✓", "50"]]
    with open(path, "w", newline="", encoding="utf-8") as f:
        csv.writer(f, lineterminator="\r\n").writerows(rows)
    got, dead = split(list(tr.iter_csv(str(path))))
    assert dead == []
    with open(path, newline="", encoding="utf-8") as f:
        expected = list(csv.DictReader(f))
    assert [r.values for r in got] == expected
    # rows start on lines 2, 3, 4, 7 (the multi-line field spans 4-6), 8
    assert [r.row for r in got] == [2, 3, 4, 7, 8]
    assert {r.source for r in got} == {str(path)}


def test_csv_bom_crlf_nul_and_huge_field(tmp_path):
    path = tmp_path / "x.csv"
    huge = "x" * 300_000  # above csv's default 131072-character field limit
    path.write_bytes(b"\xef\xbb\xbfa,b\r\n1,nul\x00byte\r\n" + f'2,"{huge}"\r\n3,{huge}\r\n'.encode())
    limit_before = csv.field_size_limit()
    got, dead = split(list(tr.iter_csv(str(path))))
    assert dead == []
    assert [r.values for r in got] == [{"a": "1", "b": "nul\x00byte"}, {"a": "2", "b": huge},
                                       {"a": "3", "b": huge}]
    assert csv.field_size_limit() == limit_before  # the raised limit did not leak


def test_csv_bad_rows_are_dead_letters_and_neighbours_survive(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_bytes(
        b"a,b\n"
        b"1,ok\n"
        b"2,too,many\n"          # line 3 ragged
        b"3\n"                   # line 4 ragged
        b"4,bad \xff utf8\n"     # line 5 invalid utf-8
        b'5,"x"y\n'              # line 6 text after closing quote
        b"6,bare\rcr\n"          # line 7 bare CR in unquoted field
        b"\n"                    # line 8 blank: skipped, not a row
        b"7,ok\n")               # line 9
    got, dead = split(list(tr.iter_csv(str(path))))
    assert [(r.row, r.values) for r in got] == [(2, {"a": "1", "b": "ok"}),
                                                (9, {"a": "7", "b": "ok"})]
    assert reasons(dead) == [("csv_ragged_row", 3), ("csv_ragged_row", 4), ("invalid_utf8", 5),
                             ("csv_malformed", 6), ("csv_malformed", 7)]
    for d in dead:
        assert d["source"] == str(path) and d["stage"] == "read"
        assert f"line {d['row']}" in d["message"]
        json.dumps(d)
    assert dead[0]["input"] == ["2", "too", "many"]


def test_csv_unterminated_quote_swallows_the_rest_as_one_malformed_record(tmp_path):
    path = tmp_path / "open.csv"
    path.write_bytes(b'a,b\n1,ok\n2,"never closed\n3,x\n4,y\n')
    got, dead = split(list(tr.iter_csv(str(path))))
    assert [r.row for r in got] == [2]
    assert reasons(dead) == [("csv_malformed", 3)]


@pytest.mark.parametrize("content,reason", [
    (b"", "empty_file"),
    (b"\n1,2\n", "csv_bad_header"),
    (b",,\n1,2,3\n", "csv_bad_header"),
    (b"a,b,a\n1,2,3\n", "csv_bad_header"),
    (b"a,\xff\n1,2\n", "invalid_utf8"),
])
def test_csv_file_level_problems(tmp_path, content, reason):
    path = tmp_path / "f.csv"
    path.write_bytes(content)
    items = list(tr.iter_csv(str(path)))
    assert [d["reason"] for d in items] == [reason]
    assert items[0]["source"] == str(path)
    if reason == "csv_bad_header" and b"a,b,a" in content:
        assert "'a'" in items[0]["message"]


def test_csv_gzip_is_read_transparently(tmp_path):
    path = tmp_path / "g.csv.gz"
    path.write_bytes(gzip.compress(b"a,b\n1,2\n3,4\n"))
    got, dead = split(list(tr.iter_csv(str(path))))
    assert dead == [] and [r.values["b"] for r in got] == ["2", "4"]


def test_missing_and_truncated_files_are_read_errors(tmp_path):
    missing = list(tr.iter_csv(str(tmp_path / "nope.csv")))
    assert [d["reason"] for d in missing] == ["read_error"]
    assert "nope.csv" in missing[0]["message"]
    data = gzip.compress(b"a,b\n" + b"1,2\n" * 20000)
    path = tmp_path / "cut.csv.gz"
    path.write_bytes(data[: len(data) // 2])
    got, dead = split(list(tr.iter_csv(str(path))))
    assert [d["reason"] for d in dead] == ["read_error"]
    assert str(path) in dead[0]["message"] and "EOFError" in dead[0]["message"]


def test_csv_memory_filesystem_and_source_name():
    fs = fsspec.filesystem("memory")
    fs.pipe("/tr/m.csv", b"a\n1\n2\n")
    got, dead = split(list(tr.iter_csv("memory://tr/m.csv")))
    assert [r.values["a"] for r in got] == ["1", "2"]
    assert got[0].source == "memory://tr/m.csv"


def test_csv_split_points_never_inside_quotes(tmp_path):
    path = tmp_path / "q.csv"
    lines = ["id,text"]
    for i in range(400):
        lines.append(f'{i},"a\nb ""{i}"",\nc"' if i % 3 == 0 else f"{i},t{i}")
    path.write_text("\n".join(lines) + "\n")
    whole = list(tr.iter_csv(str(path)))
    assert len(whole) == 400
    for target in (1, 17, 100, 999, 10_000):
        points = tr.scan_split_points(str(path), target, quote_aware=True)
        assert [p.offset for p in points] == tr.csv_split_points(str(path), target)
        assert read_ranges(str(path), points) == whole
        # without line hints the reader finds boundaries and line numbers itself
        assert read_ranges(str(path), points, with_lines=False) == whole
    # arbitrary (non-boundary) ranges still partition the records
    size = path.stat().st_size
    cuts = [0, 5, 333, 334, 1200, size // 2, size - 3]
    got = []
    for i, start in enumerate(cuts):
        got += tr.iter_csv(str(path), start=start, end=cuts[i + 1] if i + 1 < len(cuts) else None)
    assert got == whole


_cell = st.text(alphabet=st.sampled_from(list('ab,"\n\r é')), max_size=12)


@settings(max_examples=40, deadline=None)
@given(rows=st.lists(st.lists(_cell, min_size=3, max_size=3), min_size=1, max_size=25),
       target=st.integers(min_value=1, max_value=200))
def test_csv_ranges_equal_whole_file_and_python_csv(tmp_path_factory, rows, target):
    path = tmp_path_factory.mktemp("h") / "h.csv"
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer, lineterminator="\r\n")  # RFC 4180: CRLF, so a bare CR gets quoted
    writer.writerow(["x", "y", "z"])
    writer.writerows(rows)
    path.write_bytes(buffer.getvalue().encode("utf-8"))
    whole = list(tr.iter_csv(str(path)))
    expected = list(csv.DictReader(io.StringIO(buffer.getvalue(), newline="")))
    assert [r.values for r in whole] == expected
    points = tr.scan_split_points(str(path), target, quote_aware=True)
    assert read_ranges(str(path), points) == whole


# ---------------------------------------------------------------------------
# JSONL

def test_jsonl_rows_and_bad_lines(tmp_path):
    path = tmp_path / "x.jsonl"
    deep = "[" * 100_000 + "]" * 100_000
    nested65 = '{"a": ' + "[" * 65 + "]" * 65 + "}"
    path.write_bytes(
        b'\xef\xbb\xbf{"a": 1, "b": "x"}\n'   # 1 BOM
        b"not json\n"                         # 2
        b"[1, 2]\n"                           # 3 not an object
        + f'{{"deep": {deep}}}\n'.encode()    # 4 RecursionError
        + nested65.encode() + b"\n"           # 5 depth limit
        b'{"s": "\xff"}\n'                    # 6 invalid utf-8
        b"\r\n"                               # 7 blank
        b'{"a": 2, "nested": {"k": [1, 2.5, null]}}\r\n')  # 8
    got, dead = split(list(tr.iter_jsonl(str(path))))
    assert [(r.row, r.values) for r in got] == [
        (1, {"a": 1, "b": "x"}), (8, {"a": 2, "nested": {"k": [1, 2.5, None]}})]
    assert reasons(dead) == [("json_invalid", 2), ("json_invalid", 3), ("json_invalid", 4),
                             ("json_invalid", 5), ("invalid_utf8", 6)]
    for d in dead:
        json.dumps(d)
        assert d["source"] == str(path)


def test_jsonl_empty_and_ranges(tmp_path):
    empty = tmp_path / "e.jsonl"
    empty.write_bytes(b"")
    assert [d["reason"] for d in tr.iter_jsonl(str(empty))] == ["empty_file"]
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps({"i": i, "s": "x" * (i % 13)}) + "\n" for i in range(300)))
    whole = list(tr.iter_jsonl(str(path)))
    assert [r.row for r in whole] == list(range(1, 301))
    for target in (1, 50, 777):
        points = tr.scan_split_points(str(path), target, quote_aware=False)
        assert read_ranges(str(path), points, tr.iter_jsonl) == whole
        assert read_ranges(str(path), points, tr.iter_jsonl, with_lines=False) == whole
    assert [p.offset for p in tr.scan_split_points(str(path), 777, quote_aware=False)] == \
        tr.jsonl_split_points(str(path), 777)


def test_jsonl_gzip(tmp_path):
    path = tmp_path / "x.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"a": 1}\n{"a": 2}\n'))
    got, dead = split(list(tr.iter_jsonl(str(path))))
    assert [r.values for r in got] == [{"a": 1}, {"a": 2}] and not dead


# ---------------------------------------------------------------------------
# Parquet

def write_parquet(path, n=2500, row_group_size=1000):
    table = pa.table({"id": list(range(n)), "name": [f"n{i}" for i in range(n)],
                      "tags": [[i, i + 1] for i in range(n)]})
    pq.write_table(table, path, row_group_size=row_group_size)
    return table


def test_parquet_rows_and_row_groups(tmp_path):
    path = tmp_path / "t.parquet"
    table = write_parquet(path)
    got, dead = split(list(tr.iter_parquet(str(path), batch_size=300)))
    assert not dead
    assert [r.values for r in got] == table.to_pylist()
    assert [r.row for r in got] == list(range(1, 2501))
    assert [g[0] for g in tr.parquet_row_groups(str(path))] == [1000, 1000, 500]
    parts = []
    for group in range(3):
        parts += tr.iter_parquet(str(path), row_groups=[group])
    assert parts == got


def test_parquet_damage(tmp_path):
    good = tmp_path / "t.parquet"
    write_parquet(good)
    data = good.read_bytes()
    cases = {"empty.parquet": (b"", "empty_file"),
             "text.parquet": (b"id,name\n1,x\n", "parquet_invalid"),
             "cut.parquet": (data[:-100], "parquet_invalid")}
    for name, (content, reason) in cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        items = list(tr.iter_parquet(str(path)))
        assert [d["reason"] for d in items] == [reason], name
        assert items[0]["source"] == str(path)
    # Damage the data pages of the first row group only (the footer stays intact).
    meta = pq.ParquetFile(good).metadata
    column = meta.row_group(0).column(0)
    start = column.data_page_offset
    broken = bytearray(data)
    broken[start:start + 40] = b"\xff" * 40
    path = tmp_path / "pages.parquet"
    path.write_bytes(bytes(broken))
    got, dead = split(list(tr.iter_parquet(str(path))))
    assert [d["reason"] for d in dead] == ["parquet_invalid"]
    assert dead[0]["row"] == 1
    assert [r.row for r in got] == list(range(1001, 2501))


def test_iter_table_rejects_unknown_format():
    with pytest.raises(ValueError, match="unknown table format"):
        tr.iter_table("x", "xml")
