"""What a source gives (`ReadOutputs`), and the one tagged output its DoFns split into it.

The reading DoFns have one output of ``(tag, value)`` pairs that labelled
filters (`transforms.tagged.select`) split into rows, dead letters and
counts, instead of ``with_outputs``: Beam's Dask runner (2.77) puts every
tagged output of a ParDo into every output PCollection.
"""

from __future__ import annotations

from typing import Iterable, NamedTuple

import apache_beam as beam

from ...schemas.dead_letters import counted_rows
from ..batch_coder import Batch
from ..readers.jsonl import JsonlRunBatch
from ..readers.ranges import BLOCK
from ..readers.rows import ColumnBatch, SourceRow
from ..readers.tfrecords import ExampleRunBatch
from ..tagged import select

__all__ = ["COUNTS", "DEAD", "JSONL_BATCH_BYTES", "RECORD_BATCH_BYTES", "ROWS", "UNIT",
           "ReadOutputs", "SplitTagged", "batched", "passed_on"]

ROWS = "rows"
DEAD = "dead_letter"
COUNTS = "counts"
UNIT = "unit"

# A JSONL batch holds about the bytes of a CSV run (a block of lines), a
# TFRecord batch as many bytes of records.
JSONL_BATCH_BYTES = BLOCK
RECORD_BATCH_BYTES = BLOCK


class ReadOutputs(NamedTuple):
    """What a source gives: RowBatches, dead letters, (source, rows_read)."""

    rows: beam.PCollection
    dead_letter: beam.PCollection
    counts: beam.PCollection


def batched(items: Iterable[SourceRow | ColumnBatch | dict], batch_size: int, source: str,
            jsonl_batch_bytes: int = JSONL_BATCH_BYTES,
            record_batch_bytes: int = RECORD_BATCH_BYTES):
    """``(tag, value)`` pairs: rows in lists of `batch_size` (a ColumnBatch
    as it comes; the JSONL reader's `JsonlRunBatch`es joined and cut into
    batches of `jsonl_batch_bytes` bytes of lines, the TFRecord reader's
    `ExampleRunBatch`es into batches of `record_batch_bytes` bytes of
    records: `_ByBytes`), dead letters one by one, and finally ``(source,
    number of rows)`` for the counts: the rows read and the rows the dead
    letters stand for (`counted_rows`: a whole file that cannot be read may
    stand for many)."""
    batch: list[SourceRow] = []
    by_bytes = {JsonlRunBatch: _ByBytes(JsonlRunBatch, jsonl_batch_bytes),
                ExampleRunBatch: _ByBytes(ExampleRunBatch, record_batch_bytes)}
    seen = 0
    for item in items:
        held = by_bytes.get(type(item))
        if held is not None:
            seen += len(item)
            for cut in held.add(item):
                yield ROWS, cut
            continue
        if isinstance(item, ColumnBatch):
            seen += len(item)
            if item:
                yield ROWS, item
            continue
        if isinstance(item, dict):
            seen += counted_rows(item)
            yield DEAD, item
            continue
        seen += 1
        batch.append(item)
        if len(batch) >= batch_size:
            yield ROWS, batch
            batch = []
    if batch:
        yield ROWS, batch
    for held in by_bytes.values():
        rest = held.rest()
        if rest is not None:
            yield ROWS, rest
    yield COUNTS, (source, seen)


class _ByBytes:
    """A reader's batches of raw rows of one kind (`JsonlRunBatch`,
    `ExampleRunBatch`) held until they hold `limit` bytes, then joined and
    cut into batches of that many (`concatenated`, `cut`). Cut by their
    bytes, as CSV's runs are, and alike with the kernel and without: a
    batch of free text is then well past the statistics' capacity, so its
    partial is purged before it is merged."""

    def __init__(self, kind: type, limit: int):
        self._kind, self._limit = kind, limit
        self._held: list = []
        self._bytes = 0

    def add(self, batch) -> list:
        """The whole batches `batch` completes (none while fewer bytes are held)."""
        if not batch:
            return []
        self._held.append(batch)
        self._bytes += batch.num_bytes
        if self._bytes < self._limit:
            return []
        whole, rest = self._kind.concatenated(self._held).cut(self._limit)
        self._held = [rest] if rest is not None else []
        self._bytes = rest.num_bytes if rest is not None else 0
        return whole

    def rest(self):
        """The rows held at the end, as one batch (None: none)."""
        return self._kind.concatenated(self._held) if self._held else None


def passed_on(tagged: tuple[str, object]) -> bool:
    """Whether a step that works on "unit" pairs hands `tagged` on as it
    is: the listing's dead letters and counts travel with the units through
    the plan and read steps, so the source's outputs have one origin and
    need no Flatten (a runner stage each)."""
    return tagged[0] != UNIT


class SplitTagged(beam.PTransform):
    """The read step's PCollection of (tag, value) pairs -> `ReadOutputs`,
    one labelled filter per output.

    Rows never pass a Flatten: Beam's portable runner materializes a
    multi-input Flatten as a buffer between stages (on the DirectRunner
    every row of the dataset held in memory and pickled row by row),
    whereas a filter stays fused with the read and the row checks after
    it. Nor do the dead letters and counts: the listing's reach the read
    step with the units (`passed_on`), so every output has one origin."""

    def expand(self, read):
        return ReadOutputs(
            read | "Rows" >> beam.FlatMap(select, ROWS).with_output_types(Batch),
            read | "DeadLetters" >> beam.FlatMap(select, DEAD),
            read | "Counts" >> beam.FlatMap(select, COUNTS))
