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

from dataclasses import dataclass, field
from typing import Any

import fsspec

from ...schemas.errors import ConfigError
from ...transforms.layout import LATEST_FILE, MANIFEST_FILE
from ...transforms.urls import redact_url
from . import manifest as manifest_lib
from .file_checks import Problem
from .versions import check_version_name

__all__ = ["DatasetNotFoundError", "Located", "MAX_LATEST_BYTES", "MAX_MANIFEST_BYTES",
           "list_version", "load_version_manifest", "locate_version"]

MAX_LATEST_BYTES = 4096  # a version name is at most 200 characters
# A manifest lists every shard in ~200 bytes: 256 MiB is over a million shards.
MAX_MANIFEST_BYTES = 256 << 20
_MAX_DEPTH = 16  # directories inside a version (dead_letter/ is the only one)


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
    """The bytes of a small file; `ValueError` when it holds more than `limit`."""
    with fs.open(path, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"is larger than {limit} bytes")
    return data


def locate_version(path: str) -> Located:
    """The version a dataset path stands for: `path` itself when it holds
    manifest.json (or is no output root), else the version its LATEST names.
    Raises DatasetNotFoundError when `path` does not exist; ValueError or
    ImportError for a URL whose filesystem is unknown or not installed."""
    fs, root = fsspec.core.url_to_fs(path)
    root = root.rstrip("/") or "/"
    base_url = path.rstrip("/") or path
    if not fs.exists(root):
        raise DatasetNotFoundError(f"{redact_url(path)} does not exist")
    located = Located(fs, root, base_url)
    if fs.exists(f"{root}/{MANIFEST_FILE}") or not fs.exists(f"{root}/{LATEST_FILE}"):
        return located
    try:
        text = read_limited(fs, f"{root}/{LATEST_FILE}", MAX_LATEST_BYTES)
        version = text.decode("utf-8", "replace").strip()
        check_version_name(version)
    except (OSError, ValueError) as error:
        located.problems.append(Problem(LATEST_FILE, f"cannot be used: {error}", code="latest"))
        return located
    except ConfigError as error:
        located.problems.append(Problem(LATEST_FILE, str(error), code="latest"))
        return located
    located.latest = version
    version_dir = f"{root}/{version}"
    if _is_link(fs, version_dir):
        located.problems.append(Problem(LATEST_FILE, f"names version {version!r}, which is a "
                                        "symbolic link, not a version directory of this root",
                                        code="latest"))
    elif not fs.isdir(version_dir):
        located.problems.append(Problem(LATEST_FILE, f"names version {version!r}, which does "
                                        "not exist", code="latest"))
    else:
        located.version_dir, located.url = version_dir, f"{base_url}/{version}"
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
