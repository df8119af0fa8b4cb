"""Reading an ArrayRecord shard back for verification: its records counted, each one checked.

The `array_record` package reads only local files (its reader is C++ on a
path), so a shard elsewhere is first copied to a local temporary file
through the same hashing reader that measures its size and sha256: one
read of the store, as for a TFRecord shard. Its records are then read in
bounded batches (`transforms.array_record.ArrayRecordFile`), every chunk's
hash checked by the package, and each record handed to `problem_of` (the
manifest's features). `file_checks` turns what was found into `Problem`s.

A truncated ArrayRecord file opens with no records and no error (its
footer is gone), so the record count against the manifest's and the size
and sha256 are what catch it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import BinaryIO, Callable

import fsspec
from fsspec.implementations.local import LocalFileSystem

from ...transforms.array_record import ArrayRecordError, ArrayRecordFile, ArrayRecordMissing
from .array_record_copies import local_copy

__all__ = ["ArrayRecordRead", "read_array_record"]


@dataclass
class ArrayRecordRead:
    """What reading an ArrayRecord shard found: `records` read intact;
    the first record `problem_of` faulted (`first_bad`: position,
    message) and how many it faulted (`bad`); `damage`: why reading stopped
    (message, record index or None), or None."""

    records: int = 0
    first_bad: tuple[int, str] | None = None
    bad: int = 0
    damage: tuple[str, int | None] | None = None


def read_array_record(url: str, display: str, reader: BinaryIO,
                      problem_of: Callable[[bytes], str | None] | None) -> ArrayRecordRead:
    """Reads the ArrayRecord shard at `url` (`reader`: the shard opened
    through the caller's hashing reader; a remote shard is copied to the
    local disk through it). `problem_of`: None counts records only."""
    fs, path = fsspec.core.url_to_fs(url)
    if isinstance(fs, LocalFileSystem):
        return _read_local(path, display, problem_of)
    with local_copy(reader) as local_path:
        return _read_local(local_path, display, problem_of)


def _read_local(path: str, display: str,
                problem_of: Callable[[bytes], str | None] | None) -> ArrayRecordRead:
    found = ArrayRecordRead()
    try:
        with ArrayRecordFile(path, display=display, options="") as records:
            if problem_of is None:
                found.records = records.num_records
                return found
            for position, record in enumerate(records):
                found.records = position + 1
                problem = problem_of(record)
                if problem:
                    found.bad += 1
                    if found.first_bad is None:
                        found.first_bad = (position, problem)
    except ArrayRecordMissing as error:
        found.damage = (str(error), None)
    except ArrayRecordError as error:
        found.damage = (str(error).removeprefix(f"{error.path}: "), error.record_index)
    return found
