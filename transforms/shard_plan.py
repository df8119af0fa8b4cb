"""Plain planning logic of the shard writer: split assignment, order keys,
bucket boundaries and shard cuts. No Beam, no I/O.

Every decision here is a function of row content and config only (never of
arrival order, bundling or worker count), which is what makes the written
shards byte-identical on every runner:

- a row's hash is ``blake2b(key or example, key=salt(dataset name))``; its
  first 8 bytes pick the split, the whole digest is the order key when
  shuffling;
- buckets (the units sorted in parallel) are key ranges whose boundaries come
  from a content-selected sample of keys, so the same rows always land in the
  same bucket;
- shards are cut at chunk boundaries chosen from the chunk sizes alone
  (key-ordered gzip: a chunk is the rows of one cell of the split's
  framed bytes, whatever the buckets), or at rows by their byte midpoints
  (the rest; gzip shards are counted from the compression ratio of a
  sample that is a function of content alone, `RATIO_SAMPLE_BOUND`).

The records passed between the Beam steps are the NamedTuples below; they
carry file names, counts and a few key prefixes, never example bytes.
"""

from __future__ import annotations

import bisect
import hashlib
import heapq
import math
from typing import Callable, Iterable, Iterator, NamedTuple, Sequence

import numpy as np

from .tfrecord import FRAMING

__all__ = [
    "BucketChunks",
    "BucketRange",
    "Chunk",
    "HASH_SIZE",
    "HashedExamples",
    "RunInfo",
    "SampleEntry",
    "ShardSpec",
    "SpillRecord",
    "SplitAssigner",
    "PreparedBatch",
    "assign_split",
    "batch_columns",
    "MAX_BUCKETS",
    "RATIO_SAMPLE_BOUND",
    "bucket_bounds_of",
    "bucket_places",
    "cells_of_rows",
    "check_seam",
    "interior_unit",
    "seam_cells",
    "cuts_at_rows",
    "estimated_written_bytes",
    "ratio_sample_of",
    "ratio_sample_rows",
    "rows_below",
    "hash_buckets_of",
    "plan_row_shards",
    "row_shard_count",
    "row_shard_thresholds",
    "shards_of_rows",
    "shards_touched",
    "dataset_salt",
    "plan_bucket_ranges",
    "plan_shards",
    "prepare_batch",
    "runs_of",
    "sample_of",
    "validate_splits",
]

HASH_SIZE = 16  # blake2b digest bytes: the shuffle order key
_SALT_LIMIT = 64  # blake2b's longest key
_TWO_64 = 1 << 64


# The most buckets a split is sorted in, by key ranges or hash ranges
# (`ShardTuning.for_input`): 4,096 workers at once, and per-split plans of
# a few numbers a bucket that do not grow with the data.
MAX_BUCKETS = 4096


class SampleEntry(NamedTuple):
    """One sampled row, used only to place bucket boundaries.

    priority: ``(size << 64) // (u64 + 1)`` where u64 comes from the row's
    hash, so the largest priorities form a byte-weighted random sample that
    depends on content alone. prefix: the row's order key cut to the prefix
    length. size: the row's framed size in bytes.
    """

    priority: int
    prefix: bytes
    size: int


class SpillRecord(NamedTuple):
    """What the spill step says after buffering one input batch's rows of
    one split: they go to the run file `path` (written by the same bundle),
    which then holds `num_records` rows of `num_bytes` framed bytes in all.

    The counts are running totals, so a run's size is the largest reported
    and a record delivered twice changes nothing.
    """

    split: str
    path: str
    num_records: int
    num_bytes: int
    sample: tuple[SampleEntry, ...]  # this batch's sampled rows of the split
    kept: bool = False  # the run is the build cache's, read again by later builds


class RunInfo(NamedTuple):
    """One sorted run file of a split."""

    split: str
    path: str
    num_records: int
    num_bytes: int
    kept: bool = False  # the build cache's run (`SpillRecord.kept`)


class BucketRange(NamedTuple):
    """A key range of a split sorted as one unit: ``lo <= key < hi``
    (`hi` None: no upper bound). `index` orders the buckets of a split."""

    split: str
    index: int
    lo: bytes
    hi: bytes | None


class Chunk(NamedTuple):
    """A run of whole TFRecords in a bucket file: plain framed records or one
    complete gzip member. Offsets and lengths are bytes on disk."""

    offset: int
    length: int
    num_records: int


class BucketChunks(NamedTuple):
    """A sorted bucket written as consecutive chunks in the file `path`;
    max_row: its largest framed row, when shards are cut at rows
    (`plan_row_shards`); ratio_sample: its rows in the split's gzip ratio
    sample, ``((order key, framed record), ...)`` (`RATIO_SAMPLE_BOUND`)."""

    split: str
    index: int
    path: str
    chunks: tuple[Chunk, ...]
    max_row: int = 0
    ratio_sample: tuple = ()


class ShardSpec(NamedTuple):
    """One output shard: the byte ranges to concatenate, in order.

    pieces: ``(bucket file, offset, length)``. With `cut` ``(total bytes,
    shard count)`` of the split (shards cut at rows, `plan_row_shards`), a
    piece is ``(bucket, the bucket's first byte in the split, its bytes)``
    and the shard holds those of the bucket's rows whose midpoint falls in
    it; num_examples and num_bytes are then -1, known once written.
    """

    split: str
    index: int
    count: int
    pieces: tuple[tuple[str, int, int], ...]
    num_examples: int
    num_bytes: int
    cut: tuple[int, int] | None = None


def validate_splits(splits: Sequence[tuple[str, float]]) -> tuple[tuple[str, float], ...]:
    """Checks ``[(name, fraction), ...]``: at least one split, unique
    non-empty names, fractions >= 0 and not all zero."""
    splits = tuple((str(name), float(fraction)) for name, fraction in splits)
    if not splits:
        raise ValueError("splits: at least one split is required")
    names = [name for name, _ in splits]
    if len(set(names)) != len(names):
        raise ValueError(f"splits: duplicate split names in {names}")
    for name, fraction in splits:
        if not name:
            raise ValueError("splits: a split name is empty")
        if not (fraction >= 0 and math.isfinite(fraction)):
            raise ValueError(f"splits.{name}: fraction must be a finite number >= 0, got {fraction}")
    if sum(fraction for _, fraction in splits) <= 0:
        raise ValueError("splits: the fractions add up to 0")
    return splits


def dataset_salt(dataset_name: str) -> bytes:
    """The blake2b key that salts every row hash of a dataset."""
    salt = dataset_name.encode("utf-8")
    if len(salt) > _SALT_LIMIT:
        # blake2b keys stop at 64 bytes; longer names are hashed down, which
        # keeps every character significant.
        salt = hashlib.blake2b(salt, digest_size=_SALT_LIMIT).digest()
    return salt


class HashedExamples(list):
    """An ExampleBatch (list of ``(key, example)``) that carries its rows'
    digests: `SplitAssigner.hash_rows` of each row's key (its example when the
    key is None) under `salt`. The step that makes Examples hashes them
    anyway, to count labels per split; the shard writer takes the digests
    from here rather than hashing every row a second time (`hash_batch`)."""

    def __init__(self, rows: Iterable = (), salt: bytes = b"", digests: Sequence[bytes] = ()):
        super().__init__(rows)
        self.salt = salt
        self.digests = list(digests)

    def __reduce__(self):
        return (HashedExamples, (list(self), self.salt, self.digests))


class SplitAssigner:
    """Maps a row hash onto the configured split fractions.

    The fractions become cumulative thresholds on the hash's first 8 bytes
    (a little-endian uint64), so a row's split never depends on anything but
    its key, the dataset name and the fractions.
    """

    def __init__(self, dataset_name: str, splits: Sequence[tuple[str, float]]):
        splits = validate_splits(splits)
        self.names = tuple(name for name, _ in splits)
        self.salt = dataset_salt(dataset_name)
        total = sum(fraction for _, fraction in splits)
        thresholds = []
        running = 0.0
        for _, fraction in splits:
            running += fraction
            thresholds.append(min(_TWO_64, round(running / total * _TWO_64)))
        thresholds[-1] = _TWO_64  # rounding must never leave a row without a split
        self.thresholds = tuple(thresholds)
        # A row's split is the number of thresholds at or below its hash; the
        # last threshold (2**64) is above every hash.
        self._lower_thresholds = tuple(np.uint64(threshold) for threshold in thresholds
                                       if threshold < _TWO_64)

    def hash_rows(self, keys_or_examples: Sequence[bytes]) -> tuple[list[bytes], np.ndarray]:
        """The digests of many rows, and the same as an (n, 2) array of
        little-endian uint64 words (word 0 picks the split)."""
        # Copying a keyed hasher skips blake2b's keyword parsing per row.
        copy = hashlib.blake2b(key=self.salt, digest_size=HASH_SIZE).copy

        def digest(source: bytes) -> bytes:
            hasher = copy()
            hasher.update(source)
            return hasher.digest()

        digests = list(map(digest, keys_or_examples))
        return digests, _digest_words(digests)

    def hash_batch(self, batch: Sequence, keys_or_examples: Sequence[bytes]
                   ) -> tuple[list[bytes], np.ndarray]:
        """`hash_rows(keys_or_examples)` of an ExampleBatch's rows: the
        batch's own digests when it is a HashedExamples made with this
        dataset's salt."""
        if (isinstance(batch, HashedExamples) and batch.salt == self.salt
                and len(batch.digests) == len(batch) == len(keys_or_examples)):
            return batch.digests, _digest_words(batch.digests)
        return self.hash_rows(keys_or_examples)

    def split_indices(self, words: np.ndarray) -> np.ndarray:
        """The split index of each row, from `hash_rows`' words."""
        splits = np.zeros(len(words), dtype=np.intp)
        for threshold in self._lower_thresholds:
            splits += words[:, 0] >= threshold
        return splits

    def digest(self, key_or_example: bytes) -> bytes:
        return hashlib.blake2b(key_or_example, key=self.salt, digest_size=HASH_SIZE).digest()

    def split_index(self, digest: bytes) -> int:
        return bisect.bisect_right(self.thresholds, int.from_bytes(digest[:8], "little"))

    def split_of(self, key_or_example: bytes) -> str:
        return self.names[self.split_index(self.digest(key_or_example))]


def _digest_words(digests: list[bytes]) -> np.ndarray:
    return np.frombuffer(b"".join(digests), dtype="<u8").reshape(len(digests), 2)


def assign_split(key_or_example: bytes, dataset_name: str,
                 splits: Sequence[tuple[str, float]]) -> str:
    """The split of a row: a stable hash of its key (or, without a key, its
    serialized example) salted by the dataset name, mapped onto the fractions."""
    return SplitAssigner(dataset_name, splits).split_of(key_or_example)


def sample_priority(digest: bytes, size: int) -> int:
    """Priority-sampling weight of a row, in bytes: size / u with u in (0, 1] taken
    from hash bytes 8-15 (independent of the bytes that pick the split and
    dominate the shuffle order)."""
    return (size << 64) // (int.from_bytes(digest[8:16], "little") + 1)


def runs_of(records: Iterable[SpillRecord]) -> list[RunInfo]:
    """The run files named by a split's spill records, with their final
    sizes, in path order."""
    runs: dict[str, RunInfo] = {}
    for record in records:
        known = runs.get(record.path)
        if known is None or record.num_records > known.num_records:
            runs[record.path] = RunInfo(record.split, record.path, record.num_records,
                                        record.num_bytes, record.kept)
    return [runs[path] for path in sorted(runs)]


def sample_of(records: Iterable[SpillRecord], sample_size: int) -> list[SampleEntry]:
    """The distinct sampled rows of a split's spill records, cut to the
    `sample_size` highest priorities (a set: repeats change nothing)."""
    entries = {entry for record in records for entry in record.sample}
    return heapq.nlargest(sample_size, entries)


def plan_bucket_ranges(split: str, total_bytes: int, sample: Iterable[SampleEntry],
                       bucket_bytes: int, *, sample_bytes: int,
                       sample_size: int) -> list[BucketRange]:
    """Cuts a split's key space into about ``total_bytes / bucket_bytes``
    ranges, at most `MAX_BUCKETS`, holding similar byte counts, at weighted
    quantiles of the sample. (Past 4,096 × 32 MB a bucket grows instead:
    what is planned per bucket, the bounds every lane gets and the sizes
    the plan adds up, stays bounded, and a bucket larger than a worker's
    sort memory is merged from its local disk.)

    The sample holds the rows whose priority (see `sample_priority`) reached
    `sample_bytes`, cut to the `sample_size` highest. Each entry stands for
    ``max(size, threshold)`` bytes, the priority-sampling estimate, where
    threshold is the inclusion priority (`sample_bytes`, or the lowest
    priority kept once the sample was cut). The
    boundaries are sample key prefixes, so a key's bucket is decided by its
    prefix alone and equal keys share a bucket.
    """
    entries = sorted(sample, key=lambda entry: (entry.prefix, entry.priority, entry.size))
    wanted = min(MAX_BUCKETS, math.ceil(total_bytes / bucket_bytes)) if total_bytes > 0 else 1
    if wanted <= 1 or not entries:
        return [BucketRange(split, 0, b"", None)]
    threshold = sample_bytes
    if len(entries) >= sample_size:
        threshold = max(threshold, min(entry.priority for entry in entries))
    weights = [max(entry.size, threshold) for entry in entries]
    estimate = sum(weights)
    boundaries: list[bytes] = []
    running = 0
    step = 1
    for entry, weight in zip(entries, weights):
        running += weight
        # The boundary is the next key after the quantile point, so the
        # bucket ends just before it.
        while step < wanted and running >= estimate * step / wanted:
            step += 1
            boundaries.append(entry.prefix)
    boundaries = sorted(set(boundary for boundary in boundaries if boundary))
    edges = [b""] + boundaries + [None]
    return [BucketRange(split, index, edges[index], edges[index + 1])
            for index in range(len(edges) - 1)]


def bucket_bounds_of(keys: Iterable[bytes], count: int, prefix_len: int) -> tuple[bytes, ...]:
    """Lower bounds of about `count` buckets holding equal shares of the
    sampled order `keys` (b"" first): the keys' prefixes at the 1/count
    quantiles, so that, as with `plan_bucket_ranges`, equal prefixes share
    a bucket. For the shuffle exchange's key-ordered plain output, whose
    shards are cut at rows: the bounds spread the sorting over workers and
    never change the bytes."""
    prefixes = sorted(key[:prefix_len] for key in keys)
    if count <= 1 or not prefixes:
        return (b"",)
    picks = {prefixes[len(prefixes) * step // count] for step in range(1, count)}
    return (b"", *sorted(pick for pick in picks if pick))


def plan_shards(split: str, buckets: Iterable[BucketChunks], shard_size: int) -> list[ShardSpec]:
    """Groups a split's chunks, in key order, into shards cut as rows are
    (see "shards cut at rows" below): a chunk belongs to the shard holding
    its bytes' midpoint in the split, among ``min(ceil(bytes on disk /
    shard_size), bytes // largest chunk)`` shards (`row_shard_count`).

    Every shard is then within one chunk of the mean and holds a chunk,
    and a chunk's shard follows from its own place in the split, so a
    worker holding one bucket's chunks places them knowing only the bytes
    before it (`exchange_chunks.PlaceFn`).
    """
    by_index = _one_per_bucket(buckets)
    chunks = [(bucket.path, chunk) for _, bucket in sorted(by_index.items())
              for chunk in bucket.chunks if chunk.num_records]
    if not chunks:
        return []
    lengths = np.array([chunk.length for _, chunk in chunks], dtype=np.int64)
    total = int(lengths.sum())
    count = row_shard_count(total, shard_size, int(lengths.max()))
    shard_of = shards_of_rows(np.cumsum(lengths) - lengths, lengths,
                              row_shard_thresholds(total, count)).tolist()
    selected: list[list[tuple[str, Chunk]]] = [[] for _ in range(count)]
    for shard, chunk in zip(shard_of, chunks):
        selected[shard].append(chunk)
    return [ShardSpec(
        split=split,
        index=shard,
        count=count,
        pieces=_coalesce((path, chunk.offset, chunk.length) for path, chunk in selected[shard]),
        num_examples=sum(chunk.num_records for _, chunk in selected[shard]),
        num_bytes=sum(chunk.length for _, chunk in selected[shard]),
    ) for shard in range(count)]


# -- cells: the chunks of key-ordered gzip output ------------------------------
#
# A key-ordered gzip split is written as chunks, each one gzip member, and
# its shards are cut between chunks once their compressed sizes are known.
# Chunk j holds the rows whose framed bytes' midpoint lies in cell j,
# [j * cell_bytes, (j + 1) * cell_bytes) of the split's framed bytes in key
# order: a function of the rows alone, never of how they were bucketed.
# A bucket compresses the cells that lie within it. A cell holding a
# bucket boundary (a seam) may hold rows of several buckets: each sends
# its rows of that cell, uncompressed, to one place where they are joined
# in bucket order and compressed, giving the bytes one bucket would have.
#
# The chunks of a split are then grouped in units, in key order: the cells
# within bucket b are unit 2b + 1 (`interior_unit`), a seam is unit 2b of
# the last bucket sharing it (`check_seam`), so units sort as their cells.


def cells_of_rows(starts: np.ndarray, sizes: np.ndarray, cell_bytes: int) -> np.ndarray:
    """The cell of each row, from its global start and framed size (int64
    arrays): the one holding its bytes' midpoint, floor((2s + n) / (2 *
    cell_bytes))."""
    return (2 * starts + sizes) // (2 * cell_bytes)


def seam_cells(start: int, size: int, total: int, cell_bytes: int) -> tuple[int, ...]:
    """The cells a bucket of `size` framed bytes from `start` in a split of
    `total` bytes may share with its neighbours: those holding its first
    byte (unless it starts the split) and its end (unless it ends it).

    A row of the bucket before it has its midpoint before `start`, a row
    of this bucket after it, so only the cell of `start` can hold both;
    likewise at the end."""
    cells = []
    if start > 0:
        cells.append(start // cell_bytes)
    end = start + size
    if end < total and end // cell_bytes not in cells:
        cells.append(end // cell_bytes)
    return tuple(cells)


def interior_unit(bucket: int) -> int:
    """The unit of the cells that lie within bucket `bucket`."""
    return 2 * bucket + 1


def check_seam(split: str, cell: int, cell_bytes: int,
               pieces: Sequence[tuple[int, int, int, int]]) -> int:
    """Checks that a seam got a piece from every bucket that may hold its
    rows, and gives its unit. `pieces`: ``(bucket, bucket start, bucket
    end, split total)`` of each bucket that sent one, any order, once each.

    The buckets sending to a seam are consecutive ranges of the split's
    bytes, the first holding the cell's first byte and the last reaching
    past the cell (or ending the split), so a missing one shows as a gap."""
    if not pieces:
        raise ValueError(f"split {split!r}, cell {cell}: a seam without pieces")
    ordered = sorted(pieces)
    where = f"split {split!r}, cell {cell}"
    for (bucket, _, end, _), (following, start, _, _) in zip(ordered, ordered[1:]):
        if end != start:
            raise ValueError(f"{where}: bucket {bucket} ends at byte {end}, the next piece "
                             f"(bucket {following}) starts at {start}")
    last, _, end, total = ordered[-1]
    if ordered[0][1] > cell * cell_bytes or end < min((cell + 1) * cell_bytes, total):
        raise ValueError(f"{where}: the pieces cover bytes {ordered[0][1]}-{end}, not the "
                         f"whole cell")
    return 2 * last


def _one_per_bucket(buckets: Iterable[BucketChunks]) -> dict[int, BucketChunks]:
    """Bucket index -> its BucketChunks. A runner that delivers an output
    twice (seen with Beam's Dask runner) gives a bucket twice, with
    identical bytes: one copy is kept, the same whichever came first."""
    by_index: dict[int, BucketChunks] = {}
    for bucket in buckets:
        if bucket.index not in by_index or bucket.path < by_index[bucket.index].path:
            by_index[bucket.index] = bucket
    return by_index


def bucket_places(buckets: Iterable[BucketChunks]
                  ) -> tuple[list[tuple[BucketChunks, int, int]], int]:
    """A split's buckets that hold rows, in key order, each with its first
    byte in the split and its bytes (the sum of its chunks), and the
    split's total bytes; a bucket delivered twice counts once
    (`_one_per_bucket`)."""
    placed = []
    total = 0
    for _, bucket in sorted(_one_per_bucket(buckets).items()):
        size = sum(chunk.length for chunk in bucket.chunks)
        if size:
            placed.append((bucket, total, size))
            total += size
    return placed, total


def _coalesce(pieces: Iterable[tuple[str, int, int]]) -> tuple[tuple[str, int, int], ...]:
    """Merges byte ranges that continue one another in the same file."""
    merged: list[tuple[str, int, int]] = []
    for path, offset, length in pieces:
        if merged and merged[-1][0] == path and merged[-1][1] + merged[-1][2] == offset:
            merged[-1] = (path, merged[-1][1], merged[-1][2] + length)
        else:
            merged.append((path, offset, length))
    return tuple(merged)


# -- shards cut at rows (all but key-ordered gzip) ------------------------------
#
# When rows are written as plain framed records (or, shuffled, as gzip
# shards counted from the ratio sample), a shard is a run of rows cut where
# the rows' byte midpoints cross i * total / count: row r (global start s,
# framed size n) belongs to shard floor(count * (2s + n) / (2 * total)). That is a function of each row's
# own place in the split alone, so a worker holding any key range of the
# split, and knowing how many bytes come before it, places its rows without
# seeing the others, and the cuts do not depend on how rows were bucketed.


def cuts_at_rows(shuffle: bool, compression: str) -> bool:
    """Whether a split's shards are cut at rows (shuffled output, plain or
    gzip, and key-ordered plain output) rather than at chunks (key-ordered
    gzip output). A plain shard's bytes are its framed rows, so rows cut
    at their place in the split give exact sizes in any order. Gzip
    shards cut at rows are counted from a ratio sample and hold a 1/N
    share of the framed bytes: shuffled, every shard is a random share
    of the split and compresses alike; in key order a shard's rows are a
    range of keys, whose ratio may differ from the next range's, so
    their sizes would miss the ±10% the shards must keep. Key-ordered
    gzip is cut between chunks (cells of the framed bytes), measured once
    compressed."""
    return bool(shuffle) or compression != "gzip"


def row_shard_count(total_bytes: int, shard_size: int, max_row_bytes: int,
                    written_bytes: int | None = None) -> int:
    """Shards of a split cut at rows: ceil(written / shard_size), written
    the bytes the shards will hold on disk (`total_bytes`, the framed
    bytes, when not given; gzip: `estimated_written_bytes`), but never
    more than total // largest row, so that every shard holds a row (each
    shard spans total / count >= the largest row's bytes of midpoints:
    the cut is on the framed bytes, whatever is written)."""
    if total_bytes <= 0:
        return 0
    written = total_bytes if written_bytes is None else written_bytes
    wanted = -(-written // shard_size)
    return max(1, min(wanted, total_bytes // max(1, max_row_bytes)))


# -- the gzip ratio sample (shuffled gzip output) ------------------------------
#
# Gzip shards cut at rows are cut on the framed bytes like plain ones; only
# their number follows the compressed size, estimated from a sample: the
# split's rows whose order key (the 16-byte digest, read big-endian) is
# below a bound K, all of them, in (key, framed record) order, cut to the
# first RATIO_SAMPLE_LIMIT framed bytes. A set defined by content alone,
# so every exchange, bundling and worker count sees the same sample.
#
# K is one constant, not sized to the input: `WriteDataset` cannot know
# its input's size, and must give `build`'s bytes. A bound that followed
# the input sampled 4 MB of a small build but 1/256 of the same rows
# through `WriteDataset`, so the two estimates, and at times the shard
# counts and every byte, differed.

# Rows whose digest starts with six zero bits: 1/64 of a split, so a split
# of 1 GiB or more samples RATIO_SAMPLE_LIMIT and a smaller one 1/64 of its
# rows. Small samples misjudge small splits (benchmarks/bench_ratio_sample.py:
# a 3 MB split's estimate off by up to 3.6% with 1/64, 6.9% with 1/256); at
# most 1/64 of the data, and RATIO_SAMPLE_LIMIT of a bundle, crosses the
# combine.
RATIO_SAMPLE_BOUND = 1 << 122
# The most framed bytes kept in a sample (a bound on the planning step's
# memory, and on what one bundle sends).
RATIO_SAMPLE_LIMIT = 16 << 20
_TWO_128 = 1 << 128


def bound_key(bound: int) -> bytes | None:
    """K as a 16-byte key (digests below it are the keys below these bytes);
    None when K is 2**128 (every digest)."""
    return None if bound >= _TWO_128 else bound.to_bytes(HASH_SIZE, "big")


def rows_below(digests: bytes, bound: int) -> np.ndarray:
    """Positions of the rows whose digest (concatenated HASH_SIZE-byte
    keys) is below `bound`, read big-endian."""
    count = len(digests) // HASH_SIZE
    key = bound_key(bound)
    if key is None:
        return np.arange(count)
    # Fixed-width bytes compare in numpy as their zero-padded bytes do.
    keys = np.frombuffer(digests, dtype=f"S{HASH_SIZE}")
    return np.flatnonzero(keys < np.bytes_(key))


def ratio_sample_rows(digests: bytes, data, sizes: np.ndarray, bound: int
                      ) -> list[tuple[bytes, bytes]]:
    """``(digest, framed record)`` of the rows of a batch or run slice whose
    digest is below `bound` (`rows_below`): digests, the rows' concatenated
    HASH_SIZE-byte keys; data, their framed records back to back; sizes,
    the records' framed sizes."""
    sampled = rows_below(digests, bound).tolist()
    if not sampled:
        return []
    ends = np.cumsum(sizes).tolist()
    view = memoryview(data)
    return [(digests[row * HASH_SIZE:(row + 1) * HASH_SIZE],
             bytes(view[ends[row] - int(sizes[row]):ends[row]])) for row in sampled]


def ratio_sample_of(rows: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The sample from any superset of its rows that holds every row below
    K with a lower key than a row it holds (a bundle's, a bucket's, several
    merged): ``(key, framed record)`` sorted, cut where the framed bytes
    would pass RATIO_SAMPLE_LIMIT. The rows kept are the first of the
    split's own sample, so cutting partial samples changes nothing."""
    ordered = sorted(rows)
    kept, running = [], 0
    for row in ordered:
        running += len(row[1])
        if running > RATIO_SAMPLE_LIMIT:
            break
        kept.append(row)
    return kept


def estimated_written_bytes(total_bytes: int, sample_written: int, sample_bytes: int) -> int:
    """A split's bytes on disk estimated from its sample's: total *
    sample_written // sample_bytes, at least 1 when total > 0; total when
    the sample is empty (ratio 1)."""
    if total_bytes <= 0:
        return 0
    if sample_bytes <= 0:
        return total_bytes
    return max(1, total_bytes * sample_written // sample_bytes)


def row_shard_thresholds(total_bytes: int, count: int) -> np.ndarray:
    """The doubled midpoint (2s + n) from which each shard 1..count-1 starts:
    ceil(2 * total * i / count), as int64 (exact: Python integers)."""
    return np.array([-(-2 * total_bytes * shard // count) for shard in range(1, count)],
                    dtype=np.int64)


def shards_of_rows(starts: np.ndarray, sizes: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """The shard of each row, from its global start and framed size (int64
    arrays) and `row_shard_thresholds`."""
    return np.searchsorted(thresholds, 2 * starts + sizes, "right")


def shards_touched(start: int, end: int, thresholds: np.ndarray) -> range:
    """The shards that rows lying within bytes [start, end) of a split may
    belong to (every row's doubled midpoint is in [2 start + 1, 2 end - 1])."""
    if end <= start:
        return range(0)
    first = int(np.searchsorted(thresholds, 2 * start + 1, "right"))
    last = int(np.searchsorted(thresholds, 2 * end - 1, "right"))
    return range(first, last + 1)


def hash_buckets_of(digests: bytes, count: int) -> np.ndarray:
    """The bucket of each row from its concatenated HASH_SIZE-byte digests:
    `count` equal ranges of the digest order (the first four bytes read
    big-endian), so bucket order is digest order."""
    top = np.frombuffer(digests, dtype=np.dtype([("top", ">u4"), ("rest", f"V{HASH_SIZE - 4}")]))
    return ((top["top"].astype(np.uint64) * np.uint64(count)) >> np.uint64(32)).astype(np.int64)


def plan_row_shards(split: str, buckets: Iterable[BucketChunks], shard_size: int,
                    written_size: Callable[[list], int] | None = None) -> list[ShardSpec]:
    """Shards of a split cut at rows, as described above, from its planned
    buckets' sizes (the sum of their chunks) and largest rows: each shard
    lists, in key order, the buckets that may hold its rows (each bucket's
    first byte in the split from a prefix sum), and which of their rows it
    holds is decided as they are written. Small metadata: a few numbers
    per bucket, nothing per row. written_size (gzip): the bytes on disk
    of the split's ratio sample (`ratio_sample_of` of the buckets'
    ratio_sample), from which the shard count is estimated
    (`estimated_written_bytes`)."""
    placed, total = bucket_places(buckets)
    if not placed:
        return []
    largest = max(bucket.max_row for bucket, _, _ in placed)
    written = None
    if written_size is not None:
        sample = ratio_sample_of(row for bucket, _, _ in placed for row in bucket.ratio_sample)
        written = estimated_written_bytes(total, written_size(sample),
                                          sum(len(record) for _, record in sample))
    count = row_shard_count(total, shard_size, largest, written)
    thresholds = row_shard_thresholds(total, count)
    pieces: list[list[tuple[str, int, int]]] = [[] for _ in range(count)]
    for bucket, start, size in placed:
        for shard in shards_touched(start, start + size, thresholds):
            pieces[shard].append((bucket.path, start, size))
    return [ShardSpec(split, shard, count, tuple(pieces[shard]), -1, -1, (total, count))
            for shard in range(count)]


def batch_columns(batch) -> tuple[Sequence, Sequence[bytes]]:
    """(keys, examples) of an ExampleBatch, checked: examples bytes, keys
    bytes or None. Errors name the row."""
    if not batch:
        return (), ()
    keys, examples = zip(*batch)
    if set(map(type, examples)) != {bytes}:
        for position, (key, example) in enumerate(batch):
            if type(example) is not bytes:
                raise TypeError(f"ExampleBatch row {position} (key {key!r:.80}): example must "
                                f"be bytes, got {type(example).__name__}")
    if not set(map(type, keys)) <= {bytes, type(None)}:
        for position, key in enumerate(keys):
            if key is not None and type(key) is not bytes:
                raise TypeError(f"ExampleBatch row {position}: key must be bytes or None, "
                                f"got {type(key).__name__} {key!r:.80}")
    return keys, examples


class PreparedBatch(NamedTuple):
    """An ExampleBatch's rows as the shard writer sees them, as columns.

    examples: the serialized Examples; order_keys: what each row is sorted
    by (its digest when shuffling, else its key, or its example when it has
    none); splits: each row's split index; sizes: framed sizes (int64);
    samples: split index -> the rows of the batch sampled for bucket
    boundaries; keyed: some row has a key of its own (no shuffle: the order
    keys are not all the examples themselves).
    """

    examples: Sequence[bytes]
    order_keys: Sequence[bytes]
    splits: np.ndarray
    sizes: np.ndarray
    samples: dict
    keyed: bool

    def by_split(self) -> Iterator[tuple[int, np.ndarray, list[int]]]:
        """(split index, row positions as an array, the same as a list) for
        each split the batch has rows of, in split order."""
        for split in np.unique(self.splits).tolist():
            rows = np.flatnonzero(self.splits == split)
            yield split, rows, rows.tolist()


def prepare_batch(assigner: SplitAssigner, batch, *, shuffle: bool, sample_every: int,
                  prefix_len: int) -> PreparedBatch | None:
    """Hashes an ExampleBatch's rows, picks each row's split and order key,
    and samples rows for the bucket boundaries; None for an empty batch.
    The per-row work is done on the whole batch (C loops and numpy); only
    sampled rows are looked at one by one. Every exchange of the shard
    writer starts here, so all of them place rows alike."""
    keys, examples = batch_columns(batch)
    count = len(examples)
    if not count:
        return None
    key_types = set(map(type, keys))
    if type(None) not in key_types:
        sources = keys
    elif bytes not in key_types:
        sources = examples  # no keys: rows are hashed and ordered by content
    else:
        sources = [example if key is None else key for key, example in zip(keys, examples)]
    digests, words = assigner.hash_batch(batch, sources)
    splits = assigner.split_indices(words)
    sizes = np.fromiter(map(len, examples), dtype=np.int64, count=count) + FRAMING
    order_keys = digests if shuffle else sources
    samples = sample_rows(words[:, 1], sizes, splits, order_keys, sample_every=sample_every,
                          prefix_len=prefix_len)
    return PreparedBatch(examples, order_keys, splits, sizes, samples,
                         keyed=not shuffle and sources is not examples)


def sample_rows(words: np.ndarray, sizes: np.ndarray, splits: np.ndarray,
                order_keys: Sequence[bytes], *, sample_every: int,
                prefix_len: int) -> dict[int, list[SampleEntry]]:
    """Priority sampling on content alone: the sample, hence the bucket
    boundaries, never depends on bundling. A row is sampled when
    ``size << 64 >= sample_every * (u64 + 1)`` (u64: hash bytes 8-15, in
    `words`); a float test with slack picks the candidates, the exact test
    decides. Returns split index -> sampled rows."""
    scale = float(1 << 64) / sample_every * (1 + 1e-9)
    candidates = np.flatnonzero(words.astype(np.float64) <= sizes * scale + 2)
    samples: dict[int, list[SampleEntry]] = {}
    for row in candidates.tolist():
        size = int(sizes[row])
        u64 = int(words[row])
        if (size << 64) >= sample_every * (u64 + 1):
            samples.setdefault(int(splits[row]), []).append(
                SampleEntry((size << 64) // (u64 + 1), order_keys[row][:prefix_len], size))
    return samples
