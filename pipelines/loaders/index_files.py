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


# Digits a number of an index may have: below 10**18 (an exabyte), so every
# number parses into an int64 exactly.
_MAX_DIGITS = 18
_SPACE, _NEWLINE = ord(" "), ord("\n")


def _parse(data: bytes, display: str, count: int) -> np.ndarray:
    """The offsets of an index's `count` lines plus the shard's size. The
    bytes are checked as a whole first (digits, then a space, digits and a
    newline on every line), so that numpy's C parser, which is lenient,
    only ever reads well-formed numbers: a shard of 100,000 records is
    parsed in milliseconds, not a Python call per line."""
    _check_layout(data, display, count)
    pairs = np.fromstring(data, dtype=np.int64, sep=" ").reshape(count, 2)
    ends = np.cumsum(pairs[:, 1])
    # line i must start where line i - 1 ends, and hold at least a record's framing
    bad = np.flatnonzero((pairs[:, 0] != ends - pairs[:, 1]) | (pairs[:, 1] < FRAMING))
    if bad.size:
        line = int(bad[0])
        raise DatasetCorrupt(f"{display}: line {line + 1} ({_line(data, line)!r}) does not "
                             "start where the line before it ends, or is shorter than a record")
    return np.append(pairs[:, 0], ends[-1] if count else 0)


def _check_layout(data: bytes, display: str, count: int) -> None:
    """DatasetCorrupt naming the first line that is not
    ``"<digits> <digits>\n"`` (numbers of at most `_MAX_DIGITS` digits),
    or the line count when it is not `count`."""
    lines = data.count(b"\n")
    if lines != count or (data and not data.endswith(b"\n")):
        raise DatasetCorrupt(f"{display}: {lines} lines, but the shard holds {count} records "
                             "(each line ends with a newline)")
    raw = np.frombuffer(data, dtype=np.uint8)
    separators = np.flatnonzero((raw == _SPACE) | (raw == _NEWLINE))
    digits = ((raw >= ord("0")) & (raw <= ord("9"))).sum()
    widths = np.diff(separators, prepend=-1) - 1  # the digits before each separator
    kinds = raw[separators]
    expected = np.tile(np.array([_SPACE, _NEWLINE], dtype=np.uint8), count)
    if (len(separators) == 2 * count and digits + len(separators) == len(data)
            and np.array_equal(kinds, expected) and widths.min(initial=1) >= 1
            and widths.max(initial=1) <= _MAX_DIGITS):
        return
    # the checks above fail exactly when a line is not well formed: find it
    lines = data.decode("latin-1").split("\n")[:count]
    line, text = next((line, text) for line, text in enumerate(lines) if not _well_formed(text))
    raise DatasetCorrupt(f"{display}: line {line + 1} ({text!r}) is not '<offset> <length>'")


def _line(data: bytes, line: int) -> str:
    """Line `line` (from 0) of an index, without its newline, for messages."""
    at = 0
    for _ in range(line):
        at = data.index(b"\n", at) + 1
    return data[at:data.index(b"\n", at)].decode("ascii", "replace")


def _well_formed(line: str) -> bool:
    numbers = line.split(" ")
    return (len(numbers) == 2
            and all(n.isascii() and n.isdigit() and len(n) <= _MAX_DIGITS for n in numbers))
