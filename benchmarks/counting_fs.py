"""An in-memory fsspec filesystem that counts what an object store would bill.

`CountingFileSystem` (protocol ``counted://``) keeps files in memory like
fsspec's ``memory://`` and counts every call as the request an object store
(S3, GCS) would get for it:

- ``GET``: each ``read`` call on an open file (a ranged GET; no read-ahead
  cache, as with fsspec's ``cache_type="none"``);
- ``PUT``: a written file is one PUT, or a multipart upload of
  ``ceil(bytes / part_bytes)`` parts plus its initiate and complete calls;
- ``HEAD``: ``info``/``size``/``exists``; ``LIST``: ``ls``/``find``/``glob``;
- ``COPY`` (a ``mv`` is a COPY then a DELETE) and ``DELETE``.
Directories cost nothing (object stores have none). A written file appears
at its name only when closed, as an object does when its upload completes.

``CountingFileSystem.log`` records every path opened for writing, in order.
Used by `scale_model.py` and by the exchange's tests.
"""

from __future__ import annotations

import collections
import io
import math

import fsspec
from fsspec.implementations.memory import MemoryFile, MemoryFileSystem

PROTOCOL = "counted"
REQUEST_KINDS = ("GET", "PUT", "HEAD", "LIST", "COPY", "DELETE")


class _ReadFile(io.RawIOBase):
    """A read-only view of a stored file that counts its reads."""

    def __init__(self, fs, data: bytes):
        self._fs = fs
        self._data = memoryview(data)
        self._pos = 0

    def readable(self):
        return True

    def seekable(self):
        return True

    def seek(self, offset, whence=0):
        base = {0: 0, 1: self._pos, 2: len(self._data)}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def tell(self):
        return self._pos

    def read(self, size=-1):
        end = len(self._data) if size is None or size < 0 else min(len(self._data),
                                                                     self._pos + size)
        chunk = bytes(self._data[self._pos:end])
        self._pos = end
        self._fs.count("GET", read=len(chunk))
        return chunk

    def readinto(self, buffer):
        chunk = self.read(len(buffer))
        buffer[:len(chunk)] = chunk
        return len(chunk)


class _WriteFile(MemoryFile):
    """A file written in memory, stored (and billed) when closed."""

    def __init__(self, fs, path):
        super().__init__(fs, path)
        self._closed_once = False

    def close(self):
        if not self._closed_once:
            self._closed_once = True
            size = self.getbuffer().nbytes
            parts = max(1, math.ceil(size / self.fs.part_bytes))
            self.fs.count("PUT", parts + (2 if parts > 1 else 0), written=size)
            self.fs.store[self.path] = MemoryFile(self.fs, self.path, self.getvalue())

    def __exit__(self, *exc):
        self.close()


class CountingFileSystem(MemoryFileSystem):
    """memory:// with object-store request counting (see the module)."""

    protocol = PROTOCOL
    root_marker = "/"
    store: dict = {}
    pseudo_dirs = [""]
    atomic_writes = True  # an object appears only when its upload completes
    part_bytes = 8 << 20
    counts: collections.Counter = collections.Counter()
    log: list = []

    @classmethod
    def reset(cls, part_bytes: int | None = None) -> None:
        cls.store.clear()
        cls.pseudo_dirs[:] = [""]
        cls.counts.clear()
        cls.log.clear()
        if part_bytes is not None:
            cls.part_bytes = part_bytes

    @classmethod
    def count(cls, kind: str, number: int = 1, *, read: int = 0, written: int = 0) -> None:
        cls.counts[kind] += number
        cls.counts["bytes_read"] += read
        cls.counts["bytes_written"] += written

    @classmethod
    def summary(cls) -> dict:
        requests = {kind: cls.counts[kind] for kind in REQUEST_KINDS}
        return {"requests": sum(requests.values()), "by_kind": requests,
                "bytes_read": cls.counts["bytes_read"],
                "bytes_written": cls.counts["bytes_written"],
                "bytes_copied": cls.counts["bytes_copied"]}

    @classmethod
    def _strip_protocol(cls, path):
        path = str(path).removeprefix(PROTOCOL + "://").lstrip("/").rstrip("/")
        return "/" + path if path else ""

    def makedirs(self, path, exist_ok=False):
        path = self._strip_protocol(path)
        while path and path != "/":  # free: object stores have no directories
            if path not in self.pseudo_dirs:
                self.pseudo_dirs.append(path)
            path = path.rsplit("/", 1)[0]

    def mkdir(self, path, create_parents=True, **kwargs):
        self.makedirs(path, exist_ok=True)

    def _open(self, path, mode="rb", **kwargs):
        path = self._strip_protocol(path)
        if "r" in mode:
            if path not in self.store:
                raise FileNotFoundError(path)
            self.count("HEAD")  # opening an object reads its size first
            return _ReadFile(self, self.store[path].getvalue())
        if mode in ("wb", "xb"):
            self.log.append(path)
            return _WriteFile(self, path)
        raise ValueError(f"unsupported mode {mode!r}")

    def info(self, path, **kwargs):
        self.count("HEAD")
        return super().info(path, **kwargs)

    def exists(self, path, **kwargs):
        self.count("HEAD")
        path = self._strip_protocol(path)
        return path in self.store or path in self.pseudo_dirs or any(
            name.startswith(path.rstrip("/") + "/") for name in self.store)

    def ls(self, path, detail=True, **kwargs):
        self.count("LIST")
        return super().ls(path, detail=detail, **kwargs)

    def cp_file(self, path1, path2, **kwargs):
        path1 = self._strip_protocol(path1)
        self.count("COPY")
        self.counts["bytes_copied"] += self.store[path1].getbuffer().nbytes
        self.store[self._strip_protocol(path2)] = MemoryFile(
            self, self._strip_protocol(path2), self.store[path1].getvalue())

    def mv(self, path1, path2, **kwargs):
        self.cp_file(path1, path2)
        self.rm_file(path1)

    def rm_file(self, path):
        self.count("DELETE")
        self.store.pop(self._strip_protocol(path), None)

    def _rm(self, path):
        self.rm_file(path)

    def rm(self, path, recursive=False, maxdepth=None):
        path = self._strip_protocol(path)
        if recursive:
            names = [name for name in list(self.store) if name == path or
                     name.startswith(path.rstrip("/") + "/")]
            if names:
                self.count("LIST")
            for name in names:
                self.rm_file(name)
            self.pseudo_dirs[:] = [d for d in self.pseudo_dirs
                                   if not (d == path or d.startswith(path.rstrip("/") + "/"))]
            return
        self.rm_file(path)

    def rmdir(self, path):
        path = self._strip_protocol(path)
        if path in self.pseudo_dirs:
            self.pseudo_dirs.remove(path)


def register() -> type[CountingFileSystem]:
    """Makes ``counted://`` URLs resolve to CountingFileSystem."""
    fsspec.register_implementation(PROTOCOL, CountingFileSystem, clobber=True)
    return CountingFileSystem
