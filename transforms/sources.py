"""Beam sources: table files (CSV, JSONL, Parquet) and image directories.

`ReadTable` and `ReadImages` are applied to a pipeline (``p | ReadTable(...)``)
and return `ReadOutputs`:

* ``rows``: RowBatch elements, ``list[SourceRow]`` of up to `batch_size` rows,
  or a `ColumnBatch` (the rows of a plain CSV block or a Parquet record batch,
  column by column; it iterates as SourceRows);
* ``dead_letter``: one dead-letter dict per input row that could not be read;
* ``counts``: ``(source, rows_read)`` pairs; every input row is counted once,
  whether it became a SourceRow or a dead letter, so their sum is the number of
  input rows.

Both start from a ``beam.Create`` of the path (not an Impulse-rooted IO, which
the Dask runner cannot run) and work in three steps: list and plan small work
descriptors (byte ranges of CSV/JSONL files, row-group spans of Parquet files,
lists of image paths), ``Reshuffle`` the descriptors so a multi-worker runner
spreads them, then read each descriptor in a DoFn that emits batches. Work is
planned from sorted listings and each row's content does not depend on how the
work was split, so listing order and parallelism do not change what is read.

The DoFns have one output of ``(tag, value)`` pairs that labelled filters split
into rows, dead letters and counts, instead of ``with_outputs``: Beam's Dask
runner (2.77) puts every tagged output of a ParDo into every output PCollection.

Paths go through fsspec (local paths, ``memory://``, ``gs://``, ``s3://`` ...).
A table `path` is a file, a glob or a directory (every file below it, sorted);
names starting with ``.`` or ``_`` (``_SUCCESS``, ``.crc`` files) are skipped.
Image sources are a directory: every file below it whose extension matches
(case-insensitively), hidden names skipped. On local disks symbolic links to
directories are not followed (so loops cannot hang listing; one inside the root
is an alias of a directory listed anyway); a link to a file inside the root is
read like a file; a link, to a file or directory, leading outside the root is a
``path_outside_root`` dead letter; a dangling link is a ``read_error``.

Image rows hold ``path`` (relative to the root, ``/``-separated), ``label``
(always a string) and the columns of `images.image_columns`. Labels come from
the parent folder's name (``labels="directory"``; images directly in the root
are ``unlabeled_image``) or from a labels table (CSV or JSONL with columns
``file`` and ``label``; ``file`` relative to the root). Labels-table rows that
are not usable become dead letters of their own: unreadable lines, a missing
``file``/``label`` or a file listed twice (``labels_invalid``), an absolute or
``..`` path (``path_outside_root``), a file that is not among the listed images
(``read_error``). Planning holds the listing and the labels table in memory
(about 200 bytes per image); image bytes are only ever held one batch at a time.
"""

from __future__ import annotations

import os
import posixpath
import re
from typing import Any, Iterable, Iterator, NamedTuple

import apache_beam as beam
import fsspec
from fsspec.implementations.local import LocalFileSystem

from ..schemas.dead_letters import RowError, dead_letter
from . import table_readers
from .batch_coder import Batch, TaggedBatch
from .gc_tuning import relax_young_collections
from .images import ImageOptions, image_columns
from .page_cache import read_file_once
from .rows import ColumnBatch, SourceRow
from .table_readers import READ_ERRORS, display_name, read_error
from .urls import redact_url

__all__ = [
    "DEFAULT_IMAGE_BATCH_SIZE",
    "DEFAULT_RANGE_BYTES",
    "FileRange",
    "ImageItem",
    "ReadImages",
    "ReadOutputs",
    "ReadTable",
    "TABLE_FORMATS",
    "known_labels",
    "list_files",
    "list_images",
    "plan_images",
    "plan_table_ranges",
    "read_image_items",
    "read_labels_table",
    "read_range",
    "scan_distinct",
    "source_bytes",
]

TABLE_FORMATS = ("csv", "jsonl", "parquet")
# Small enough that one big file is several units for a multi-worker runner
# (a 100 MB CSV: 7), large enough that per-unit costs (an open and a seek)
# stay negligible.
DEFAULT_RANGE_BYTES = 16 << 20
# Image rows carry their bytes: ~64 images of ~30 KB keep a batch at a few MB.
DEFAULT_IMAGE_BATCH_SIZE = 64

_ROWS = "rows"
_DEAD = "dead_letter"
_COUNTS = "counts"
_UNIT = "unit"


class ReadOutputs(NamedTuple):
    """What a source gives: RowBatches, dead letters, (source, rows_read)."""

    rows: beam.PCollection
    dead_letter: beam.PCollection
    counts: beam.PCollection


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


class ImageItem(NamedTuple):
    """One image to read: its path in the filesystem, relative path, label."""

    fs_path: str
    rel: str
    label: str


# ---------------------------------------------------------------------------
# Listing

def _hidden(name: str) -> bool:
    return name.startswith((".", "_"))


def _image_hidden(name: str) -> bool:
    return name.startswith(".")


def list_files(path: str) -> tuple[fsspec.AbstractFileSystem, list[str]]:
    """The files `path` names, sorted: the file itself, the matches of a glob,
    or every file below a directory (in globs and directories, names starting
    with ``.``/``_`` are skipped).
    Returns the filesystem and its paths."""
    fs, root = fsspec.core.url_to_fs(path)
    if _has_magic(root):
        # fsspec globs, unlike shells, match hidden names: skip them as listing does.
        return fs, sorted(p for p in fs.glob(root)
                          if not _hidden(posixpath.basename(p)) and fs.isfile(p))
    if fs.isdir(root):
        return fs, sorted(fs_path for fs_path, rel in _walk(fs, root, _hidden))
    if fs.exists(root):
        return fs, [root]
    return fs, []


def _has_magic(path: str) -> bool:
    return re.search(r"[*?\[]", path) is not None


def _walk(fs: fsspec.AbstractFileSystem, root: str, hidden) -> Iterator[tuple[str, str]]:
    """(fs_path, rel) of the regular files below `root`, no symlinks followed."""
    root = root.rstrip("/") or "/"
    if isinstance(fs, LocalFileSystem):
        for fs_path, rel, kind in _walk_local(root, hidden):
            if kind == "file":
                yield fs_path, rel
        return
    prefix = root.rstrip("/") + "/"
    for fs_path in fs.find(root):
        if not fs_path.startswith(prefix):
            continue
        rel = fs_path[len(prefix):]
        if not any(hidden(part) for part in rel.split("/")):
            yield fs_path, rel


def _walk_local(root: str, hidden) -> Iterator[tuple[str, str, str]]:
    """Walks a local directory without following directory links. Yields
    ``(path, rel, kind)``; kind is "file" (a file, or a link to a file inside
    the root), "outside" (a link leading out of the root) or "dangling" (a link
    to nothing). Directory links inside the root are skipped: they alias
    directories that are listed anyway (or loops)."""
    real_root = os.path.realpath(root)

    def inside(real: str) -> bool:
        return os.path.commonpath([real_root, real]) == real_root

    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        rel_dir = "" if rel_dir == "." else rel_dir.replace(os.sep, "/") + "/"
        kept = []
        for name in sorted(dirnames):
            if hidden(name):
                continue
            full = os.path.join(dirpath, name)
            if os.path.islink(full):
                if not inside(os.path.realpath(full)):
                    yield full, rel_dir + name, "outside"
                continue
            kept.append(name)
        dirnames[:] = kept
        for name in sorted(filenames):
            if hidden(name):
                continue
            full = os.path.join(dirpath, name)
            if os.path.islink(full):
                real = os.path.realpath(full)
                if not os.path.exists(real):
                    yield full, rel_dir + name, "dangling"
                    continue
                if not inside(real):
                    yield full, rel_dir + name, "outside"
                    continue
            yield full, rel_dir + name, "file"


# ---------------------------------------------------------------------------
# Tables

def plan_table_ranges(fs: fsspec.AbstractFileSystem, fs_path: str, format: str,
                      range_bytes: int = DEFAULT_RANGE_BYTES) -> list[FileRange]:
    """Splits one table file into reading units: ~`range_bytes` byte ranges at
    record boundaries (CSV/JSONL; compressed files are one unit) or spans of
    row groups of ~`range_bytes` (Parquet). A file that cannot be inspected is
    one unit; reading it then reports the problem."""
    source = display_name(fs, fs_path)
    whole = [FileRange(fs_path, source, 0, None, None if format == "parquet" else 1)]
    if not range_bytes or range_bytes <= 0:
        return whole
    try:
        if format == "parquet":
            return _plan_parquet(fs, fs_path, source, range_bytes) or whole
        if table_readers.is_compressed(fs_path) or fs.size(fs_path) <= range_bytes:
            return whole
        points = table_readers.scan_split_points(
            fs_path, range_bytes, quote_aware=format == "csv", fs=fs)
    except (*READ_ERRORS, ValueError):
        return whole
    ends = [p.offset for p in points[1:]] + [None]
    return [FileRange(fs_path, source, p.offset, end, p.line) for p, end in zip(points, ends)]


def _plan_parquet(fs, fs_path: str, source: str, range_bytes: int) -> list[FileRange]:
    groups = table_readers.parquet_row_groups(fs_path, fs=fs)
    ranges, first, size = [], 0, 0
    for index, (_, group_bytes) in enumerate(groups):
        if index > first and size + group_bytes > range_bytes:
            ranges.append(FileRange(fs_path, source, first, index, None))
            first, size = index, 0
        size += group_bytes
    if groups:
        ranges.append(FileRange(fs_path, source, first, len(groups), None))
    return ranges


def read_range(fs: fsspec.AbstractFileSystem, unit: FileRange, format: str
               ) -> Iterator[SourceRow | ColumnBatch | dict]:
    """The rows and read dead letters of one `FileRange`."""
    if format == "parquet":
        groups = None if unit.end is None else range(unit.start, unit.end)
        return table_readers.iter_parquet(unit.fs_path, row_groups=groups, fs=fs,
                                          source=unit.source, columns=True)
    if format == "csv":
        return table_readers.iter_csv(unit.fs_path, start=unit.start, end=unit.end,
                                      start_line=unit.start_line, fs=fs, source=unit.source,
                                      columns=True)
    return table_readers.iter_table(unit.fs_path, format, start=unit.start, end=unit.end,
                                    start_line=unit.start_line, fs=fs, source=unit.source)


def _no_match(path: str) -> dict:
    source = redact_url(path)
    return dead_letter(source=source, row=None, key=None, stage="read", reason="read_error",
                       feature=None, message=f"no input files match {source}", input=source)


def _batched(items: Iterable[SourceRow | ColumnBatch | dict], batch_size: int, source: str):
    """``(tag, value)`` pairs: rows in lists of `batch_size` (a ColumnBatch
    as it comes), dead letters one by one, and finally ``(source, number of
    rows and dead letters)`` for the counts."""
    batch: list[SourceRow] = []
    seen = 0
    for item in items:
        if isinstance(item, ColumnBatch):
            seen += len(item)
            if item:
                yield _ROWS, item
            continue
        seen += 1
        if isinstance(item, dict):
            yield _DEAD, item
            continue
        batch.append(item)
        if len(batch) >= batch_size:
            yield _ROWS, batch
            batch = []
    if batch:
        yield _ROWS, batch
    yield _COUNTS, (source, seen)


def _tagged(element: tuple[str, Any], tag: str):
    if element[0] == tag:
        yield element[1]


class _SplitTagged(beam.PTransform):
    """``(read, planned)`` PCollections of (tag, value) pairs -> `ReadOutputs`,
    one labelled filter per output and origin.

    Rows come from `read` alone and never pass a Flatten: Beam's portable
    runner materializes a multi-input Flatten as a buffer between stages (on
    the DirectRunner every row of the dataset held in memory and pickled row
    by row), whereas a filter stays fused with the read and the row checks
    after it. Only the small outputs (dead letters, counts) of both origins
    are flattened; the "unit" pairs of `planned` match no filter."""

    def expand(self, pcolls):
        read, planned = pcolls
        return ReadOutputs(
            read | "Rows" >> beam.FlatMap(_tagged, _ROWS).with_output_types(Batch),
            (read | "ReadDeadLetters" >> beam.FlatMap(_tagged, _DEAD),
             planned | "PlanDeadLetters" >> beam.FlatMap(_tagged, _DEAD))
            | "DeadLetters" >> beam.Flatten(),
            (read | "ReadCounts" >> beam.FlatMap(_tagged, _COUNTS),
             planned | "PlanCounts" >> beam.FlatMap(_tagged, _COUNTS))
            | "Counts" >> beam.Flatten())


class _ListTableFiles(beam.DoFn):
    """path pattern -> ("unit", fs path) per file, or a dead letter and its
    count when nothing matches."""

    def process(self, pattern: str):
        _, files = list_files(pattern)
        if not files:
            problem = _no_match(pattern)
            yield _DEAD, problem
            yield _COUNTS, (problem["source"], 1)
        for fs_path in files:
            yield _UNIT, fs_path


class _PlanTableRanges(beam.DoFn):
    """fs path -> FileRange units (one streaming pass over big CSV/JSONL files)."""

    def __init__(self, pattern: str, format: str, range_bytes: int):
        self._pattern = pattern
        self._format = format
        self._range_bytes = range_bytes

    def setup(self):
        self._fs = fsspec.core.url_to_fs(self._pattern)[0]

    def process(self, fs_path: str):
        yield from plan_table_ranges(self._fs, fs_path, self._format, self._range_bytes)


class _ReadTableRanges(beam.DoFn):
    """FileRange -> (tag, value) pairs: RowBatches, dead letters, (source, n)."""

    def __init__(self, pattern: str, format: str, batch_size: int):
        self._pattern = pattern
        self._format = format
        self._batch_size = batch_size

    def setup(self):
        self._fs = fsspec.core.url_to_fs(self._pattern)[0]
        relax_young_collections()  # rows are made here, a batch at a time

    def process(self, unit: FileRange):
        # (tag, value): ("rows", RowBatch) | ("dead_letter", dict) | ("counts", (source, n))
        yield from _batched(read_range(self._fs, unit, self._format), self._batch_size,
                            unit.source)


class ReadTable(beam.PTransform):
    """Reads table files into RowBatches.

    Takes a pipeline (PBegin). path: a file, glob or directory (fsspec URL);
    format: "csv", "jsonl" or "parquet"; batch_size: rows per RowBatch;
    range_bytes: target size of a reading unit (0 reads each file as one unit,
    e.g. for CSV files with stray quotes in unquoted fields).
    Gives `ReadOutputs` (rows, dead_letter, counts).
    """

    def __init__(self, path: str, format: str, batch_size: int = 1000,
                 range_bytes: int = DEFAULT_RANGE_BYTES):
        super().__init__()
        if format not in TABLE_FORMATS:
            raise ValueError(f"format: expected one of {list(TABLE_FORMATS)}, got {format!r}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self._path = path
        self._format = format
        self._batch_size = batch_size
        self._range_bytes = range_bytes

    def expand(self, pbegin):
        # (tag, value): ("unit", fs path) per file | dead letter and count if none match
        listed = (
            pbegin
            | "Pattern" >> beam.Create([self._path])
            | "ListFiles" >> beam.ParDo(_ListTableFiles()))
        units = (
            listed
            | "Files" >> beam.FlatMap(_tagged, _UNIT)
            | "ReshuffleFiles" >> beam.Reshuffle()
            # FileRange (byte range or row-group span)
            | "PlanRanges" >> beam.ParDo(
                _PlanTableRanges(self._path, self._format, self._range_bytes))
            | "ReshuffleRanges" >> beam.Reshuffle())
        # (tag, value): ("rows", RowBatch) | ("dead_letter", dict) | ("counts", (source, n))
        read = units | "ReadRanges" >> beam.ParDo(
            _ReadTableRanges(self._path, self._format, self._batch_size)
        ).with_output_types(TaggedBatch)
        return (read, listed) | "Split" >> _SplitTagged()


def scan_distinct(path: str, format: str, column: str) -> list[str]:
    """Sorted distinct values (as strings) of `column` over every readable row of
    the tables at `path`; rows without the column or with null are skipped.
    Used for ``vocabulary: auto`` before a run."""
    fs, files = list_files(path)
    values: set[str] = set()
    for fs_path in files:
        for item in table_readers.iter_table(fs_path, format, fs=fs,
                                             source=display_name(fs, fs_path)):
            if isinstance(item, SourceRow):
                value = item.values.get(column)
                if value is not None:
                    values.add(value if isinstance(value, str) else str(value))
    return sorted(values)


# ---------------------------------------------------------------------------
# Images

def _normalized_extensions(extensions: Iterable[str]) -> tuple[str, ...]:
    out = tuple(sorted({e.lower() if e.startswith(".") else "." + e.lower()
                        for e in extensions}))
    if not out:
        raise ValueError("extensions: list at least one file extension, e.g. [.jpg, .png]")
    return out


def list_images(path: str, extensions: Iterable[str]
                ) -> tuple[fsspec.AbstractFileSystem, list[tuple[str, str]], list[dict]]:
    """Lists the image files below directory `path` with one of `extensions`.

    Returns the filesystem, sorted ``(fs_path, rel)`` pairs, and dead letters
    for links leading outside the root (``path_outside_root``), dangling links
    and a root that is not a directory (``read_error``)."""
    extensions = _normalized_extensions(extensions)
    fs, root = fsspec.core.url_to_fs(path)
    if not fs.isdir(root):
        return fs, [], [dead_letter(
            source=redact_url(path), row=None, key=None, stage="read", reason="read_error",
            feature=None, message=f"source.path {redact_url(path)} is not a directory",
            input=redact_url(path))]
    listed, problems = [], []
    if isinstance(fs, LocalFileSystem):
        walked = _walk_local(root.rstrip("/") or "/", _image_hidden)
    else:
        walked = ((fs_path, rel, "file") for fs_path, rel in _walk(fs, root, _image_hidden))
    for fs_path, rel, kind in walked:
        if kind == "file":
            if rel.lower().endswith(extensions):
                listed.append((fs_path, rel))
            continue
        source = display_name(fs, fs_path)
        if kind == "outside":
            problems.append(dead_letter(
                source=source, row=None, key=None, stage="read", reason="path_outside_root",
                feature=None, message=f"{source} is a symbolic link leading outside "
                f"source.path; it is not read", input={"path": rel}))
        elif rel.lower().endswith(extensions):
            problems.append(dead_letter(
                source=source, row=None, key=None, stage="read", reason="read_error",
                feature=None, message=f"{source} is a symbolic link to a file that does not "
                "exist", input={"path": rel}))
    listed.sort(key=lambda item: item[1])
    return fs, listed, problems


_DRIVE = re.compile(r"^[A-Za-z]:")


def _relative(name: str) -> str | None:
    """`name` as a normalized root-relative path, or None if it leaves the root."""
    name = name.replace("\\", "/")
    if not name or name.startswith("/") or _DRIVE.match(name) or "://" in name:
        return None
    rel = posixpath.normpath(name)
    if rel in (".", "..") or rel.startswith("../"):
        return None
    return rel


def _labels_format(labels: str) -> str:
    name = re.sub(r"\.(gz|bz2|xz|zst|lz4)$", "", labels.split("?")[0].lower())
    if name.endswith(".csv"):
        return "csv"
    if name.endswith((".jsonl", ".ndjson", ".json")):
        return "jsonl"
    raise ValueError(f"labels: expected 'directory' or a .csv/.jsonl labels table, got {labels!r}")


def read_labels_table(labels: str) -> tuple[dict[str, tuple[str, str, int | None]], list[dict]]:
    """Reads a labels table (columns ``file``, ``label``).

    Returns ``{rel: (label, source, row)}`` for the usable rows and dead letters
    for the others (unreadable rows, ``labels_invalid``, ``path_outside_root``)."""
    fmt = _labels_format(labels)
    fs, fs_path = fsspec.core.url_to_fs(labels)
    source = redact_url(labels)
    entries: dict[str, tuple[str, str, int | None]] = {}
    problems: list[dict] = []

    def problem(row, reason, message, values):
        problems.append(dead_letter(source=source, row=row, key=None, stage="read",
                                    reason=reason, feature=None, message=message, input=values))

    for item in table_readers.iter_table(fs_path, fmt, fs=fs, source=source):
        if isinstance(item, dict):
            problems.append(item)
            continue
        file, label = item.values.get("file"), item.values.get("label")
        where = f"{source} line {item.row}"
        if file is None or file == "" or label is None or label == "":
            problem(item.row, "labels_invalid",
                    f"{where}: a labels row needs non-empty 'file' and 'label'", item.values)
            continue
        rel = _relative(str(file))
        if rel is None:
            problem(item.row, "path_outside_root",
                    f"{where}: file {str(file)!r} is not a path inside source.path "
                    "(absolute, a URL, or escaping with '..')", item.values)
            continue
        if rel in entries:
            problem(item.row, "labels_invalid",
                    f"{where}: file {rel!r} is already listed on line {entries[rel][2]}",
                    item.values)
            continue
        entries[rel] = (str(label), source, item.row)
    return entries, problems


def plan_images(path: str, extensions: Iterable[str], labels: str,
                batch_size: int = DEFAULT_IMAGE_BATCH_SIZE
                ) -> tuple[list[list[ImageItem]], list[dict]]:
    """Lists and labels the images of a source: batches of `ImageItem` (sorted
    by relative path) and the dead letters of listing and labelling."""
    fs, listed, problems = list_images(path, extensions)
    items: list[ImageItem] = []
    if labels == "directory":
        for fs_path, rel in listed:
            if "/" in rel:
                items.append(ImageItem(fs_path, rel, rel.rsplit("/", 2)[-2]))
            else:
                problems.append(_unlabeled(fs, fs_path, rel, "it is directly in source.path, "
                                           "not inside a class folder (labels: directory)"))
    else:
        # Links leading outside the root or to nothing are dead letters of the
        # listing already; their labels-table rows must not be reported again.
        reported = {letter["input"].get("path") for letter in problems
                    if isinstance(letter["input"], dict)}
        entries, label_problems = read_labels_table(labels)
        problems.extend(label_problems)
        for fs_path, rel in listed:
            entry = entries.pop(rel, None)
            if entry is None:
                problems.append(_unlabeled(fs, fs_path, rel,
                                           f"it has no row in the labels table {redact_url(labels)}"))
            else:
                items.append(ImageItem(fs_path, rel, entry[0]))
        for rel, (label, source, row) in sorted(entries.items()):
            if rel in reported:
                continue  # a link outside the root or a dangling one: already a dead letter
            problems.append(dead_letter(
                source=source, row=row, key=None, stage="read", reason="read_error",
                feature=None, message=f"{source} line {row}: no image file {rel!r} below "
                f"{redact_url(path)} with an extension in the source's extensions",
                input={"file": rel, "label": label}))
    batches = [items[i:i + batch_size] for i in range(0, len(items), batch_size)]
    return batches, problems


def _unlabeled(fs, fs_path: str, rel: str, why: str) -> dict:
    source = display_name(fs, fs_path)
    return dead_letter(source=source, row=None, key=None, stage="read",
                       reason="unlabeled_image", feature=None,
                       message=f"{source} has no label: {why}", input={"path": rel})


def source_bytes(path: str, type: str, extensions: Iterable[str] = (),
                 limit: int | None = None) -> int:
    """Bytes of the files a source reads: the table files at `path`, or the
    image files below it with one of `extensions`. Counting stops once the
    total passes `limit` (callers comparing with a threshold need no more).
    Files that vanish while being counted count 0."""
    if type == "images":
        fs, listed, _ = list_images(path, extensions)
        paths = (fs_path for fs_path, _ in listed)
    else:
        fs, files = list_files(path)
        paths = iter(files)
    total = 0
    for fs_path in paths:
        try:
            total += fs.size(fs_path) or 0
        except FileNotFoundError:
            continue
        if limit is not None and total > limit:
            break
    return total


def known_labels(path: str, labels: str, extensions: Iterable[str]) -> list[str]:
    """Sorted distinct labels known before a run: the class folder names of the
    listed images (``labels="directory"``) or the labels of the usable rows of
    the labels table. Used for ``vocabulary: auto``."""
    if labels == "directory":
        _, listed, _ = list_images(path, extensions)
        return sorted({rel.rsplit("/", 2)[-2] for _, rel in listed if "/" in rel})
    entries, _ = read_labels_table(labels)
    return sorted({label for label, _, _ in entries.values()})


def read_image_items(fs: fsspec.AbstractFileSystem, items: Iterable[ImageItem],
                     options: ImageOptions) -> Iterator[SourceRow | dict]:
    """Reads and checks images: a SourceRow (path, label, image columns) per good
    image, a dead letter per file that cannot be read (``read_error``: vanished,
    unreadable) or fails its checks (stage "decode")."""
    for item in items:
        source = display_name(fs, item.fs_path)
        raw_input = {"path": item.rel, "label": item.label}
        try:
            data = read_file_once(fs, item.fs_path)
        except READ_ERRORS as exc:
            yield read_error(source, None, exc, input=raw_input)
            continue
        try:
            columns = image_columns(data, source, options)
        except RowError as exc:
            yield dead_letter(source=source, row=None, key=None, stage=exc.stage,
                              reason=exc.reason, feature=exc.feature, message=exc.message,
                              input=raw_input)
            continue
        values: dict[str, Any] = {"path": item.rel, "label": item.label}
        values.update(columns)
        yield SourceRow(source, None, values)


class _PlanImages(beam.DoFn):
    """root path -> ("unit", [ImageItem as a tuple]) per batch of images, plus
    dead letters and their counts for listing and labelling problems."""

    def __init__(self, extensions: tuple[str, ...], labels: str, batch_size: int):
        self._extensions = extensions
        self._labels = labels
        self._batch_size = batch_size

    def process(self, path: str):
        batches, problems = plan_images(path, self._extensions, self._labels, self._batch_size)
        for problem in problems:
            yield _DEAD, problem
            yield _COUNTS, (problem["source"], 1)
        for batch in batches:
            # Plain tuples: Beam's coder writes them natively, where it
            # would pickle each NamedTuple on its own (17 us per image).
            yield _UNIT, [tuple(item) for item in batch]


class _ReadImageBatches(beam.DoFn):
    """ImageItems (as plain tuples) -> (tag, value) pairs: one RowBatch, dead
    letters, (root, n)."""

    def __init__(self, path: str, options: ImageOptions):
        self._path = path
        self._options = options

    def setup(self):
        self._fs = fsspec.core.url_to_fs(self._path)[0]
        self._source = redact_url(self._path)
        relax_young_collections()  # rows are made here, a batch at a time

    def process(self, items: list[tuple[str, str, str]]):
        # (tag, value): ("rows", RowBatch) | ("dead_letter", dict) | ("counts", (root, n))
        items = [ImageItem(*item) for item in items]
        yield from _batched(read_image_items(self._fs, items, self._options),
                            max(1, len(items)), self._source)


class ReadImages(beam.PTransform):
    """Reads an image directory into RowBatches of image rows.

    Takes a pipeline (PBegin). path: the root directory (fsspec URL);
    extensions: e.g. (".jpg", ".png"); labels: "directory" or the path of a
    labels table (.csv/.jsonl with columns file,label); options: ImageOptions;
    batch_size: images per RowBatch. Gives `ReadOutputs`; counts are
    ``(source, n)`` per batch of images (source: the root) plus one per
    listing/labelling dead letter.
    """

    def __init__(self, path: str, extensions: tuple[str, ...], labels: str,
                 options: ImageOptions, batch_size: int = DEFAULT_IMAGE_BATCH_SIZE):
        super().__init__()
        if labels != "directory":
            _labels_format(labels)
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self._path = path
        self._extensions = _normalized_extensions(extensions)
        self._labels = labels
        self._options = options
        self._batch_size = batch_size

    def expand(self, pbegin):
        planned = (
            pbegin
            | "Root" >> beam.Create([self._path])
            | "PlanImages" >> beam.ParDo(
                _PlanImages(self._extensions, self._labels, self._batch_size)))
        read = (
            planned
            # up to batch_size ImageItems, as plain tuples
            | "Batches" >> beam.FlatMap(_tagged, _UNIT)
            | "ReshuffleBatches" >> beam.Reshuffle()
            | "ReadImages" >> beam.ParDo(_ReadImageBatches(self._path, self._options)
                                         ).with_output_types(TaggedBatch))
        return (read, planned) | "Split" >> _SplitTagged()
