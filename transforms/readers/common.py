"""What every reader shares: opening a file, its display name, and the dead letters of reading.

A reader opens one file through fsspec (``.gz`` and the other suffixes fsspec
knows are decompressed transparently; byte offsets then refer to the
decompressed stream) and names it in rows and dead letters by its display
name: the local path, or the URL with credentials removed (`redact_url`).
"""

from __future__ import annotations

import contextlib
import zlib
from typing import IO, Any, Callable, Iterator

import fsspec
from fsspec.implementations.local import LocalFileSystem
from isal import isal_zlib

from ...schemas.dead_letters import dead_letter, printable_name
from .. import page_cache
from ..urls import redact_url

__all__ = [
    "MAX_DECODED_BYTES",
    "READ_ERRORS",
    "display_name",
    "empty_file",
    "is_compressed",
    "open_file",
    "open_range",
    "read_dead_letter",
    "read_error",
    "resolve",
    "skip_utf8_bom",
]

# The most bytes one record of an input may take once decompressed: a CSV
# record (csv, csv_dialect) or an Avro block (avro_blocks). Past it, a few
# compressed bytes would fill the memory (a decompression bomb).
MAX_DECODED_BYTES = 256 << 20

# Exceptions that mean "this file cannot be read" rather than "this row is
# bad": I/O and permission errors, and damaged compression streams (fsspec
# decompresses .gz with isal when it is installed, which it is here: isal's
# error is not zlib's).
READ_ERRORS = (OSError, EOFError, zlib.error, isal_zlib.error)


def display_name(fs: fsspec.AbstractFileSystem, path: str) -> str:
    """The name shown for `path` of `fs` in rows and dead letters: the local path
    (bytes of a name that are not UTF-8 written ``\\xNN``, `printable_name`),
    or the URL with credentials removed."""
    if isinstance(fs, LocalFileSystem):
        return printable_name(path)
    return redact_url(fs.unstrip_protocol(path))


def is_compressed(path: str) -> bool:
    """True when the file is read through a decompressor (``.gz`` ...), so it
    cannot be split into byte ranges."""
    return fsspec.utils.infer_compression(path) is not None


def read_error(source: str, row: int | None, exc: BaseException, *,
               input: Any = None, rows: int | None = None) -> dict:
    """The dead letter for a file (or the rest of one) that cannot be read;
    `rows`: how many rows that loses, None (the default) when unknown, 1 for
    a file that is one row (an image)."""
    message = redact_url(f"cannot read {source}: {type(exc).__name__}: {exc}")
    return dead_letter(source=source, row=row, key=None, stage="read",
                       reason="read_error", feature=None, message=message,
                       input=input if input is not None else source, rows=rows)


def read_dead_letter(source: str, row: int | None, reason: str, message: str,
                     input: Any, *, rows: int | None = 1) -> dict:
    """A dead letter of the ``read`` stage with `reason`: one row, or (with
    `rows`: their number, None when unknown) a whole file or its rest."""
    return dead_letter(source=source, row=row, key=None, stage="read", reason=reason,
                       feature=None, message=message, input=input, rows=rows)


def empty_file(source: str) -> dict:
    """The dead letter standing for a table file with no records at all (it
    loses no rows)."""
    return read_dead_letter(source, None, "empty_file", f"{source} is empty", source, rows=0)


def resolve(path: str, fs: fsspec.AbstractFileSystem | None,
            source: str | None) -> tuple[fsspec.AbstractFileSystem, str, str]:
    """``(fs, fs_path, source)`` for a reader's arguments: `path` is a URL
    when `fs` is None, else a path of `fs`; `source` defaults to `path` redacted."""
    if fs is None:
        fs, fs_path = fsspec.core.url_to_fs(path)
    else:
        fs_path = path
    return fs, fs_path, source if source is not None else redact_url(path)


# A file starting with these bytes starts with a UTF-8 byte-order mark: never
# data, whatever encoding the file declares (an editor saving "UTF-8 with BOM"
# a file declared latin-1 or cp1252 would otherwise give a first value or
# column name beginning "ï»¿").
UTF8_BOM = b"\xef\xbb\xbf"


def skip_utf8_bom(f: IO[bytes]) -> None:
    """Leaves `f`, just opened, after a UTF-8 byte-order mark at its start,
    else at its start."""
    if f.read(3) != UTF8_BOM:
        f.seek(0)


def open_file(fs: fsspec.AbstractFileSystem, path: str) -> IO[bytes]:
    """`path` of `fs` opened for reading, decompressed by its suffix."""
    return fs.open(path, "rb", compression="infer")


@contextlib.contextmanager
def open_range(fs: fsspec.AbstractFileSystem, path: str, start: int, end: int | None,
               opener=open_file) -> Iterator[IO[bytes]]:
    """`path` opened (by `opener`, default `open_file`) for reading the records
    of ``[start, end)``: once they are all read, those bytes are dropped from
    the page cache (`page_cache`; the bytes just past `end` are left for the
    next range's reader)."""
    with opener(fs, path) as f:
        yield f
        page_cache.drop_behind(f, start, 0 if end is None else end - start)


def rows_of_whole_file(path: str, fs: fsspec.AbstractFileSystem | None, source: str | None,
                       read_rows: Callable[[IO[bytes], str], Iterator[Any]], *,
                       reads_every_byte: bool = True) -> Iterator[Any]:
    """The rows and read dead letters of one file read whole from its
    start: `read_rows(file, source)` gives them from the open file. A file
    of no byte is one `empty_file` dead letter, and a failure to open or
    read it a `read_error` (a reader that knows the row it reached catches
    its own first). `reads_every_byte`: `read_rows` reads the file through
    once, which then leaves the page cache (`open_range` of the whole
    file); a reader of some of its parts drops them itself."""
    fs, fs_path, source = resolve(path, fs, source)
    try:
        with (open_range(fs, fs_path, 0, None) if reads_every_byte
              else open_file(fs, fs_path)) as f:
            if f.seek(0, 2) == 0:
                yield empty_file(source)
                return
            f.seek(0)
            yield from read_rows(f, source)
    except READ_ERRORS as exc:
        yield read_error(source, None, exc)
