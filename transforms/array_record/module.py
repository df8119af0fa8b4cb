"""The `array_record` package, loaded only when a build or a reader asks for ArrayRecord.

The core package never imports it: a TFRecord build, and every reader of
TFRecord versions, runs without it installed.
"""

from __future__ import annotations

import importlib

__all__ = ["FILE_FORMATS", "RANDOM_ACCESS_OPTIONS", "WRITER_OPTIONS", "ArrayRecordMissing",
           "array_record_module", "check_file_format", "require_array_record"]

# The shard file formats a build may write (`output.format`).
FILE_FORMATS = ("tfrecord", "array_record")

# group_size:1 puts every record in its own chunk, so reading one record
# decodes only that record: the random access Grain's data source asks for
# (it warns on any other group size), and what TFDS writes. zstd:1: each
# record is compressed on its own, and on Examples of about 1.3 KB zstd
# level 1 wrote 3.2x as fast as the package's default brotli:6 (48 against
# 15 MB/s) for 4% more bytes, and as small as zstd:3 at 1.5x its speed
# (docs/DESIGN.md, "ArrayRecord output"). max_parallelism:1 encodes chunks
# on the calling thread: Beam's workers are the parallelism, and no writer
# thread pool per worker competes with them. The bytes depend only on the
# records and these options (tests/transforms/array_record).
WRITER_OPTIONS = "group_size:1,zstd:1,max_parallelism:1"

# The reader's options for random access, as the package's own data source
# sets them: no readahead, no threads.
RANDOM_ACCESS_OPTIONS = "readahead_buffer_size:0,max_parallelism:0"

_MODULE = "array_record.python.array_record_module"


class ArrayRecordMissing(ImportError):
    """The `array_record` package is not installed, yet ArrayRecord was asked for."""


def check_file_format(file_format: str) -> None:
    """Raises ValueError unless `file_format` is one of `FILE_FORMATS`."""
    if file_format not in FILE_FORMATS:
        raise ValueError(f"file_format must be one of {FILE_FORMATS}, got {file_format!r}")


def array_record_module():
    """The package's ``array_record_module`` (ArrayRecordWriter,
    ArrayRecordReader); raises `ArrayRecordMissing` saying how to install it."""
    try:
        return importlib.import_module(_MODULE)
    except ImportError as error:
        raise ArrayRecordMissing(
            "ArrayRecord files need the array_record package, which is not installed "
            f"({error}); install it with: pip install 'recordforge[array_record]'") from None


def require_array_record() -> None:
    """Raises `ArrayRecordMissing` unless the package can be imported."""
    array_record_module()
