"""Finding damage: the intact records at a buffer's head; a stream checked as it is written.

The reader (`reading`) and `RecordStreamCheck` walk buffers of framed bytes
with the same functions, so a stream checked as it is written fails exactly
where reading it back would.
"""

from __future__ import annotations

from ...schemas.native import kernels
from .framing import (FOOTER_SIZE, HEADER, HEADER_SIZE, MAX_RECORD_BYTES, TFRecordError,
                      cached_length_crc, length_crc, masked_crc32c_array)
from .gzip_members import Gunzip, GzipStreamError
from .writer import check_compression

__all__ = ["RecordStreamCheck", "complete_records", "count_complete", "native_complete_records",
           "python_complete_records", "python_count_complete"]


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
        check_compression(compression)
        self._path = path
        self._gunzip = Gunzip() if compression == "gzip" else None
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
        except GzipStreamError as error:
            raise self._error(str(error), len(self._buffer)) from None

    def finish(self) -> int:
        """The number of records; raises `TFRecordError` for a stream that
        ends inside a record or a gzip member."""
        if self._gunzip is not None:
            try:
                self._gunzip.finish()
            except GzipStreamError as error:
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
        records, end, damage = count_complete(self._buffer, self._position, self.records,
                                              self._path)
        if damage is not None:
            raise damage
        if end:
            del self._buffer[:end]
            self._position += end
            self.records += records

    def _error(self, problem: str, past_buffer_start: int) -> TFRecordError:
        return TFRecordError(problem, path=self._path,
                             offset=self._position + past_buffer_start,
                             record_index=self.records)


def complete_records(buffer: bytearray, position: int, index: int, path: str
                     ) -> tuple[list[int], list[int], TFRecordError | None]:
    """Starts and ends of the intact complete records at the head of
    `buffer` (both CRCs checked), and the damage that stopped them (None
    when they stopped at the end of the complete records). position: the
    offset of buffer[0] in the stream; index: records before it.

    The native record walk when the extension runs (`schemas.native`),
    else `python_complete_records`, the reference: same records, same
    damage, same message."""
    native = kernels()
    if native is None:
        return python_complete_records(buffer, position, index, path)
    return native_complete_records(native, buffer, position, index, path)


def native_complete_records(native, buffer: bytearray, position: int, index: int, path: str
                            ) -> tuple[list[int], list[int], TFRecordError | None]:
    """`complete_records` by the extension's `walk_records` (`native`): the
    kernel says which fault and where; the words are the reference's."""
    starts, ends, fault = native.walk_records(buffer)
    return starts, ends, _fault_damage(fault, position, index + len(starts), path)


def count_complete(buffer: bytearray, position: int, index: int, path: str
                   ) -> tuple[int, int, TFRecordError | None]:
    """`complete_records` for a reader that only counts: how many intact
    complete records are at the head of `buffer`, where the last of them
    ends (0: none), and the same damage. The native walk makes no object
    per record (two ints a record were a fifth of a shard's read-back);
    `python_count_complete` is the reference and the fallback."""
    native = kernels()
    if native is None:
        return python_count_complete(buffer, position, index, path)
    records, end, fault = native.count_walk(buffer)
    return records, end, _fault_damage(fault, position, index + records, path)


def python_count_complete(buffer: bytearray, position: int, index: int, path: str
                          ) -> tuple[int, int, TFRecordError | None]:
    """`count_complete` in Python: `python_complete_records`, counted."""
    starts, ends, damage = python_complete_records(buffer, position, index, path)
    return len(starts), ends[-1] if ends else 0, damage


def _fault_damage(fault: tuple | None, position: int, record_index: int, path: str
                  ) -> TFRecordError | None:
    """The reference's error for a native walk's `fault` ``(kind, offset in
    the buffer, length)`` (None: none), at `record_index`."""
    if fault is None:
        return None
    kind, offset, length = fault
    return TFRecordError(_FAULT_PROBLEMS[kind].format(length=length), path=path,
                         offset=position + offset, record_index=record_index)


# The kernel's fault kinds -> the problem the reference reports for each.
_FAULT_PROBLEMS = {
    "length_crc": "bad length CRC",
    "too_long": "record length {length} exceeds the 2 GiB limit of a serialized protobuf",
    "data_crc": "bad data CRC",
}


def python_complete_records(buffer: bytearray, position: int, index: int, path: str
                            ) -> tuple[list[int], list[int], TFRecordError | None]:
    """`complete_records` in Python: the reference and the fallback."""
    starts, ends, damage = _walk_headers(buffer, position, index, path)
    bad_data = _first_bad_data_crc(buffer, starts, ends)
    if bad_data is not None:
        damage = TFRecordError(_FAULT_PROBLEMS["data_crc"], path=path,
                               offset=position + starts[bad_data],
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
    last_header = available - HEADER_SIZE
    cursor = 0
    unpack_header = HEADER.unpack_from
    cached_crc = cached_length_crc
    damage = None
    while cursor <= last_header:
        length, crc = unpack_header(buffer, cursor)
        if crc != cached_crc(length) and crc != length_crc(length):
            damage = TFRecordError(_FAULT_PROBLEMS["length_crc"], path=path,
                                   offset=position + cursor,
                                   record_index=index + len(starts))
            break
        if length > MAX_RECORD_BYTES:
            damage = TFRecordError(
                _FAULT_PROBLEMS["too_long"].format(length=length), path=path,
                offset=position + cursor, record_index=index + len(starts))
            break
        end = cursor + HEADER_SIZE + length + FOOTER_SIZE
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
    # numpy and crc32c are imported here, not with the module: a process
    # that reads shards back with the native kernels never needs them.
    import numpy as np
    from crc32c import crc32c

    with memoryview(buffer) as view:
        data = map(view.__getitem__, map(slice, [start + HEADER_SIZE for start in starts],
                                         [end - FOOTER_SIZE for end in ends]))
        crcs = np.fromiter(map(crc32c, data), dtype=np.uint32, count=len(starts))
    masked = masked_crc32c_array(crcs)
    footers = np.asarray(ends, dtype=np.int64)[:, None] + np.arange(-FOOTER_SIZE, 0)
    stored = np.frombuffer(buffer, dtype=np.uint8)[footers].view("<u4").ravel()
    bad = np.flatnonzero(masked != stored)
    return int(bad[0]) if len(bad) else None
