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
link leading outside the root (for a glob: outside the folder the pattern
starts in), or to nothing, is not read but is a dead letter
(``path_outside_root``, ``read_error``), for tables and images alike.

What a listing leaves out is counted (`Listing.skipped`): hidden names,
other extensions, and, on local disks, files that are not regular files
(``special_file``: a FIFO, socket or device, or a link to one), which are
never opened: opening a FIFO blocks until something writes to it, and a
device can be read forever.
"""

from __future__ import annotations

import os
import posixpath
import re
import stat
from typing import Iterable, Iterator, NamedTuple

import fsspec
from fsspec.implementations.local import LocalFileSystem

from ...schemas.dead_letters import dead_letter, printable_name
from ..urls import redact_url
from .common import display_name

__all__ = ["Listing", "is_utf8", "list_files", "list_image_files", "list_images", "list_tables",
           "normalized_extensions"]


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


class Listing(NamedTuple):
    """What a source's listing found.

    fs: the filesystem; files: the files to read, sorted (tables: fs paths;
    images: ``(fs_path, rel)`` pairs); problems: dead letters for what
    cannot be read (links leading outside the root or to nothing; image
    names that are not UTF-8); skipped: files (and folders) left out by the
    rule, by reason: ``hidden`` (a name starting with ``.``, or ``_`` for
    tables; a hidden folder counts once), ``extension`` (another
    extension) and ``special_file`` (not a regular file: never opened)."""

    fs: fsspec.AbstractFileSystem
    files: list
    problems: list[dict]
    skipped: dict[str, int]


def list_files(path: str, extensions: Iterable[str] | None = None
               ) -> tuple[fsspec.AbstractFileSystem, list[str]]:
    """The table files `path` names, sorted, and their filesystem (see
    `list_tables`, whose problems and skipped counts this leaves out)."""
    listing = list_tables(path, extensions)
    return listing.fs, listing.files


def list_tables(path: str, extensions: Iterable[str] | None = None) -> Listing:
    """The table files `path` names: the file itself, the matches of a glob,
    or the files below a directory with one of `extensions` (None: any
    name). In globs and directories, names starting with ``.``/``_`` are
    skipped, and a symbolic link leading outside the directory (for a glob:
    outside the folder its pattern starts in) or to nothing is a dead
    letter (``path_outside_root``, ``read_error``), as for images."""
    fs, root = fsspec.core.url_to_fs(path)
    skipped: dict[str, int] = {}
    problems: list[dict] = []
    if _has_magic(root):
        files = []
        base = _glob_base(root)
        for match in sorted(fs.glob(root)):
            if _hidden(posixpath.basename(match)):
                _count(skipped, "hidden")
                continue
            if isinstance(fs, LocalFileSystem):
                # (a match may lead out through a link to a folder, too)
                kind = _link_kind(match, os.path.realpath(base))
                if kind != "file":
                    problems.append(_link_problem(fs, match, match, kind, None))
                    continue
                if _special(match):
                    _count(skipped, "special_file")
                    continue
            if fs.isfile(match):
                files.append(match)
        return Listing(fs, files, problems, skipped)
    if fs.isdir(root):
        wanted = None if extensions is None else normalized_extensions(extensions)
        files = []
        for fs_path, rel, kind in _walk(fs, root, _hidden):
            if kind == "hidden":
                _count(skipped, "hidden")
            elif kind == "outside" or (wanted is None or _table_name_matches(rel, wanted)):
                if kind == "file":
                    files.append(fs_path)
                elif kind == "special":
                    _count(skipped, "special_file")
                else:
                    problems.append(_link_problem(fs, fs_path, rel, kind, None))
            elif kind in ("file", "special"):
                _count(skipped, "extension")
        return Listing(fs, sorted(files), problems, skipped)
    if isinstance(fs, LocalFileSystem) and _special(root):
        return Listing(fs, [], [], {"special_file": 1})
    if fs.exists(root):
        return Listing(fs, [root], [], {})
    return Listing(fs, [], [], {})


def _special(path: str) -> bool:
    """Whether local `path` (followed if a link) exists but is not a regular
    file or a directory: a FIFO, socket or device. `stat` opens nothing."""
    try:
        mode = os.stat(path).st_mode
    except OSError:  # gone or unreadable: the reader reports it by name
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def _count(skipped: dict[str, int], reason: str) -> None:
    skipped[reason] = skipped.get(reason, 0) + 1


def _glob_base(pattern: str) -> str:
    """The folder a glob starts in: its components before the first magic one."""
    parts = pattern.split("/")
    for index, part in enumerate(parts):
        if _has_magic(part):
            return "/".join(parts[:index]) or "/"
    return posixpath.dirname(pattern)


def _link_kind(path: str, real_root: str) -> str:
    """"file" for a link to a file inside `real_root`, else "outside" or "dangling"."""
    real = os.path.realpath(path)
    if not os.path.exists(real):
        return "dangling"
    return "file" if os.path.commonpath([real_root, real]) == real_root else "outside"


def _link_problem(fs, fs_path: str, rel: str, kind: str, rows: int | None) -> dict:
    """The dead letter of a link leading outside the root ("outside") or to
    nothing ("dangling"). `rows`: the rows it stands for (1 for an image,
    None for a table file, whose rows are unknown)."""
    source = display_name(fs, fs_path)
    if kind == "outside":
        return dead_letter(
            source=source, row=None, key=None, stage="read", reason="path_outside_root",
            feature=None, message=f"{source} is a symbolic link leading outside "
            f"source.path; it is not read", input={"path": printable_name(rel)}, rows=rows)
    return dead_letter(
        source=source, row=None, key=None, stage="read", reason="read_error",
        feature=None, message=f"{source} is a symbolic link to a file that does not "
        "exist", input={"path": printable_name(rel)}, rows=rows)


def _has_magic(path: str) -> bool:
    return re.search(r"[*?\[]", path) is not None


def _walk(fs: fsspec.AbstractFileSystem, root: str, hidden) -> Iterator[tuple[str, str, str]]:
    """``(fs_path, rel, kind)`` below `root`, no symlinks followed; kinds as
    `_walk_local`'s ("file", "outside", "dangling", "hidden")."""
    root = root.rstrip("/") or "/"
    if isinstance(fs, LocalFileSystem):
        yield from _walk_local(root, hidden)
        return
    prefix = root.rstrip("/") + "/"
    hidden_seen = set()
    for fs_path in fs.find(root):
        if not fs_path.startswith(prefix):
            continue
        rel = fs_path[len(prefix):]
        parts = rel.split("/")
        first_hidden = next((i for i, part in enumerate(parts) if hidden(part)), None)
        if first_hidden is None:
            yield fs_path, rel, "file"
            continue
        hidden_prefix = "/".join(parts[:first_hidden + 1])
        if hidden_prefix not in hidden_seen:  # a hidden folder counts once
            hidden_seen.add(hidden_prefix)
            yield prefix + hidden_prefix, hidden_prefix, "hidden"


def _walk_local(root: str, hidden) -> Iterator[tuple[str, str, str]]:
    """Walks a local directory without following directory links. Yields
    ``(path, rel, kind)``; kind is "file" (a file, or a link to a file inside
    the root), "special" (a FIFO, socket or device, or a link inside the root
    to one), "outside" (a link leading out of the root), "dangling" (a link
    to nothing) or "hidden" (a file or folder skipped for its name; a hidden
    folder is not walked). Directory links inside the root are skipped:
    they alias directories that are listed anyway (or loops). The order is
    `os.walk`'s, top-down, each folder's names sorted; an unreadable folder
    is skipped, as `os.walk` skips it.

    Only links cost a system call: whether an entry is a link, a folder or
    a regular file comes from the directory listing itself (`os.scandir`),
    not from an lstat and a stat per file (an image folder of 3,000 files
    is listed four times by a build)."""
    real_root = os.path.realpath(root)

    def inside(real: str) -> bool:
        return os.path.commonpath([real_root, real]) == real_root

    pending = [(root, "")]
    while pending:
        dirpath, rel_dir = pending.pop()
        try:
            with os.scandir(dirpath) as listing:
                entries = sorted(listing, key=lambda entry: entry.name)
        except OSError:
            continue
        folders, files = [], []
        for entry in entries:
            (folders if _is_dir(entry) else files).append(entry)
        kept = []
        for entry in folders:
            if hidden(entry.name):
                yield entry.path, rel_dir + entry.name, "hidden"
                continue
            if entry.is_symlink():
                if not inside(os.path.realpath(entry.path)):
                    yield entry.path, rel_dir + entry.name, "outside"
                continue
            kept.append((entry.path, rel_dir + entry.name + "/"))
        pending.extend(reversed(kept))
        for entry in files:
            full = entry.path
            if hidden(entry.name):
                yield full, rel_dir + entry.name, "hidden"
                continue
            if entry.is_symlink():
                real = os.path.realpath(full)
                if not os.path.exists(real):
                    yield full, rel_dir + entry.name, "dangling"
                    continue
                if not inside(real):
                    yield full, rel_dir + entry.name, "outside"
                    continue
                yield full, rel_dir + entry.name, "special" if _special(full) else "file"
                continue
            yield full, rel_dir + entry.name, "file" if _is_regular(entry) else "special"


def _is_dir(entry: os.DirEntry) -> bool:
    """Whether `entry` is a folder or a link to one (`os.walk`'s rule)."""
    try:
        return entry.is_dir()
    except OSError:
        return False


def _is_regular(entry: os.DirEntry) -> bool:
    """Whether `entry`, not a link, is a regular file (not a FIFO, socket or
    device). An entry gone or unreadable counts as a file: the reader
    reports it by name (as `_special` does)."""
    try:
        return entry.is_file(follow_symlinks=False)
    except OSError:
        return True


def list_images(path: str, extensions: Iterable[str]
                ) -> tuple[fsspec.AbstractFileSystem, list[tuple[str, str]], list[dict]]:
    """Lists the image files below directory `path` with one of `extensions`:
    the filesystem, sorted ``(fs_path, rel)`` pairs and dead letters (see
    `list_image_files`, whose skipped counts this leaves out)."""
    listing = list_image_files(path, extensions)
    return listing.fs, listing.files, listing.problems


def list_image_files(path: str, extensions: Iterable[str]) -> Listing:
    """Lists the image files below directory `path` with one of `extensions`.

    Files are sorted ``(fs_path, rel)`` pairs; problems are dead letters for
    links leading outside the root (``path_outside_root``), dangling links,
    a root that is not a directory (``read_error``) and paths that are not
    UTF-8 (``invalid_utf8``); a FIFO, socket or device is counted as
    skipped (``special_file``), never opened."""
    extensions = normalized_extensions(extensions)
    fs, root = fsspec.core.url_to_fs(path)
    if not fs.isdir(root):
        return Listing(fs, [], [dead_letter(
            source=redact_url(path), row=None, key=None, stage="read", reason="read_error",
            feature=None, message=f"source.path {redact_url(path)} is not a directory",
            input=redact_url(path))], {})
    listed, problems, skipped = [], [], {}
    for fs_path, rel, kind in _walk(fs, root, _image_hidden):
        if kind == "hidden":
            _count(skipped, "hidden")
            continue
        if kind != "outside" and not rel.lower().endswith(extensions):
            if kind in ("file", "special"):
                _count(skipped, "extension")
            continue
        if kind == "special":
            _count(skipped, "special_file")
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
        else:
            problems.append(_link_problem(fs, fs_path, rel, kind, 1))
    listed.sort(key=lambda item: item[1])
    return Listing(fs, listed, problems, skipped)

