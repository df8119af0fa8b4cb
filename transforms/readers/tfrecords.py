"""The TFRecord reader: existing tf.Example files (plain or gzip) as rows and dead letters.

Read without TensorFlow by the project's own codec (`transforms.tfrecord`:
both CRCs of every record checked; gzip found by suffix or by sniffing) and
Example parser (`schemas.example.example_values`). A row's values are its
features in name order, name -> list of values (int64 as int, float as the
float32 value, bytes as bytes), which the schema then checks like any other row: a
one-element list fills a scalar feature. ``row`` is the record's 1-based
index in the file; each file is one unit of work.

A record that is not an Example is an ``example_invalid`` dead letter and
reading goes on. A damaged frame (bad length or data CRC, a record cut
short, broken gzip) is one ``tfrecord_corrupt`` dead letter naming the byte
offset (in the uncompressed stream) and record index; the records after it
cannot be framed and are not read.
"""

from __future__ import annotations

from typing import Iterator

import fsspec

from ...schemas.example import ExampleDecodeError, example_values
from ..tfrecord import TFRecordError, iter_records
from .common import (READ_ERRORS, empty_file, open_file, open_range, read_dead_letter,
                     read_error, resolve)
from .rows import SourceRow

__all__ = ["iter_tfrecords"]


def _open_tfrecord(fs: fsspec.AbstractFileSystem, fs_path: str):
    """`fs_path` opened for the codec: gzip (by suffix, or sniffed in a file
    without one) is left to the codec, which keeps the records before a
    damaged stretch and reports it as ``tfrecord_corrupt`` with its offset;
    fsspec's decompressor would raise on the read holding the damage and
    lose every record decompressed with it. Other compressions fsspec knows
    are decompressed by fsspec."""
    if fsspec.utils.infer_compression(fs_path) in (None, "gzip"):
        return fs.open(fs_path, "rb")
    return open_file(fs, fs_path)


def iter_tfrecords(path: str, *, fs: fsspec.AbstractFileSystem | None = None,
                   source: str | None = None) -> Iterator[SourceRow | dict]:
    """The rows and read dead letters of one TFRecord file (see the module)."""
    fs, fs_path, source = resolve(path, fs, source)
    index = 0
    try:
        # (read through once: it then leaves the page cache, `open_range`)
        with open_range(fs, fs_path, 0, None, opener=_open_tfrecord) as f:
            try:
                for record in iter_records(f, path=fs_path, compression="auto"):
                    index += 1
                    try:
                        features = example_values(record)
                    except ExampleDecodeError as exc:
                        yield read_dead_letter(
                            source, index, "example_invalid",
                            f"{source} record {index}: {exc}", {"record": index})
                        continue
                    yield SourceRow(source, index, features)
            except TFRecordError as exc:
                yield read_dead_letter(
                    source, exc.record_index + 1, "tfrecord_corrupt",
                    f"{source}: {exc.problem} at byte offset {exc.offset} (record "
                    f"{exc.record_index + 1}); the rest of the file is not read",
                    {"offset": exc.offset, "record": exc.record_index + 1}, rows=None)
                return
            if index == 0:
                yield empty_file(source)
    except READ_ERRORS as exc:
        yield read_error(source, index + 1 if index else None, exc)
