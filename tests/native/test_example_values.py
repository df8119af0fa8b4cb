"""The native Example reader (`example_values`) against protobuf.

Held against protobuf's parse (`decode_example`, names sorted) over
Examples that protobuf's own deterministic serializer writes, and over
their mutations: where the kernel answers, protobuf reads the same values
of the same types (floats bit for bit); where it leaves a record to
protobuf (None), `example_values` gives protobuf's answer or its error.
"""

from __future__ import annotations

import math
import pathlib
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recordforge.schemas import example
from recordforge.schemas.example import ExampleDecodeError, decode_example, example_values

_FLOAT32 = st.floats(width=32)  # NaN and infinities included
_VALUES = st.one_of(
    st.tuples(st.just("bytes"), st.lists(st.binary(max_size=20), max_size=4)),
    st.tuples(st.just("float"), st.lists(_FLOAT32, max_size=4)),
    st.tuples(st.just("int64"), st.lists(st.integers(-(1 << 63), (1 << 63) - 1), max_size=4)),
    st.just(("unset", [])))
_NAMES = st.text(st.characters(codec="utf-8"), max_size=6)
_FEATURES = st.dictionaries(_NAMES, _VALUES, max_size=5)


def _serialized(features: dict) -> bytes:
    """The Example protobuf's deterministic serializer writes (map keys sorted)."""
    message = example.example_class()()
    for name, (kind, values) in features.items():
        feature = message.features.feature[name]
        if kind == "bytes":
            feature.bytes_list.value.extend(values)
        elif kind == "float":
            feature.float_list.value.extend(values)
        elif kind == "int64":
            feature.int64_list.value.extend(values)
    return message.SerializeToString(deterministic=True)


def _reference(data: bytes) -> dict:
    return {name: values for name, (_, values) in sorted(decode_example(data).items())}


def _held_to_protobuf(native, record: bytes) -> dict | None:
    """The kernel's values of `record`, where it gives any, held against
    protobuf's; gives protobuf's (None: protobuf refuses the bytes)."""
    try:
        expected = _reference(record)
    except ExampleDecodeError:
        expected = None
    found = native.example_values(record)
    if found is not None:
        assert expected is not None, "the kernel read bytes protobuf refuses"
        _same(found, expected)
    return expected


def _bits(value):
    return struct.pack("<d", value) if isinstance(value, float) else value


def _same(found: dict, expected: dict) -> None:
    assert list(found) == list(expected)
    for name, values in expected.items():
        assert [type(v) for v in found[name]] == [type(v) for v in values], name
        assert [_bits(v) for v in found[name]] == [_bits(v) for v in values], name


@settings(max_examples=400, deadline=None)
@given(features=_FEATURES)
def test_the_kernel_reads_what_protobuf_writes(native, features):
    data = _serialized(features)
    found = native.example_values(data)
    assert found is not None, "a deterministic serializer's Example was left to protobuf"
    _same(found, _reference(data))
    for record in (data, bytearray(data), memoryview(data)):
        _same(example_values(record), _reference(data))


@settings(max_examples=200, deadline=None)
@given(features=_FEATURES)
def test_recordforge_s_own_examples_are_read_by_the_kernel(native, features):
    data = example.encode_example(dict(sorted(
        (name, (kind if kind != "unset" else "bytes", values))
        for name, (kind, values) in features.items())))
    found = native.example_values(data)
    assert found is not None
    _same(found, _reference(data))


@settings(max_examples=800, deadline=None)
@given(features=_FEATURES, data=st.data())
def test_damaged_or_unusual_bytes_read_as_protobuf_reads_them(native, features, data):
    blob = bytearray(_serialized(features))
    for _ in range(data.draw(st.integers(1, 3))):
        action = data.draw(st.sampled_from(["flip", "cut", "insert", "swap"]))
        at = data.draw(st.integers(0, max(0, len(blob) - 1)))
        if action == "flip" and blob:
            blob[at] ^= 1 << data.draw(st.integers(0, 7))
        elif action == "cut":
            del blob[at:]
        elif action == "insert":
            blob[at:at] = data.draw(st.binary(min_size=1, max_size=3))
        elif blob:
            blob[at:at] = blob[:data.draw(st.integers(0, at))]
    blob = bytes(blob)
    expected = _held_to_protobuf(native, blob)
    if expected is None:
        with pytest.raises(ExampleDecodeError):
            example_values(blob)
    else:
        _same(example_values(blob), expected)


def _entry(name: bytes, feature: bytes) -> bytes:
    inner = b"\x0a" + bytes([len(name)]) + name + b"\x12" + bytes([len(feature)]) + feature
    return b"\x0a" + bytes([len(inner)]) + inner


def _example(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return b"\x0a" + bytes([len(body)]) + body


_ONE = b"\x1a\x03\x0a\x01\x05"  # int64_list {5}


@pytest.mark.parametrize("blob", [
    _example(_entry(b"a", _ONE), _entry(b"a", b"\x1a\x03\x0a\x01\x07")),  # a name twice: last wins
    _example(_entry(b"a", b"\x1a\x02\x08\x05")),  # an unpacked int
    _example(_entry(b"a", b"\x1a\x06\x0a\x01\x05\x0a\x01\x06")),  # two packed runs: joined
    _example(_entry(b"a", _ONE + b"\x0a\x03\x0a\x01x")),  # two lists: the last is kept
    _example(_entry(b"a", _ONE)) + _example(_entry(b"b", _ONE)),  # features twice: merged
    _example(_entry(b"a", b"\x1a\x0c\x0a\x0a" + b"\xff" * 9 + b"\x7f")),  # bits past the 64th
    _example(_entry(b"a", b"\x12\x05\x0d\x00\x00\xc0\x3f")),  # an unpacked float
    _example(_entry(b"a", _ONE)) + b"\x10\x01",  # an unknown field
])
def test_valid_examples_in_another_encoding_are_left_to_protobuf(native, blob):
    assert native.example_values(blob) is None
    expected = _reference(blob)
    assert expected  # protobuf reads each of them
    _same(example_values(blob), expected)


def test_names_in_any_order_come_out_sorted(native):
    """upb writes a longer name before its prefix, C++ protobuf after it."""
    blob = _example(_entry(b"label/text", b"\x0a\x03\x0a\x01x"), _entry(b"label", _ONE),
                    _entry(b"", _ONE))
    found = native.example_values(blob)
    assert list(found) == ["", "label", "label/text"]
    _same(found, _reference(blob))


def test_nan_payloads_and_signed_zero_keep_their_bits(native):
    floats = [struct.unpack("<f", struct.pack("<I", bits))[0]
              for bits in (0x7FC00001, 0xFFC00000, 0x80000000, 0x7F800000)]
    data = _serialized({"f": ("float", floats)})
    found = native.example_values(data)["f"]
    assert [_bits(v) for v in found] == [_bits(v) for v in _reference(data)["f"]]
    assert math.copysign(1.0, found[2]) == -1.0


_CORPUS = sorted((pathlib.Path(__file__).resolve().parents[2] / "native" / "corpus" / "example")
                 .glob("*.bin"))


@pytest.mark.parametrize("path", _CORPUS, ids=lambda path: path.name)
def test_the_cargo_corpus_and_its_prefixes_read_as_protobuf_reads_them(native, path):
    data = path.read_bytes()
    for cut in range(len(data) + 1):
        _held_to_protobuf(native, data[:cut])


def _protobuf_features(record) -> dict:
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(example, "_canonical_features", None)
        return example.example_features(record)


@settings(max_examples=300, deadline=None)
@given(features=_FEATURES, data=st.data())
def test_the_loaders_features_with_their_kinds_are_protobuf_s(native, features, data):
    """`example_features`: the kind of list each feature holds (None: no
    list set, which a loader fills with the manifest's default), from bytes
    or a memoryview, damaged or not."""
    blob = bytearray(_serialized(features))
    if blob and data.draw(st.booleans()):
        blob[data.draw(st.integers(0, len(blob) - 1))] ^= 1 << data.draw(st.integers(0, 7))
    for record in (bytes(blob), memoryview(blob)):
        try:
            expected = _protobuf_features(record)
        except ExampleDecodeError:
            expected = None
        found = native.example_features(record)
        if found is None:
            continue
        assert expected is not None
        assert sorted(found) == list(found) and set(found) == set(expected)
        for name, (kind, values) in expected.items():
            assert found[name][0] == kind
            _same({name: found[name][1]}, {name: values})
    if not blob:
        return
    unset = [name for name, (kind, _) in features.items() if kind == "unset"]
    if unset and bytes(blob) == _serialized(features):
        assert all(native.example_features(bytes(blob))[name] == (None, []) for name in unset)
