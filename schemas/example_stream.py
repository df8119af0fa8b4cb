"""A serialized Example read as a stream: each feature's kind, value count and first values.

For records too long to hold (a gzip shard of a few hundred KB can hold a
record of 1 GiB): `summarize_example` reads the record's bytes once, in
pieces, from a `read(n)` callable, and keeps per feature its kind, its
number of values and its first `keep_values` values, a bytes value whole
when it has at most `keep_bytes` bytes and as a `LongBytes` (its size and
first `keep_bytes` bytes) otherwise. Memory is a block plus what is kept,
whatever the record holds.

It accepts exactly the encoding `example_scan.scan_example` accepts (the
canonical one every serializer writes) and refuses the rest with the same
errors: `NonCanonicalExample` for an encoding protobuf would merge,
`ExampleDecodeError` for bytes protobuf would refuse.
"""

from __future__ import annotations

import re
from typing import Callable, NamedTuple

import numpy as np

from .example import BYTES, FLOAT, INT64, ExampleDecodeError
from .example_scan import NonCanonicalExample, varint_values

__all__ = ["FeatureHead", "LongBytes", "summarize_example"]

_KINDS = {1: BYTES, 2: FLOAT, 3: INT64}
_LEN = 2  # wire type of length-delimited fields
_BLOCK = 1 << 20  # bytes read at a time
MAX_NAME_BYTES = 1 << 20  # a feature name is kept whole, so its length is bounded


class LongBytes(NamedTuple):
    """A bytes value longer than the summary keeps: its size and head."""

    size: int
    head: bytes


class FeatureHead(NamedTuple):
    """One feature of a summarized Example: kind ("bytes", "float",
    "int64"), number of values, and the first values kept."""

    kind: str
    count: int
    head: list


def _truncated() -> ExampleDecodeError:
    return ExampleDecodeError("not a tf.train.Example (truncated field)")


class _Stream:
    """The record's bytes read in order through `read`, `left` of them to come."""

    def __init__(self, read: Callable[[int], bytes], length: int):
        self._read, self.left = read, length
        self._pending = b""

    def take(self, size: int) -> bytes:
        """The next `size` bytes (`size` at most what the caller keeps)."""
        if size > self.left:
            raise _truncated()
        parts, have = [], 0
        while have < size:
            piece = self._piece(size - have)
            parts.append(piece)
            have += len(piece)
        self.left -= size
        return b"".join(parts)

    def skip(self, size: int, visit: Callable[[bytes], None] | None = None) -> None:
        """Passes over `size` bytes, a block at a time, each block given to `visit`."""
        if size > self.left:
            raise _truncated()
        self.left -= size
        while size:
            piece = self._piece(min(size, _BLOCK))
            size -= len(piece)
            if visit is not None:
                visit(piece)

    def _piece(self, most: int) -> bytes:
        if not self._pending:
            self._pending = self._read(_BLOCK)
            if not self._pending:
                raise ExampleDecodeError("not a tf.train.Example (the record ends early)")
        piece, self._pending = self._pending[:most], self._pending[most:]
        return piece

    def varint(self, end: int) -> int:
        """A varint that must end before `end` bytes are `left`."""
        result = shift = 0
        while True:
            if self.left <= end:
                raise ExampleDecodeError("not a tf.train.Example (truncated varint)")
            byte = self.take(1)[0]
            result |= (byte & 0x7F) << shift
            if byte < 0x80:
                if shift >= 63 and result >> 64:
                    raise ExampleDecodeError("not a tf.train.Example (varint too long)")
                return result
            shift += 7
            if shift > 63:
                raise ExampleDecodeError("not a tf.train.Example (varint too long)")

    def field(self, end: int, where: str) -> tuple[int, int]:
        """(field number, payload length) of a length-delimited field of a
        message that ends when `end` bytes are left."""
        tag = self.varint(end)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise ExampleDecodeError("not a tf.train.Example (field number 0)")
        if wire != _LEN:
            raise NonCanonicalExample(f"{where}: field {number} has wire type {wire}")
        length = self.varint(end)
        if length > self.left - end:
            raise _truncated()
        return number, length


def summarize_example(read: Callable[[int], bytes], length: int, *, keep_values: int,
                      keep_bytes: int) -> dict[str, FeatureHead]:
    """Feature name -> `FeatureHead` of the serialized Example of `length`
    bytes that `read(n)` gives (at most n bytes a call, b"" at its end).
    Raises as `scan_example` does (module docstring)."""
    stream = _Stream(read, length)
    found: dict[str, FeatureHead] = {}
    if stream.left:
        number, size = stream.field(0, "Example")
        if number != 1 or stream.left != size:
            raise NonCanonicalExample("Example: not one features field")
        while stream.left:
            number, size = stream.field(0, "Features")
            if number != 1:
                raise NonCanonicalExample(f"Features: unknown field {number}")
            name, feature = _entry(stream, stream.left - size, keep_values, keep_bytes)
            if name in found:
                raise NonCanonicalExample(f"feature {name!r} appears twice")
            found[name] = feature
    return found


def _entry(stream: _Stream, end: int, keep_values: int, keep_bytes: int
           ) -> tuple[str, FeatureHead]:
    """A map entry ending when `end` bytes are left: key, then value."""
    number, size = stream.field(end, "feature entry")
    if number != 1:
        raise NonCanonicalExample("feature entry: not a key then a value")
    if size > MAX_NAME_BYTES:
        raise NonCanonicalExample(f"a feature name of {size} bytes (at most {MAX_NAME_BYTES} "
                                  "are read)")
    try:
        name = stream.take(size).decode("utf-8")
    except UnicodeDecodeError:
        raise ExampleDecodeError("not a tf.train.Example (a feature name is not UTF-8)") from None
    if stream.left == end:
        raise NonCanonicalExample("feature entry: not a key then a value")
    number, size = stream.field(end, "feature entry")
    if number != 2 or stream.left - size != end:
        raise NonCanonicalExample("feature entry: not a key then a value")
    if not size:
        return name, FeatureHead(BYTES, 0, [])
    number, size = stream.field(end, "Feature")
    if number not in _KINDS or stream.left - size != end:
        raise NonCanonicalExample(f"feature {name!r}: not one list")
    kind = _KINDS[number]
    if kind == BYTES:
        return name, _bytes_values(stream, end, keep_values, keep_bytes)
    if stream.left == end:
        return name, FeatureHead(kind, 0, [])
    number, size = stream.field(end, f"{kind} list")
    if number != 1 or stream.left - size != end:
        raise NonCanonicalExample(f"{kind} list: not one packed field")
    if kind == FLOAT:
        return name, _floats(stream, size, keep_values)
    return name, _ints(stream, size, keep_values)


def _bytes_values(stream: _Stream, end: int, keep_values: int, keep_bytes: int) -> FeatureHead:
    head, count = [], 0
    while stream.left > end:
        number, size = stream.field(end, "BytesList")
        if number != 1:
            raise NonCanonicalExample(f"BytesList: unknown field {number}")
        count += 1
        if len(head) >= keep_values:
            stream.skip(size)
        elif size <= keep_bytes:
            head.append(stream.take(size))
        else:
            head.append(LongBytes(size, stream.take(keep_bytes)))
            stream.skip(size - keep_bytes)
    return FeatureHead(BYTES, count, head)


def _floats(stream: _Stream, size: int, keep_values: int) -> FeatureHead:
    if size % 4:
        raise ExampleDecodeError("not a tf.train.Example (packed floats cut short)")
    kept = min(size, 4 * keep_values)
    head = np.frombuffer(stream.take(kept), "<f4").tolist()
    stream.skip(size - kept)
    return FeatureHead(FLOAT, size // 4, head)


# Ten continuation bytes in a row: a varint longer than protobuf's 10 bytes.
_TOO_LONG = re.compile(rb"[\x80-\xff]{10}")
_LEADING = re.compile(rb"[\x80-\xff]*")
_HIGH_BYTES = bytes(range(0x80, 0x100))


class _VarintRun:
    """Counts the varints of a packed run given in blocks, refusing one of
    more than 10 bytes as `varint_values` does (a value ends at each byte
    below 0x80; `pending` continuation bytes run on into the next block).
    Regular expressions and one count over each block: nothing allocated
    per value, so 8 million packed ints cost a few blocks of memory."""

    def __init__(self):
        self.count = 0
        self.pending = 0

    def add(self, block: bytes) -> None:
        leading = _LEADING.match(block).end()
        if leading == len(block):
            self.pending += leading
        else:
            if self.pending + leading >= 10 or _TOO_LONG.search(block, leading):
                raise ExampleDecodeError("not a tf.train.Example (varint too long)")
            self.count += int(np.count_nonzero(np.frombuffer(block, np.uint8) < 0x80))
            self.pending = len(block) - len(block.rstrip(_HIGH_BYTES))
        if self.pending >= 10:
            raise ExampleDecodeError("not a tf.train.Example (varint too long)")


def _ints(stream: _Stream, size: int, keep_values: int) -> FeatureHead:
    """A packed run of varints: the first `keep_values` decoded, all counted
    and checked for length."""
    prefix = stream.take(min(size, 10 * keep_values))  # a varint takes at most 10 bytes
    ends = np.flatnonzero(np.frombuffer(prefix, np.uint8) < 0x80)
    complete = int(ends[-1]) + 1 if len(ends) else 0
    head = list(varint_values(memoryview(prefix), 0, complete))[:keep_values]
    run = _VarintRun()
    run.add(prefix)
    stream.skip(size - len(prefix), run.add)
    if run.pending:
        raise ExampleDecodeError("not a tf.train.Example (truncated varint)")
    return FeatureHead(INT64, run.count, head)
