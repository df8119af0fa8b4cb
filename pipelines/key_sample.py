"""Bucket bounds for key-ordered plain output, from rows read before the run.

On a runner with the shuffle exchange, key-ordered rows must reach the
worker that sorts their key range. Without bounds known in advance they
cross the shuffle once more, to wait for a sample of their whole split
(`transforms.exchange`): 4 bytes moved per dataset byte instead of 3.
A build that reads tables can learn bounds before the pipeline starts,
as sorting jobs usually do: it reads the first rows of some of its files
(`SAMPLE_FILES` of them, spread over the sorted listing, `SAMPLE_ROWS` in
all), converts them as the pipeline will (`BatchConverter`, so that keys
are the same bytes), and takes the quantiles of their order keys
(`shard_plan.bucket_bounds_of`).

Such shards are cut at rows, so the bounds never change the output: a
sample that misjudges the keys (files sorted by key and only their heads
read) only gives some workers more rows to sort than others, each
within its memory budget and local disk. The cost is a read of at most
`SAMPLE_FILES` file heads from the driver, however large the input.
"""

from __future__ import annotations

import itertools
from typing import Iterable, Mapping, Sequence

from .config import DatasetConfig
from ..transforms.batch_converter import BatchConverter
from ..transforms.readers.common import display_name
from ..transforms.readers.listing import list_files
from ..transforms.readers.rows import ColumnBatch, SourceRow
from ..transforms.readers.tables import iter_table
from ..transforms.shard_plan import bucket_bounds_of
from ..transforms.shards import ShardTuning

__all__ = ["SAMPLE_FILES", "SAMPLE_ROWS", "sample_bucket_bounds", "uses_sampled_bounds"]

# Most input files whose first rows are read, and most rows read in all.
SAMPLE_FILES = 256
SAMPLE_ROWS = 1 << 16
# Table formats read as streams: their first rows cost only those rows.
_STREAMED = ("csv", "jsonl", "parquet")


def uses_sampled_bounds(config: DatasetConfig, exchange: str) -> bool:
    """Whether a build of `config` on `exchange` ("files" or "shuffle")
    routes key-ordered rows by bounds sampled before the run: key-ordered
    plain output read from tables of a streamed format, on the shuffle
    exchange (the file exchange plans its buckets from its own runs)."""
    source, output = config.source, config.output
    streamed = source.type in _STREAMED and (source.type != "csv" or source.csv is None
                                             or source.csv.is_default)
    return (exchange == "shuffle" and not output.shuffle and output.compression != "gzip"
            and streamed)


def sample_bucket_bounds(config: DatasetConfig, vocabularies: Mapping[str, Sequence[str]],
                         tuning: ShardTuning) -> tuple[bytes, ...]:
    """Bucket lower bounds (b"" first) for `tuning.hash_buckets` buckets,
    from the order keys of the first rows of up to `SAMPLE_FILES` of the
    source's table files: each row's key, or its example when the config
    has no key, as the pipeline's conversion gives them. Rows that fail
    their checks are left out; a source with no readable row gives one
    bucket."""
    source = config.source
    fs, files = list_files(source.path, tuple(source.extensions) or None)
    if not files:
        return (b"",)
    chosen = [files[index * len(files) // min(len(files), SAMPLE_FILES)]
              for index in range(min(len(files), SAMPLE_FILES))]
    per_file = -(-SAMPLE_ROWS // len(chosen))
    converter = BatchConverter(config.features, vocabularies, config.key)
    keys: list[bytes] = []
    for fs_path in chosen:
        rows = iter_table(fs_path, source.type, source.csv, fs=fs,
                          source=display_name(fs, fs_path))
        try:
            batch = _first_rows(rows, per_file)
        finally:
            close = getattr(rows, "close", None)
            if close is not None:
                close()  # the rest of the file is never read
        examples, _ = converter.convert_batch(batch)
        keys.extend(example if key is None else key for key, example in examples)
    return bucket_bounds_of(keys, tuning.hash_buckets, tuning.prefix_len)


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
