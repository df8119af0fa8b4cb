"""The row records that sources produce and the schema checks consume."""

from __future__ import annotations

from itertools import chain, pairwise, repeat
from typing import Any, Iterable, Iterator, NamedTuple, Sequence

__all__ = ["ColumnBatch", "RawRowsBatch", "SourceRow", "each_row"]


class SourceRow(NamedTuple):
    """One input row with its provenance.

    source: the input file's path or URL (credentials removed).
    row: 1-based line/row number in that file, or None (image files).
    values: column name -> raw value.
    """

    source: str
    row: int | None
    values: dict[str, Any]


class ColumnBatch:
    """Consecutive rows of one file, held column by column: how table readers
    hand over their common case (a run of plain CSV lines, a Parquet record
    batch) without building a dict per row, for checks that work a column
    at a time.

    Row i is row ``first_row + i`` of `source`; columns: column name -> one
    raw value per row, every row holding every column. Iterating gives the
    rows as `SourceRow`s, so a ColumnBatch can stand wherever a list of
    SourceRows does.
    """

    __slots__ = ("source", "first_row", "columns", "_size")

    def __init__(self, source: str, first_row: int, columns: dict[str, list]):
        sizes = set(map(len, columns.values()))
        if len(sizes) > 1:
            raise ValueError(f"{source}: columns of different lengths {sorted(sizes)}")
        self.source = source
        self.first_row = first_row
        self.columns = columns
        self._size = sizes.pop() if sizes else 0

    def __len__(self) -> int:
        return self._size

    def column_names(self) -> tuple[str, ...]:
        """The columns' names, without making their values (a subclass may
        make those only when asked: `readers.csv.CsvRunBatch`)."""
        return tuple(self.columns)

    def column(self, name: str) -> list:
        """The raw values of column `name` (None for every row without it)."""
        values = self.columns.get(name)
        return values if values is not None else [None] * self._size

    def row_number(self, index: int) -> int:
        """The row (line) of `source` that row `index` is."""
        return self.first_row + index

    def row(self, index: int) -> SourceRow:
        return SourceRow(self.source, self.first_row + index,
                         {name: values[index] for name, values in self.columns.items()})

    def __iter__(self) -> Iterator[SourceRow]:
        return map(self.row, range(self._size))

    def __reduce__(self):
        return (ColumnBatch, (self.source, self.first_row, self.columns))

    def __eq__(self, other) -> bool:
        return (isinstance(other, ColumnBatch) and self.source == other.source
                and self.first_row == other.first_row and self.columns == other.columns)

    def __repr__(self) -> str:
        return (f"ColumnBatch({self.source!r}, rows {self.first_row}-"
                f"{self.first_row + self._size - 1}, columns {list(self.columns)})")


class RawRowsBatch(ColumnBatch):
    """Rows of `source` held as their raw bytes (JSONL lines, TFRecord
    records: the subclass says which, and reads one in `_parse`), with
    their row numbers (`rows`: a range, or a list where rows were left
    out). A row's Python values are made only when something asks for
    them, and kept (`_values`: None where not made yet), so the batch
    equals the SourceRows its reader would give one by one; rows need not
    hold the same columns (`row` gives each its own)."""

    __slots__ = ("_values", "rows")

    def _parse(self, index: int) -> dict:
        """Row `index`'s values read from its bytes; a RuntimeError for a
        row the reader took that reads as no row now (a bug, not a bad row)."""
        raise NotImplementedError

    def _row_values(self, index: int) -> dict:
        values = self._values[index] if self._values is not None else None
        if values is None:
            values = self._parse(index)
            if self._values is None:
                self._values = [None] * self._size
            self._values[index] = values
        return values

    def row_number(self, index: int) -> int:
        return self.rows[index]

    def column_names(self) -> tuple[str, ...]:
        """Every column of the batch's rows, in the order first seen."""
        return tuple(dict.fromkeys(name for index in range(self._size)
                                   for name in self._row_values(index)))

    @property
    def columns(self) -> dict[str, list]:
        return {name: self.column(name) for name in self.column_names()}

    @columns.setter
    def columns(self, columns: dict[str, list]) -> None:
        raise AttributeError(f"a {type(self).__name__}'s columns are its rows' raw bytes'")

    def column(self, name: str) -> list:
        return [self._row_values(index).get(name) for index in range(self._size)]

    def row(self, index: int) -> SourceRow:
        return SourceRow(self.source, self.rows[index], self._row_values(index))

    def __eq__(self, other) -> bool:
        return (isinstance(other, ColumnBatch) and len(self) == len(other)
                and list(self) == list(other))

    @staticmethod
    def _joined(batches: list) -> tuple[list, Sequence[int], list | None]:
        """What joining `batches` (of one file, in order) keeps: the batches
        holding rows (the first alone when none does), their row numbers
        one after the other, and their rows' values (None where none was
        made yet)."""
        first = batches[0]
        for other in batches:
            if other.source != first.source:
                raise ValueError(f"rows of {other.source} joined to rows of {first.source}")
        batches = [batch for batch in batches if batch._size] or [first]
        values = None
        if any(batch._values is not None for batch in batches):
            values = list(chain.from_iterable(
                batch._values if batch._values is not None else repeat(None, batch._size)
                for batch in batches))
        return batches, _joined_row_numbers([batch.rows for batch in batches]), values


def each_row(items: Iterable) -> Iterator:
    """The items of a reader, with every ColumnBatch replaced by its rows."""
    for item in items:
        if isinstance(item, ColumnBatch):
            yield from item
        else:
            yield item


def _joined_row_numbers(parts: list[Sequence[int]]) -> Sequence[int]:
    """The row numbers of `parts` one after the other: a range where they
    are consecutive ranges (a file's runs of rows, block after block),
    else a list."""
    if all(type(part) is range for part in parts) and all(
            before.stop == after.start for before, after in pairwise(parts)):
        return range(parts[0].start, parts[-1].stop)
    return list(chain.from_iterable(parts))
