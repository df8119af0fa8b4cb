"""The Parquet reader: the rows of some row groups of one file as rows and dead letters.

Values are `pyarrow`'s Python conversions (``to_pylist``, or ``to_pydict`` a
record batch at a time as a `ColumnBatch`); ``row`` is the 1-based row index
in the file. A footer that cannot be read stands for the file, a row group
that does not decode for its unread rows; a row holding text that is not
UTF-8 is that row's ``invalid_utf8`` dead letter. Arrow chooses its own reads;
once a row group is read, its column chunks are dropped from the page cache
(`transforms.page_cache`: the build's writes then reuse their memory, as
they do the other readers'). Where the native kernels run, a
record batch comes as an `ArrowBatch`, whose Python values are made only
when asked.

Arrow's buffers are allocated by glibc's malloc (`_system_memory_pool`).
"""

from __future__ import annotations

import os
import threading
from typing import IO, Iterable, Iterator

import fsspec

from .. import page_cache
from .common import (READ_ERRORS, open_file, read_dead_letter, rows_of_whole_file,
                     read_error, resolve)
from ...schemas.native import kernels
from .arrow_batch import ArrowBatch, arrow_buffers, lazy_types
from .rows import ColumnBatch, SourceRow

__all__ = ["iter_parquet", "parquet_row_groups", "read_parquet_columns",
           "read_parquet_head"]

# Parquet record batches hold about _BATCH_BYTES bytes of column data (as the
# file's metadata counts them, uncompressed), within these many rows: every
# batch costs a fixed amount downstream, so narrow rows come thousands at a
# time (a 1M-row table of ~100-byte rows, ~10,000 rows a batch, built 1.09x
# as fast as with 1024-row batches), and wide ones (image bytes) a few at a
# time.
_BATCH_BYTES = 1 << 20
_PARQUET_BATCH_ROWS = (16, 16384)


# Read buffer of a column chunk read page by page (`read_parquet_head`).
_PAGE_BUFFER = 1 << 16
# Rows of a batch `read_parquet_head` reads before it looks at their size.
_HEAD_BATCH_ROWS = 64


# Arrow's own setting of its memory pool, which wins over ours.
_POOL_VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"
_pool_lock = threading.Lock()
_pool_chosen = False


def _system_memory_pool() -> None:
    """Makes glibc's malloc Arrow's memory pool in this process (once),
    unless the environment names one. pyarrow's default, mimalloc, hands
    the pages of freed buffers back to the kernel soon after, so that the
    next record batch's buffers are fresh pages, each faulted in and zeroed
    (and the memory it keeps adds ~40 MB to a build's peak); glibc's
    malloc, tuned to keep freed memory (`transforms.malloc_tuning`), gives
    the next batch the pages of the last."""
    global _pool_chosen
    with _pool_lock:
        if _pool_chosen:
            return
        _pool_chosen = True
        if _POOL_VARIABLE not in os.environ:
            import pyarrow as pa

            pa.set_memory_pool(pa.system_memory_pool())


def _parquet_file(f: IO[bytes], pages: bool = False):
    import pyarrow.parquet as pq  # imported here: only Parquet sources need it
    _system_memory_pool()
    if pages:
        return pq.ParquetFile(f, buffer_size=_PAGE_BUFFER, pre_buffer=False)
    return pq.ParquetFile(f)


def parquet_row_groups(path: str, *, fs: fsspec.AbstractFileSystem | None = None
                       ) -> list[tuple[int, int]]:
    """``(num_rows, total_byte_size)`` of each row group, from the footer only."""
    fs, fs_path, _ = resolve(path, fs, None)
    with open_file(fs, fs_path) as f:
        metadata = _parquet_file(f).metadata
        return [(metadata.row_group(i).num_rows, metadata.row_group(i).total_byte_size)
                for i in range(metadata.num_row_groups)]


def iter_parquet(path: str, *, row_groups: Iterable[int] | None = None,
                 batch_size: int | None = None, fs: fsspec.AbstractFileSystem | None = None,
                 source: str | None = None, columns: bool = False
                 ) -> Iterator[SourceRow | ColumnBatch | dict]:
    """Reads the rows of the given row groups (default: all) of a Parquet file,
    one record batch of `batch_size` rows at a time (default: about 1 MB of
    the row group's data; memory is bounded by a row group's column chunks
    plus one batch).

    Yields a `SourceRow` per row (values: column -> Python value; `row` the
    1-based row index in the file) and dead letters: ``empty_file``,
    ``parquet_invalid`` (an unreadable footer stands for the file; a row group
    that fails to decode stands for its unread rows), ``read_error``.
    `columns`: each record batch comes as one `ColumnBatch` instead.
    """
    def read_rows(f, source: str) -> Iterator[SourceRow | ColumnBatch | dict]:
        import pyarrow as pa

        try:
            parquet = _parquet_file(f)
        except (pa.ArrowException, ValueError, OSError) as exc:
            if not _damaged(exc):
                raise
            yield read_dead_letter(source, None, "parquet_invalid",
                                   f"{source} is not a readable Parquet file: {exc}", source,
                                   rows=None)
            return
        metadata = parquet.metadata
        firsts = [0]
        for i in range(metadata.num_row_groups):
            firsts.append(firsts[-1] + metadata.row_group(i).num_rows)
        groups = range(metadata.num_row_groups) if row_groups is None else row_groups
        previous = None  # the span of the row group read last
        for group in groups:
            if not 0 <= group < metadata.num_row_groups:
                yield read_error(source, None, IndexError(
                    f"row group {group} does not exist (the file has "
                    f"{metadata.num_row_groups}; was it replaced after listing?)"))
                continue
            rows = batch_size or _parquet_batch_rows(metadata.row_group(group))
            yield from _parquet_group(parquet, group, firsts[group], firsts[group + 1],
                                      rows, source, columns)
            span = row_group_span(metadata.row_group(group))
            if span is not None:
                # From the start of the group before, where they lie back to
                # back: the kernel drops only the cached folios (up to 2 MB)
                # that lie wholly inside the range, and one straddles them.
                start = previous[0] if previous and sum(previous) == span[0] else span[0]
                page_cache.drop_behind(f, start, sum(span) - start)
            previous = span

    return rows_of_whole_file(path, fs, source, read_rows, reads_every_byte=False)


def row_group_span(row_group) -> tuple[int, int] | None:
    """(offset, length) of the bytes that hold `row_group`'s column chunks
    (its metadata), from the first chunk's first page to the end of the
    last: what reading the group read. None when the metadata gives no
    such bytes. The footer's numbers are the file's word, not checked: the
    span only advises the page cache."""
    start, end = None, None
    for index in range(row_group.num_columns):
        chunk = row_group.column(index)
        first = chunk.data_page_offset
        if chunk.has_dictionary_page and chunk.dictionary_page_offset is not None:
            first = min(first, chunk.dictionary_page_offset)
        last = first + chunk.total_compressed_size
        start = first if start is None else min(start, first)
        end = last if end is None else max(end, last)
    if start is None or start < 0 or end <= start:
        return None
    return start, end - start


def _rows_with_bad_text(batch, source: str, first_row: int) -> Iterator[SourceRow | dict]:
    """The rows of `batch`, whose conversion met text that is not UTF-8
    (Parquet does not check its text; Arrow finds out making Python strings,
    for the whole batch): each row holding such text an ``invalid_utf8``
    dead letter naming the column, as in every reader, the others rows.
    Only such a batch pays for converting value by value."""
    names = batch.schema.names
    values: dict[str, list] = {}
    bad: dict[int, tuple[str, UnicodeDecodeError]] = {}
    for name, column in zip(names, batch.columns):
        try:
            values[name] = column.to_pylist()
            continue
        except UnicodeDecodeError:
            pass
        values[name] = []
        for index in range(len(column)):
            try:
                values[name].append(column[index].as_py())
            except UnicodeDecodeError as exc:
                values[name].append(None)
                bad.setdefault(index, (name, exc))
    for index in range(batch.num_rows):
        row = first_row + index
        if index in bad:
            name, exc = bad[index]
            yield read_dead_letter(
                source, row, "invalid_utf8",
                f"{source} row {row}: column {name!r} is not valid UTF-8 ({exc.reason} at "
                f"byte {exc.start} of the value)", {"column": name})
        else:
            yield SourceRow(source, row, {name: values[name][index] for name in names})


def _valid(batch, native) -> bool:
    """Whether `batch` holds what its types promise, its text UTF-8 above
    all (Parquet does not check it; `to_pydict` would fail on it): a batch
    that does not is converted at once, whose failure the reader reports.
    The kernels' `arrow_text_valid` (its columns of `KERNEL_TYPES`) answers
    for most batches in one pass over the text; where it does not, Arrow's
    full validation decides."""
    import pyarrow as pa

    if native.arrow_text_valid(arrow_buffers(batch)):
        return True
    try:
        batch.validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


def _damaged(exc: BaseException) -> bool:
    """Whether Arrow's `exc` means damaged Parquet data rather than a file that
    cannot be read: Arrow reports damage as ArrowInvalid, or as an OSError
    without an errno ("Couldn't deserialize thrift"), whereas the file's own
    read errors keep theirs (EIO, EACCES)."""
    return not isinstance(exc, OSError) or exc.errno is None


def _parquet_batch_rows(row_group) -> int:
    """Rows of `row_group` (its metadata) in about _BATCH_BYTES bytes."""
    row_bytes = row_group.total_byte_size / max(1, row_group.num_rows)
    low, high = _PARQUET_BATCH_ROWS
    return int(min(high, max(low, _BATCH_BYTES // max(1.0, row_bytes))))


def _parquet_group(parquet, group: int, first_row: int, end_row: int, batch_size: int,
                   source: str, columns: bool) -> Iterator[SourceRow | ColumnBatch | dict]:
    """The rows of row group `group` (rows first_row + 1 .. end_row of the
    file); a group that fails to decode ends in a dead letter standing for
    its unread rows, as many as the footer says."""
    import pyarrow as pa

    row = first_row
    native = kernels() if columns else None
    try:
        # (every batch holds the file's columns, as its Arrow schema types them)
        lazy = native is not None and lazy_types(parquet.schema_arrow)
        for batch in parquet.iter_batches(batch_size=batch_size, row_groups=[group],
                                          use_threads=False):
            if lazy and _valid(batch, native):
                # The native kernel reads the batch's buffers; Python values
                # are made only if something asks (`ArrowBatch`). Its text
                # was found UTF-8 here, which the kernel need not do again.
                yield ArrowBatch(source, row + 1, batch, utf8_known=True)
                row += batch.num_rows
                continue
            try:
                # (to_pydict: the same Python values as to_pylist's, a column
                # at a time)
                converted = batch.to_pydict() if columns else batch.to_pylist()
            except UnicodeDecodeError:
                yield from _rows_with_bad_text(batch, source, row + 1)
                row += batch.num_rows
                continue
            if columns:
                yield (ColumnBatch(source, row + 1, converted) if native is None
                       else ArrowBatch(source, row + 1, batch, converted))
                row += batch.num_rows
                continue
            for values in converted:
                row += 1
                yield SourceRow(source, row, values)
    except (pa.ArrowException, ValueError, OSError) as exc:
        # Either way this row group is lost and the next may not be.
        if not _damaged(exc):
            yield read_error(source, row + 1, exc, input={"row_group": group},
                             rows=end_row - row)
            return
        yield read_dead_letter(
            source, row + 1, "parquet_invalid",
            f"{source}: row group {group} cannot be decoded from row {row + 1} on "
            f"({end_row - row} rows lost): {exc}", {"row_group": group}, rows=end_row - row)


def read_parquet_head(path: str, rows: int, columns: Iterable[str], *,
                      max_bytes: int | None = None,
                      fs: fsspec.AbstractFileSystem | None = None,
                      source: str | None = None) -> list[SourceRow]:
    """The first `rows` rows of a Parquet file, holding those of `columns`
    the file has (the values `iter_parquet` gives), read from those
    columns' first pages only, a column after the other (a store client
    reading ahead in one place would fetch again at every turn between
    columns): a file's first row group, which `iter_parquet` reads whole,
    is often hundreds of MB. `max_bytes`: fewer rows, about as many as
    hold `max_bytes` of values (wide values: image bytes in a column).
    Empty when the file cannot be read or has none of `columns`; a file
    damaged further on gives the rows read before the damage
    (`iter_parquet` reports it)."""
    import pyarrow as pa

    fs, fs_path, source = resolve(path, fs, source)
    values: dict[str, list] = {}
    try:
        with open_file(fs, fs_path) as f:
            parquet = _parquet_file(f, pages=True)
            present = set(parquet.schema_arrow.names)
            wanted = [column for column in dict.fromkeys(columns) if column in present]
            values = {column: [] for column in wanted}
            per_column = None if max_bytes is None else max(1, max_bytes // max(1, len(wanted)))
            for column in wanted:
                if rows < 1:
                    break
                held = 0
                for batch in parquet.iter_batches(batch_size=min(rows, _HEAD_BATCH_ROWS),
                                                  columns=[column], use_threads=False):
                    values[column] += batch.column(0).to_pylist()
                    held += batch.nbytes
                    if len(values[column]) >= rows or (per_column is not None
                                                       and held >= per_column):
                        break
                rows = min(rows, len(values[column]))  # no column needs more
    except (*READ_ERRORS, pa.ArrowException, ValueError):
        pass
    count = min((len(column_values) for column_values in values.values()), default=0)
    return [SourceRow(source, row + 1, {column: column_values[row]
                                        for column, column_values in values.items()})
            for row in range(min(count, rows))]


def read_parquet_columns(path: str, *, fs: fsspec.AbstractFileSystem | None = None
                         ) -> list[str] | None:
    """The column names of a Parquet file (from its footer: the keys of the
    rows `iter_parquet` gives), or None when the footer cannot be read."""
    import pyarrow as pa

    fs, fs_path, _ = resolve(path, fs, None)
    try:
        with open_file(fs, fs_path) as f:
            return list(_parquet_file(f).schema_arrow.names)
    except (*READ_ERRORS, pa.ArrowException, ValueError):
        return None
