"""Reading one published file back once: size, sha256, TFRecord framing and CRCs, Examples.

`check_file(url, file, ...)` streams a file once (hash, size, framing and
parsing in one pass, so memory does not depend on file size) and returns a
`FileCheck` listing every `Problem` found, each naming the file and, where
there is one, the byte offset and record index of the first fault. It never
raises for damaged data. `verify` runs these over a version.

The whole file's hash is its sha256, or, for a file a build staged and
reads back before publishing, its CRC-32C (`expected_crc32c`,
`read_back`): the writer took both of the bytes it wrote
(`transforms.writer.shard_files`), so a copy whose size, records, CRCs
and whole-file CRC-32C are the writer's holds the bytes its sha256 was
taken of, and the pass costs ~15 times less than a second sha256.

This module is what a process that reads shards back imports
(`reading_processes`): at the top it imports only the record walk
(`transforms.tfrecord`) and the standard library. What only some checks
need is imported by them: fsspec for a URL (`read_back` opens a local path
itself), the Example checks of a deep verification (`example_checks`),
ArrayRecord, the store's fingerprints.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import io
import os
from dataclasses import dataclass, field
from typing import BinaryIO, Callable, Iterator, Mapping

from ...transforms import tfrecord
from ...transforms.layout import shard_file_format
from ...transforms.page_cache import drop_behind

__all__ = ["FileCheck", "Problem", "ReadBack", "check_file", "check_read_back", "check_stored",
           "file_identity", "read_back"]

_BLOCK = 1 << 20
_DROP_EVERY = 8 << 20


@dataclass(frozen=True)
class Problem:
    """One fault. file: path relative to the version directory (or a split
    label like ``split 'train'``). offset: byte offset of the first fault
    (uncompressed stream for gzip shards) or None. record_index: 0-based
    index of the first faulty record or None. code: the kind of fault
    ("missing", "size", "sha256", "crc32c", "swapped", "framing", "count",
    "example", "index", "sums", "unexpected", "manifest", "latest", "split",
    "link")."""

    file: str
    message: str
    offset: int | None = None
    record_index: int | None = None
    code: str = ""

    def location(self) -> str:
        parts = []
        if self.record_index is not None:
            parts.append(f"record {self.record_index}")
        if self.offset is not None:
            parts.append(f"byte {self.offset}")
        return " at ".join(parts)

    def __str__(self) -> str:
        where = self.location()
        return f"{self.file}: {where}: {self.message}" if where else f"{self.file}: {self.message}"


@dataclass
class FileCheck:
    """What reading one file found (picklable: crosses process pools):
    the whole file's sha256 or, when read for that, its CRC-32C (the
    other then "" or None)."""

    file: str
    exists: bool = True
    size: int = 0
    sha256: str = ""
    records: int | None = None
    problems: list[Problem] = field(default_factory=list)
    crc32c: int | None = None

    def whole_file_digest(self) -> tuple[str, object]:
        """("sha256", hex) or ("crc32c", int): what this reading took."""
        return ("crc32c", self.crc32c) if self.crc32c is not None else ("sha256", self.sha256)


class _Crc32cDigest:
    """A running CRC-32C with hashlib's `update`: `tfrecord.crc32c`, the
    extension's kernel where it is built (the crc32c package's `CRC32CHash`
    would cost every reader process that package's ~40 ms import)."""

    def __init__(self):
        self.value = 0

    def update(self, data) -> None:
        self.value = tfrecord.crc32c(data, self.value)


class _HashingReader:
    """A read-only file wrapper that hashes (sha256, or CRC-32C with
    `crc32c`) and counts what passes through, so hashing and record
    parsing share one read of the file. What it has read of a local file
    leaves the page cache every `_DROP_EVERY` bytes: verification reads
    each byte once."""

    def __init__(self, raw: BinaryIO, crc32c: bool = False):
        self._raw = raw
        self.digest = _Crc32cDigest() if crc32c else hashlib.sha256()
        self.size = 0
        self._dropped = 0

    def read(self, n: int = -1) -> bytes:
        data = self._raw.read(n)
        self._passed(data)
        return data

    def readinto(self, buffer) -> int:
        """Reads into `buffer` (a reader's reused block: no new memory per
        read), hashing what came."""
        with memoryview(buffer) as view:
            count = None
            readinto = getattr(self._raw, "readinto", None)
            if readinto is not None:
                try:
                    count = readinto(view) or 0
                except (NotImplementedError, io.UnsupportedOperation):
                    pass  # an io.RawIOBase that implements only read
            if count is None:  # a file object that only reads
                data = self._raw.read(len(view))
                count = len(data)
                view[:count] = data
            with view[:count] as data:
                self._passed(data)
        return count

    def _passed(self, data) -> None:
        self.digest.update(data)
        self.size += len(data)
        if self.size - self._dropped >= _DROP_EVERY:
            drop_behind(self._raw, self._dropped, self.size - self._dropped)
            self._dropped = self.size

    def seekable(self) -> bool:
        return False

    def drain(self) -> None:
        """Reads the rest of the file."""
        while self.read(_BLOCK):
            pass
        drop_behind(self._raw, self._dropped, 0)


def check_file(url: str, file: str, *, compression: str | None = None,
               expected_size: int | None = None, expected_sha256: str | None = None,
               expected_records: int | None = None, features: Mapping | None = None,
               vocabulary_sizes: Mapping | None = None,
               index: tuple[str, str] | None = None,
               expected_crc32c: int | None = None) -> FileCheck:
    """Reads one file once. For a shard (`compression` given): checks every
    record's framing and CRCs, counts records and, with `features`, checks
    each Example; with `index` (its index file's url and name, and
    `features`), checks every line of the index against the records found
    (`tfrecord.IndexMatch`), reading it alongside. Always: size and the
    whole file's hash against the expected values: its CRC-32C when
    `expected_crc32c` is given (and no `expected_sha256`), else its
    sha256. Returns a `FileCheck`; never raises for damaged data."""
    check = _read_file(url, file, compression, features, vocabulary_sizes, index,
                       open_file=_open_url,
                       crc32c=expected_crc32c is not None and expected_sha256 is None)
    return _against_expected(check, compression, expected_size, expected_sha256,
                             expected_records, expected_crc32c)


def _open_url(url: str) -> BinaryIO:
    import fsspec  # here: `read_back`'s processes open local paths and never need it
    from fsspec.implementations.memory import MemoryFileSystem

    fs, fs_path = fsspec.core.url_to_fs(url)
    if isinstance(fs, MemoryFileSystem):
        # memory:// hands every opener of a file the one object it stores,
        # read position included: the checks of a shard and of its index
        # file read the index at once, and would move each other's reads.
        # Each opener gets its own view of the bytes instead.
        return io.BytesIO(fs.cat_file(fs_path))
    return fsspec.open(url, "rb").open()


def _open_local(path: str) -> BinaryIO:
    return open(path, "rb")


def _read_file(url: str, file: str, compression: str | None, features: Mapping | None,
               vocabulary_sizes: Mapping | None, index: tuple[str, str] | None = None, *,
               open_file: Callable[[str], BinaryIO], crc32c: bool = False) -> FileCheck:
    """What reading the file finds, before comparing it with what was expected.
    open_file: `_open_url`, or `_open_local` for a local path. crc32c: the
    whole file's CRC-32C is taken instead of its sha256."""
    check = FileCheck(file=file)
    try:
        handle = open_file(url)
    except FileNotFoundError:
        check.exists = False
        check.problems.append(Problem(file, "missing", code="missing"))
        return check
    except OSError as error:  # a directory in its place, permission denied
        check.exists = False
        check.problems.append(Problem(file, f"cannot be opened ({error.strerror or error})",
                                      code="missing"))
        return check
    reader = _HashingReader(handle, crc32c=crc32c)
    try:
        with handle:
            if compression is not None and shard_file_format(file) == "array_record":
                _check_array_record(url, reader, check, features, vocabulary_sizes or {})
            elif compression is not None:
                with _index_lines(index if features is not None else None) as lines:
                    _check_records(reader, file, compression, check, features,
                                   vocabulary_sizes or {}, lines)
            reader.drain()
    except OSError as error:  # an I/O error while reading
        check.problems.append(Problem(file, f"cannot be read past byte {reader.size} "
                                      f"({error.strerror or error})", offset=reader.size,
                                      code="framing"))
    check.size = reader.size
    if crc32c:
        check.crc32c = reader.digest.value
    else:
        check.sha256 = reader.digest.hexdigest()
    return check


def _against_expected(check: FileCheck, compression: str | None, expected_size: int | None,
                      expected_sha256: str | None, expected_records: int | None,
                      expected_crc32c: int | None = None) -> FileCheck:
    """`check` with the problems of a size, record count or whole-file hash
    (sha256, or the CRC-32C of a check that took one) other than expected
    added."""
    if not check.exists:
        return check
    framing_broken = any(p.offset is not None for p in check.problems)
    file = check.file
    if expected_size is not None and check.size != expected_size:
        check.problems.append(Problem(file, f"is {check.size} bytes, manifest says {expected_size}"
                                      + (" (truncated)" if check.size < expected_size else ""),
                                      code="size"))
    if expected_records is not None and not framing_broken and check.records != expected_records:
        check.problems.append(Problem(file, f"holds {check.records} records, manifest says "
                                      f"{expected_records}", code="count",
                                      record_index=min(check.records, expected_records)))
    hint = ""
    if compression is not None and not check.problems:
        # e.g. a flipped gzip header byte (mtime, flags): TFRecord
        # readers would not notice, but the bytes are not the ones built.
        hint = (f"; all {check.records} records read back intact, so the damage is in the "
                "container bytes (such as the gzip header)")
    if check.crc32c is not None:
        if expected_crc32c is not None and check.crc32c != expected_crc32c:
            check.problems.append(Problem(file, f"CRC-32C {check.crc32c:08x} does not match "
                                          f"the {expected_crc32c:08x} of the bytes its writer "
                                          f"wrote{hint}", code="crc32c"))
    elif expected_sha256 is not None and check.sha256 != expected_sha256:
        check.problems.append(Problem(file, f"sha256 {check.sha256[:16]}… does not match the "
                                      f"expected {expected_sha256[:16]}…{hint}", code="sha256"))
    return check


@dataclass(frozen=True)
class ReadBack:
    """A local shard read back before its expected size, CRC-32C and count
    were known (`read_back`): what reading found, and which file it read
    (device, inode, size, modification time)."""

    identity: tuple
    check: FileCheck


def file_identity(path: str) -> tuple | None:
    """(device, inode, size, modification time) of the local file at `path`,
    or None when it cannot be read."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)


def read_back(path: str, file: str, *, compression: str) -> ReadBack | None:
    """Reads the local shard at `path` as `check_file` does with an
    expected CRC-32C (framing, CRCs, count, the whole file's CRC-32C), to
    be judged later by `check_read_back`. None when the file changed or
    went while it was read (a writer that was retried replaced it): what
    was read is then no file's content."""
    before = file_identity(path)
    check = _read_file(path, file, compression, None, None, open_file=_open_local,
                       crc32c=True)
    after = file_identity(path)
    if before is None or before != after:
        return None
    return ReadBack(after, check)


def check_read_back(url: str, file: str, *, read: ReadBack, compression: str,
                    expected_size: int, expected_crc32c: int,
                    expected_records: int) -> FileCheck:
    """`check_file` of a local shard already read by `read_back`: what was
    read then is judged against the expected values, provided the file is
    still the one read (same device, inode, size and modification time; a
    shard is renamed into place once written, never changed in place).
    Otherwise it is read again."""
    import fsspec

    _, path = fsspec.core.url_to_fs(url)
    if file_identity(path) != read.identity:
        return check_file(url, file, compression=compression, expected_size=expected_size,
                          expected_crc32c=expected_crc32c, expected_records=expected_records)
    check = copy.deepcopy(read.check)
    return _against_expected(check, compression, expected_size, None, expected_records,
                             expected_crc32c)


def check_stored(url: str, file: str, *, stored: Mapping, compression: str,
                 expected_size: int, expected_sha256: str, expected_records: int) -> FileCheck:
    """Checks a shard whose records were checked as they were written
    (`transforms.shard_files`) without reading it again, when the object is
    still the one its writer checked: the size and version token (GCS
    generation, S3 ETag) the writer took from the store (`stored`). Its
    sha256 and record count are then those the writer measured.

    An object that is not that one (rewritten by a retried writer, or
    replaced) is read back in full (`check_file`): a retry's identical
    bytes pass, anything else is reported as reading finds it."""
    import fsspec

    from ...transforms.readers.inputs import fingerprint

    fs, fs_path = fsspec.core.url_to_fs(url)
    now = fingerprint(fs, fs_path)
    if now.get("missing"):
        check = FileCheck(file=file, exists=False)
        check.problems.append(Problem(file, "missing", code="missing"))
        return check
    if any(stored.get(key) != now.get(key) for key in set(stored) | set(now) if key != "path"):
        return check_file(url, file, compression=compression, expected_size=expected_size,
                          expected_sha256=expected_sha256, expected_records=expected_records)
    return FileCheck(file=file, size=now["size"], sha256=expected_sha256,
                     records=expected_records)


class _IndexLines:
    """An index file read a line at a time (`readline(limit)`), in blocks."""

    def __init__(self, raw: BinaryIO, file: str):
        self._raw = raw
        self.file = file
        self._buffer = b""
        self._at = 0  # the next line's first byte in _buffer

    def readline(self, limit: int) -> bytes:
        while True:
            end = self._buffer.find(b"\n", self._at, self._at + limit)
            if end >= 0 or len(self._buffer) - self._at >= limit:
                break  # a line, or `limit` bytes without one
            block = self._raw.read(_INDEX_BLOCK)
            if not block:
                break
            # The unread bytes and one more block: never more than a block and a line.
            self._buffer = self._buffer[self._at:] + block
            self._at = 0
        end = min(self._at + limit, len(self._buffer)) if end < 0 else end + 1
        line, self._at = self._buffer[self._at:end], end
        return line


_INDEX_BLOCK = 1 << 16


@contextlib.contextmanager
def _index_lines(index: tuple[str, str] | None) -> Iterator[_IndexLines | None]:
    """The index file `(url, name)` opened for `_check_records`; None when
    there is none to compare, or it cannot be opened (its own check says
    why)."""
    if index is None:
        yield None
        return
    url, file = index
    try:
        handle = _open_url(url)
    except OSError:
        yield None
        return
    with handle:
        yield _IndexLines(handle, file)


def _check_records(reader: _HashingReader, file: str, compression: str, check: FileCheck,
                   features: Mapping | None, vocabulary_sizes: Mapping,
                   index: _IndexLines | None = None) -> None:
    if features is not None:
        from .example_checks import record_problem
    match = tfrecord.IndexMatch(index.readline) if index is not None else None
    count = 0
    first_bad = None
    bad = 0
    try:
        if features is None:
            # Framing and CRCs only: no object per record.
            count = tfrecord.count_records(reader, path=file, compression=compression)
            records = ()
        else:
            # Views, not copies: a gzip shard of a few hundred KB can hold a
            # record of hundreds of MB, which is then held once.
            records = tfrecord.iter_record_views(reader, path=file, compression=compression)
        for position, record in enumerate(records):
            count = position + 1
            if match is not None:
                match.record(len(record) + tfrecord.FRAMING)
            problem = record_problem(record, features, vocabulary_sizes)
            if problem:
                bad += 1
                if first_bad is None:
                    first_bad = Problem(file, problem, record_index=position, code="example")
    except tfrecord.TFRecordError as error:
        count = error.record_index  # the intact records before the damage
        # Offsets of gzip shards count uncompressed bytes (what TFRecord
        # readers see); say so, or a user would seek the compressed file.
        suffix = " (byte offset in the uncompressed stream)" if compression == "gzip" else ""
        check.problems.append(Problem(file, error.problem + suffix,
                                      offset=error.offset, record_index=error.record_index,
                                      code="framing"))
    else:
        mismatch = match.finish() if match is not None else None
        if mismatch is not None:
            line, message = mismatch
            check.problems.append(Problem(index.file, f"{message} (an index that disagrees "
                                          f"with {file})", record_index=line - 1, code="index"))
    check.records = count
    add_example_problem(check, first_bad, bad)


def _check_array_record(url: str, reader: _HashingReader, check: FileCheck,
                        features: Mapping | None, vocabulary_sizes: Mapping) -> None:
    """`_check_records` for an ArrayRecord shard (`array_record_checks`):
    records counted and, with `features`, each checked; damage (a chunk's
    hash, an unreadable file) is a "framing" problem at its record."""
    from .array_record_checks import read_array_record
    from .example_checks import record_problem

    problem_of = None if features is None else (
        lambda record: record_problem(memoryview(record), features, vocabulary_sizes))
    found = read_array_record(url, check.file, reader, problem_of)
    check.records = found.records
    if found.damage is not None:
        message, record_index = found.damage
        check.problems.append(Problem(check.file, message, record_index=record_index,
                                      code="framing"))
    first_bad = None
    if found.first_bad is not None:
        position, message = found.first_bad
        first_bad = Problem(check.file, message, record_index=position, code="example")
    add_example_problem(check, first_bad, found.bad)


def add_example_problem(check: FileCheck, first_bad: Problem | None, bad: int) -> None:
    """Adds to `check` the first record that is not an Example of the
    manifest's features, saying how many there are when more than one."""
    if first_bad is not None:
        if bad > 1:
            first_bad = Problem(check.file, f"{first_bad.message} ({bad} records do not match "
                                "the manifest's features)", record_index=first_bad.record_index,
                                code="example")
        check.problems.append(first_bad)
