"""What a build reads, fingerprinted: the manifest's ``inputs``, and whether they changed.

`source_inputs` lists a source by the build's own listing rule (`listing`)
and fingerprints every file it reads (the labels table of an image source
too); `changed_inputs` compares two of them. The build takes them before
its pipeline runs and again after it, and fails when they differ: a file
rewritten, truncated, added or removed while the build read would
otherwise publish a mix of old and new data. The manifest keeps the first:

    "inputs": {"files": [{"path": "/data/part-0.csv", "size": 1048576,
                          "mtime_ns": 1764100000123456789,
                          "content": "xxh3_128:5d0f..."}, ...],
               "skipped": {"hidden": 1, "extension": 2}}

Each file entry has ``path`` (as rows and dead letters name the file: the
local path, names that are not UTF-8 with their bytes as ``\\xNN``, or the
URL without credentials), ``size`` in bytes, one version token (local
files ``mtime_ns``, nanoseconds since the epoch; object stores what they
give, ``generation`` (GCS), else ``etag`` (S3 ...), else ``mtime`` (text))
and ``content``, what the bytes are (`content_token`). Entries are sorted by
path, so equal inputs give equal entries. ``skipped`` counts what the
listing left out, by reason (`listing.Listing`).

Whether an input is the same as before is decided by `identity`: its path,
size and ``content``, never its modification time, which tools restore
(``rsync -t``, ``cp -p``) over other bytes and change over the same ones.

A build hashes a local file once (`ContentTokens`): the fingerprints taken
after its pipeline, and the cache's plan step, take the token of a file
whose `write_marks` (which every write changes, ctime included) are those
taken before it was hashed, instead of reading it again. A file the build
cuts into byte ranges is planned in that same read: its split points go to
the plan step with its token.
"""

from __future__ import annotations

import os
import time
from typing import Any, Iterable, Mapping

import fsspec
import xxhash
from fsspec.implementations.local import LocalFileSystem

from .common import display_name
from .listing import list_image_files, list_tables

__all__ = ["ContentTokens", "changed_inputs", "content_token", "fingerprint", "hashes_locally",
           "identity", "input_fingerprint", "source_inputs", "write_marks", "xxh3_token"]

# Version tokens of object stores, in order of preference (fsspec `info` keys).
_TOKENS = ("generation", "etag", "ETag", "mtime", "LastModified", "last_modified", "updated")


def fingerprint(fs: fsspec.AbstractFileSystem, fs_path: str) -> dict:
    """``{"path", "size", <version token>}`` of one file (see the module);
    ``{"path", "missing": true}`` when it does not exist."""
    return _look(fs, fs_path)[0]


def _look(fs: fsspec.AbstractFileSystem, fs_path: str) -> tuple[dict, Mapping]:
    """(`fingerprint`, the store's `info`: empty for a local file)."""
    path = display_name(fs, fs_path)
    try:
        if isinstance(fs, LocalFileSystem):
            stat = os.stat(fs_path)
            return {"path": path, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}, {}
        info = fs.info(fs_path)
    except FileNotFoundError:
        return {"path": path, "missing": True}, {}
    entry: dict[str, Any] = {"path": path, "size": int(info.get("size") or 0)}
    for token in _TOKENS:
        value = info.get(token)
        if value is not None:
            name = {"ETag": "etag", "LastModified": "mtime", "last_modified": "mtime",
                    "updated": "mtime"}.get(token, token)
            entry[name] = value if isinstance(value, (int, float)) else str(value)
            break
    return entry, info


# Bytes hashed per read: large enough that the hash, not the calls, is the cost.
_HASH_CHUNK = 1 << 20


def xxh3_token(digest) -> str:
    """The content token of bytes fed to `digest` (an ``xxhash.xxh3_128``):
    ``xxh3_128:<hex>``."""
    return f"xxh3_128:{digest.hexdigest()}"


def hashes_locally(fs: fsspec.AbstractFileSystem) -> bool:
    """True when `content_token` of a file of `fs` is the `xxh3_token` of its
    bytes read here (a local file: no store keeps a checksum of it), so that
    a reader of every byte may hash them as it reads (`tables.plan_fingerprinted`)."""
    return isinstance(fs, LocalFileSystem)


def _hash_bytes(fileobj) -> str:
    """``xxh3_128:<hex>`` of what `fileobj` holds, read to its end one chunk
    at a time into one buffer (memory stays a chunk whatever the size)."""
    digest = xxhash.xxh3_128()
    buffer = bytearray(_HASH_CHUNK)
    view = memoryview(buffer)
    while count := fileobj.readinto(buffer):
        digest.update(view[:count])
    return xxh3_token(digest)


def content_token(fs: fsspec.AbstractFileSystem, fs_path: str, info: Mapping) -> str:
    """What a file's bytes are, as text naming its kind: the store's own
    checksum where it keeps one, else a hash of the bytes read here.

    - GCS: ``md5:<md5Hash>``; a composite object has only a CRC32C, whose 32
      bits could match other bytes, so ``crc32c:<crc32c>@<generation>`` (a
      rewrite of the same bytes is then read again, never the reverse).
    - S3 and other stores with an ETag: ``etag:<ETag>``. Equal ETags mean
      equal bytes (a single-part upload's is their MD5, a multipart one's
      the MD5 of its parts' MD5s, an encrypted one's unique to the write),
      though the same bytes uploaded another way get another one.
    - Local files and stores with neither: ``xxh3_128:<hex>`` of the bytes.
    """
    if info.get("md5Hash"):
        return f"md5:{info['md5Hash']}"
    if info.get("crc32c"):
        return f"crc32c:{info['crc32c']}@{info.get('generation')}"
    etag = str(info.get("ETag") or info.get("etag") or "").strip('"')  # S3 quotes it
    if etag:
        return f"etag:{etag}"
    if hashes_locally(fs):
        with open(fs_path, "rb", buffering=0) as fileobj:
            return _hash_bytes(fileobj)
    with fs.open(fs_path, "rb") as fileobj:
        return _hash_bytes(fileobj)


# A file changed this recently is hashed again each time (`ContentTokens`):
# a write within one tick of the file system's clock may leave its marks
# as they were ("racy" entries, as git calls them).
SETTLED_NS = 2_000_000_000


class ContentTokens:
    """The content tokens of the local files a build hashed, each with the
    `write_marks` taken before its bytes were read: `token` gives a file's
    token again, unread, while its marks are unchanged (no write since),
    and `known` hands them to the pipeline's plan step
    (`ConvertTablesWithCache(known_contents=...)`), which checks the marks
    the same way. Not kept: files of object stores (their token is the
    store's checksum, read with their listing), and files changed less than
    `SETTLED_NS` before they were marked, whose next write could leave the
    same marks.

    ranges: how the build cuts its table files (`tables.RangeScan`), or
    None. A file it cuts by scanning its every byte is hashed by that scan
    (`RangeScan.hash_and_split`), and its split points are kept with its
    token: the plan step then makes its units from them instead of reading
    the file once more before its ranges are read."""

    def __init__(self, ranges=None):
        self._ranges = ranges
        self._known: dict[str, tuple[tuple, str, tuple | None]] = {}

    def token(self, fs: fsspec.AbstractFileSystem, fs_path: str, info: Mapping) -> str:
        """`content_token` of the file, taken from what is known when its
        marks are those it was hashed with."""
        if not hashes_locally(fs):
            return content_token(fs, fs_path, info)
        now = time.time_ns()
        marks = write_marks(fs, fs_path)  # before the bytes are read
        known = self._known.get(fs_path)
        if known is not None and marks is not None and known[0] == marks:
            return known[1]
        token, split = self._hash(fs, fs_path, info, marks)
        # marks: (size, mtime_ns, inode, ctime_ns); every write sets ctime
        if marks is not None and now - marks[3] > SETTLED_NS:
            self._known[fs_path] = (marks, token, split)
        return token

    def _hash(self, fs: fsspec.AbstractFileSystem, fs_path: str, info: Mapping,
              marks: tuple | None) -> tuple[str, tuple | None]:
        """(content token, (`ranges`, split points) or None)."""
        if self._ranges is not None and marks is not None \
                and self._ranges.fuses(fs, fs_path, marks[0]):
            fused = self._ranges.hash_and_split(fs, fs_path)
            if fused is not None:
                return fused[0], (self._ranges, fused[1])
        return content_token(fs, fs_path, info), None

    @property
    def known(self) -> dict[str, tuple[tuple, str, tuple | None]]:
        """fs path -> (write marks, content token, split) of every file
        hashed; split: (the `ranges` it was cut by, its split points), or
        None where hashing found none."""
        return dict(self._known)


def input_fingerprint(fs: fsspec.AbstractFileSystem, fs_path: str,
                      tokens: ContentTokens | None = None) -> dict:
    """`fingerprint` plus ``content`` (`content_token`): what the build
    cache and the check for inputs changed during a build compare. A local
    file is read in full to hash it, unless `tokens` knows it unchanged."""
    entry, info = _look(fs, fs_path)
    if entry.get("missing"):
        return entry
    try:
        entry["content"] = (content_token(fs, fs_path, info) if tokens is None
                            else tokens.token(fs, fs_path, info))
    except FileNotFoundError:  # gone between the two looks
        return {"path": entry["path"], "missing": True}
    except OSError as error:
        # A file the build cannot read is a read_error dead letter when its
        # unit is read, as before its bytes were hashed; its token names the
        # failure, so that it never shares a cache key with readable bytes.
        entry["content"] = f"unreadable:{type(error).__name__}"
    return entry


def write_marks(fs: fsspec.AbstractFileSystem, fs_path: str) -> tuple | None:
    """What any write to a file changes, read cheaply (no bytes): a local
    file's size, mtime, inode and ctime (the kernel sets ctime on every
    write, and no tool can put it back as ``rsync -t`` puts mtime back); a
    store's fingerprint (generation, ETag). None when the file is gone.
    Equal marks before and after a read mean the read saw one file."""
    if isinstance(fs, LocalFileSystem):
        try:
            stat = os.stat(fs_path)
        except FileNotFoundError:
            return None
        return stat.st_size, stat.st_mtime_ns, stat.st_ino, stat.st_ctime_ns
    entry = fingerprint(fs, fs_path)
    return None if entry.get("missing") else tuple(sorted(entry.items()))


def identity(entry: Mapping) -> dict:
    """What makes an input the same file with the same bytes: its path, size
    and content token; the whole entry when it has no content token (an entry
    of an older manifest), so that those are never taken as unchanged by a
    weaker rule than they were made with."""
    if "content" not in entry:
        return dict(entry)
    return {key: entry[key] for key in ("path", "size", "content") if key in entry}


def source_inputs(type: str, path: str, extensions: Iterable[str] = (),
                  labels: str | None = None, tokens: ContentTokens | None = None) -> dict:
    """The fingerprints of every file a source of `type` at `path` reads
    (listed as the build lists them), plus an image source's labels table,
    and what the listing skipped. Tables and labels tables get their
    ``content`` (`input_fingerprint`, with `tokens`: hashed once a build);
    images their size and version token."""
    if type == "images":
        listing = list_image_files(path, extensions)
        paths = [fs_path for fs_path, _ in listing.files]
    else:
        listing = list_tables(path, tuple(extensions) or None)
        paths = list(listing.files)
    # Tables are hashed: their fingerprints key the build cache. Images are
    # not cached, and hashing every image would read each one once more.
    if type == "images":
        files = [fingerprint(listing.fs, fs_path) for fs_path in paths]
    else:
        files = [input_fingerprint(listing.fs, fs_path, tokens) for fs_path in paths]
    if type == "images" and labels not in (None, "directory"):
        labels_fs, labels_path = fsspec.core.url_to_fs(labels)
        files.append(input_fingerprint(labels_fs, labels_path, tokens))
    files.sort(key=lambda entry: entry["path"])
    return {"files": files, "skipped": dict(sorted(listing.skipped.items()))}


def changed_inputs(before: Mapping, after: Mapping, limit: int = 10) -> list[str]:
    """What differs between two `source_inputs`, one line per file (at most
    `limit`, then a count of the rest); empty when nothing changed. A file
    compares by its `identity`: one touched but holding the same bytes has
    not changed."""
    old = {entry["path"]: entry for entry in before.get("files", [])}
    new = {entry["path"]: entry for entry in after.get("files", [])}
    lines = []
    for path in sorted(old.keys() | new.keys()):
        was, now = old.get(path), new.get(path)
        if was == now or (was is not None and now is not None
                          and identity(was) == identity(now)):
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
