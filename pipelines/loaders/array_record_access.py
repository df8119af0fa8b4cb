"""A split's ArrayRecord shards read by index (random access) and in order.

An ArrayRecord shard (``output.format: array_record``) carries its own
index in its footer, and the `array_record` package reads it by record
position; with ``group_size:1`` (how recordforge writes it) a record read
decodes only its own chunk, whose hash the package checks. The checks
mirror the TFRecord shards' (`records`):

* random access (`ArrayRecordAccess`): when a shard is first opened, its
  size must be the manifest's and its footer must count the manifest's
  records; every record read is checked by its chunk's hash. As for a
  TFRecord shard read through its index file, the shard's own sha256 is
  not computed on the local disk (that would read every shard whole
  before the first record; `recordforge verify` checks it).
* A shard that is not on the local disk (the package's reader is C++ on a
  local path) is first copied to a local temporary file, its size and
  sha256 checked as it is copied (`held_manifest`), and read there; at
  most `OPEN_SHARDS` copies are kept, each removed when dropped.
* in order (`stream_ordered`): ``check="sha256"`` reads through
  `held_manifest.checked_records` (the shard hashed before its first
  record is handed out); ``check="crc"`` makes the random-access checks
  (size, record count, chunk hashes) and reads on from `start`.

Memory: a batch of records, the footers of at most `OPEN_SHARDS` shards;
disk: the local copies of at most `OPEN_SHARDS` remote shards per process.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
import threading
from collections import OrderedDict
from typing import Iterator

from fsspec.implementations.local import LocalFileSystem

from ...transforms.array_record import ArrayRecordError, ArrayRecordFile
from ..publish.held_manifest import DatasetCorrupt, checked_copy
from .version import LoaderShard, OpenedVersion, check_size

__all__ = ["ArrayRecordAccess", "stream_ordered"]

# Shards whose footers (and, for a remote version, local copies) a process
# keeps, and readers per thread; the TFRecord readers keep as many.
OPEN_SHARDS = 16


class ArrayRecordAccess:
    """Records of a list of ArrayRecord shards read by (shard, record).
    Safe from several threads (each has its own readers); pickles without
    readers or copies, so each process opens its own (module docstring)."""

    def __init__(self, version: OpenedVersion, shards: list[LoaderShard]):
        self.version, self.shards = version, shards
        self._local = isinstance(version.fs, LocalFileSystem)
        self._paths: OrderedDict = OrderedDict()  # shard index -> checked local path
        self._lock = threading.Lock()
        self._threads = threading.local()
        self._scratch: tempfile.TemporaryDirectory | None = None

    def __getstate__(self) -> dict:
        return {"version": self.version, "shards": self.shards}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["version"], state["shards"])

    def read(self, shard_index: int, record: int) -> bytes:
        """Record `record` of shard `shard_index`; DatasetCorrupt when its
        chunk is damaged."""
        reader = self.reader(shard_index)
        try:
            return reader.read(record)
        except ArrayRecordError as error:
            raise DatasetCorrupt(f"{error} (run recordforge verify)") from None

    def reader(self, shard_index: int) -> ArrayRecordFile:
        """This thread's reader of the shard, opened and checked on first use."""
        readers = getattr(self._threads, "readers", None)
        if readers is None:
            readers = self._threads.readers = OrderedDict()
        path = self.local_path(shard_index)
        known = readers.get(shard_index)
        if known is not None and known[0] == path:
            readers.move_to_end(shard_index)
            return known[1]
        reader = open_checked(path, self.shards[shard_index])
        readers[shard_index] = (path, reader)
        if len(readers) > OPEN_SHARDS:
            readers.popitem(last=False)[1][1].close()
        return reader

    def local_path(self, shard_index: int) -> str:
        """The shard's local path, checked (size; a copy's sha256) on first use."""
        with self._lock:
            if shard_index in self._paths:
                self._paths.move_to_end(shard_index)
                return self._paths[shard_index]
        shard = self.shards[shard_index]
        path = self.version.path(shard.held.file)
        if self._local:
            check_size(self.version, shard)
        else:
            path = self._copy(shard)
        with self._lock:
            self._paths[shard_index] = path
            if len(self._paths) > OPEN_SHARDS:
                _, dropped = self._paths.popitem(last=False)
                if not self._local:
                    os.remove(dropped)  # a reader still open keeps its file until it closes
        return path

    def _copy(self, shard: LoaderShard) -> str:
        """A local copy of a remote shard, its size and sha256 checked."""
        if self._scratch is None:
            self._scratch = tempfile.TemporaryDirectory(prefix="recordforge-array-record-")
        target = os.path.join(self._scratch.name, f"{threading.get_ident()}-{shard.held.file}")
        opener = functools.partial(self.version.fs.open, self.version.path(shard.held.file), "rb")
        with checked_copy(opener, shard.held, read_manifest=self.version.manifest_now) as copied:
            shutil.move(copied, target)
        return target


def open_checked(path: str, shard: LoaderShard) -> ArrayRecordFile:
    """The local shard at `path` opened; DatasetCorrupt unless its footer
    counts the manifest's records (a truncated file opens with none)."""
    try:
        reader = ArrayRecordFile(path, display=shard.held.display)
    except ArrayRecordError as error:
        raise DatasetCorrupt(f"{error} (run recordforge verify)") from None
    if reader.num_records != shard.num_examples:
        reader.close()
        raise DatasetCorrupt(f"{shard.held.display}: holds {reader.num_records} records, but "
                             f"the manifest lists {shard.num_examples} (run recordforge verify)")
    return reader


def stream_ordered(access: ArrayRecordAccess, shard_index: int, start: int,
                   stop: int) -> Iterator[memoryview]:
    """``check="crc"`` in order: records ``start <= i < stop`` of the
    shard, with the random-access checks, a batch at a time."""
    records = access.reader(shard_index).records(start, stop)
    try:
        for record in records:
            yield memoryview(record)
    except ArrayRecordError as error:
        raise DatasetCorrupt(f"{error} (run recordforge verify)") from None
