"""The TFRecord reader: existing tf.Example files (plain or gzip) as rows and dead letters.

Read without TensorFlow by the project's own codec (`transforms.tfrecord`:
both CRCs of every record checked; gzip found by suffix or by sniffing) and
Example parser (`schemas.example.example_values`). A row's values are its
features in name order, name -> list of values (int64 as int, float as the
float32 value, bytes as bytes), which the schema then checks like any other row: a
one-element list fills a scalar feature. ``row`` is the record's 1-based
index in the file; each file is one unit of work.

With ``columns=True`` (how a build reads) the rows come as
`ExampleRunBatch`es, a block of records' bytes each, whose values are made
only when asked for: the native table kernel converts a batch from its
bytes in one call (`transforms/native_rows.py`).

A record that is not an Example is an ``example_invalid`` dead letter and
reading goes on. A damaged frame (bad length or data CRC, a record cut
short, broken gzip) is one ``tfrecord_corrupt`` dead letter naming the byte
offset (in the uncompressed stream) and record index; the records after it
cannot be framed and are not read.
"""

from __future__ import annotations

from typing import Iterator, Sequence

import fsspec
import numpy as np

from ...schemas.example import ExampleDecodeError, example_values
from ...schemas.native import kernels
from ..tfrecord import FOOTER_SIZE, HEADER_SIZE, TFRecordError, iter_record_runs, iter_records
from .common import (READ_ERRORS, empty_file, open_file, open_range, read_dead_letter,
                     read_error, resolve)
from .rows import RawRowsBatch, SourceRow

__all__ = ["ExampleRunBatch", "iter_tfrecords"]


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
                   source: str | None = None, columns: bool = False
                   ) -> Iterator[SourceRow | ExampleRunBatch | dict]:
    """The rows and read dead letters of one TFRecord file (see the module).
    columns: give the rows as `ExampleRunBatch`es (the records' bytes, a
    block at a time) rather than one `SourceRow` each."""
    fs, fs_path, source = resolve(path, fs, source)
    read = [0]  # the records read so far (the Example dead letters among them)
    try:
        # (read through once: it then leaves the page cache, `open_range`)
        with open_range(fs, fs_path, 0, None, opener=_open_tfrecord) as f:
            try:
                if columns:
                    yield from _record_batches(f, fs_path, source, kernels(), read)
                else:
                    yield from _record_rows(f, fs_path, source, read)
            except TFRecordError as exc:
                yield read_dead_letter(
                    source, exc.record_index + 1, "tfrecord_corrupt",
                    f"{source}: {exc.problem} at byte offset {exc.offset} (record "
                    f"{exc.record_index + 1}); the rest of the file is not read",
                    {"offset": exc.offset, "record": exc.record_index + 1}, rows=None)
                return
            if read[0] == 0:
                yield empty_file(source)
    except READ_ERRORS as exc:
        yield read_error(source, read[0] + 1 if read[0] else None, exc)


def _not_an_example(source: str, index: int, error: ExampleDecodeError) -> dict:
    return read_dead_letter(source, index, "example_invalid", f"{source} record {index}: {error}",
                            {"record": index})


def _record_rows(f, fs_path: str, source: str, read: list[int]) -> Iterator[SourceRow | dict]:
    """One `SourceRow` (or dead letter) per record; `read[0]` counts them."""
    for record in iter_records(f, path=fs_path, compression="auto"):
        read[0] += 1
        try:
            features = example_values(record)
        except ExampleDecodeError as exc:
            yield _not_an_example(source, read[0], exc)
            continue
        yield SourceRow(source, read[0], features)


def _record_batches(f, fs_path: str, source: str, native, read: list[int]
                    ) -> Iterator[ExampleRunBatch | dict]:
    """An `ExampleRunBatch` of each block's records (and a dead letter per
    record that is not an Example, between the batches of the records
    around it); `read[0]` counts the records. Without the kernels (`native`
    None) every record is read at once, its values kept in the batch, as
    the row path reads it; with them, only the records the kernel leaves
    to protobuf (`example_run_check`): the others are Examples, read when
    something asks for their values."""
    for run, block_ends, block_first in iter_record_runs(f, path=fs_path, compression="auto"):
        ends = np.asarray(block_ends, dtype=np.int64) - block_first
        count, first = len(ends), read[0] + 1
        read[0] += count
        batch = ExampleRunBatch(source, run, ends, range(first, first + count))
        odd = native.example_run_check(run, count) if native is not None else None
        if odd is None:  # (no kernel, or not the framing the reader gave: all read here)
            odd = range(count)
        if not odd:
            yield batch
            continue
        batch._values = [None] * count
        start = 0  # the first record not yet handed out (in file order)
        for index in odd:
            try:
                batch._values[index] = example_values(batch.record(index))
            except ExampleDecodeError as exc:
                if start < index:
                    yield batch.sliced(start, index)
                start = index + 1
                yield _not_an_example(source, first + index, exc)
        if start < count:
            yield batch.sliced(start, count)


class ExampleRunBatch(RawRowsBatch):
    """TFRecord rows of `source` as their framed records, back to back as
    the file holds them (`run`; `ends`: where each record ends in it), and
    their record indices (`rows`: a range, or a list where records that
    are not Examples were left out). The native table kernel converts the
    run in one call (`transforms/native_rows.py`); the rows' Python values
    (`example_values`, as the reader without the kernel gives them) are
    made only when something asks for them, so the batch equals the
    SourceRows the plain reader gives and pickles without them. Rows need
    not hold the same features. The reader gives a batch per block it
    reads, with the kernel and without; `sources.outputs.batched` joins and
    cuts them into batches by the bytes of their records (`concatenated`,
    `cut`), which both paths see alike, so that every batch, and so every
    statistic, is the same on both."""

    __slots__ = ("ends", "run")

    def __init__(self, source: str, run: bytes, ends: np.ndarray, rows: Sequence[int],
                 values: list[dict | None] | None = None):
        if len(ends) != len(rows) or (values is not None and len(values) != len(rows)):
            raise ValueError(f"{source}: {len(ends)} records, {len(rows)} record numbers")
        self.source, self.first_row, self._size = source, rows[0] if len(rows) else 1, len(rows)
        self.run, self.ends, self.rows, self._values = run, ends, rows, values

    def record(self, index: int) -> bytes:
        """Record `index`'s data (its Example's bytes)."""
        start = int(self.ends[index - 1]) if index else 0
        return self.run[start + HEADER_SIZE:int(self.ends[index]) - FOOTER_SIZE]

    def _parse(self, index: int) -> dict:
        try:
            return example_values(self.record(index))
        except ExampleDecodeError as exc:
            # The reader kept only records that are Examples: one refused
            # now is a bug, not a bad row; RECORDFORGE_PURE_PYTHON=1 reads
            # the file without the kernel.
            raise RuntimeError(f"{self.source} record {self.rows[index]}: read as an "
                               f"Example, refused when its values were asked for") from exc

    @property
    def num_bytes(self) -> int:
        """The bytes of its framed records: what a batch is cut by."""
        return len(self.run)

    def cut(self, batch_bytes: int) -> tuple[list[ExampleRunBatch], ExampleRunBatch | None]:
        """(batches, rest): the rows in batches of at least `batch_bytes` (> 0)
        bytes of records, each ending with the record that brings it there,
        and the rows after the last of them (fewer bytes; None when there
        are none)."""
        batches, start, begin = [], 0, 0
        while True:
            # (the first record that ends `batch_bytes` or more past `begin`)
            at = int(np.searchsorted(self.ends, begin + batch_bytes, side="left"))
            if at >= self._size:
                break
            batches.append(self.sliced(start, at + 1))
            start, begin = at + 1, int(self.ends[at])
        return batches, self.sliced(start, self._size) if start < self._size else None

    def sliced(self, start: int, stop: int) -> ExampleRunBatch:
        """Its rows `start` to `stop`."""
        stop = min(stop, self._size)
        start = min(start, stop)
        if start == 0 and stop == self._size:
            return self
        begin = int(self.ends[start - 1]) if start else 0
        end = int(self.ends[stop - 1]) if stop else 0
        return ExampleRunBatch(self.source, self.run[begin:end], self.ends[start:stop] - begin,
                               self.rows[start:stop],
                               None if self._values is None else self._values[start:stop])

    @classmethod
    def concatenated(cls, batches: list[ExampleRunBatch]) -> ExampleRunBatch:
        """The rows of `batches` (of one file), in order, as one batch."""
        if len(batches) == 1:
            return batches[0]
        batches, rows, values = cls._joined(batches)
        shifts = np.cumsum([0] + [len(batch.run) for batch in batches[:-1]])
        return cls(batches[0].source, b"".join(batch.run for batch in batches),
                   np.concatenate([batch.ends + shift for batch, shift in zip(batches, shifts)]),
                   rows, values)

    def __reduce__(self):
        return (ExampleRunBatch, (self.source, self.run, self.ends, self.rows))

    def __repr__(self) -> str:
        return f"ExampleRunBatch({self.source!r}, {self._size} rows from record {self.first_row})"
