"""A shard's index file read and checked: its records' byte offsets, for random access.

The format is DALI's ``tfrecord2idx`` and the ``tfrecord`` package's: one
``"<byte offset> <framed record length>\\n"`` line per record, in order,
the length covering the whole framed record (8-byte length, 4-byte CRC,
data, 4-byte CRC). Before it is parsed the file must have the size and
sha256 the manifest lists, that size must fit the shard's record count
and size (a line is at most `INDEX_LINE_LIMIT` bytes, a record at least
16), and the file's size on disk is compared before it is read, so no
read is sized by a length the file does not have. Parsed, the offsets must tile the shard
exactly: the first at 0, each where the previous record ends, the last
ending at the shard's size, as many as the manifest's record count.
"""

from __future__ import annotations

import hashlib

import numpy as np

from ...transforms.tfrecord import FRAMING, INDEX_LINE_LIMIT
from ..publish.held_manifest import DatasetCorrupt, HeldShard
from .version import LoaderShard, OpenedVersion

__all__ = ["load_offsets"]


def load_offsets(version: OpenedVersion, shard: LoaderShard) -> np.ndarray:
    """The byte offsets of `shard`'s records plus its size at the end
    (``len == num_examples + 1``), from its index file; DatasetCorrupt
    naming the index file when it is missing, damaged or disagrees with the
    shard's manifest entry."""
    index = shard.index
    if index is None:
        raise ValueError(f"{shard.held.display} has no index file")
    # a record takes at least FRAMING bytes of the shard, a line at most
    # INDEX_LINE_LIMIT of the index
    if index.num_bytes > INDEX_LINE_LIMIT * min(shard.num_examples,
                                                shard.held.num_bytes // FRAMING):
        raise DatasetCorrupt(f"{index.display}: the manifest lists {index.num_bytes} bytes, more "
                             f"than {shard.num_examples} index lines can take")
    offsets = _parse(_read_checked(version, index), index.display, shard.num_examples)
    if offsets[-1] != shard.held.num_bytes:
        raise DatasetCorrupt(f"{index.display}: its records end at byte {offsets[-1]}, but "
                             f"{shard.held.display} holds {shard.held.num_bytes} bytes")
    return offsets


def _read_checked(version: OpenedVersion, index: HeldShard) -> bytes:
    path = version.path(index.file)
    try:
        size = version.fs.size(path)
    except FileNotFoundError:
        raise DatasetCorrupt(f"{index.display}: missing, but the manifest lists it") from None
    if size != index.num_bytes:  # checked before reading: the read is sized by it
        raise DatasetCorrupt(f"{index.display}: holds {size} bytes, but the manifest lists "
                             f"{index.num_bytes} (run recordforge verify)")
    with version.fs.open(path, "rb") as handle:
        data = handle.read(index.num_bytes + 1)
    digest = hashlib.sha256(data).hexdigest()
    if len(data) != index.num_bytes or digest != index.sha256:
        raise DatasetCorrupt(f"{index.display}: holds {len(data)} bytes with sha256 {digest}, "
                             f"but the manifest lists {index.num_bytes} bytes with sha256 "
                             f"{index.sha256} (run recordforge verify)")
    return data


def _parse(data: bytes, display: str, count: int) -> np.ndarray:
    lines = data.split(b"\n")
    if lines[-1] != b"" or len(lines) != count + 1:
        raise DatasetCorrupt(f"{display}: {len(lines) - 1} lines, but the shard holds {count} "
                             "records (each line ends with a newline)")
    try:
        pairs = np.array([line.split(b" ") for line in lines[:-1]], dtype=np.int64)
    except (ValueError, OverflowError):
        raise DatasetCorrupt(f"{display}: a line is not '<offset> <length>'") from None
    pairs = pairs.reshape(count, 2)
    ends = np.cumsum(pairs[:, 1])
    # line i must start where line i - 1 ends, and hold at least a record's framing
    bad = np.flatnonzero((pairs[:, 0] != ends - pairs[:, 1]) | (pairs[:, 1] < FRAMING))
    if bad.size:
        line = int(bad[0])
        raise DatasetCorrupt(f"{display}: line {line + 1} "
                             f"({lines[line].decode('ascii', 'replace')!r}) does not start "
                             "where the line before it ends, or is shorter than a record")
    return np.append(pairs[:, 0], ends[-1] if count else 0)
