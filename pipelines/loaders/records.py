"""A split's records read from its shards: streamed in order, or one at a time by index.

Every record's two CRCs are checked before it is handed out, so damage
raises and never yields wrong bytes; the intact records before the damage
are handed out first. Shards are checked against the manifest by one of
three rules (`CHECKS`), chosen by the reader's ``check``:

* ``"index"`` (the default), streamed through the shard's index file
  (`spans`): the shard's size, and its index file's size and sha256
  (`index_files`: the manifest lists both), before its first record; the
  index's offsets must tile the shard, one line per record the manifest
  counts; every record read must end exactly where its index line says.
  Caught: any changed byte inside a record (its CRCs), a truncated or
  grown shard (its size), records cut, moved or reordered (their spans),
  another build's shard whose records differ in any length (the spans),
  a damaged or replaced index file (its sha256). Missed: a shard of the
  same size whose records are other valid records of exactly the same
  lengths in the same order (deliberate forgery, or a rebuild under the
  same name whose records all keep their lengths: rows of fixed width
  reordered). A reader of a slice reads only its records. Costs the index
  file (10 to 20 bytes a record) hashed once per shard, not the shard.
  A shard without an index file (gzip output, older versions) is read by
  ``"sha256"``.
* ``"sha256"``, streamed (`held_manifest.checked_records`): the shard's
  size before its first record, and its sha256 as it streams; a reader
  whose range ends inside a shard reads on to the shard's end so the hash
  covers it (those bytes hashed, not walked), and the records before its
  range are walked and checked but make no Python object. A shard
  replaced by another build of the same size raises `VersionReplaced` at
  its end. The strongest rule; the hash runs at about 1.4 GB/s on a core,
  slower than the rest of reading large records (images).
* ``"crc"``: no hash, no index file: the size before the first record,
  and the record count when a reader reaches the shard's end; a reader
  stops at the end of its range. The cheap rule for versions without
  index files. A shard rewritten whole with valid records of the same
  total size and count is not noticed.

ArrayRecord shards (``output.format: array_record``) have no index files:
they are read by `array_record_access` (``"crc"``: in order through the
package's reader; ``"index"`` and ``"sha256"``: their sha256 as they
stream), and `random_access` picks their access by position.

Random access (`RandomAccess`, whatever ``check`` says): the shard's size
and its index file are checked when the shard is first opened, as
``"index"`` does, and every record read must span exactly the bytes its
index line gives. `recordforge verify` checks every shard's sha256.

Memory: one record at a time (``"index"``: a chunk of up to 256 KiB, `spans`),
plus the offsets of at most `OPEN_SHARDS` shards (8 bytes a record) and
as many open file handles per thread.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from typing import Iterator

from ...transforms.tfrecord import FOOTER_SIZE, HEADER_SIZE, TFRecordError, iter_record_views
from ..publish.held_manifest import DatasetCorrupt, checked_records
from .array_record_access import OPEN_SHARDS, ArrayRecordAccess, stream_ordered
from .index_files import load_offsets
from .spans import checked_chunk, read_spans
from .version import LoaderShard, OpenedVersion, check_size

__all__ = ["CHECKS", "DEFAULT_CHECK", "OPEN_SHARDS", "RandomAccess", "check_size",
           "random_access", "stream_records"]

CHECKS = ("index", "sha256", "crc")
DEFAULT_CHECK = "index"


def stream_records(access: RandomAccess | ArrayRecordAccess, shard_index: int, start: int, stop: int,
                   check: str = DEFAULT_CHECK) -> Iterator[memoryview]:
    """The records ``start <= i < stop`` of shard `shard_index` of
    `access`, in order, as views valid until the next is asked for (copy
    one to keep it), checked by `check` (module docstring)."""
    version, shard = access.version, access.shards[shard_index]
    path = version.path(shard.held.file)
    check_size(version, shard)  # each time: the offsets may be cached from an earlier pass
    if check == "index" and shard.index is not None:
        offsets = access.offsets(shard_index)  # its index file checked on first use
        with version.fs.open(path, "rb") as handle:
            yield from read_spans(handle, offsets, start, stop, shard.held.display)
        return
    if check == "crc" and version.file_format == "array_record":
        yield from stream_ordered(access, shard_index, start, stop)
        return
    opener = functools.partial(version.fs.open, path, "rb")
    if check == "crc":
        yield from _crc_checked(opener, version, shard, start, stop)
        return
    for view in checked_records(opener, shard.held, compression=version.compression,
                                read_manifest=version.manifest_now, views=True, start=start,
                                stop=stop):
        yield view
        view.release()


def _crc_checked(opener, version: OpenedVersion, shard: LoaderShard, start: int,
                 stop: int) -> Iterator[memoryview]:
    """``check="crc"``: the records' CRCs, and their count when the shard
    is read to its end; reading stops at `stop`."""
    count = 0
    with opener() as handle:
        try:
            for view in iter_record_views(handle, path=shard.held.display,
                                          compression=version.compression):
                if count >= stop:
                    view.release()
                    return
                if count >= start:
                    yield view
                view.release()
                count += 1
        except TFRecordError as error:
            raise DatasetCorrupt(f"{error} (run recordforge verify)") from None
    if count != shard.num_examples:
        raise DatasetCorrupt(f"{shard.held.display}: holds {count} records, but the manifest "
                             f"lists {shard.num_examples} (run recordforge verify)")


def random_access(version: OpenedVersion, shards: list[LoaderShard]):
    """Random access to `shards` by (shard, record): through their index
    files (`RandomAccess`), or their own footers for ArrayRecord shards
    (`array_record_access.ArrayRecordAccess`)."""
    if version.file_format == "array_record":
        return ArrayRecordAccess(version, shards)
    return RandomAccess(version, shards)


class RandomAccess:
    """Records of a list of shards read by (shard, record) through their
    index files. Safe to call from several threads (Grain reads with a
    pool): each thread has its own file handles, the checked offsets are
    shared. Pickles without either, so each process opens its own."""

    def __init__(self, version: OpenedVersion, shards: list[LoaderShard]):
        self.version, self.shards = version, shards
        self._offsets: OrderedDict = OrderedDict()
        self._lock = threading.Lock()
        self._local = threading.local()

    def __getstate__(self) -> dict:
        return {"version": self.version, "shards": self.shards}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["version"], state["shards"])

    def offsets(self, shard_index: int):
        """The shard's record offsets and its size (`load_offsets`), the
        shard checked on first use; at most `OPEN_SHARDS` kept."""
        with self._lock:
            if shard_index in self._offsets:
                self._offsets.move_to_end(shard_index)
                return self._offsets[shard_index]
        shard = self.shards[shard_index]
        check_size(self.version, shard)
        offsets = load_offsets(self.version, shard)
        with self._lock:
            self._offsets[shard_index] = offsets
            if len(self._offsets) > OPEN_SHARDS:
                self._offsets.popitem(last=False)
        return offsets

    def _handle(self, shard_index: int):
        handles = getattr(self._local, "handles", None)
        if handles is None:
            handles = self._local.handles = OrderedDict()
        if shard_index in handles:
            handles.move_to_end(shard_index)
            return handles[shard_index]
        handle = self.version.fs.open(self.version.path(self.shards[shard_index].held.file), "rb")
        handles[shard_index] = handle
        if len(handles) > OPEN_SHARDS:
            handles.popitem(last=False)[1].close()
        return handle

    def read(self, shard_index: int, record: int) -> memoryview:
        """Record `record` of shard `shard_index`, both CRCs checked and its
        framing spanning exactly its index line; DatasetCorrupt otherwise."""
        offsets = self.offsets(shard_index)
        start, end = int(offsets[record]), int(offsets[record + 1])
        handle = self._handle(shard_index)
        handle.seek(start)
        framed = handle.read(end - start)  # a span the checked index vouches for
        _, damage = checked_chunk(framed, start, record, offsets[record + 1:record + 2] - start,
                                  self.shards[shard_index].held.display)
        if damage is not None:
            raise damage
        return memoryview(framed)[HEADER_SIZE:len(framed) - FOOTER_SIZE]
