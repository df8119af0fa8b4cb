"""The JSON reader: a file holding one array of objects, streamed element by element.

``source.type: json`` takes files whose top-level value is an array of JSON
objects (``[{"a": 1}, {"a": 2}]``), as many APIs and exports write them.
The file is decoded and parsed incrementally, one element at a time, with
the JSONL reader's decoder (`json_values`: the same values, numbers and text
as JSONL, so an integer beyond int64 or ``1e400`` is that row's
``int64_overflow`` / ``float32_overflow`` and an unpaired surrogate that
row's ``invalid_utf8``, never the end of the file); memory holds one element
(and a 64 KB read buffer), whatever the file's size; each file is one unit
of work.

Every element yields one `SourceRow` (``row``: the element's 1-based index
in the array) or a read dead letter: an element that is not an object, or
nested deeper than 64 levels, is ``json_array_invalid``, one holding bytes
that are not UTF-8 ``invalid_utf8``, and reading goes on; a file that is
not an array, or whose JSON breaks, yields one ``json_array_invalid`` for
the file or its unread rest. A UTF-8 byte-order mark is skipped; an empty
file is ``empty_file``.
"""

from __future__ import annotations

import codecs
import re
from typing import IO, Iterator

import fsspec

from .common import (READ_ERRORS, empty_file, open_range, read_dead_letter, read_error, resolve,
                     skip_utf8_bom)
from .json_values import DECODER, MAX_JSON_DEPTH, json_depth_exceeds, kind_of
from .rows import SourceRow

__all__ = ["iter_json_array"]

_BUFFER = 1 << 16
_SPACE = re.compile(r"[ \t\n\r]*")
# Bytes that are not UTF-8 are decoded as lone surrogates U+DC80..U+DCFF
# (surrogateescape), which valid UTF-8 can never give, so an element's text
# holding one held such bytes.
_NOT_UTF8 = re.compile("[\udc80-\udcff]")
# A parse error this close to the end of the text read so far may only mean
# the element goes on past it (a cut literal or escape), so more is read.
_EDGE = 16


class _BadJson(Exception):
    """The array's JSON breaks at element `index` (1-based); the rest is unread."""

    def __init__(self, index: int, message: str, reason: str = "json_array_invalid"):
        super().__init__(message)
        self.index, self.message, self.reason = index, message, reason


class _Text:
    """The decoded text of a byte stream, read in blocks on demand: `text`
    from `pos` on is what is not yet parsed."""

    def __init__(self, f: IO[bytes]):
        self._f = f
        self._decode = codecs.getincrementaldecoder("utf-8")("surrogateescape").decode
        self.text, self.pos, self.eof = "", 0, False
        self.dirty = False  # some text read so far held bytes that are not UTF-8

    def more(self) -> bool:
        """Reads one more block (as much again as the unparsed text holds, so
        a large element costs linear time); False at the end of the file."""
        if self.eof:
            return False
        data = self._f.read(max(_BUFFER, len(self.text) - self.pos))
        self.eof = not data
        chunk = self._decode(data, final=self.eof)
        self.dirty = self.dirty or _NOT_UTF8.search(chunk) is not None
        self.text = self.text[self.pos:] + chunk
        self.pos = 0
        return bool(chunk) or not self.eof

    def skip_space(self) -> str:
        """The next character that is not JSON whitespace ("" at the end),
        reading as needed; `pos` is left at it."""
        while True:
            self.pos = _SPACE.match(self.text, self.pos).end()
            if self.pos < len(self.text):
                return self.text[self.pos]
            if not self.more():
                return ""


def iter_json_array(path: str, *, fs: fsspec.AbstractFileSystem | None = None,
                    source: str | None = None) -> Iterator[SourceRow | dict]:
    """The rows and read dead letters of one JSON-array file (see the module)."""
    fs, fs_path, source = resolve(path, fs, source)
    index = 0
    try:
        # (read through once: it then leaves the page cache, `open_range`)
        with open_range(fs, fs_path, 0, None) as f:
            skip_utf8_bom(f)
            text = _Text(f)
            first = text.skip_space()
            if not first:
                yield empty_file(source)
                return
            if first != "[":
                yield read_dead_letter(
                    source, None, "json_array_invalid", _not_an_array(source, first), source,
                    rows=None)
                return
            text.pos += 1
            for index, item in enumerate(_elements(text, source), 1):
                yield item
    except _BadJson as exc:
        yield read_dead_letter(source, exc.index, exc.reason, exc.message, source, rows=None)
    except READ_ERRORS as exc:
        yield read_error(source, index + 1 if index else None, exc)


def _not_an_array(source: str, first: str) -> str:
    if first == "{":
        return (f"{source}: the file holds one JSON object, not an array of objects (each "
                "row is an object inside [...]; one object per line is source.type: jsonl)")
    return (f"{source}: the file must hold one JSON array of objects, but it starts with "
            f"{first!r} (one object per line is source.type: jsonl)")


def _elements(text: _Text, source: str) -> Iterator[SourceRow | dict]:
    """The rows and dead letters of the elements after the opening ``[``;
    raises _BadJson where the array breaks."""
    index = 0
    after = text.skip_space()
    while after != "]":
        index += 1
        value, raw, nests = _parse_element(text, source, index)
        yield _row(source, index, value, raw, nests)
        after = text.skip_space()
        if after == ",":
            text.pos += 1
            text.skip_space()
        elif after != "]":
            raise _broken(source, index, text, "expected ',' or ']' after it" if after
                          else "the file ends before the array's closing ']'")
    text.pos += 1
    if text.skip_space():
        raise _broken(source, index, text, "text after the array's closing ']'")


def _parse_element(text: _Text, source: str, index: int) -> tuple[object, str, bool]:
    """(value, its text when some text read held bytes that are not UTF-8
    else "", whether its text opens more than MAX_JSON_DEPTH brackets) of
    element `index`, which starts at `text.pos`; `pos` is left after it. A value is taken only once a character follows it, so that a
    number cut by the end of a block is never taken for a shorter one."""
    while True:
        try:
            value, end = DECODER.raw_decode(text.text, text.pos)
        except RecursionError:
            raise _BadJson(index, f"{source} element {index}: JSON nested too deeply to "
                           "parse; the rest of the file is not read") from None
        except ValueError as exc:
            cut = (getattr(exc, "pos", 0) >= len(text.text) - _EDGE
                   or str(exc).startswith("Unterminated string"))
            if cut and text.more():
                continue
            raise _broken(source, index - 1, text, _reason_of(exc)) from None
        if end < len(text.text) or text.eof or not text.more():
            raw = text.text[text.pos:end] if text.dirty else ""
            # Counting brackets first keeps the exact depth walk off the
            # common path, as in the JSONL reader.
            nests = (text.text.count("{", text.pos, end) + text.text.count("[", text.pos, end)
                     > MAX_JSON_DEPTH)
            text.pos = end
            return value, raw, nests


def _row(source: str, index: int, value, raw: str, nests: bool) -> SourceRow | dict:
    if raw and _NOT_UTF8.search(raw):
        bad = _NOT_UTF8.search(raw).group()
        return read_dead_letter(
            source, index, "invalid_utf8",
            f"{source} element {index}: not valid UTF-8 (byte 0x{ord(bad) - 0xDC00:02x})", None)
    if not isinstance(value, dict):
        return read_dead_letter(
            source, index, "json_array_invalid",
            f"{source} element {index}: a JSON {kind_of(value)} where each element must be an "
            "object", value if _small(value) else None)
    if nests and json_depth_exceeds(value, MAX_JSON_DEPTH):
        return read_dead_letter(
            source, index, "json_array_invalid",
            f"{source} element {index}: JSON nested deeper than {MAX_JSON_DEPTH} levels", None)
    return SourceRow(source, index, value)


def _broken(source: str, index: int, text: _Text, why: str) -> _BadJson:
    """The error for JSON that breaks after element `index`: one line saying
    where, and that the rest of the file is lost; ``invalid_utf8`` when bytes
    that are not UTF-8 lie where it breaks."""
    if text.dirty and _NOT_UTF8.search(text.text, max(text.pos - _EDGE, 0), text.pos + _EDGE):
        reason, why = "invalid_utf8", "bytes that are not UTF-8 outside a string"
    else:
        reason = "json_array_invalid"
    where = f"after element {index}" if index else "in its first element"
    return _BadJson(index + 1, f"{source}: invalid JSON {where}: {why}; the rest of the file "
                    "is not read", reason)


def _reason_of(exc: ValueError) -> str:
    # a JSONDecodeError's message without the line/column of our buffer,
    # which are not the file's
    return getattr(exc, "msg", None) or str(exc).splitlines()[0]


def _small(value) -> bool:
    return not isinstance(value, (list, dict)) or len(value) <= 16
