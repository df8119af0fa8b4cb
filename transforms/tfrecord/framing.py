"""A record's TFRecord framing: length header, masked CRC32Cs, and the error for damage.

Each record is framed as::

    uint64 length (little-endian) | uint32 masked_crc32c(length bytes)
    | data | uint32 masked_crc32c(data)

with ``masked_crc = ((crc >> 15 | crc << 17) + 0xa282ead8) mod 2**32``, exactly
as TensorFlow's `tf.io.TFRecordWriter` writes it.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Iterable

from ...schemas.native import kernels

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "FOOTER_SIZE",
    "FRAMING",
    "HEADER",
    "HEADER_SIZE",
    "LENGTH",
    "MAX_RECORD_BYTES",
    "TFRecordError",
    "cached_length_crc",
    "crc32c",
    "frame_records",
    "length_crc",
    "mask_crc",
    "masked_crc32c",
    "masked_crc32c_array",
    "python_frame_records",
]

# The largest record the reader accepts. A record is a serialized protobuf,
# which protobuf (and so TensorFlow) caps at 2 GiB; a length field claiming
# more is damage, reported at once instead of buffering a gzip stream's
# output while waiting for a record that cannot be an Example.
MAX_RECORD_BYTES = (1 << 31) - 1

HEADER = struct.Struct("<QI")  # length, masked crc of length
LENGTH = struct.Struct("<Q")
_CRC = struct.Struct("<I")
HEADER_SIZE = HEADER.size  # 12
FOOTER_SIZE = _CRC.size  # 4: the masked crc of the data
# The bytes a record takes in a TFRecord file beyond its own: what every
# size estimate (shard plans, run files) adds per record.
FRAMING = HEADER_SIZE + FOOTER_SIZE  # 16
_CRC_MASK_DELTA = 0xA282EAD8


class TFRecordError(Exception):
    """A TFRecord file is damaged: bad length CRC, bad data CRC, truncated
    record, or a truncated or invalid gzip stream.

    path: the file. offset: byte offset, in the uncompressed stream, of the
    record (or gzip data) where the damage was found. record_index: 0-based
    index of the record being read.
    """

    def __init__(self, problem: str, *, path: str, offset: int, record_index: int):
        where = path or "<stream>"
        super().__init__(f"{where}: {problem} at byte offset {offset} "
                         f"(record {record_index})")
        self.problem = problem
        self.path = path
        self.offset = offset
        self.record_index = record_index


def crc32c(data, value: int = 0) -> int:
    """The CRC32C of `data`, continuing `value` (the CRC of the bytes before)."""
    native = kernels()
    if native is not None:
        return native.crc32c_append(data, value)
    # The crc32c package is imported on first use, here and in the codec's
    # pure-Python checks: its import costs a process ~40 ms (it imports
    # importlib.metadata and argparse), and a process that reads shards back
    # with the native kernels never needs it.
    from crc32c import crc32c as computed

    return computed(data, value)


def masked_crc32c(data) -> int:
    """The CRC32C of `data`, masked the way TFRecord files store it."""
    return mask_crc(crc32c(data))


def mask_crc(crc: int) -> int:
    """A CRC32C masked the way TFRecord files store it (for a CRC computed
    in pieces)."""
    return (((crc >> 15) | (crc << 17)) + _CRC_MASK_DELTA) & 0xFFFFFFFF


def masked_crc32c_array(crcs: np.ndarray) -> np.ndarray:
    """`masked_crc32c`'s mask over a uint32 array of CRCs at once (uint32
    arithmetic wraps like ``& 0xFFFFFFFF``)."""
    import numpy as np  # not with the module: see _framed_parts

    return ((crcs >> 15) | (crcs << 17)) + np.uint32(_CRC_MASK_DELTA)


# Record lengths repeat (fixed-size features), so their 12-byte headers, and
# the masked CRCs of their length fields, are cached: one CRC per record
# instead of two on the hot path.
_header_cache: dict[int, bytes] = {}
_length_crc_cache: dict[int, int] = {}
# The reader's header walk looks a length up here before computing its CRC.
cached_length_crc = _length_crc_cache.get


def _header(length: int) -> bytes:
    header = _header_cache.get(length)
    if header is None:
        header = HEADER.pack(length, length_crc(length))
        if len(_header_cache) < 65536:
            _header_cache[length] = header
    return header


def length_crc(length: int) -> int:
    """The masked CRC a header must hold for a record of `length` bytes."""
    crc = _length_crc_cache.get(length)
    if crc is None:
        crc = masked_crc32c(LENGTH.pack(length))
        if len(_length_crc_cache) < 65536:
            _length_crc_cache[length] = crc
    return crc


def frame_records(records: Iterable[bytes]) -> bytes:
    """The TFRecord framing of `records`, concatenated into one bytes object."""
    records = records if isinstance(records, list) else list(records)
    native = kernels()
    if native is not None:
        framed = native.frame_records(records)
        if framed is not None:  # None: an item is not bytes; Python takes any buffer
            return framed
    return python_frame_records(records)


def python_frame_records(records: list) -> bytes:
    """`frame_records` in Python: the reference and the fallback."""
    return b"".join(_framed_parts(records))


def _framed_parts(records: list) -> list:
    """``[header_0, record_0, crc_0, header_1, ...]`` for `records`.

    The per-record work is a few C-level passes (map, numpy) rather than a
    Python loop: on ~1 KB rows the loop cost more than the CRCs themselves.
    """
    # numpy is imported here, not with the module: a process that reads
    # shards back with the native kernels never needs it (~0.1 s to import).
    import numpy as np
    from crc32c import crc32c as computed  # see `crc32c`

    count = len(records)
    if not count:
        return []
    headers = list(map(_header_cache.get, map(len, records)))
    if None in headers:
        headers = [header or _header(len(record)) for header, record in zip(headers, records)]
    crcs = np.fromiter(map(computed, records), dtype=np.uint32, count=count)
    masked = masked_crc32c_array(crcs)
    parts = [b""] * (3 * count)
    parts[0::3] = headers
    parts[1::3] = records
    parts[2::3] = masked.astype("<u4").view("V4").tolist()  # 4-byte bytes objects
    return parts
