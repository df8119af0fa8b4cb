"""ReadTable: table files (CSV, JSONL, JSON, Parquet, ...) into RowBatches, as labelled Beam steps.

The steps are thin over `readers`: list the files (`listing.list_tables`),
``Reshuffle`` them, plan each into units (`tables.plan_table_ranges`: byte
ranges of CSV/JSONL files, row-group spans of Parquet files), ``Reshuffle``
the units so a multi-worker runner spreads them (no Reshuffle with one
worker), and read each unit
(`tables.read_range`) in a DoFn that emits batches. It starts from a
``beam.Create`` of the path (not an Impulse-rooted IO, which the Dask runner
cannot run).
"""

from __future__ import annotations

from typing import Iterable

import apache_beam as beam
import fsspec

from ...schemas.dead_letters import counted_rows, dead_letter
from ..batch_coder import TaggedBatch
from ..gc_tuning import relax_young_collections
from ..malloc_tuning import keep_freed_memory
from ..readers.listing import list_tables, normalized_extensions
from ..readers.tables import (DEFAULT_RANGE_BYTES, TABLE_FORMATS, FileRange, plan_table_ranges,
                              read_range)
from ..urls import redact_url
from .outputs import COUNTS, DEAD, UNIT, SplitTagged, batched, passed_on

__all__ = ["ListTableFiles", "PlanTableRanges", "ReadTable", "listed_files"]


def _no_match(path: str) -> dict:
    source = redact_url(path)
    return dead_letter(source=source, row=None, key=None, stage="read", reason="read_error",
                       feature=None, message=f"no input files match {source}", input=source)


class ListTableFiles(beam.DoFn):
    """path pattern -> ("unit", fs path) per file, dead letters and their
    counts for links leading outside the source or to nothing, or for no
    match at all."""

    def __init__(self, extensions: tuple[str, ...] | None):
        self._extensions = extensions

    def process(self, pattern: str):
        listing = list_tables(pattern, self._extensions)
        problems = listing.problems
        if not listing.files and not problems:
            problems = [_no_match(pattern)]
        for problem in problems:
            yield DEAD, problem
            yield COUNTS, (problem["source"], counted_rows(problem))
        for fs_path in listing.files:
            yield UNIT, fs_path


def listed_files(pbegin, path: str, extensions: tuple[str, ...] | None, spread: bool):
    """The steps every table read starts with: ``Pattern`` (a Create of
    `path`: not an Impulse-rooted IO, which the Dask runner cannot run),
    ``ListFiles`` (`ListTableFiles`) and, with `spread`, ``ReshuffleFiles``.
    Gives ("unit", fs path) per file, and the listing's dead letters and
    counts, which go along with the files (`passed_on`) to come out of the
    step that reads them: no second origin to flatten at the end."""
    # Paths are pickled between steps (`Batch`): a local file name that
    # is not UTF-8 holds lone surrogates, which Beam's text coder refuses.
    files = (pbegin
             | "Pattern" >> beam.Create([path])
             | "ListFiles" >> beam.ParDo(ListTableFiles(extensions)
                                         ).with_output_types(TaggedBatch))
    if spread:
        files = files | "ReshuffleFiles" >> beam.Reshuffle()
    return files


class PlanTableRanges(beam.DoFn):
    """("unit", fs path) -> ("unit", FileRange) per unit (one streaming pass
    over big CSV/JSONL files); the listing's other pairs pass on."""

    def __init__(self, pattern: str, format: str, range_bytes: int, options=None):
        self._pattern = pattern
        self._format = format
        self._range_bytes = range_bytes
        self._options = options

    def setup(self):
        self._fs = fsspec.core.url_to_fs(self._pattern)[0]

    def process(self, tagged: tuple[str, object]):
        if passed_on(tagged):
            yield tagged
            return
        for unit in plan_table_ranges(self._fs, tagged[1], self._format, self._range_bytes,
                                      self._options):
            yield UNIT, unit


class _ReadTableRanges(beam.DoFn):
    """("unit", FileRange) -> (tag, value) pairs: RowBatches, dead letters,
    (source, n); the listing's pairs pass on."""

    def __init__(self, pattern: str, format: str, batch_size: int, options=None):
        self._pattern = pattern
        self._format = format
        self._batch_size = batch_size
        self._options = options

    def setup(self):
        self._fs = fsspec.core.url_to_fs(self._pattern)[0]
        relax_young_collections()  # rows are made here, a batch at a time
        keep_freed_memory()  # buffers are freed and made again all the time

    def process(self, tagged: tuple[str, object]):
        if passed_on(tagged):
            yield tagged
            return
        unit: FileRange = tagged[1]
        # (tag, value): ("rows", RowBatch) | ("dead_letter", dict) | ("counts", (source, n))
        yield from batched(read_range(self._fs, unit, self._format, self._options),
                           self._batch_size, unit.source)


class ReadTable(beam.PTransform):
    """Reads table files into RowBatches.

    Takes a pipeline (PBegin). path: a file, glob or directory (fsspec URL;
    listed by `listing.list_tables`); format: one of `TABLE_FORMATS`;
    options: the CSV dialect (`readers.csv_dialect.CsvOptions`), None: the default;
    extensions: the names taken from a directory (None: every file);
    batch_size: rows per RowBatch of SourceRows (JSONL and TFRecord are cut by bytes: `batched`);
    range_bytes: target size of a reading unit (0 reads each file as one unit,
    e.g. for CSV files with stray quotes in unquoted fields);
    spread: reshuffle the files and the units so a runner's workers share
    them (False where there is one worker: two Reshuffles spread nothing).
    Gives `ReadOutputs` (rows, dead_letter, counts).
    """

    def __init__(self, path: str, format: str, batch_size: int = 1000,
                 range_bytes: int = DEFAULT_RANGE_BYTES,
                 extensions: Iterable[str] | None = None, options=None, spread: bool = True):
        super().__init__()
        if format not in TABLE_FORMATS:
            raise ValueError(f"format: expected one of {list(TABLE_FORMATS)}, got {format!r}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self._path = path
        self._format = format
        self._extensions = None if extensions is None else normalized_extensions(extensions)
        self._batch_size = batch_size
        self._range_bytes = range_bytes
        self._options = options
        self._spread = spread

    def expand(self, pbegin):
        # ("unit", fs path) per file | the listing's dead letters and counts
        files = listed_files(pbegin, self._path, self._extensions, self._spread)
        # ("unit", FileRange: byte range or row-group span) | the listing's pairs
        units = files | "PlanRanges" >> beam.ParDo(
            PlanTableRanges(self._path, self._format, self._range_bytes, self._options)
        ).with_output_types(TaggedBatch)
        if self._spread:
            units = units | "ReshuffleRanges" >> beam.Reshuffle()
        # (tag, value): ("rows", RowBatch) | ("dead_letter", dict) | ("counts", (source, n))
        read = units | "ReadRanges" >> beam.ParDo(
            _ReadTableRanges(self._path, self._format, self._batch_size, self._options)
        ).with_output_types(TaggedBatch)
        return read | "Split" >> SplitTagged()
