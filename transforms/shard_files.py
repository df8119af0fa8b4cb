"""Putting one shard file in staging: written once, under its final name, hashed as it goes.

Both shard writers (the file exchange of `shards.py` and the shuffle
exchange of `exchange.py`, through `exchange_steps.ShardFileFn`) end in
`publish_shard`:

- On the local disk a shard is written under a temporary name, synced,
  then renamed; on an object store, whose objects appear only when
  complete, it is written at its final name (no copy); on other
  filesystems it is moved from its temporary name.
- Its sha256 and size are taken from the bytes as they are written.
- Where the shard is not on the local disk, its records are also checked
  as they are written: every record's framing and both CRCs, and their
  number against the writer's own count (`tfrecord.RecordStreamCheck`).
  Publishing then does not read such shards back (the metadata dict's
  ``stored``, `shard_metadata`):
  re-reading a 10 TB build on the one machine that publishes it would
  take as long as the build, and move the dataset's bytes once more. What
  it checks instead is that each object is still the one its writer
  checked: the store's size and version token (GCS generation, S3 ETag),
  which the writer takes after the upload (`PublishedShard.fingerprint`;
  `pipelines.publish.file_checks.check_stored`, which reads back an object
  that changed since).
  A shard on the local disk is read back in full before publishing, by
  processes, which costs little there (`pipelines.publish.finalizing`).

Rerunning a shard's writer writes the same bytes under the same name.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import uuid
from dataclasses import dataclass
from typing import BinaryIO, Callable

import fsspec
from fsspec.implementations.local import LocalFileSystem

from .page_cache import WriteBehind
from .readers.inputs import fingerprint
from .spill import join_path
from .tfrecord import RecordStreamCheck, TFRecordError

__all__ = ["HashingWriter", "PublishedShard", "ShardCheckError", "publish_shard",
           "shard_metadata"]

# Object stores whose fsspec filesystems write an object only when it is complete.
_ATOMIC_PROTOCOLS = frozenset({"s3", "s3a", "gs", "gcs", "abfs", "az", "abfss"})


class ShardCheckError(Exception):
    """A shard's bytes, checked as they were written, are not what its
    writer meant to write (damaged framing or CRC, another record count, an
    object that is not the size written)."""


class HashingWriter:
    """Writes to a file, hashing and counting what passes through."""

    def __init__(self, out: BinaryIO):
        self._out = out
        self.digest = hashlib.sha256()
        self.written = 0

    def write(self, data) -> None:
        self.digest.update(data)
        self._out.write(data)
        self.written += len(data)


class _CheckingWriter(HashingWriter):
    """A `HashingWriter` whose bytes also go through a `RecordStreamCheck`."""

    def __init__(self, out: BinaryIO, check: RecordStreamCheck):
        super().__init__(out)
        self.check = check

    def write(self, data) -> None:
        try:
            self.check.write(data)
        except TFRecordError as error:
            raise ShardCheckError(f"as written: {error}") from error
        super().write(data)


@dataclass(frozen=True)
class PublishedShard:
    """num_bytes, sha256 and num_examples (records) of a shard as written;
    fingerprint: the store's
    ``{"path", "size", <version token>}`` of the object, taken after it was
    written, for a shard checked as it was written (None for one on the
    local disk, which publishing reads back instead)."""

    num_bytes: int
    sha256: str
    num_examples: int
    fingerprint: dict | None


def _writes_atomically(fs) -> bool:
    protocols = fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)
    return bool(getattr(fs, "atomic_writes", False)) or bool(
        set(protocols) & _ATOMIC_PROTOCOLS)


def publish_shard(name: str, write: Callable[[BinaryIO], int], *, staging_dir: str,
                  temp_dir: str, compression: str) -> PublishedShard:
    """Writes a shard once and gives it its final name in `staging_dir`:
    `write(out)` writes its bytes and returns the number of records it
    wrote. Raises `ShardCheckError` when a shard checked as it is written
    is damaged or holds another number of records."""
    final_path = join_path(staging_dir, name)
    fs, fs_final = fsspec.core.url_to_fs(final_path)
    local = isinstance(fs, LocalFileSystem)
    check = None if local else RecordStreamCheck(final_path, compression)

    def written_through(fileobj: BinaryIO) -> tuple[HashingWriter, int]:
        """(the writer's hashing sink, the records it wrote)."""
        out = HashingWriter(fileobj) if check is None else _CheckingWriter(fileobj, check)
        records = write(out)
        if check is not None:
            try:
                checked = check.finish()
            except TFRecordError as error:
                raise ShardCheckError(f"{name} as written: {error}") from error
            if checked != records:
                raise ShardCheckError(f"{name}: holds {checked} records, its writer wrote "
                                      f"{records}")
        return out, records

    if _writes_atomically(fs) and not local:
        with fs.open(fs_final, "wb") as fileobj:
            out, records = written_through(fileobj)
    else:
        temp_path = join_path(temp_dir, f"{name}.{uuid.uuid4().hex}")
        _, fs_temp = fsspec.core.url_to_fs(temp_path)
        fs.makedirs(posixpath.dirname(fs_temp), exist_ok=True)
        with fs.open(fs_temp, "wb") as fileobj:
            on_disk = WriteBehind(fileobj)  # durable before its rename (page_cache)
            out, records = written_through(on_disk)
            on_disk.finish()
        fs.makedirs(posixpath.dirname(fs_final), exist_ok=True)
        if local:
            os.replace(fs_temp, fs_final)  # atomic on one filesystem
        else:
            fs.mv(fs_temp, fs_final)
    stored = None
    if check is not None:
        fs.invalidate_cache(posixpath.dirname(fs_final))
        stored = fingerprint(fs, fs_final)
        if stored.get("size") != out.written:
            raise ShardCheckError(f"{name}: the store holds {stored.get('size', 'no')} bytes "
                                  f"after {out.written} were written")
    return PublishedShard(num_bytes=out.written, sha256=out.digest.hexdigest(),
                          num_examples=records, fingerprint=stored)


def shard_metadata(split: str, name: str, shard: PublishedShard) -> dict:
    """The metadata dict a shard writer gives for a published shard:
    split, file, num_examples, num_bytes, sha256, and ``stored`` (the
    store's fingerprint) for a shard checked as it was written."""
    metadata = {"split": split, "file": name, "num_examples": shard.num_examples,
                "num_bytes": shard.num_bytes, "sha256": shard.sha256}
    if shard.fingerprint is not None:
        metadata["stored"] = shard.fingerprint
    return metadata
