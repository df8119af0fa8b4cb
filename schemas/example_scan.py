"""Large serialized Examples read in place: each feature's kind, value count and values, no copies.

`decode_example` parses with protobuf, which copies every value (the
message holds its own copy, and each Python value another): a record of
200 MB, which a gzip shard can hold in a few hundred KB, took about four
times its size in memory to check or print. `scan_example` walks the same
bytes in place and returns, per feature, a `ScannedValues`: its kind, its
number of values (counted without making them), and its values made one
at a time on demand (bytes as memoryview slices of the record, floats and
ints decoded a block at a time by numpy). Memory is the record itself plus
a constant.

It reads Examples in the canonical encoding every protobuf serializer
writes (TensorFlow's, recordforge's): one ``features`` field, each map
entry as key then value, each value one list (floats and ints packed), no
unknown fields, no key twice. Anything else that protobuf would still
accept (merged repeats, unpacked numbers, unknown fields) raises
`NonCanonicalExample` rather than guess at protobuf's merge rules; bytes
that protobuf would refuse raise `ExampleDecodeError` as `decode_example`
does. Callers use it for records above `LARGE_EXAMPLE_BYTES` and
`decode_example` below, where the copies are small.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

from .example import BYTES, FLOAT, INT64, ExampleDecodeError

__all__ = ["LARGE_EXAMPLE_BYTES", "NonCanonicalExample", "ScannedValues", "scan_example",
           "varint_values"]

LARGE_EXAMPLE_BYTES = 1 << 20
_BLOCK_VALUES = 1 << 16  # numbers decoded per numpy block
_KINDS = {1: BYTES, 2: FLOAT, 3: INT64}
_LEN = 2  # wire type of length-delimited fields


class NonCanonicalExample(ExampleDecodeError):
    """A valid Example whose encoding is not the canonical one (see module)."""


def _varint(view: memoryview, position: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if position >= end:
            raise ExampleDecodeError("not a tf.train.Example (truncated varint)")
        byte = view[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            if shift >= 63 and result >> 64:
                raise ExampleDecodeError("not a tf.train.Example (varint too long)")
            return result, position
        shift += 7
        if shift > 63:
            raise ExampleDecodeError("not a tf.train.Example (varint too long)")


def _fields(view: memoryview, start: int, end: int, where: str
            ) -> Iterator[tuple[int, int, int]]:
    """(field number, payload start, payload end) of the length-delimited
    fields of a message; any other wire type is not canonical here."""
    position = start
    while position < end:
        tag, position = _varint(view, position, end)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise ExampleDecodeError("not a tf.train.Example (field number 0)")
        if wire != _LEN:
            raise NonCanonicalExample(f"{where}: field {number} has wire type {wire}")
        length, position = _varint(view, position, end)
        if length > end - position:
            raise ExampleDecodeError("not a tf.train.Example (truncated field)")
        yield number, position, position + length
        position += length


class ScannedValues:
    """One feature's values inside a record: ``kind`` ("bytes", "float",
    "int64"), ``len()`` without making them, iteration making them one at a
    time (bytes as memoryviews into the record). Valid while the record is."""

    def __init__(self, kind: str, view: memoryview, start: int, end: int, count: int):
        self.kind = kind
        self._view, self._start, self._end, self._count = view, start, end, count

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator:
        view, start, end = self._view, self._start, self._end
        if self.kind == BYTES:
            for _, value_start, value_end in _fields(view, start, end, "BytesList"):
                yield view[value_start:value_end]
        elif self.kind == FLOAT:
            for first in range(start, end, 4 * _BLOCK_VALUES):
                block = np.frombuffer(view[first:min(end, first + 4 * _BLOCK_VALUES)], "<f4")
                yield from block.tolist()
        else:
            yield from varint_values(view, start, end)


_UINT64 = (1 << 64) - 1


def varint_values(view: memoryview, start: int, end: int) -> Iterator[int]:
    """The int64 values of a packed run of varints, a block at a time."""
    position = start
    while position < end:
        stop = min(end, position + 10 * _BLOCK_VALUES)
        raw = np.frombuffer(view[position:stop], np.uint8)
        ends = np.flatnonzero(raw < 0x80)
        if not len(ends):
            raise ExampleDecodeError("not a tf.train.Example (truncated varint)")
        used = int(ends[-1]) + 1
        values = []
        value = shift = 0
        for byte in raw[:used].tolist():
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                if shift > 70:
                    raise ExampleDecodeError("not a tf.train.Example (varint too long)")
                # A tenth byte may carry bits past the 64th; protobuf drops
                # them, and so does this reader.
                value &= _UINT64
                values.append(value - (1 << 64) if value >> 63 else value)
                value = shift = 0
        del raw
        yield from values
        position += used


def _count(kind: str, view: memoryview, start: int, end: int) -> int:
    if kind == BYTES:
        return sum(1 for _ in _fields(view, start, end, "BytesList"))
    if kind == FLOAT:
        if (end - start) % 4:
            raise ExampleDecodeError("not a tf.train.Example (packed floats cut short)")
        return (end - start) // 4
    count = 0
    for first in range(start, end, 1 << 24):  # counted a block at a time
        with view[first:min(end, first + (1 << 24))] as block:
            count += int(np.count_nonzero(np.frombuffer(block, np.uint8) < 0x80))
    if end > start and view[end - 1] >= 0x80:
        raise ExampleDecodeError("not a tf.train.Example (truncated varint)")
    return count


def _list_payload(kind: str, view: memoryview, start: int, end: int) -> tuple[int, int]:
    """Where a list message's values are: the list message itself for bytes
    (a run of fields), the one packed field's payload for numbers."""
    if kind == BYTES:
        for number, _, _ in _fields(view, start, end, "BytesList"):
            if number != 1:
                raise NonCanonicalExample(f"BytesList: unknown field {number}")
        return start, end
    packed = list(_fields(view, start, end, f"{kind} list"))
    if not packed:
        return start, start
    if len(packed) != 1 or packed[0][0] != 1:
        raise NonCanonicalExample(f"{kind} list: not one packed field")
    return packed[0][1], packed[0][2]


def scan_example(data) -> dict[str, ScannedValues]:
    """Feature name -> `ScannedValues` of a serialized Example held in
    `data` (bytes, bytearray or memoryview, not copied). Raises
    `ExampleDecodeError` for bytes that are not an Example and
    `NonCanonicalExample` for one not in the canonical encoding."""
    view = memoryview(data).cast("B") if not isinstance(data, memoryview) else data
    found: dict[str, ScannedValues] = {}
    top = list(_fields(view, 0, len(view), "Example"))
    if len(top) > 1 or any(number != 1 for number, _, _ in top):
        raise NonCanonicalExample("Example: not one features field")
    for _, start, end in top:
        for number, entry_start, entry_end in _fields(view, start, end, "Features"):
            if number != 1:
                raise NonCanonicalExample(f"Features: unknown field {number}")
            parts = list(_fields(view, entry_start, entry_end, "feature entry"))
            if [part[0] for part in parts] != [1, 2]:
                raise NonCanonicalExample("feature entry: not a key then a value")
            (_, key_start, key_end), (_, value_start, value_end) = parts
            try:
                name = str(view[key_start:key_end], "utf-8")
            except UnicodeDecodeError:
                raise ExampleDecodeError("not a tf.train.Example (a feature name is not "
                                         "UTF-8)") from None
            if name in found:
                raise NonCanonicalExample(f"feature {name!r} appears twice")
            lists = list(_fields(view, value_start, value_end, "Feature"))
            if len(lists) > 1 or any(number not in _KINDS for number, _, _ in lists):
                raise NonCanonicalExample(f"feature {name!r}: not one list")
            if not lists:
                found[name] = ScannedValues(BYTES, view, value_start, value_start, 0)
                continue
            kind = _KINDS[lists[0][0]]
            payload_start, payload_end = _list_payload(kind, view, lists[0][1], lists[0][2])
            count = _count(kind, view, payload_start, payload_end)
            found[name] = ScannedValues(kind, view, payload_start, payload_end, count)
    return found
