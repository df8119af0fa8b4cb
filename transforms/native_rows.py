"""The native table kernel on the row path: a CSV run or an Arrow batch in one call, declined rows to Python.

`NativeRows` compiles a schema's features, for a CSV header, into the
kernel's plan (`recordforge._native.CsvPlan`) once, and converts each
`CsvRunBatch` with one `convert_checked_run` call (on the fields the
reader's `check_csv_run` found; `convert_csv_run` for a run not checked): every row's
Example, framed into one buffer (a `FramedExamples`: no bytes object per
row), and key (in one buffer too: a `FramedKeys`), the checked values of
the features whose whole column passed (text as a `TextColumn`, every
row's value in one buffer, read as the str values
`RowEncoder.encode_columns` gives; numbers and vocabulary ids as the
kernel's array: no Python object made per row; a column some row holds
none of as a `merge_statistics.PartlyChecked`, for the statistics) and, given the dataset's
salt, every row's digest (`splits.row_digests` of its key, or of its
Example without one), back to back in one bytes object. The kernel takes
only rows whose every value the fast path (`schemas/fast_paths.py`)
stores as it stands; the rows it declines (an empty span; examples[i]
None in `kernel_examples`' list) go down the
Python row path, which converts them or writes their dead letter exactly
as without the extension. A Parquet record batch (`ArrowBatch`) goes to
`convert_arrow_batch` as its columns' buffers, with the same plan and the
same answer; a JSONL batch (`JsonlRunBatch`) to `convert_jsonl_run` as its
lines, a TFRecord batch (`ExampleRunBatch`) to `convert_example_run` as
its framed records (whose features are the columns: a row keyed by a
column's raw value, a list here, takes the Python path). Declared null texts (`null_values`) and ISO 8601 timestamps
(`native/src/nulls.rs`, `timestamp.rs`) are in the plan; a schema the
kernel does not cover (lists, strptime timestamp formats, nested paths in
CSV and Parquet, a feature or key whose column the header lacks) has no
plan, and its batches take the Python path whole.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
from itertools import pairwise
from typing import Any, Mapping, Sequence

import numpy as np

from ..schemas.checks import compile_feature
from ..schemas.example import ExampleEncoder
from ..schemas.fast_paths import fast_bounds
from ..schemas.features import INT64_MAX, INT64_MIN, FeatureSpec
from ..schemas.native import kernels
from ..schemas.text_column import TextColumn
from ..schemas.timestamps import UNIT_NANOS, zone
from .framed_examples import FramedExamples
from .framed_keys import FramedKeys
from .merge_statistics import PartlyChecked
from .readers.arrow_batch import ArrowBatch, arrow_buffers
from .readers.csv import CsvRunBatch
from .readers.jsonl import JsonlRunBatch
from .readers.tfrecords import ExampleRunBatch
from .tfrecord import FOOTER_SIZE, HEADER_SIZE

__all__ = ["NativeRows"]

_LOG = logging.getLogger(__name__)


class _Unsupported(Exception):
    """The schema (or the header) needs a rule the kernel does not have."""


class NativeRows:
    """Converts CSV runs with the native kernel for one schema.

    specs, vocabularies: as `RowEncoder`; key_column: as `BatchConverter`;
    key_feature: the feature whose checked value is the key (the
    converter's `_key_feature`), or None to key by the column's text;
    salt: the salt of the rows' digests, or None for no digests."""

    def __init__(self, specs: Sequence[FeatureSpec], vocabularies: Mapping[str, Sequence[str]],
                 key_column: str | None, key_feature: str | None, salt: bytes | None = None):
        self._native = kernels()
        by_name = {spec.name: spec for spec in specs}
        # The entries' order is the Example encoder's (keys' UTF-8 bytes).
        order = ExampleEncoder({spec.name: spec.stored_kind for spec in specs}).names
        self._specs = [by_name[name] for name in order]
        self._vocabularies = vocabularies
        self._key_column = key_column
        self._key_feature = key_feature
        self._salt = salt
        self._plans: dict[tuple[str, ...], Any] = {}
        # A JSONL row's columns: the values the features read (a top-level
        # key, or a nested path's tuple of keys) and the key column.
        self._jsonl_names = tuple(dict.fromkeys(
            [spec.read_key for spec in self._specs] + [key_column] * (key_column is not None)))
        # (a name that is not UTF-8 matches no key the kernel reads)
        self._jsonl_keys = [[key.encode("utf-8", "surrogatepass")
                             for key in ((name,) if isinstance(name, str) else name)]
                            for name in self._jsonl_names]
        # A TFRecord row's columns are its Example's features: those the
        # features read (a row is never keyed by its raw text here).
        self._example_names = tuple(dict.fromkeys(spec.source for spec in self._specs))
        self._example_keys = [name.encode("utf-8", "surrogatepass")
                              for name in self._example_names]

    def convert(self, batch) -> tuple[FramedExamples | list, FramedKeys, dict[str, Any],
                                      dict[str, TextColumn], bytes | None, int] | None:
        """(examples, keys, checked, texts, digests, declined) of a batch: the first
        three as `BatchConverter`'s column path gives them, except that the
        examples are a `FramedExamples` when no row was declined (else
        `kernel_examples`' list), the keys a `FramedKeys`, a numeric or
        vocabulary column's checked values are a numpy array (`_checked`), a
        string feature's a `TextColumn`, and a column some row holds no
        checked value of (left out, or declined at it) is a `PartlyChecked`
        (for the statistics alone), texts the raw text values of the columns that text
        features took whole (source -> `TextColumn`, read as the str values
        the reader splits),
        digests every row's digest under the salt back to back (16 zero
        bytes for a row declined) or None without a salt, declined how many
        rows the kernel declined (their examples None); or None when the
        kernel does not take the batch."""
        if self._native is None or not isinstance(batch, (CsvRunBatch, ArrowBatch,
                                                          JsonlRunBatch, ExampleRunBatch)):
            return None
        jsonl = isinstance(batch, JsonlRunBatch)
        tfrecord = isinstance(batch, ExampleRunBatch)
        # A JSONL row's columns are its object's keys, a TFRecord row's its
        # Example's features: those the plan reads.
        names = (self._jsonl_names if jsonl else self._example_names if tfrecord
                 else batch.column_names())
        plan_key = ("examples", names) if tfrecord else names
        plan = self._plans.get(plan_key, False)
        if plan is False:
            plan = self._plans[plan_key] = self._plan(names, nested=jsonl, examples=tfrecord)
        if plan is None:
            return None
        kernel_plan, kinds = plan
        if jsonl:
            done = self._native.convert_jsonl_run(batch.run, len(batch), kernel_plan,
                                                  self._jsonl_keys)
        elif tfrecord:
            done = self._native.convert_example_run(batch.run, len(batch), kernel_plan,
                                                    self._example_keys)
        elif isinstance(batch, ArrowBatch):
            done = self._native.convert_arrow_batch(arrow_buffers(batch.record_batch),
                                                    len(batch), kernel_plan, batch.utf8_known)
        elif batch.checked is not None:
            # The run the reader's check parsed: its fields are not found again.
            done = self._native.convert_checked_run(batch.checked, kernel_plan)
        elif batch.delimiter == ",":
            done = self._native.convert_csv_run(batch.run, len(batch), kernel_plan)
        else:  # (a dialect's run the kernel did not check: it parses commas only)
            return None
        if done is None:
            return None
        framed, offsets, keys, columns, digests, declined = done
        examples = kernel_examples(framed, offsets, declined)
        keys = kernel_keys(keys)
        checked, texts = {}, {}
        for spec, kind, column in zip(self._specs, kinds, columns):
            if kind is None:
                continue
            if kind == "text":  # (every row's text in one buffer: `TextColumn`)
                data, offsets, states = column
                values = TextColumn(data, offsets)
                if states is not None:  # some row holds no checked value
                    checked[spec.name] = PartlyChecked(values, np.frombuffer(states, dtype=np.uint8))
                    continue
                checked[spec.name] = values
                # (a path is no column of the batch; a TFRecord row's values are lists)
                if not spec.path and not tfrecord:
                    texts[spec.source] = values
                continue
            if type(column) is tuple:  # some row holds no checked value
                packed, states = column
                checked[spec.name] = PartlyChecked(_checked(kind, packed),
                                                   np.frombuffer(states, dtype=np.uint8))
                continue
            checked[spec.name] = _checked(kind, column)
        return examples, keys, checked, texts, digests, declined

    def _plan(self, names: tuple, nested: bool = False, examples: bool = False):
        """(CsvPlan, checked kind per feature: "int64", "float64", "ids",
        "text" or None), or None for the Python path. `nested`: the batch's
        columns may be nested paths (JSONL: `names` holds their tuples);
        `examples`: the columns are an Example's features (keyed by a
        feature's value or not at all)."""
        try:
            if examples and self._key_column is not None and self._key_feature is None:
                raise _Unsupported(f"key column {self._key_column!r} is read as its raw list")
            columns = {name: index for index, name in enumerate(names)}
            features, kinds = [], []
            for spec in self._specs:
                rule, kind = self._rule(spec, nested)
                if spec.read_key not in columns:
                    raise _Unsupported(f"column {spec.source!r} is not in the header")
                features.append((spec.name.encode("utf-8"), columns[spec.read_key], rule))
                kinds.append(kind)
            key = self._key(columns)
            # A null (Arrow input) leaves out a feature that is optional
            # without a default, as the complete rules do.
            nullable = [not spec.required and spec.default is None for spec in self._specs]
            nulls = [self._nulls(spec) for spec in self._specs]
            return self._native.CsvPlan(len(names), features, key, nullable, self._salt,
                                        nulls), kinds
        except (_Unsupported, UnicodeEncodeError, OverflowError) as why:
            _LOG.info("the native table kernel does not cover this schema (%s); "
                      "its batches take the Python path", why)
            return None

    def _key(self, columns: Mapping[str, int]):
        if self._key_column is None:
            return None
        if self._key_feature is not None:
            return ("feature", [spec.name for spec in self._specs].index(self._key_feature))
        if self._key_column not in columns:
            raise _Unsupported(f"key column {self._key_column!r} is not in the header")
        return ("text", columns[self._key_column])

    def _rule(self, spec: FeatureSpec, nested: bool = False) -> tuple[tuple, str | None]:
        """The kernel's rule for `spec` and how its checked values are held
        (None: not reported, as the Python column path reports none);
        `nested`: a nested path is read (JSONL)."""
        if spec.shape or (spec.path and not nested):
            raise _Unsupported(f"feature {spec.name!r} is not a plain scalar")
        if spec.type == "timestamp":
            return _timestamp_rule(spec), "int64"
        if spec.vocabulary is not None:
            labels = self._vocabularies.get(spec.name)
            if labels is None and isinstance(spec.vocabulary, tuple):
                labels = spec.vocabulary
            if labels is None:
                raise _Unsupported(f"feature {spec.name!r} has no resolved vocabulary")
            return ("label", [label.encode("utf-8") for label in labels]), "ids"
        lo, hi, limit, allowed = fast_bounds(spec)
        if spec.stored_kind == "int64":
            return ("int", *_int_bounds(lo, hi), _int_allowed(allowed)), "int64"
        if spec.stored_kind == "float":
            return ("float", _exact_float(lo), _exact_float(hi),
                    None if allowed is None else sorted(allowed)), "float64"
        limit = None if limit == math.inf else int(limit)
        # The Python column path takes text columns whole, never bytes ones
        # (CSV gives text, which a bytes feature converts by its full rules):
        # the kernel gives a text feature's values (a `TextColumn`) for statistics.
        # (a set: the kernel takes a set of allowed values, not a list)
        rule = ("text", limit, None if allowed is None else set(allowed), spec.is_text)
        return rule, ("text" if spec.is_text else None)


    def _nulls(self, spec: FeatureSpec) -> tuple | None:
        """The kernel's description of a feature's declared null texts
        (`checks._missing_rule`): (texts, blank text is missing too, what a
        missing value makes of the row), or None for the standard rule."""
        if spec.null_values is None:
            return None
        numeric = spec.vocabulary is None and spec.stored_kind != "bytes"
        texts = {text.encode("utf-8") for text in spec.null_values}
        return texts, numeric and "" in spec.null_values, self._absent(spec)

    def _absent(self, spec: FeatureSpec):
        """What a missing value makes of a row: "omit" (an optional
        feature left out), "decline" (Python writes a required feature's
        dead letter, or stores a text default), or the default's checked
        number, ("int" or "float", value), as the complete rules convert it."""
        if spec.default is None:
            return "decline" if spec.required else "omit"
        if spec.stored_kind not in ("int64", "float"):
            return "decline"
        vocabulary = self._vocabularies.get(spec.name)
        if vocabulary is None and isinstance(spec.vocabulary, tuple):
            vocabulary = spec.vocabulary
        value = compile_feature(spec, vocabulary)[1](spec.default)[0]
        return ("int", int(value)) if spec.stored_kind == "int64" else ("float", float(value))


def _timestamp_rule(spec: FeatureSpec) -> tuple:
    """The kernel's rule of a timestamp feature read as ISO 8601: its
    unit in nanoseconds, whether text without an offset is UTC (any other
    zone's local times stay Python's: daylight saving), the allowed counts."""
    if (spec.format or "iso8601") != "iso8601":
        raise _Unsupported(f"feature {spec.name!r} reads a strptime pattern")
    naive_utc = zone(spec.timezone or "UTC") is dt.timezone.utc
    return ("timestamp", UNIT_NANOS[spec.unit or "s"], naive_utc, _int_allowed(spec.values))


def kernel_examples(framed: bytes, offsets: bytes, declined: int) -> FramedExamples | list:
    """A table kernel's Examples: `framed` (every taken row's record, in
    row order) as a `FramedExamples` when no row was declined; else a list
    of one Example (bytes) per row, None where declined (an empty span in
    `offsets`, little-endian int64, one more than the rows), for the row
    path to fill in. (Rows are rarely declined: the merged batch is
    framed again then, `BatchConverter._rows`.)"""
    ends = np.frombuffer(offsets, dtype="<i8")
    if not declined:
        return FramedExamples(framed, ends)
    ends = ends.tolist()
    return [framed[start + HEADER_SIZE:end - FOOTER_SIZE] if end > start else None
            for start, end in pairwise(ends)]


def kernel_keys(keys: tuple) -> FramedKeys:
    """A table kernel's keys, ``(buffer, offsets, missing)`` (offsets
    little-endian int64, one more than the rows; missing one byte a row,
    1 where it has no key, or None when every row has one), as a `FramedKeys`."""
    buffer, offsets, missing = keys
    return FramedKeys(buffer, np.frombuffer(offsets, dtype="<i8"),
                      None if missing is None else np.frombuffer(missing, dtype=np.uint8))


def _checked(kind: str, packed) -> np.ndarray:
    """A numeric or vocabulary column's checked values from the kernel's
    packed ones: the int64 or float64 array alone, which is all their
    readers take (statistics, label counts): no list of Python numbers is
    made."""
    # (a read-only view of the kernel's bytes, not a copy: its readers
    # copy before they change an array a batch may share, `merge_statistics`)
    return np.frombuffer(packed, dtype="<f8" if kind == "float64" else "<i8")


def _int_bounds(lo, hi) -> tuple[int, int]:
    """Integer bounds that hold exactly the ints lo <= value <= hi holds."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise _Unsupported("an int64 bound is not finite")
    return max(math.ceil(lo), INT64_MIN), min(math.floor(hi), INT64_MAX)


def _int_allowed(allowed) -> set[int] | None:
    """The int64 values equal to a member of `allowed` (a 2.0 admits 2),
    as the set the kernel takes."""
    if allowed is None:
        return None
    found = set()
    for value in allowed:
        if not isinstance(value, (int, float)):
            raise _Unsupported(f"allowed value {value!r} is not a number")
        if math.isfinite(value) and value == math.floor(value) and INT64_MIN <= value <= INT64_MAX:
            found.add(int(value))
    return found


def _exact_float(bound) -> float:
    """`bound` as a double, which must compare with every double as
    `bound` does (an int beyond 2**53 may not)."""
    value = float(bound)
    if value != bound:
        raise _Unsupported(f"bound {bound!r} is not exact as a double")
    return value
