"""The TFRecord file codec: framing, gzip, and a damage-checking reader.

A TFRecord file is a sequence of records, each framed as::

    uint64 length (little-endian) | uint32 masked_crc32c(length bytes)
    | data | uint32 masked_crc32c(data)

with ``masked_crc = ((crc >> 15 | crc << 17) + 0xa282ead8) mod 2**32``, exactly
as TensorFlow's `tf.io.TFRecordWriter` writes it. A gzip-compressed file is
that byte stream inside gzip; several gzip members may follow one another
(TensorFlow, Python's `gzip` and Beam's `ReadFromTFRecord` all read such
files), which is what lets recordforge assemble shards from compressed pieces
without recompressing them.

The reader raises one exception type, `TFRecordError`, for every kind of
damage, naming the file, the byte offset (in the uncompressed stream) and the
index of the record it was reading.

This module does not import Beam; the Beam steps that write shards call its
batch functions, so no hot path pays per-record Python overhead twice.
"""

from __future__ import annotations

import struct
import zlib
from typing import BinaryIO, Iterable, Iterator

import crc32c
import fsspec
import numpy as np
from isal import isal_zlib

from .layout import shard_suffix

__all__ = [
    "DEFAULT_GZIP_LEVEL",
    "GzipStream",
    "MAX_RECORD_BYTES",
    "RecordStreamCheck",
    "TFRecordError",
    "TFRecordWriter",
    "count_records",
    "frame_records",
    "gzip_compress",
    "iter_record_views",
    "iter_records",
    "masked_crc32c",
    "read_records",
    "suffix_for",
]

# isal's levels run 0-3. On serialized table rows, level 2 writes output
# within ~7% of zlib level 6's size at ~10x its speed; level 3 saves another
# ~2% at half the speed (benchmarks/bench_codec.py).
DEFAULT_GZIP_LEVEL = 2
COMPRESSIONS = ("none", "gzip")
# The largest record the reader accepts. A record is a serialized protobuf,
# which protobuf (and so TensorFlow) caps at 2 GiB; a length field claiming
# more is damage, reported at once instead of buffering a gzip stream's
# output while waiting for a record that cannot be an Example.
MAX_RECORD_BYTES = (1 << 31) - 1

_GZIP_WBITS = 31  # deflate inside a gzip header/trailer (mtime 0: deterministic)
_RAW_DEFLATE_WBITS = -15  # deflate alone: what a probe compresses to
# gzip_compress stores data whose first _PROBE_BYTES deflate to more than
# _STORE_ABOVE of their size.
_PROBE_BYTES = 64 << 10
# GzipStream feeds its compressor this many bytes at a time.
_STREAM_BLOCK = 1 << 20
_STORE_ABOVE = 0.95
_HEADER = struct.Struct("<QI")  # length, masked crc of length
_LENGTH = struct.Struct("<Q")
_CRC = struct.Struct("<I")
_HEADER_SIZE = _HEADER.size  # 12
_FOOTER_SIZE = _CRC.size  # 4
_READ_BLOCK = 1 << 20
_GZIP_MAGIC = b"\x1f\x8b"


class TFRecordError(Exception):
    """A TFRecord file is damaged: bad length CRC, bad data CRC, truncated
    record, or a truncated or invalid gzip stream.

    path: the file. offset: byte offset, in the uncompressed stream, of the
    record (or gzip data) where the damage was found. record_index: 0-based
    index of the record being read.
    """

    def __init__(self, problem: str, *, path: str, offset: int, record_index: int):
        where = path or "<stream>"
        super().__init__(f"{where}: {problem} at byte offset {offset} "
                         f"(record {record_index})")
        self.problem = problem
        self.path = path
        self.offset = offset
        self.record_index = record_index


def masked_crc32c(data) -> int:
    """The CRC32C of `data`, masked the way TFRecord files store it."""
    crc = crc32c.crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


# Record lengths repeat (fixed-size features), so their 12-byte headers, and
# the masked CRCs of their length fields, are cached: one CRC per record
# instead of two on the hot path.
_header_cache: dict[int, bytes] = {}
_length_crc_cache: dict[int, int] = {}


def _header(length: int) -> bytes:
    header = _header_cache.get(length)
    if header is None:
        header = _HEADER.pack(length, _length_crc(length))
        if len(_header_cache) < 65536:
            _header_cache[length] = header
    return header


def _length_crc(length: int) -> int:
    """The masked CRC a header must hold for a record of `length` bytes."""
    crc = _length_crc_cache.get(length)
    if crc is None:
        crc = masked_crc32c(_LENGTH.pack(length))
        if len(_length_crc_cache) < 65536:
            _length_crc_cache[length] = crc
    return crc


def frame_records(records: Iterable[bytes]) -> bytes:
    """The TFRecord framing of `records`, concatenated into one bytes object."""
    records = records if isinstance(records, list) else list(records)
    return b"".join(_framed_parts(records))


def _framed_parts(records: list) -> list:
    """``[header_0, record_0, crc_0, header_1, ...]`` for `records`.

    The per-record work is a few C-level passes (map, numpy) rather than a
    Python loop: on ~1 KB rows the loop cost more than the CRCs themselves.
    """
    count = len(records)
    if not count:
        return []
    headers = list(map(_header_cache.get, map(len, records)))
    if None in headers:
        headers = [header or _header(len(record)) for header, record in zip(headers, records)]
    crcs = np.fromiter(map(crc32c.crc32c, records), dtype=np.uint32, count=count)
    # masked_crc32c on the whole array (uint32 arithmetic wraps like & 0xFFFFFFFF).
    masked = ((crcs >> 15) | (crcs << 17)) + np.uint32(0xA282EAD8)
    parts = [b""] * (3 * count)
    parts[0::3] = headers
    parts[1::3] = records
    parts[2::3] = masked.astype("<u4").view("V4").tolist()  # 4-byte bytes objects
    return parts


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
        return zlib.compress(data, 0, _GZIP_WBITS)  # level 0: stored blocks
    return isal_zlib.compress(data, level, _GZIP_WBITS)


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
            self._compressor = zlib.compressobj(0, zlib.DEFLATED, _GZIP_WBITS)
        else:
            self._compressor = isal_zlib.compressobj(self._level, isal_zlib.DEFLATED,
                                                     _GZIP_WBITS)
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


def suffix_for(compression: str) -> str:
    """The shard file suffix for a compression: `.tfrecord` or `.tfrecord.gz`."""
    _check_compression(compression)
    return shard_suffix(compression)


def _check_compression(compression: str) -> None:
    if compression not in COMPRESSIONS:
        raise ValueError(f"compression must be one of {COMPRESSIONS}, got {compression!r}")


class TFRecordWriter:
    """Writes TFRecords to a binary file object (local file, fsspec file, ...).

    With compression "gzip" the whole output is one gzip member. `close()`
    finishes the stream but leaves `fileobj` open: the caller owns it.
    """

    def __init__(self, fileobj: BinaryIO, compression: str = "none",
                 level: int = DEFAULT_GZIP_LEVEL):
        _check_compression(compression)
        self._fileobj = fileobj
        self._compressor = (isal_zlib.compressobj(level, isal_zlib.DEFLATED, _GZIP_WBITS)
                            if compression == "gzip" else None)
        self.records_written = 0
        self._closed = False

    def write(self, record: bytes) -> None:
        self.write_many((record,))

    def write_many(self, records: Iterable[bytes]) -> None:
        """Frames and writes many records in one call."""
        if self._closed:
            raise ValueError("write to a closed TFRecordWriter")
        records = records if isinstance(records, (list, tuple)) else list(records)
        data = frame_records(records)
        if self._compressor is not None:
            data = self._compressor.compress(data)
        if data:
            self._fileobj.write(data)
        self.records_written += len(records)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._compressor is not None:
            self._fileobj.write(self._compressor.flush())

    def __enter__(self) -> "TFRecordWriter":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def _plain_blocks(fileobj: BinaryIO) -> Iterator[bytes]:
    while True:
        block = fileobj.read(_READ_BLOCK)
        if not block:
            return
        yield block


class _GzipStreamError(Exception):
    """Raised inside the decompressing generator; turned into TFRecordError
    with the record position by the framing loop."""


class _Gunzip:
    """Decompresses a stream of one or more gzip members fed in pieces of
    any size (`feed`), checking that each member starts with the gzip magic
    and that the stream does not end inside one (`finish`). Raises
    `_GzipStreamError`."""

    def __init__(self):
        self._decompressor = None  # None: at a member boundary
        self._pending = b""  # bytes after a member's end, before the next is known

    def feed(self, data) -> Iterator[bytes]:
        """The decompressed blocks of `data` (each at most `_READ_BLOCK`
        bytes, so a tiny, highly compressible member cannot expand into one
        unbounded buffer)."""
        while data:
            if self._decompressor is None:
                data = self._pending + bytes(data)
                if len(data) < 2:
                    self._pending = data
                    return
                self._pending = b""
                if data[:2] != _GZIP_MAGIC:
                    raise _GzipStreamError("invalid gzip stream (no gzip member starts here)")
                self._decompressor = isal_zlib.decompressobj(_GZIP_WBITS)
            decompressor = self._decompressor
            try:
                out = decompressor.decompress(data, _READ_BLOCK)
                if out:
                    yield out
                while not decompressor.eof and decompressor.unconsumed_tail:
                    out = decompressor.decompress(decompressor.unconsumed_tail, _READ_BLOCK)
                    if out:
                        yield out
            except isal_zlib.error as error:
                raise _GzipStreamError(f"invalid gzip stream ({error})") from None
            if not decompressor.eof:
                return
            data = decompressor.unused_data
            self._decompressor = None

    def finish(self) -> None:
        """Raises `_GzipStreamError` when the stream ended inside a member."""
        if self._decompressor is not None:
            raise _GzipStreamError("truncated gzip stream")
        if self._pending:
            raise _GzipStreamError("invalid gzip stream (no gzip member starts here)")


def _gunzip_blocks(fileobj: BinaryIO) -> Iterator[bytes]:
    """Decompressed blocks of a stream of one or more gzip members."""
    gunzip = _Gunzip()
    while True:
        data = fileobj.read(_READ_BLOCK)
        if not data:
            gunzip.finish()
            return
        yield from gunzip.feed(data)


def _blocks_for(fileobj: BinaryIO, path: str, compression: str) -> Iterator[bytes]:
    if compression == "auto":
        compression = _detect_compression(fileobj, path)
    _check_compression(compression)
    return _gunzip_blocks(fileobj) if compression == "gzip" else _plain_blocks(fileobj)


def _detect_compression(fileobj: BinaryIO, path: str) -> str:
    """gzip for `.gz`/`.gzip` names; otherwise plain, unless the stream starts
    with the gzip magic and its first 12 bytes are not a valid record header
    (a plain record header whose length happens to begin with 1f 8b still
    carries a matching CRC, so the two cannot be confused)."""
    lowered = path.lower()
    if lowered.endswith((".gz", ".gzip")):
        return "gzip"
    if not (hasattr(fileobj, "seekable") and fileobj.seekable()):
        return "none"
    start = fileobj.tell()
    head = fileobj.read(_HEADER_SIZE)
    fileobj.seek(start)
    if head[:2] != _GZIP_MAGIC:
        return "none"
    if len(head) == _HEADER_SIZE:
        length, length_crc = _HEADER.unpack(head)
        if masked_crc32c(head[:8]) == length_crc:
            return "none"
    return "gzip"


def iter_records(fileobj: BinaryIO, *, path: str = "",
                 compression: str = "auto") -> Iterator[bytes]:
    """Yields the records of a TFRecord stream, checking both CRCs of each.

    compression: "none", "gzip" (one or more members), or "auto" (by the
    `path` suffix, else by sniffing the stream). Raises only `TFRecordError`
    for damaged data, including a length field above `MAX_RECORD_BYTES`,
    after yielding every intact record before the damage; memory stays
    bounded by the largest record.
    """
    for buffer, starts, ends in _checked_spans(fileobj, path, compression):
        with memoryview(buffer) as view:
            records = [bytes(view[start + _HEADER_SIZE:end - _FOOTER_SIZE])
                       for start, end in zip(starts, ends)]
        yield from records


def iter_record_views(fileobj: BinaryIO, *, path: str = "",
                      compression: str = "auto") -> Iterator[memoryview]:
    """`iter_records` without the copy: each record is a memoryview into
    the reader's buffer, so a record of any size is held once. A view is
    valid only until the next record is asked for; the caller must release
    it and everything made from it (slices, numpy arrays) by then."""
    for buffer, starts, ends in _checked_spans(fileobj, path, compression):
        with memoryview(buffer) as view:
            for start, end in zip(starts, ends):
                with view[start + _HEADER_SIZE:end - _FOOTER_SIZE] as record:
                    yield record


def count_records(fileobj: BinaryIO, *, path: str = "", compression: str = "auto") -> int:
    """The number of records in a TFRecord stream, read to its end with every
    check `iter_records` makes, without making an object per record. Raises
    `TFRecordError` as `iter_records` would; its record_index is then the
    number of intact records before the damage."""
    return sum(len(starts) for _, starts, _ in _checked_spans(fileobj, path, compression))


class RecordStreamCheck:
    """Checks a TFRecord stream as it is written, with every check
    `iter_records` makes: a writable sink (`write`) that keeps no more than
    the bytes of records not yet complete. `finish()` returns the number of
    records. Raises `TFRecordError` at the first damage, naming `path`, the
    offset in the uncompressed stream and the record index.

    For writers whose output is not read back before it is published: the
    bytes checked are the bytes written, in the same pass."""

    # Records are walked once this many bytes are waiting, so that the walk
    # and the CRCs run over many records per call however small the writes.
    _WALK_FROM = 1 << 20

    def __init__(self, path: str, compression: str):
        _check_compression(compression)
        self._path = path
        self._gunzip = _Gunzip() if compression == "gzip" else None
        self._buffer = bytearray()
        self._position = 0  # offset of buffer[0] in the uncompressed stream
        self.records = 0

    def write(self, data) -> None:
        if self._gunzip is None:
            self._take(data)
            return
        try:
            for block in self._gunzip.feed(data):
                self._take(block)
        except _GzipStreamError as error:
            raise self._error(str(error), len(self._buffer)) from None

    def finish(self) -> int:
        """The number of records; raises `TFRecordError` for a stream that
        ends inside a record or a gzip member."""
        if self._gunzip is not None:
            try:
                self._gunzip.finish()
            except _GzipStreamError as error:
                raise self._error(str(error), len(self._buffer)) from None
        self._walk()
        if self._buffer:
            raise self._error(f"truncated record ({len(self._buffer)} bytes left at end of "
                              "stream)", 0)
        return self.records

    def _take(self, data) -> None:
        self._buffer += data
        if len(self._buffer) >= self._WALK_FROM:
            self._walk()

    def _walk(self) -> None:
        starts, ends, damage = _complete_records(self._buffer, self._position, self.records,
                                                 self._path)
        if damage is not None:
            raise damage
        if ends:
            del self._buffer[:ends[-1]]
            self._position += ends[-1]
            self.records += len(starts)

    def _error(self, problem: str, past_buffer_start: int) -> TFRecordError:
        return TFRecordError(problem, path=self._path,
                             offset=self._position + past_buffer_start,
                             record_index=self.records)


def _checked_spans(fileobj: BinaryIO, path: str, compression: str
                   ) -> Iterator[tuple[bytearray, list[int], list[int]]]:
    """``(buffer, starts, ends)``: where each complete record of the buffer
    begins and ends, every one checked. The buffer is valid only until the
    next item is asked for.

    Each buffer's records are walked by their length fields (a record's
    12-byte header is compared with the canonical header of its length,
    which checks the length CRC), then their data CRCs are computed in one
    C-level pass. Damage is raised in stream order, after the intact
    records before it have been handed out.
    """
    blocks = _blocks_for(fileobj, path, compression)
    buffer = bytearray()
    position = 0  # offset of buffer[0] in the uncompressed stream
    index = 0  # records handed out so far
    exhausted = False

    def fill(needed: int) -> bool:
        """Reads until the buffer holds `needed` bytes; False at end of stream."""
        nonlocal exhausted
        while len(buffer) < needed and not exhausted:
            try:
                block = next(blocks)
            except StopIteration:
                exhausted = True
                break
            except _GzipStreamError as error:
                raise TFRecordError(str(error), path=path, offset=position + len(buffer),
                                    record_index=index) from None
            buffer.extend(block)
        return len(buffer) >= needed

    while True:
        starts, ends, damage = _complete_records(buffer, position, index, path)
        if starts:
            yield buffer, starts, ends
            index += len(starts)
        if damage is not None:
            raise damage
        cursor = ends[-1] if ends else 0
        if cursor:
            del buffer[:cursor]
            position += cursor
        if len(buffer) >= _HEADER_SIZE:
            # A record whose length CRC checked out but whose body is not all
            # here yet: read exactly until it is (never preallocate `length`,
            # which could be huge in a crafted file).
            (length,) = _LENGTH.unpack_from(buffer, 0)
            if fill(_HEADER_SIZE + length + _FOOTER_SIZE):
                continue
        elif fill(_HEADER_SIZE):
            continue
        if buffer:
            raise TFRecordError(
                f"truncated record ({len(buffer)} bytes left at end of stream)",
                path=path, offset=position, record_index=index)
        # A gzip stream must also have ended cleanly; draining `blocks` raises
        # for a member cut short after the last complete record.
        if not exhausted:
            fill(1)
            if buffer:
                continue
        return


def _complete_records(buffer: bytearray, position: int, index: int, path: str
                      ) -> tuple[list[int], list[int], TFRecordError | None]:
    """Starts and ends of the intact complete records at the head of
    `buffer` (both CRCs checked), and the damage that stopped them (None
    when they stopped at the end of the complete records). position: the
    offset of buffer[0] in the stream; index: records before it."""
    starts, ends, damage = _walk_headers(buffer, position, index, path)
    bad_data = _first_bad_data_crc(buffer, starts, ends)
    if bad_data is not None:
        damage = TFRecordError("bad data CRC", path=path, offset=position + starts[bad_data],
                               record_index=index + bad_data)
        starts, ends = starts[:bad_data], ends[:bad_data]
    return starts, ends, damage


def _walk_headers(buffer: bytearray, position: int, index: int, path: str
                  ) -> tuple[list[int], list[int], TFRecordError | None]:
    """Starts and ends of the complete records at the head of `buffer` whose
    length CRC checks out, and the damage that stopped the walk (None when
    it stopped at the end of the complete records)."""
    starts: list[int] = []
    keep = starts.append  # one list: each record ends where the next starts
    available = len(buffer)
    last_header = available - _HEADER_SIZE
    cursor = 0
    unpack_header = _HEADER.unpack_from
    cached_crc = _length_crc_cache.get
    damage = None
    while cursor <= last_header:
        length, crc = unpack_header(buffer, cursor)
        if crc != cached_crc(length) and crc != _length_crc(length):
            damage = TFRecordError("bad length CRC", path=path, offset=position + cursor,
                                   record_index=index + len(starts))
            break
        if length > MAX_RECORD_BYTES:
            damage = TFRecordError(
                f"record length {length} exceeds the 2 GiB limit of a serialized protobuf",
                path=path, offset=position + cursor, record_index=index + len(starts))
            break
        end = cursor + _HEADER_SIZE + length + _FOOTER_SIZE
        if end > available:
            break
        keep(cursor)
        cursor = end
    ends = starts[1:]
    if starts:
        ends.append(cursor)  # the walk stopped at the end of the last record kept
    return starts, ends, damage


def _first_bad_data_crc(buffer: bytearray, starts: list[int], ends: list[int]) -> int | None:
    """Position in `starts` of the first record whose data CRC is wrong."""
    if not starts:
        return None
    with memoryview(buffer) as view:
        data = map(view.__getitem__, map(slice, [start + _HEADER_SIZE for start in starts],
                                         [end - _FOOTER_SIZE for end in ends]))
        crcs = np.fromiter(map(crc32c.crc32c, data), dtype=np.uint32, count=len(starts))
    masked = ((crcs >> 15) | (crcs << 17)) + np.uint32(0xA282EAD8)
    footers = np.asarray(ends, dtype=np.int64)[:, None] + np.arange(-_FOOTER_SIZE, 0)
    stored = np.frombuffer(buffer, dtype=np.uint8)[footers].view("<u4").ravel()
    bad = np.flatnonzero(masked != stored)
    return int(bad[0]) if len(bad) else None


def read_records(path: str, compression: str = "auto") -> Iterator[bytes]:
    """Yields the records of one TFRecord file opened through fsspec."""
    with fsspec.open(path, "rb") as fileobj:
        yield from iter_records(fileobj, path=path, compression=compression)
