"""Which files a source reads: the one listing rule, for the build and for the config checks.

Paths go through fsspec (local paths, ``memory://``, ``gs://``, ``s3://`` ...).

Tables (`list_files`): `path` is a file (read whatever its name), a glob (its
matches whose own name does not start with ``.`` or ``_``: ``_SUCCESS``,
``.crc`` files) or a directory: every file below it, sorted, skipping every
name (file or folder) starting with ``.`` or ``_``, and, when the source
gives `extensions` (a config always does), taking only names that end in one
of them (case-insensitively), optionally followed by a compression suffix the
readers decompress (``rows.csv.gz`` is a ``.csv`` file).

Images (`list_images`): `path` is a directory; every file below it whose name
ends in one of `extensions` (case-insensitively), names starting with ``.``
skipped.

Names that are not valid UTF-8 (local disks only; Python holds their
undecodable bytes as lone surrogates): a table file is read like any other
(rows and dead letters show its name with those bytes as ``\\xNN``); an
image whose path (file or folder name) is not UTF-8 is not read but is an
``invalid_utf8`` dead letter, as its path and label are text columns of its
row.

Symbolic links, on local disks: links to directories are not followed (so
loops cannot hang listing; one inside the root is an alias of a directory
listed anyway); a link to a file inside the root is listed like a file; a
link leading outside the root, or to nothing, is not listed (image sources
report it as a dead letter: ``path_outside_root``, ``read_error``).
"""

from __future__ import annotations

import os
import posixpath
import re
from typing import Iterable, Iterator

import fsspec
from fsspec.implementations.local import LocalFileSystem

from ...schemas.dead_letters import dead_letter, printable_name
from ..urls import redact_url
from .common import display_name

__all__ = ["is_utf8", "list_files", "list_images", "normalized_extensions", "source_bytes"]


def _hidden(name: str) -> bool:
    return name.startswith((".", "_"))


def _image_hidden(name: str) -> bool:
    return name.startswith(".")


def is_utf8(name: str) -> bool:
    """Whether `name` (as the OS gave it) is valid UTF-8 text."""
    if name.isascii():
        return True
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def normalized_extensions(extensions: Iterable[str]) -> tuple[str, ...]:
    """`extensions` lower-cased with their leading dot, sorted; at least one."""
    out = tuple(sorted({e.lower() if e.startswith(".") else "." + e.lower()
                        for e in extensions}))
    if not out:
        raise ValueError("extensions: list at least one file extension, e.g. [.jpg, .png]")
    return out


def _table_name_matches(name: str, extensions: tuple[str, ...]) -> bool:
    """`name` ends in one of `extensions`, maybe followed by a compression suffix."""
    name = name.lower()
    if name.endswith(extensions):
        return True
    if fsspec.utils.infer_compression(name) is None:
        return False
    return name.rsplit(".", 1)[0].endswith(extensions)


def list_files(path: str, extensions: Iterable[str] | None = None
               ) -> tuple[fsspec.AbstractFileSystem, list[str]]:
    """The table files `path` names, sorted: the file itself, the matches of a
    glob, or the files below a directory with one of `extensions` (None: any
    name). In globs and directories, names starting with ``.``/``_`` are
    skipped. Returns the filesystem and its paths."""
    fs, root = fsspec.core.url_to_fs(path)
    if _has_magic(root):
        # fsspec globs, unlike shells, match hidden names: skip them as listing does.
        return fs, sorted(p for p in fs.glob(root)
                          if not _hidden(posixpath.basename(p)) and fs.isfile(p))
    if fs.isdir(root):
        wanted = None if extensions is None else normalized_extensions(extensions)
        return fs, sorted(fs_path for fs_path, rel in _walk(fs, root, _hidden)
                          if wanted is None or _table_name_matches(rel, wanted))
    if fs.exists(root):
        return fs, [root]
    return fs, []


def _has_magic(path: str) -> bool:
    return re.search(r"[*?\[]", path) is not None


def _walk(fs: fsspec.AbstractFileSystem, root: str, hidden) -> Iterator[tuple[str, str]]:
    """(fs_path, rel) of the regular files below `root`, no symlinks followed."""
    root = root.rstrip("/") or "/"
    if isinstance(fs, LocalFileSystem):
        for fs_path, rel, kind in _walk_local(root, hidden):
            if kind == "file":
                yield fs_path, rel
        return
    prefix = root.rstrip("/") + "/"
    for fs_path in fs.find(root):
        if not fs_path.startswith(prefix):
            continue
        rel = fs_path[len(prefix):]
        if not any(hidden(part) for part in rel.split("/")):
            yield fs_path, rel


def _walk_local(root: str, hidden) -> Iterator[tuple[str, str, str]]:
    """Walks a local directory without following directory links. Yields
    ``(path, rel, kind)``; kind is "file" (a file, or a link to a file inside
    the root), "outside" (a link leading out of the root) or "dangling" (a link
    to nothing). Directory links inside the root are skipped: they alias
    directories that are listed anyway (or loops)."""
    real_root = os.path.realpath(root)

    def inside(real: str) -> bool:
        return os.path.commonpath([real_root, real]) == real_root

    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        rel_dir = "" if rel_dir == "." else rel_dir.replace(os.sep, "/") + "/"
        kept = []
        for name in sorted(dirnames):
            if hidden(name):
                continue
            full = os.path.join(dirpath, name)
            if os.path.islink(full):
                if not inside(os.path.realpath(full)):
                    yield full, rel_dir + name, "outside"
                continue
            kept.append(name)
        dirnames[:] = kept
        for name in sorted(filenames):
            if hidden(name):
                continue
            full = os.path.join(dirpath, name)
            if os.path.islink(full):
                real = os.path.realpath(full)
                if not os.path.exists(real):
                    yield full, rel_dir + name, "dangling"
                    continue
                if not inside(real):
                    yield full, rel_dir + name, "outside"
                    continue
            yield full, rel_dir + name, "file"


def list_images(path: str, extensions: Iterable[str]
                ) -> tuple[fsspec.AbstractFileSystem, list[tuple[str, str]], list[dict]]:
    """Lists the image files below directory `path` with one of `extensions`.

    Returns the filesystem, sorted ``(fs_path, rel)`` pairs, and dead letters
    for links leading outside the root (``path_outside_root``), dangling links
    and a root that is not a directory (``read_error``)."""
    extensions = normalized_extensions(extensions)
    fs, root = fsspec.core.url_to_fs(path)
    if not fs.isdir(root):
        return fs, [], [dead_letter(
            source=redact_url(path), row=None, key=None, stage="read", reason="read_error",
            feature=None, message=f"source.path {redact_url(path)} is not a directory",
            input=redact_url(path))]
    listed, problems = [], []
    if isinstance(fs, LocalFileSystem):
        walked = _walk_local(root.rstrip("/") or "/", _image_hidden)
    else:
        walked = ((fs_path, rel, "file") for fs_path, rel in _walk(fs, root, _image_hidden))
    for fs_path, rel, kind in walked:
        if kind != "outside" and not rel.lower().endswith(extensions):
            continue
        if not is_utf8(rel):
            source = display_name(fs, fs_path)
            problems.append(dead_letter(
                source=source, row=None, key=None, stage="read", reason="invalid_utf8",
                feature=None, message=f"{source}: the file or folder name is not valid UTF-8 "
                "(shown with its undecodable bytes as \\xNN); the image is not read, as its "
                "path and label are text. Rename it", input={"path": printable_name(rel)}))
            continue
        if kind == "file":
            listed.append((fs_path, rel))
            continue
        source = display_name(fs, fs_path)
        if kind == "outside":
            problems.append(dead_letter(
                source=source, row=None, key=None, stage="read", reason="path_outside_root",
                feature=None, message=f"{source} is a symbolic link leading outside "
                f"source.path; it is not read", input={"path": rel}))
        else:
            problems.append(dead_letter(
                source=source, row=None, key=None, stage="read", reason="read_error",
                feature=None, message=f"{source} is a symbolic link to a file that does not "
                "exist", input={"path": rel}))
    listed.sort(key=lambda item: item[1])
    return fs, listed, problems


def source_bytes(path: str, type: str, extensions: Iterable[str] = (),
                 limit: int | None = None) -> int:
    """Bytes of the files a source reads: the table files at `path` (in a
    directory, those with one of `extensions`), or the image files below it
    with one of `extensions`. Counting stops once the total passes `limit`
    (callers comparing with a threshold need no more). Files that vanish
    while being counted count 0."""
    if type == "images":
        fs, listed, _ = list_images(path, extensions)
        paths = (fs_path for fs_path, _ in listed)
    else:
        fs, files = list_files(path, extensions or None)
        paths = iter(files)
    total = 0
    for fs_path in paths:
        try:
            total += fs.size(fs_path) or 0
        except FileNotFoundError:
            continue
        if limit is not None and total > limit:
            break
    return total
