"""Bucket bounds for key-ordered output, from rows read before the run.

On a runner with the shuffle exchange, key-ordered rows must reach the
worker that sorts their key range. Without bounds known in advance they
cross the shuffle once more, to wait for a sample of their whole split
(`transforms.exchange`): 4 bytes moved per dataset byte instead of 3
(plain; gzip, of compression ratio c: 2 + 3c instead of 1 + 3c).
A build can learn bounds before the pipeline starts, as sorting jobs
usually do. It reads, from the driver:

- from tables, the first rows of some of its files (`SAMPLE_FILES` of
  them, spread over the sorted listing, `SAMPLE_ROWS` in all), converted
  as the pipeline will convert them (`BatchConverter`, so that keys are
  the same bytes). From Parquet files it reads the first pages of the
  columns the keys need only: the key column, or without a key the
  features' columns, whose examples are then the keys (every column of a
  row starts a page of its own, about 1 MB, and a row group is often
  hundreds of MB); `SAMPLE_FILES` column heads in all;
- from images keyed by a column the listing gives (`path`, `label`),
  nothing: the keys of up to `SAMPLE_ROWS` listed images, spread over the
  listing, are made from those values as the pipeline makes them
  (`BatchConverter.key_of`);
- from images keyed by what only the image gives, or not keyed (the
  examples are the keys), `SAMPLE_IMAGES` images spread over the
  listing, read and converted as the pipeline will.

It takes the quantiles of the order keys (`writer.bucket_bounds_of`).
`WriteDataset`, whose input is a PCollection, takes them from rows its
caller gives (`bounds_of_rows`).

Plain shards are cut at rows and gzip ones at cells of the split's
framed bytes, so the bounds never change the output: a
sample that misjudges the keys (files sorted by key and only their heads
read) only gives some workers more rows to sort than others, each
within its memory budget and local disk. The cost is a read of at most
`SAMPLE_FILES` file heads, in `HEAD_BLOCK` reads (an object store client
would otherwise fetch tens of MB at the first read), about `SAMPLE_BYTES`
in all (rows of image bytes give fewer rows, not a longer read), or of
`SAMPLE_IMAGES` images, however large the input.
"""

from __future__ import annotations

import concurrent.futures
import itertools
from typing import Callable, Iterable, Mapping, Sequence

from fsspec.core import url_to_fs

from .config import DatasetConfig
from ..schemas.dead_letters import RowError
from ..transforms.batch_converter import BatchConverter
from ..transforms.readers.common import display_name
from ..transforms.readers.image_items import ImageItem, plan_images, read_image_items
from ..transforms.readers.listing import list_files
from ..transforms.readers.parquet import read_parquet_head
from ..transforms.readers.rows import ColumnBatch, SourceRow
from ..transforms.readers.tables import iter_table
from ..transforms.writer import ShardTuning, bucket_bounds_of

__all__ = ["HEAD_BLOCK", "READERS", "SAMPLE_BYTES", "SAMPLE_FILES", "SAMPLE_IMAGES",
           "SAMPLE_ROWS", "bounds_of_rows", "sample_bucket_bounds", "uses_sampled_bounds"]

# Most input files whose first rows are read, and most rows read in all.
SAMPLE_FILES = 256
SAMPLE_ROWS = 1 << 16
# Most images read when their keys need the image (about 2 per bucket at
# the default 256 buckets: a coarse balance, which changes no byte).
SAMPLE_IMAGES = 512
# Files read at once.
READERS = 8
# Read block of a sampled file, so that a head costs about what is read
# rather than a store client's readahead (s3fs fetches 50 MB at a time).
HEAD_BLOCK = 1 << 20
# Bytes of rows read from the sampled files in all (each read in whole
# blocks): wide rows (image bytes in a table) give fewer rows, not a
# longer read.
SAMPLE_BYTES = 1 << 26
# Columns of image rows that the listing gives, without reading an image.
_LISTED_IMAGE_COLUMNS = ("path", "label")


def uses_sampled_bounds(config: DatasetConfig, exchange: str) -> bool:
    """Whether a build of `config` on `exchange` ("files" or "shuffle")
    routes key-ordered rows by bounds sampled before the run: key-ordered
    output on the shuffle exchange (the file exchange plans its buckets
    from its own runs). The bounds never change the bytes: plain shards
    are cut at rows, gzip ones at cells of the split's framed bytes."""
    output = config.output
    return exchange == "shuffle" and not output.shuffle


def sample_bucket_bounds(config: DatasetConfig, vocabularies: Mapping[str, Sequence[str]],
                         tuning: ShardTuning, input_bytes: int | None = None
                         ) -> tuple[bytes, ...]:
    """Bucket lower bounds (b"" first) for `ShardTuning.key_bucket_count`
    buckets (`tuning.hash_buckets`, fewer for gzip output of a small
    `input_bytes`), from the order keys of a sample of the source (see the
    module docstring): the keys as the pipeline's conversion gives them,
    or the examples when the config has no key. A source with no usable
    row gives one bucket."""
    if config.source.type == "images":
        keys = _image_keys(config, vocabularies)
    else:
        keys = _table_keys(config, vocabularies)
    count = tuning.key_bucket_count(compression=config.output.compression,
                                    shard_size=config.output.shard_size,
                                    input_bytes=input_bytes)
    return bucket_bounds_of(keys, count, tuning.prefix_len)


def bounds_of_rows(config: DatasetConfig, vocabularies: Mapping[str, Sequence[str]],
                   rows: Iterable[Mapping], tuning: ShardTuning) -> tuple[bytes, ...]:
    """Bucket lower bounds, as `sample_bucket_bounds` gives them, from
    `rows` (raw row dicts, as `WriteDataset` takes them): up to
    `SAMPLE_ROWS` of them, converted as the pipeline converts rows; rows
    that fail their checks are left out."""
    sample = [SourceRow("key sample", row, dict(values)) for row, values
              in enumerate(itertools.islice(rows, SAMPLE_ROWS), start=1)]
    converter = BatchConverter(config.features, vocabularies, config.key)
    return bucket_bounds_of(_keys_of_rows(converter, sample), tuning.hash_buckets,
                            tuning.prefix_len)


def _table_keys(config: DatasetConfig, vocabularies: Mapping[str, Sequence[str]]
                ) -> list[bytes]:
    """The order keys of the first rows of up to `SAMPLE_FILES` table
    files, read `READERS` at a time (object stores answer slowly, not
    little). Rows that fail their checks are left out, and so are those
    the reader cannot read (a file that vanished or is no table gives a
    dead letter, which the pipeline reports)."""
    source = config.source
    fs, files = list_files(source.path, tuple(source.extensions) or None)
    parquet = source.type == "parquet"
    # Parquet: a page per column read, so SAMPLE_FILES column heads in all.
    columns = _columns_of_keys(config) if parquet else ()
    chosen = _spread(files, max(1, SAMPLE_FILES // max(1, len(columns))))
    if not chosen:
        return []
    per_file = -(-SAMPLE_ROWS // len(chosen))
    budget = SAMPLE_BYTES // len(chosen)

    def head(fs_path: str) -> list[SourceRow]:
        source_name = display_name(fs, fs_path)
        heads = _HeadReads(fs)
        if parquet:
            return read_parquet_head(fs_path, per_file, columns, max_bytes=budget, fs=heads,
                                     source=source_name)
        rows = iter_table(fs_path, source.type, source.csv, fs=heads, source=source_name)
        try:
            return _first_rows(rows, per_file, lambda: heads.position() < budget)
        finally:
            rows.close()  # the rest of the file is never read

    converter = BatchConverter(config.features, vocabularies, config.key)
    keys: list[bytes] = []
    with concurrent.futures.ThreadPoolExecutor(READERS) as pool:
        for rows in pool.map(head, chosen):
            if parquet and config.key is not None:
                keys += _keys_of_values(converter, [row.values.get(config.key)
                                                    for row in rows])
            else:
                keys += _keys_of_rows(converter, rows)
    return keys


def _columns_of_keys(config: DatasetConfig) -> tuple[str, ...]:
    """The columns a row's order key is made from: the key column, or
    without a key the columns of the features (the example is the key)."""
    if config.key is not None:
        return (config.key,)
    return tuple(dict.fromkeys(spec.column for spec in config.features))


def _image_keys(config: DatasetConfig, vocabularies: Mapping[str, Sequence[str]]
                ) -> list[bytes]:
    """The order keys of up to `SAMPLE_ROWS` listed images, from the
    column (path or label) the listing gives, or, keyed by what only the
    image gives, of up to `SAMPLE_IMAGES` images read and converted as
    the pipeline will; an image the pipeline would refuse is left out."""
    source = config.source
    batches, _ = plan_images(source.path, source.extensions, source.labels)
    items = [item for batch in batches for item in batch]
    converter = BatchConverter(config.features, vocabularies, config.key)
    if config.key in _LISTED_IMAGE_COLUMNS:
        return _keys_of_values(converter, [item.rel if config.key == "path" else item.label
                                           for item in _spread(items, SAMPLE_ROWS)])
    chosen = _spread(items, SAMPLE_IMAGES)
    fs = url_to_fs(source.path)[0]

    def read(part: list[ImageItem]) -> list[SourceRow]:
        return _first_rows(read_image_items(fs, part, source.image), len(part))

    parts = [chosen[index::READERS] for index in range(READERS)]
    keys: list[bytes] = []
    with concurrent.futures.ThreadPoolExecutor(READERS) as pool:
        for rows in pool.map(read, parts):
            keys += _keys_of_rows(converter, rows)
    return keys


def _spread(items: Sequence, most: int) -> list:
    """At most `most` of `items`, evenly spaced over them, the first included."""
    count = min(len(items), most)
    return [items[index * len(items) // count] for index in range(count)]


def _keys_of_rows(converter: BatchConverter, rows: list[SourceRow]) -> list[bytes]:
    """The order keys of `rows` as the pipeline gives them (the example
    when there is no key); rows that fail their checks are left out."""
    examples, _ = converter.convert_batch(rows)
    return [example if key is None else key for key, example in examples]


def _keys_of_values(converter: BatchConverter, values: Iterable) -> list[bytes]:
    """The order keys of rows holding these values in the key column; a
    value the pipeline would refuse as a key is left out."""
    keys = []
    for value in values:
        try:
            keys.append(converter.key_of(value))
        except RowError:
            continue
    return keys


class _HeadReads:
    """`fs`, opening files with `HEAD_BLOCK` read blocks and keeping them,
    so that a head can tell how far into its file it has read."""

    def __init__(self, fs):
        self._fs = fs
        self._opened: list = []

    def open(self, path: str, mode: str = "rb", **kwargs):
        handle = self._fs.open(path, mode, block_size=HEAD_BLOCK, **kwargs)
        self._opened.append(handle)
        return handle

    def position(self) -> int:
        """Bytes read so far from the files still open (decompressed; a
        handle that cannot tell counts none, leaving the row limit)."""
        read = 0
        for handle in self._opened:
            try:
                read += 0 if handle.closed else handle.tell()
            except (OSError, ValueError):
                continue
        return read

    def __getattr__(self, name: str):
        return getattr(self._fs, name)


def _first_rows(items: Iterable, count: int,
                within_budget: Callable[[], bool] | None = None) -> list[SourceRow]:
    """The first `count` good rows a table reader gives (dead letters
    skipped), fewer once `within_budget()` says no."""
    rows: list[SourceRow] = []
    for item in items:
        if isinstance(item, ColumnBatch):
            rows.extend(itertools.islice(item, count - len(rows)))
        elif isinstance(item, SourceRow):
            rows.append(item)
        if len(rows) >= count or (within_budget is not None and not within_budget()):
            break
    return rows
