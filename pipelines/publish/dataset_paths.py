"""Which files of a published version a reader opens: the path rules `verify` and `inspect` share.

Every path a reader takes from the dataset itself stays inside the version
directory: the version `LATEST` names must be a safe version name (no ``/``,
``..``, leading ``.``) of a real directory of the root, not a link out of it;
`manifest.load_manifest` admits only shard file names and relative
dead-letter paths inside the version; and nothing is read through a symbolic
link inside the version, which a published version never holds (a link is
reported, never followed, so a version cannot make a reader hash or print a
file elsewhere). Small files (`LATEST`, `manifest.json`) are read with a size
limit. Damage is reported as `file_checks.Problem`s, never raised.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import fsspec
import numpy as np

from ...schemas.errors import ConfigError
from ...transforms.layout import LATEST_FILE, MANIFEST_FILE
from ...transforms.urls import redact_url
from . import manifest as manifest_lib
from .file_checks import Problem
from .versions import check_version_name

__all__ = ["DatasetNotFoundError", "Located", "MAX_JSON_DEPTH", "MAX_LATEST_BYTES",
           "MAX_MANIFEST_BYTES", "list_version", "load_version_manifest", "locate_root",
           "locate_version", "parse_json", "read_limited", "version_in_root"]

MAX_LATEST_BYTES = 4096  # a version name is at most 200 characters
# A manifest lists every shard in ~200 bytes: 256 MiB is over a million shards.
MAX_MANIFEST_BYTES = 256 << 20
_MAX_DEPTH = 16  # directories inside a version (dead_letter/ is the only one)
# recordforge's own JSON files nest a few levels (stats.json: 6); a file
# nested deeper was not written by it, and is refused before it is parsed.
MAX_JSON_DEPTH = 64
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_OPENERS = np.frombuffer(b"[{", dtype=np.uint8)
_CLOSERS = np.frombuffer(b"]}", dtype=np.uint8)


class DatasetNotFoundError(Exception):
    """The path given does not exist (a usage error, exit 2)."""


@dataclass
class Located:
    """Where a dataset path leads. fs: its filesystem; version_dir: the
    version directory's path on fs; url: the same as a URL; latest: the
    version LATEST names (None when the path was a version directory);
    problems: why the version cannot be read (LATEST damaged, or naming a
    version that is missing or a link)."""

    fs: Any
    version_dir: str
    url: str
    latest: str | None = None
    problems: list[Problem] = field(default_factory=list)


def _is_link(fs, path: str) -> bool:
    try:
        return bool(fs.info(path).get("islink"))
    except (OSError, ValueError):
        return False


def read_limited(fs, path: str, limit: int) -> bytes:
    """The bytes of a small file a dataset holds; `ValueError` saying why
    not when it is a symbolic link, not a regular file (a FIFO would block
    the reader, a device never end) or larger than `limit` bytes, each
    checked before the file is opened; `OSError` when it cannot be read."""
    info = fs.info(path)
    if info.get("islink"):
        raise ValueError("is a symbolic link; a published version holds only regular files")
    if info.get("type") != "file":
        raise ValueError(f"is not a regular file (a {info.get('type') or 'special file'})")
    if (info.get("size") or 0) > limit:
        raise ValueError(f"is larger than {limit} bytes")
    with fs.open(path, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"is larger than {limit} bytes")
    return data


def parse_json(data: bytes, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """JSON a dataset holds, parsed only when its arrays and objects nest at
    most `max_depth` deep (measured first: the parser's own recursion is no
    bound to rely on) and it holds no NaN or Infinity (which recordforge
    never writes); `ValueError` saying why not."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"is not UTF-8 text ({error.reason} at byte {error.start})") from None
    depth = _json_depth(text)
    if depth > max_depth:
        raise ValueError(f"is JSON nested {depth} levels deep; at most {max_depth} are read")
    try:
        return json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise ValueError("is JSON nested too deeply to parse") from None
    except ValueError as error:
        raise ValueError(f"is not valid JSON ({error})") from None


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def _json_depth(text: str) -> int:
    """How deep the arrays and objects of JSON text nest, strings left out."""
    bare = _JSON_STRING.sub("", text).encode("utf-8")
    marks = np.frombuffer(bare, dtype=np.uint8)
    steps = (np.isin(marks, _OPENERS).astype(np.int64) - np.isin(marks, _CLOSERS))
    return int(np.cumsum(steps).max(initial=0))


def locate_root(path: str) -> Located:
    """`path` itself, taken as it is (an output root, or a version
    directory). Raises DatasetNotFoundError when it does not exist;
    ValueError or ImportError for a URL whose filesystem is unknown or not
    installed."""
    fs, root = fsspec.core.url_to_fs(path)
    root = root.rstrip("/") or "/"
    if not fs.exists(root):
        raise DatasetNotFoundError(f"{redact_url(path)} does not exist")
    return Located(fs, root, path.rstrip("/") or path)


def locate_version(path: str) -> Located:
    """The version a dataset path stands for: `path` itself when it holds
    manifest.json (or is no output root), else the version its LATEST names.
    Raises DatasetNotFoundError when `path` does not exist; ValueError or
    ImportError for a URL whose filesystem is unknown or not installed."""
    located = locate_root(path)
    fs, root = located.fs, located.version_dir
    if fs.exists(f"{root}/{MANIFEST_FILE}") or not fs.exists(f"{root}/{LATEST_FILE}"):
        return located
    try:
        text = read_limited(fs, f"{root}/{LATEST_FILE}", MAX_LATEST_BYTES)
    except (OSError, ValueError) as error:
        located.problems.append(Problem(LATEST_FILE, f"cannot be used: {error}", code="latest"))
        return located
    located.latest = text.decode("utf-8", "replace").strip()
    return version_in_root(located, located.latest)


def version_in_root(located: Located, version: str) -> Located:
    """`located` (an output root, as `locate_version` found it) led on to
    `version`: a safe version name (no ``/``, ``..``, leading ``.``) of a
    real directory of the root, not a link out of it. Otherwise a problem
    says why and `located` keeps pointing at the root. Used for the version
    LATEST names and for a version named otherwise (a pinned baseline)."""
    fs, root = located.fs, located.version_dir
    # a problem with LATEST's version is LATEST's, as verify reports it
    file, named = ((LATEST_FILE, f"names version {version!r}, which ")
                   if version == located.latest else (f"version {version!r}", ""))
    try:
        check_version_name(version)
    except ConfigError as error:
        located.problems.append(Problem(file, str(error), code="latest"))
        return located
    version_dir = f"{root}/{version}"
    if _is_link(fs, version_dir):
        located.problems.append(Problem(file, f"{named}is a symbolic link, not a version "
                                        "directory of this root", code="latest"))
    elif not fs.isdir(version_dir):
        located.problems.append(Problem(file, f"{named}does not exist", code="latest"))
    else:
        located.version_dir, located.url = version_dir, f"{located.url}/{version}"
    return located


def load_version_manifest(located: Located) -> tuple[dict | None, Problem | None]:
    """(the checked manifest, None) or (None, the reason it cannot be used):
    missing (the version is not published), a link, too large, unreadable,
    or malformed (`manifest.ManifestError`, which names the field)."""
    fs, path = located.fs, f"{located.version_dir}/{MANIFEST_FILE}"
    if not fs.exists(path):
        return None, Problem(MANIFEST_FILE, "missing: the version is not published (a build "
                             "still running or interrupted, a version being replaced) or this "
                             "is not a recordforge dataset", code="manifest")
    if _is_link(fs, path):
        return None, Problem(MANIFEST_FILE, "is a symbolic link; a published version holds "
                             "only regular files", code="link")
    try:
        data = read_limited(fs, path, MAX_MANIFEST_BYTES)
    except (OSError, ValueError) as error:
        return None, Problem(MANIFEST_FILE, f"cannot be read: {error}", code="manifest")
    try:
        return manifest_lib.load_manifest(data), None
    except manifest_lib.ManifestError as error:
        return None, Problem(MANIFEST_FILE, str(error), code="manifest")


def list_version(fs, root: str) -> tuple[set[str], set[str]]:
    """(files, links): the regular files under a version directory and the
    symbolic links found there (neither followed nor listed as files), as
    paths relative to it."""
    files: set[str] = set()
    links: set[str] = set()
    prefix = root.rstrip("/") + "/"
    pending = [(root, 0)]
    while pending:
        directory, depth = pending.pop()
        for info in fs.ls(directory, detail=True):
            name = info["name"].rstrip("/")
            if not name.startswith(prefix):
                continue
            relative = name[len(prefix):]
            if info.get("islink"):
                links.add(relative)
            elif info.get("type") == "directory":
                if depth + 1 < _MAX_DEPTH:
                    pending.append((name, depth + 1))
                else:
                    files.add(relative)  # reported as unexpected, not walked
            else:
                files.add(relative)
    return files, links
