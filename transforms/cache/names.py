"""The build cache's names: which input file and unit a piece holds, and which files are whole.

A piece holds what reading, checking and encoding one reading unit of one
input file gave (`pieces`): a summary and a sorted run per split. Their
names say which:

    <file key>.<unit index:05d>-of-<unit count:05d>.piece
    <file key>.<unit index:05d>-of-<unit count:05d>.s<split index>.run
    <file key>.<unit index:05d>-of-<unit count:05d>.s<split index>.<n>.run

The file key is a digest of the encoding key (everything in the config and
the package that changes what a row becomes, `pipelines.cache`) and the
input file's identity (path, size and content token,
`transforms.readers.inputs.identity`): a file holding other bytes, or a
config that encodes differently, gets new keys, and its old pieces are
never read again; a file rewritten with the same bytes keeps its key. A
file is reusable when every unit of it has a piece.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Iterable, Mapping

from ..readers.inputs import identity

__all__ = ["PIECE_SUFFIX", "file_key", "key_of", "parse_piece_name", "piece_name",
           "whole_files"]

PIECE_SUFFIX = ".piece"
_KEY_HEX = 40
_PIECE_NAME = re.compile(r"^([0-9a-f]{40})\.(\d{5,})-of-(\d{5,})\.piece$")
_CACHE_FILE = re.compile(r"^([0-9a-f]{40})\.\d{5,}-of-\d{5,}\.(?:piece|s\d+(?:\.\d+)?\.run)$")


def file_key(encoding_key: str, fingerprint: Mapping) -> str:
    """The key of an input file's pieces under one encoding key, from the
    file's `identity` (never its modification time)."""
    text = json.dumps(identity(fingerprint), sort_keys=True, ensure_ascii=True)
    return hashlib.sha256(f"{encoding_key}\n{text}".encode("ascii")).hexdigest()[:_KEY_HEX]


def piece_name(key: str, index: int, count: int) -> str:
    """``<file key>.<index:05d>-of-<count:05d>.piece``."""
    if not 0 <= index < count:
        raise ValueError(f"unit {index} of {count}")
    return f"{key}.{index:05d}-of-{count:05d}{PIECE_SUFFIX}"


def parse_piece_name(name: str) -> tuple[str, int, int] | None:
    """(file key, unit index, unit count) of a piece's file name, or None for
    any other name (temporary files, foreign files)."""
    match = _PIECE_NAME.match(name)
    if match is None:
        return None
    index, count = int(match.group(2)), int(match.group(3))
    if index >= count:
        return None
    return match.group(1), index, count


def key_of(name: str) -> str | None:
    """The file key of a piece's summary or run file, None for other names
    (temporary files of unfinished writes among them)."""
    match = _CACHE_FILE.match(name)
    return match.group(1) if match else None


def whole_files(names: Iterable[str]) -> dict[str, int]:
    """file key -> unit count, for the files every unit of which has a piece
    among `names` (a file whose pieces disagree on the count is not whole)."""
    units: dict[str, set[int]] = {}
    counts: dict[str, set[int]] = {}
    for name in names:
        parsed = parse_piece_name(name)
        if parsed is None:
            continue
        key, index, count = parsed
        units.setdefault(key, set()).add(index)
        counts.setdefault(key, set()).add(count)
    return {key: next(iter(counts[key])) for key, indices in units.items()
            if len(counts[key]) == 1 and len(indices) == next(iter(counts[key]))}
