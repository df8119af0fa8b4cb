"""A published version opened for training readers: its manifest, a split's shards and their index files.

`open_version` follows the path rules `verify` uses
(`publish.dataset_paths`): a version directory, or an output root whose
LATEST names one, local or any fsspec URL. The result is plain data plus an
fsspec filesystem, so it pickles into DataLoader workers and Grain's
processes. An index file (``<shard>.index``, one ``"<offset> <framed
length>"`` line per record, the format of DALI's ``tfrecord2idx``) is used
only when the manifest lists it with its size and sha256: a version written
without them (gzip output, older versions) has none.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ...transforms.urls import redact_url
from ...transforms.layout import MANIFEST_FILE
from ..publish.dataset_paths import (MAX_MANIFEST_BYTES, load_version_manifest, locate_version,
                                     read_limited)
from ..publish.held_manifest import DatasetCorrupt, HeldShard
from ..publish.manifest import compression_from_label, file_format_of

__all__ = ["LoaderShard", "OpenedVersion", "check_size", "open_version"]


class LoaderShard(NamedTuple):
    """One shard of a split as the manifest lists it. held: the shard's
    entry (`HeldShard`: file, display, size, sha256); index: the index
    file's entry (file, display, size, sha256) or None."""

    held: HeldShard
    num_examples: int
    index: HeldShard | None


class OpenedVersion(NamedTuple):
    """fs: the version's filesystem; root: the version directory on fs;
    display: how messages name it (credentials redacted)."""

    fs: Any
    root: str
    display: str
    manifest: dict

    @property
    def compression(self) -> str:
        return compression_from_label(self.manifest["compression"])

    @property
    def features(self) -> dict:
        return self.manifest["features"]

    @property
    def file_format(self) -> str:
        """"tfrecord" or "array_record" (the manifest's ``file_format``)."""
        return file_format_of(self.manifest)

    def path(self, file: str) -> str:
        return f"{self.root}/{file}"

    def manifest_now(self) -> bytes | None:
        """The manifest as it is now (to explain a mismatch), size-limited;
        None when it is gone."""
        try:
            return read_limited(self.fs, self.path(MANIFEST_FILE), MAX_MANIFEST_BYTES)
        except FileNotFoundError:
            return None

    def shards(self, split: str) -> list[LoaderShard]:
        """`split`'s shards in manifest order; ValueError naming the splits
        there are when it has none."""
        splits = self.manifest["splits"]
        if split not in splits:
            raise ValueError(f"{self.display} has no split {split!r}; its splits: "
                             f"{', '.join(splits)}")
        return [self._shard(entry) for entry in splits[split]["shards"]]

    def _shard(self, entry: dict) -> LoaderShard:
        # load_manifest has checked the entry, its index entry included
        held = HeldShard(entry["file"], f"{self.display}/{entry['file']}", entry["num_bytes"],
                         entry["sha256"])
        index = entry.get("index")
        return LoaderShard(held, entry["num_examples"], None if index is None else HeldShard(
            index["file"], f"{self.display}/{index['file']}", index["num_bytes"],
            index["sha256"]))


def open_version(path: str) -> OpenedVersion:
    """The version `path` names, its manifest read and checked. Raises
    `DatasetNotFoundError` when `path` does not exist and `DatasetCorrupt`
    when LATEST or the manifest cannot be used (the message says why)."""
    located = locate_version(path)
    display = redact_url(located.url)
    if located.problems:
        problem = located.problems[0]
        raise DatasetCorrupt(f"{redact_url(path)}: {problem.file} {problem.message}")
    manifest, problem = load_version_manifest(located)
    if problem is not None:
        raise DatasetCorrupt(f"{display}/{problem.file}: {problem.message}")
    return OpenedVersion(located.fs, located.version_dir, display, manifest)


def check_size(version: OpenedVersion, shard: LoaderShard) -> None:
    """DatasetCorrupt unless the shard exists with the size its entry lists."""
    try:
        size = version.fs.size(version.path(shard.held.file))
    except FileNotFoundError:
        raise DatasetCorrupt(f"{shard.held.display}: missing, but the manifest lists it "
                             "(run recordforge verify)") from None
    if size != shard.held.num_bytes:
        raise DatasetCorrupt(f"{shard.held.display}: holds {size} bytes, but the manifest "
                             f"lists {shard.held.num_bytes} (run recordforge verify)")
