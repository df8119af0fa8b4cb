"""Rows -> Examples: checks every row against the schema and serializes it.

`RowsToExamples` takes batches of `SourceRow` and gives batches of
``(key, serialized Example)`` plus a ``dead_letter`` PCollection with one record
per row that failed and, when asked, the examples counted per split and
label, and statistics per split and feature (`transforms/statistics.py`).
The per-row work is `BatchConverter`, a plain class tested without Beam; the
DoFn only wraps it and counts.
"""

from __future__ import annotations

import collections
import logging
import math
import struct
import traceback
from typing import Any, Callable, Iterable, Mapping, NamedTuple, Sequence

import apache_beam as beam
import numpy as np

from ..schemas.checks import RowEncoder
from ..schemas.columns import bytes_by_length, rows_as_bytes
from ..schemas.dead_letters import RowError, dead_letter, json_safe
from ..schemas.features import FeatureSpec, label_text
from ..schemas.statistics import batch_statistics
from .batch_coder import Batch, TaggedBatch
from .gc_tuning import relax_young_collections
from .rows import ColumnBatch, SourceRow
from .shard_plan import HashedExamples, SplitAssigner
from .statistics import CheckedValues, StatisticsSetup

__all__ = ["DEAD_LETTER", "EXAMPLES", "LABEL_COUNTS", "METRICS_NAMESPACE", "STATISTICS",
           "BatchConverter", "ConvertedRows", "LabelCounting", "RowsToExamples", "sortable_key"]

EXAMPLES = "examples"
DEAD_LETTER = "dead_letter"
LABEL_COUNTS = "label_counts"
STATISTICS = "statistics"
# Distinct raw label values whose text a converter remembers.
_MAX_KNOWN_LABELS = 10_000
METRICS_NAMESPACE = "recordforge"
_LOG = logging.getLogger(__name__)

# One type tag per kind of key, so a 1 and a "1" never produce the same key;
# keys of different types order by tag.
_TAG_BOOL = b"\x01"
_TAG_INT = b"\x02"
_TAG_FLOAT = b"\x03"
_TAG_TEXT = b"\x04"
_TAG_BYTES = b"\x05"
_MAX_INT_BYTES = 126  # the length byte below stays within 0x01..0xFE
_DOUBLE = struct.Struct(">d")
_SIGN = 1 << 63
_ALL_ONES = (1 << 64) - 1
# uint64 thresholds where an int key's body grows by a byte: 1, 2**8, ... 2**56.
_BYTE_STEPS = tuple(np.uint64(1 << (8 * k)) for k in range(8))


def sortable_key(value: Any) -> bytes:
    """Encodes a key value so that byte order equals value order.

    ints order numerically (any size up to 126 bytes, negatives included),
    floats numerically (-0.0 == 0.0, NaN after +inf), str by its UTF-8 bytes
    (= code point order), bytes as they are, bools False < True. Each type has
    its own leading tag byte, so values of different types never collide.
    Raises TypeError for other types (None, lists, dicts ...) and ValueError
    for ints too large or text that is not valid UTF-8.
    """
    kind = type(value)
    if kind is str:
        return _TAG_TEXT + value.encode("utf-8")
    if kind is int:
        return _TAG_INT + _int_key(value)
    if kind is bool:
        return _TAG_BOOL + (b"\x01" if value else b"\x00")
    if kind is float:
        return _TAG_FLOAT + _float_key(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _TAG_BYTES + bytes(value)
    if isinstance(value, str):
        return _TAG_TEXT + str(value).encode("utf-8")
    if isinstance(value, int):  # int subclasses such as IntEnum
        return _TAG_INT + _int_key(int(value))
    if isinstance(value, float):
        return _TAG_FLOAT + _float_key(float(value))
    raise TypeError(f"a {type(value).__name__} cannot be a key; keys are int, float, str "
                    "or bytes")


def _int_key(number: int) -> bytes:
    # A length byte then the magnitude big-endian: more bytes = further from 0.
    # Non-negatives: 0x80 + length; negatives: 0x7F - length with the body
    # counted up from -256**length, so within one length bytes rise with value.
    if number >= 0:
        size = (number.bit_length() + 7) // 8
        if size > _MAX_INT_BYTES:
            raise ValueError(f"integer key with {size} bytes is too large")
        return bytes((0x80 + size,)) + number.to_bytes(size, "big")
    size = ((-number).bit_length() + 7) // 8
    if size > _MAX_INT_BYTES:
        raise ValueError(f"integer key with {size} bytes is too large")
    return bytes((0x7F - size,)) + ((1 << (8 * size)) + number).to_bytes(size, "big")


def _int64_keys(values: Sequence[int]) -> list[bytes]:
    """sortable_key of each value (ints within int64), a column at a time."""
    numbers = np.array(values, dtype=np.int64)
    unsigned = numbers.view(np.uint64)  # two's complement: its low bytes are the body
    negative = numbers < 0
    magnitude = np.where(negative, ~unsigned + np.uint64(1), unsigned)
    sizes = np.zeros(len(numbers), dtype=np.int64)
    for step in _BYTE_STEPS:
        sizes += magnitude >= step
    length_bytes = np.where(negative, 0x7F - sizes, 0x80 + sizes).astype(np.uint8)
    big_endian = unsigned.astype(">u8").view(np.uint8).reshape(-1, 8)

    def keys(size: int, rows) -> list[bytes]:
        out = np.empty((len(length_bytes[rows]), 2 + size), dtype=np.uint8)
        out[:, 0] = _TAG_INT[0]
        out[:, 1] = length_bytes[rows]
        out[:, 2:] = big_endian[rows, 8 - size:]
        return rows_as_bytes(out)
    return bytes_by_length(sizes, keys)


def _float_key(number: float) -> bytes:
    # IEEE 754 bits order like the numbers once the sign bit is flipped for
    # positives and every bit is flipped for negatives.
    if number != number:
        number = math.nan  # one NaN, positive: sorts after +inf
    elif number == 0.0:
        number = 0.0  # -0.0 == 0.0
    (bits,) = struct.unpack(">Q", _DOUBLE.pack(number))
    bits = bits ^ _ALL_ONES if bits & _SIGN else bits | _SIGN
    return bits.to_bytes(8, "big")


def _render(value: Any) -> Any:
    # A value that even json_safe cannot render (its tolist() or isoformat()
    # raised) must not turn one bad row into a failed pipeline: its type
    # stands in for it.
    try:
        return json_safe(value)
    except Exception:
        return f"<{type(value).__name__}>"


def _input_for_dead_letter(values: Mapping[str, Any]) -> dict:
    # Image rows carry the whole file in "image"; the dead letter identifies
    # the image by its path instead.
    return {str(name): _render(value) for name, value in values.items()
            if not (name == "image" and isinstance(value, (bytes, bytearray, memoryview)))}


class BatchConverter:
    """Converts batches of SourceRow into Examples and dead-letter records.

    key_column: the column whose value orders rows and assigns splits, or None
      (then every key is None and the Example's content is used downstream).
      When a scalar int64/float feature (without a vocabulary) reads the key
      column, its converted value is the key, so "10" sorts after "9" in CSV;
      otherwise the raw value is.
    """

    def __init__(self, specs: Sequence[FeatureSpec], vocabularies: Mapping[str, Sequence[str]],
                 key_column: str | None):
        self._encoder = RowEncoder(specs, vocabularies)
        self._key_column = key_column
        self._known_labels: dict[tuple, dict] = {}
        self._key_feature = None
        if key_column is not None:
            for spec in specs:
                if (spec.source == key_column and spec.shape == () and spec.vocabulary is None
                        and spec.stored_kind in ("int64", "float")):
                    self._key_feature = spec.name
                    self._key_convert = self._encoder.converter(spec.name)
                    break

    def convert_batch(self, batch: Iterable[SourceRow]) -> tuple[list, list[dict]]:
        """RowBatch -> (ExampleBatch [(key, example)], [dead-letter dict]).

        Never raises for a bad row: a RowError becomes its dead letter, any
        other exception an `internal_error` dead letter with the traceback."""
        examples, _, dead_letters = self.convert_labelled_batch(batch, None)
        return examples, dead_letters

    def convert_labelled_batch(self, batch: Iterable[SourceRow] | ColumnBatch,
                               label: str | None, vocabulary: Sequence[str] | None = None
                               ) -> tuple[list, list[str | None], list[dict]]:
        """Like `convert_batch`, plus each good row's label: how `label_text`
        names the first value the row stores in feature `label` (None when it
        stores none, or when `label` is None). The value comes from the same
        converter that encoded the row.

        The batch goes a column at a time first (`RowEncoder.encode_columns`);
        rows that path leaves, and only those, go row by row."""
        return self.convert_observed_batch(batch, label, vocabulary)[:3]

    def convert_observed_batch(self, batch: Iterable[SourceRow] | ColumnBatch,
                               label: str | None, vocabulary: Sequence[str] | None = None,
                               plan=None) -> tuple[list, list[str | None], list[dict], Any]:
        """Like `convert_labelled_batch`, plus the good rows' checked values
        for statistics: a `CheckedValues` for `plan` (a
        `schemas.statistics.StatisticsPlan`), or None without one."""
        if isinstance(batch, ColumnBatch):
            column, row_at, count = batch.column, batch.row, len(batch)
        else:
            rows = batch if isinstance(batch, list) else list(batch)

            def column(name: str) -> list:
                return [row.values.get(name) for row in rows]
            row_at, count = rows.__getitem__, len(rows)
        fast_examples, keys, fast_labels, checked = self._column_path(column, count, label,
                                                                      vocabulary)
        label_of = self._labeller(label, vocabulary) if label is not None else None
        label_source = self._encoder.source_of(label) if label is not None else None
        if None not in fast_examples:
            if fast_labels is None:
                fast_labels = (list(map(label_of, column(label_source))) if label is not None
                               else [None] * count)
            return list(zip(keys, fast_examples)), fast_labels, [], (
                None if plan is None else CheckedValues(self._encoder, plan, column, checked, None))
        examples = []
        labels = []
        dead_letters = []
        good = []
        for index, example in enumerate(fast_examples):
            if example is not None:
                good.append(index)
                examples.append((keys[index], example))
                labels.append(fast_labels[index] if fast_labels is not None
                              else label_of(row_at(index).values.get(label_source))
                              if label is not None else None)
                continue
            row = row_at(index)
            try:
                example = self._convert_row(row)
                labels.append(label_of(row.values.get(label_source)) if label is not None
                              else None)
                examples.append(example)
                good.append(index)
            except RowError as error:
                dead_letters.append(self._dead_letter(row, error.stage, error.reason,
                                                      error.feature, error.message))
            except Exception:  # a bug must cost one row, not the pipeline
                dead_letters.append(self._dead_letter(
                    row, "encode", "internal_error", None,
                    f"unexpected error converting the row:\n{traceback.format_exc()}"))
        return examples, labels, dead_letters, (
            None if plan is None else CheckedValues(self._encoder, plan, column, checked, good))

    def _column_path(self, column: Callable[[str], list], count: int, label: str | None,
                     vocabulary: Sequence[str] | None) -> tuple[list, list, list | None, dict]:
        """(examples, keys, labels, checked) of the rows the column path
        takes: examples[i] None where row i must go row by row; labels None
        when they are not known column-wise; checked as `encode_columns`."""
        try:
            examples, checked = self._encoder.encode_columns(column, count)
            keys = self._column_keys(column, examples, checked)
            labels = None
            if label is not None and label in checked:
                labels = _column_labels(checked[label], vocabulary)
            return examples, keys, labels, checked
        except Exception:  # a bug here must cost speed, not rows: the row path decides
            _LOG.warning("column path failed; converting the batch row by row",
                         exc_info=True)
            return [None] * count, [], None, {}

    def _column_keys(self, column: Callable[[str], list], examples: list,
                     checked: Mapping[str, list]) -> list:
        """Each row's key (None without a key column); a row whose key
        fails has its example set to None, for the row path to report."""
        if self._key_column is None:
            return [None] * len(examples)
        if self._key_feature is not None and self._key_feature in checked:
            values = checked[self._key_feature]
            if set(map(type, values)) == {int}:
                return _int64_keys(values)
            return list(map(sortable_key, values))
        keys = []
        for index, raw_key in enumerate(column(self._key_column)):
            key = None
            if examples[index] is not None:
                try:
                    key = self._key_of(raw_key)
                except Exception:
                    examples[index] = None
            keys.append(key)
        return keys

    def _labeller(self, label: str, vocabulary: Sequence[str] | None):
        """the raw value of the label's column -> the row's label text (or
        None), remembering the text of the raw values seen (labels repeat:
        converting each once is enough). Raw values are remembered with
        their type, so that 1, 1.0 and True stay apart."""
        convert = self._encoder.converter(label)
        known = self._known_labels.setdefault((label, tuple(vocabulary or ())), {})

        def label_of(raw: Any) -> str | None:
            try:
                return known[type(raw), raw]
            except KeyError:
                pass
            except TypeError:  # an unhashable value (a list) is converted each time
                stored = convert(raw)
                return label_text(stored[0], vocabulary) if stored else None
            stored = convert(raw)
            text = label_text(stored[0], vocabulary) if stored else None
            if len(known) < _MAX_KNOWN_LABELS:
                known[type(raw), raw] = text
            return text

        return label_of

    def _convert_row(self, row: SourceRow) -> tuple[bytes | None, bytes]:
        values = row.values
        if self._key_column is None:
            return None, self._encoder.encode(values)
        raw_key = values.get(self._key_column)
        self._check_key_present(raw_key)
        # Encoding first: a row with a bad value reports the same error whether
        # or not its key is also unusable.
        example = self._encoder.encode(values)
        return self._key_of(raw_key), example

    def _check_key_present(self, raw_key: Any) -> None:
        if raw_key is None or (type(raw_key) is str and not (
                raw_key.strip() if self._key_feature is not None else raw_key)):
            # (whitespace is a missing number, never a default standing in as the key)
            raise RowError("missing_value", f"key column {self._key_column!r} has no value",
                           feature=self._key_column)

    def _key_of(self, raw_key: Any) -> bytes:
        """The sortable key of a raw key value; raises RowError."""
        self._check_key_present(raw_key)
        column = self._key_column
        if self._key_feature is not None:
            # The key feature reads the key column; its checks apply.
            return sortable_key(self._key_convert(raw_key)[0])
        try:
            return sortable_key(raw_key)
        except UnicodeEncodeError:
            raise RowError("invalid_utf8", f"key column {column!r}: the value is not "
                           "valid UTF-8 text", feature=column) from None
        except (TypeError, ValueError) as error:
            raise RowError("type_mismatch", f"key column {column!r}: {error}",
                           feature=column) from None

    def _dead_letter(self, row: SourceRow, stage: str, reason: str, feature: str | None,
                     message: str) -> dict:
        key = row.values.get(self._key_column) if self._key_column is not None else None
        return dead_letter(source=row.source, row=row.row, key=_render(key), stage=stage,
                           reason=reason, feature=feature, message=message,
                           input=_input_for_dead_letter(row.values))


class LabelCounting(NamedTuple):
    """What `RowsToExamples` needs to count examples per split and label:
    the label feature and its vocabulary (None: values are named as
    stored), and the dataset name and splits that assign rows to splits
    exactly as the shard writer does."""

    feature: str
    vocabulary: tuple[str, ...] | None
    dataset_name: str
    splits: tuple[tuple[str, float], ...]


class _ConvertBatchesFn(beam.DoFn):
    """RowBatch -> ("examples", ExampleBatch), ("dead_letter", dead-letter dict),
    with label counting ("label_counts", ((split, label, examples), ...)) and
    with statistics ("statistics", ((split, feature), FeatureStatistics))."""

    def __init__(self, specs, vocabularies, key_column, counting: LabelCounting | None,
                 statistics: StatisticsSetup | None = None):
        # Plain values only: the converter (closures) is rebuilt on the worker.
        self._specs = tuple(specs)
        self._vocabularies = {name: tuple(labels) for name, labels in vocabularies.items()}
        self._key_column = key_column
        self._counting = counting
        self._statistics = statistics

    def setup(self):
        relax_young_collections()  # a batch's rows and examples should die young
        self._converter = BatchConverter(self._specs, self._vocabularies, self._key_column)
        splitting = self._counting or self._statistics
        self._assigner = (SplitAssigner(splitting.dataset_name, splitting.splits)
                          if splitting is not None else None)
        self._rows_converted = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "rows_converted")
        self._dead_letters = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "dead_letters")
        self._by_reason = {}

    def process(self, batch):
        counting, statistics = self._counting, self._statistics
        examples, labels, dead_letters, values = self._converter.convert_observed_batch(
            batch, counting.feature if counting else None,
            counting.vocabulary if counting else None,
            statistics.plan if statistics else None)
        if examples:
            self._rows_converted.inc(len(examples))
            if counting is not None or statistics is not None:
                examples, split_of, label_counts = self._count(examples, labels)
                if counting is not None:
                    yield LABEL_COUNTS, label_counts
                if statistics is not None:
                    for keyed in batch_statistics(statistics.plan, values, split_of,
                                                  self._assigner.names):
                        yield STATISTICS, keyed
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

    def _count(self, examples: list, labels: list[str | None]
               ) -> tuple[HashedExamples, np.ndarray, tuple]:
        """(the batch with its rows' digests, each row's split index,
        ((split, label, examples), ...)); rows without a label are not counted. A row's split comes from its
        key, or its example without one, as in the shard writer, which takes
        the digests from the batch instead of hashing the rows again."""
        digests, words = self._assigner.hash_rows(
            [example if key is None else key for key, example in examples])
        names = self._assigner.names
        split_of = self._assigner.split_indices(words)
        counts = collections.Counter(zip(split_of.tolist(), labels))
        return (HashedExamples(examples, self._assigner.salt, digests), split_of,
                tuple(sorted((names[split], label, count)
                             for (split, label), count in counts.items() if label is not None)))


def _column_labels(values: list, vocabulary: Sequence[str] | None) -> list[str] | None:
    """The label text of each checked label value (ints or bytes; floats
    are left to the row path, whose remembered texts keep -0.0 apart)."""
    if set(map(type, values)) - {int, bytes}:
        return None
    texts = {value: label_text(value, vocabulary) for value in set(values)}
    return list(map(texts.__getitem__, values))


def _select(tagged: tuple[str, Any], tag: str):
    if tagged[0] == tag:
        yield tagged[1]


class ConvertedRows(NamedTuple):
    """The outputs of RowsToExamples; unpacks as ``examples, dead_letter,
    label_counts, statistics``."""

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
        feature, for `MergeStatistics` (empty without it).
    specs/vocabularies: the parsed schema and resolved vocabularies.
    key_column: see `BatchConverter`; keys are `sortable_key` bytes.

    One DoFn emits every kind as (tag, value) pairs that filters split,
    rather than a multi-output ParDo: Beam's Dask runner (2.77) hands every
    output of a multi-output ParDo to every consumer, whatever its tag.
    """

    def __init__(self, specs: Sequence[FeatureSpec],
                 vocabularies: Mapping[str, Sequence[str]] | None = None,
                 key_column: str | None = None, count_labels: LabelCounting | None = None,
                 statistics: StatisticsSetup | None = None):
        super().__init__()
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

    def expand(self, batches):
        # ("examples", ExampleBatch) | ("dead_letter", dead-letter dict)
        # | ("label_counts", ((split, label, examples), ...))
        # | ("statistics", ((split, feature), FeatureStatistics))
        tagged = batches | "ConvertBatches" >> beam.ParDo(_ConvertBatchesFn(
            self._specs, self._vocabularies, self._key_column, self._count_labels,
            self._statistics)
        ).with_output_types(TaggedBatch)
        return ConvertedRows(
            # ExampleBatch = [(key, example)]
            examples=tagged | "SelectExamples" >> beam.FlatMap(_select, EXAMPLES
                                                               ).with_output_types(Batch),
            # dead-letter dict
            dead_letter=tagged | "SelectDeadLetters" >> beam.FlatMap(_select, DEAD_LETTER),
            # ((split, label, examples), ...)
            label_counts=tagged | "SelectLabelCounts" >> beam.FlatMap(_select, LABEL_COUNTS),
            # ((split, feature), FeatureStatistics)
            statistics=tagged | "SelectStatistics" >> beam.FlatMap(_select, STATISTICS))
