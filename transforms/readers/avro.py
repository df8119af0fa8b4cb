"""The Avro reader: the records of one Avro object container file as rows and dead letters.

Read with fastavro, schema-aware: records are dicts of Python values
(nested records are dicts, arrays lists, ``bytes`` bytes, logical types
converted: ``date`` a `datetime.date`, ``timestamp-millis``/``-micros`` an
aware `datetime.datetime`, ``decimal`` a `decimal.Decimal`), so nested
fields are reached with paths in ``from:``. ``row`` is the record's 1-based
index in the file; each file is one unit of work. A file whose header cannot
be read, or a block that does not decode, is one ``avro_invalid`` dead
letter for the file or its unread rest.
"""

from __future__ import annotations

from typing import Iterator

import fsspec

from .common import READ_ERRORS, empty_file, open_file, read_dead_letter, read_error, resolve
from .rows import SourceRow

__all__ = ["iter_avro", "read_avro_columns"]


def iter_avro(path: str, *, fs: fsspec.AbstractFileSystem | None = None,
              source: str | None = None) -> Iterator[SourceRow | dict]:
    """The rows and read dead letters of one Avro file (see the module)."""
    import fastavro  # imported here: only Avro sources need it

    fs, fs_path, source = resolve(path, fs, source)
    index = 0
    try:
        with open_file(fs, fs_path) as f:
            if f.seek(0, 2) == 0:
                yield empty_file(source)
                return
            f.seek(0)
            try:
                for record in fastavro.reader(f):
                    index += 1
                    if not isinstance(record, dict):
                        yield read_dead_letter(
                            source, index, "avro_invalid",
                            f"{source} record {index}: the file's schema is not a record "
                            f"schema (a {type(record).__name__})", None)
                        continue
                    yield SourceRow(source, index, record)
            except (ValueError, EOFError, TypeError, IndexError, KeyError, StopIteration,
                    UnicodeDecodeError) as exc:
                where = "header" if index == 0 else f"data after record {index}"
                yield read_dead_letter(
                    source, index + 1 if index else None, "avro_invalid",
                    f"{source}: the Avro {where} cannot be decoded ({type(exc).__name__}: "
                    f"{exc}); the rest of the file is not read", source)
    except READ_ERRORS as exc:
        yield read_error(source, index + 1 if index else None, exc)


def read_avro_columns(path: str, *, fs: fsspec.AbstractFileSystem | None = None
                      ) -> list[str] | None:
    """The top-level field names of an Avro file's record schema (from its
    header), or None when the header cannot be read."""
    import fastavro

    fs, fs_path, _ = resolve(path, fs, None)
    try:
        with open_file(fs, fs_path) as f:
            schema = fastavro.reader(f).writer_schema
    except (*READ_ERRORS, ValueError, TypeError, KeyError, IndexError, StopIteration):
        return None
    if not isinstance(schema, dict) or schema.get("type") != "record":
        return None
    return [field["name"] for field in schema.get("fields", [])]
