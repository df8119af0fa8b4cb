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
from ..tagged import select

__all__ = ["COUNTS", "DEAD", "JSONL_BATCH_BYTES", "ROWS", "UNIT", "ReadOutputs", "SplitTagged",
           "batched", "passed_on"]

ROWS = "rows"
DEAD = "dead_letter"
COUNTS = "counts"
UNIT = "unit"

# A JSONL batch holds about the bytes of a CSV run (a block of lines).
JSONL_BATCH_BYTES = BLOCK


class ReadOutputs(NamedTuple):
    """What a source gives: RowBatches, dead letters, (source, rows_read)."""

    rows: beam.PCollection
    dead_letter: beam.PCollection
    counts: beam.PCollection


def batched(items: Iterable[SourceRow | ColumnBatch | dict], batch_size: int, source: str,
            jsonl_batch_bytes: int = JSONL_BATCH_BYTES):
    """``(tag, value)`` pairs: rows in lists of `batch_size` (a ColumnBatch
    as it comes; the JSONL reader's `JsonlRunBatch`es joined and cut into
    batches of `jsonl_batch_bytes` bytes of lines, `JsonlRunBatch.cut`),
    dead letters one by one, and finally ``(source, number of rows)`` for
    the counts: the rows read and the rows the dead letters stand for
    (`counted_rows`: a whole file that cannot be read may stand for many)."""
    batch: list[SourceRow] = []
    held: list[JsonlRunBatch] = []  # JSONL rows not yet in a batch
    held_bytes = 0
    seen = 0
    for item in items:
        if isinstance(item, JsonlRunBatch):
            # Cut by the bytes of the lines, as CSV's runs are, and alike
            # with the kernel (runs of lines) and without (single lines):
            # a batch of free text is then well past the statistics'
            # capacity, so its partial is purged before it is merged.
            seen += len(item)
            held.append(item)
            held_bytes += item.num_bytes
            if held_bytes >= jsonl_batch_bytes:
                whole, rest = JsonlRunBatch.concatenated(held).cut(jsonl_batch_bytes)
                for cut in whole:
                    yield ROWS, cut
                held = [rest] if rest is not None else []
                held_bytes = rest.num_bytes if rest is not None else 0
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
    if held:
        yield ROWS, JsonlRunBatch.concatenated(held)
    yield COUNTS, (source, seen)


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
