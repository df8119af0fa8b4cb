"""Whole rows: raw row values -> checked feature values -> serialized Example (`RowEncoder`).

`RowEncoder(specs, vocabularies)` compiles one converter per feature once
(`checks`), so per row the work is a dict lookup and a few type tests per
feature. `.convert(row_values)` gives ``{feature name: [stored values]}`` or
raises `RowError` with a stable reason code; `.encode(row_values)` also
serializes the Example; `.encode_columns` encodes a batch a column at a
time first (`columns`).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .checks import Converter, checked_converter, compile_entry
from .columns import ColumnEncoder, HeadedEntries
from .dead_letters import RowError
from .errors import ConfigError
from .example import (ExampleEncoder, ExampleValueError, example_from_entries, example_head,
                      scalar_entry_encoder)
from .features import FeatureSpec

__all__ = ["RowEncoder"]


class RowEncoder:
    """Checks raw rows against the schema and encodes them as Examples.

    specs: the parsed features. vocabularies: feature name -> labels in id order
    (from `resolve_vocabularies`); explicit vocabulary lists need no entry.
    Pickles as its constructor arguments (the compiled converters are closures).
    """

    def __init__(self, specs: Sequence[FeatureSpec],
                 vocabularies: Mapping[str, Sequence[str]] | None = None):
        self._specs = tuple(specs)
        self._vocabularies = dict(vocabularies or {})
        plan = []
        for spec in self._specs:
            vocabulary = self._vocabularies.get(spec.name)
            if vocabulary is None and isinstance(spec.vocabulary, tuple):
                vocabulary = spec.vocabulary
            if spec.vocabulary == "auto" and vocabulary is None:
                raise ConfigError(f"features.{spec.name}.vocabulary",
                                  "`auto` has not been resolved; call resolve_vocabularies "
                                  "with the values known before the run")
            convert = checked_converter(spec, vocabulary, f"features.{spec.name}.default")
            plan.append((spec.name, spec.read_key, convert, vocabulary))
        self._plan = tuple((name, source, convert) for name, source, convert, _ in plan)
        self._encoder = ExampleEncoder({spec.name: spec.stored_kind for spec in self._specs})
        by_name = {spec.name: (spec, vocabulary) for spec, (*_, vocabulary)
                   in zip(self._specs, plan)}
        # (source column, raw value -> encoded entry), in the order entries are
        # written, and the same per feature for whole columns.
        entries, columns = [], []
        for name in self._encoder.names:
            spec, vocabulary = by_name[name]
            scalar_entry = scalar_entry_encoder(name, spec.stored_kind)
            row_entry = compile_entry(spec, vocabulary, self._encoder.entry_encoder(name),
                                      scalar_entry)
            entries.append((spec.read_key, row_entry))
            columns.append((name, spec.read_key,
                            ColumnEncoder(spec, vocabulary, row_entry, scalar_entry)))
        self._entries = tuple(entries)
        self._columns = tuple(columns)
        # read key (the tuple of keys) -> keys, for features read from nested
        # values: a tuple cannot collide with a top-level column's name
        self._paths = {spec.path: spec.path for spec in self._specs if spec.path}

    def __reduce__(self):
        return (RowEncoder, (self._specs, self._vocabularies))

    @property
    def specs(self) -> tuple[FeatureSpec, ...]:
        return self._specs

    def convert(self, values: Mapping[str, Any]) -> dict[str, Sequence]:
        """Raw row (column -> value) -> {feature name: values to store}.

        Absent optional features are left out. Raises RowError(reason, ...)."""
        if self._paths:
            values = with_paths(values, self._paths)
        get = values.get
        out = {}
        for name, source, convert in self._plan:
            converted = convert(get(source))
            if converted is not None:
                out[name] = converted
        return out

    def faults(self, values: Mapping[str, Any]) -> list[RowError]:
        """Every fault of a raw row, one per feature that fails, in schema
        order (the first is the one `convert` raises). For dead letters: only
        a failing row pays for it."""
        if self._paths:
            values = with_paths(values, self._paths)
        get = values.get
        found = []
        for _, source, convert in self._plan:
            try:
                convert(get(source))
            except RowError as error:
                found.append(error)
        return found

    def converter(self, name: str) -> Converter:
        """The compiled converter of feature `name` (raw value -> values)."""
        for feature, _, convert in self._plan:
            if feature == name:
                return convert
        raise KeyError(name)

    def columns_as_read(self, column: Callable[[str], list]) -> Callable[[str], list]:
        """`column` as `encode_columns` reads it: a nested ``from:`` path's
        read key (`FeatureSpec.read_key`) gives the values at that path."""
        return _column_with_paths(column, self._paths) if self._paths else column

    def source_of(self, name: str) -> str | tuple[str, ...]:
        """The read key of feature `name` (`FeatureSpec.read_key`)."""
        for feature, source, _ in self._plan:
            if feature == name:
                return source
        raise KeyError(name)

    def reader(self, name: str) -> Callable[[Mapping[str, Any]], Any]:
        """row values (column -> raw value) -> the raw value feature `name`
        reads in that row: found as `convert` finds it, at the keys of a
        nested ``from:`` path (its read key is no column of the row)."""
        source = self.source_of(name)
        keys = self._paths.get(source)
        if keys is None:
            return lambda values: values.get(source)
        first, rest = keys[0], keys[1:]
        return lambda values: dig(values.get(first), rest)

    def encode(self, values: Mapping[str, Any]) -> bytes:
        """Raw row -> serialized tf.train.Example. Raises RowError.

        Same bytes as ``encode_converted(convert(values))``, one call per
        feature. On any failure the row is converted again feature by feature
        in schema order, so the error reported is the one `convert` raises
        (entries are made in key order, which may meet another bad feature
        first)."""
        if self._paths:
            values = with_paths(values, self._paths)
        get = values.get
        try:
            entries = b"".join([entry(get(source)) for source, entry in self._entries])
        except (RowError, ExampleValueError):
            return self._encoder.encode(self.convert(values))
        return example_from_entries(entries)

    def encode_many(self, rows: Sequence[Mapping[str, Any]]) -> tuple[list, dict[str, list]]:
        """Raw rows -> (examples, checked), a column at a time (see
        `encode_columns`)."""
        return self.encode_columns(lambda source: [row.get(source) for row in rows], len(rows))

    def encode_columns(self, column: Callable[[str], list], count: int
                       ) -> tuple[list, dict[str, list]]:
        """`count` raw rows, given as column(name) -> the column's raw values
        (None where a row lacks it) -> (examples, checked), a column at a time.

        examples[i]: row i's serialized Example, the bytes `encode` gives, or
        None where `encode` must take the row (it fails, or needs the
        complete rules). checked: feature name -> its checked values, one
        per row, for each feature whose whole column took the column path."""
        if not count:
            return [], {}
        if self._paths:
            column = _column_with_paths(column, self._paths)
        columns = []
        checked = {}
        to_row_path: set[int] = set()
        sizes = np.zeros(count, dtype=np.int64)
        for name, source, encode_column in self._columns:
            entries, values = encode_column(column(source))
            if values is not None:
                checked[name] = values
            elif None in entries:
                to_row_path.update(i for i, entry in enumerate(entries) if entry is None)
                entries = [b"" if entry is None else entry for entry in entries]
            # A bytes column's heads and values are joined once, below.
            parts = entries if isinstance(entries, HeadedEntries) else (entries,)
            for part in parts:
                sizes += np.fromiter(map(len, part), dtype=np.int64, count=count)
            columns.extend(parts)
        sizes = sizes.tolist()
        head_of = {size: example_head(size) for size in set(sizes)}
        examples = list(map(b"".join, zip(map(head_of.__getitem__, sizes), *columns)))
        for row in to_row_path:
            examples[row] = None
        return examples, checked

    def encode_converted(self, converted: Mapping[str, Sequence]) -> bytes:
        """The output of `convert` -> serialized tf.train.Example."""
        return self._encoder.encode(converted)


def dig(value: Any, keys: Sequence[str]) -> Any:
    """The value at `keys` inside nested mappings, or None where a key is
    absent or a value on the way is not a mapping."""
    for key in keys:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def with_paths(values: Mapping[str, Any], paths: Mapping[Any, Sequence[str]]) -> dict:
    """`values` plus, for each (read key, keys) of `paths`, the nested value at
    keys under that read key (a tuple, so no column of the row is replaced)."""
    out = dict(values)
    for column, keys in paths.items():
        out[column] = dig(values.get(keys[0]), keys[1:])
    return out


def _column_with_paths(column: Callable[[str], list], paths: Mapping[Any, Sequence[str]]
                       ) -> Callable[[Any], list]:
    def nested_column(name) -> list:
        keys = paths.get(name)
        if keys is None:
            return column(name)
        rest = keys[1:]
        return [dig(value, rest) for value in column(keys[0])]
    return nested_column
