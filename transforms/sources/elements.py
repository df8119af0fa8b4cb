"""Rows handed over by a pipeline: a PCollection of dicts as a source (`RowsFromElements`).

`WriteDataset` takes the rows a user's pipeline made (from BigQuery, Avro,
Parquet, their own DoFn) instead of reading files. Each element is one row,
column name -> raw value, the values a table row has; an element that is not
a mapping becomes a dead letter (`not_a_mapping`). Rows carry no row number
(a PCollection has no order) and name `source` as their origin.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import apache_beam as beam

from ...schemas.dead_letters import dead_letter
from ..batch_coder import Batch
from ..readers.rows import SourceRow
from ..tagged import select
from .outputs import COUNTS, DEAD, ROWS, ReadOutputs

__all__ = ["RowsFromElements", "rows_of_batch"]


def rows_of_batch(elements: Iterable[Any], source: str):
    """``(tag, value)`` pairs for one batch of elements: the mappings as one
    list of SourceRows, a dead letter per other element, then ``(source,
    number of elements)`` for the counts."""
    rows, seen = [], 0
    for element in elements:
        seen += 1
        if isinstance(element, Mapping):
            rows.append(SourceRow(source, None, dict(element)))
        else:
            yield DEAD, dead_letter(
                source=source, row=None, key=None, stage="read", reason="not_a_mapping",
                feature=None, message=f"the element is a {type(element).__name__}, not a "
                                      "mapping of column name to value",
                input=element)
    if rows:
        yield ROWS, rows
    yield COUNTS, (source, seen)


class RowsFromElements(beam.PTransform):
    """A PCollection of row dicts -> `ReadOutputs` (row batches of up to
    `batch_size`, dead letters, counts), as a file source gives them.

    Batches are cut by Beam (`BatchElements`), so their sizes depend on the
    runner's bundles; nothing downstream depends on them."""

    def __init__(self, source: str, batch_size: int = 1000):
        super().__init__()
        self._source = source
        self._batch_size = batch_size

    def expand(self, elements):
        tagged = (elements
                  # [element, ...]
                  | "Batch" >> beam.BatchElements(min_batch_size=self._batch_size,
                                                  max_batch_size=self._batch_size)
                  # (tag, value)
                  | "ToRows" >> beam.FlatMap(rows_of_batch, self._source))
        return ReadOutputs(
            tagged | "Rows" >> beam.FlatMap(select, ROWS).with_output_types(Batch),
            tagged | "DeadLetters" >> beam.FlatMap(select, DEAD),
            tagged | "Counts" >> beam.FlatMap(select, COUNTS))
