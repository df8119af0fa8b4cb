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

from recordforge.schemas.dead_letters import json_safe
from recordforge.transforms.readers import csv as tr
from recordforge.transforms.readers import jsonl, parquet, ranges, tables
from recordforge.transforms.readers.rows import ColumnBatch, SourceRow, each_row


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
        points = ranges.scan_split_points(str(path), target, quote_aware=True)
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
    points = ranges.scan_split_points(str(path), target, quote_aware=True)
    assert read_ranges(str(path), points) == whole


def outcome(items):
    """Reader output as comparable tuples: ("row", line, values) or (reason, line, input)."""
    return [("row", item.row, item.values) if isinstance(item, SourceRow)
            else (item["reason"], item["row"], item["input"]) for item in items]


def reference_csv(data, max_record=tr._MAX_CSV_RECORD_BYTES):
    """What `iter_csv` yields for a file of bytes `data` with a good header,
    worked out line by line from the format's rules alone: records grouped by
    quote parity, blank lines skipped, one CR before LF dropped, UTF-8 per
    record, strict `csv` parsing, one field per column, nothing read after a
    quoted record longer than `max_record`."""
    lines = data.split(b"\n")
    if not lines[-1]:
        lines.pop()  # a final "\n" ends the last line and starts none
    records, i = [], 0
    while i < len(lines):
        line_no, parts = i + 1, [lines[i]]
        quotes = lines[i].count(b'"')
        opens_quote = quotes % 2 == 1
        while quotes % 2 and i + 1 < len(lines) and len(b"\n".join(parts)) <= max_record:
            i += 1
            parts.append(lines[i])
            quotes += lines[i].count(b'"')
        i += 1
        record = b"\n".join(parts)
        if opens_quote and len(record) > max_record:
            records.append((line_no, None))
            break
        records.append((line_no, record))

    def parse(raw):
        text = raw[:-1] if raw.endswith(b"\r") else raw
        return next(csv.reader([text.decode("utf-8")], strict=True), [])

    names = parse(records[0][1].removeprefix(b"\xef\xbb\xbf"))
    expected = []
    for line_no, raw in records[1:]:
        if raw is None:
            expected.append(("csv_malformed", line_no, None))
            break
        if raw in (b"", b"\r"):
            continue
        try:
            fields = parse(raw)
        except UnicodeDecodeError:
            expected.append(("invalid_utf8", line_no, json_safe(raw)))
        except csv.Error:
            expected.append(("csv_malformed", line_no, json_safe(raw)))
        else:
            expected.append(("row", line_no, dict(zip(names, fields))) if len(fields) == len(names)
                            else ("csv_ragged_row", line_no, fields))
    return expected


_plain_field = st.text(alphabet="ab1 é", max_size=4)
_any_field = st.text(alphabet='ab,"\n\r é', max_size=6)


@st.composite
def mixed_csv(draw):
    """CSV bytes whose lines mix plain rows with quoted fields (embedded commas,
    quotes, newlines, CRs), CRLF endings, blank lines, ragged rows, invalid
    UTF-8 and stray quotes; sometimes plain rows only (the fast path's case),
    sometimes a byte-order mark, sometimes no final newline."""
    width = draw(st.integers(1, 4))
    kinds = ["plain"] * 4 + ["blank", "ragged", "bad_utf8"]
    if draw(st.booleans()):
        kinds += ["quoted", "crlf", "stray_quote"]
    lines = [("\ufeff" if draw(st.booleans()) else "").encode()
             + ",".join(f"c{i}" for i in range(width)).encode() + b"\n"]
    for kind in draw(st.lists(st.sampled_from(kinds), max_size=30)):
        if kind == "quoted":
            out = io.StringIO(newline="")
            csv.writer(out, lineterminator="\n").writerow(
                draw(st.lists(_any_field, min_size=width, max_size=width)))
            lines.append(out.getvalue().encode())
            continue
        fields = width
        if kind == "ragged":
            fields += draw(st.sampled_from([-1, 1])) if width > 1 else 1
        line = ",".join(draw(st.lists(_plain_field, min_size=fields, max_size=fields))).encode()
        at = draw(st.integers(0, len(line)))
        if kind == "bad_utf8":
            line = line[:at] + draw(st.sampled_from([b"\xff", b"\xc3", b"\xe2\x82"])) + line[at:]
        elif kind == "stray_quote":
            line = line[:at] + b'"' + line[at:]
        elif kind == "blank":
            line = b""
        lines.append(line + (b"\r\n" if kind == "crlf" else b"\n"))
    data = b"".join(lines)
    return data[:-1] if draw(st.booleans()) else data


@settings(max_examples=150, deadline=None)
@given(data=mixed_csv(), block=st.sampled_from([1, 2, 3, 7, 16, 64, 1 << 20]),
       cuts=st.lists(st.integers(min_value=0), max_size=4),
       target=st.integers(min_value=1, max_value=100))
def test_csv_matches_a_line_by_line_reference_for_any_blocks_and_ranges(
        tmp_path_factory, data, block, cuts, target):
    # Blocks of 1 to 64 bytes end mid-line and mid-record, and mix plain runs
    # (read in one go) with per-record ones; 1 MB holds the whole file.
    path = str(tmp_path_factory.mktemp("m") / "m.csv")
    with open(path, "wb") as f:
        f.write(data)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tr, "_BLOCK", block)
        whole = list(tr.iter_csv(path))
        assert outcome(whole) == reference_csv(data)
        for item in whole:
            if isinstance(item, dict):
                assert f"{path} line {item['row']}: " in item["message"]
        # Arbitrary byte ranges, and split points with their line numbers.
        starts = sorted({0, *(cut % (len(data) + 1) for cut in cuts)})
        ranged = []
        for i, start in enumerate(starts):
            end = starts[i + 1] if i + 1 < len(starts) else None
            ranged += tr.iter_csv(path, start=start, end=end)
        assert ranged == whole
        assert read_ranges(path, ranges.scan_split_points(path, target, quote_aware=True)) == whole
        # Column batches hold the same rows.
        assert list(each_row(tr.iter_csv(path, columns=True))) == whole
        columned = []
        for i, start in enumerate(starts):
            end = starts[i + 1] if i + 1 < len(starts) else None
            columned += each_row(tr.iter_csv(path, start=start, end=end, columns=True))
        assert columned == whole
        # A quoted record longer than the limit stops the read (ranges after it
        # would still read their own records, so only the whole file is compared).
        patch.setattr(tr, "_MAX_CSV_RECORD_BYTES", 12)
        assert outcome(tr.iter_csv(path)) == reference_csv(data, max_record=12)


_MIXED = (b"\xef\xbb\xbfid,text\n"      # 1 header with a byte-order mark
          b"1,plain\n"                    # 2
          b"2,also plain\n"               # 3
          b"\n"                           # 4 blank
          b"3,ragged,row\n"               # 5
          b'4,"quoted, ""with""\n'        # 6-7 one record over two lines
          b'newline"\n'
          b"5,crlf\r\n"                   # 8
          b"6,bad \xff byte\n"            # 9
          b"7,\xc3\xa9t\xc3\xa9\n"        # 10
          b"8,last without newline")      # 11
_MIXED_OUTCOME = [
    ("row", 2, {"id": "1", "text": "plain"}),
    ("row", 3, {"id": "2", "text": "also plain"}),
    ("csv_ragged_row", 5, ["3", "ragged", "row"]),
    ("row", 6, {"id": "4", "text": 'quoted, "with"\nnewline'}),
    ("row", 8, {"id": "5", "text": "crlf"}),
    ("invalid_utf8", 9, json_safe(b"6,bad \xff byte")),
    ("row", 10, {"id": "7", "text": "été"}),
    ("row", 11, {"id": "8", "text": "last without newline"}),
]


def test_csv_block_boundaries_mid_line_and_mid_record_change_nothing(tmp_path, monkeypatch):
    path = tmp_path / "mixed.csv"
    path.write_bytes(_MIXED)
    plain_runs = []
    read_plain_run = tr._plain_csv_rows

    def record_plain_run(run, *args):
        plain_runs.append(run)
        return read_plain_run(run, *args)

    monkeypatch.setattr(tr, "_plain_csv_rows", record_plain_run)
    for block in [*range(1, 40), 64, 1 << 20]:
        monkeypatch.setattr(tr, "_BLOCK", block)
        items = list(tr.iter_csv(str(path)))
        assert outcome(items) == _MIXED_OUTCOME, block
        invalid = [item for item in items if isinstance(item, dict)
                   and item["reason"] == "invalid_utf8"]
        assert invalid[0]["message"] == (
            f"{path} line 9: not valid UTF-8 (invalid start byte at byte 6 of the record)")
    # Small blocks put the plain lines in runs of their own, so the fast path
    # took part above; a plain file in one block is a single run.
    assert plain_runs
    plain = tmp_path / "plain.csv"
    plain.write_bytes(b"a,b\n" + b"".join(b"%d,x%d\n" % (i, i) for i in range(30)))
    monkeypatch.setattr(tr, "_BLOCK", 1 << 20)
    plain_runs.clear()
    whole = list(tr.iter_csv(str(plain)))
    assert len(plain_runs) == 1
    assert [(r.row, r.values) for r in whole] == [
        (i + 2, {"a": str(i), "b": f"x{i}"}) for i in range(30)]
    # A range may end anywhere inside a plain run.
    for cut in range(plain.stat().st_size + 1):
        parts = list(tr.iter_csv(str(plain), end=cut)) + list(tr.iter_csv(str(plain), start=cut))
        assert parts == whole, cut
    # CRLF line ends (what Python's csv module writes) take the fast path
    # too, with the same rows, line numbers and range cuts.
    crlf = tmp_path / "crlf.csv"
    crlf.write_bytes(plain.read_bytes().replace(b"\n", b"\r\n"))
    plain_runs.clear()
    assert list(tr.iter_csv(str(crlf))) == [r._replace(source=str(crlf)) for r in whole]
    assert len(plain_runs) == 1
    crlf_whole = list(tr.iter_csv(str(crlf)))
    for cut in range(0, crlf.stat().st_size + 1, 7):
        parts = list(tr.iter_csv(str(crlf), end=cut)) + list(tr.iter_csv(str(crlf), start=cut))
        assert parts == crlf_whole, cut
    # A CR that does not end a line keeps the block on the per-record path
    # (where the csv module rejects it in an unquoted field).
    stray = tmp_path / "stray.csv"
    stray.write_bytes(b"a,b\n1,x\ry\n2,z\r\n")
    plain_runs.clear()
    assert outcome(tr.iter_csv(str(stray))) == [("csv_malformed", 2, "1,x\ry"),
                                                ("row", 3, {"a": "2", "b": "z"})]
    assert not plain_runs
    # Rows with a field too many and one too few, in one run, are still ragged.
    balanced = tmp_path / "balanced.csv"
    balanced.write_bytes(b"a,b\n1,2,3\n4\n5,6\n")
    assert outcome(tr.iter_csv(str(balanced))) == [
        ("csv_ragged_row", 2, ["1", "2", "3"]), ("csv_ragged_row", 3, ["4"]),
        ("row", 4, {"a": "5", "b": "6"})]


class _FailingFile(io.BytesIO):
    """A file whose reads fail after the first `reads_ok`."""

    def __init__(self, data, reads_ok):
        super().__init__(data)
        self.reads_left = reads_ok

    def read(self, size=-1):
        if not self.reads_left:
            raise OSError("disk gone")
        self.reads_left -= 1
        return super().read(size)


@pytest.mark.parametrize("reads_ok,rows,error_row", [
    (0, [], None),            # the header's first read: no line to name
    (3, [2], 3),              # 12 bytes read: line 3 ('2,"multi') not complete
    (5, [2], 4),              # 20 bytes: inside the quoted record, at line 4
    (7, [2, 3, 5], 6),        # 28 bytes: lines 1-5 complete, line 6 started
    (8, [2, 3, 5, 6], 7),     # the whole file read; the next read fails
])
def test_csv_read_error_names_the_first_line_not_read_in_full(monkeypatch, reads_ok, rows,
                                                              error_row):
    data = b'a,b\n1,x\n2,"multi\nline"\n3,y\n4,z\n'
    monkeypatch.setattr(tr, "_BLOCK", 4)
    monkeypatch.setattr(tr, "_open", lambda fs, path: _FailingFile(data, reads_ok))
    got, dead = split(list(tr.iter_csv("f.csv")))
    assert [r.row for r in got] == rows
    assert [(d["reason"], d["row"]) for d in dead] == [("read_error", error_row)]
    assert "disk gone" in dead[0]["message"]


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
    got, dead = split(list(jsonl.iter_jsonl(str(path))))
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
    assert [d["reason"] for d in jsonl.iter_jsonl(str(empty))] == ["empty_file"]
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps({"i": i, "s": "x" * (i % 13)}) + "\n" for i in range(300)))
    whole = list(jsonl.iter_jsonl(str(path)))
    assert [r.row for r in whole] == list(range(1, 301))
    for target in (1, 50, 777):
        points = ranges.scan_split_points(str(path), target, quote_aware=False)
        assert read_ranges(str(path), points, jsonl.iter_jsonl) == whole
        assert read_ranges(str(path), points, jsonl.iter_jsonl, with_lines=False) == whole
    assert [p.offset for p in ranges.scan_split_points(str(path), 777, quote_aware=False)] == \
        jsonl.jsonl_split_points(str(path), 777)


def test_jsonl_gzip(tmp_path):
    path = tmp_path / "x.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"a": 1}\n{"a": 2}\n'))
    got, dead = split(list(jsonl.iter_jsonl(str(path))))
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
    got, dead = split(list(parquet.iter_parquet(str(path), batch_size=300)))
    assert not dead
    assert [r.values for r in got] == table.to_pylist()
    assert [r.row for r in got] == list(range(1, 2501))
    assert [g[0] for g in parquet.parquet_row_groups(str(path))] == [1000, 1000, 500]
    parts = []
    for group in range(3):
        parts += parquet.iter_parquet(str(path), row_groups=[group])
    assert parts == got
    batches = list(parquet.iter_parquet(str(path), batch_size=300, columns=True))
    assert all(isinstance(batch, ColumnBatch) for batch in batches)
    assert list(each_row(batches)) == got
    # The first rows of some columns, read from their first pages.
    for rows in (1, 1500, 5000):
        head = parquet.read_parquet_head(str(path), rows, ["id", "absent"])
        assert [r.values for r in head] == [{"id": row["id"]}
                                            for row in table.to_pylist()[:rows]]
        assert [r.row for r in head] == list(range(1, min(rows, 2500) + 1))
        assert {r.source for r in head} == {str(path)}
    whole = parquet.read_parquet_head(str(path), 10, table.column_names)
    assert [r.values for r in whole] == table.to_pylist()[:10]
    assert parquet.read_parquet_head(str(path), 10, ["absent"]) == []
    (tmp_path / "bad.parquet").write_bytes(b"not Parquet")
    assert parquet.read_parquet_head(str(tmp_path / "bad.parquet"), 10, ["id"]) == []


@settings(max_examples=40, deadline=None)
@given(count=st.integers(0, 300), group=st.integers(1, 120), rows=st.integers(0, 400),
       columns=st.lists(st.sampled_from(["id", "name", "tags", "absent"]), max_size=4),
       max_bytes=st.one_of(st.none(), st.integers(1, 4000)))
def test_a_parquet_head_is_the_first_rows_of_the_columns_asked_for(tmp_path_factory, count,
                                                                   group, rows, columns,
                                                                   max_bytes):
    path = tmp_path_factory.mktemp("head") / "t.parquet"
    table = write_parquet(path, n=count, row_group_size=group)
    head = parquet.read_parquet_head(str(path), rows, columns, max_bytes=max_bytes)
    present = [column for column in dict.fromkeys(columns) if column != "absent"]
    expected = [{column: row[column] for column in present}
                for row in table.to_pylist()] if present else []
    if max_bytes is None:
        assert [r.values for r in head] == expected[:rows]
    else:  # fewer rows, always the first ones
        assert [r.values for r in head] == expected[:len(head)]
        assert len(head) >= min(1, rows, len(expected))
    assert [r.row for r in head] == list(range(1, len(head) + 1))


def test_parquet_batches_hold_about_a_megabyte_of_rows(tmp_path):
    narrow, wide = tmp_path / "narrow.parquet", tmp_path / "wide.parquet"
    pq.write_table(pa.table({"id": list(range(100_000))}), narrow, row_group_size=50_000)
    pq.write_table(pa.table({"image": [bytes([i]) * 200_000 for i in range(40)]}), wide)
    narrow_batches = list(parquet.iter_parquet(str(narrow), columns=True))
    assert sum(map(len, narrow_batches)) == 100_000
    assert len(narrow_batches) <= 10  # 8-byte rows: the 16384-row cap, not 1024 rows
    wide_batches = list(parquet.iter_parquet(str(wide), columns=True))
    assert sum(map(len, wide_batches)) == 40
    assert max(map(len, wide_batches)) == 16  # 200 KB rows: the floor of 16 rows
    assert [r.values for r in each_row(wide_batches)] == \
        [r.values for r in parquet.iter_parquet(str(wide), batch_size=1)]


def test_plain_csv_runs_come_as_column_batches(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes(b"id,text\n" + b"".join(b"%d,row %d\r\n" % (i, i) for i in range(5000))
                     + b"5000,last")
    items = list(tr.iter_csv(str(path), columns=True))
    batches = [item for item in items if isinstance(item, ColumnBatch)]
    assert len(batches) == len(items) and sum(map(len, batches)) == 5001
    assert batches[0].first_row == 2 and batches[0].columns["text"][:2] == ["row 0", "row 1"]
    assert list(each_row(items)) == list(tr.iter_csv(str(path)))


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
        items = list(parquet.iter_parquet(str(path)))
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
    got, dead = split(list(parquet.iter_parquet(str(path))))
    assert [d["reason"] for d in dead] == ["parquet_invalid"]
    assert dead[0]["row"] == 1
    assert [r.row for r in got] == list(range(1001, 2501))


def test_iter_table_rejects_unknown_format():
    with pytest.raises(ValueError, match="unknown table format"):
        tables.iter_table("x", "xml")


def _string_array(raw: list[bytes]) -> pa.Array:
    """A Parquet/Arrow string column holding `raw` as they are, UTF-8 or not
    (Arrow checks nothing when a string array is made from buffers)."""
    return pa.Array.from_buffers(pa.string(), len(raw), pa.array(raw, pa.binary()).buffers())


@settings(max_examples=100, deadline=None)
@given(values=st.lists(st.one_of(st.text(max_size=5).map(str.encode),
                                 st.binary(min_size=1, max_size=5)), min_size=1, max_size=12),
       nested=st.booleans(), columns=st.booleans(), batch=st.integers(1, 5))
def test_parquet_text_that_is_not_utf8_is_that_rows_dead_letter(tmp_path_factory, values,
                                                                 nested, columns, batch):
    """Issue 38.5, one rule for text: as in CSV and JSON, a row whose text is
    not UTF-8 is its own invalid_utf8, and the rows around it are read."""
    text = _string_array(values)
    column = pa.StructArray.from_arrays([text], ["t"]) if nested else text
    path = tmp_path_factory.mktemp("p") / "t.parquet"
    pq.write_table(pa.table({"n": list(range(len(values))), "v": column}), path)
    read = list(each_row(parquet.iter_parquet(str(path), batch_size=batch, columns=columns)))
    assert len(read) == len(values)
    for index, (raw, item) in enumerate(zip(values, read)):
        try:
            expected = raw.decode("utf-8")
        except UnicodeDecodeError:
            assert item["reason"] == "invalid_utf8" and item["row"] == index + 1
            assert "column 'v'" in item["message"]
            continue
        assert item == SourceRow(str(path), index + 1, {
            "n": index, "v": {"t": expected} if nested else expected})
