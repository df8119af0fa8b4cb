"""What a build reads, fingerprinted: the manifest's ``inputs``, and whether they changed.

`source_inputs` lists a source by the build's own listing rule (`listing`)
and fingerprints every file it reads (the labels table of an image source
too); `changed_inputs` compares two of them. The build takes them before
its pipeline runs and again after it, and fails when they differ: a file
rewritten, truncated, added or removed while the build read would
otherwise publish a mix of old and new data. The manifest keeps the first:

    "inputs": {"files": [{"path": "/data/part-0.csv", "size": 1048576,
                          "mtime_ns": 1764100000123456789}, ...],
               "skipped": {"hidden": 1, "extension": 2}}

Each file entry has ``path`` (as rows and dead letters name the file: the
local path, names that are not UTF-8 with their bytes as ``\\xNN``, or the
URL without credentials), ``size`` in bytes, and one version token: local
files ``mtime_ns`` (nanoseconds since the epoch), object stores what they
give, ``generation`` (GCS), else ``etag`` (S3 ...), else ``mtime`` (text).
Entries are sorted by path, so equal inputs give equal entries: a later
build can compare them to tell unchanged inputs. ``skipped`` counts what
the listing left out, by reason (`listing.Listing`).
"""

from __future__ import annotations

import os
from typing import Any, Iterable, Mapping

import fsspec
from fsspec.implementations.local import LocalFileSystem

from .common import display_name
from .listing import list_image_files, list_tables

__all__ = ["changed_inputs", "fingerprint", "source_inputs"]

# Version tokens of object stores, in order of preference (fsspec `info` keys).
_TOKENS = ("generation", "etag", "ETag", "mtime", "LastModified", "last_modified", "updated")


def fingerprint(fs: fsspec.AbstractFileSystem, fs_path: str) -> dict:
    """``{"path", "size", <version token>}`` of one file (see the module);
    ``{"path", "missing": true}`` when it does not exist."""
    path = display_name(fs, fs_path)
    try:
        if isinstance(fs, LocalFileSystem):
            stat = os.stat(fs_path)
            return {"path": path, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
        info = fs.info(fs_path)
    except FileNotFoundError:
        return {"path": path, "missing": True}
    entry: dict[str, Any] = {"path": path, "size": int(info.get("size") or 0)}
    for token in _TOKENS:
        value = info.get(token)
        if value is not None:
            name = {"ETag": "etag", "LastModified": "mtime", "last_modified": "mtime",
                    "updated": "mtime"}.get(token, token)
            entry[name] = value if isinstance(value, (int, float)) else str(value)
            break
    return entry


def source_inputs(type: str, path: str, extensions: Iterable[str] = (),
                  labels: str | None = None) -> dict:
    """The fingerprints of every file a source of `type` at `path` reads
    (listed as the build lists them), plus an image source's labels table,
    and what the listing skipped."""
    if type == "images":
        listing = list_image_files(path, extensions)
        paths = [fs_path for fs_path, _ in listing.files]
    else:
        listing = list_tables(path, tuple(extensions) or None)
        paths = list(listing.files)
    files = [fingerprint(listing.fs, fs_path) for fs_path in paths]
    if type == "images" and labels not in (None, "directory"):
        labels_fs, labels_path = fsspec.core.url_to_fs(labels)
        files.append(fingerprint(labels_fs, labels_path))
    files.sort(key=lambda entry: entry["path"])
    return {"files": files, "skipped": dict(sorted(listing.skipped.items()))}


def changed_inputs(before: Mapping, after: Mapping, limit: int = 10) -> list[str]:
    """What differs between two `source_inputs`, one line per file (at most
    `limit`, then a count of the rest); empty when nothing changed."""
    old = {entry["path"]: entry for entry in before.get("files", [])}
    new = {entry["path"]: entry for entry in after.get("files", [])}
    lines = []
    for path in sorted(old.keys() | new.keys()):
        was, now = old.get(path), new.get(path)
        if was == now:
            continue
        if was is None:
            lines.append(f"{path} appeared")
        elif now is None or now.get("missing"):
            lines.append(f"{path} vanished")
        elif was.get("size") != now.get("size"):
            lines.append(f"{path} changed size from {was.get('size')} to {now.get('size')} bytes")
        else:
            lines.append(f"{path} was modified")
    if len(lines) > limit:
        lines = lines[:limit] + [f"... and {len(lines) - limit} more"]
    return lines
