"""The Avro reader: the records of one Avro object container file as rows and dead letters.

Read with fastavro, schema-aware: records are dicts of Python values
(nested records are dicts, arrays lists, ``bytes`` bytes, logical types
converted: ``date`` a `datetime.date`, ``timestamp-millis``/``-micros`` an
aware `datetime.datetime`, ``decimal`` a `decimal.Decimal`), so nested
fields are reached with paths in ``from:``. ``row`` is the record's 1-based
index in the file; each file is one unit of work. A file whose header cannot
be read, or a block that does not decode, is one ``avro_invalid`` dead
letter for the file or its unread rest; so is a file whose records end
before its bytes do (a damaged block count), and one whose schema is not a
record schema.

Lengths read from the file (a header entry's, a block's, a string's) are
never trusted for an allocation: `_BoundedReads` hands fastavro at most the
bytes the file holds, read a block at a time, so a length of 2^45 is a short
read, which fastavro reports as a decoding error, not a MemoryError. The
one count no byte checks, an array's of items that take no bytes, is
refused with the schema (`_unbounded_array`). Compressed blocks are
inflated by `avro_blocks` in bounded steps before fastavro sees them: a
block that would inflate past `common.MAX_DECODED_BYTES` (a decompression
bomb) is an ``avro_invalid`` dead letter naming the block and its byte
offset, for the rest of the file, and is never decoded.
"""

from __future__ import annotations

from typing import IO, Iterator

import fsspec

from .avro_blocks import BlockRefused, DecompressedContainer
from .common import (READ_ERRORS, open_file, read_dead_letter, rows_of_whole_file,
                     read_error, resolve)
from .rows import SourceRow

__all__ = ["iter_avro", "read_avro_columns"]

# fastavro's decoding errors on damaged data (a short read is EOFError or
# ValueError, a bad length ValueError, an unknown type KeyError ...)
_DECODE_ERRORS = (ValueError, EOFError, TypeError, IndexError, KeyError, StopIteration,
                  UnicodeDecodeError, OverflowError)
# The most one read asks of the file at once, whatever length it was given.
_READ_CHUNK = 1 << 20


class _BoundedReads:
    """A file whose reads allocate no more than the bytes the file holds: a
    read of n bytes is made a chunk at a time and stops at the end of the
    file, and a negative length (never valid in Avro, and -1 would read
    the whole rest) is a ValueError."""

    def __init__(self, f: IO[bytes]):
        self._f = f

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            raise ValueError(f"a negative length ({size}) in the data")
        if size <= _READ_CHUNK:
            return self._f.read(size)
        parts = []
        while size > 0:
            part = self._f.read(min(size, _READ_CHUNK))
            if not part:
                break
            parts.append(part)
            size -= len(part)
        return b"".join(parts)

    def __getattr__(self, name):
        return getattr(self._f, name)


def _block_records(block) -> Iterator[dict]:
    """The records of one fastavro block, checking that its count of
    records is what its bytes hold: fastavro takes a count of -1 or 1 for a
    block of three records as given, and the other records would be lost
    without a word. Raises ValueError."""
    if block.num_records < 0:
        raise ValueError(f"a block claims {block.num_records} records")
    yield from block
    data = block.bytes_
    used = data.tell()
    if data.seek(0, 2) != used:
        raise ValueError(f"a block of {block.num_records} records holds more bytes than "
                         "they take (a damaged count of records)")


def _is_record_schema(schema) -> bool:
    return isinstance(schema, dict) and schema.get("type") == "record"


# --- arrays whose count no byte checks -------------------------------------------
# fastavro builds an array item by item, so a false count of items that take
# at least one byte each ends at the end of the block's bytes; items that take
# none (null, an empty record, fixed of size 0) are built from the count alone,
# and a count of 2^40 fills the memory. Such an array holds nothing a feature
# could use, so a file whose schema has one is refused as a whole.


def _schema_nodes(schema) -> Iterator[dict]:
    """Every mapping inside an Avro schema (named types, fields, the types
    of fields, items and values), each at least once."""
    stack = [schema]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            yield item
            stack.extend(v for v in item.values() if isinstance(v, (dict, list)))
            stack.extend(f.get("type") for f in item.get("fields") or ()
                         if isinstance(f, dict))


def _named_types(schema) -> dict:
    """name (and namespace.name) -> definition, for every named type in `schema`."""
    names = {}
    for item in _schema_nodes(schema):
        if isinstance(item.get("name"), str) and item.get("type") in ("record", "error",
                                                                     "enum", "fixed"):
            names[item["name"]] = item
            if isinstance(item.get("namespace"), str):
                names[f"{item['namespace']}.{item['name']}"] = item
    return names


def _takes_no_bytes(schema, names: dict, seen: frozenset = frozenset()) -> bool:
    """True when a value of `schema` may be encoded in zero bytes."""
    if isinstance(schema, str):
        if schema == "null":
            return True
        named = names.get(schema)
        return named is not None and schema not in seen and _takes_no_bytes(
            named, names, seen | {schema})
    if not isinstance(schema, dict):
        return False  # a union writes its branch's index: at least one byte
    kind = schema.get("type")
    if kind in ("record", "error"):
        name = schema.get("name")
        inner = seen | {name} if isinstance(name, str) else seen
        return all(isinstance(f, dict) and _takes_no_bytes(f.get("type"), names, inner)
                   for f in schema.get("fields") or ())
    if kind == "fixed":
        return schema.get("size") == 0
    if isinstance(kind, str) and kind not in ("array", "map", "enum"):
        return _takes_no_bytes(kind, names, seen)  # {"type": "null"}, logical types
    return isinstance(kind, dict) and _takes_no_bytes(kind, names, seen)


def _unbounded_array(schema) -> bool:
    """True when `schema` holds an array whose items may take no bytes."""
    names = _named_types(schema)
    return any(item.get("type") == "array" and _takes_no_bytes(item.get("items"), names)
               for item in _schema_nodes(schema))


def iter_avro(path: str, *, fs: fsspec.AbstractFileSystem | None = None,
              source: str | None = None) -> Iterator[SourceRow | dict]:
    """The rows and read dead letters of one Avro file (see the module)."""
    return rows_of_whole_file(path, fs, source, _avro_rows)


def _avro_rows(f, source: str) -> Iterator[SourceRow | dict]:
    import fastavro  # imported here: only Avro sources need it

    index, blocks = 0, None
    try:
        try:
            blocks = fastavro.block_reader(DecompressedContainer(_BoundedReads(f)))
            if not _is_record_schema(blocks.writer_schema):
                yield read_dead_letter(
                    source, None, "avro_invalid",
                    f"{source}: the file's schema is not a record schema, so its values "
                    "are not rows with columns", source, rows=None)
                return
            if _unbounded_array(blocks.writer_schema):
                yield read_dead_letter(
                    source, None, "avro_invalid",
                    f"{source}: the file's schema has an array of items that take no "
                    "bytes (null, an empty record), whose length cannot be checked "
                    "before it is built; the file is not read", source, rows=None)
                return
            for block in blocks:
                for record in _block_records(block):
                    index += 1
                    yield SourceRow(source, index, record)
        except BlockRefused as exc:
            yield read_dead_letter(
                source, index + 1 if index else None, "avro_invalid",
                f"{source}: {exc}; the rest of the file is not read (records read: {index})",
                source, rows=None)
        except _DECODE_ERRORS as exc:
            where = "header" if blocks is None else f"data after record {index}"
            yield read_dead_letter(
                source, index + 1 if index else None, "avro_invalid",
                f"{source}: the Avro {where} cannot be decoded ({type(exc).__name__}: "
                f"{exc}); the rest of the file is not read", source, rows=None)
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
            schema = fastavro.reader(_BoundedReads(f)).writer_schema
    except (*READ_ERRORS, *_DECODE_ERRORS):
        return None
    if not _is_record_schema(schema):
        return None
    return [field["name"] for field in schema.get("fields", [])]
