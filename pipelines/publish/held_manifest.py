"""A shard read against the manifest its reader holds: size and sha256 checked as it streams.

A reader reads `manifest.json` once, then opens shards by name. An
``--overwrite`` that commits in between puts the new version's bytes under
the old names (docs/publishing.md), so every reader of a version
(`ReadDataset`, `recordforge.tf`, `recordforge inspect`) reads each shard
through `checked_records`: the bytes are hashed as the record reader pulls
them (no second read), a shard longer than its entry is refused as soon as
it is, and at its end size and sha256 must match. A mismatch or a missing
shard is `VersionReplaced` when the version's manifest no longer lists the
shard as held (it was replaced while reading), `DatasetCorrupt` when it
still does (the shard itself is damaged). Plain code: no Beam, no
TensorFlow. An ArrayRecord shard is copied to the local disk through the
same check, which then passes before any of its records is read
(`array_record_copies`).
"""

from __future__ import annotations

import contextlib
import hashlib
from typing import Any, BinaryIO, Callable, Iterator, NamedTuple

from ...transforms.layout import shard_file_format
from ...transforms.tfrecord import (StreamedRecord, TFRecordError, iter_record_views,
                                    iter_records)
from .array_record_copies import array_records, local_copy
from .manifest import ManifestError, load_manifest

__all__ = ["DatasetCorrupt", "HeldShard", "VersionReplaced", "checked_batches", "checked_copy",
           "checked_records", "held_shards"]

_DRAIN_BLOCK = 4 << 20
BATCH_BYTES = 1 << 20


class DatasetCorrupt(IOError):
    """A shard does not match its manifest entry (size or sha256)."""


class VersionReplaced(DatasetCorrupt):
    """The version was replaced (``--overwrite``) while it was being read:
    a shard no longer matches the manifest the reader holds."""


class HeldShard(NamedTuple):
    """One shard as the manifest a reader holds lists it. file: its name in
    the version; display: how messages name it (a path or redacted URL)."""

    file: str
    display: str
    num_bytes: int
    sha256: str


def held_shards(manifest: dict, split: str | None, join: Callable[[str], str]) -> list[HeldShard]:
    """The shards of `split` (None: every split) in manifest order;
    `join(file)` gives the name messages use."""
    return [HeldShard(shard["file"], join(shard["file"]), shard["num_bytes"], shard["sha256"])
            for name, entries in manifest["splits"].items() if split in (None, name)
            for shard in entries["shards"]]


def _entry_now(read_manifest: Callable[[], bytes | None], file: str) -> tuple | str:
    """(num_bytes, sha256) of `file` in the version's manifest as it is
    now, or why there is none."""
    try:
        data = read_manifest()
        if data is None:
            return "manifest.json is gone"
        manifest = load_manifest(data)
    except (OSError, ValueError, ManifestError) as error:
        return f"manifest.json cannot be read now ({error})"
    for entries in manifest["splits"].values():
        for shard in entries["shards"]:
            if shard["file"] == file:
                return shard["num_bytes"], shard["sha256"]
    return "manifest.json no longer lists it"


def _mismatch(shard: HeldShard, found: str, read_manifest) -> DatasetCorrupt:
    now = _entry_now(read_manifest, shard.file)
    held = f"the manifest read when reading began lists {shard.num_bytes} bytes with sha256 " \
           f"{shard.sha256}"
    if now == (shard.num_bytes, shard.sha256):
        return DatasetCorrupt(f"{shard.display}: {found}, but {held} (the manifest still does: "
                              "the shard is damaged; run recordforge verify)")
    why = now if isinstance(now, str) else \
        f"manifest.json now lists {now[0]} bytes with sha256 {now[1]}"
    return VersionReplaced(f"{shard.display}: version replaced while reading: {found}, but "
                           f"{held}; {why}. Rows read from this version may mix two builds: "
                           "read again, or read a version no build overwrites "
                           "(docs/publishing.md)")


class _HashingStream:
    """The reading end of a shard, hashed and counted as it is read; refuses
    to give more bytes than the held entry lists."""

    def __init__(self, handle: BinaryIO, shard: HeldShard, read_manifest):
        self._handle, self._shard, self._read_manifest = handle, shard, read_manifest
        self._digest, self.size = hashlib.sha256(), 0

    def seekable(self) -> bool:
        return False  # a seek back would hash bytes twice

    def read(self, size: int = -1) -> bytes:
        block = self._handle.read(size)
        self._digest.update(block)
        self.size += len(block)
        if self.size > self._shard.num_bytes:
            raise _mismatch(self._shard, f"it holds more than {self.size - len(block)} + "
                            f"{len(block)} bytes", self._read_manifest)
        return block

    def finish(self) -> None:
        """Reads what the record reader left (trailing bytes) and checks size
        and sha256; raises `VersionReplaced` or `DatasetCorrupt`."""
        while self.read(_DRAIN_BLOCK):
            pass
        if self.size != self._shard.num_bytes or self._digest.hexdigest() != self._shard.sha256:
            raise _mismatch(self._shard, f"it holds {self.size} bytes with sha256 "
                            f"{self._digest.hexdigest()}", self._read_manifest)


@contextlib.contextmanager
def checked_copy(open_shard: Callable[[], Any], shard: HeldShard, *,
                 read_manifest: Callable[[], bytes | None]) -> Iterator[str]:
    """The path of a local temporary copy of `shard` (an ArrayRecord
    shard, which its package reads only from the local disk), its size and
    sha256 checked against `shard` before the path is given; removed
    afterwards. Raises as `checked_records` does."""
    with _hashing_stream(open_shard, shard, read_manifest) as stream:
        with local_copy(stream, stream.finish) as path:
            yield path


@contextlib.contextmanager
def _hashing_stream(open_shard: Callable[[], Any], shard: HeldShard,
                    read_manifest: Callable[[], bytes | None]) -> Iterator["_HashingStream"]:
    """The opened shard as a `_HashingStream`; a missing shard raises as a
    mismatch with the manifest."""
    try:
        opened = open_shard()
    except FileNotFoundError:
        raise _mismatch(shard, "it is missing", read_manifest) from None
    with opened as handle:
        yield _HashingStream(handle, shard, read_manifest)


def checked_records(open_shard: Callable[[], Any], shard: HeldShard, *, compression: str,
                    read_manifest: Callable[[], bytes | None], views: bool = False,
                    stream_from: int | None = None, start: int = 0, stop: int | None = None
                    ) -> Iterator[bytes | memoryview | StreamedRecord]:
    """Yields the records of `shard` (`iter_records`, or `iter_record_views`
    with `stream_from` when `views`), every CRC checked, and checks its
    bytes against `shard` as they stream (module docstring); raises once
    the whole shard is read.

    open_shard: opens the shard for binary reading (a context manager);
    compression: "none" or "gzip", as the manifest says; read_manifest:
    the version's manifest.json bytes as they are now (None when it is
    gone), read only to explain a mismatch. start, stop: only records
    ``start <= i < stop`` are handed out (those before `start` are read
    with every check but make no object); the shard is still read to its
    end and checked there, as a whole read is, the bytes past record
    `stop` hashed but not walked (their CRCs are no check the sha256 does
    not already make)."""
    with _hashing_stream(open_shard, shard, read_manifest) as stream:
        if shard_file_format(shard.file) == "array_record":
            with local_copy(stream, stream.finish) as path:
                records = array_records(path, shard.display, start=start, stop=stop)
                yield from map(memoryview, records) if views else records
            return
        if views:
            records = iter_record_views(stream, path=shard.display, compression=compression,
                                        stream_from=stream_from, start=start, stop=stop)
        else:
            records = iter_records(stream, path=shard.display, compression=compression,
                                   start=start, stop=stop)
        try:
            yield from records
        except TFRecordError:
            # Damaged framing in a replaced shard is the replacement's doing:
            # say so rather than report damage the version does not have.
            stream.finish()
            raise
        stream.finish()


def checked_batches(open_shard: Callable[[], Any], shard: HeldShard, *, compression: str,
                    read_manifest: Callable[[], bytes | None],
                    max_bytes: int = BATCH_BYTES) -> Iterator[list[bytes]]:
    """`checked_records` in lists of records of at most `max_bytes` in all
    (a larger record alone), for a consumer that pays per item handed over
    (tf.data's `from_generator` crosses into TensorFlow once per list, not
    per record). The last list is given only once the whole shard checked."""
    batch: list[bytes] = []
    size = 0
    for record in checked_records(open_shard, shard, compression=compression,
                                  read_manifest=read_manifest):
        if batch and size + len(record) > max_bytes:
            yield batch
            batch, size = [], 0
        batch.append(record)
        size += len(record)
    if batch:
        yield batch
