"""The dead-letter sink: writes failed rows as JSON lines and summarizes them.

`WriteDeadLetters(directory)` takes dead-letter dicts (from every stage) and
writes ``<directory>/part-00000.jsonl`` ... with the same names and bytes for
the same records, whatever the runner, its bundling or the arrival order, and
gives one summary dict for the manifest.

Memory: dead letters are bounded by the error budget (a build with more than
``max_error_rate`` of its rows failing is not published), so this sink sorts
them in memory rather than spilling like the shard writer does. It holds:
- in one worker, every dead letter of the build twice over (its JSON line and
  its sort key), to sort them globally and cut them into files: about 1 KB per
  record, so 1 % of 10 million rows is ~100 MB;
- on the DirectRunner, the GroupByKey's input as well (the DirectRunner keeps
  it in memory; distributed runners shuffle it through disk).
Records stay small because `dead_letter()` replaces long bytes values by a
summary. A schema that rejects most rows of a very large input costs memory
in proportion to the input here; such a build fails its error budget anyway.

One group and no side inputs: Beam's Dask runner (2.77) can deliver a side
input computed from a ParDo more than once, which would miscount parts.
"""

from __future__ import annotations

import json
import posixpath
from typing import Callable

import apache_beam as beam
import fsspec

from ..schemas.dead_letters import rows_of
from .files import write_atomic
from .layout import dead_letter_part_name

__all__ = ["RECORDS_PER_FILE", "WriteDeadLetters", "dead_letter_line", "sort_key", "summarize"]

RECORDS_PER_FILE = 100_000

# The contract's field order; written in this order so files read naturally.
_FIELDS = ("source", "row", "key", "stage", "reason", "feature", "message", "input",
           "errors")


_REASON_IN_SORT_KEY = 3


def sort_key(record: dict) -> tuple:
    """The order of records in the files: (source, row, stage, reason, feature,
    message, input as canonical JSON); rows without a number (images) first."""
    row = record.get("row")
    return (record.get("source") or "", -1 if row is None else row, record.get("stage") or "",
            record.get("reason") or "", record.get("feature") or "",
            record.get("message") or "",
            json.dumps(record.get("input"), sort_keys=True, ensure_ascii=True))


def dead_letter_line(record: dict) -> str:
    """One dead-letter record as its JSON line (without the newline): contract
    fields first in contract order, nested objects with sorted keys, so equal
    records always give equal bytes."""
    names = [name for name in _FIELDS if name in record]
    names += sorted(name for name in record if name not in _FIELDS)
    try:
        return _json_object(record, names, ensure_ascii=False)
    except UnicodeEncodeError:
        # Unpaired surrogates (from JSON input) cannot be written as UTF-8;
        # \\u escapes keep the line valid JSON and lossless.
        return _json_object(record, names, ensure_ascii=True)


def _json_object(record: dict, names: list, ensure_ascii: bool) -> str:
    parts = [f"{json.dumps(name)}: "
             f"{json.dumps(record[name], sort_keys=True, ensure_ascii=ensure_ascii)}"
             for name in names]
    line = "{" + ", ".join(parts) + "}"
    line.encode("utf-8")  # raises UnicodeEncodeError for unpaired surrogates
    return line


def _to_entry(record: dict) -> tuple[tuple, str, int | None]:
    return sort_key(record), dead_letter_line(record), rows_of(record)


class _WriteAllFn(beam.DoFn):
    """(None, [(sort key, line, rows)] plus None for each marker) -> the summary dict.

    Sorts every record, writes parts of `records_per_file` records, each to a
    temporary name and then renamed, so a retried or duplicated attempt only
    ever replaces a file by identical bytes."""

    def __init__(self, directory: str, records_per_file: int, finish: Callable | None):
        self._directory = directory
        self._records_per_file = records_per_file
        self._finish = finish

    def setup(self):
        self._fs, self._root = fsspec.core.url_to_fs(self._directory)
        self._prefix = posixpath.basename(self._directory.rstrip("/"))

    def process(self, element):
        _, entries = element
        entries = sorted(entry for entry in entries if entry is not None)
        files = []
        for start in range(0, len(entries), self._records_per_file):
            name = dead_letter_part_name(len(files))
            self._write(name, entries[start:start + self._records_per_file])
            files.append(f"{self._prefix}/{name}")
        summary = summarize(entries, files)
        yield summary if self._finish is None else self._finish(summary)

    def _write(self, name: str, entries: list) -> None:
        self._fs.makedirs(self._root, exist_ok=True)
        data = "".join([f"{line}\n" for _, line, _ in entries]).encode("utf-8")
        # On disk before its rename, like the shards.
        write_atomic(self._fs, posixpath.join(self._root, name), data)


def summarize(entries: list[tuple[tuple, str, int | None]], files: list[str]) -> dict:
    """Sorted (sort key, line, rows) entries -> the sink's summary; the
    sample of a reason is its first record in file order.

    Counts are of input rows: a record stands for `rows` of them (a file
    that cannot be read, for all it held), or for an unknown number (None):
    such a record counts as one and is counted in ``uncounted`` too, which
    fails the error budget (`publish.budget`)."""
    by_reason: dict[str, int] = {}
    samples = {}
    uncounted = 0
    for key, line, rows in entries:
        reason = key[_REASON_IN_SORT_KEY]
        if rows is None:
            uncounted += 1
            rows = 1
        by_reason[reason] = by_reason.get(reason, 0) + rows
        if reason not in samples:
            samples[reason] = json.loads(line)
    return {"num_rows": sum(by_reason.values()), "by_reason": dict(sorted(by_reason.items())),
            "uncounted": uncounted, "files": files, "samples": dict(sorted(samples.items()))}


def _keyed_entry(record: dict) -> tuple[None, tuple[tuple, str, int | None]]:
    """A record as its entry under the one key of the group: converting and
    keying in one step spares the graph a ParDo per input."""
    return None, _to_entry(record)


class WriteDeadLetters(beam.PTransform):
    """Writes dead-letter records as JSON lines.

    Takes: dead-letter dicts (`schemas.dead_letters.dead_letter`): one
      PCollection, or a tuple of them (flattened here, once, with the
      marker: each multi-input Flatten is a runner stage of its own).
    Writes: ``<directory>/part-00000.jsonl`` ...: every record sorted by
      `sort_key`, `records_per_file` per file (the last one fewer). No files
      when there are no dead letters.
    Gives: exactly one dict ``{"num_rows", "by_reason": {reason: n},
      "uncounted", "files":
      ["<basename of directory>/part-00000.jsonl", ...], "samples": {reason:
      first record}}``.

    finish: what the summary is given as (None: the dict), in the step that
    writes the files, not in a step (a ParDo) of its own.

    marker: a PCollection of ``(None, None)`` (at least one) that makes the
    summary come out even without dead letters; None: the sink makes its
    own (a ``beam.Create``, a runner stage of its own), so a graph with
    other steps that need one can share it (`graph.stage_build`).
    """

    def __init__(self, directory: str, records_per_file: int = RECORDS_PER_FILE,
                 finish: Callable | None = None, marker: beam.PCollection | None = None):
        super().__init__()
        self._finish = finish
        self._marker = marker
        if records_per_file < 1:
            raise ValueError("records_per_file must be positive")
        self._directory = directory
        self._records_per_file = records_per_file

    def expand(self, records):
        parts = records if isinstance(records, tuple) else (records,)
        # (None, (sort key, JSON line, rows it stands for)) per part
        entries = [part | (f"ToLines[{index}]" if index else "ToLines") >> beam.Map(_keyed_entry)
                   for index, part in enumerate(parts)]
        # A marker, so the group below exists (and a summary comes out) even
        # without dead letters; no side input or global combine is needed.
        marker = self._marker
        if marker is None:
            marker = parts[0].pipeline | "Marker" >> beam.Create([(None, None)])
        return ((*entries, marker)
                | "WithMarker" >> beam.Flatten()
                # (None, [(sort key, line, rows)])
                | "GroupAll" >> beam.GroupByKey()
                # one summary dict (given as `finish` of it, with `finish`)
                | "WriteParts" >> beam.ParDo(_WriteAllFn(self._directory,
                                                         self._records_per_file,
                                                         self._finish)))
