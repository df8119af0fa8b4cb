"""Bucket bounds for key-ordered plain output, from rows read before the run.

On a runner with the shuffle exchange, key-ordered rows must reach the
worker that sorts their key range. Without bounds known in advance they
cross the shuffle once more, to wait for a sample of their whole split
(`transforms.exchange`): 4 bytes moved per dataset byte instead of 3.
A build can learn bounds before the pipeline starts, as sorting jobs
usually do:

- from tables, it reads the first rows of some of its files
  (`SAMPLE_FILES` of them, spread over the sorted listing, `SAMPLE_ROWS`
  in all) and converts them as the pipeline will (`BatchConverter`, so
  that keys are the same bytes); from Parquet files, the first values of
  the key column only (every column of a row starts a page of its own,
  about 1 MB, and a row group is often hundreds of MB), made into keys as
  the pipeline makes them (`BatchConverter.key_of`);
- from images keyed by a column the listing gives (`path`, `label`), it
  reads nothing: the keys of up to `SAMPLE_ROWS` listed images, spread
  over the listing, are made from those values as the pipeline makes
  them (`BatchConverter.key_of`);

and takes the quantiles of the order keys (`shard_plan.bucket_bounds_of`).

Such shards are cut at rows, so the bounds never change the output: a
sample that misjudges the keys (files sorted by key and only their heads
read) only gives some workers more rows to sort than others, each
within its memory budget and local disk. The cost is a read of at most
`SAMPLE_FILES` file heads from the driver, in `HEAD_BLOCK` reads (an
object store client would otherwise fetch tens of MB at the first read),
about 1-2 MB each (images: none), however large the input.
"""

from __future__ import annotations

import concurrent.futures
import itertools
from typing import Iterable, Mapping, Sequence

from .config import DatasetConfig
from ..schemas.dead_letters import RowError
from ..transforms.batch_converter import BatchConverter
from ..transforms.readers.common import display_name
from ..transforms.readers.image_items import plan_images
from ..transforms.readers.listing import list_files
from ..transforms.readers.parquet import read_parquet_column_head
from ..transforms.readers.rows import ColumnBatch, SourceRow
from ..transforms.readers.tables import iter_table
from ..transforms.shard_plan import bucket_bounds_of
from ..transforms.shards import ShardTuning

__all__ = ["HEAD_BLOCK", "READERS", "SAMPLE_FILES", "SAMPLE_ROWS", "sample_bucket_bounds",
           "uses_sampled_bounds"]

# Most input files whose first rows are read, and most rows read in all.
SAMPLE_FILES = 256
SAMPLE_ROWS = 1 << 16
# Files read at once.
READERS = 8
# Read block of a sampled file, so that a head costs about what is read
# rather than a store client's readahead (s3fs fetches 50 MB at a time).
HEAD_BLOCK = 1 << 20
# Columns of image rows that the listing gives, without reading an image.
_LISTED_IMAGE_COLUMNS = ("path", "label")


def uses_sampled_bounds(config: DatasetConfig, exchange: str) -> bool:
    """Whether a build of `config` on `exchange` ("files" or "shuffle")
    routes key-ordered rows by bounds sampled before the run: key-ordered
    plain output read from tables (Parquet: keyed by a column), or from
    images keyed by their path or label, on the shuffle exchange (the
    file exchange plans its buckets from its own runs)."""
    source, output = config.source, config.output
    if source.type == "images":
        known = config.key in _LISTED_IMAGE_COLUMNS
    else:
        # Every table reader streams, so a file's first rows cost only those
        # rows; but a Parquet row's columns each start a page of their own,
        # so only a key column is read there.
        known = source.type != "parquet" or config.key is not None
    return (exchange == "shuffle" and not output.shuffle and output.compression != "gzip"
            and known)


def sample_bucket_bounds(config: DatasetConfig, vocabularies: Mapping[str, Sequence[str]],
                         tuning: ShardTuning) -> tuple[bytes, ...]:
    """Bucket lower bounds (b"" first) for `tuning.hash_buckets` buckets,
    from the order keys of a sample of the source (see the module
    docstring; `uses_sampled_bounds` says which sources can give one): the
    keys as the pipeline's conversion gives them, or the examples when the
    config has no key. A source with no usable row gives one bucket."""
    if config.source.type == "images":
        keys = _image_keys(config, vocabularies)
    else:
        keys = _table_keys(config, vocabularies)
    return bucket_bounds_of(keys, tuning.hash_buckets, tuning.prefix_len)


def _table_keys(config: DatasetConfig, vocabularies: Mapping[str, Sequence[str]]
                ) -> list[bytes]:
    """The order keys of the first rows of up to `SAMPLE_FILES` table
    files, read `READERS` at a time (object stores answer slowly, not
    little). Rows that fail their checks are left out, and so are those
    the reader cannot read (a file that vanished or is no table gives a
    dead letter, which the pipeline reports)."""
    source = config.source
    fs, files = list_files(source.path, tuple(source.extensions) or None)
    chosen = _spread(files, SAMPLE_FILES)
    if not chosen:
        return []
    per_file = -(-SAMPLE_ROWS // len(chosen))

    heads = _SmallBlocks(fs)
    parquet = source.type == "parquet"

    def head(fs_path: str) -> list:
        if parquet:  # the key column's first pages, not the first row group
            return read_parquet_column_head(fs_path, config.key, per_file, fs=heads)
        rows = iter_table(fs_path, source.type, source.csv, fs=heads,
                          source=display_name(fs, fs_path))
        try:
            return _first_rows(rows, per_file)
        finally:
            rows.close()  # the rest of the file is never read

    converter = BatchConverter(config.features, vocabularies, config.key)
    keys: list[bytes] = []
    with concurrent.futures.ThreadPoolExecutor(READERS) as pool:
        for found in pool.map(head, chosen):
            if parquet:
                keys += _keys_of_values(converter, found)
                continue
            examples, _ = converter.convert_batch(found)
            keys.extend(example if key is None else key for key, example in examples)
    return keys


def _image_keys(config: DatasetConfig, vocabularies: Mapping[str, Sequence[str]]
                ) -> list[bytes]:
    """The order keys of up to `SAMPLE_ROWS` listed images, from the
    column (path or label) the listing gives; an image whose key the
    pipeline would refuse is left out."""
    source = config.source
    batches, _ = plan_images(source.path, source.extensions, source.labels)
    chosen = _spread([item for batch in batches for item in batch], SAMPLE_ROWS)
    converter = BatchConverter(config.features, vocabularies, config.key)
    return _keys_of_values(converter, [item.rel if config.key == "path" else item.label
                                       for item in chosen])


def _spread(items: Sequence, most: int) -> list:
    """At most `most` of `items`, evenly spaced over them, the first included."""
    count = min(len(items), most)
    return [items[index * len(items) // count] for index in range(count)]


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


class _SmallBlocks:
    """`fs`, but opening files with `HEAD_BLOCK` read blocks."""

    def __init__(self, fs):
        self._fs = fs

    def open(self, path: str, mode: str = "rb", **kwargs):
        return self._fs.open(path, mode, block_size=HEAD_BLOCK, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self._fs, name)


def _first_rows(items: Iterable, count: int) -> list[SourceRow]:
    """The first `count` good rows a table reader gives (dead letters skipped)."""
    rows: list[SourceRow] = []
    for item in items:
        if isinstance(item, ColumnBatch):
            rows.extend(itertools.islice(item, count - len(rows)))
        elif isinstance(item, SourceRow):
            rows.append(item)
        if len(rows) >= count:
            break
    return rows
