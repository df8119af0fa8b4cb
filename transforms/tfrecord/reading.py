"""Reading TFRecord files: compression detected, records yielded, viewed or counted, all checked.

Raises one exception type, `TFRecordError`, for every kind of damage, naming
the file, the byte offset (in the uncompressed stream) and the index of the
record it was reading.
"""

from __future__ import annotations

from typing import BinaryIO, Iterator

import fsspec

from .damage import complete_records
from .framing import FOOTER_SIZE, HEADER, HEADER_SIZE, LENGTH, TFRecordError, masked_crc32c
from .gzip_members import GZIP_MAGIC, READ_BLOCK, GzipStreamError, gunzip_blocks
from .writer import check_compression

__all__ = ["count_records", "iter_record_views", "iter_records", "read_records"]


def _plain_blocks(fileobj: BinaryIO) -> Iterator[bytes]:
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


def iter_record_views(fileobj: BinaryIO, *, path: str = "", compression: str = "auto",
                      start: int = 0, stop: int | None = None) -> Iterator[memoryview]:
    """`iter_records` without the copy: each record is a memoryview into
    the reader's buffer, so a record of any size is held once. A view is
    valid only until the next record is asked for; the caller must release
    it and everything made from it (slices, numpy arrays) by then."""
    for buffer, starts, ends in _record_range(fileobj, path, compression, start, stop):
        with memoryview(buffer) as view:
            for begin, end in zip(starts, ends):
                with view[begin + HEADER_SIZE:end - FOOTER_SIZE] as record:
                    yield record


def _record_range(fileobj: BinaryIO, path: str, compression: str, start: int,
                  stop: int | None) -> Iterator[tuple[bytearray, list[int], list[int]]]:
    """`_checked_spans` cut to the records ``start <= i < stop``: the
    records before `start` are read with every check but handed out as no
    object (a reader of a slice pays no Python per record it skips), and
    reading stops once `stop` records have been read, the rest of the
    stream unread and unchecked."""
    index = 0
    for buffer, starts, ends in _checked_spans(fileobj, path, compression):
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
    return sum(len(starts) for _, starts, _ in _checked_spans(fileobj, path, compression))


def read_records(path: str, compression: str = "auto") -> Iterator[bytes]:
    """Yields the records of one TFRecord file opened through fsspec."""
    with fsspec.open(path, "rb") as fileobj:
        yield from iter_records(fileobj, path=path, compression=compression)


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
            except GzipStreamError as error:
                raise TFRecordError(str(error), path=path, offset=position + len(buffer),
                                    record_index=index) from None
            buffer.extend(block)
        return len(buffer) >= needed

    while True:
        starts, ends, damage = complete_records(buffer, position, index, path)
        if starts:
            yield buffer, starts, ends
            index += len(starts)
        if damage is not None:
            raise damage
        cursor = ends[-1] if ends else 0
        if cursor:
            del buffer[:cursor]
            position += cursor
        if len(buffer) >= HEADER_SIZE:
            # A record whose length CRC checked out but whose body is not all
            # here yet: read exactly until it is (never preallocate `length`,
            # which could be huge in a crafted file).
            (length,) = LENGTH.unpack_from(buffer, 0)
            if fill(HEADER_SIZE + length + FOOTER_SIZE):
                continue
        elif fill(HEADER_SIZE):
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
