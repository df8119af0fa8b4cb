"""A ColumnBatch that keeps its Arrow record batch, for the native table kernel to read as it is.

The Parquet reader hands a record batch over as an `ArrowBatch` where the
native kernels run: `transforms/native_rows.py` gives the batch's buffers
to `convert_arrow_batch` in one call, and the Python values
(``to_pydict``) are made only when something asks for them: a row the
kernel declines, a column whose statistics read its values. Each is the
value `to_pydict` gives, so the batch equals (and pickles as) the plain
ColumnBatch the reader gives without the kernels.
"""

from __future__ import annotations

from .rows import ColumnBatch, SourceRow

__all__ = ["ArrowBatch", "KERNEL_TYPES", "arrow_buffers", "kernel_type", "lazy_types"]

# The Arrow types the native kernel reads (`native/src/arrow.rs`,
# `Layout::from_name`), by pyarrow's names; also those whose Python values
# cannot fail to be made once the batch validated (text checked as UTF-8),
# so a batch of only these may wait to make them. Any other column
# (timestamps, decimals, lists ...) is converted by the reader at once, as
# without the kernels, so that a value Python cannot hold is reported by
# the reader as before. A dictionary array (pandas' categoricals) of
# integer indices and a dictionary of one of these is read too
# (`kernel_type`): the kernel reads its values through its indices.
KERNEL_TYPES = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                          "uint64", "float", "double", "bool", "string", "large_string",
                          "binary", "large_binary"})


def kernel_type(arrow_type) -> bool:
    """Whether the native kernel reads arrays of `arrow_type`: one of
    `KERNEL_TYPES`, or a dictionary of one of them."""
    if str(arrow_type) in KERNEL_TYPES:
        return True
    import pyarrow as pa  # (only Arrow batches ask)

    return (pa.types.is_dictionary(arrow_type) and str(arrow_type.index_type) in KERNEL_TYPES
            and str(arrow_type.value_type) in KERNEL_TYPES)


def lazy_types(schema) -> bool:
    """Whether every column of a record batch of Arrow `schema` is of a
    `kernel_type` and their names are distinct (``to_pydict`` keeps
    one of a repeated name)."""
    names = schema.names
    return len(set(names)) == len(names) and all(kernel_type(field.type) for field in schema)


def arrow_buffers(record_batch) -> list:
    """Each column of `record_batch` as `convert_arrow_batch` takes it:
    (type name, offset, length, validity, values, offsets); a dictionary
    array as (its indices', its dictionary's); None for a type the kernel
    does not read (its features then decline the batch)."""
    described = []
    for array in record_batch.columns:
        if not kernel_type(array.type):
            described.append(None)
        elif str(array.type) in KERNEL_TYPES:
            described.append(_plain_buffers(array, str(array.type)))
        else:
            # (the indices are the dictionary array's own buffers)
            described.append((_plain_buffers(array, str(array.type.index_type)),
                              _plain_buffers(array.dictionary, str(array.type.value_type))))
    return described


def _plain_buffers(array, kind: str) -> tuple:
    """`array` as (type name `kind`, offset, length, validity, values, offsets)."""
    buffers = array.buffers()
    validity, offsets, values = (buffers if len(buffers) == 3
                                 else (buffers[0], None, buffers[1]))
    return kind, array.offset, len(array), validity, b"" if values is None else values, offsets


class ArrowBatch(ColumnBatch):
    """Rows ``first_row`` on of `source`, held as `record_batch`; `columns`
    (``to_pydict``) is made on first use unless given. utf8_known: the
    reader found every text value of the batch (a dictionary's, whole)
    UTF-8, which the kernel then does not scan again."""

    __slots__ = ("record_batch", "utf8_known", "_converted", "_some")

    def __init__(self, source: str, first_row: int, record_batch,
                 columns: dict[str, list] | None = None, *, utf8_known: bool = False):
        self.source, self.first_row = source, first_row
        self._size = record_batch.num_rows
        self.record_batch = record_batch
        self.utf8_known = utf8_known
        self._converted = columns
        self._some: dict[str, list] = {}

    @property
    def columns(self) -> dict[str, list]:
        if self._converted is None:
            self._converted = self.record_batch.to_pydict()
            self._some.clear()
        return self._converted

    @columns.setter
    def columns(self, columns: dict[str, list]) -> None:
        self._converted = columns

    def column_names(self) -> tuple[str, ...]:
        return tuple(self.record_batch.schema.names)

    def column(self, name: str) -> list:
        """One column's values, made alone (a column the statistics read
        need not make the others)."""
        if self._converted is not None:
            return super().column(name)
        values = self._some.get(name)
        if values is None:
            index = self.record_batch.schema.get_field_index(name)
            if index < 0:
                return [None] * self._size
            values = self._some[name] = self.record_batch.column(index).to_pylist()
        return values

    def row(self, index: int) -> SourceRow:
        """Row `index` alone (a declined row need not make the batch)."""
        if self._converted is not None:
            return super().row(index)
        [values] = self.record_batch.slice(index, 1).to_pylist()
        return SourceRow(self.source, self.first_row + index, values)
