"""A bounded sample of a table's rows, column by column (nested objects as paths of keys).

The first `rows` rows of the files the build would read, in listing order,
are read by the build's own readers; each column (a top-level name, or in
JSON, JSONL, Parquet, Avro the path of keys to a nested value) gets a
`ColumnSample`. Rows the readers turn into dead letters are counted by
reason, so that a table nothing can be read from is reported with the
readers' own words.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any, NamedTuple

from ...schemas.dead_letters import rows_of
from ...transforms.readers.csv_dialect import CsvOptions
from ...transforms.readers.listing import list_files
from ...transforms.readers.rows import SourceRow, each_row
from ...transforms.readers.tables import iter_table
from ..config.model import DEFAULT_EXTENSIONS
from .columns import ColumnSample

__all__ = ["Sample", "sample_table"]


class Sample(NamedTuple):
    """columns: path of keys -> what was seen; rows: rows sampled; failed:
    dead letters by reason; messages: the first message of each reason;
    objects: the paths where some row holds an object (its keys are
    columns of their own); unread: the messages of files (or their rest)
    that could not be read, rows unknown: the build cannot meet any error
    budget with them."""

    columns: dict[tuple[str, ...], ColumnSample]
    rows: int
    failed: Counter
    messages: dict[str, str]
    objects: set[tuple[str, ...]]
    unread: list[str]


def sample_table(path: str, kind: str, rows: int, options: CsvOptions | None) -> Sample:
    """The sample of the first `rows` rows of the `kind` table at `path`."""
    fs, files = list_files(path, DEFAULT_EXTENSIONS[kind] if os.path.isdir(path) else None)
    sample = Sample({}, 0, Counter(), {}, set(), [])
    text_source = kind == "csv"
    sampled = 0
    for fs_path in files:
        for item in each_row(iter_table(fs_path, kind, options, fs=fs)):
            if not isinstance(item, SourceRow):
                _count_failure(sample, item)
                continue
            flat: dict[tuple[str, ...], Any] = {}
            _flatten(item.values, (), flat, sample.objects, nested=kind != "csv")
            _add_row(sample.columns, flat, sampled, text_source)
            sampled += 1
            if sampled >= rows:
                return sample._replace(rows=sampled)
    return sample._replace(rows=sampled)


def _count_failure(sample: Sample, dead_letter: dict) -> None:
    reason = dead_letter.get("reason", "read_error")
    if reason == "empty_file":
        return  # holds no rows: nothing was lost
    sample.failed[reason] += 1
    sample.messages.setdefault(reason, str(dead_letter.get("message", "")))
    if rows_of(dead_letter) is None:
        sample.unread.append(f"{reason}: {dead_letter.get('message', '')}")


def _add_row(columns: dict[tuple[str, ...], ColumnSample], flat: dict, before: int,
             text_source: bool) -> None:
    for key in flat:
        if key not in columns:
            columns[key] = ColumnSample(absent=before)  # absent from every earlier row
    for key, column in columns.items():
        if key in flat:
            column.add(flat[key], text_source)
        else:
            column.absent += 1


def _flatten(values: dict, prefix: tuple[str, ...], out: dict,
             objects: set[tuple[str, ...]], nested: bool) -> None:
    for key, value in values.items():
        path = prefix + (str(key),)
        if nested and isinstance(value, dict):
            # An object's keys are columns of their own (in `{}` they are
            # missing); the path itself holds no value.
            objects.add(path)
            _flatten(value, path, out, objects, nested)
        else:
            out[path] = value
