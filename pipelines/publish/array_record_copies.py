"""An ArrayRecord shard brought to the local disk, checked, and its records read.

The `array_record` package's reader is C++ on a local path, and an
ArrayRecord file is read from its footer (its index) first, so a shard
cannot be read as a stream the way a TFRecord shard is. Readers of a
version (`held_manifest.checked_records`: `inspect`, `ReadDataset`'s
checks, the loaders) and the build report read one through `local_copy`:
its bytes are copied once to a local temporary file through the caller's
hashing stream, so the size and sha256 are checked before any record is
handed out (a damaged or replaced shard yields nothing), and the copy is
removed when the reader is done. Disk, not memory, holds the shard.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from typing import BinaryIO, Callable, Iterator

import fsspec

from ...transforms.array_record import ArrayRecordFile

__all__ = ["array_records", "local_copy", "url_records"]

_COPY_BLOCK = 1 << 20


@contextlib.contextmanager
def local_copy(stream: BinaryIO, finish: Callable[[], None] | None = None) -> Iterator[str]:
    """The path of a local temporary copy of what `stream` reads; `finish`
    (the hashing stream's size and sha256 check) runs once it is copied,
    before the path is given. The caller may move the file away."""
    with tempfile.TemporaryDirectory(prefix="recordforge-shard-") as scratch:
        path = os.path.join(scratch, "shard.array_record")
        with open(path, "wb") as local:
            shutil.copyfileobj(stream, local, _COPY_BLOCK)
        if finish is not None:
            finish()
        yield path


def array_records(path: str, display: str, *, start: int = 0,
                  stop: int | None = None) -> Iterator[bytes]:
    """Records ``start <= i < stop`` of the local ArrayRecord file at
    `path`, in order, a bounded batch at a time."""
    with ArrayRecordFile(path, display=display, options="") as records:
        yield from records.records(start, stop)


def url_records(url: str) -> Iterator[bytes]:
    """Every record of the ArrayRecord shard at `url` (any fsspec URL),
    read from a local copy (no manifest check: for the build report,
    which reads a staged build that verification reads in full)."""
    with fsspec.open(url, "rb") as handle, local_copy(handle) as path:
        yield from array_records(path, url)
