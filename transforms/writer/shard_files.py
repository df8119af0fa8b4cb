"""Putting one shard file in staging: written once, under its final name, hashed as it goes.

Both shard writers (the file exchange of `file_exchange.py` and the shuffle
exchange of `shuffle_exchange.py`, through `shuffle_steps.ShardFileFn`) end in
`publish_shard`:

- On the local disk a shard is written under a temporary name, synced,
  then renamed; on an object store, whose objects appear only when
  complete, it is written at its final name (no copy); on other
  filesystems it is moved from its temporary name.
- Its sha256 and size are taken from the bytes as they are written, and
  so is its CRC-32C (``written_crc32c``): publishing checks a copy it
  reads back against that, a pass ~15 times cheaper than its sha256 again
  (`pipelines.publish.file_checks`).
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

With an index (uncompressed output, `output.index`), the shard's index
file (``<shard>.index``: one ``"<offset> <framed length>"`` line per
record, `tfrecord.RecordIndexer`) is made from the same bytes as they are
written, gathered in a spooled file while the shard is written, and put
beside the shard the same way once it is in place. It is not checked
against the store: publishing reads index files back in full (they are
small beside their shards).

With ``file_format="array_record"`` the framed records `write` produces go
into an `array_record.ArrayRecordSink` instead (every CRC checked as they
pass), which writes an ArrayRecord file on the local disk (the package's
writer is C++ on a local path): beside the staging area's temporary files
when the output is local, else in a local temporary directory. Its record
count is read back from the file's footer and compared with the writer's,
then the file is put at its final name like any shard (`_put`: hashed as
it is copied, fingerprinted on an object store); on the local disk it is
hashed and renamed into place without a copy. ArrayRecord shards have no
index file: the format keeps its own index in its footer.

Rerunning a shard's writer writes the same bytes under the same names.
"""

from __future__ import annotations

import functools
import hashlib
import os
import posixpath
import shutil
import tempfile
import uuid
from dataclasses import dataclass, field
from typing import BinaryIO, Callable

import fsspec
from fsspec.implementations.local import LocalFileSystem

from .. import array_record, tfrecord
from ..layout import index_file_name
from ..page_cache import WriteBehind
from ..readers.inputs import fingerprint
from ..tfrecord import RecordStreamCheck, TFRecordError
from .spill import join_path

__all__ = ["HashingWriter", "PublishedShard", "ShardCheckError", "publish_shard",
           "shard_metadata"]

# Object stores whose fsspec filesystems write an object only when it is complete.
_ATOMIC_PROTOCOLS = frozenset({"s3", "s3a", "gs", "gcs", "abfs", "az", "abfss"})


class ShardCheckError(Exception):
    """A shard's bytes, checked as they were written, are not what its
    writer meant to write (damaged framing or CRC, another record count, an
    object that is not the size written)."""


class HashingWriter:
    """Writes to a file, hashing (sha256 and CRC-32C) and counting what
    passes through; each of `taps` (`tfrecord.RecordStreamCheck`,
    `tfrecord.RecordIndexer`) sees the bytes first, and its
    `TFRecordError` becomes a `ShardCheckError`."""

    def __init__(self, out: BinaryIO, taps: tuple = ()):
        self._out = out
        self._taps = taps
        self.digest = hashlib.sha256()
        self.crc32c = 0
        self.written = 0

    def write(self, data) -> None:
        for tap in self._taps:
            try:
                tap.write(data)
            except TFRecordError as error:
                raise ShardCheckError(f"as written: {error}") from error
        self.digest.update(data)
        self.crc32c = tfrecord.crc32c(data, self.crc32c)
        self._out.write(data)
        self.written += len(data)


@dataclass(frozen=True)
class PublishedShard:
    """num_bytes, sha256 and num_examples (records) of a shard as written;
    fingerprint: the store's
    ``{"path", "size", <version token>}`` of the object, taken after it was
    written, for a shard checked as it was written (None for one on the
    local disk, which publishing reads back instead); index: its index
    file's ``{"file", "num_bytes", "sha256"}`` (None: no index);
    written_crc32c: file name -> CRC-32C of the whole file as written, for
    the shard and its index file."""

    num_bytes: int
    sha256: str
    num_examples: int
    fingerprint: dict | None
    index: dict | None = None
    written_crc32c: dict = field(default_factory=dict)


def _writes_atomically(fs) -> bool:
    protocols = fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)
    return bool(getattr(fs, "atomic_writes", False)) or bool(
        set(protocols) & _ATOMIC_PROTOCOLS)


# An index is gathered in memory up to this size, then on the local disk,
# until its shard is written: about 18 bytes a record.
_INDEX_SPOOL_BYTES = 8 << 20


def publish_shard(name: str, write: Callable[[BinaryIO], int], *, staging_dir: str,
                  temp_dir: str, compression: str, index: bool = False,
                  file_format: str = "tfrecord") -> PublishedShard:
    """Writes a shard once and gives it its final name in `staging_dir`:
    `write(out)` writes its bytes (TFRecord framed) and returns the number
    of records it wrote. With `index` (uncompressed shards only) its index
    file (`tfrecord.RecordIndexer`, from the bytes as they are written) is
    put beside it afterwards, ``<name>.index``, the same way. With
    `file_format` "array_record" the records go into an ArrayRecord file
    instead (`_publish_array_record`). Raises `ShardCheckError` when a
    shard checked as it is written is damaged or holds another number of
    records."""
    array_record.check_file_format(file_format)
    if (index or compression != "none") and file_format == "array_record":
        raise ValueError(f"{name}: an ArrayRecord shard has neither gzip nor an index file "
                         "(it compresses its chunks and indexes its records itself)")
    if index and not tfrecord.indexable(compression):
        raise ValueError(f"{name}: a {compression} shard has no index (no random access)")
    final_path = join_path(staging_dir, name)
    fs, _ = fsspec.core.url_to_fs(final_path)
    local = isinstance(fs, LocalFileSystem)
    if file_format == "array_record":
        return _publish_array_record(fs, name, write, staging_dir=staging_dir,
                                     temp_dir=temp_dir, local=local)
    check = None if local else RecordStreamCheck(final_path, compression)
    with tempfile.SpooledTemporaryFile(max_size=_INDEX_SPOOL_BYTES) as lines:
        indexer = tfrecord.RecordIndexer(lines, final_path) if index else None

        def written_through(out: HashingWriter) -> int:
            """Writes the shard's records through `out`; their number."""
            records = write(out)
            counted = []
            try:
                if check is not None:
                    counted.append(check.finish())
                if indexer is not None:
                    counted.append(indexer.finish())
            except TFRecordError as error:
                raise ShardCheckError(f"{name} as written: {error}") from error
            for found in counted:
                if found != records:
                    raise ShardCheckError(f"{name}: holds {found} records, its writer wrote "
                                          f"{records}")
            return records

        taps = tuple(tap for tap in (check, indexer) if tap is not None)
        out, records, stored = _put(fs, name, written_through, staging_dir=staging_dir,
                                    temp_dir=temp_dir, taps=taps, checked=check is not None)
        entry = None
        crcs = {name: out.crc32c}
        if indexer is not None:
            index_name = index_file_name(name)
            lines.seek(0)
            index_out, _, _ = _put(fs, index_name, functools.partial(_copy_lines, lines),
                                   staging_dir=staging_dir, temp_dir=temp_dir, taps=(),
                                   checked=False)
            entry = {"file": index_name, "num_bytes": index_out.written,
                     "sha256": index_out.digest.hexdigest()}
            crcs[index_name] = index_out.crc32c
    return PublishedShard(num_bytes=out.written, sha256=out.digest.hexdigest(),
                          num_examples=records, fingerprint=stored, index=entry,
                          written_crc32c=crcs)


def _publish_array_record(fs, name: str, write: Callable, *, staging_dir: str, temp_dir: str,
                         local: bool) -> PublishedShard:
    """`publish_shard` for an ArrayRecord shard: the records `write` frames
    go through an `array_record.ArrayRecordSink` into a local file, whose
    footer must count as many records as `write` wrote; the file is then
    put at its final name (renamed on the local disk, else copied through
    `_put`) and removed from the local disk."""
    final_path = join_path(staging_dir, name)
    with tempfile.TemporaryDirectory(prefix="recordforge-array-record-") as scratch:
        if local:  # beside the staging area, so that the final rename is atomic
            _, fs_temp_dir = fsspec.core.url_to_fs(temp_dir)
            os.makedirs(fs_temp_dir, exist_ok=True)
            local_path = os.path.join(fs_temp_dir, f"{name}.{uuid.uuid4().hex}")
        else:
            local_path = os.path.join(scratch, name)
        try:
            records = _write_array_record(local_path, name, write, display=final_path)
            if local:
                num_bytes, sha256, crc = _hashed(local_path)
                _, fs_final = fsspec.core.url_to_fs(final_path)
                os.makedirs(os.path.dirname(fs_final), exist_ok=True)
                os.replace(local_path, fs_final)  # atomic on one filesystem
                stored = None
            else:
                out, _, stored = _put(fs, name, functools.partial(_copy_file, local_path),
                                      staging_dir=staging_dir, temp_dir=temp_dir, taps=(),
                                      checked=True)
                num_bytes, sha256, crc = out.written, out.digest.hexdigest(), out.crc32c
        finally:
            if os.path.exists(local_path):
                os.remove(local_path)
    return PublishedShard(num_bytes=num_bytes, sha256=sha256, num_examples=records,
                          fingerprint=stored, written_crc32c={name: crc})


def _write_array_record(local_path: str, name: str, write: Callable, *, display: str) -> int:
    """Writes the ArrayRecord file of the records `write` frames at
    `local_path`; their number, checked against the file's own footer."""
    sink = array_record.ArrayRecordSink(local_path, display=display)
    try:
        records = write(sink)
        written = sink.finish()
    except TFRecordError as error:
        raise ShardCheckError(f"{name} as written: {error}") from error
    finally:
        sink.close()
    with array_record.ArrayRecordFile(local_path, display=display) as written_file:
        found = written_file.num_records
    for count in (written, found):
        if count != records:
            raise ShardCheckError(f"{name}: holds {count} records, its writer wrote {records}")
    return records


def _hashed(path: str) -> tuple[int, str, int]:
    """Size, sha256 and CRC-32C of the local file at `path`, read once, and
    the file synced to disk (it is renamed into place next)."""
    digest = hashlib.sha256()
    size = crc = 0
    with open(path, "rb") as fileobj:
        for block in iter(functools.partial(fileobj.read, 1 << 20), b""):
            digest.update(block)
            crc = tfrecord.crc32c(block, crc)
            size += len(block)
        os.fsync(fileobj.fileno())
    return size, digest.hexdigest(), crc


def _copy_file(path: str, out: HashingWriter) -> int:
    """Copies the local file at `path` to `out`; 0 (`_put`'s writers
    return a count; the records were counted as they were written)."""
    with open(path, "rb") as fileobj:
        return _copy_lines(fileobj, out)


def _copy_lines(lines: BinaryIO, out: HashingWriter) -> int:
    """Copies the spooled index lines (or any file object) to `out`; 0
    (`_put`'s writers return a count, and an index holds no records)."""
    shutil.copyfileobj(lines, out, 1 << 20)
    return 0


def _put(fs, name: str, write: Callable[[HashingWriter], int], *, staging_dir: str,
         temp_dir: str, taps: tuple, checked: bool) -> tuple[HashingWriter, int, dict | None]:
    """Puts the file `write` writes (through a `HashingWriter` with `taps`)
    at `name` in `staging_dir`: on an object store at its final name, else
    under a temporary name in `temp_dir`, then renamed (locally, synced
    first) or moved. Returns the writer, what `write` returned and, when
    `checked`, the store's fingerprint of the object, whose size must be
    the bytes written."""
    final_path = join_path(staging_dir, name)
    _, fs_final = fsspec.core.url_to_fs(final_path)
    local = isinstance(fs, LocalFileSystem)
    if _writes_atomically(fs) and not local:
        with fs.open(fs_final, "wb") as fileobj:
            out = HashingWriter(fileobj, taps)
            result = write(out)
    else:
        temp_path = join_path(temp_dir, f"{name}.{uuid.uuid4().hex}")
        _, fs_temp = fsspec.core.url_to_fs(temp_path)
        fs.makedirs(posixpath.dirname(fs_temp), exist_ok=True)
        with fs.open(fs_temp, "wb") as fileobj:
            on_disk = WriteBehind(fileobj)  # durable before its rename (page_cache)
            out = HashingWriter(on_disk, taps)
            result = write(out)
            on_disk.finish()
        fs.makedirs(posixpath.dirname(fs_final), exist_ok=True)
        if local:
            os.replace(fs_temp, fs_final)  # atomic on one filesystem
        else:
            fs.mv(fs_temp, fs_final)
    stored = None
    if checked:
        fs.invalidate_cache(posixpath.dirname(fs_final))
        stored = fingerprint(fs, fs_final)
        if stored.get("size") != out.written:
            raise ShardCheckError(f"{name}: the store holds {stored.get('size', 'no')} bytes "
                                  f"after {out.written} were written")
    return out, result, stored


def shard_metadata(split: str, name: str, shard: PublishedShard) -> dict:
    """The metadata dict a shard writer gives for a published shard:
    split, file, num_examples, num_bytes, sha256, ``index`` (its index
    file's ``{"file", "num_bytes", "sha256"}``) when it has one,
    ``stored`` (the store's fingerprint) for a shard checked as it was
    written, and ``written_crc32c`` (`PublishedShard`)."""
    metadata = {"split": split, "file": name, "num_examples": shard.num_examples,
                "num_bytes": shard.num_bytes, "sha256": shard.sha256,
                "written_crc32c": dict(shard.written_crc32c)}
    if shard.fingerprint is not None:
        metadata["stored"] = shard.fingerprint
    if shard.index is not None:
        metadata["index"] = dict(shard.index)
    return metadata
