"""ConvertTablesWithCache: table files -> Examples, reusing the cached pieces of unchanged files.

The steps of `sources.ReadTable` and `to_examples.RowsToExamples` in one,
with the build cache between them:

    Pattern -> ListFiles -> ReshuffleFiles   (the listing's dead letters
                                              and counts go along, through
                                              PlanOrReuse and ConvertUnits)
      -> PlanOrReuse      a file whose every unit has a piece: one Work per
                          piece; any other file: planned into units, one
                          Work per unit
      -> ReshuffleUnits
      -> ConvertUnits     a Work whose piece exists and checks out gives the
                          piece's outputs; any other is read, checked and
                          encoded (`BatchConversion`) and its piece written:
                          its rows sorted into runs as the shard writer's
                          spill step would (`pieces`). Checking a piece reads
                          its runs whole from the disk, so a thread checks
                          the next pieces while changed units are converted;
                          their outputs follow, at the latest when the
                          bundle ends
      -> SplitOutputs     `unit_conversion.ConvertedTables`

Reading and converting happen in one DoFn (`unit_conversion.unit_outputs`,
as a build without the cache does them), so a unit's every output (its
Examples, dead letters, label counts, statistics, rows read) is at hand to
write its piece, and cached and new rows come out of the same step: rows
never pass a Flatten (see `sources.outputs`); nor does anything else: each
output has that one origin. With the shard writer's file
exchange (local runners) and a cache on the local disk the rows are given
as the pieces' sorted runs, which the writer takes as its own spill runs
(``WriteShards(spilled=True)``): a reused unit's rows are neither read nor
sorted again, and a new unit's are sorted once, into its piece. Otherwise
(the shuffle exchange of distributed runners, or a cache on an object
store) they are given as ExampleBatches, read back from the runs.

Which pieces exist is listed once, by the driver, before the pipeline
(`whole_files`: file key -> unit count; `pieces`: the names of pieces of
files not whole, for a build that stopped inside a file). A piece that is
gone or damaged when it is read is not an error: the unit is read again.
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
from typing import Iterable, Mapping, NamedTuple, Sequence

import apache_beam as beam
import fsspec
from apache_beam.transforms.window import GlobalWindows

from ..batch_coder import Batch, TaggedBatch
from ..gc_tuning import relax_young_collections
from ..malloc_tuning import keep_freed_memory
from ..metrics import METRICS_NAMESPACE
from ..readers.inputs import fingerprint, write_marks
from ..readers.listing import normalized_extensions
from ..readers.tables import (
    DEFAULT_RANGE_BYTES,
    FileRange,
    RangeScan,
    plan_fingerprinted,
    plan_table_ranges,
    split_ranges,
)
from ..sources.outputs import COUNTS, passed_on
from ..sources.tables import listed_files
from ..splits import SplitAssigner
from ..merge_statistics import StatisticsSetup
from ..to_examples import (
    COLUMNS_SEEN,
    DEAD_LETTER,
    EXAMPLES,
    LABEL_COUNTS,
    STATISTICS,
    BatchConversion,
    LabelCounting,
)
from ..unit_conversion import (
    GATHERED as CONVERSION_GATHERED,
    READ_DEAD_LETTER,
    listing_output,
    split_converted,
    unit_outputs,
)
from ..writer import ShardTuning, SpillRecord
from .names import file_key, piece_name
from .pieces import DamagedPiece, PieceContents, PieceWriter, read_piece

__all__ = ["CACHE_USE", "GATHERED", "ConvertTablesWithCache", "RowLayout", "Work"]

CACHE_USE = "cache_use"
RUNS = "runs"
# The outputs gathered into `ConvertedTables.gathered`, tagged as they are made.
GATHERED = CONVERSION_GATHERED | {CACHE_USE}


class RowLayout(NamedTuple):
    """How the shard writer places rows, which the cached runs must follow:
    the dataset name and splits (a row's split), shuffle (order by hash or
    by key), and the writer's tuning (samples and run indexes)."""

    dataset_name: str
    splits: tuple[tuple[str, float], ...]
    shuffle: bool
    tuning: ShardTuning = ShardTuning()

_log = logging.getLogger(__name__)

# Pieces checked ahead of the oldest reused unit whose outputs are not given
# yet: each holds its summary until then (its runs' bytes only pass through).
_CHECKS_AHEAD = 32


class Work(NamedTuple):
    """One unit of a file: its piece's file key, index and count, the file,
    and the byte range or row-group span to read (None: the unit is to be
    reused, and found by planning the file again if its piece is damaged),
    and the file's `write_marks` taken before its key was."""

    key: str
    index: int
    count: int
    fs_path: str
    source: str
    unit: FileRange | None
    marks: tuple | None = None


class _PlanOrReuse(beam.DoFn):
    """("unit", fs path) -> Work per unit: the file's pieces when every unit
    of it has one, else its units as planned (a file that cannot be planned
    is one unit, whose reading reports the problem). The listing's dead
    letters and counts are handed on as they are (`passed_on`)."""

    def __init__(self, pattern: str, format: str, range_bytes: int, options,
                 encoding_key: str, whole_files: Mapping[str, int],
                 known_contents: Mapping[str, tuple] | None = None):
        self._known_contents = dict(known_contents or {})
        self._pattern = pattern
        self._format = format
        self._range_bytes = range_bytes
        self._options = options
        self._encoding_key = encoding_key
        self._whole_files = dict(whole_files)

    def setup(self):
        self._fs = fsspec.core.url_to_fs(self._pattern)[0]

    def process(self, tagged: tuple[str, object]):
        if passed_on(tagged):
            yield tagged
            return
        fs_path = tagged[1]
        # Marked before hashing: a write during or after the hash changes
        # the marks, and the pieces of what is then read are not kept.
        marks = write_marks(self._fs, fs_path)
        version = self._known_version(fs_path, marks)
        if version is None:
            # A file cut into byte ranges is planned as it is hashed, in one
            # read: the scan costs little beside the read, even when its
            # pieces are all kept and the units go unused.
            units, version = plan_fingerprinted(self._fs, fs_path, self._format,
                                                self._range_bytes, self._options)
        else:
            units = self._known_units(fs_path, version["path"])
        key = file_key(self._encoding_key, version)
        source = version["path"]
        count = self._whole_files.get(key)
        if count is not None:
            for index in range(count):
                yield Work(key, index, count, fs_path, source, None, marks)
            return
        if units is None:
            units = plan_table_ranges(self._fs, fs_path, self._format, self._range_bytes,
                                      self._options)
        for index, unit in enumerate(units):
            yield Work(key, index, len(units), fs_path, unit.source, unit, marks)

    def _known_units(self, fs_path: str, source: str) -> list[FileRange] | None:
        """The units of a file whose `_known_version` was taken, from the
        split points the driver found as it hashed it, when it cut it as
        this step does; else None (planned below if they are needed)."""
        split = self._known_contents[fs_path][2]
        if split is None or split[0] != RangeScan(self._format, self._range_bytes,
                                                  self._options):
            return None
        return split_ranges(fs_path, source, split[1])

    def _known_version(self, fs_path: str, marks: tuple | None) -> dict | None:
        """The file's fingerprint with the content token the driver took
        (`known_contents`) when its marks are still those taken before that
        hash (no write since): the file is then read only if a unit of it
        is to be converted, not to hash it again. Else None."""
        known = self._known_contents.get(fs_path)
        if known is None or marks is None or known[0] != marks:
            return None
        version = fingerprint(self._fs, fs_path)
        return None if version.get("missing") else {**version, "content": known[1]}


class _ConvertUnits(beam.DoFn):
    """Work -> (tag, value) pairs: what `BatchConversion` gives, read dead
    letters ("read_dead_letter"), rows read ("counts"), one ("cache_use",
    dict) per unit, and the unit's rows: with `give_runs` its cached runs as
    SpillRecords ("runs") for a shard writer that takes runs, else
    ExampleBatches ("examples"). The listing's dead letters and counts,
    handed on by the plan step, come out as read dead letters and counts:
    the cached read's outputs then have one origin each and need no
    Flatten (a runner stage each)."""

    def __init__(self, pattern: str, format: str, batch_size: int, range_bytes: int, options,
                 cache_url: str, pieces: Iterable[str], conversion: BatchConversion,
                 layout: RowLayout, give_runs: bool):
        self._pattern = pattern
        self._format = format
        self._batch_size = batch_size
        self._range_bytes = range_bytes
        self._options = options
        self._cache_url = cache_url
        self._pieces = frozenset(pieces)
        self._conversion = conversion
        self._layout = layout
        self._give_runs = give_runs

    def setup(self):
        self._fs = fsspec.core.url_to_fs(self._pattern)[0]
        self._cache_fs, self._cache_path = fsspec.core.url_to_fs(self._cache_url)
        relax_young_collections()  # rows are made here, a batch at a time
        keep_freed_memory()  # buffers are freed and made again all the time
        self._conversion.setup()
        self._assigner = SplitAssigner(self._layout.dataset_name, self._layout.splits)
        self._reused = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "cache_units_reused")
        self._rebuilt = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "cache_units_converted")
        self._damaged = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "cache_units_damaged")
        # Reading a piece's runs to check them waits on the disk: a thread
        # does it for the next pieces while this one converts changed units.
        self._checker = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="cache-piece-checks")

    def start_bundle(self):
        # Reused units wait here (small: a Work each), then are checked by a
        # thread, at most _CHECKS_AHEAD at a time, oldest first.
        self._waiting: collections.deque[tuple[Work, str]] = collections.deque()
        self._checking: collections.deque[tuple[Work, str, concurrent.futures.Future]] = (
            collections.deque())

    def process(self, work: Work | tuple[str, object]):
        if not isinstance(work, Work):  # the listing's (tag, value), handed on
            yield listing_output(work)
            return
        name = piece_name(work.key, work.index, work.count)
        if work.unit is None or name in self._pieces:
            self._waiting.append((work, name))
            yield from self._checked_outputs(wait=False)
            return
        yield from self._checked_outputs(wait=False)
        self._rebuilt.inc()
        yield from self._convert(work, work.unit, name, damaged=False)

    def finish_bundle(self):
        while self._checking or self._waiting:
            for value in self._checked_outputs(wait=True):
                yield GlobalWindows.windowed_value(value)

    def teardown(self):
        checker = getattr(self, "_checker", None)  # None when setup failed before it
        if checker is not None:
            checker.shutdown(wait=False, cancel_futures=True)

    def _check_more(self) -> None:
        while self._waiting and len(self._checking) < _CHECKS_AHEAD:
            work, name = self._waiting.popleft()
            self._checking.append((work, name, self._checker.submit(
                read_piece, self._cache_fs, self._cache_path, name)))

    def _checked_outputs(self, wait: bool):
        """The outputs of the oldest reused units whose pieces' checks have
        ended, in the order they came; with `wait`, at least the oldest's. A
        damaged piece's unit is converted instead."""
        self._check_more()
        while self._checking and (wait or self._checking[0][2].done()):
            wait = False
            work, name, check = self._checking.popleft()
            self._check_more()
            try:
                piece = check.result()
            except DamagedPiece as error:
                _log.warning("cache piece for %s (unit %d of %d) cannot be reused, reading "
                             "the unit again: %s", work.source, work.index + 1, work.count,
                             error)
                self._damaged.inc()
                unit = work.unit if work.unit is not None else self._planned_unit(work)
                self._rebuilt.inc()
                yield from self._convert(work, unit, name, damaged=True)
                continue
            self._reused.inc()
            yield from self._reused_outputs(piece)
            yield CACHE_USE, {"source": work.source, "reused": True, "damaged": False,
                              "rows": _rows(piece.values(COUNTS)),
                              "examples": piece.examples, "bytes": piece.size}

    def _planned_unit(self, work: Work) -> FileRange:
        units = plan_table_ranges(self._fs, work.fs_path, self._format, self._range_bytes,
                                  self._options)
        if len(units) != work.count:
            # Cannot happen for an unchanged file: planning is deterministic.
            raise RuntimeError(f"{work.source}: planned {len(units)} units where its cached "
                               f"pieces say {work.count}; delete {self._cache_url}")
        return units[work.index]

    def _reused_outputs(self, piece: PieceContents):
        """The outputs of a reused piece, as its unit gave them: its rows as
        runs, or read back from them as ExampleBatches."""
        if self._give_runs:
            yield from self._spill_records(piece.runs)
        else:
            for batch in piece.example_batches(self._cache_fs, self._assigner.salt):
                yield EXAMPLES, batch
        for tag in (READ_DEAD_LETTER, DEAD_LETTER, LABEL_COUNTS, STATISTICS, COLUMNS_SEEN,
                    COUNTS):
            for value in piece.values(tag):
                yield tag, value

    @staticmethod
    def _spill_records(runs):
        for run in runs:
            yield RUNS, SpillRecord(run.split, run.path, run.num_records, run.num_bytes,
                                    run.sample, kept=True)

    def _convert(self, work: Work, unit: FileRange, name: str, damaged: bool):
        # Each unit names its own columns seen: its piece may be reused alone.
        self._conversion.start_bundle()
        tuning = self._layout.tuning
        writer = PieceWriter(self._cache_fs, self._cache_path, name, self._assigner,
                             shuffle=self._layout.shuffle, sample_every=tuning.sample_every(),
                             prefix_len=tuning.prefix_len, index_every=tuning.index_every,
                             run_bytes=tuning.run_bytes)
        try:
            rows = 0
            unreadable = False  # an I/O error, which the next build may not meet
            # Last come the unit's statistics, one partial per split and
            # feature, as its piece keeps them and gives them when reused.
            for tag, value in unit_outputs(self._fs, unit, self._format, self._options,
                                           self._batch_size, self._conversion):
                if tag == COUNTS:
                    rows += value[1]
                elif tag == READ_DEAD_LETTER:
                    unreadable = unreadable or value["reason"] == "read_error"
                writer.add(tag, value)
                if tag != EXAMPLES or not self._give_runs:
                    yield tag, value
            examples = writer.examples
            # A unit that met an I/O error is read again next build, not
            # remembered as failed; nor is one whose file was written to
            # since its key was taken (the key names other bytes than were
            # read; the build fails when it checks its inputs): its runs
            # serve this build only.
            same_file = (work.marks is not None
                         and write_marks(self._fs, work.fs_path) == work.marks)
            runs, size = writer.commit(remember=not unreadable and same_file)
        except BaseException:
            writer.abort()
            raise
        if self._give_runs:  # else its Examples went on as they were converted
            yield from self._spill_records(runs)
        yield CACHE_USE, {"source": work.source, "reused": False, "damaged": damaged,
                          "rows": rows, "examples": examples, "bytes": size}


def _rows(counts: list) -> int:
    return sum(count for _, count in counts)


class ConvertTablesWithCache(beam.PTransform):
    """Reads, checks and encodes table files, reusing cached pieces.

    path, format, extensions, options, batch_size, range_bytes: as
    `sources.ReadTable`. specs, vocabularies, key_column, count_labels,
    watch_columns, statistics: as `to_examples.RowsToExamples`.
    cache_url: the directory of pieces; encoding_key: the digest of what
    changes the encoding (`pipelines.cache.encoding_key`); whole_files and
    pieces: what the cache held when the build started (`names.whole_files`,
    and the names of the pieces of other files). layout: how the shard
    writer places rows (`RowLayout`); give_runs: give the rows as the
    cache's sorted runs (the file exchange of a local runner, with the cache
    on its disk) rather than as ExampleBatches. spread: as `sources.ReadTable`
    (reshuffle the files and the units; False where there is one worker:
    two Reshuffles spread nothing). known_contents: fs path -> (write
    marks, content token, split) of local inputs the driver hashed
    (`readers.inputs.ContentTokens.known`), not hashed again while their
    marks are unchanged, nor scanned again for the split points it found
    (small: an offset and a line per unit, carried by the plan step).
    Gives `unit_conversion.ConvertedTables` (no fingerprints: a reused unit has none).
    """

    def __init__(self, path: str, format: str, *, cache_url: str, encoding_key: str,
                 whole_files: Mapping[str, int], pieces: Iterable[str],
                 specs: Sequence, vocabularies: Mapping[str, Sequence[str]],
                 key_column: str | None = None, count_labels: LabelCounting | None = None,
                 watch_columns: Sequence[str] = (), statistics: StatisticsSetup | None = None,
                 layout: RowLayout, give_runs: bool = False,
                 extensions: Iterable[str] | None = None, options=None,
                 batch_size: int = 1000, range_bytes: int = DEFAULT_RANGE_BYTES,
                 spread: bool = True, known_contents: Mapping[str, tuple] | None = None):
        super().__init__()
        self._known_contents = dict(known_contents or {})
        self._spread = spread
        self._layout = layout
        self._give_runs = give_runs
        self._path = path
        self._format = format
        self._extensions = None if extensions is None else normalized_extensions(extensions)
        self._options = options
        self._batch_size = batch_size
        self._range_bytes = range_bytes
        self._cache_url = cache_url
        self._encoding_key = encoding_key
        self._whole_files = dict(whole_files)
        self._pieces = frozenset(pieces)
        self._statistics_on = statistics is not None
        self._conversion = BatchConversion(specs, vocabularies, key_column, count_labels,
                                           watch_columns=watch_columns, statistics=statistics)

    def expand(self, pbegin):
        # ("unit", fs path) per file | the listing's dead letters and counts
        files = listed_files(pbegin, self._path, self._extensions, self._spread)
        # Work per unit | the listing's pairs
        works = files | "PlanOrReuse" >> beam.ParDo(_PlanOrReuse(
            self._path, self._format, self._range_bytes, self._options,
            self._encoding_key, self._whole_files, self._known_contents)
                                              ).with_output_types(Batch)
        if self._spread:
            works = works | "ReshuffleUnits" >> beam.Reshuffle()
        # (tag, value) pairs of every kind
        converted = works | "ConvertUnits" >> beam.ParDo(_ConvertUnits(
            self._path, self._format, self._batch_size, self._range_bytes, self._options,
            self._cache_url, self._pieces, self._conversion, self._layout, self._give_runs)
        ).with_output_types(TaggedBatch)

        return split_converted(converted, rows_tag=RUNS if self._give_runs else EXAMPLES,
                               rows_are_runs=self._give_runs, statistics=self._statistics_on,
                               gathered=GATHERED)
