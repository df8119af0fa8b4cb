"""`scan_example` reads what protobuf reads, in place.

Held against `decode_example` (protobuf) over generated Examples and their
mutations: where the scanner returns features they are protobuf's; where it
refuses, protobuf refuses too or the encoding is not canonical.
"""

import math
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recordforge.schemas.example import ExampleDecodeError, decode_example, encode_example
from recordforge.schemas.example_scan import NonCanonicalExample, scan_example

_FLOAT32 = st.floats(width=32, allow_nan=False)
_VALUES = st.one_of(
    st.tuples(st.just("bytes"), st.lists(st.binary(max_size=20), max_size=4)),
    st.tuples(st.just("float"), st.lists(_FLOAT32, max_size=4)),
    st.tuples(st.just("int64"), st.lists(st.integers(-(1 << 63), (1 << 63) - 1), max_size=4)))
_EXAMPLES = st.dictionaries(st.text(max_size=6), _VALUES, max_size=4)


def _scanned(data):
    return {name: (values.kind, [bytes(v) if isinstance(v, memoryview) else v for v in values])
            for name, values in scan_example(data).items()}


def _same(scanned, decoded):
    assert set(scanned) == set(decoded)
    for name, (kind, values) in decoded.items():
        scan_kind, scan_values = scanned[name]
        assert len(scan_values) == len(values)
        if values:
            assert scan_kind == kind
        for a, b in zip(scan_values, values):
            assert a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b))


@settings(max_examples=300, deadline=None)
@given(features=_EXAMPLES)
def test_scans_what_protobuf_decodes(features):
    data = encode_example(dict(features))
    _same(_scanned(data), decode_example(data))
    assert all(len(values) == len(decode_example(data)[name][1])
               for name, values in scan_example(memoryview(data)).items())


@settings(max_examples=500, deadline=None)
@given(features=_EXAMPLES, data=st.data())
def test_damaged_examples_are_refused_as_protobuf_refuses_them(features, data):
    original = bytearray(encode_example(dict(features)))
    for _ in range(data.draw(st.integers(1, 3))):
        action = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        position = data.draw(st.integers(0, max(0, len(original) - 1)))
        if action == "flip" and original:
            original[position] ^= 1 << data.draw(st.integers(0, 7))
        elif action == "cut":
            del original[position:]
        else:
            original[position:position] = data.draw(st.binary(min_size=1, max_size=3))
    blob = bytes(original)
    try:
        decoded = decode_example(blob)
    except ExampleDecodeError:
        decoded = None
    try:
        scanned = _scanned(blob)
    except NonCanonicalExample:
        return  # protobuf may accept it; the scanner does not guess
    except ExampleDecodeError:
        assert decoded is None, "the scanner refused an Example protobuf reads"
        return
    assert decoded is not None, "the scanner read bytes protobuf refuses"
    _same(scanned, decoded)


@pytest.mark.parametrize("blob", [
    b"\x0a\x00\x0a\x00",                      # features twice (protobuf merges)
    b"\x08\x01",                              # a varint field in Example
    b"\x0a\x0a\x0a\x08\x12\x02\x0a\x00\x0a\x01a",  # value before key
    # unpacked int64 values
    b"\x0a\x0b\x0a\x09\x0a\x01a\x12\x04\x1a\x02\x08\x01",
])
def test_non_canonical_encodings_are_named(blob):
    with pytest.raises(ExampleDecodeError):
        scan_example(blob)


def test_values_are_views_into_the_record_not_copies():
    payload = bytes(range(256)) * 4096
    data = bytearray(encode_example({"x": payload, "f": [1.5] * 10, "i": [1, -2, 300]}))
    scanned = scan_example(data)
    (value,) = list(scanned["x"])
    assert isinstance(value, memoryview) and value.obj is data and bytes(value) == payload
    assert list(scanned["f"]) == [1.5] * 10 and list(scanned["i"]) == [1, -2, 300]
    assert len(scanned["i"]) == 3 and struct.calcsize("<f") == 4


@pytest.mark.parametrize("last_byte", range(0x02, 0x80, 0x0D))
def test_a_tenth_varint_byte_with_bits_past_64_reads_as_protobuf_reads_it(last_byte):
    """-1 is a ten-byte varint ending in 0x01; protobuf drops the bits a
    larger tenth byte carries past the 64th, and so must the scanner."""
    data = bytearray(encode_example({"x": ("int64", [-1])}))
    assert data[-1] == 0x01
    data[-1] = last_byte
    decoded = decode_example(bytes(data))
    _same(_scanned(bytes(data)), decoded)
