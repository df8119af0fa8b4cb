"""The build cache, as the driver sees it: its key, what it holds before a build, and pruning after one.

A build of a table source keeps, for every reading unit of every input
file, what reading, checking and encoding it gave (a piece,
`transforms.cache`). The next build reuses the pieces of every file whose
path, size and bytes are unchanged (`transforms.readers.inputs.identity`:
a hash of a local file's bytes, an object store's checksum; never a
modification time) and reads only new or changed files; a build that
was killed or failed leaves its pieces, so running it again reuses them
(resuming). Shards do not depend on which rows came from the cache.

`encoding_key` digests everything that changes what a row becomes: the
package version, the source's type and reading options, the features,
their vocabularies, the key, the dataset name and splits, and whether
statistics are computed, and ``output.shuffle`` (pieces hold rows in the
shard writer's order). Other output options (compression, shard size),
the version, the error budget and the gates do not invalidate
the cache. `open_cache` lists the cache once, before the pipeline;
`prune_cache` runs after a publish and deletes what the newest build did
not use (after ``cache.keep_unused_days``).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import json
import time
from typing import Any, Mapping, Sequence

import fsspec
from fsspec.implementations.local import LocalFileSystem

from .config import DatasetConfig
from .version import __version__
from ..transforms.cache.names import file_key, key_of, parse_piece_name, whole_files
from ..transforms.cache.pieces import FORMAT as PIECE_FORMAT
from ..transforms.layout import CACHE_DIR
from ..transforms.readers.tables import DEFAULT_RANGE_BYTES
from ..transforms.sources.outputs import JSONL_BATCH_BYTES, RECORD_BATCH_BYTES
from ..transforms.urls import redact_url

__all__ = ["CacheState", "cache_url", "encoding_key", "open_cache", "prune_cache", "uses_cache"]

# Reading units: the same file must be cut the same way for its pieces to match.
READ_BATCH_SIZE = 1000
_DAY_SECONDS = 86400.0


@dataclasses.dataclass(frozen=True)
class CacheState:
    """The cache when a build starts: its URL, the build's encoding key, the
    files whose every unit has a piece (file key -> unit count), the names of
    the other pieces (files a stopped build left unfinished), and the bytes
    it held."""

    url: str
    encoding_key: str
    whole_files: Mapping[str, int]
    pieces: frozenset[str]
    num_bytes: int
    # fs path -> (write marks, content token, split) of the inputs the build
    # hashed before its pipeline (`inputs.ContentTokens.known`): the plan
    # step takes a token, and the split points found as the file was
    # hashed, from here while the file's marks are unchanged.
    known_contents: Mapping[str, tuple] = dataclasses.field(default_factory=dict)

    @property
    def display_url(self) -> str:
        return redact_url(self.url)

    @property
    def local(self) -> bool:
        """Whether the cache is on the local disk."""
        return isinstance(fsspec.core.url_to_fs(self.url)[0], LocalFileSystem)


def cache_url(config: DatasetConfig) -> str:
    """``cache.path``, or ``<output.path>/.cache``."""
    return config.cache.path or f"{config.output.path.rstrip('/')}/{CACHE_DIR}"


def encoding_key(config: DatasetConfig, vocabularies: Mapping[str, Sequence[str]]) -> str:
    """The digest of everything that changes what a row of this config becomes."""
    resolved = config.resolved
    source = {key: value for key, value in (resolved.get("source") or {}).items()
              if key != "path"}
    what = {
        "recordforge": __version__,
        "pieces": PIECE_FORMAT,  # a new format of pieces or runs: every key changes
        # How rows are batched: a batch gives the statistics' partials.
        "read": {"batch_size": READ_BATCH_SIZE, "jsonl_batch_bytes": JSONL_BATCH_BYTES,
                 "record_batch_bytes": RECORD_BATCH_BYTES, "range_bytes": DEFAULT_RANGE_BYTES},
        "source": source,
        "features": resolved.get("features"),
        "vocabularies": {name: list(labels) for name, labels in sorted(vocabularies.items())},
        "key": resolved.get("key"),
        "name": resolved.get("name"),
        "splits": resolved.get("splits"),
        "statistics": config.validation.statistics,
        # Pieces hold rows in the shard writer's order: by hash, or by key.
        "shuffle": config.output.shuffle,
    }
    text = json.dumps(what, sort_keys=True, ensure_ascii=True, default=str)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def uses_cache(config: DatasetConfig) -> bool:
    """Whether a build of `config` reads and writes the cache: it is on, and
    the source is a table (image sources are read whole every build)."""
    return (config.cache.enabled and config.source is not None
            and config.source.type != "images")


def open_cache(config: DatasetConfig, vocabularies: Mapping[str, Sequence[str]]
               ) -> CacheState | None:
    """Lists the cache (one listing) for a build of `config`; None when the
    build does not use it. Creates the directory where that is needed."""
    if not uses_cache(config):
        return None
    url = cache_url(config)
    fs, root = fsspec.core.url_to_fs(url)
    fs.makedirs(root, exist_ok=True)
    entries = _entries(fs, root)
    pieces = [name for name in entries if parse_piece_name(name) is not None]
    whole = whole_files(pieces)
    partial = frozenset(name for name in pieces if parse_piece_name(name)[0] not in whole)
    return CacheState(url=url, encoding_key=encoding_key(config, vocabularies),
                      whole_files=whole, pieces=partial,
                      num_bytes=sum(size for name, (size, _) in entries.items()
                                    if key_of(name) is not None))


def _entries(fs: fsspec.AbstractFileSystem, root: str) -> dict[str, tuple[int, float | None]]:
    """name -> (size, modified time in seconds or None) of the files in the cache."""
    try:
        listing = fs.ls(root, detail=True)
    except FileNotFoundError:
        return {}
    entries = {}
    for info in listing:
        if info.get("type") == "directory":
            continue
        name = info["name"].rstrip("/").rsplit("/", 1)[-1]
        entries[name] = (int(info.get("size") or 0), _modified(info))
    return entries


def _modified(info: Mapping[str, Any]) -> float | None:
    for key in ("mtime", "LastModified", "updated", "last_modified"):
        value = info.get(key)
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, _dt.datetime):
            return value.timestamp()
        if isinstance(value, str):
            try:
                return _dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
    return None


def prune_cache(state: CacheState, inputs: Mapping[str, Any], keep_unused_days: float,
                now: float | None = None) -> dict:
    """After a publish: deletes the pieces no input of the published build
    has (removed or changed inputs, other configs) once they are older than
    `keep_unused_days` (0: at once), and temporary files of killed writers
    older than a day. `inputs`: the build's fingerprints (the manifest's).
    Returns ``{"files", "num_bytes", "removed_files", "removed_bytes"}``,
    what the cache holds afterwards and what went (summaries and runs)."""
    fs, root = fsspec.core.url_to_fs(state.url)
    now = time.time() if now is None else now
    used = {file_key(state.encoding_key, entry) for entry in inputs.get("files", [])}
    kept = removed = kept_bytes = removed_bytes = 0
    doomed = []
    for name, (size, modified) in sorted(_entries(fs, root).items()):
        key = key_of(name)
        age = None if modified is None else (now - modified) / _DAY_SECONDS
        if key is not None:
            unused = key not in used
            old_enough = keep_unused_days <= 0 or (age is not None and age >= keep_unused_days)
            if unused and old_enough:
                doomed.append(name)
                removed, removed_bytes = removed + 1, removed_bytes + size
            else:
                kept, kept_bytes = kept + 1, kept_bytes + size
        elif name.endswith(".tmp") and age is not None and age >= 1:
            doomed.append(name)
    if doomed:
        fs.rm([f"{root.rstrip('/')}/{name}" for name in doomed])
    return {"files": kept, "num_bytes": kept_bytes, "removed_files": removed,
            "removed_bytes": removed_bytes}
