"""The native table kernel for a TFRecord source against the Python path.

Generated TFRecord files hold Examples whose features carry every value
class: one-item lists of each kind (ints at int64's ends, float32 NaN,
infinities, -0.0 and the largest finite, bytes that are text, numbers or
labels written as text, blank, empty, not UTF-8, an encoded surrogate, ISO
8601 times), empty and longer lists, lists left unset, features absent;
records protobuf reads in another encoding (two `features` fields, which it
merges); records that are no Example at all. They are read by the reader
with and without the kernel: rows and dead letters must be the same, in
batches of the same rows. Each batch then converts alike with the kernel
and without (Examples, keys, labels, dead letters, statistics, digests),
under schemas of every feature kind, bounds, allowed values, declared null
texts (which never apply to a list), defaults and keys.
"""

from __future__ import annotations

import importlib.util
import math
import pickle
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from recordforge.schemas import example
from recordforge.schemas.feature_config import parse_features
from recordforge.transforms.readers import tfrecords as tfrecord_reader
from recordforge.transforms.readers.rows import each_row
from recordforge.transforms.readers.tfrecords import ExampleRunBatch, iter_tfrecords
from recordforge.transforms.sources.outputs import RECORD_BATCH_BYTES, ROWS, batched
from recordforge.transforms.tfrecord.framing import python_frame_records
from recordforge.transforms.to_examples import BatchConversion

_spec = importlib.util.spec_from_file_location("kernel_cases",
                                               Path(__file__).with_name("kernel_cases.py"))
cases = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cases)

KEYS = ["a", "b", "c", "d"]
INTS = [0, 1, -1, 3, 7, 12, 100, -(1 << 63), (1 << 63) - 1]
FLOATS = [0.0, -0.0, 1.0, 0.5, 2.5, 0.10000000149011612, math.nan, math.inf, -math.inf,
          3.4028234663852886e38, 1e-45]
BYTES = [b"", b" ", b"x", b"cat", b"dog", "é".encode(), b" cat", b"Cat", b"12", b"-3",
         b"0.5", b"1e3", b"nan", b"\xff", b"\xed\xa0\x80", b"x" * 9, b"NA", b"0",
         b"2024-01-02T03:04:05Z", b"2024-01-01", b"1.0"]
NULL_TEXTS = ["", "NA", "x", "cat", "0", " "]

_ITEMS = {"int64": st.one_of(st.sampled_from(INTS), st.integers(-10, 10)),
          "float": st.one_of(st.sampled_from(FLOATS), st.floats(width=32)),
          "bytes": st.one_of(st.sampled_from(BYTES), st.binary(max_size=4)),
          # (bytes most of which a label or a short text takes)
          "labels": st.one_of(st.sampled_from([label.encode() for label in cases.VOCABULARY]),
                              st.sampled_from(BYTES)),
          "times": st.one_of(st.sampled_from([b"2024-01-02T03:04:05Z", b"2024-01-01",
                                              b"1970-01-01T00:00:00.5+01:00", b"2024-13-01"]),
                             st.sampled_from(BYTES)),
          "texts": st.one_of(st.sampled_from([b"x", b"ab", "é".encode(), b"1", b"0.5"]),
                             st.sampled_from(BYTES))}
# The list kind that holds each feature kind's values in an Example.
_LIST_KIND = {"int64": "int64", "float": "float", "labels": "bytes", "times": "bytes",
              "texts": "bytes"}


@st.composite
def _lists(draw, kind: str) -> tuple[str, list]:
    """A feature's list: mostly one item of `kind`, else any kind, any
    length, or unset."""
    way = draw(st.integers(0, 19))
    if way < 16:
        return _LIST_KIND.get(kind, kind), [draw(_ITEMS[kind])]
    if way < 19:
        other = draw(st.sampled_from(["int64", "float", "bytes"]))
        return other, draw(st.lists(_ITEMS[other], max_size=3))
    return "unset", []


@st.composite
def _features(draw, kinds: dict) -> dict:
    """An Example's features: each of `kinds` (name -> list kind) present
    in most records, and now and then a name no feature reads."""
    names = [name for name in kinds if draw(st.integers(0, 19)) > 0]
    names += ["e"] * (draw(st.integers(0, 4)) == 0)
    return {name: draw(_lists(kinds.get(name, "bytes"))) for name in names}


def _serialized(features: dict) -> bytes:
    """The Example protobuf's deterministic serializer writes."""
    message = example.example_class()()
    for name, (kind, values) in features.items():
        feature = message.features.feature[name]
        if kind == "bytes":
            feature.bytes_list.value.extend(
                value if isinstance(value, bytes) else b"%d" % value for value in values)
        elif kind == "float":
            feature.float_list.value.extend(float(value) for value in values)
        elif kind == "int64":
            feature.int64_list.value.extend(int(value) for value in values)
    return message.SerializeToString(deterministic=True)


@st.composite
def records(draw, kinds: dict) -> bytes:
    features = draw(_features(kinds))
    way = draw(st.integers(0, 9))
    if way == 0 and len(features) > 1:
        # One features field per feature: protobuf merges them, the kernel
        # leaves the record to it.
        return b"".join(_serialized({name: values}) for name, values in features.items())
    if way == 1:
        return draw(st.sampled_from([b"\xff", b"\x0a\x05ab", b"\x0a", b"\x12\x01",
                                     b"\x0a\x03\x0a\x01\x0a"]))  # not Examples
    return _serialized(features)


@st.composite
def tfrecord_files(draw, specs) -> bytes:
    """A file of records whose features mostly hold the kind of list the
    schema's feature reading them expects, now and then cut short or with
    a bit flipped (the reader's `tfrecord_corrupt` for the rest)."""
    kinds = {name: "bytes" for name in KEYS}
    for spec in specs:
        if draw(st.integers(0, 5)) > 0:
            kinds[spec.source] = ("labels" if spec.vocabulary is not None else
                                  "times" if spec.type == "timestamp" else
                                  spec.stored_kind if spec.stored_kind != "bytes" else "texts")
    data = bytearray(python_frame_records(draw(st.lists(records(kinds), max_size=14))))
    damage = draw(st.integers(0, 9))
    if damage == 0 and data:  # cut short: the records before the cut are read
        del data[draw(st.integers(0, len(data) - 1)):]
    elif damage == 1 and data:  # a flipped bit: a CRC fails from that record on
        data[draw(st.integers(0, len(data) - 1))] ^= 1 << draw(st.integers(0, 7))
    return bytes(data)


@st.composite
def _timestamp_body(draw, column: str) -> dict:
    body = {"from": column, "type": "timestamp",
            "unit": draw(st.sampled_from(["s", "ms", "days"]))}
    if draw(st.booleans()):
        body["required"] = False
    return body


@st.composite
def _with_nulls(draw, body: dict) -> dict:
    if draw(st.integers(0, 3)) == 0:
        body = {**body, "null_values": draw(st.lists(st.sampled_from(NULL_TEXTS), max_size=3))}
    return body


_BODIES = st.one_of(
    *[cases.feature_bodies(KEYS * 3 + ["absent"])] * 4,
    st.sampled_from(KEYS).flatmap(_timestamp_body)).flatmap(_with_nulls)
schemas = cases.schemas(_BODIES, KEYS, most=4)


def _items(path, kernels, columns=True):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tfrecord_reader, "kernels", lambda: kernels)
        return list(iter_tfrecords(str(path), columns=columns))


def _seen(batch, watched) -> list:
    conversion = BatchConversion((), {}, None, None, watch_columns=watched)
    conversion.setup()
    return list(conversion._columns_seen(batch))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=schemas, drawn=st.data(), salt=cases.salts,
       batch_bytes=st.sampled_from([1, 60, 1 << 20]))
def test_kernel_and_python_path_agree(native, outcome, tmp_path_factory, schema, drawn, salt,
                                      batch_bytes):
    """The reader gives the same rows and dead letters with the kernel as
    without, and as the plain reader's SourceRows, batched alike
    (`batched`, by the bytes of their records); each batch converts alike
    on both paths and as the plain list of its SourceRows."""
    specs, key, label = schema
    path = tmp_path_factory.mktemp("tfrecord") / "t.tfrecord"
    path.write_bytes(drawn.draw(tfrecord_files(specs)))
    with_kernel = _items(path, native)
    without = _items(path, None)
    plain = _items(path, native, columns=False)
    assert not any(isinstance(item, ExampleRunBatch) for item in plain)
    assert cases.same(list(each_row(with_kernel)), plain)
    assert cases.same(list(each_row(without)), plain)
    native_out = list(batched(with_kernel, 1000, "t", 1, batch_bytes))
    python_out = list(batched(without, 1000, "t", 1, batch_bytes))
    assert cases.same([(tag, list(value) if tag == ROWS else value) for tag, value in native_out],
                      [(tag, list(value) if tag == ROWS else value) for tag, value in python_out])
    for (tag, batch), (_, python_batch) in zip(native_out, python_out):
        if tag != ROWS:
            continue
        assert isinstance(batch, ExampleRunBatch) and batch.run == python_batch.run
        rows = list(python_batch)
        assert [batch.row_number(at) for at in range(len(batch))] == [row.row for row in rows]
        assert cases.same(list(pickle.loads(pickle.dumps(batch))), rows)
        expected = outcome(cases.converter(specs, key, None, salt), specs, rows, label)
        assert cases.same(outcome(cases.converter(specs, key, native, salt), specs, batch, label),
                          expected)
        assert cases.same(outcome(cases.converter(specs, key, None, salt), specs, python_batch,
                                  label), expected)
        assert cases.same(_seen(batch, KEYS + ["e"]), _seen(rows, KEYS + ["e"]))


def test_a_clean_run_takes_the_kernel_and_makes_no_python_values(native, outcome, tmp_path):
    """The comparison above means something: a block of Examples comes as
    one batch the kernel converts whole, making no Python value of a row."""
    path = tmp_path / "t.tfrecord"
    path.write_bytes(python_frame_records([
        _serialized({"n": ("int64", [2]), "s": ("bytes", ["aé".encode()]),
                     "f": ("float", [0.5]), "l": ("bytes", [b"dog"])}),
        _serialized({"n": ("int64", [1]), "s": ("bytes", [b"x"]), "f": ("float", [-0.0]),
                     "l": ("bytes", [b"cat"]), "other": ("int64", [1, 2])})]))
    (batch,) = _items(path, native)
    specs = parse_features({"n": {"type": "int64", "from": "n"},
                            "s": {"type": "string", "from": "s"},
                            "f": {"type": "float", "from": "f"},
                            "l": {"type": "int64", "from": "l", "vocabulary": ["cat", "dog"]}},
                           nested=False)
    converter = cases.converter(specs, "n", native, b"salt")
    examples, keys, checked, texts, digests, declined = converter._native.convert(batch)
    assert declined == 0 and texts == {}
    assert list(examples) == [
        converter._encoder.encode({"n": [2], "s": ["aé".encode()], "f": [0.5], "l": [b"dog"]}),
        converter._encoder.encode({"n": [1], "s": [b"x"], "f": [-0.0], "l": [b"cat"]})]
    assert list(keys) == [b"\x02\x81\x02", b"\x02\x81\x01"] and len(digests) == 32
    assert list(checked["l"]) == [1, 0] and list(checked["s"]) == ["aé", "x"]
    outcome(converter, specs, batch, "l")
    assert batch._values is None


def test_records_that_are_not_examples_leave_the_batch(native, tmp_path):
    """A record that is not an Example is its dead letter at its own index,
    between the batches of the records around it (file order); a record
    only protobuf reads keeps the values it read."""
    merged = _serialized({"a": ("int64", [1])}) + _serialized({"b": ("int64", [2])})
    path = tmp_path / "t.tfrecord"
    path.write_bytes(python_frame_records([_serialized({"a": ("int64", [5])}), b"\xff",
                                           merged, b"\x0a\x05ab"]))
    first, dead, batch, last = _items(path, native)
    assert [(letter["row"], letter["reason"]) for letter in (dead, last)] == [
        (2, "example_invalid"), (4, "example_invalid")]
    assert list(first.rows) == [1] and list(batch.rows) == [3]
    assert first._values == [None] and batch._values == [{"a": [1], "b": [2]}]
    assert [row.values for row in (*first, *batch)] == [{"a": [5]}, {"a": [1], "b": [2]}]


def test_a_key_read_as_its_raw_list_takes_the_python_path(native, tmp_path):
    """A key column no scalar number feature reads is keyed by its raw
    value, a list here: the kernel has no plan for it."""
    specs = parse_features({"s": {"type": "string", "from": "s"}}, nested=False)
    path = tmp_path / "t.tfrecord"
    path.write_bytes(python_frame_records([_serialized({"s": ("bytes", [b"x"])})]))
    (batch,) = _items(path, native)
    assert cases.converter(specs, "s", native)._native.convert(batch) is None
    assert cases.converter(specs, None, native)._native.convert(batch) is not None


def test_a_batch_holds_a_blocks_bytes_of_records_on_both_paths(native, tmp_path):
    """Blocks of records are joined and cut into batches of about a CSV
    run's bytes (RECORD_BATCH_BYTES), across the reader's blocks, at the
    same records with the kernel and without."""
    path = tmp_path / "t.tfrecord"
    path.write_bytes(python_frame_records(
        [_serialized({"n": ("int64", [at]), "pad": ("bytes", [b"p" * (at % 700)])})
         for at in range(6000)]))
    cuts = []
    for kernels in (native, None):
        items = _items(path, kernels)
        assert len(items) > 1  # (the file is read in more than one block)
        batches = [batch for tag, batch in batched(items, 1000, "t") if tag == ROWS]
        assert sum(map(len, batches)) == 6000
        *whole, rest = batches
        assert whole and all(RECORD_BATCH_BYTES <= batch.num_bytes < RECORD_BATCH_BYTES + 800
                             for batch in whole)
        assert rest.num_bytes < RECORD_BATCH_BYTES
        cuts.append([list(batch.rows) for batch in batches])
    assert cuts[0] == cuts[1]
