"""The checked config as frozen dataclasses, and the defaults they start from."""

from __future__ import annotations

import dataclasses
from typing import Any

from ...schemas.features import FeatureSpec
from .about import AboutConfig
from .cache import CacheConfig
from .validation import ValidationConfig

__all__ = [
    "DEFAULT_EXTENSIONS",
    "DEFAULT_MAX_ERROR_RATE",
    "DEFAULT_SHARD_SIZE",
    "IMAGE_COLUMNS",
    "LARGE_SHARD_SIZE",
    "NESTED_SOURCE_TYPES",
    "MIN_SHARD_SIZE",
    "SOURCE_TYPES",
    "ConfigWarning",
    "DatasetConfig",
    "DeadLetterConfig",
    "OutputConfig",
    "SourceConfig",
]

SOURCE_TYPES = ("images", "csv", "jsonl", "json", "parquet", "avro", "tfrecord")

# Sources whose rows may hold nested values, so that a dotted `from:` is a
# path of keys (elsewhere it is one column's name).
NESTED_SOURCE_TYPES = ("jsonl", "json", "parquet", "avro")


# The columns an image row offers (the product contract's list).
IMAGE_COLUMNS = ("image", "path", "label", "height", "width", "channels", "format")


DEFAULT_SHARD_SIZE = 256 * 10**6


MIN_SHARD_SIZE = 10**6


# Above this a shard is awkward to copy, checksum or retry; allowed, but said.
LARGE_SHARD_SIZE = 4 * 2**30


DEFAULT_MAX_ERROR_RATE = 0.01


DEFAULT_EXTENSIONS = {
    "images": (".jpg", ".jpeg", ".png"),
    "csv": (".csv",),
    "jsonl": (".jsonl", ".ndjson"),
    "json": (".json",),
    "parquet": (".parquet",),
    "avro": (".avro",),
    "tfrecord": (".tfrecord", ".tfrecords"),  # and their .gz files
}


class ConfigWarning(UserWarning):
    """A config that is valid but probably not what was meant."""


@dataclasses.dataclass(frozen=True)
class SourceConfig:
    """Where rows come from.

    type: "images" | "csv" | "jsonl" | "parquet".
    path: local path (absolute) or fsspec URL; tables: file, glob or directory.
    labels: images only: "directory" (parent folder name) or a csv/jsonl table
      with columns file,label; None for tables.
    extensions: lower-case file suffixes with their dot, used when listing a directory.
    image: image checks and transforms (images only), else None.
    csv: the CSV dialect (`readers.csv_dialect.CsvOptions`; csv only), else None.
    null_values: `source.csv.null_values` when it is not the default ``[""]``.
    """

    type: str
    path: str
    labels: str | None = None
    extensions: tuple[str, ...] = ()
    image: Any = None  # recordforge.transforms.images.ImageOptions
    csv: Any = None  # recordforge.transforms.readers.csv_dialect.CsvOptions
    null_values: tuple[str, ...] | None = None


@dataclasses.dataclass(frozen=True)
class OutputConfig:
    """Where and how the dataset is written.

    path: local path (absolute) or fsspec URL of the dataset root.
    compression: "gzip" | "none".
    file_format: "tfrecord" | "array_record" (``output.format``).
    shard_size: target bytes per shard file as written.
    shuffle: True orders rows by stable key hash, False by key.
    index: every shard gets ``<shard>.index`` (uncompressed output only).
    shard_count_multiple: each split's shard count is a multiple of it.
    """

    path: str
    compression: str = "none"
    shard_size: int = DEFAULT_SHARD_SIZE
    shuffle: bool = True
    index: bool = False
    shard_count_multiple: int = 1
    file_format: str = "tfrecord"


@dataclasses.dataclass(frozen=True)
class DeadLetterConfig:
    """The error budget: above it the build fails and nothing is published.

    max_error_rate: fraction of input rows allowed to fail, in [0, 1].
    max_errors: absolute cap on failed rows, or None for no cap.
    """

    max_error_rate: float = DEFAULT_MAX_ERROR_RATE
    max_errors: int | None = None


@dataclasses.dataclass(frozen=True)
class DatasetConfig:
    """A checked dataset config.

    version: the template as written (may hold {date} / {datetime});
      `recordforge.pipelines.publish.resolve_version` expands it.
    splits: (name, fraction) pairs in config order; fractions sum to 1.
    key: the column whose value assigns split and order, or None (row content).
    validation: statistics on or off and the gates (the ``validation:`` section).
    cache: the build cache (the ``cache:`` section).
    about: the description, license and citation (the ``dataset:`` section).
    resolved: the whole config as plain JSON-safe data (defaults filled,
      overrides applied, paths as written) for the manifest.
    """

    name: str
    version: str
    source: SourceConfig | None  # None: rows handed over by a pipeline (WriteDataset)
    features: tuple[FeatureSpec, ...]
    splits: tuple[tuple[str, float], ...]
    key: str | None
    output: OutputConfig
    dead_letter: DeadLetterConfig
    validation: ValidationConfig = ValidationConfig()
    cache: CacheConfig = CacheConfig()
    about: AboutConfig = AboutConfig()
    resolved: dict = dataclasses.field(default_factory=dict, compare=False)

    @property
    def split_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.splits)
