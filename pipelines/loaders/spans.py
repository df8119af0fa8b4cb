"""A run of a shard's records read through its checked index: large reads, records as views, each record's span and CRCs checked.

`read_spans` is ``check="index"`` of `records` (its module docstring says
what the rule catches and misses). The offsets come from `index_files`,
whose file the manifest vouches for (size and sha256) and which tile the
shard exactly, so every read here is sized by them: a chunk of whole
records of at most `CHUNK` bytes (a longer record alone) is read in one call
and walked once by the record walk (`complete_records`: both CRCs, natively
where the extension runs), and the records it finds must end exactly where
the index says. A reader of a slice seeks to its first record: the records
before and after it are neither read nor walked (the reader of that slice
checks them).

Records are memoryviews into the chunk's buffer (no copy per record),
released when the next is asked for: the buffer is read into again for
the next chunk. Memory: one chunk, or one record when a record is longer.
"""

from __future__ import annotations

from typing import BinaryIO, Iterator

import numpy as np

from ...transforms.tfrecord import FOOTER_SIZE, HEADER_SIZE, complete_records
from ..publish.held_manifest import DatasetCorrupt

__all__ = ["CHUNK", "checked_chunk", "chunk_end", "read_spans"]

# The walk checks a chunk while it is still in the CPU's cache: over the
# image and table shards of benchmarks/read_loaders.py, 256 KiB chunks
# read and walked in 21 and 35 ms, 4 MiB ones in 23 and 46 ms; the
# per-call cost (a list of starts and ends) stays small even so.
CHUNK = 256 << 10


def chunk_end(offsets: np.ndarray, first: int, stop: int, chunk: int = CHUNK) -> int:
    """The record after the last one of the chunk that starts at record
    `first`: records while they end within `chunk` bytes of its start (at
    least one), never past `stop`."""
    limit = int(np.searchsorted(offsets, offsets[first] + chunk, side="right")) - 1
    return min(max(limit, first + 1), stop)


def read_spans(handle: BinaryIO, offsets: np.ndarray, start: int, stop: int, display: str,
               chunk: int = CHUNK) -> Iterator[memoryview]:
    """Records ``start <= i < stop`` of the shard open as `handle`, whose
    checked offsets are `offsets` (`index_files.load_offsets`: one per
    record and the shard's size), as views valid until the next record is
    asked for (each is released then: copy one to keep it). Raises
    DatasetCorrupt naming `display`, the record and its byte offset, after
    handing out the intact records before the damage."""
    # One buffer for every chunk: a fresh one per read would cost the
    # kernel a page fault per 4 KiB, more than the walk of those bytes.
    buffer = bytearray(min(chunk, int(offsets[stop] - offsets[start])) if start < stop else 0)
    position = start
    if position < stop:
        handle.seek(int(offsets[position]))
    while position < stop:
        end = chunk_end(offsets, position, stop, chunk)
        first = int(offsets[position])
        size = int(offsets[end]) - first
        if size > len(buffer):  # a record longer than a chunk, read alone
            buffer = bytearray(size)
        expected = offsets[position + 1:end + 1] - first
        with memoryview(buffer) as whole, whole[:_read_into(handle, whole, size)] as data:
            kept, damage = checked_chunk(data, first, position, expected, display)
            for begin, finish in kept:
                with data[begin + HEADER_SIZE:finish - FOOTER_SIZE] as record:
                    yield record
        if damage is not None:
            raise damage
        position = end


def _read_into(handle: BinaryIO, whole: memoryview, size: int) -> int:
    """Reads up to `size` bytes into the head of `whole`; the count read
    (less only at the file's end: a file object may return short reads)."""
    with whole[:size] as target:
        done = 0
        while done < size:
            got = handle.readinto(target[done:])
            if not got:
                break
            done += got
    return done


def checked_chunk(data: memoryview, first: int, position: int, expected: np.ndarray,
                  display: str) -> tuple[list[tuple[int, int]], DatasetCorrupt | None]:
    """The (start, end) in `data` of its records that are intact and end
    where the index says (`expected`: each record's end, counted from
    `data`'s start, which is byte `first` of the shard and record
    `position`), and the damage that stopped them (None when every record
    is). `RandomAccess.read` checks a record alone with it."""
    starts, ends, damage = complete_records(data, first, position, display)
    wanted = expected[:len(ends)].tolist()  # lists: a chunk holds few records
    agree = len(ends)
    if ends != wanted:
        agree = next(i for i, (end, want) in enumerate(zip(ends, wanted)) if end != want)
        damage = None  # the first record that disagrees comes before the walk's damage
    kept = list(zip(starts[:agree], ends[:agree]))
    if damage is not None:
        return kept, DatasetCorrupt(f"{damage} (run recordforge verify)")
    if agree == len(expected):
        return kept, None
    at = 0 if agree == 0 else int(expected[agree - 1])
    if len(data) < int(expected[-1]):
        problem = (f"ends at byte {first + len(data)}, inside record {position + agree}, "
                   "which its index file says is whole (the shard changed as it was read)")
    else:
        span = ends[agree] - at if agree < len(ends) else "more"
        problem = (f"record {position + agree} at byte offset {first + at} spans {span} "
                   f"bytes, but its index file gives it {int(expected[agree]) - at}")
    return kept, DatasetCorrupt(f"{display}: {problem} (run recordforge verify)")
