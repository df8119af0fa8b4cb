"""Writing TFRecord files: the compressions a file may have, its suffix, and `TFRecordWriter`."""

from __future__ import annotations

from typing import BinaryIO, Iterable

from isal import isal_zlib

from ..layout import shard_suffix
from .framing import frame_records
from .gzip_members import DEFAULT_GZIP_LEVEL, GZIP_WBITS

__all__ = ["COMPRESSIONS", "TFRecordWriter", "check_compression", "suffix_for"]

COMPRESSIONS = ("none", "gzip")


def suffix_for(compression: str) -> str:
    """The shard file suffix for a compression: `.tfrecord` or `.tfrecord.gz`."""
    check_compression(compression)
    return shard_suffix(compression)


def check_compression(compression: str) -> None:
    """Raises ValueError unless `compression` is one of `COMPRESSIONS`."""
    if compression not in COMPRESSIONS:
        raise ValueError(f"compression must be one of {COMPRESSIONS}, got {compression!r}")


class TFRecordWriter:
    """Writes TFRecords to a binary file object (local file, fsspec file, ...).

    With compression "gzip" the whole output is one gzip member. `close()`
    finishes the stream but leaves `fileobj` open: the caller owns it.
    """

    def __init__(self, fileobj: BinaryIO, compression: str = "none",
                 level: int = DEFAULT_GZIP_LEVEL):
        check_compression(compression)
        self._fileobj = fileobj
        self._compressor = (isal_zlib.compressobj(level, isal_zlib.DEFLATED, GZIP_WBITS)
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
