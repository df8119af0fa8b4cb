"""Input is read once: its bytes are dropped from the page cache behind the read.

A build reads each input byte once and then writes about twice as many
(spill runs, shards). Keeping input pages cached helps nothing and pushes
other pages out; dropping them as soon as they are read hands their memory
to the build's own writes. That matters most on virtual machines whose host
takes free guest memory back: writing into memory the guest freed a moment
ago is several times cheaper than into memory it must first get back from
the host (here, reading 1 GB and writing 1 GB took 0.4 s of kernel time with
the read bytes dropped, 2.9 s without). Hadoop's datanodes do the same
(``dfs.datanode.drop.cache.behind.reads``).

It is advice only, and only for local files: the bytes stay on disk, so a
retried read is correct, just not served from memory.
"""

from __future__ import annotations

import io
import os
from typing import BinaryIO

import fsspec
from fsspec.implementations.local import LocalFileSystem

__all__ = ["drop_behind", "read_file_once"]


def drop_behind(fileobj: BinaryIO, offset: int, length: int) -> None:
    """Advises the kernel that bytes ``[offset, offset + length)`` of the file
    under `fileobj` (length 0: to its end) will not be read again. Does
    nothing for objects without a file descriptor (object stores) or where
    the advice is not supported."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is None:
        return
    try:
        advise(fileobj.fileno(), offset, length, os.POSIX_FADV_DONTNEED)
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        pass


def read_file_once(fs: fsspec.AbstractFileSystem, path: str) -> bytes:
    """The whole file at `path` (a path of `fs`), dropped from the page cache
    when it is local. Raises what `fs.cat_file` raises for a missing or
    unreadable file."""
    if not isinstance(fs, LocalFileSystem):
        return fs.cat_file(path)
    with open(path, "rb", buffering=0) as fileobj:
        data = fileobj.read()
        drop_behind(fileobj, 0, 0)
    return data
