"""Rows -> Examples as a Beam step (`RowsToExamples`), with dead letters and label counts.

`RowsToExamples` takes batches of `SourceRow` and gives batches of
``(key, serialized Example)`` plus a ``dead_letter`` PCollection with one record
per row that failed and, when asked, the examples counted per split and
label, and statistics per split and feature (`transforms/merge_statistics.py`).
The per-row work is `batch_converter.BatchConverter`, a plain class tested
without Beam; the DoFn only wraps it and counts.
"""

from __future__ import annotations

import collections
import itertools
from typing import Collection, Mapping, NamedTuple, Sequence

import apache_beam as beam

import numpy as np

from ..schemas.duplicates import FingerprintBatch, content_digests, keyless_key, origin_of
from ..schemas.features import FeatureSpec
from ..schemas.stats import StatisticsAccumulator
from .batch_coder import Batch, TaggedBatch
from .batch_converter import BatchConverter
from .duplicates import SourcedExamples
from .readers.jsonl import JsonlRunBatch
from .readers.rows import ColumnBatch
from .readers.tfrecords import ExampleRunBatch
from .gc_tuning import relax_young_collections
from .malloc_tuning import keep_freed_memory
from .metrics import METRICS_NAMESPACE
from .splits import HashedExamples, SplitAssigner
from .merge_statistics import StatisticsSetup
from .tagged import select, select_keyed
from .int_labels import IntLabels

__all__ = ["BatchConversion", "COLUMNS_SEEN", "DEAD_LETTER", "EXAMPLES", "FINGERPRINTS",
           "GATHERABLE", "LABEL_COUNTS", "STATISTICS", "ConvertedRows", "DuplicateSetup",
           "LabelCounting", "RowsToExamples"]

EXAMPLES = "examples"
DEAD_LETTER = "dead_letter"
LABEL_COUNTS = "label_counts"
COLUMNS_SEEN = "columns_seen"
STATISTICS = "statistics"
FINGERPRINTS = "fingerprints"
# The outputs a build's result alone reads (`RowsToExamples(gathered=...)`).
GATHERABLE = frozenset({LABEL_COUNTS, COLUMNS_SEEN})


class LabelCounting(NamedTuple):
    """What `RowsToExamples` needs to count examples per split and label:
    the label feature and its vocabulary (None: values are named as
    stored), and the dataset name and splits that assign rows to splits
    exactly as the shard writer does."""

    feature: str
    vocabulary: tuple[str, ...] | None
    dataset_name: str
    splits: tuple[tuple[str, float], ...]


class DuplicateSetup(NamedTuple):
    """What `RowsToExamples` needs to fingerprint rows for duplicate
    detection: the checked features (None: all), the dataset name and
    splits that assign rows to splits exactly as the shard writer does,
    and with `dedupe` (removal of the later copies) each row's origin."""

    features: tuple[str, ...] | None
    dataset_name: str
    splits: tuple[tuple[str, float], ...]
    dedupe: str | None = None
    image_hashes: bool = False  # carry each image's perceptual hash and path


class BatchConversion:
    """The work of `RowsToExamples` on one batch, as a plain object that the
    step's DoFn, and any DoFn that converts rows itself (the table units'
    of `unit_conversion` and the build cache's), call: `setup` once per worker, `start_bundle`
    per bundle, `convert(batch)` per batch, which yields ("examples",
    ExampleBatch), ("dead_letter", dead-letter dict), with label counting
    ("label_counts", ((split, label, examples), ...)), with statistics
    ("statistics", ((split, feature), FeatureStatistics)), per batch
    or, held, per run of batches (`convert`; `merge_statistics.partial_to_json`
    gives one as JSON), ("columns_seen", names) and, with duplicate
    detection, ("fingerprints", FingerprintBatch) per batch."""

    def __init__(self, specs, vocabularies, key_column, counting: LabelCounting | None,
                 watch_columns: Sequence[str] = (),
                 statistics: StatisticsSetup | None = None,
                 duplicates: DuplicateSetup | None = None):
        # Plain values only: the converter (closures) is rebuilt on the worker.
        self._watch_columns = tuple(watch_columns)
        self._specs = tuple(specs)
        self._vocabularies = {name: tuple(labels) for name, labels in vocabularies.items()}
        self._key_column = key_column
        self._counting = counting
        self._statistics = statistics
        self._duplicates = duplicates

    def setup(self):
        splitting = self._counting or self._statistics or self._duplicates
        self._checked_names = (
            frozenset(name.encode("utf-8") for name in self._duplicates.features)
            if self._duplicates is not None and self._duplicates.features is not None else None)
        self._assigner = (SplitAssigner(splitting.dataset_name, splitting.splits)
                          if splitting is not None else None)
        # With splits to assign, the converter hashes the rows as it makes
        # them (in the native convert call when it runs): `_count` reuses those.
        self._converter = BatchConverter(
            self._specs, self._vocabularies, self._key_column,
            digest_salt=self._assigner.salt if self._assigner is not None else None)
        self._rows_converted = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "rows_converted")
        self._dead_letters = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "dead_letters")
        self._by_reason = {}
        self.start_bundle()

    def start_bundle(self):
        # Per bundle, so that a retried bundle says again what it saw.
        self._unseen = set(self._watch_columns)
        self._named = False
        self._held_statistics = (
            StatisticsAccumulator(self._statistics.plan, self._assigner.names)
            if self._statistics is not None else None)

    def _columns_seen(self, batch):
        """("columns_seen", names): the watched columns this batch holds that
        this bundle had not seen, with (once per bundle) the columns of its
        first row, which name the columns a typo may have meant. Rows are
        looked at only while a watched column is unseen."""
        if isinstance(batch, ColumnBatch) and not isinstance(batch, ExampleRunBatch):
            names = set(batch.column_names())
            # (a JSONL batch's rows need not share their columns: its first
            # row's, as for a list of rows)
            first = set(batch.row(0).values) if isinstance(batch, JsonlRunBatch) else names
        else:
            names = set()
            first = set(batch.row(0).values if isinstance(batch, ColumnBatch) else
                        batch[0].values) if len(batch) else set()
            for row in batch:
                names.update(self._unseen.intersection(row.values))
                if names >= self._unseen:
                    break
        hits = self._unseen & names
        self._unseen -= hits
        if not self._named:
            self._named = True
            hits |= first
        if hits:
            yield COLUMNS_SEEN, tuple(sorted(hits))

    def convert(self, batch, hold_statistics: bool = False):
        """The tagged outputs of one batch. With `hold_statistics`, the
        statistics are held across batches until `held_statistics` gives one
        partial per split and feature for all of them, for a caller that
        reads a run of batches in the same order every time (a reading
        unit: `unit_conversion`): text's top values, whose merge depends on
        the order, are merged in the order the batches come
        (`StatisticsAccumulator`). Without, each batch gives its own."""
        if self._unseen:
            yield from self._columns_seen(batch)
        counting, statistics, duplicates = self._counting, self._statistics, self._duplicates
        examples, labels, dead_letters, values = self._converter.convert_observed_batch(
            batch, counting.feature if counting else None,
            counting.vocabulary if counting else None,
            statistics.plan if statistics else None)
        if examples:
            self._rows_converted.inc(len(examples))
            if counting is not None or statistics is not None or duplicates is not None:
                examples, split_of, label_counts = self._count(examples, labels)
                if duplicates is not None:
                    if duplicates.dedupe is not None:
                        examples = self._sourced(examples, batch)
                    yield FINGERPRINTS, self._fingerprints(examples, split_of, batch)
                if counting is not None:
                    yield LABEL_COUNTS, label_counts
                if statistics is not None:
                    self._held_statistics.add(values, split_of)
                    if not hold_statistics:
                        yield from self.held_statistics()
            yield EXAMPLES, examples
        if dead_letters:
            self._dead_letters.inc(len(dead_letters))
            counts = collections.Counter(record["reason"] for record in dead_letters)
            for reason, count in counts.items():
                counter = self._by_reason.get(reason)
                if counter is None:
                    counter = beam.metrics.Metrics.counter(METRICS_NAMESPACE,
                                                           f"dead_letter.{reason}")
                    self._by_reason[reason] = counter
                counter.inc(count)
            for record in dead_letters:
                yield DEAD_LETTER, record

    def held_statistics(self):
        """("statistics", ((split, feature), FeatureStatistics)): the partials
        `convert` held (one per split and feature for all its batches since
        the last call or `start_bundle`)."""
        if self._held_statistics is not None:
            for keyed in self._held_statistics.flush():
                yield STATISTICS, keyed

    def _fingerprints(self, examples: HashedExamples, split_of: np.ndarray, batch
                      ) -> FingerprintBatch:
        """The good rows' fingerprints: each content digest over the checked
        features, made here from the Example bytes whichever path made them,
        split, key (a keyless row's stands for its row digest), for removal
        origin, and for near-duplicate images the perceptual hash the image
        reader gave (column ``image_hash``) and the path."""
        digests = content_digests(examples.examples, self._checked_names)
        keys = [key if key is not None else keyless_key(row_digest)
                for key, row_digest in zip(examples.keys, examples.digests)]
        origins = b"".join(getattr(examples, "origins", None) or ())
        hashes = paths = None
        if self._duplicates.image_hashes and not isinstance(batch, ColumnBatch):
            rows = [batch[index] for index in self._good_indices(len(examples))]
            hashes = [row.values.get("image_hash") for row in rows]
            paths = [row.source for row in rows]
        return FingerprintBatch(digests, split_of.astype("<u2").tobytes(), keys, origins,
                                hashes, paths)

    def _good_indices(self, count: int):
        """The batch indices of the converter's last good rows."""
        good = self._converter.good_rows
        return range(count) if good is None else good

    def _sourced(self, examples: HashedExamples, batch) -> SourcedExamples:
        """`examples` naming each row's input (file, row) and origin, from
        the converter's good rows of `batch`."""
        indices = self._good_indices(len(examples))
        if isinstance(batch, ColumnBatch):
            sources = [(batch.source, batch.row_number(index)) for index in indices]
        else:
            sources = [(batch[index].source, batch[index].row) for index in indices]
        return SourcedExamples(salt=examples.salt, sources=sources,
                               origins=[origin_of(source, row) for source, row in sources],
                               joined=examples.joined_digests(), columns=examples.columns,
                               key_nones=examples.key_nones)

    def _count(self, examples: list, labels: list[str | None]
               ) -> tuple[HashedExamples, np.ndarray, tuple]:
        """(the batch with its rows' digests, each row's split index,
        ((split, label, examples), ...)); rows without a label are not
        counted. A row's split comes from its digest, of its key or its
        example without one, as in the shard writer, which takes the
        digests from the batch instead of hashing the rows again; the
        converter made them (`BatchConverter`'s digest salt)."""
        hashed = self._assigner.hashed(examples)
        split_of = self._assigner.split_indices(hashed.words())
        return hashed, split_of, label_counts(self._assigner.names, split_of, labels)


def label_counts(names: Sequence[str], split_of: np.ndarray,
                 labels: Sequence[str | None]
                 ) -> tuple[tuple[str, str, int], ...]:
    """((split, label, examples), ...) sorted, of a batch's rows: row i in
    split names[split_of[i]] with label labels[i] (None: not counted).
    Counted a split at a time over the labels themselves, not over a
    (split, label) pair made per row: most builds have one split. Labels
    held as an int64 array (`IntLabels`) are counted as numbers."""
    if isinstance(labels, IntLabels):
        per_split = labels.counts(split_of, len(names))
    elif len(names) == 1:
        per_split = [collections.Counter(labels)]
    else:
        per_split = [collections.Counter(itertools.compress(labels, (split_of == split).tolist()))
                     for split in range(len(names))]
    return tuple(sorted((names[split], label, count)
                        for split, counts in enumerate(per_split)
                        for label, count in counts.items() if label is not None))


class _ConvertBatchesFn(beam.DoFn):
    """RowBatch -> the tagged pairs of `BatchConversion.convert`."""

    def __init__(self, *args, **kwargs):
        self._conversion = BatchConversion(*args, **kwargs)

    def setup(self):
        relax_young_collections()  # a batch's rows and examples should die young
        keep_freed_memory()  # buffers are freed and made again all the time
        self._conversion.setup()

    def start_bundle(self):
        self._conversion.start_bundle()

    def process(self, batch):
        yield from self._conversion.convert(batch)


class ConvertedRows(NamedTuple):
    """The outputs of RowsToExamples; unpacks as ``examples, dead_letter,
    label_counts, statistics`` (label_counts None when it is `gathered`)."""

    examples: beam.PCollection
    dead_letter: beam.PCollection
    label_counts: beam.PCollection
    statistics: beam.PCollection


class RowsToExamples(beam.PTransform):
    """Checks and serializes rows.

    Takes: RowBatch elements (list[SourceRow]).
    Gives: `ConvertedRows(examples, dead_letter, label_counts, statistics)`:
      examples: ExampleBatch = list[(key: bytes | None, example: bytes)], one
        per input batch with at least one good row;
      dead_letter: one dead-letter dict per failed row;
      label_counts: with `count_labels`, one ``((split, label, examples),
        ...)`` per ExampleBatch (empty without it). Counting here, where
        each row's label is at hand, spares a pass that decodes every
        written record again.
      statistics: with `statistics` (a `StatisticsSetup`), one
        ``((split, feature), FeatureStatistics)`` per batch, split and
        feature, for `statistics.MergeStatistics` (None without it).
    specs/vocabularies: the parsed schema and resolved vocabularies.
    key_column: see `BatchConverter`; keys are `sortable_key` bytes.
    duplicates: with a `DuplicateSetup`, once applied, the transform's
      `fingerprints` attribute is a PCollection of one `FingerprintBatch`
      per batch (`schemas.duplicates`); else it stays None.
    watch_columns: columns to report when rows hold them: once applied, the
      transform's `columns_seen` attribute is a PCollection of tuples of
      column names (each watched column a bundle meets, and the columns of
      its first row); their union over the build tells which watched
      columns no row held.
    gathered: tags of the outputs only a build's result reads
      (`GATHERABLE`: label counts, columns seen), which then have no
      PCollection of their own (`label_counts` and the `columns_seen`
      attribute are None): once applied, the transform's `gathered`
      attribute is one PCollection of their ``(None, (tag, value))``
      (`tagged.select_keyed`), one step where each would take two.

    One DoFn emits every kind as (tag, value) pairs that filters split,
    rather than a multi-output ParDo: Beam's Dask runner (2.77) hands every
    output of a multi-output ParDo to every consumer, whatever its tag.
    """

    def __init__(self, specs: Sequence[FeatureSpec],
                 vocabularies: Mapping[str, Sequence[str]] | None = None,
                 key_column: str | None = None, count_labels: LabelCounting | None = None,
                 watch_columns: Sequence[str] = (),
                 statistics: StatisticsSetup | None = None,
                 duplicates: DuplicateSetup | None = None,
                 gathered: Collection[str] = ()):
        super().__init__()
        self._watch_columns = tuple(watch_columns)
        self._gathered = frozenset(gathered)
        if not self._gathered <= GATHERABLE:
            raise ValueError(f"gathered: only {sorted(GATHERABLE)} can be gathered, "
                             f"not {sorted(self._gathered - GATHERABLE)}")
        self.columns_seen = None
        self.gathered = None
        self.fingerprints = None
        self._duplicates = duplicates
        self._specs = tuple(specs)
        self._vocabularies = dict(vocabularies or {})
        self._key_column = key_column
        self._count_labels = count_labels
        self._statistics = statistics
        # Fail at pipeline construction, not on the workers, on a bad schema.
        BatchConverter(self._specs, self._vocabularies, key_column)
        if count_labels is not None:
            if count_labels.feature not in {spec.name for spec in self._specs}:
                raise ValueError(f"count_labels: there is no feature {count_labels.feature!r}")
            SplitAssigner(count_labels.dataset_name, count_labels.splits)
        if statistics is not None:
            SplitAssigner(statistics.dataset_name, statistics.splits)
        if duplicates is not None:
            SplitAssigner(duplicates.dataset_name, duplicates.splits)

    def expand(self, batches):
        # ("examples", ExampleBatch) | ("dead_letter", dead-letter dict)
        # | ("label_counts", ((split, label, examples), ...))
        # | ("statistics", ((split, feature), FeatureStatistics))
        tagged = batches | "ConvertBatches" >> beam.ParDo(_ConvertBatchesFn(
            self._specs, self._vocabularies, self._key_column, self._count_labels,
            watch_columns=self._watch_columns, statistics=self._statistics,
            duplicates=self._duplicates)).with_output_types(TaggedBatch)
        if self._gathered:
            # (None, (tag, value)) of the gathered tags
            self.gathered = tagged | "GatherParts" >> beam.FlatMap(select_keyed,
                                                                   self._gathered)
        if COLUMNS_SEEN not in self._gathered:
            # (column name, ...)
            self.columns_seen = tagged | "SelectColumnsSeen" >> beam.FlatMap(select,
                                                                            COLUMNS_SEEN)
        if self._duplicates is not None:
            # FingerprintBatch per batch; no step at all when detection is off
            self.fingerprints = tagged | "SelectFingerprints" >> beam.FlatMap(
                select, FINGERPRINTS).with_output_types(Batch)
        return ConvertedRows(
            # ExampleBatch = [(key, example)]
            examples=tagged | "SelectExamples" >> beam.FlatMap(select, EXAMPLES
                                                              ).with_output_types(Batch),
            # dead-letter dict
            dead_letter=tagged | "SelectDeadLetters" >> beam.FlatMap(select, DEAD_LETTER),
            # ((split, label, examples), ...)
            label_counts=(None if LABEL_COUNTS in self._gathered else
                          tagged | "SelectLabelCounts" >> beam.FlatMap(select, LABEL_COUNTS)),
            # ((split, feature), FeatureStatistics); no step when they are off
            statistics=(None if self._statistics is None else
                        tagged | "SelectStatistics" >> beam.FlatMap(select, STATISTICS)))
