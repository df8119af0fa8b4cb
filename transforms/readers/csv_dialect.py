"""CSV files of another dialect (delimiter, quote, no header, encoding): rows and dead letters.

`CsvOptions` is what ``source.csv`` declares. The default dialect (comma,
``"`` quotes, a header line, UTF-8 with or without a byte-order mark) is
read by `csv.iter_csv`, which splits files into byte ranges and takes plain
runs of lines a block at a time; every other dialect is read here, each
file as one unit, through Python's ``csv`` module over the decoded text
stream, so the default path pays nothing for the options. As a build reads
them (``columns=True``), a UTF-8 dialect's blocks of plain lines come as
`CsvRunBatch`es, as the default dialect's do (`_runs_and_records`: the same
rows, the csv module reading every other record).

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

from .csv import CsvRunBatch, _csv_limit_lock, lone_carriage_return, plain_run_batch
from .common import (READ_ERRORS, empty_file, open_file, read_dead_letter, read_error, resolve,
                     skip_utf8_bom)
from .ranges import BLOCK, Cursor, iter_line_blocks
from .rows import SourceRow

__all__ = ["CSV_ENCODINGS", "CsvOptions", "iter_csv_dialect", "read_dialect_header"]

# Encodings a CSV file may declare, by their canonical codec name.
CSV_ENCODINGS = ("utf-8", "utf-8-sig", "latin-1", "cp1252", "utf-16")

# Bytes read at a time by `_runs_and_records` (a module attribute, so that
# tests can cut files into many blocks).
_BLOCK = BLOCK

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
                     source: str | None = None, columns: bool = False
                     ) -> Iterator[SourceRow | CsvRunBatch | dict]:
    """Reads every record of one CSV file of dialect `options`: a `SourceRow`
    (column -> str) per good record, read dead letters otherwise.
    columns: a UTF-8 dialect's plain runs of lines come as `CsvRunBatch`es
    (`_runs_and_records`), the same rows."""
    fs, fs_path, source = resolve(path, fs, source)
    if columns and _takes_plain_runs(options):
        yield from _runs_and_records(fs, fs_path, options, source)
        return
    records = _Records(options, source)
    line = 1
    try:
        with open_file(fs, fs_path) as raw:
            reader = _reader(_text(raw, options.encoding), options)
            while True:
                line = reader.line_num + 1
                item, more = records.next_item(reader, line)
                if item is not None:
                    yield item
                if not more:
                    break
            if not records.seen_any:
                yield empty_file(source)
    except UnicodeError as exc:
        yield read_dead_letter(
            source, line, "invalid_encoding",
            f"{source} after line {line - 1}: not valid {options.encoding} text ({exc}); the "
            "rest of the file is not read", source, rows=None)
    except READ_ERRORS as exc:
        yield read_error(source, line if line > 1 else None, exc)


class _Records:
    """The rows and dead letters of a file's records as the csv module reads
    them, one record at a time (`next_item`): the header first when the
    dialect has one, then a row or a dead letter per record; blank lines
    are not rows."""

    def __init__(self, options: CsvOptions, source: str):
        self.options, self.source = options, source
        self.names: list[str] | None = list(options.columns) if not options.header else None
        self.seen_any = False  # (a record was read: the file is not empty)

    def next_item(self, reader, line: int) -> tuple[SourceRow | dict | None, bool]:
        """(the row or dead letter of the record `reader` reads next, which
        starts on `line`, or None; whether to read on)."""
        source, names = self.source, self.names
        try:
            fields = _next_record(reader)
        except csv.Error as exc:
            self.seen_any = True
            if names is None:
                return read_dead_letter(source, line, "csv_bad_header",
                                        f"{source}: the header line is not valid CSV: {exc}",
                                        None, rows=None), False
            return read_dead_letter(source, line, "csv_malformed",
                                    f"{source} line {line}: broken CSV quoting: {exc}", None), True
        if fields is None:
            return None, False
        if not fields:
            return None, True  # a blank line is not a row (a quoted "" is one empty field)
        self.seen_any = True
        undecoded = _undecoded(fields, self.options.encoding, source, line, names is None)
        if undecoded is not None:
            return undecoded, names is not None
        if names is None:
            problem = _header_problem(fields, source, line)
            if problem is not None:
                return problem, False
            self.names = fields
            return None, True
        if len(fields) != len(names):
            return read_dead_letter(
                source, line, "csv_ragged_row",
                f"{source} line {line}: {len(fields)} fields, but "
                f"{'the header has' if self.options.header else 'source.csv.columns names'} "
                f"{len(names)}", fields), True
        return SourceRow(source, line, dict(zip(names, fields))), True


def _takes_plain_runs(options: CsvOptions) -> bool:
    """Whether `_runs_and_records` reads the dialect: UTF-8 text and a
    delimiter and quote of one ASCII character each (no CR or LF)."""
    def one_byte(char: str | None) -> bool:
        return char is not None and len(char) == 1 and char.isascii() and char not in "\r\n"

    return (options.encoding in ("utf-8", "utf-8-sig") and one_byte(options.delimiter)
            and (options.quote is None or one_byte(options.quote))
            and options.quote != options.delimiter)


def _runs_and_records(fs: fsspec.AbstractFileSystem, fs_path: str, options: CsvOptions,
                      source: str) -> Iterator[SourceRow | CsvRunBatch | dict]:
    """`iter_csv_dialect`'s rows of a UTF-8 dialect, a block of whole lines
    at a time: a block that is a plain run (no quote character, a CR only in
    CRLF, valid UTF-8, no blank line, one field per column: no field can
    then be anything but the text between delimiters) is one `CsvRunBatch`,
    tested and converted by the native kernels where they run, exactly as
    the default dialect's (`csv.plain_run_batch`); from any other block the
    csv module reads on, record by record as without, to the end of the
    block where a record ends (`_BlockLines`), lines counted as it counts
    them. The header line is a block of its own."""
    records = _Records(options, source)
    quote = None if options.quote is None else options.quote.encode("ascii")
    line = 1  # the line the next block starts on
    reading = 1  # the line being read (a read error's)
    try:
        with open_file(fs, fs_path) as raw:
            skip_utf8_bom(raw)
            blocks = (block for _, _, block in iter_line_blocks(raw, Cursor(0, 1), _BLOCK))
            if records.names is None:
                blocks = _header_apart(blocks)
            for block in blocks:
                reading = line
                if records.names is not None and _may_be_plain(block, quote):
                    batch = plain_run_batch(block, line, records.names, source,
                                            options.delimiter)
                    if batch is not None:
                        records.seen_any = True
                        yield batch
                        line += block.count(b"\n") + (not block.endswith(b"\n"))
                        continue
                lines = _BlockLines(block, blocks)
                reader = _reader(lines, options)
                more = True
                while more and not lines.at_block_end:
                    reading = line + reader.line_num
                    item, more = records.next_item(reader, reading)
                    if item is not None:
                        yield item
                if not more:
                    break
                line += reader.line_num
            if not records.seen_any:
                yield empty_file(source)
    except READ_ERRORS as exc:
        yield read_error(source, reading if reading > 1 else None, exc)


def _may_be_plain(block: bytes, quote: bytes | None) -> bool:
    """No quote character, a CR only before LF, and short enough that no
    field passes the csv module's limit (which a plain run would take)."""
    return ((quote is None or quote not in block) and len(block) < _FIELD_LIMIT
            and (b"\r" not in block or not lone_carriage_return(block)))


def _header_apart(blocks: Iterator[bytes]) -> Iterator[bytes]:
    """`blocks` with the first one's first line a block of its own."""
    first = next(blocks, None)
    if first is None:
        return
    header, newline, rest = first.partition(b"\n")
    yield header + newline
    if rest:
        yield rest
    yield from blocks


class _BlockLines:
    """The lines of `first` and of the blocks after it in `blocks`, as text
    (bytes that are not UTF-8 escaped, as `_text` does), split as a text
    stream with ``newline=""`` splits them (at LF, CRLF and a lone CR), for
    the csv module; a block is read only when a line of it is asked for.
    `at_block_end`: the last line given ended a block (no line of the next
    was asked for), where a record the csv module ended ends a block too."""

    def __init__(self, first: bytes, blocks: Iterator[bytes]):
        self._blocks = blocks
        self._lines = _lines_of(first)
        self._at = 0
        self.at_block_end = False

    def __iter__(self):
        return self

    def __next__(self) -> str:
        if self._at == len(self._lines):
            block = next(self._blocks, None)
            if block is None:
                raise StopIteration
            self._lines, self._at = _lines_of(block), 0
        line = self._lines[self._at]
        self._at += 1
        self.at_block_end = self._at == len(self._lines)
        return line


def _lines_of(block: bytes) -> list[str]:
    # (a block ends at a LF: no character, and no CRLF, is cut at its end)
    return io.StringIO(block.decode("utf-8", "surrogateescape"), newline="").readlines()


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
