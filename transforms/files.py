"""Writing a small file whole: a reader or a crash never sees half of it.

`write_atomic` is the one way recordforge writes a small file at its final
name (the pipeline result, dead-letter parts, the report, manifest.json,
SHA256SUMS, LATEST, owner files). On a local filesystem the bytes go to a
temporary name beside the target (`layout.temporary_name`), reach the disk
(`page_cache.write_durably`: fdatasync), and are renamed over the target,
and the directory is synced so the rename survives a crash of the machine.
On object stores one put makes the object appear complete, so it is written
directly. Retried writers (a re-run bundle) replace the file by identical
bytes.

Shards are large and written as streams; the shard writer has its own path
(`writer.file_shards.write_shard`).
"""

from __future__ import annotations

import errno
import os

import fsspec
from fsspec.implementations.local import LocalFileSystem

from .layout import temporary_name
from .page_cache import write_durably

__all__ = ["sync_directory", "write_atomic"]


def write_atomic(fs: fsspec.AbstractFileSystem, path: str, data: bytes,
                 tmp: str | None = None) -> None:
    """Writes `data` as the whole file `path` (a path of `fs`). Locally:
    through `tmp` (default: `layout.temporary_name(path)`), synced, renamed
    over `path`, and the directory synced; on object stores one put. The
    parent directory must exist."""
    if isinstance(fs, LocalFileSystem):
        tmp = tmp or temporary_name(path)
        try:
            with open(tmp, "wb") as handle:
                write_durably(handle, data)
            os.replace(tmp, path)
        except BaseException:
            # A full disk or a failed rename must not leave the temporary
            # file behind: nothing else knows its name.
            _discard(tmp)
            raise
        sync_directory(os.path.dirname(path))
    else:
        fs.pipe_file(path, data)


def _discard(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:  # never written, or already gone
        pass


def sync_directory(path: str) -> None:
    """Makes the renames inside a local directory durable (fsync of the
    directory). Raises the `OSError` of a failed sync, or of a directory
    that cannot be opened to sync it (EIO: the renames may not survive a
    crash of the machine); a filesystem that cannot sync a directory at all
    (EINVAL, ENOTSUP: some network and FUSE filesystems) is not an error,
    nor is a directory that does not exist (nothing was renamed into it)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    except OSError as error:
        if error.errno not in _CANNOT_SYNC_DIRECTORIES:
            raise
    finally:
        os.close(fd)


# What fsync of a directory returns where the filesystem does not support it.
_CANNOT_SYNC_DIRECTORIES = (errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP)
