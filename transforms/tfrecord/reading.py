"""Reading TFRecord files: compression detected, records yielded, viewed or counted, all checked.

Raises one exception type, `TFRecordError`, for every kind of damage, naming
the file, the byte offset (in the uncompressed stream) and the index of the
record it was reading.
"""

from __future__ import annotations

import io
from typing import Any, BinaryIO, Iterator

from .damage import complete_records, count_complete
from .framing import (FOOTER_SIZE, HEADER, HEADER_SIZE, LENGTH, TFRecordError, crc32c, mask_crc,
                      masked_crc32c)
from .gzip_members import GZIP_MAGIC, READ_BLOCK, GzipStreamError, gunzip_blocks
from .writer import check_compression

__all__ = ["StreamedRecord", "count_records", "iter_record_runs", "iter_record_views",
           "iter_records", "read_records"]

_COUNT_STREAM_FROM = 4 << 20  # records this long are counted without being held


def _plain_blocks(fileobj: BinaryIO) -> Iterator[bytes | memoryview]:
    """The stream's bytes a block at a time. Where the file object can
    `readinto`, every block is read into one buffer, and a block is valid
    only until the next is asked for (the walk copies it out first): a new
    1 MB bytes per read was fresh memory from the kernel each time, whose
    page faults and unmapping cost a shard's read-back more than the copy."""
    readinto = getattr(fileobj, "readinto", None)
    view = None if readinto is None else memoryview(bytearray(READ_BLOCK))
    while view is not None:
        try:
            count = readinto(view)
        except (NotImplementedError, io.UnsupportedOperation):
            break  # an io.RawIOBase that implements only read
        if not count:
            return
        yield view[:count]
    while True:
        block = fileobj.read(READ_BLOCK)
        if not block:
            return
        yield block


def _blocks_for(fileobj: BinaryIO, path: str, compression: str) -> Iterator[bytes]:
    if compression == "auto":
        compression = _detect_compression(fileobj, path)
    check_compression(compression)
    return gunzip_blocks(fileobj) if compression == "gzip" else _plain_blocks(fileobj)


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
    head = fileobj.read(HEADER_SIZE)
    fileobj.seek(start)
    if head[:2] != GZIP_MAGIC:
        return "none"
    if len(head) == HEADER_SIZE:
        length, length_crc = HEADER.unpack(head)
        if masked_crc32c(head[:LENGTH.size]) == length_crc:
            return "none"
    return "gzip"


def iter_records(fileobj: BinaryIO, *, path: str = "", compression: str = "auto",
                 start: int = 0, stop: int | None = None) -> Iterator[bytes]:
    """Yields the records of a TFRecord stream, checking both CRCs of each.

    compression: "none", "gzip" (one or more members), or "auto" (by the
    `path` suffix, else by sniffing the stream). Raises only `TFRecordError`
    for damaged data, including a length field above `MAX_RECORD_BYTES`,
    after yielding every intact record before the damage; memory stays
    bounded by the largest record. start, stop: only records
    ``start <= i < stop`` are handed out (`_record_range`).
    """
    for buffer, starts, ends in _record_range(fileobj, path, compression, start, stop):
        with memoryview(buffer) as view:
            records = [bytes(view[begin + HEADER_SIZE:end - FOOTER_SIZE])
                       for begin, end in zip(starts, ends)]
        yield from records


def iter_record_runs(fileobj: BinaryIO, *, path: str = "", compression: str = "auto"
                     ) -> Iterator[tuple[bytes, list[int], int]]:
    """`iter_records` a block at a time, without an object per record:
    ``(run, ends, first)``, the block's complete records back to back as
    the stream frames them (headers and footers included, every CRC
    checked), where each ends in the block, and where `run` starts in it
    (each ends at ``ends[i] - first`` in `run`). Raises as `iter_records`."""
    for buffer, starts, ends in _record_range(fileobj, path, compression, 0, None):
        first = starts[0]
        with memoryview(buffer) as view:
            run = bytes(view[first:ends[-1]])
        yield run, ends, first


def iter_record_views(fileobj: BinaryIO, *, path: str = "", compression: str = "auto",
                      stream_from: int | None = None, start: int = 0, stop: int | None = None
                      ) -> Iterator[memoryview | StreamedRecord]:
    """`iter_records` without the copy: each record is a memoryview into
    the reader's buffer, so a record of any size is held once. A view is
    valid only until the next record is asked for; the caller must release
    it and everything made from it (slices, numpy arrays) by then.

    stream_from: records of this many bytes or more are given as a
    `StreamedRecord` instead, read in pieces, so that memory stays bounded
    by `stream_from` plus a block whatever the records hold. start, stop:
    only records ``start <= i < stop`` are handed out (`_record_range`)."""
    for item in _record_range(fileobj, path, compression, start, stop, stream_from):
        if isinstance(item, StreamedRecord):
            yield item
            continue
        buffer, starts, ends = item
        with memoryview(buffer) as view:
            for begin, end in zip(starts, ends):
                with view[begin + HEADER_SIZE:end - FOOTER_SIZE] as record:
                    yield record


def _record_range(fileobj: BinaryIO, path: str, compression: str, start: int,
                  stop: int | None, stream_from: int | None = None
                  ) -> Iterator[tuple[bytearray, list[int], list[int]] | "StreamedRecord"]:
    """`_checked_spans` cut to the records ``start <= i < stop``: the
    records before `start` are read with every check but handed out as no
    object (a reader of a slice pays no Python per record it skips; a
    skipped `StreamedRecord` is read to its end and checked by the walk),
    and reading stops once `stop` records have been read, the rest of the
    stream unread and unchecked."""
    index = 0
    for item in _checked_spans(fileobj, path, compression, stream_from):
        if isinstance(item, StreamedRecord):
            if start <= index and (stop is None or index < stop):
                yield item
            index += 1
        else:
            buffer, starts, ends = item
            first = max(start - index, 0)
            last = len(starts) if stop is None else max(min(len(starts), stop - index), 0)
            if first < last:
                yield buffer, starts[first:last], ends[first:last]
            index += len(starts)
        if stop is not None and index >= stop:
            return


def count_records(fileobj: BinaryIO, *, path: str = "", compression: str = "auto") -> int:
    """The number of records in a TFRecord stream, read to its end with every
    check `iter_records` makes, without making an object per record. Raises
    `TFRecordError` as `iter_records` would; its record_index is then the
    number of intact records before the damage."""
    # A long record is counted as it streams past, never gathered whole.
    return sum(1 if isinstance(item, StreamedRecord) else item
               for item in _checked_spans(fileobj, path, compression, _COUNT_STREAM_FROM,
                                          _counted))


def _spans(buffer: bytearray, position: int, index: int, path: str):
    """`_checked_spans`' walk that gives each record's place: ``(records,
    end of the last, (buffer, starts, ends), damage)``."""
    starts, ends, damage = complete_records(buffer, position, index, path)
    return len(starts), ends[-1] if ends else 0, (buffer, starts, ends), damage


def _counted(buffer: bytearray, position: int, index: int, path: str):
    """`_checked_spans`' walk that only counts: the item is the count."""
    records, end, damage = count_complete(buffer, position, index, path)
    return records, end, records, damage


def read_records(path: str, compression: str = "auto") -> Iterator[bytes]:
    """Yields the records of one TFRecord file opened through fsspec."""
    import fsspec  # here: the codec's other readers take open files, and need none

    with fsspec.open(path, "rb") as fileobj:
        yield from iter_records(fileobj, path=path, compression=compression)


def _checked_spans(fileobj: BinaryIO, path: str, compression: str, stream_from: int | None = None,
                   walker=_spans) -> Iterator[Any]:
    """``(buffer, starts, ends)``: where each complete record of the buffer
    begins and ends, every one checked. The buffer is valid only until the
    next item is asked for. With `stream_from`, a record of that many bytes
    or more is not gathered but given as a `StreamedRecord` (read and
    checked by the caller, then to its end by the walk). `walker` (`_spans`,
    `_counted`) walks each buffer and makes the item given for its records.

    Each buffer's records are walked by their length fields (a record's
    12-byte header is compared with the canonical header of its length,
    which checks the length CRC), then their data CRCs are computed in one
    C-level pass. Damage is raised in stream order, after the intact
    records before it have been handed out.
    """
    walk = _Walk(_blocks_for(fileobj, path, compression), path)
    buffer = walk.buffer
    while True:
        records, end, item, damage = walker(buffer, walk.position, walk.index, path)
        if records:
            yield item
            walk.index += records
        if damage is not None:
            raise damage
        if end:
            walk.consume(end)
        if len(buffer) >= HEADER_SIZE:
            # A record whose length CRC checked out but whose body is not all
            # here yet: read exactly until it is (never preallocate `length`,
            # which could be huge in a crafted file), or stream it.
            (length,) = LENGTH.unpack_from(buffer, 0)
            if stream_from is not None and length >= stream_from:
                record = StreamedRecord(walk, length)
                yield record
                record.finish()
                continue
            if walk.fill(HEADER_SIZE + length + FOOTER_SIZE):
                continue
        elif walk.fill(HEADER_SIZE):
            continue
        if buffer:
            raise walk.error(f"truncated record ({len(buffer)} bytes left at end of stream)")
        # A gzip stream must also have ended cleanly; draining the blocks
        # raises for a member cut short after the last complete record.
        if not walk.exhausted:
            walk.fill(1)
            if buffer:
                continue
        return


class _Walk:
    """The reading position of `_checked_spans`: the bytes read and not yet
    handed out (`buffer`), the stream offset of its first byte, the records
    handed out so far."""

    def __init__(self, blocks: Iterator[bytes], path: str):
        self._blocks, self.path = blocks, path
        self.buffer = bytearray()
        self.position = 0  # offset of buffer[0] in the uncompressed stream
        self.index = 0
        self.exhausted = False

    def fill(self, needed: int) -> bool:
        """Reads until the buffer holds `needed` bytes; False at end of stream."""
        buffer = self.buffer
        while len(buffer) < needed and not self.exhausted:
            try:
                block = next(self._blocks)
            except StopIteration:
                self.exhausted = True
                break
            except GzipStreamError as error:
                raise self.error(str(error), len(buffer)) from None
            buffer.extend(block)
        return len(buffer) >= needed

    def consume(self, size: int) -> None:
        """Drops the buffer's first `size` bytes (handed out already)."""
        del self.buffer[:size]
        self.position += size

    def take(self, size: int) -> bytes:
        """The buffer's first `size` bytes, removed from it (a copy of those
        bytes only: `size` is at most a block)."""
        with memoryview(self.buffer) as view:
            taken = bytes(view[:size])
        self.consume(size)
        return taken

    def error(self, problem: str, past_buffer_start: int = 0) -> TFRecordError:
        return TFRecordError(problem, path=self.path, offset=self.position + past_buffer_start,
                             record_index=self.index)


class StreamedRecord:
    """A record too long to hold whole (`iter_record_views`' `stream_from`):
    its `length`, and its data given in pieces by `read`, as a file's. Its
    data CRC is checked when its last byte is read, raising `TFRecordError`
    like every other damage; the walk reads to its end (and checks it) when
    the caller stops early. Valid until the next record is asked for."""

    def __init__(self, walk: _Walk, length: int):
        self.length = length
        self._walk, self._left, self._crc = walk, length, 0
        self._start = walk.position  # where its header begins, for messages
        walk.consume(HEADER_SIZE)

    def read(self, size: int = -1) -> bytes:
        """At most `size` bytes of the record's data (all that is left when
        negative, so callers should ask for less), b"" at its end."""
        if not self._left:
            return b""
        size = self._left if size < 0 else min(size, self._left)
        walk = self._walk
        if not walk.buffer and not walk.fill(1):
            raise self._error(f"truncated record ({self.length - self._left} of its "
                              f"{self.length} bytes at end of stream)")
        piece = walk.take(min(size, len(walk.buffer)))
        self._crc = crc32c(piece, self._crc)
        self._left -= len(piece)
        if not self._left:
            self._check_footer()
        return piece

    def finish(self) -> None:
        """Reads what the caller left of the record and checks it."""
        while self.read(READ_BLOCK):
            pass

    def _check_footer(self) -> None:
        walk = self._walk
        if not walk.fill(FOOTER_SIZE):
            raise self._error(f"truncated record ({len(walk.buffer)} bytes of its data CRC "
                              "at end of stream)")
        stored = int.from_bytes(walk.take(FOOTER_SIZE), "little")
        if stored != mask_crc(self._crc):
            raise self._error("bad data CRC")
        walk.index += 1

    def _error(self, problem: str) -> TFRecordError:
        return TFRecordError(problem, path=self._walk.path, offset=self._start,
                             record_index=self._walk.index)
