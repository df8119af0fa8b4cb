"""Where rows come from, as Beam steps: ReadTable and ReadImages, thin over `readers`.

Modules in data-flow order:

* `tables`: `ReadTable`, table files into RowBatches;
* `images`: `ReadImages`, an image directory into RowBatches of image rows;
* `elements`: `RowsFromElements`, a pipeline's own PCollection of row dicts;
* `outputs`: what all give (`ReadOutputs`) and how their DoFns' one tagged
  output is split into it.

Each is applied to a pipeline (``p | ReadTable(...)``) and returns
`ReadOutputs`:

* ``rows``: RowBatch elements, ``list[SourceRow]`` of up to `batch_size` rows,
  or a `ColumnBatch` (the rows of a plain CSV block or a Parquet record batch,
  column by column, or JSONL lines of about 1 MiB; it iterates as SourceRows);
* ``dead_letter``: one dead-letter dict per input row that could not be read;
* ``counts``: ``(source, rows_read)`` pairs; every input row is counted once,
  whether it became a SourceRow or a dead letter, so their sum is the number of
  input rows.

Work is planned from sorted listings and each row's content does not depend
on how the work was split, so listing order and parallelism do not change
what is read.
"""

from .elements import RowsFromElements
from .images import ReadImages
from .outputs import ReadOutputs
from .tables import ReadTable

__all__ = ["ReadImages", "ReadOutputs", "ReadTable", "RowsFromElements"]
