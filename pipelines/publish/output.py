"""The output location: one fsspec filesystem and root, local path or object store.

`Output` wraps an output root (local path or fsspec URL) for everything
publishing does there: child paths and URLs, small whole-file reads and
writes (`transforms.files.write_atomic`: temporary name + rename + fsync
locally, one put on object stores), listings and removal. `local` says
whether the filesystem renames whole directories (only a local one does),
which decides how a build is committed. Credentials in URLs never appear in
messages (`redact_url`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

from ...transforms.files import write_atomic
from ...transforms.layout import LATEST_FILE, MANIFEST_FILE
from ...transforms.urls import redact_url

__all__ = ["Output", "latest_name", "load_json", "point_latest", "published_identity"]


class Output:
    """An output root: the fsspec filesystem, the root path in its terms, the
    URL the user gave (for building child URLs) and its redacted form."""

    def __init__(self, url: str):
        self.fs, self.root = fsspec.core.url_to_fs(url)
        self.root = self.root.rstrip("/") or "/"
        self.url = url.rstrip("/") or url
        self.display = redact_url(self.url)
        # Only a local filesystem gives us rename(2) of a whole directory.
        self.local = isinstance(self.fs, LocalFileSystem)

    def path(self, *parts: str) -> str:
        return "/".join([self.root.rstrip("/")] + list(parts)) if self.root != "/" else \
            "/" + "/".join(parts)

    def url_of(self, path: str) -> str:
        """The URL (local: the plain path) of a path inside this output."""
        if self.local:
            return path
        relative = path[len(self.root):].lstrip("/")
        return f"{self.url}/{relative}" if relative else self.url

    def display_of(self, path: str) -> str:
        return redact_url(self.url_of(path))

    def read_bytes(self, path: str) -> bytes | None:
        try:
            return self.fs.cat_file(path)
        except FileNotFoundError:
            return None

    def write_atomic(self, path: str, data: bytes, tmp: str | None = None) -> None:
        """Writes `path` whole: locally through `tmp` (default: a unique
        name beside it) and a rename; on object stores with one put."""
        write_atomic(self.fs, path, data, tmp=tmp)

    def remove(self, path: str, recursive: bool = False) -> None:
        try:
            if self.local and recursive and os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            elif self.local:
                os.unlink(path)
            elif self.fs.exists(path):
                self.fs.rm(path, recursive=recursive)
        except FileNotFoundError:
            pass

    def names(self, path: str) -> list[str]:
        """Base names of the entries directly under `path` ([] if absent)."""
        try:
            return sorted(entry.rstrip("/").rsplit("/", 1)[-1]
                          for entry in self.fs.ls(path, detail=False))
        except FileNotFoundError:
            return []

    def files(self, path: str) -> dict[str, int]:
        """relative path -> size of every file under `path`, recursively."""
        try:
            found = self.fs.find(path, detail=True)
        except FileNotFoundError:
            return {}
        prefix = path.rstrip("/") + "/"
        return {name[len(prefix):]: info.get("size") or 0 for name, info in found.items()
                if info.get("type") != "directory" and name.startswith(prefix)}

    def protocols(self) -> tuple[str, ...]:
        """The filesystem's protocol names (e.g. ``("memory",)``)."""
        protocol = self.fs.protocol
        return (protocol,) if isinstance(protocol, str) else tuple(protocol)


def published_identity(out: Output, version: str) -> str | None:
    """sha256 of the published manifest.json of `version`, or None if the
    version is not published. Commit compares it with the value seen at
    the start of the build to detect a concurrent publisher."""
    data = out.read_bytes(out.path(version, MANIFEST_FILE))
    return hashlib.sha256(data).hexdigest() if data is not None else None


def latest_name(out: Output) -> str | None:
    """The version ``<output>/LATEST`` names, or None if there is none."""
    data = out.read_bytes(out.path(LATEST_FILE))
    if data is None:
        return None
    return data.decode("utf-8", "replace").strip() or None


def point_latest(out: Output, version: str, tmp: str | None = None) -> None:
    """Replaces ``<output>/LATEST`` by `version` (one atomic write)."""
    out.write_atomic(out.path(LATEST_FILE), f"{version}\n".encode(), tmp=tmp)


def load_json(data: bytes | None) -> Any:
    """Parsed JSON, or None for missing or unparsable bytes (a record a
    killed writer may have left half-written elsewhere than locally)."""
    if data is None:
        return None
    try:
        return json.loads(data)
    except ValueError:
        return None
