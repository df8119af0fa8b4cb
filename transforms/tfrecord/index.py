"""Index files: one ``"<offset> <framed length>"`` line per record, as DALI and the `tfrecord` package read them.

The format of DALI's ``tfrecord2idx`` and of the `tfrecord` package's
``tfrecord.tools.tfrecord2idx.create_index``: for each record of an
uncompressed TFRecord file, in order, its byte offset and the bytes it
takes framed (the 8-byte length, its 4-byte CRC, the data and the data's
4-byte CRC), in decimal, separated by one space, ending in ``"\\n"``. A
gzip file has no index: its records cannot be reached without inflating
everything before them.

`RecordIndexer` makes a file's index from its framed bytes as they are
written (the writer's own stream: no second read); `IndexMatch` compares
an index file's lines, read as a stream, with the records of a walk of
its shard.
"""

from __future__ import annotations

from typing import BinaryIO, Callable

from ...schemas.native import kernels
from .framing import (FOOTER_SIZE, HEADER, HEADER_SIZE, MAX_RECORD_BYTES, TFRecordError,
                      cached_length_crc, length_crc)

__all__ = ["INDEX_LINE_LIMIT", "IndexMatch", "RecordIndexer", "index_line", "indexable"]

# The longest line an index holds: two 64-bit decimals, a space and "\n".
# A reader of a damaged index reads no longer line than this.
INDEX_LINE_LIMIT = 2 * 20 + 2


def indexable(compression: str) -> bool:
    """Whether a file of `compression` can have an index: only an
    uncompressed one (a reader of gzip must inflate all before a record)."""
    return compression == "none"


def index_line(offset: int, framed_length: int) -> bytes:
    """The index line of a record at `offset` taking `framed_length` bytes."""
    return b"%d %d\n" % (offset, framed_length)


class RecordIndexer:
    """A writable sink for a TFRecord file's framed (uncompressed) bytes,
    in order, that writes the file's index lines to `out` as records
    complete. It reads only the records' length headers, keeping at most
    one header's bytes between writes; the length CRC is checked (a
    cached lookup for repeated lengths), as an index of misframed bytes
    would send readers to the wrong offsets. `finish()` returns the number
    of records and raises `TFRecordError` (naming `path`) for a stream
    that ends inside a record."""

    def __init__(self, out: BinaryIO, path: str = ""):
        self._out = out
        self._path = path
        self._seen = 0  # bytes of the stream written so far
        self._next = 0  # offset of the next record's header in the stream
        self._header = bytearray()  # the next header's bytes, when a write split it
        self.records = 0

    def write(self, data) -> None:
        view = memoryview(data).cast("B")
        start = self._seen  # the stream offset of view[0]
        end = self._seen = start + len(view)
        lines: list[bytes] = []
        while self._next < end:
            at = self._next  # the next record's header starts here
            if self._header or at + HEADER_SIZE > end:
                # A header split between writes: gather its bytes first.
                held = len(self._header)
                self._header += view[at + held - start:at + HEADER_SIZE - start]
                if len(self._header) < HEADER_SIZE:
                    break
                header, self._header = bytes(self._header), bytearray()
                self._next = at + self._framed(header, 0, at)
                lines.append(index_line(at, self._next - at))
            else:
                self._next = at + self._walk(view, at - start, at, lines)
        if lines:
            self._out.write(b"".join(lines))

    def _walk(self, view: memoryview, position: int, offset: int, lines: list[bytes]) -> int:
        """Indexes the records whose header lies wholly in `view` from
        `position` (stream offset `offset`) on, into `lines`; returns the
        bytes from `position` to the next header, which may lie past the
        view. The native header walk (`schemas.native`) when the extension
        runs: a line per record made in Python cost ~1 us, more than the
        rest of the shard write."""
        native = kernels()
        if native is None:
            walked = 0
            while position + walked + HEADER_SIZE <= len(view):
                framed = self._framed(view, position + walked, offset + walked)
                lines.append(index_line(offset + walked, framed))
                walked += framed
            return walked
        base = offset - position  # the stream offset of view[0]
        found, walked, records, fault = native.index_lines(view, position, base)
        lines.append(found)
        self.records += records
        if fault is not None:
            kind, at, length = fault
            at += base
            if kind == "too_long":
                raise self._too_long(length, at)
            raise TFRecordError("bad length CRC", path=self._path, offset=at,
                                record_index=self.records)
        return walked - position

    def _framed(self, buffer, position: int, offset: int) -> int:
        """The framed length of the record whose header is at
        `buffer[position:]`, at `offset` in the stream."""
        length, crc = HEADER.unpack_from(buffer, position)
        if crc != cached_length_crc(length) and crc != length_crc(length):
            raise TFRecordError("bad length CRC", path=self._path, offset=offset,
                                record_index=self.records)
        if length > MAX_RECORD_BYTES:
            raise self._too_long(length, offset)
        self.records += 1
        return HEADER_SIZE + length + FOOTER_SIZE

    def _too_long(self, length: int, offset: int) -> TFRecordError:
        return TFRecordError(f"record length {length} exceeds the 2 GiB limit of a "
                             "serialized protobuf", path=self._path, offset=offset,
                             record_index=self.records)

    def finish(self) -> int:
        """The number of records indexed."""
        if self._header or self._next != self._seen:
            raise TFRecordError(f"truncated record (the stream ends at byte {self._seen})",
                                path=self._path, offset=self._next, record_index=self.records)
        return self.records


class IndexMatch:
    """Compares an index file, read a line at a time by `readline(limit)`,
    with its shard's records as a walk finds them (`record(framed_length)`
    in order). `problem` is ``(line number, what is wrong)`` for the first
    line that disagrees (1-based), or None; once one is found, the rest
    is not compared."""

    def __init__(self, readline: Callable[[int], bytes]):
        self._readline = readline
        self._offset = 0
        self._line = 0
        self.problem: tuple[int, str] | None = None

    def record(self, framed_length: int) -> None:
        if self.problem is not None:
            return
        wanted = index_line(self._offset, framed_length)
        self._line += 1
        found = self._readline(INDEX_LINE_LIMIT)
        if found != wanted:
            said = repr(found.decode("ascii", "replace")) if found else "nothing (it ends)"
            self.problem = (self._line, f"line {self._line} reads {said}, the shard's record "
                            f"{self._line - 1} is at byte {self._offset}, {framed_length} "
                            "bytes framed")
        self._offset += framed_length

    def finish(self) -> tuple[int, str] | None:
        """The first disagreement, counting lines past the shard's last record."""
        if self.problem is None:
            extra = self._readline(INDEX_LINE_LIMIT)
            if extra:
                self.problem = (self._line + 1, f"line {self._line + 1} reads "
                                f"{extra.decode('ascii', 'replace')!r}, past the shard's "
                                f"{self._line} records")
        return self.problem
