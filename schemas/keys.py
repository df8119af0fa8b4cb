"""Row keys as bytes whose byte order is the value order (`sortable_key`).

The shard writer orders rows, and assigns their splits, by these bytes; a
dataset's `key` column is encoded here, a value or a whole int64 column at
a time. Nothing here knows about Beam.
"""

from __future__ import annotations

import math
import struct
from typing import Any, Sequence

import numpy as np

from .columns import bytes_by_length, rows_as_bytes

__all__ = ["int64_keys", "sortable_key"]

# One type tag per kind of key, so a 1 and a "1" never produce the same key;
# keys of different types order by tag.
_TAG_BOOL = b"\x01"
_TAG_INT = b"\x02"
_TAG_FLOAT = b"\x03"
_TAG_TEXT = b"\x04"
_TAG_BYTES = b"\x05"
_MAX_INT_BYTES = 126  # the length byte below stays within 0x01..0xFE
_DOUBLE = struct.Struct(">d")
_SIGN = 1 << 63
_ALL_ONES = (1 << 64) - 1
# uint64 thresholds where an int key's body grows by a byte: 1, 2**8, ... 2**56.
_BYTE_STEPS = tuple(np.uint64(1 << (8 * k)) for k in range(8))


def sortable_key(value: Any) -> bytes:
    """Encodes a key value so that byte order equals value order.

    ints order numerically (any size up to 126 bytes, negatives included),
    floats numerically (-0.0 == 0.0, NaN after +inf), str by its UTF-8 bytes
    (= code point order), bytes as they are, bools False < True. Each type has
    its own leading tag byte, so values of different types never collide.
    Raises TypeError for other types (None, lists, dicts ...) and ValueError
    for ints too large or text that is not valid UTF-8.
    """
    kind = type(value)
    if kind is str:
        return _TAG_TEXT + value.encode("utf-8")
    if kind is int:
        return _TAG_INT + _int_key(value)
    if kind is bool:
        return _TAG_BOOL + (b"\x01" if value else b"\x00")
    if kind is float:
        return _TAG_FLOAT + _float_key(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _TAG_BYTES + bytes(value)
    if isinstance(value, str):
        return _TAG_TEXT + str(value).encode("utf-8")
    if isinstance(value, int):  # int subclasses such as IntEnum
        return _TAG_INT + _int_key(int(value))
    if isinstance(value, float):
        return _TAG_FLOAT + _float_key(float(value))
    raise TypeError(f"a {type(value).__name__} cannot be a key; keys are int, float, str "
                    "or bytes")


def _int_key(number: int) -> bytes:
    # A length byte then the magnitude big-endian: more bytes = further from 0.
    # Non-negatives: 0x80 + length; negatives: 0x7F - length with the body
    # counted up from -256**length, so within one length bytes rise with value.
    if number >= 0:
        size = (number.bit_length() + 7) // 8
        if size > _MAX_INT_BYTES:
            raise ValueError(f"integer key with {size} bytes is too large")
        return bytes((0x80 + size,)) + number.to_bytes(size, "big")
    size = ((-number).bit_length() + 7) // 8
    if size > _MAX_INT_BYTES:
        raise ValueError(f"integer key with {size} bytes is too large")
    return bytes((0x7F - size,)) + ((1 << (8 * size)) + number).to_bytes(size, "big")


def int64_keys(values: Sequence[int]) -> list[bytes]:
    """sortable_key of each value (ints within int64), a column at a time."""
    numbers = np.array(values, dtype=np.int64)
    unsigned = numbers.view(np.uint64)  # two's complement: its low bytes are the body
    negative = numbers < 0
    magnitude = np.where(negative, ~unsigned + np.uint64(1), unsigned)
    sizes = np.zeros(len(numbers), dtype=np.int64)
    for step in _BYTE_STEPS:
        sizes += magnitude >= step
    length_bytes = np.where(negative, 0x7F - sizes, 0x80 + sizes).astype(np.uint8)
    big_endian = unsigned.astype(">u8").view(np.uint8).reshape(-1, 8)

    def keys(size: int, rows) -> list[bytes]:
        out = np.empty((len(length_bytes[rows]), 2 + size), dtype=np.uint8)
        out[:, 0] = _TAG_INT[0]
        out[:, 1] = length_bytes[rows]
        out[:, 2:] = big_endian[rows, 8 - size:]
        return rows_as_bytes(out)
    return bytes_by_length(sizes, keys)


def _float_key(number: float) -> bytes:
    # IEEE 754 bits order like the numbers once the sign bit is flipped for
    # positives and every bit is flipped for negatives.
    if number != number:
        number = math.nan  # one NaN, positive: sorts after +inf
    elif number == 0.0:
        number = 0.0  # -0.0 == 0.0
    (bits,) = struct.unpack(">Q", _DOUBLE.pack(number))
    bits = bits ^ _ALL_ONES if bits & _SIGN else bits | _SIGN
    return bits.to_bytes(8, "big")
