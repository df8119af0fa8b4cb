"""The JSON-array reader: rows, dead letters, and memory that does not grow
with the file (it is parsed as a stream)."""

import json
import tracemalloc

from recordforge.transforms.readers.json_array import iter_json_array
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
