"""Reading a local ArrayRecord file: its record count, records in bounded batches or by position."""

from __future__ import annotations

from typing import Iterator

from .module import RANDOM_ACCESS_OPTIONS, array_record_module

__all__ = ["ArrayRecordError", "ArrayRecordFile", "iter_array_records"]

# Records read per call when a file is read in order: one call per batch
# keeps the per-record cost low, and the batch bounds what is held at once.
_BATCH_RECORDS = 256


class ArrayRecordError(Exception):
    """An ArrayRecord file cannot be opened or a record of it cannot be
    read (damage: a chunk's hash, a truncated file); names the file and,
    where known, the record."""

    def __init__(self, problem: str, *, path: str, record_index: int | None = None):
        where = path if record_index is None else f"{path}, record {record_index}"
        super().__init__(f"{where}: {problem}")
        self.path = path
        self.record_index = record_index


class ArrayRecordFile:
    """A local ArrayRecord file open for reading. `display`: the name
    errors give (the shard's URL where it was copied from one).

    A truncated file opens with fewer records than were written (the
    package finds no footer and no error), so callers compare
    `num_records` with the count they expect."""

    def __init__(self, path: str, *, display: str | None = None,
                 options: str = RANDOM_ACCESS_OPTIONS):
        self.display = display or path
        module = array_record_module()
        try:
            self._reader = module.ArrayRecordReader(path, options)
            self.num_records = int(self._reader.num_records())
        except (RuntimeError, ValueError, OSError) as error:
            raise ArrayRecordError(f"not a readable ArrayRecord file ({error})",
                                   path=self.display) from None

    def writer_options(self) -> str:
        """The options the file was written with, as it records them."""
        return self._reader.writer_options_string()

    def read(self, position: int) -> bytes:
        """The record at `position` (0-based)."""
        if not 0 <= position < self.num_records:
            raise IndexError(f"{self.display}: record {position} out of range "
                             f"0..{self.num_records - 1}")
        try:
            return self._reader.read([position])[0]
        except (RuntimeError, ValueError) as error:
            raise ArrayRecordError(f"damaged ({error})", path=self.display,
                                   record_index=position) from None

    def read_range(self, start: int, stop: int) -> list[bytes]:
        """Records ``start..stop-1`` (within the file)."""
        try:
            return self._reader.read(start, stop)
        except (RuntimeError, ValueError) as error:
            raise ArrayRecordError(f"damaged in records {start}..{stop - 1} ({error})",
                                   path=self.display, record_index=start) from None

    def records(self, start: int = 0, stop: int | None = None) -> Iterator[bytes]:
        """Records ``start <= i < stop`` (None: to the end), in order, read
        a bounded batch at a time."""
        stop = self.num_records if stop is None else min(stop, self.num_records)
        for first in range(start, stop, _BATCH_RECORDS):
            yield from self.read_range(first, min(first + _BATCH_RECORDS, stop))

    def __iter__(self) -> Iterator[bytes]:
        return self.records()

    def close(self) -> None:
        """Closes the reader; the package checks the file's tail here (a
        truncated file fails now, not when opened)."""
        try:
            self._reader.close()
        except (RuntimeError, ValueError) as error:
            raise ArrayRecordError(f"damaged ({error})", path=self.display) from None

    def __enter__(self) -> "ArrayRecordFile":
        return self

    def __exit__(self, exc_type, *exc_info) -> None:
        try:
            self.close()
        except ArrayRecordError:
            if exc_type is None:
                raise  # else the error already on its way says more


def iter_array_records(path: str, *, display: str | None = None) -> Iterator[bytes]:
    """Every record of the local ArrayRecord file at `path`, in order,
    read a bounded batch at a time (sequential options: readahead)."""
    with ArrayRecordFile(path, display=display, options="") as records:
        yield from records
