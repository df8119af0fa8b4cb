"""The shard writer's ArrayRecord sink: TFRecord framed bytes in, an ArrayRecord file out.

The shard writer (`transforms.writer`) produces every shard as a stream of
TFRecord framed records, whatever the output format. `ArrayRecordSink`
takes that stream where the shard's file would (`write(data)`), checks
every record's framing and CRCs as the TFRecord reader would
(`tfrecord.complete_records`), and passes each record's bytes to an
`ArrayRecordWriter` on the local disk. It holds no more than the bytes of
a record not yet complete, plus the writer's one chunk (a record, with
``group_size:1``): memory does not grow with the shard.

The package's writer is a C++ writer on a local path, so the file is
written locally first; `transforms.writer.shard_files` then puts it at its
final name, hashed, through fsspec.
"""

from __future__ import annotations

from ..tfrecord import FOOTER_SIZE, HEADER_SIZE, TFRecordError, complete_records
from .module import WRITER_OPTIONS, array_record_module

__all__ = ["ArrayRecordSink"]


class ArrayRecordSink:
    """Writes the records of a TFRecord framed stream into a new
    ArrayRecord file at the local `path`; `display` names the shard in
    errors. `finish()` closes the file and returns the number of records.
    Raises `TFRecordError` for damaged framing (a bug upstream: the shard
    writer framed these bytes itself) and `OSError` when the ArrayRecord
    writer fails."""

    # Records are walked once this many bytes wait, so the walk and the
    # CRCs run over many records per call however small the writes.
    _WALK_FROM = 1 << 20

    def __init__(self, path: str, *, display: str, options: str = WRITER_OPTIONS):
        self._display = display
        self._writer = array_record_module().ArrayRecordWriter(path, options)
        self._buffer = bytearray()
        self._position = 0
        self.records = 0
        self._closed = False

    def write(self, data) -> None:
        self._buffer += data
        if len(self._buffer) >= self._WALK_FROM:
            self._walk()

    def finish(self) -> int:
        """Writes what is left, closes the file; the number of records."""
        self._walk()
        if self._buffer:
            raise TFRecordError(f"truncated record ({len(self._buffer)} bytes left at end of "
                                "stream)", path=self._display, offset=self._position,
                                record_index=self.records)
        self.close()
        return self.records

    def close(self) -> None:
        """Closes the writer (also after a failure, so its file can be removed)."""
        if not self._closed:
            self._closed = True
            self._writer.close()

    def _walk(self) -> None:
        starts, ends, damage = complete_records(self._buffer, self._position, self.records,
                                                self._display)
        if starts:
            with memoryview(self._buffer) as view:
                write = self._writer.write
                for start, end in zip(starts, ends):
                    write(bytes(view[start + HEADER_SIZE:end - FOOTER_SIZE]))
            if not self._writer.ok():
                raise OSError(f"{self._display}: the ArrayRecord writer failed after "
                              f"{self.records + len(starts)} records")
            del self._buffer[:ends[-1]]
            self._position += ends[-1]
            self.records += len(starts)
        if damage is not None:
            raise damage
