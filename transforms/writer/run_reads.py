"""How a run file is opened and its byte ranges read (`run_format.RunFile`).

No Beam. Every read of a run is of a known range at a known offset (a
column section, or a bucket's records): a local run is opened by Python
itself, unbuffered, and read by `pread` at each offset, with no seek and
no read-ahead of a small section; a run on any other filesystem is read
through fsspec's file, by seek and read.
"""

from __future__ import annotations

import io
import os
from typing import BinaryIO

import fsspec
from fsspec.implementations.local import LocalFileSystem

__all__ = ["filesystem", "open_run", "read_at", "read_into"]

_LOCAL = LocalFileSystem()


def filesystem(path: str) -> tuple:
    """(filesystem, its path) of a run's path."""
    if "://" not in path and "::" not in path:
        return _LOCAL, path  # a plain local path: url_to_fs costs more than the lookup
    return fsspec.core.url_to_fs(path)


def open_run(fs, fs_path: str) -> BinaryIO:
    """The run file opened for reading."""
    # A local run is opened by Python itself: through fsspec each open
    # cost ~30 µs, and a shard's writer opens every run once per bucket.
    if isinstance(fs, LocalFileSystem):
        return open(fs_path, "rb", buffering=0)
    return fs.open(fs_path, "rb")


def read_at(fileobj, offset: int, length: int) -> bytes:
    """Up to `length` bytes of the file at `offset` (fewer at its end): one
    `pread` for a local file."""
    if isinstance(fileobj, io.FileIO):
        parts = []
        while length > 0:
            part = os.pread(fileobj.fileno(), length, offset)
            if not part:
                break
            parts.append(part)
            offset += len(part)
            length -= len(part)
        return parts[0] if len(parts) == 1 else b"".join(parts)
    fileobj.seek(offset)
    return fileobj.read(length)


def read_into(fileobj, view: memoryview, offset: int) -> int:
    """Reads the file from `offset` into `view` until it is full or the
    file ends; returns the bytes read."""
    filled = 0
    if not isinstance(fileobj, io.FileIO):
        fileobj.seek(offset)
    while filled < len(view):
        if isinstance(fileobj, io.FileIO):
            count = os.preadv(fileobj.fileno(), [view[filled:]], offset + filled)
        else:
            count = fileobj.readinto(view[filled:])
        if not count:
            break
        filled += count
    return filled
