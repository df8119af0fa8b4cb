"""The steps both ways through the shuffle exchange share: the first and the last.

`PackFn` turns an ExampleBatch into packets (`shuffle_packets`), one
per split it holds, or one per split and bucket when a row's bucket is
known as it is packed (hash buckets, or key bounds given before the
run), with what the plan needs of them (sizes, and for gzip the rows in
the split's ratio sample; or the split's bucket-bound sample).
`ShardFileFn` is the base of the shard-writing step both ways end with
(`shuffle_rows.WriteCutShardFn`): where shards go, their counters, and
publishing one assembled shard (`shard_files.publish_shard`).
"""

from __future__ import annotations

import os

import apache_beam as beam
import numpy as np

from .. import tfrecord
from ..layout import SHARD_FILE_NAME, shard_suffix
from ..splits import HASH_SIZE, SplitAssigner
from . import row_order, run_format
from .bucket_plan import hash_buckets_of
from .prepare import prepare_batch
from .ratio_sample import ratio_sample_rows
from .shard_files import publish_shard, shard_metadata
from .shuffle_packets import SIZE_DTYPE, bucket_of_keys, bucket_sizes, cut_packet, row_digests
from .step_setup import ShardCounters, counter, set_up_worker

__all__ = ["BucketSortFn", "PackFn", "ShardFileFn"]


class PackFn(beam.DoFn):
    """ExampleBatch -> per split in the batch: ("stats", (split, (rows,
    bytes, sample))) and ("rows", ((split, lane), ("rows", packet))); or,
    with `hash_buckets` (shuffled output) or `key_bounds` (key-ordered
    plain output whose bucket bounds are known before the run), ("sizes",
    (split, (buckets, rows, bytes, digests, largest row, ratio sample))) and
    ("rows", ((split, bucket), ("rows", packet))) per bucket the batch's
    rows fall in. The ratio sample: with `ratio_bound` (gzip), ``((digest,
    framed record), ...)`` of the batch's rows whose digest is below it
    (`ratio_sample.ratio_sample_rows`); else empty."""

    def __init__(self, dataset_name: str, splits, shuffle: bool, tuning,
                 hash_buckets: int | None = None, ratio_bound: int | None = None,
                 key_bounds: tuple[bytes, ...] | None = None):
        self._dataset_name = dataset_name
        self._splits = tuple(splits)
        self._shuffle = shuffle
        self._tuning = tuning
        self._hash_buckets = hash_buckets
        self._ratio_bound = ratio_bound
        self._key_bounds = key_bounds

    def setup(self):
        set_up_worker(rows_die_young=True)
        self._assigner = SplitAssigner(self._dataset_name, self._splits)
        self._rows = counter("rows_spilled")
        self._exchanged = counter("exchange_bytes")
        self._lane = int.from_bytes(os.urandom(4), "little")

    def process(self, batch):
        prepared = prepare_batch(self._assigner, batch, shuffle=self._shuffle,
                                 sample_every=self._tuning.sample_every(),
                                 prefix_len=self._tuning.prefix_len)
        if prepared is None:
            return
        names = self._assigner.names
        for split, rows, selected in prepared.by_split():
            examples = row_order.take(prepared.examples, selected)
            sizes = prepared.sizes[rows]
            if self._shuffle:
                width = HASH_SIZE
                keys = b"".join(row_order.take(prepared.order_keys, selected))
            elif prepared.keyed:
                width = run_format.KEY_VARIABLE
                keys = tuple(row_order.take(prepared.order_keys, selected))
            else:
                width, keys = run_format.KEY_IS_EXAMPLE, None
            data = tfrecord.frame_records(examples)
            packet = (width, keys, data, sizes.astype(SIZE_DTYPE).tobytes())
            self._exchanged.inc(len(data))
            buckets = self._buckets(width, keys, examples)
            if buckets is not None:
                # (digested as soon as framed, while the records are in cache)
                digests = row_digests(data, sizes)
                yield from self._by_bucket(names[split], packet, sizes, buckets, digests)
                continue
            # Lanes only spread the waiting rows over workers: any lane will
            # do, and none changes the output.
            self._lane += 1
            yield ("rows", ((names[split], self._lane % self._tuning.lanes), ("rows", packet)))
            yield ("stats", (names[split], (len(selected), int(sizes.sum()),
                                            tuple(prepared.samples.get(split, ())))))
        self._rows.inc(len(prepared.examples))

    def _buckets(self, width: int, keys, examples) -> np.ndarray | None:
        """Each row's bucket when it is known as the row is packed (hash
        buckets, or key bounds given before the run); None: lanes."""
        if self._hash_buckets:
            return hash_buckets_of(keys, self._hash_buckets)
        if self._key_bounds:
            return bucket_of_keys(self._key_bounds, width, examples if keys is None else keys)
        return None

    def _by_bucket(self, split: str, packet: tuple, sizes: np.ndarray, buckets: np.ndarray,
                   digests: np.ndarray):
        for bucket, piece in cut_packet(packet, buckets):
            yield ("rows", ((split, bucket), ("rows", piece)))
        yield ("sizes", (split, (*bucket_sizes(buckets, sizes, digests),
                                 self._ratio_sample(packet, sizes))))

    def _ratio_sample(self, packet: tuple, sizes: np.ndarray) -> tuple:
        if self._ratio_bound is None:
            return ()
        _, keys, data, _ = packet
        sample = tuple(ratio_sample_rows(keys, data, sizes, self._ratio_bound))
        # They cross the shuffle beside the counts (at most, as the combine
        # may cut a bundle's sample first).
        self._exchanged.inc(sum(len(record) for _, record in sample))
        return sample


class BucketSortFn(beam.DoFn):
    """What the steps that sort a bucket's packets share (`sorted_bucket`):
    their worker set-up and the exchange counter."""

    def setup(self):
        set_up_worker(rows_die_young=True)
        self._exchanged = counter("exchange_bytes")


class ShardFileFn(beam.DoFn):
    """What the two shard-writing steps share: where shards go, the
    counters, and publishing one assembled shard (`_published`)."""

    def __init__(self, staging_dir: str, temp_dir: str, compression: str, memory_bytes: int,
                 gzip_level: int = tfrecord.DEFAULT_GZIP_LEVEL, index: bool = False,
                 file_format: str = "tfrecord"):
        self._staging_dir = staging_dir
        self._file_format = file_format
        self._temp_dir = temp_dir
        self._compression = compression
        self._memory_bytes = memory_bytes
        self._index = index
        self._gzip_level = gzip_level

    def setup(self):
        set_up_worker()
        self._counters = ShardCounters()

    def _name(self, split: str, index: int, count: int) -> str:
        return SHARD_FILE_NAME.format(split=split, index=index, count=count,
                                      suffix=shard_suffix(self._compression,
                                                          self._file_format))

    def _published(self, split: str, name: str, write, num_examples: int) -> dict:
        """Publishes the shard `write(out)` writes (`num_examples` records,
        which it returns), with its index file when asked; its metadata dict."""
        shard = publish_shard(name, write, staging_dir=self._staging_dir,
                              temp_dir=self._temp_dir, compression=self._compression,
                              index=self._index, file_format=self._file_format)
        self._counters.count(num_examples, shard.num_bytes)
        return shard_metadata(split, name, shard)
