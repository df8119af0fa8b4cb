"""Gzip members written (deterministic, stored when deflate barely shrinks) and read back.

A gzip-compressed TFRecord file is the framed byte stream inside gzip; several
gzip members may follow one another (TensorFlow, Python's `gzip` and Beam's
`ReadFromTFRecord` all read such files), which is what lets recordforge
assemble shards from compressed pieces without recompressing them.
"""

from __future__ import annotations

import zlib
from typing import BinaryIO, Iterator

from isal import isal_zlib

__all__ = [
    "DEFAULT_GZIP_LEVEL",
    "GZIP_MAGIC",
    "GZIP_WBITS",
    "Gunzip",
    "GzipStream",
    "GzipStreamError",
    "READ_BLOCK",
    "gunzip_blocks",
    "gzip_compress",
]

# isal's levels run 0-3. On serialized table rows, level 2 writes output
# within ~7% of zlib level 6's size at ~10x its speed; level 3 saves another
# ~2% at half the speed (benchmarks/bench_codec.py).
DEFAULT_GZIP_LEVEL = 2

GZIP_WBITS = 31  # deflate inside a gzip header/trailer (mtime 0: deterministic)
_RAW_DEFLATE_WBITS = -15  # deflate alone: what a probe compresses to
# gzip_compress stores data whose first _PROBE_BYTES deflate to more than
# _STORE_ABOVE of their size.
_PROBE_BYTES = 64 << 10
# GzipStream feeds its compressor this many bytes at a time.
_STREAM_BLOCK = 1 << 20
_STORE_ABOVE = 0.95
# Bytes read from a file at a time, and the most one decompression call
# gives, so a tiny, highly compressible member cannot expand into one
# unbounded buffer.
READ_BLOCK = 1 << 20
GZIP_MAGIC = b"\x1f\x8b"


def _stores(probe, level: int) -> bool:
    """Whether a gzip member starting with `probe` (its first `_PROBE_BYTES`)
    is written in stored deflate blocks: deflate shrinks the probe by less
    than 5% (see `gzip_compress`)."""
    return len(isal_zlib.compress(probe, level, _RAW_DEFLATE_WBITS)) > _STORE_ABOVE * len(probe)


def gzip_compress(data: bytes, level: int = DEFAULT_GZIP_LEVEL) -> bytes:
    """`data` as one complete gzip member. Deterministic: the same bytes and
    level always give the same output (the header carries no timestamp).

    Data that deflate barely shrinks (JPEG or PNG images, random bytes: its
    first `_PROBE_BYTES` shrink by less than 5%) is written in stored
    deflate blocks, still a gzip member every reader reads. On JPEG records
    that is 0.5% larger than deflating them, is written ~3x as fast, and,
    more to the point, is read back ~9x as fast (memory speed instead of
    ~350 MB/s of Huffman decoding): in verification, and in every epoch of
    training that reads it (benchmarks/bench_codec.py). `GzipStream` writes
    the same kind of member from data given in pieces."""
    if _stores(memoryview(data)[:_PROBE_BYTES], level):
        return zlib.compress(data, 0, GZIP_WBITS)  # level 0: stored blocks
    return isal_zlib.compress(data, level, GZIP_WBITS)


class GzipStream:
    """Writes what it is given to `out` as one gzip member, as
    `gzip_compress` would compress it (same header, level, and choice of
    stored blocks, made on the first `_PROBE_BYTES`), without holding more
    than a block of it.

    The compressor's output depends on how its input is cut (isal's does),
    so the input is fed to it in blocks of exactly `block` bytes, whatever
    pieces `write` was given (whole blocks straight from the caller's
    buffer, the rest gathered): the member is a function of the bytes
    alone. A member of at most max(block, `_PROBE_BYTES`) bytes is
    `gzip_compress` of them. `plain_bytes` counts the bytes given;
    `close()` ends the member and leaves `out` open."""

    def __init__(self, out: BinaryIO, level: int = DEFAULT_GZIP_LEVEL,
                 block: int = _STREAM_BLOCK):
        self._out = out
        self._level = level
        self._block = block
        self._buffer = bytearray()
        self._compressor = None
        self.plain_bytes = 0
        self._closed = False

    def write(self, data) -> None:
        if self._closed:
            raise ValueError("write to a closed GzipStream")
        view = memoryview(data).cast("B")
        if not len(view):
            return
        self.plain_bytes += len(view)
        block = self._block
        if self._compressor is None:
            self._buffer += view
            if len(self._buffer) > max(block, _PROBE_BYTES):
                self._start()
            return
        if self._buffer:
            fill = block - len(self._buffer)
            self._buffer += view[:fill]
            view = view[fill:]
            if len(self._buffer) < block:
                return
            self._compress(self._buffer)
            self._buffer.clear()
        whole = len(view) - len(view) % block
        for start in range(0, whole, block):
            self._compress(view[start:start + block])
        self._buffer += view[whole:]

    def _start(self) -> None:
        """Chooses the compressor from the first `_PROBE_BYTES` and feeds it
        the whole blocks gathered so far."""
        buffer = self._buffer
        if _stores(memoryview(buffer)[:_PROBE_BYTES], self._level):
            self._compressor = zlib.compressobj(0, zlib.DEFLATED, GZIP_WBITS)
        else:
            self._compressor = isal_zlib.compressobj(self._level, isal_zlib.DEFLATED,
                                                     GZIP_WBITS)
        whole = len(buffer) - len(buffer) % self._block
        view = memoryview(buffer)
        for start in range(0, whole, self._block):
            self._compress(view[start:start + self._block])
        # A new buffer for the rest, not the old one cut in place: a view of
        # it may outlive the call it was passed to (a sampling profiler, like
        # Dask workers run, holds the frames it samples, locals and all), and
        # a bytearray cannot be resized while any view of it is alive.
        self._buffer = bytearray(view[whole:])

    def _compress(self, data) -> None:
        compressed = self._compressor.compress(data)
        if compressed:
            self._out.write(compressed)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._compressor is None:
            self._out.write(gzip_compress(bytes(self._buffer), self._level))
        else:
            if self._buffer:
                self._compress(self._buffer)
            self._out.write(self._compressor.flush())
        self._buffer = bytearray()


class GzipStreamError(Exception):
    """Raised inside the decompressing generator; turned into TFRecordError
    with the record position by the framing loop."""


class Gunzip:
    """Decompresses a stream of one or more gzip members fed in pieces of
    any size (`feed`), checking that each member starts with the gzip magic
    and that the stream does not end inside one (`finish`). Raises
    `GzipStreamError`."""

    def __init__(self):
        self._decompressor = None  # None: at a member boundary
        self._pending = b""  # bytes after a member's end, before the next is known

    def feed(self, data) -> Iterator[bytes]:
        """The decompressed blocks of `data` (each at most `READ_BLOCK`
        bytes, so a tiny, highly compressible member cannot expand into one
        unbounded buffer)."""
        while data:
            if self._decompressor is None:
                data = self._pending + bytes(data)
                if len(data) < 2:
                    self._pending = data
                    return
                self._pending = b""
                if data[:2] != GZIP_MAGIC:
                    raise GzipStreamError("invalid gzip stream (no gzip member starts here)")
                self._decompressor = isal_zlib.decompressobj(GZIP_WBITS)
            decompressor = self._decompressor
            try:
                out = decompressor.decompress(data, READ_BLOCK)
                if out:
                    yield out
                while not decompressor.eof and decompressor.unconsumed_tail:
                    out = decompressor.decompress(decompressor.unconsumed_tail, READ_BLOCK)
                    if out:
                        yield out
            except isal_zlib.error as error:
                raise GzipStreamError(f"invalid gzip stream ({error})") from None
            if not decompressor.eof:
                return
            data = decompressor.unused_data
            self._decompressor = None

    def finish(self) -> None:
        """Raises `GzipStreamError` when the stream ended inside a member."""
        if self._decompressor is not None:
            raise GzipStreamError("truncated gzip stream")
        if self._pending:
            raise GzipStreamError("invalid gzip stream (no gzip member starts here)")


def gunzip_blocks(fileobj: BinaryIO) -> Iterator[bytes]:
    """Decompressed blocks of a stream of one or more gzip members."""
    gunzip = Gunzip()
    while True:
        data = fileobj.read(READ_BLOCK)
        if not data:
            gunzip.finish()
            return
        yield from gunzip.feed(data)
