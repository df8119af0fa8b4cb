"""The shuffle exchange's packets: a batch's rows of one split, cut by bucket and sorted.

No Beam. Rows cross the runner's shuffle (`exchange`) as packets, plain
tuples ``(key_width, keys, framed records, sizes)``: key_width
`splits.HASH_SIZE` with keys the concatenated digests,
`run_format.KEY_VARIABLE` with a tuple of keys, `run_format.KEY_IS_EXAMPLE`
with keys None (a row's key is its example); sizes are the framed
records' sizes as little-endian uint32 (`SIZE_DTYPE`). Plain tuples of
bytes and ints cross Beam's coders without pickling.

A packet is cut into one packet per bucket (`split_packet` by the
bucket lower bounds, `cut_packet` by each row's bucket), packets are
joined (`merge_packets`), and a bucket's packets are sorted by
``(key, example)`` into a writer (`sort_bucket_packets`): in memory up to
memory_bytes (`sorting.write_sorted`), above it in sorted runs on the
worker's local disk (`run_format`) merged as streams
(`sorting.merge_runs`).
"""

from __future__ import annotations

import bisect
import contextlib
import os
import shutil
import tempfile
import uuid
from typing import BinaryIO, Iterable, Iterator, Sequence

import numpy as np

from . import row_order, run_format, sorting
from .elements import RunInfo
from .spill import ROW_OVERHEAD

__all__ = ["SIZE_DTYPE", "sorted_bucket", "bucket_of_keys", "bucket_sizes", "cut_packet", "merge_packets",
           "packet_buckets", "row_digests", "sort_bucket_packets", "split_packet"]

# A packet's row sizes: little-endian uint32, one per framed record.
SIZE_DTYPE = np.dtype("<u4")

# splitmix64's finalizer: a bijection on 64 bits that spreads every input
# bit over the whole output.
_MIX_SHIFTS = (np.uint64(30), np.uint64(27), np.uint64(31))
_MIX_FACTORS = (np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB))
_FRAMING = 16  # a framed record's length, length CRC and data CRC


def bucket_of_keys(lower_bounds: Sequence[bytes], key_width: int, keys) -> np.ndarray:
    """The bucket of each row: the last bucket whose lower bound is at or
    below the row's key (bounds sorted, the first b""). keys: concatenated
    fixed-width keys (key_width > 0) or a sequence of bytes."""
    if key_width > 0:
        # Bounds are key prefixes; padded with zero bytes they compare with
        # fixed-width keys as the bytes do (see run_format._bound).
        bounds = np.array([bound[:key_width].ljust(key_width, b"\0")
                           for bound in lower_bounds], dtype=f"S{key_width}")
        array = np.frombuffer(keys, dtype=f"S{key_width}")
        return np.searchsorted(bounds, array, "right").astype(np.int64) - 1
    bounds = list(lower_bounds)
    return np.fromiter((bisect.bisect_right(bounds, key) - 1 for key in keys),
                       dtype=np.int64, count=len(keys))


def _packet_rows(packet) -> tuple[int, object, memoryview, np.ndarray]:
    key_width, keys, data, raw_sizes = packet
    return key_width, keys, memoryview(data), np.frombuffer(raw_sizes, dtype=SIZE_DTYPE).astype(
        np.int64)


def _examples_of(data: memoryview, sizes: np.ndarray) -> list[bytes]:
    return run_format.RunSlice(None, data, sizes).examples()


def packet_buckets(packet, lower_bounds: Sequence[bytes]) -> np.ndarray:
    """The bucket of each row of a packet, by the bucket lower bounds."""
    key_width, keys, data, sizes = _packet_rows(packet)
    if len(lower_bounds) == 1:
        return np.zeros(len(sizes), dtype=np.int64)
    route_keys = keys if key_width != run_format.KEY_IS_EXAMPLE else _examples_of(data, sizes)
    return bucket_of_keys(lower_bounds, key_width, route_keys)


def split_packet(packet, lower_bounds: Sequence[bytes]) -> list[tuple[int, tuple]]:
    """Cuts a packet into one packet per bucket its rows fall in:
    ``[(bucket, packet), ...]``."""
    return cut_packet(packet, packet_buckets(packet, lower_bounds))


def row_digests(data, sizes: np.ndarray) -> np.ndarray:
    """Each framed record's 64-bit digest (uint64), from bytes its framing
    already holds: its data's CRC32C (the masked CRC of its last 4 bytes)
    and its framed size, mixed (`_MIX_FACTORS`). Vectorized: no Python
    step per row.

    A bucket's digest is the sum of its rows' digests mod 2^64: a multiset
    digest, blind to order (the runner's) and counting a row that is twice
    in the input twice. Rows lost and others delivered in their place
    (e.g. a packet lost, another of the same rows and bytes delivered
    twice) leave it unchanged only if the two lots of rows have the same
    (CRC, size) pairs, which for rows of other data happens by chance
    once in 2^32 per row (CRC32C), or if their mixed sums collide, once
    in 2^64 (the mix is a bijection spreading each pair over 64 bits, so
    that sums of different pairs are as good as random). Rows of the
    same data are the same framed bytes: one in place of the other
    changes nothing written."""
    sizes = np.asarray(sizes, dtype=np.int64)
    if not len(sizes):
        return np.zeros(0, dtype=np.uint64)
    ends = np.cumsum(sizes)
    if int(sizes.min()) < _FRAMING or int(ends[-1]) != len(data):
        raise run_format.RunFileError(f"a packet of {len(data)} bytes holds framed records "
                                     f"of {int(ends[-1])} bytes, the smallest "
                                     f"{int(sizes.min())}: not its sizes")
    tail = np.frombuffer(data, dtype=np.uint8)[(ends - 4)[:, None] + np.arange(4)]
    crcs = np.ascontiguousarray(tail).view("<u4").ravel()
    value = (crcs.astype(np.uint64) << np.uint64(32)) | sizes.astype(np.uint64)
    value ^= value >> _MIX_SHIFTS[0]
    value *= _MIX_FACTORS[0]
    value ^= value >> _MIX_SHIFTS[1]
    value *= _MIX_FACTORS[1]
    value ^= value >> _MIX_SHIFTS[2]
    return value


def bucket_sizes(buckets: np.ndarray, sizes: np.ndarray, digests: np.ndarray | None = None,
                 ) -> tuple[bytes, bytes, bytes, bytes, int]:
    """What the shuffle exchange's plan counts of some rows (each row's
    bucket and framed size, at least one row, and its `row_digests`;
    None: units of chunks, checked against their layout instead): the
    buckets present (uint32), their rows and bytes (int64), the sums of
    their rows' digests mod 2^64 (uint64), and the largest row."""
    present, inverse = np.unique(buckets, return_inverse=True)
    rows = np.bincount(inverse).astype("<i8")
    nbytes = np.zeros(len(present), dtype="<i8")
    np.add.at(nbytes, inverse, sizes)
    digest_sums = np.zeros(len(present), dtype="<u8")
    if digests is not None:
        np.add.at(digest_sums, inverse, digests)
    return (present.astype("<u4").tobytes(), rows.tobytes(), nbytes.tobytes(),
            digest_sums.tobytes(), int(sizes.max()))


def cut_packet(packet, buckets: np.ndarray) -> list[tuple[int, tuple]]:
    """Cuts a packet into one packet per bucket, given each row's bucket:
    ``[(bucket, packet), ...]`` in bucket order, rows in packet order."""
    key_width, keys, data, sizes = _packet_rows(packet)
    if not len(sizes):
        return []
    order = np.argsort(buckets, kind="stable")
    ordered = buckets[order]
    edges = np.flatnonzero(np.diff(ordered)) + 1
    starts = np.cumsum(sizes) - sizes
    pieces = []
    for first, last in zip([0, *edges.tolist()], [*edges.tolist(), len(order)]):
        rows = order[first:last]
        row_sizes = sizes[rows]
        if last - first == len(sizes):
            pieces.append((int(ordered[first]), packet))
            break
        row_starts = starts[rows].tolist()
        blob = b"".join([data[start:start + size] for start, size in
                         zip(row_starts, row_sizes.tolist())])
        if key_width > 0:
            part_keys = b"".join([keys[row * key_width:(row + 1) * key_width]
                                  for row in rows.tolist()])
        elif key_width == run_format.KEY_VARIABLE:
            part_keys = tuple(row_order.take(keys, rows.tolist()))
        else:
            part_keys = None
        pieces.append((int(ordered[first]),
                       (key_width, part_keys, blob, row_sizes.astype(SIZE_DTYPE).tobytes())))
    return pieces


def merge_packets(packets: list[tuple]) -> tuple:
    """One packet holding the rows of several (same key kind, else keys
    spelled out as bytes)."""
    if len(packets) == 1:
        return packets[0]
    widths = {packet[0] for packet in packets}
    width = widths.pop() if len(widths) == 1 else run_format.KEY_VARIABLE
    data = b"".join(packet[2] for packet in packets)
    sizes = b"".join(packet[3] for packet in packets)
    if width > 0:
        keys = b"".join(packet[1] for packet in packets)
    elif width == run_format.KEY_IS_EXAMPLE:
        keys = None
    else:
        keys = tuple(key for packet in packets for key in _keys_as_bytes(packet))
    return width, keys, data, sizes


def _keys_as_bytes(packet) -> list[bytes]:
    key_width, keys, data, sizes = _packet_rows(packet)
    if key_width > 0:
        return [keys[start:start + key_width] for start in range(0, len(keys), key_width)]
    if key_width == run_format.KEY_IS_EXAMPLE:
        return _examples_of(data, sizes)
    return list(keys)


def _write_sorted(writer, packets: list[tuple]) -> None:
    """Gives `writer` (a `bucket_output` writer, or `shuffle_rows.ShardCutter`) the rows of `packets` ordered by
    ``(key, example)``, as `sorting` orders a bucket, a block at a time
    (`sorting.write_sorted`, each packet a slice: no copy of them all)."""
    packets = [packet for packet in packets if packet[3]]
    if not packets:
        return
    widths = {packet[0] for packet in packets}
    # One key kind is compared as it is; a mix, as `merge_packets` spells it.
    width = widths.pop() if len(widths) == 1 else run_format.KEY_VARIABLE
    slices = []
    for packet in packets:
        _, keys, data, sizes = _packet_rows(packet)
        order_keys = (np.frombuffer(keys, dtype=f"S{width}") if width > 0
                      else _keys_as_bytes(packet))
        slices.append(run_format.RunSlice(order_keys, data, sizes))
    sorting.write_sorted(writer, slices, width)


def _spill_run(directory: str, packets: list[tuple], *, prefix_len: int,
               index_every: int) -> RunInfo:
    """Sorts packets into a run file on local disk (the `run_format` format)."""
    merged = merge_packets([packet for packet in packets if packet[3]])
    key_width, keys, data, sizes = _packet_rows(merged)
    examples = _examples_of(data, sizes)
    if key_width > 0:
        key_list = [keys[start:start + key_width] for start in range(0, len(keys), key_width)]
    elif key_width == run_format.KEY_VARIABLE:
        key_list = list(keys)
    else:
        key_list = None
    path = os.path.join(directory, f"{uuid.uuid4().hex}.run")
    with open(path, "wb") as fileobj:
        count = run_format.write_sorted_run(fileobj, key_list, examples, key_width=key_width,
                                           prefix_len=prefix_len, index_every=index_every)
    return RunInfo("", path, count, int(sizes.sum()))


def sort_bucket_packets(packets: Iterable[tuple], writer, *, memory_bytes: int, fan_in: int,
                        prefix_len: int, index_every: int) -> None:
    """Sorts a bucket's packets into `writer` (a `bucket_output` writer, or `shuffle_rows.ShardCutter`).

    Up to `memory_bytes` (record bytes plus a per-row allowance) are held
    in memory; above it, each `memory_bytes` is sorted into a run file in a
    temporary directory of the worker's local disk (removed at the end),
    and the runs are merged as streams (`sorting.merge_runs`)."""
    held: list[tuple] = []
    held_bytes = 0
    runs: list[RunInfo] = []
    scratch = None
    try:
        for packet in packets:
            held.append(packet)
            held_bytes += len(packet[2]) + len(packet[3]) // 4 * ROW_OVERHEAD
            if held_bytes > memory_bytes:
                if scratch is None:
                    scratch = tempfile.mkdtemp(prefix="recordforge-sort-")
                runs.append(_spill_run(scratch, held, prefix_len=prefix_len,
                                       index_every=index_every))
                held, held_bytes = [], 0
        if not runs:
            _write_sorted(writer, held)
            return
        if any(packet[3] for packet in held):
            runs.append(_spill_run(scratch, held, prefix_len=prefix_len,
                                   index_every=index_every))
        held = []
        sorting.merge_runs(writer, runs, scratch_dir=scratch, memory_bytes=0, fan_in=fan_in,
                               prefix_len=prefix_len, index_every=index_every)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


class _Delivered:
    """A bucket's packets as they stream into its sort, with the rows and
    framed bytes the runner delivered of them added up."""

    def __init__(self, values):
        self._values = values
        self.rows = self.bytes = 0

    def __iter__(self) -> Iterator[tuple]:
        for tag, packet in self._values:
            if tag == "rows":
                self.rows += len(packet[3]) // SIZE_DTYPE.itemsize
                self.bytes += len(packet[2])
                yield packet


class _Digesting:
    """A bucket's writer as its sort sees it, adding up the `row_digests`
    of the rows it is given (mod 2^64). They are taken from the sort's
    output, blocks of `run_format.BLOCK` bytes, rather than as the packets
    are delivered: a packet may hold a handful of rows (a batch cut into
    hundreds of buckets), on which numpy's cost per call would be most of
    the digest's. The sum is blind to order, so it is the delivered rows'
    as long as the sort keeps them (it answers for its bytes apart)."""

    def __init__(self, writer):
        self._writer = writer
        self.digest = 0

    @property
    def offset(self) -> int:
        return self._writer.offset

    def needs_bytes(self, nbytes: int) -> bool:
        return True  # every row's bytes are digested

    def write_framed(self, data, sizes: np.ndarray) -> None:
        self._writer.write_framed(data, sizes)
        # (after the writer: it has just read the block, which may have
        # been gathered on another core, into this one's cache)
        digest = int(row_digests(data, sizes).sum(dtype=np.uint64))
        self.digest = (self.digest + digest) & _DIGEST_MASK


_DIGEST_MASK = (1 << 64) - 1


@contextlib.contextmanager
def sorted_bucket(item, tuning, make_writer) -> Iterator[tuple[tuple, object, BinaryIO]]:
    """Sorts one bucket of the shuffle exchange into a writer over a
    spooled file; yields ``(plan, writer, file)`` once every row is in.

    item: ``((split, bucket), [("plan", (start, size, total, count,
    rows, digest)), ("rows", packet), ...])``. The values are iterated twice
    (runners give re-iterables): the plan is found first, then the rows
    stream into the sort. make_writer(file, plan): the writer the sorted
    rows go to, with an `offset` (the next row's first byte in the split),
    which must end where the plan says the bucket does.

    Raises RunFileError when the rows the runner delivered are not the
    plan's (rows lost, or delivered twice, between the step that packed
    them and this one): their rows, bytes and digest (the sum of their
    `row_digests`, which another packet's rows delivered in place of lost
    ones change unless they are the same rows; taken as they leave the
    sort, `_Digesting`), or when the sort gave other bytes than it took."""
    (split, bucket), values = item
    plan = next((value for tag, value in values if tag == "plan"), None)
    if plan is None:
        raise ValueError(f"split {split!r}, bucket {bucket}: rows came without the "
                         f"split's plan")
    start, size, rows, digest = plan[0], plan[1], plan[4], plan[5]
    delivered = _Delivered(values)
    with tempfile.SpooledTemporaryFile(max_size=tuning.memory_bytes) as out:
        writer = make_writer(out, plan)
        digesting = _Digesting(writer)
        sort_bucket_packets(delivered, digesting, memory_bytes=tuning.memory_bytes,
                            fan_in=tuning.fan_in, prefix_len=tuning.prefix_len,
                            index_every=tuning.index_every)
        lost = run_format.RunFileError(
            f"split {split!r}, bucket {bucket}: the runner delivered {delivered.rows} rows "
            f"({delivered.bytes} bytes, digest {digesting.digest:016x}) of the bucket, the "
            f"plan counted {rows} rows ({size} bytes, digest {digest:016x}): rows were lost "
            f"or duplicated crossing the runner's shuffle")
        if (delivered.rows, delivered.bytes) != (rows, size):
            raise lost
        if writer.offset != start + size:
            raise run_format.RunFileError(
                f"split {split!r}, bucket {bucket}: sorted {writer.offset - start} bytes, "
                f"the plan counted {size}")
        # The sort gave as many bytes as it took: its rows are the delivered ones.
        if digesting.digest != digest:
            raise lost
        yield plan, writer, out
