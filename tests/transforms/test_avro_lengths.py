"""Avro files whose length and count fields lie (issue 38.10): never an
allocation from an unchecked length, never a record lost without a dead
letter; read_avro_columns (the config check) never raises."""

import io
import json

import fastavro
from hypothesis import given, settings, strategies as st

from recordforge.transforms.readers.avro import iter_avro, read_avro_columns
from recordforge.transforms.readers.rows import SourceRow

SCHEMA = {"type": "record", "name": "r",
          "fields": [{"name": "x", "type": "long"}, {"name": "t", "type": "string"}]}
SYNC = b"0123456789abcdef"
FIELDS = ("map_count", "key_len", "value_len", "block_count", "block_size")


def _long(n: int) -> bytes:
    """Avro's zig-zag varint."""
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | 0x80 if n else low)
        if not n:
            return bytes(out)


def _avro(records, per_block: int, lie: dict) -> bytes:
    """An Avro container file of `records`, with the fields named in `lie`
    (one of FIELDS -> value) replaced in the header or the first block."""
    schema = json.dumps(SCHEMA).encode()
    out = b"Obj\x01" + _long(lie.get("map_count", 2))
    out += _long(lie.get("key_len", 11)) + b"avro.schema"
    out += _long(lie.get("value_len", len(schema))) + schema
    out += _long(10) + b"avro.codec" + _long(4) + b"null" + _long(0) + SYNC
    for start in range(0, len(records), per_block):
        chunk = records[start:start + per_block]
        data = io.BytesIO()
        for record in chunk:
            fastavro.schemaless_writer(data, SCHEMA, record)
        first = start == 0
        out += _long(lie.get("block_count", len(chunk)) if first else len(chunk))
        out += _long(lie.get("block_size", len(data.getvalue())) if first
                     else len(data.getvalue()))
        out += data.getvalue() + SYNC
    return out


@settings(max_examples=300, deadline=None)
@given(count=st.integers(1, 8), per_block=st.integers(1, 4), field=st.sampled_from(FIELDS),
       value=st.one_of(st.integers(-(1 << 62), 1 << 62),
                       st.sampled_from([1 << 45, 1 << 31, -1, 0, 1, 2, 3])))
def test_lying_lengths_are_avro_invalid_and_no_record_is_lost(tmp_path_factory, count,
                                                              per_block, field, value):
    records = [{"x": i, "t": "v" * i} for i in range(count)]
    path = tmp_path_factory.mktemp("a") / "r.avro"
    path.write_bytes(_avro(records, per_block, {field: value}))
    columns = read_avro_columns(str(path))
    assert columns in (None, ["x", "t"])
    read = list(iter_avro(str(path)))
    rows = [item for item in read if isinstance(item, SourceRow)]
    letters = [item for item in read if not isinstance(item, SourceRow)]
    # the rows read are the file's first records, exactly; the rest, if any,
    # is one avro_invalid dead letter after them
    assert [row.values for row in rows] == records[:len(rows)]
    assert [row.row for row in rows] == list(range(1, len(rows) + 1))
    # (a block claiming more records than it holds is damaged too, even
    # when every record was read)
    assert [letter["reason"] for letter in letters] in (["avro_invalid"], [])
    if len(rows) < count:
        assert letters and read[-1] is letters[0] and "\n" not in letters[0]["message"]


# item schema -> (takes no bytes, a value of it)
_ITEMS = {
    "null": (True, None),
    "long": (False, 3),
    "string": (False, "s"),
    "empty": (True, {}),
    "of_null": (True, {"n": None}),
    "fixed0": (True, b""),
    "fixed1": (False, b"x"),
    "union": (False, None),
    "again": (True, {}),  # a reference to the empty record defined before it
}


def _item_schema(kind: str, index: int):
    return {
        "null": "null", "long": "long", "string": "string",
        "empty": {"type": "record", "name": f"e{index}", "fields": []},
        "of_null": {"type": "record", "name": f"n{index}",
                    "fields": [{"name": "n", "type": "null"}]},
        "fixed0": {"type": "fixed", "name": f"f{index}", "size": 0},
        "fixed1": {"type": "fixed", "name": f"g{index}", "size": 1},
        "union": ["null", "long"],
        "again": "defined",
    }[kind]


@settings(max_examples=100, deadline=None)
@given(kinds=st.lists(st.sampled_from(sorted(_ITEMS)), min_size=1, max_size=3),
       count=st.integers(0, 3))
def test_an_array_of_items_taking_no_bytes_is_refused_before_it_is_built(tmp_path_factory,
                                                                          kinds, count):
    """Issue 38.10: such an array's count is the only measure of its size."""
    fields = [{"name": "defined_here", "type": {"type": "record", "name": "defined",
                                                "fields": []}}]
    fields += [{"name": f"a{i}", "type": {"type": "array", "items": _item_schema(kind, i)}}
               for i, kind in enumerate(kinds)]
    schema = {"type": "record", "name": "r", "fields": fields}
    record = {"defined_here": {}, **{f"a{i}": [_ITEMS[kind][1]] * count
                                     for i, kind in enumerate(kinds)}}
    path = tmp_path_factory.mktemp("a") / "r.avro"
    with open(path, "wb") as out:
        fastavro.writer(out, schema, [record])
    read = list(iter_avro(str(path)))
    if any(_ITEMS[kind][0] for kind in kinds):
        [letter] = read
        assert letter["reason"] == "avro_invalid" and "take no bytes" in letter["message"]
    else:
        assert [item.values for item in read] == [record]
