"""CSV files of another dialect (delimiter, quote, no header, encoding): rows and dead letters.

`CsvOptions` is what ``source.csv`` declares. The default dialect (comma,
``"`` quotes, a header line, UTF-8 with or without a byte-order mark) is
read by `csv.iter_csv`, which splits files into byte ranges and takes plain
runs of lines a block at a time; every other dialect is read here, each
file as one unit, through Python's ``csv`` module over the decoded text
stream, so the default path pays nothing for the options.

Rows follow the same rules as `iter_csv`: values are ``str``, one `SourceRow`
or read dead letter per record (``csv_ragged_row``, ``csv_malformed``),
``row`` is the line where the record starts (line 1 is the header when
there is one), blank lines are not rows (a quoted empty record, ``""``, is
one: a record of one empty field), a UTF-8 byte-order mark opening the file
is dropped whatever the encoding, and a file whose header is unusable is one
``csv_bad_header`` dead letter. A record holding bytes that are not valid
in the declared encoding is that record's dead letter and reading goes on,
as in the default reader: ``invalid_utf8`` for UTF-8 (the default reader's
reason), ``invalid_encoding`` for the others (a header holding them makes
the file's one ``invalid_encoding`` dead letter). UTF-16 text that does not
decode (an unpaired surrogate) still stops the file with one
``invalid_encoding`` dead letter for its rest: that codec cannot escape
what it cannot decode, and decodes 8 KB at a time, so the rows of that
8 KB before the fault are not read either.
"""

from __future__ import annotations

import codecs
import csv
import dataclasses
import io
import re
from typing import Iterator

import fsspec

from .csv import _csv_limit_lock
from .common import (READ_ERRORS, empty_file, open_file, read_dead_letter, read_error, resolve,
                     skip_utf8_bom)
from .rows import SourceRow

__all__ = ["CSV_ENCODINGS", "CsvOptions", "iter_csv_dialect", "read_dialect_header"]

# Encodings a CSV file may declare, by their canonical codec name.
CSV_ENCODINGS = ("utf-8", "utf-8-sig", "latin-1", "cp1252", "utf-16")

# The csv module's limit on one field (131072 characters by default) is
# process-wide; records longer than this are a runaway quote in practice.
_FIELD_LIMIT = 256 << 20


@dataclasses.dataclass(frozen=True)
class CsvOptions:
    """A CSV dialect (``source.csv``).

    delimiter: one character between fields. quote: the quote character, or
    None for none (quotes are then data). header: the first line names the
    columns; when False, `columns` names them and every line is a row.
    encoding: one of `CSV_ENCODINGS` (``utf-16`` needs its byte-order mark).
    """

    delimiter: str = ","
    quote: str | None = '"'
    header: bool = True
    columns: tuple[str, ...] | None = None
    encoding: str = "utf-8"

    @property
    def is_default(self) -> bool:
        """True when `csv.iter_csv`'s fast reader reads this dialect."""
        return (self.delimiter == "," and self.quote == '"' and self.header
                and self.encoding in ("utf-8", "utf-8-sig"))


def _reader(text: io.TextIOBase, options: CsvOptions):
    if options.quote is None:
        return csv.reader(text, delimiter=options.delimiter, quoting=csv.QUOTE_NONE,
                          strict=True)
    return csv.reader(text, delimiter=options.delimiter, quotechar=options.quote,
                      doublequote=True, strict=True)


def _next_record(records) -> list[str] | None:
    # The csv module's field limit is process-wide, shared with `csv.iter_csv`:
    # raised for this parse under the same lock, and put back.
    with _csv_limit_lock:
        previous = csv.field_size_limit(_FIELD_LIMIT)
        try:
            return next(records, None)
        finally:
            csv.field_size_limit(previous)


# Bytes the encoding cannot decode are decoded as lone surrogates
# U+DC80..U+DCFF (surrogateescape), which no valid text in any of
# CSV_ENCODINGS decodes to, so a record holding one held such bytes and
# the records around it are still read.
_NOT_DECODED = re.compile("[\udc80-\udcff]")


def _text(raw, encoding: str) -> io.TextIOWrapper:
    # A UTF-8 byte-order mark is never data, in any declared encoding
    # (`skip_utf8_bom`); UTF-16 decodes its own. Once it is skipped, utf-8-sig
    # is utf-8: a second mark would be data, as in the default reader.
    # newline="" leaves line ends to the csv module (quoted fields may hold them).
    if encoding != "utf-16":
        skip_utf8_bom(raw)
    codec = "utf-8" if encoding == "utf-8-sig" else encoding
    return io.TextIOWrapper(raw, encoding=codec, errors="surrogateescape", newline="")


def iter_csv_dialect(path: str, options: CsvOptions, *,
                     fs: fsspec.AbstractFileSystem | None = None,
                     source: str | None = None) -> Iterator[SourceRow | dict]:
    """Reads every record of one CSV file of dialect `options`: a `SourceRow`
    (column -> str) per good record, read dead letters otherwise."""
    fs, fs_path, source = resolve(path, fs, source)
    line = 1
    try:
        with open_file(fs, fs_path) as raw:
            text = _text(raw, options.encoding)
            records = _reader(text, options)
            names = list(options.columns) if not options.header else None
            seen_any = False
            while True:
                line = records.line_num + 1
                try:
                    fields = _next_record(records)
                except csv.Error as exc:
                    seen_any = True
                    if names is None:
                        yield read_dead_letter(source, line, "csv_bad_header",
                                               f"{source}: the header line is not valid CSV: {exc}",
                                               None, rows=None)
                        return
                    yield read_dead_letter(source, line, "csv_malformed",
                                           f"{source} line {line}: broken CSV quoting: {exc}", None)
                    continue
                if fields is None:
                    break
                if not fields:
                    continue  # a blank line is not a row (a quoted "" is one empty field)
                seen_any = True
                undecoded = _undecoded(fields, options.encoding, source, line, names is None)
                if undecoded is not None:
                    yield undecoded
                    if names is None:
                        return
                    continue
                if names is None:
                    problem = _header_problem(fields, source, line)
                    if problem is not None:
                        yield problem
                        return
                    names = fields
                    continue
                if len(fields) != len(names):
                    yield read_dead_letter(
                        source, line, "csv_ragged_row",
                        f"{source} line {line}: {len(fields)} fields, but "
                        f"{'the header has' if options.header else 'source.csv.columns names'} "
                        f"{len(names)}", fields)
                    continue
                yield SourceRow(source, line, dict(zip(names, fields)))
            if not seen_any:
                yield empty_file(source)
    except UnicodeError as exc:
        yield read_dead_letter(
            source, line, "invalid_encoding",
            f"{source} after line {line - 1}: not valid {options.encoding} text ({exc}); the "
            "rest of the file is not read", source, rows=None)
    except READ_ERRORS as exc:
        yield read_error(source, line if line > 1 else None, exc)


def _undecoded(fields: list[str], encoding: str, source: str, line: int,
               header: bool) -> dict | None:
    """The dead letter of a record holding bytes `encoding` cannot decode
    (for the header: of the file), or None."""
    found = _NOT_DECODED.search("\x00".join(fields))
    if found is None:
        return None
    byte = ord(found.group()) - 0xDC00
    utf8 = encoding in ("utf-8", "utf-8-sig")
    reason = "invalid_utf8" if utf8 and not header else "invalid_encoding"
    what = "the header line" if header else f"line {line}"
    return read_dead_letter(
        source, line, reason,
        f"{source} {what}: not valid {encoding} text (byte 0x{byte:02x})", fields,
        rows=None if header else 1)


def _header_problem(names: list[str], source: str, line: int) -> dict | None:
    if not any(name.strip() for name in names):
        return read_dead_letter(source, line, "csv_bad_header",
                                f"{source}: the first line must be a header naming the columns, "
                                "but it is empty", names, rows=None)
    seen: set[str] = set()
    duplicates = sorted({name for name in names if name in seen or seen.add(name)})
    if duplicates:
        return read_dead_letter(
            source, line, "csv_bad_header",
            f"{source}: duplicate column names in the header: {', '.join(map(repr, duplicates))}"
            " (rename them so each column has one name)", names, rows=None)
    return None


def read_dialect_header(path: str, options: CsvOptions, *,
                        fs: fsspec.AbstractFileSystem | None = None) -> list[str] | None:
    """The columns `iter_csv_dialect` gives the rows of `path`: the declared
    `columns` without a header, else the header's names; None when the
    header is unusable or the file cannot be read."""
    if not options.header:
        return list(options.columns)
    fs, fs_path, source = resolve(path, fs, None)
    try:
        with open_file(fs, fs_path) as raw:
            text = _text(raw, options.encoding)
            for fields in _reader(text, options):
                if not fields:
                    continue
                bad = (_undecoded(fields, options.encoding, source, 1, True)
                       or _header_problem(fields, source, 1))
                return None if bad else fields
    except (*READ_ERRORS, UnicodeError, csv.Error):
        return None
    return None


def check_encoding(name: str) -> str:
    """The canonical name of a CSV encoding, or ValueError."""
    try:
        canonical = codecs.lookup(name).name
    except LookupError:
        raise ValueError(f"unknown encoding {name!r}") from None
    aliases = {"utf-8": "utf-8", "utf-8-sig": "utf-8-sig", "iso8859-1": "latin-1",
               "latin-1": "latin-1", "cp1252": "cp1252", "utf-16": "utf-16"}
    if canonical not in aliases:
        raise ValueError(f"encoding {name!r} is not supported")
    return aliases[canonical]
