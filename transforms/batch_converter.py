"""Rows -> Examples a batch at a time, as plain code: keys, labels and dead letters included.

`BatchConverter` checks and encodes a batch of `SourceRow` (or a
`ColumnBatch`) with the schema's `RowEncoder`, a column at a time first and
row by row for the rows that path leaves, and gives each good row's key
(`sortable_key`) and label, and a dead-letter record for each bad row. The
Beam step around it is `to_examples.RowsToExamples`; it is tested without
Beam.
"""

from __future__ import annotations

import logging
import traceback
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from ..schemas.dead_letters import RowError, dead_letter, json_safe, row_faults
from ..schemas.features import FeatureSpec, label_text
from ..schemas.keys import int64_keys, sortable_key
from ..schemas.row_encoder import RowEncoder
from .framed_examples import FramedExamples
from .framed_keys import FramedKeys
from .merge_statistics import CheckedValues, PartlyChecked
from .native_rows import NativeRows
from .readers.rows import ColumnBatch, SourceRow
from .splits import HASH_SIZE, ExampleRows, HashedExamples, hashed_sources, row_digests
from .int_labels import IntLabels

__all__ = ["BatchConverter"]

# Distinct raw label values whose text a converter remembers.
_MAX_KNOWN_LABELS = 10_000
_LOG = logging.getLogger(__name__)


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
    digest_salt: with a dataset's salt (`splits.dataset_salt`), every batch
      of examples is a `HashedExamples` carrying its rows' digests under it,
      made by the native convert call in the same pass where it runs; None:
      an `ExampleRows`.
    """

    def __init__(self, specs: Sequence[FeatureSpec], vocabularies: Mapping[str, Sequence[str]],
                 key_column: str | None, digest_salt: bytes | None = None):
        self._encoder = RowEncoder(specs, vocabularies)
        self._key_column = key_column
        self._salt = digest_salt
        self._known_labels: dict[tuple, dict] = {}
        self._key_feature = None
        if key_column is not None:
            for spec in specs:
                if (spec.source == key_column and spec.shape == () and spec.vocabulary is None
                        and spec.stored_kind in ("int64", "float")):
                    self._key_feature = spec.name
                    self._key_convert = self._encoder.converter(spec.name)
                    break
        self._native = NativeRows(specs, vocabularies, key_column, self._key_feature,
                                  digest_salt)
        # The batch indices of the last converted batch's good rows, in the
        # order of its examples (None: every row), for a caller that names
        # each example's input row (duplicate removal's dead letters).
        self.good_rows: list[int] | None = None

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
        converter that encoded the row, applied to the same raw value (at a
        nested ``from:`` path, the value there).

        The batch goes a column at a time first (`RowEncoder.encode_columns`);
        rows that path leaves, and only those, go row by row."""
        examples, labels, dead_letters, _ = self.convert_observed_batch(batch, label, vocabulary)
        return examples, list(labels), dead_letters

    def convert_observed_batch(self, batch: Iterable[SourceRow] | ColumnBatch,
                               label: str | None, vocabulary: Sequence[str] | None = None,
                               plan=None) -> tuple[list, list[str | None], list[dict], Any]:
        """Like `convert_labelled_batch`, plus the good rows' checked values
        for statistics: a `statistics.CheckedValues` for `plan` (a
        `schemas.stats.StatisticsPlan`), or None without one. The labels
        are a sequence of texts, not always a list (`IntLabels`)."""
        if isinstance(batch, ColumnBatch):
            column, row_at, count = batch.column, batch.row, len(batch)
        else:
            rows = batch if isinstance(batch, list) else list(batch)

            def column(name: str) -> list:
                return [row.values.get(name) for row in rows]
            row_at, count = rows.__getitem__, len(rows)
        fast = self._native_path(batch, label, vocabulary)
        digests = None
        if fast is not None:
            fast, texts, digests, declined = fast[:4], fast[4], fast[5], fast[6]
            if texts:
                column = _with_columns(column, texts)
        else:
            fast = self._column_path(column, count, label, vocabulary)
            declined = None  # (counted below only when some row was taken)
        fast_examples, keys, fast_labels, checked = fast
        label_of = label_in = label_source = None
        if label is not None:
            # The label's raw value is read as the encoder reads the
            # feature's (at a nested path's keys: its read key is no column
            # of the row), so that the label names the value the row stores.
            label_of = self._labeller(label, vocabulary)
            label_in = self._encoder.reader(label)
            label_source = self._encoder.source_of(label)
        if declined == 0 or (declined is None and None not in fast_examples):
            self.good_rows = None
            if fast_labels is None:
                fast_labels = (list(map(label_of, self._encoder.columns_as_read(column)(
                    label_source))) if label is not None else [None] * count)
            return self._rows(keys, fast_examples, digests), fast_labels, [], (
                None if plan is None else CheckedValues(self._encoder, plan, column, checked, None))
        keys_kept = []
        examples = []
        labels = []
        dead_letters = []
        good = []
        redone = []  # where the rows the row path converted are in `examples`
        for index, example in enumerate(fast_examples):
            if example is not None:
                good.append(index)
                keys_kept.append(keys[index])
                examples.append(example)
                labels.append(fast_labels[index] if fast_labels is not None
                              else label_of(label_in(row_at(index).values))
                              if label is not None else None)
                continue
            row = row_at(index)
            try:
                key, example = self._convert_row(row)
                labels.append(label_of(label_in(row.values)) if label is not None
                              else None)
                redone.append(len(examples))
                keys_kept.append(key)
                examples.append(example)
                good.append(index)
            except RowError as error:
                dead_letters.append(self._dead_letter(row, error.stage, error.reason,
                                                      error.feature, error.message,
                                                      self._faults(row, error)))
            except Exception:  # a bug must cost one row, not the pipeline
                dead_letters.append(self._dead_letter(
                    row, "encode", "internal_error", None,
                    f"unexpected error converting the row:\n{traceback.format_exc()}"))
        self.good_rows = good
        if digests is not None:
            digests = self._spliced(digests, len(fast_examples), good, redone, keys_kept,
                                    examples)
        if declined is not None:  # (the kernel's batch: its Examples framed, as a clean one's)
            examples = FramedExamples.of(examples)
        return self._rows(keys_kept, examples, digests), labels, dead_letters, (
            None if plan is None else CheckedValues(self._encoder, plan, column, checked, good))

    def _rows(self, keys: list | FramedKeys, examples: list | FramedExamples,
              digests: bytes | None = None) -> ExampleRows:
        """The good rows' ExampleBatch, as their columns (the shard writer
        wants them so): the examples a `FramedExamples` and the keys a
        `FramedKeys` from the native kernel, lists from the Python paths; with a digest salt, a
        HashedExamples with their digests: the kernel's (`digests`), or
        made here. Every good row has a key with a key column and none
        without, so the Nones are not counted again downstream."""
        if not isinstance(keys, (list, FramedKeys)):
            keys = list(keys)
        if not isinstance(examples, (list, FramedExamples)):
            examples = list(examples)
        key_nones = 0 if self._key_column is not None else len(keys)
        if self._salt is None:
            return ExampleRows.zipped(keys, examples, key_nones)
        if digests is None:
            digests = row_digests(self._salt, hashed_sources(keys, examples, key_nones))
        return HashedExamples(salt=self._salt, joined=digests, columns=(keys, examples),
                              key_nones=key_nones)

    def _spliced(self, digests: bytes, count: int, good: list[int], redone: list[int],
                 keys: list, examples: list) -> bytes | None:
        """The good rows' digests: the kernel's (`digests`, of all `count`
        rows of the batch, zeros where it declined a row) at `good`, and at
        the positions `redone` (rows the row path converted) made here."""
        if len(digests) != HASH_SIZE * count:
            return None  # not the kernel's promise: the rows are hashed whole
        table = np.frombuffer(digests, dtype=np.uint8).reshape(count, HASH_SIZE)[good]
        if redone:
            made = row_digests(self._salt, [examples[at] if keys[at] is None else keys[at]
                                            for at in redone])
            table[redone] = np.frombuffer(made, dtype=np.uint8).reshape(-1, HASH_SIZE)
        return table.tobytes()

    def _column_path(self, column: Callable[[str], list], count: int, label: str | None,
                     vocabulary: Sequence[str] | None) -> tuple[list, list, list | None, dict]:
        """(examples, keys, labels, checked) of the rows the column path
        takes: examples[i] None where row i must go row by row; labels None
        when they are not known column-wise; checked as `encode_columns`."""
        try:
            examples, checked = self._encoder.encode_columns(column, count)
            keys = self._column_keys(column, examples, checked)
            return examples, keys, _checked_labels(checked, label, vocabulary), checked
        except Exception:  # a bug here must cost speed, not rows: the row path decides
            _LOG.warning("column path failed; converting the batch row by row",
                         exc_info=True)
            return [None] * count, [], None, {}

    def _native_path(self, batch: Any, label: str | None, vocabulary: Sequence[str] | None
                     ) -> tuple[list, list, list | None, dict, dict, bytes | None, int] | None:
        """`_column_path`'s answer from the native table kernel, for a CSV
        run when the kernel runs (`native_rows`), the raw text columns
        it gave (source -> str values: the batch need not split them),
        the rows' digests (None without a salt) and how many rows it
        declined; None otherwise. The rows it declines take the row path,
        as the column path's do."""
        try:
            done = self._native.convert(batch)
        except Exception:  # a bug here must cost speed, not rows: the column path decides
            _LOG.warning("native table kernel failed; converting the batch in Python",
                         exc_info=True)
            return None
        if done is None:
            return None
        examples, keys, checked, texts, digests, declined = done
        return (examples, keys, _checked_labels(checked, label, vocabulary), checked, texts,
                digests, declined)

    def _column_keys(self, column: Callable[[str], list], examples: list,
                     checked: Mapping[str, list]) -> list:
        """Each row's key (None without a key column); a row whose key
        fails has its example set to None, for the row path to report."""
        if self._key_column is None:
            return [None] * len(examples)
        if self._key_feature is not None and self._key_feature in checked:
            values = checked[self._key_feature]
            if set(map(type, values)) == {int}:
                return int64_keys(values)
            return list(map(sortable_key, values))
        keys = []
        for index, raw_key in enumerate(column(self._key_column)):
            key = None
            if examples[index] is not None:
                try:
                    key = self.key_of(raw_key)
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
        return self.key_of(raw_key), example

    def _check_key_present(self, raw_key: Any) -> None:
        if raw_key is None or (type(raw_key) is str and not (
                raw_key.strip() if self._key_feature is not None else raw_key)):
            # (whitespace is a missing number, never a default standing in as the key)
            raise RowError("missing_value", f"key column {self._key_column!r} has no value",
                           feature=self._key_column)

    def key_of(self, raw_key: Any) -> bytes:
        """The sortable key of a raw value of the key column: what a row
        holding it is ordered and split by. Raises RowError."""
        self._check_key_present(raw_key)
        column = self._key_column
        if self._key_feature is not None:
            # The key feature reads the key column; its checks apply.
            stored = self._key_convert(raw_key)
            if not stored:  # one of an optional key feature's null texts
                raise RowError("missing_value", f"key column {column!r} has no value",
                               feature=column)
            return sortable_key(stored[0])
        try:
            return sortable_key(raw_key)
        except UnicodeEncodeError:
            raise RowError("invalid_utf8", f"key column {column!r}: the value is not "
                           "valid UTF-8 text", feature=column) from None
        except (TypeError, ValueError) as error:
            raise RowError("type_mismatch", f"key column {column!r}: {error}",
                           feature=column) from None

    def _faults(self, row: SourceRow, first: RowError) -> list[dict]:
        """Every fault of a failed row, `first` (the one reported) first: each
        failing feature's, and the key's."""
        more = []
        if self._key_column is not None:
            try:
                self.key_of(row.values.get(self._key_column))
            except RowError as error:
                more.append(error)
        try:
            more[:0] = self._encoder.faults(row.values)
        except Exception:  # the faults are extra detail; the first is already known
            pass
        return row_faults(first, more)

    def _dead_letter(self, row: SourceRow, stage: str, reason: str, feature: str | None,
                     message: str, errors: list[dict] | None = None) -> dict:
        key = row.values.get(self._key_column) if self._key_column is not None else None
        return dead_letter(source=row.source, row=row.row, key=_render(key), stage=stage,
                           reason=reason, feature=feature, message=message,
                           input=_input_for_dead_letter(row.values), errors=errors)


def _with_columns(column: Callable[[str], list], known: Mapping[str, list]
                  ) -> Callable[[str], list]:
    """`column`, serving the columns of `known` (the same values) from it."""
    def with_known(name: str) -> list:
        values = known.get(name)
        return values if values is not None else column(name)
    return with_known


def _checked_labels(checked: Mapping[str, list], label: str | None,
                    vocabulary: Sequence[str] | None) -> list[str] | None:
    """Each row's label text from the label feature's checked values, or
    None when its column has none for every row."""
    values = None if label is None else checked.get(label)
    if values is None or isinstance(values, PartlyChecked):
        return None  # (a partly checked column's rows are labelled one by one)
    return _column_labels(values, vocabulary)


def _column_labels(values, vocabulary: Sequence[str] | None) -> Sequence[str] | None:
    """The label text of each checked label value (ints or bytes; floats
    are left to the row path, whose remembered texts keep -0.0 apart). The
    native kernel's int64 values (an array: vocabulary ids or numbers) stay
    values, named only where read (`IntLabels`): counting them needs no
    text per row."""
    if isinstance(values, np.ndarray):
        labels = IntLabels.of(values, vocabulary)
        if labels is not None:
            return labels
        values = values.tolist()
    if set(map(type, values)) - {int, bytes}:
        return None
    texts = {value: label_text(value, vocabulary) for value in set(values)}
    return list(map(texts.__getitem__, values))
