"""A run file written by the native kernel: the bytes `run_format.RunWriter` writes, in one call.

No Beam. Writing a run in Python takes a framing gather, a size array, a
key gather and an index entry search per block of rows; the kernels
sort a split's fixed-width keys (`native/src/run_order.rs`:
`fixed_key_order`, the order `row_order.sorted_positions` gives) and
write the whole file of rows in a given order (`native/src/run.rs`:
`write_run`: records, sizes, keys, key sizes, index
and footer), a block at a time so that memory stays one block above the
rows held. Each function here returns None where the Python writer must
write the run (no kernel, a row that is not bytes, a record too large for
the format's uint32 sizes): `run_format.RunWriter` stays the reference.
`sorted_rows` sorts key-ordered rows (keys of any width, or the examples
themselves) as `write_sorted_run`'s Python `sorted` does, and
`fixed_key_order` sorts fixed-width keys (the shuffled rows' digests).
The rows are a list of Examples (bytes) or a spill's batches framed
(`framed_runs.FramedBatches.native`: ``(buffers, offsets)``), whose
records the kernel copies as they are.

A run written to a local file goes straight to its file descriptor (no
bytes object per block, no Python call per block), and the kernel keeps
the CRC32C of what it writes for a `CheckedFile` (the build cache's check
of its runs), so no second pass over the bytes is made in Python; for
any other file (a spill run, read back by this build only, through its
records' own CRCs) none is computed. Written
through a `page_cache.WriteBehind`, the run is handed to the disk and
dropped from the page cache a window at a time by the kernel
(`native/src/run_sink.rs`), as the wrapper does with Python's writes.
"""

from __future__ import annotations

import io
import os
from typing import BinaryIO, Sequence

import crc32c
import numpy as np
from fsspec.implementations.local import LocalFileOpener

from ...schemas.native import kernels
from ..framed_keys import FramedKeys
from ..page_cache import WriteBehind

__all__ = ["CheckedFile", "fixed_key_order", "sorted_rows", "write_ordered"]

_ROWS = np.dtype("<i8")
# Local files whose descriptor the kernel may write to: the buffered and
# raw files `open` makes (whose position after a write is the descriptor's).
_DESCRIPTOR_FILES = (io.BufferedWriter, io.BufferedRandom, io.FileIO)


class CheckedFile:
    """A file object that keeps the CRC32C and size of what is written to
    it (in Python, or by the kernel as it writes: the same values)."""

    def __init__(self, fileobj: BinaryIO):
        self.fileobj = fileobj
        self.crc = 0
        self.size = 0

    def write(self, data) -> int:
        self.crc = crc32c.crc32c(data, self.crc)
        self.size += len(data)
        return self.fileobj.write(data)


def _descriptor(fileobj) -> tuple[object, int] | None:
    """(the file, its descriptor) when a run can be written straight to
    the descriptor: a local file `open` made, seekable (its position is
    moved past the run after); else None (the kernel calls `write`)."""
    if isinstance(fileobj, LocalFileOpener):
        fileobj = fileobj.f
    if os.name != "posix" or type(fileobj) not in _DESCRIPTOR_FILES:
        return None
    try:
        if fileobj.closed or not (fileobj.writable() and fileobj.seekable()):
            return None
        return fileobj, fileobj.fileno()
    except (OSError, ValueError):
        return None


def _write_run(native, fileobj, examples: list, order, keys, key_width: int, prefix_len: int,
               index_every: int, block: int) -> int | None:
    """The kernel's `write_run` to `fileobj` (a `CheckedFile`'s file, its
    CRC32C and size kept up to date), through the file's descriptor where
    `_descriptor` allows, with a `WriteBehind`'s page cache advice given by
    the kernel as it writes; the number of rows, or None with nothing
    written."""
    checked = fileobj if isinstance(fileobj, CheckedFile) else None
    target = checked.fileobj if checked is not None else fileobj
    behind = target if isinstance(target, WriteBehind) else None
    local = _descriptor(target if behind is None else behind.file)
    if local is None:
        written = native.write_run(target, examples, order, keys, key_width, prefix_len,
                                   index_every, block, crc=checked.crc if checked else None)
    else:
        local_file, fd = local
        local_file.flush()  # what Python buffered lands before the run's bytes
        start = local_file.tell()
        written = native.write_run(None, examples, order, keys, key_width, prefix_len,
                                   index_every, block, fd=fd,
                                   crc=checked.crc if checked else None,
                                   drop_behind=behind.window if behind is not None else 0)
        if written is not None:
            local_file.seek(start + written[1])
            if behind is not None:
                behind.wrote(written[1])
    if written is None:
        return None
    rows, size, crc = written
    if checked is not None:
        checked.crc, checked.size = crc, checked.size + size
    return rows


def _packed(rows) -> np.ndarray:
    """Row numbers as the kernels take them: int64 bytes, one buffer."""
    return np.ascontiguousarray(rows, dtype=_ROWS).view(np.uint8)


def fixed_key_order(keys: np.ndarray, examples, rows: np.ndarray | None) -> np.ndarray | None:
    """The positions of the rows `rows` (all when None) ordered by
    ``(key, example)`` as `row_order.sorted_positions` orders them, as
    int64: `keys` one numpy item per row ("V" items, every byte kept),
    examples a list of bytes or framed batches. None where Python sorts
    them (no kernel, an example compared that is not bytes)."""
    native = kernels()
    if native is None or not isinstance(examples, (list, tuple)) or keys.dtype.itemsize == 0:
        return None
    blob = np.ascontiguousarray(keys).view(np.uint8)
    order = native.fixed_key_order(blob, keys.dtype.itemsize, examples,
                                   None if rows is None else _packed(rows))
    return None if order is None else np.frombuffer(order, dtype=_ROWS)


def write_ordered(fileobj: BinaryIO, keys, examples: Sequence[bytes], order, *,
                  key_width: int, prefix_len: int, index_every: int, block: int) -> int | None:
    """Writes ``examples[i] for i in order`` (keys alike) as a run file, as
    `RunWriter` does; keys: None (KEY_IS_EXAMPLE), a list of bytes or a
    `FramedKeys` without a None (KEY_VARIABLE) or the fixed-width keys
    back to back (a buffer);
    examples: a list of bytes or framed batches. Returns
    the number of rows, or None with nothing written where Python writes it."""
    native = kernels()
    if native is None or not isinstance(examples, (list, tuple)):
        return None
    if key_width < 0 and not isinstance(keys, (list, FramedKeys)):
        return None
    if isinstance(keys, FramedKeys):
        keys = keys.native()
    return _write_run(native, fileobj, examples, _packed(order), keys, key_width, prefix_len,
                      index_every, block)


def sorted_rows(keys: list | FramedKeys | None, examples: Sequence[bytes],
                rows: np.ndarray | None = None) -> np.ndarray | None:
    """The positions of rows ordered by ``(key, example)`` (keys a list
    or a `FramedKeys` without a None; None: by example), as
    `run_format.write_sorted_run` sorts them, as int64; rows: the
    positions to order (all when None); examples a list of bytes or
    framed batches. None where Python sorts them (no kernel, an item that
    is not bytes)."""
    native = kernels()
    if native is None or not isinstance(examples, (list, tuple)) \
            or not isinstance(keys, (list, FramedKeys, type(None))):
        return None
    if isinstance(keys, FramedKeys):
        keys = keys.native()
    order = native.sorted_rows(keys, examples, None if rows is None else _packed(rows))
    return None if order is None else np.frombuffer(order, dtype=_ROWS)
