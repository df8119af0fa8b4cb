"""An Avro container's blocks decompressed by us, each bounded, before fastavro decodes them.

fastavro inflates a compressed block whole (``zlib.decompress`` and the
like, no output limit): a 1 MB deflate block of zeros becomes 1 GB in
memory before a record is decoded. `DecompressedContainer` is the file
fastavro reads instead: the container's header with its codec said to be
``null``, then each block's records decompressed here, in steps, never
past `MAX_DECODED_BYTES` (the bound a CSV record has, `common`); a block
that would inflate further is `BlockRefused`, naming its index and byte
offset in the file, and is never decoded. Memory is one block.

The container layout (the Avro specification's "Object Container Files"):
``Obj\\x01``, a metadata map of bytes (``avro.schema``, ``avro.codec``), a
16-byte sync marker, then blocks of (record count, byte size, bytes, sync
marker). Lengths are read through the reader's bounded file, so a false one
is a short read (`EOFError`), never an allocation.
"""

from __future__ import annotations

import bz2
import io
import lzma
import zlib
from typing import IO, Callable, Iterator

from .common import MAX_DECODED_BYTES

__all__ = ["BlockRefused", "DecompressedContainer"]

_MAGIC = b"Obj\x01"
_SYNC_SIZE = 16
_STEP = 1 << 20  # bytes inflated at a time


class BlockRefused(ValueError):
    """A block that inflates past `MAX_DECODED_BYTES`, or whose codec this
    reader cannot decompress."""


def _read_exactly(f: IO[bytes], size: int) -> bytes:
    data = f.read(size)
    if len(data) != size:
        raise EOFError(f"the file ends {size - len(data)} bytes early")
    return data


def _read_long(f: IO[bytes]) -> int:
    """A zig-zag varint (at most 10 bytes, as a long takes)."""
    value = shift = 0
    for _ in range(10):
        byte = _read_exactly(f, 1)[0]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (value >> 1) ^ -(value & 1)
        shift += 7
    raise ValueError("a varint longer than 10 bytes")


def _long(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | 0x80 if n else low)
        if not n:
            return bytes(out)


def _read_bytes(f: IO[bytes]) -> bytes:
    size = _read_long(f)
    if size < 0:
        raise ValueError(f"a negative length ({size}) in the data")
    return _read_exactly(f, size)


def _read_metadata(f: IO[bytes]) -> list[tuple[bytes, bytes]]:
    """The header's map of bytes, in file order."""
    entries = []
    while True:
        count = _read_long(f)
        if count == 0:
            return entries
        if count < 0:  # a negative count is followed by the block's byte size
            count = -count
            _read_long(f)
        for _ in range(count):
            entries.append((_read_bytes(f), _read_bytes(f)))


def _bounded(decompress: Callable[[bytes, int], bytes], pending: Callable[[bytes], bool],
             data: bytes, where: str) -> bytearray:
    """`data` inflated by `decompress(input, max_length)` a step at a time,
    `pending(last output)` saying whether the decompressor holds more;
    refused as soon as the output passes `MAX_DECODED_BYTES`, so that a bomb
    never takes more memory than a block at the bound."""
    out = bytearray()
    chunk = data
    while True:
        piece = decompress(chunk, _STEP)
        out += piece
        if len(out) > MAX_DECODED_BYTES:
            raise BlockRefused(f"{where} inflates to more than {MAX_DECODED_BYTES >> 20} MiB "
                               "(a decompression bomb?); it is not decoded")
        if not pending(piece):
            return out
        chunk = b""


def _deflate(data: bytes, where: str) -> bytearray:
    inflater = zlib.decompressobj(-15)  # raw deflate, as Avro writes it

    def decompress(chunk: bytes, most: int) -> bytes:
        return inflater.decompress(chunk or inflater.unconsumed_tail, most)

    return _bounded(decompress, lambda piece: bool(inflater.unconsumed_tail) or
                    len(piece) == _STEP, data, where)


def _bzip2(data: bytes, where: str) -> bytearray:
    inflater = bz2.BZ2Decompressor()
    return _bounded(inflater.decompress, lambda _: not (inflater.eof or inflater.needs_input),
                    data, where)


def _xz(data: bytes, where: str) -> bytearray:
    inflater = lzma.LZMADecompressor()
    return _bounded(inflater.decompress, lambda _: not (inflater.eof or inflater.needs_input),
                    data, where)


def _snappy(data: bytes, where: str) -> bytes:
    """Raw snappy and a 4-byte CRC; the raw format states its decompressed
    size first, checked before anything is made."""
    try:
        from cramjam import snappy
    except ImportError:
        raise BlockRefused(f"{where} is snappy-compressed, which needs the cramjam "
                           "package") from None
    if len(data) < 4:
        raise BlockRefused(f"{where} is too short for a snappy block and its CRC")
    size = _read_long_unsigned(data[:10])
    if size > MAX_DECODED_BYTES:
        raise BlockRefused(f"{where} states it inflates to {size} bytes, more than "
                           f"{MAX_DECODED_BYTES >> 20} MiB; it is not decoded")
    return bytes(snappy.decompress_raw(data[:-4]))


def _read_long_unsigned(head: bytes) -> int:
    value = shift = 0
    for byte in head:
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value
        shift += 7
    raise BlockRefused("a snappy block whose size cannot be read")


def _zstandard(data: bytes, where: str) -> bytes:
    try:
        import zstandard
    except ImportError:
        raise BlockRefused(f"{where} is zstandard-compressed, which needs the zstandard "
                           "package") from None
    with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)) as reader:
        out = reader.read(MAX_DECODED_BYTES + 1)
        if len(out) > MAX_DECODED_BYTES or reader.read(1):
            raise BlockRefused(f"{where} inflates to more than {MAX_DECODED_BYTES >> 20} MiB "
                               "(a decompression bomb?); it is not decoded")
    return out


_CODECS = {"null": lambda data, where: data, "deflate": _deflate, "bzip2": _bzip2, "xz": _xz,
           "snappy": _snappy, "zstandard": _zstandard}


class DecompressedContainer:
    """The file fastavro reads (module docstring): reads give the rewritten
    container a block at a time; `tell` is the offset in it. Raises
    `BlockRefused` for a block it will not inflate or a codec it does not
    know, and what a damaged file gives (`EOFError`, `ValueError`)."""

    def __init__(self, f: IO[bytes]):
        self._parts = _rewritten(f)
        self._part = memoryview(b"")  # what is left of the part being read
        self._position = 0

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            raise ValueError(f"a negative length ({size}) in the data")
        taken, have = [], 0
        while have < size:
            if not self._part:
                part = self._next_part()
                if part is None:
                    break
                self._part = memoryview(part)
            piece = self._part[:size - have]
            taken.append(piece)
            have += len(piece)
            self._part = self._part[len(piece):]
        self._position += have
        return b"".join(taken)  # the one copy a block's bytes get here

    def _next_part(self):
        try:
            return next(self._parts, None)
        except EOFError as error:
            # fastavro takes an EOFError at a block's start for the end of
            # the file: a file cut short must not read as complete.
            raise ValueError(f"the file is cut short ({error})") from None

    def tell(self) -> int:
        return self._position


def _rewritten(f: IO[bytes]) -> Iterator[bytes]:
    if _read_exactly(f, len(_MAGIC)) != _MAGIC:
        raise ValueError("not an Avro object container file (no Obj\\x01 magic)")
    metadata = _read_metadata(f)
    sync = _read_exactly(f, _SYNC_SIZE)
    codec = dict(metadata).get(b"avro.codec", b"null").decode("utf-8", "replace")
    inflate = _CODECS.get(codec)
    if inflate is None:
        raise BlockRefused(f"the file's codec {codec!r} is not one Avro defines")
    header = [_MAGIC, _long(len(metadata))]
    for key, value in metadata:
        value = b"null" if key == b"avro.codec" else value
        header += [_long(len(key)), key, _long(len(value)), value]
    yield b"".join(header + [_long(0), sync])
    index = 0
    while True:
        offset = f.tell()
        if not f.read(1):
            return
        f.seek(offset)
        count = _read_long(f)
        data = inflate(_read_bytes(f), f"block {index} (at byte {offset})")
        if _read_exactly(f, _SYNC_SIZE) != sync:
            raise ValueError(f"block {index} (at byte {offset}) does not end with the "
                             "file's sync marker")
        yield _long(count) + _long(len(data))
        yield data
        yield sync
        index += 1
