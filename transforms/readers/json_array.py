"""The JSON reader: a file holding one array of objects, streamed element by element.

``source.type: json`` takes files whose top-level value is an array of JSON
objects (``[{"a": 1}, {"a": 2}]``), as many APIs and exports write them.
The file is parsed incrementally (ijson, its C backend where installed), so
memory holds one element at a time whatever the file's size; each file is
one unit of work. Values are as `json.loads` gives them (integers stay int,
other numbers are float, nested objects dicts, arrays lists).

Every element yields one `SourceRow` (``row``: the element's 1-based index
in the array) or a read dead letter: an element that is not an object, or
nested deeper than 64 levels, is ``json_array_invalid`` and reading goes on;
a file that is not an array, or whose JSON breaks, yields one
``json_array_invalid`` for the file or its unread rest. A UTF-8 byte-order
mark is skipped; an empty file is ``empty_file``.
"""

from __future__ import annotations

from typing import Iterator

import fsspec

from .common import READ_ERRORS, empty_file, open_file, read_dead_letter, read_error, resolve
# (the JSONL reader's depth rule, so both JSON sources refuse the same values)
from .jsonl import _MAX_JSON_DEPTH as MAX_JSON_DEPTH, _json_depth_exceeds as json_depth_exceeds
from .rows import SourceRow

__all__ = ["iter_json_array"]

_BUFFER = 1 << 16


def _first_byte(f) -> bytes:
    """Skips a byte-order mark and whitespace; the first byte of the value
    (b"" at the end of the file). Leaves `f` at that byte."""
    head = f.read(3)
    offset = 3 if head == b"\xef\xbb\xbf" else 0
    f.seek(offset)
    while True:
        chunk = f.read(1)
        if chunk not in (b" ", b"\t", b"\r", b"\n"):
            if chunk:
                f.seek(offset)
            return chunk
        offset += 1


def iter_json_array(path: str, *, fs: fsspec.AbstractFileSystem | None = None,
                    source: str | None = None) -> Iterator[SourceRow | dict]:
    """The rows and read dead letters of one JSON-array file (see the module)."""
    import ijson  # imported here: only JSON sources need it

    fs, fs_path, source = resolve(path, fs, source)
    index = 0
    try:
        with open_file(fs, fs_path) as f:
            first = _first_byte(f)
            if not first:
                yield empty_file(source)
                return
            if first != b"[":
                yield read_dead_letter(
                    source, None, "json_array_invalid",
                    f"{source}: the file must hold one JSON array of objects, but it starts "
                    f"with {first.decode('latin-1')!r} (one object per line is source.type: "
                    "jsonl)", source)
                return
            try:
                for value in ijson.items(f, "item", use_float=True, buf_size=_BUFFER):
                    index += 1
                    if not isinstance(value, dict):
                        yield read_dead_letter(
                            source, index, "json_array_invalid",
                            f"{source} element {index}: a JSON {_kind(value)} where each "
                            "element must be an object", value if _small(value) else None)
                    elif json_depth_exceeds(value, MAX_JSON_DEPTH):
                        yield read_dead_letter(
                            source, index, "json_array_invalid",
                            f"{source} element {index}: JSON nested deeper than "
                            f"{MAX_JSON_DEPTH} levels", None)
                    else:
                        yield SourceRow(source, index, value)
            except ijson.JSONError as exc:
                yield read_dead_letter(
                    source, index + 1, "json_array_invalid",
                    f"{source}: invalid JSON after element {index}: "
                    f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}; the rest of the "
                    "file is not read", source)
    except UnicodeDecodeError as exc:
        yield read_dead_letter(source, index + 1, "invalid_utf8",
                               f"{source}: not valid UTF-8 after element {index} ({exc.reason}); "
                               "the rest of the file is not read", source)
    except READ_ERRORS as exc:
        yield read_error(source, index + 1 if index else None, exc)


def _kind(value) -> str:
    return {list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number")


def _small(value) -> bool:
    return not isinstance(value, (list, dict)) or len(value) <= 16
