"""ConvertTables: table files -> Examples, each reading unit read and converted by one DoFn.

A reading unit (a byte range of a CSV or JSONL file, a span of a Parquet
file's row groups, a whole Avro, JSON or TFRecord file) is read and its
batches checked and encoded where they are read (`unit_outputs`), so that
its statistics come out as one partial per split and feature, its batches
merged in the order they were read (`BatchConversion.convert` with
``hold_statistics``). Text's top values merge in an order fixed by the
partials' content (`schemas.stats.merge`), so the merge holds every text
partial until the last one is in: one per unit, not one per 1000-row batch
(a TFRecord file of free text held every value of its strings there).

The steps:

    Pattern -> ListFiles -> ReshuffleFiles   (the listing's dead letters
                                              and counts go along, through
                                              PlanRanges and ConvertUnits)
      -> PlanRanges     each file into its units (`tables.plan_table_ranges`)
      -> ReshuffleUnits
      -> ConvertUnits   each unit read, checked and encoded
      -> Examples, DeadLetters, ReadDeadLetters, Statistics, Gather,
         Fingerprints  (`ConvertedTables`)

The build cache's `cache.steps.ConvertTablesWithCache` converts the units
it does not reuse with the same `unit_outputs`, so a build with the cache
and one without give the same statistics.
"""

from __future__ import annotations

from typing import Iterable, Iterator, NamedTuple, Sequence

import apache_beam as beam
import fsspec

from .batch_coder import Batch, TaggedBatch
from .gc_tuning import relax_young_collections
from .malloc_tuning import keep_freed_memory
from .merge_statistics import StatisticsSetup
from .readers.listing import normalized_extensions
from .readers.tables import DEFAULT_RANGE_BYTES, FileRange, read_range
from .sources.outputs import COUNTS, DEAD, ROWS, batched, passed_on
from .sources.tables import PlanTableRanges, listed_files
from .tagged import select, select_keyed
from .to_examples import (COLUMNS_SEEN, DEAD_LETTER, EXAMPLES, FINGERPRINTS, LABEL_COUNTS,
                          STATISTICS, BatchConversion, DuplicateSetup, LabelCounting)

__all__ = ["GATHERED", "READ_DEAD_LETTER", "ConvertTables", "ConvertedTables", "split_converted",
           "unit_outputs"]

# Dead letters of reading (a file or line that cannot be read), apart from
# those of checking (`DEAD_LETTER`).
READ_DEAD_LETTER = "read_dead_letter"
# The outputs gathered into `ConvertedTables.gathered`, tagged as they are made.
GATHERED = frozenset({LABEL_COUNTS, COLUMNS_SEEN, COUNTS})


def unit_outputs(fs: fsspec.AbstractFileSystem, unit: FileRange, format: str, options,
                 batch_size: int, conversion: BatchConversion) -> Iterator[tuple[str, object]]:
    """The (tag, value) pairs of one unit: what `conversion` gives for each
    batch of its rows (`batched`), its read dead letters
    (`READ_DEAD_LETTER`) and rows read (`COUNTS`) as they come, and last the
    unit's statistics, one partial per split and feature."""
    for tag, value in batched(read_range(fs, unit, format, options), batch_size, unit.source):
        if tag == ROWS:
            yield from conversion.convert(value, hold_statistics=True)
        else:
            yield (READ_DEAD_LETTER if tag == DEAD else COUNTS), value
    yield from conversion.held_statistics()


def listing_output(tagged: tuple[str, object]) -> tuple[str, object]:
    """A listing's pair handed on through the units (`passed_on`), as the
    converting step gives it: its dead letters are read dead letters."""
    tag, value = tagged
    return (READ_DEAD_LETTER if tag == DEAD else tag), value


class ConvertedTables(NamedTuple):
    """What `ConvertTables` and the build cache's `ConvertTablesWithCache`
    give: the rows (ExampleBatches, or with `rows_are_runs` SpillRecords of
    sorted runs for ``WriteShards(spilled=True)``), dead letters of the
    check stage and of reading (the second includes the listing's),
    statistics (None when they are off), in one PCollection (`GATHERED`,
    keyed by None for the result's GroupByKey: `tagged.select_keyed`) the
    outputs only a build's result reads: label counts, columns seen,
    (source, rows read) and with the cache one cache-use dict per unit;
    and the rows' fingerprints for duplicate detection (None: detection
    is off, or the rows came from the cache, which keeps none)."""

    rows: beam.PCollection
    rows_are_runs: bool
    dead_letter: beam.PCollection
    read_dead_letter: beam.PCollection
    statistics: beam.PCollection | None
    gathered: beam.PCollection
    fingerprints: beam.PCollection | None = None


def split_converted(converted: beam.PCollection, *, rows_tag: str, rows_are_runs: bool,
                    statistics: bool, gathered: frozenset[str],
                    fingerprints: bool = False) -> ConvertedTables:
    """`converted`'s (tag, value) pairs split into `ConvertedTables`, one
    labelled filter per output (`tagged`)."""

    def pick(label: str, tag: str, output_type=None):
        step = beam.FlatMap(select, tag)
        if output_type is not None:
            step = step.with_output_types(output_type)
        return converted | label >> step

    return ConvertedTables(
        rows=pick("Runs" if rows_are_runs else "Examples", rows_tag, Batch),
        rows_are_runs=rows_are_runs,
        dead_letter=pick("DeadLetters", DEAD_LETTER),
        read_dead_letter=pick("ReadDeadLetters", READ_DEAD_LETTER),
        statistics=pick("Statistics", STATISTICS) if statistics else None,
        # (None, (tag, value)): one step for the result's small outputs
        gathered=converted | "Gather" >> beam.FlatMap(select_keyed, gathered),
        fingerprints=pick("Fingerprints", FINGERPRINTS, Batch) if fingerprints else None)


class _ConvertUnitsFn(beam.DoFn):
    """("unit", FileRange) -> the unit's (tag, value) pairs (`unit_outputs`);
    the listing's pairs, handed on by the plan step, come out as read dead
    letters and counts."""

    def __init__(self, pattern: str, format: str, batch_size: int, options,
                 conversion: BatchConversion):
        self._pattern = pattern
        self._format = format
        self._batch_size = batch_size
        self._options = options
        self._conversion = conversion

    def setup(self):
        self._fs = fsspec.core.url_to_fs(self._pattern)[0]
        relax_young_collections()  # rows are made here, a batch at a time
        keep_freed_memory()  # buffers are freed and made again all the time
        self._conversion.setup()

    def start_bundle(self):
        self._conversion.start_bundle()

    def process(self, tagged: tuple[str, object]):
        if passed_on(tagged):
            yield listing_output(tagged)
            return
        yield from unit_outputs(self._fs, tagged[1], self._format, self._options,
                                self._batch_size, self._conversion)


class ConvertTables(beam.PTransform):
    """Reads, checks and encodes table files, a reading unit at a time.

    path, format, extensions, options, batch_size, range_bytes, spread: as
    `sources.ReadTable`. specs, vocabularies, key_column, count_labels,
    watch_columns, statistics, duplicates: as `to_examples.RowsToExamples`.
    Gives `ConvertedTables` (rows as ExampleBatches).
    """

    def __init__(self, path: str, format: str, *, specs: Sequence,
                 vocabularies: dict[str, Sequence[str]], key_column: str | None = None,
                 count_labels: LabelCounting | None = None, watch_columns: Sequence[str] = (),
                 statistics: StatisticsSetup | None = None,
                 duplicates: DuplicateSetup | None = None,
                 extensions: Iterable[str] | None = None, options=None,
                 batch_size: int = 1000, range_bytes: int = DEFAULT_RANGE_BYTES,
                 spread: bool = True):
        super().__init__()
        self._path = path
        self._format = format
        self._extensions = None if extensions is None else normalized_extensions(extensions)
        self._options = options
        self._batch_size = batch_size
        self._range_bytes = range_bytes
        self._spread = spread
        self._statistics_on = statistics is not None
        self._duplicates_on = duplicates is not None
        self._conversion = BatchConversion(specs, vocabularies, key_column, count_labels,
                                           watch_columns=watch_columns, statistics=statistics,
                                           duplicates=duplicates)

    def expand(self, pbegin):
        # ("unit", fs path) per file | the listing's dead letters and counts
        files = listed_files(pbegin, self._path, self._extensions, self._spread)
        # ("unit", FileRange) per unit | the listing's pairs
        units = files | "PlanRanges" >> beam.ParDo(PlanTableRanges(
            self._path, self._format, self._range_bytes, self._options)
        ).with_output_types(TaggedBatch)
        if self._spread:
            units = units | "ReshuffleUnits" >> beam.Reshuffle()
        converted = units | "ConvertUnits" >> beam.ParDo(_ConvertUnitsFn(
            self._path, self._format, self._batch_size, self._options, self._conversion)
        ).with_output_types(TaggedBatch)
        return split_converted(converted, rows_tag=EXAMPLES, rows_are_runs=False,
                               statistics=self._statistics_on, gathered=GATHERED,
                               fingerprints=self._duplicates_on)
