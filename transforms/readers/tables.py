"""Table files in units of work: plan a file into byte ranges or row-group spans, read one unit.

The formats and their readers are registered here (`TABLE_FORMATS`,
`iter_table`, `read_range`, `read_table_columns`): a new table format is a
reader module beside `csv`, `jsonl` and `parquet` plus its entries below. A unit depends
only on the file's content, and each row's content not on how the file was
cut, so listing order and parallelism do not change what is read.
"""

from __future__ import annotations

from typing import Iterable, Iterator, NamedTuple, Sequence

import fsspec
import xxhash

from ...schemas.row_encoder import dig
from . import avro, csv, json_array, jsonl, parquet, tfrecords
from .csv_dialect import CsvOptions, iter_csv_dialect, read_dialect_header
from .common import READ_ERRORS, display_name, is_compressed
from .inputs import fingerprint, hashes_locally, input_fingerprint, xxh3_token
from .listing import list_files
from .ranges import SplitPoint, scan_split_points
from .rows import ColumnBatch, SourceRow

__all__ = [
    "DEFAULT_RANGE_BYTES",
    "FileRange",
    "RangeScan",
    "TABLE_FORMATS",
    "iter_table",
    "plan_fingerprinted",
    "plan_table_ranges",
    "read_range",
    "read_table_columns",
    "scan_distinct",
    "split_ranges",
]

TABLE_FORMATS = ("csv", "jsonl", "json", "parquet", "avro", "tfrecord")
# Formats read a whole file per unit: no record boundaries can be found
# without parsing from the start.
_WHOLE_FILE_FORMATS = ("json", "avro", "tfrecord")
# Small enough that one big file is several units for a multi-worker runner
# (a 100 MB CSV: 7), large enough that per-unit costs (an open and a seek)
# stay negligible.
DEFAULT_RANGE_BYTES = 16 << 20


class FileRange(NamedTuple):
    """One unit of table reading.

    fs_path: the file in its filesystem; source: its display name.
    CSV/JSONL: byte range [start, end) (end None: to the end of the file) and
    start_line, the line `start` is on. Parquet: row groups [start, end)
    (end None: all) and start_line None.
    """

    fs_path: str
    source: str
    start: int
    end: int | None
    start_line: int | None


def iter_table(path: str, format: str, options: CsvOptions | None = None,
               **kwargs) -> Iterator[SourceRow | dict]:
    """The rows of one table file by `format` name (`iter_csv`, `iter_jsonl`,
    `iter_json_array`, `iter_parquet`); `options`: a CSV dialect other than
    the default is read by `iter_csv_dialect` (whole files only)."""
    if format == "csv" and options is not None and not options.is_default:
        return iter_csv_dialect(path, options, fs=kwargs.get("fs"), source=kwargs.get("source"))
    whole = {"json": json_array.iter_json_array, "avro": avro.iter_avro,
             "tfrecord": tfrecords.iter_tfrecords}
    if format in whole:
        return whole[format](path, fs=kwargs.get("fs"), source=kwargs.get("source"))
    readers = {"csv": csv.iter_csv, "jsonl": jsonl.iter_jsonl, "parquet": parquet.iter_parquet}
    if format not in readers:
        raise ValueError(f"unknown table format {format!r}; expected one of "
                         f"{list(TABLE_FORMATS)}")
    return readers[format](path, **kwargs)


def _whole_files(format: str, options: CsvOptions | None) -> bool:
    return format in _WHOLE_FILE_FORMATS or (
        format == "csv" and options is not None and not options.is_default)


def plan_table_ranges(fs: fsspec.AbstractFileSystem, fs_path: str, format: str,
                      range_bytes: int = DEFAULT_RANGE_BYTES,
                      options: CsvOptions | None = None) -> list[FileRange]:
    """Splits one table file into reading units: ~`range_bytes` byte ranges at
    record boundaries (CSV/JSONL; compressed files are one unit) or spans of
    row groups of ~`range_bytes` (Parquet). A file that cannot be inspected is
    one unit; reading it then reports the problem."""
    source = display_name(fs, fs_path)
    whole = [FileRange(fs_path, source, 0, None, None if format == "parquet" else 1)]
    if not range_bytes or range_bytes <= 0 or _whole_files(format, options):
        return whole
    try:
        if format == "parquet":
            return _plan_parquet(fs, fs_path, source, range_bytes) or whole
        if is_compressed(fs_path) or fs.size(fs_path) <= range_bytes:
            return whole
        points = scan_split_points(fs_path, range_bytes, quote_aware=format == "csv", fs=fs)
    except (*READ_ERRORS, ValueError):
        return whole
    return split_ranges(fs_path, source, points)


def split_ranges(fs_path: str, source: str, points: Sequence[SplitPoint]) -> list[FileRange]:
    """The units between consecutive split points (`scan_split_points`),
    the last to the end of the file."""
    ends = [p.offset for p in points[1:]] + [None]
    return [FileRange(fs_path, source, p.offset, end, p.line) for p, end in zip(points, ends)]


class RangeScan(NamedTuple):
    """How `plan_table_ranges` cuts a build's files (`format`,
    `range_bytes`, `options`), for a reader of a file's every byte to find
    the split points as it hashes them (`plan_fingerprinted`, and before
    the pipeline `inputs.ContentTokens`)."""

    format: str
    range_bytes: int = DEFAULT_RANGE_BYTES
    options: CsvOptions | None = None

    def fuses(self, fs: fsspec.AbstractFileSystem, fs_path: str, size: int) -> bool:
        """Whether hashing the file and planning it both read it whole, so
        that one read does both: a local CSV or JSONL file, not compressed,
        of more than `range_bytes` (`size`), cut into byte ranges."""
        return (hashes_locally(fs) and self.format in ("csv", "jsonl")
                and not _whole_files(self.format, self.options)
                and (self.range_bytes or 0) > 0
                and not is_compressed(fs_path) and size > self.range_bytes)

    def hash_and_split(self, fs: fsspec.AbstractFileSystem, fs_path: str
                       ) -> tuple[str, tuple[SplitPoint, ...]] | None:
        """(content token, split points) of a file it `fuses`, in one read;
        None when that read fails (hashing it alone then says how)."""
        digest = xxhash.xxh3_128()
        try:
            points = scan_split_points(fs_path, self.range_bytes,
                                       quote_aware=self.format == "csv", fs=fs, digest=digest)
        except (*READ_ERRORS, ValueError):
            return None
        return xxh3_token(digest), tuple(points)


def plan_fingerprinted(fs: fsspec.AbstractFileSystem, fs_path: str, format: str,
                       range_bytes: int = DEFAULT_RANGE_BYTES,
                       options: CsvOptions | None = None
                       ) -> tuple[list[FileRange] | None, dict]:
    """(`plan_table_ranges`, `inputs.input_fingerprint`) of one file, equal
    to the two calls', in one read of its bytes where both would read them
    all (`RangeScan.fuses`). Otherwise (and where that read fails: the
    calls then say how) ``(None, input_fingerprint(...))``: the caller
    plans with `plan_table_ranges` if it needs the units (planning reads
    little then: a Parquet footer, at most)."""
    entry = fingerprint(fs, fs_path)
    scan = RangeScan(format, range_bytes, options)
    if not entry.get("missing") and scan.fuses(fs, fs_path, entry["size"]):
        fused = scan.hash_and_split(fs, fs_path)
        if fused is not None:
            entry["content"], points = fused
            return split_ranges(fs_path, entry["path"], points), entry
    return None, input_fingerprint(fs, fs_path)


def _plan_parquet(fs, fs_path: str, source: str, range_bytes: int) -> list[FileRange]:
    groups = parquet.parquet_row_groups(fs_path, fs=fs)
    ranges, first, size = [], 0, 0
    for index, (_, group_bytes) in enumerate(groups):
        if index > first and size + group_bytes > range_bytes:
            ranges.append(FileRange(fs_path, source, first, index, None))
            first, size = index, 0
        size += group_bytes
    if groups:
        ranges.append(FileRange(fs_path, source, first, len(groups), None))
    return ranges


def read_range(fs: fsspec.AbstractFileSystem, unit: FileRange, format: str,
               options: CsvOptions | None = None) -> Iterator[SourceRow | ColumnBatch | dict]:
    """The rows and read dead letters of one `FileRange` (`options`: the CSV
    dialect)."""
    if format == "tfrecord":
        return tfrecords.iter_tfrecords(unit.fs_path, fs=fs, source=unit.source, columns=True)
    if format == "csv" and options is not None and not options.is_default:
        return iter_csv_dialect(unit.fs_path, options, fs=fs, source=unit.source, columns=True)
    if _whole_files(format, options):
        return iter_table(unit.fs_path, format, options, fs=fs, source=unit.source)
    if format == "parquet":
        groups = None if unit.end is None else range(unit.start, unit.end)
        return parquet.iter_parquet(unit.fs_path, row_groups=groups, fs=fs,
                                    source=unit.source, columns=True)
    if format == "csv":
        return csv.iter_csv(unit.fs_path, start=unit.start, end=unit.end,
                            start_line=unit.start_line, fs=fs, source=unit.source,
                            columns=True)
    if format == "jsonl":
        return jsonl.iter_jsonl(unit.fs_path, start=unit.start, end=unit.end,
                                start_line=unit.start_line, fs=fs, source=unit.source,
                                columns=True)
    return iter_table(unit.fs_path, format, start=unit.start, end=unit.end,
                      start_line=unit.start_line, fs=fs, source=unit.source)


def scan_distinct(path: str, format: str, column: str | Sequence[str],
                  extensions: Iterable[str] | None = None,
                  options: CsvOptions | None = None,
                  null_values: Iterable[str] | None = None) -> list[str]:
    """Sorted distinct values (as strings) of `column` over every readable row of
    the tables at `path` (listed by `list_files`: in a directory, the files
    with one of `extensions`, None: every file); rows without the column or
    with null are skipped, and so are `null_values`. `column` may be a
    path of keys into nested values.
    Used for ``vocabulary: auto`` before a run."""
    fs, files = list_files(path, extensions)
    keys = (column,) if isinstance(column, str) else tuple(column)
    nulls = set(null_values or ())
    values: set[str] = set()
    for fs_path in files:
        for item in iter_table(fs_path, format, options, fs=fs,
                               source=display_name(fs, fs_path)):
            if isinstance(item, SourceRow):
                value = dig(item.values, keys)
                if isinstance(value, list) and len(value) == 1:
                    value = value[0]  # a TFRecord feature's one value
                if isinstance(value, bytes):
                    value = value.decode("utf-8", "replace")
                if value is not None and value not in nulls:
                    values.add(value if isinstance(value, str) else str(value))
    return sorted(values)


def read_table_columns(fs: fsspec.AbstractFileSystem, fs_path: str, format: str,
                       options: CsvOptions | None = None) -> list[str] | None:
    """The columns a table file's rows will hold, read as its reader reads them
    (a CSV header or `source.csv.columns`, a Parquet schema), or None when
    that is not known without reading every row (JSONL, JSON) or the file has
    no usable header or footer."""
    if format == "csv" and options is not None and not options.is_default:
        return read_dialect_header(fs_path, options, fs=fs)
    if format == "csv":
        return csv.read_csv_header(fs_path, fs=fs)
    if format == "parquet":
        return parquet.read_parquet_columns(fs_path, fs=fs)
    if format == "avro":
        return avro.read_avro_columns(fs_path, fs=fs)
    return None
