"""Input read once is dropped from the page cache behind the read."""

from __future__ import annotations

import ctypes
import io
import json
import ctypes.util
import mmap
import os
import sys
import tempfile
import threading

import fsspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recordforge.transforms import page_cache
from recordforge.transforms.readers import csv as csv_reader

_PAGE = mmap.PAGESIZE


def _residency(path: str) -> list[bool]:
    """For each page of the file: is it in the page cache (mincore)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    size = os.path.getsize(path)
    pages = (size + _PAGE - 1) // _PAGE
    with open(path, "rb") as fileobj:
        mapped = mmap.mmap(fileobj.fileno(), 0, access=mmap.ACCESS_COPY)
    first_byte = ctypes.c_char.from_buffer(mapped)  # for the mapping's address
    try:
        vector = ctypes.create_string_buffer(pages)
        if libc.mincore(ctypes.addressof(first_byte), size, vector) != 0:
            raise OSError(ctypes.get_errno(), "mincore failed")
        return [bool(byte & 1) for byte in vector.raw]
    finally:
        del first_byte  # it holds the mapping open
        mapped.close()


def _cached_file(tmp_path, name: str, data: bytes) -> str:
    """A file whose pages are clean and all in the page cache."""
    path = str(tmp_path / name)
    with open(path, "wb") as fileobj:
        fileobj.write(data)
        fileobj.flush()
        os.fsync(fileobj.fileno())  # dirty pages cannot be dropped
    with open(path, "rb") as fileobj:
        fileobj.read()
    return path


linux_only = pytest.mark.skipif(not sys.platform.startswith("linux") or
                                not hasattr(os, "posix_fadvise"),
                                reason="page cache residency is read with Linux's mincore")

_NATIVE_READ_AHEAD = page_cache._native_read_ahead()


@pytest.fixture(params=["window", "thread"])
def read_ahead(request, monkeypatch):
    """`read_files_once` both ways: the Python window of advised files, and
    the extension's reading thread (where it is built)."""
    if request.param == "thread":
        if _NATIVE_READ_AHEAD is None:
            pytest.skip("the native extension's FileReadAhead is not built here")
    else:
        monkeypatch.setattr(page_cache, "_native_read_ahead", lambda: None)
    return request.param


@pytest.fixture
def python_window(monkeypatch):
    """`read_files_once` through the Python window of advised files."""
    monkeypatch.setattr(page_cache, "_native_read_ahead", lambda: None)


def test_read_file_once_returns_the_file_on_every_filesystem(tmp_path):
    data = os.urandom(3 * _PAGE + 17)
    path = tmp_path / "image.bin"
    path.write_bytes(data)
    local, local_path = fsspec.core.url_to_fs(str(path))
    assert page_cache.read_file_once(local, local_path) == data
    memory = fsspec.filesystem("memory")
    memory.pipe("/page_cache_test/image.bin", data)
    try:
        assert page_cache.read_file_once(memory, "/page_cache_test/image.bin") == data
    finally:
        memory.rm("/page_cache_test", recursive=True)
    with pytest.raises(FileNotFoundError):
        page_cache.read_file_once(local, str(tmp_path / "missing.bin"))


def test_read_file_once_names_what_it_cannot_read_as_open_does(tmp_path):
    local = fsspec.filesystem("file")
    for path in (str(tmp_path), str(tmp_path / "missing.bin")):
        with pytest.raises(OSError) as opened:
            open(path, "rb").close()
        with pytest.raises(OSError) as read:
            page_cache.read_file_once(local, path)
        assert (type(read.value), str(read.value)) == (type(opened.value), str(opened.value))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="a named pipe")
def test_read_file_once_reads_past_the_size_the_file_had(tmp_path):
    # A pipe's size is 0 and its bytes come in pieces: read to its end.
    path = str(tmp_path / "pipe")
    os.mkfifo(path)
    pieces = [os.urandom(5000), os.urandom(70_000), b"end"]

    def write():
        with open(path, "wb", buffering=0) as pipe:
            for piece in pieces:
                pipe.write(piece)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        assert page_cache.read_file_once(fsspec.filesystem("file"), path) == b"".join(pieces)
    finally:
        writer.join()


@linux_only
def test_read_file_once_leaves_no_page_of_the_file_cached(tmp_path):
    path = _cached_file(tmp_path, "image.bin", os.urandom(64 * _PAGE))
    assert all(_residency(path))
    local, local_path = fsspec.core.url_to_fs(path)
    page_cache.read_file_once(local, local_path)
    assert not any(_residency(path))


def _open_descriptors(root) -> int:
    """This process's descriptors open on files under `root`: the test's
    own files (other threads of the test process open and close theirs)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith(str(root) + os.sep)
        except OSError:
            pass  # closed meanwhile
    return count


def _read_ahead_threads() -> set[str]:
    """The ids of this process's threads named as the extension's read-ahead
    thread (other threads of the test process come and go)."""
    found = set()
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as comm:
                if comm.read().strip() == "read-ahead":
                    found.add(task)
        except OSError:
            pass  # ended meanwhile
    return found


@pytest.mark.parametrize("ahead_files", [1, 2, 64])
def test_read_files_once_reads_each_file_as_read_file_once_does(tmp_path, monkeypatch,
                                                                ahead_files, read_ahead):
    monkeypatch.setattr(page_cache, "READ_AHEAD_FILES", ahead_files)
    monkeypatch.setattr(page_cache, "READ_AHEAD_BYTES", 3 * _PAGE)
    paths = []
    for index, size in enumerate([0, 17, 2 * _PAGE + 5, 5 * _PAGE, 1]):
        path = tmp_path / f"{index}.bin"
        path.write_bytes(os.urandom(size))
        paths.append(str(path))
    paths[2:2] = [str(tmp_path / "missing.bin"), str(tmp_path)]  # one gone, one a folder
    memory = fsspec.filesystem("memory")
    for path in paths:
        if os.path.isfile(path):
            memory.pipe(path, open(path, "rb").read())
    for fs in (fsspec.filesystem("file"), memory):
        got = []
        for path, read in zip(paths, page_cache.read_files_once(fs, paths)):
            try:
                got.append(read())
            except Exception as exc:  # as read_file_once raises it
                got.append((type(exc), str(exc)))
        expected = []
        for path in paths:
            try:
                expected.append(page_cache.read_file_once(fs, path))
            except Exception as exc:
                expected.append((type(exc), str(exc)))
        assert got == expected
        assert sum(isinstance(value, tuple) for value in got) == 2
    memory.rm(str(tmp_path), recursive=True)


def test_read_files_once_reads_a_file_whole_that_changed_size_after_it_was_opened(
        tmp_path, python_window):
    # The size taken when a file is opened ahead only says how much to read
    # in one call: a file that grew or shrank since is read as it is now.
    paths = [str(tmp_path / f"{index}.bin") for index in range(3)]
    for path in paths:
        with open(path, "wb") as out:
            out.write(b"x" * 1000)
    reads = page_cache.read_files_once(fsspec.filesystem("file"), paths)
    first = next(reads)  # the window, all three files, is opened here
    with open(paths[1], "ab") as out:
        out.write(b"y" * 5000)
    with open(paths[2], "r+b") as out:
        out.truncate(10)
    assert first() == b"x" * 1000
    assert next(reads)() == b"x" * 1000 + b"y" * 5000
    assert next(reads)() == b"x" * 10


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="open descriptors from /proc")
def test_read_files_once_closes_the_files_it_did_not_read(tmp_path, python_window):
    paths = []
    for index in range(10):
        (tmp_path / f"{index}.bin").write_bytes(b"x" * index)
        paths.append(str(tmp_path / f"{index}.bin"))
    local = fsspec.filesystem("file")
    reads = page_cache.read_files_once(local, paths)
    assert next(reads)() == b""
    next(reads)  # handed out, not read
    assert _open_descriptors(tmp_path) == 9  # the window's files, opened ahead
    assert next(reads)() == b"xx"
    reads.close()
    assert _open_descriptors(tmp_path) == 0
    assert [read() for read in page_cache.read_files_once(local, paths)] == [
        b"x" * index for index in range(10)]
    assert _open_descriptors(tmp_path) == 0


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="a named pipe")
def test_read_files_once_leaves_a_named_pipe_to_its_own_read(tmp_path, read_ahead):
    path = str(tmp_path / "pipe")
    os.mkfifo(path)
    (tmp_path / "after.bin").write_bytes(b"after")

    def write():
        with open(path, "wb", buffering=0) as pipe:
            pipe.write(b"piped")

    reads = page_cache.read_files_once(fsspec.filesystem("file"),
                                       [path, str(tmp_path / "after.bin")])
    read_pipe = next(reads)  # opening the window did not wait for a writer
    writer = threading.Thread(target=write)
    writer.start()
    try:
        assert read_pipe() == b"piped"
    finally:
        writer.join()
    assert next(reads)() == b"after"


@linux_only
def test_read_files_once_leaves_no_page_of_the_files_cached(tmp_path, read_ahead):
    paths = [_cached_file(tmp_path, f"{index}.bin", os.urandom(16 * _PAGE))
             for index in range(4)]
    local = fsspec.filesystem("file")
    for read in page_cache.read_files_once(local, paths):
        read()
    assert not any(any(_residency(path)) for path in paths)


def _table(tmp_path) -> str:
    lines = [b"id,text"] + [b"%d,%s" % (i, b"x" * 200) for i in range(120_000)]
    return _cached_file(tmp_path, "table.csv", b"\n".join(lines) + b"\n")  # ~25 MB


@linux_only
def test_a_csv_range_reader_drops_its_range_and_keeps_the_others(tmp_path):
    path = _table(tmp_path)
    start, end = csv_reader.csv_split_points(path, 8 << 20)[1:3]
    rows = list(csv_reader.iter_csv(path, start=start, end=end))
    assert len(rows) > 35_000 and not any(isinstance(row, dict) for row in rows)
    resident = _residency(path)
    # The kernel drops whole cached folios (up to 2 MB with large folios)
    # inside the range; every page of the other ranges stays cached.
    margin = (2 << 20) // _PAGE
    first, last = start // _PAGE, end // _PAGE
    assert all(resident[:first]) and all(resident[last + 1:])
    inside = resident[first + margin:last - margin]
    assert inside and not any(inside)


def _parquet_table(tmp_path, groups: int = 4, group_rows: int = 1500) -> str:
    """A cached Parquet file of `groups` row groups of ~6 MB each
    (incompressible binary values, a dictionary-encoded label, a number)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = groups * group_rows
    table = pa.table({"id": pa.array(range(rows), pa.int64()),
                      "data": pa.array([os.urandom(4000) for _ in range(rows)], pa.binary()),
                      "label": pa.array([f"class_{i % 7}" for i in range(rows)])})
    path = str(tmp_path / "table.parquet")
    pq.write_table(table, path, row_group_size=group_rows)
    with open(path, "rb") as fileobj:
        return _cached_file(tmp_path, "cached.parquet", fileobj.read())


def test_row_group_spans_tile_the_file_between_its_magic_and_its_footer(tmp_path):
    import pyarrow.parquet as pq
    from recordforge.transforms.readers.parquet import row_group_span

    path = _parquet_table(tmp_path)
    with open(path, "rb") as fileobj:
        data = fileobj.read()
    # A Parquet file: "PAR1", the row groups' column chunks, the footer,
    # its length (4 bytes, little-endian), "PAR1".
    footer_start = len(data) - 8 - int.from_bytes(data[-8:-4], "little")
    metadata = pq.ParquetFile(path).metadata
    spans = [row_group_span(metadata.row_group(group)) for group in range(metadata.num_row_groups)]
    assert len(spans) == 4
    assert spans[0][0] == len(b"PAR1")
    for (offset, length), (next_offset, _) in zip(spans, spans[1:]):
        assert offset + length == next_offset
    assert spans[-1][0] + spans[-1][1] == footer_start


@linux_only
def test_a_parquet_reader_drops_the_row_groups_it_read_and_keeps_the_others(tmp_path):
    import pyarrow.parquet as pq
    from recordforge.transforms.readers import parquet as parquet_reader

    path = _parquet_table(tmp_path)
    rows = list(parquet_reader.iter_parquet(path, row_groups=[1, 2]))
    assert len(rows) == 3000 and not any(isinstance(row, dict) for row in rows)
    metadata = pq.ParquetFile(path).metadata
    start = parquet_reader.row_group_span(metadata.row_group(1))[0]
    offset, length = parquet_reader.row_group_span(metadata.row_group(2))
    end = offset + length
    resident = _residency(path)
    margin = (2 << 20) // _PAGE  # whole cached folios, as for the CSV ranges
    first, last = start // _PAGE, end // _PAGE
    # The other row groups and the footer (every reader reads it) stay cached.
    assert all(resident[:first]) and all(resident[last + 1:])
    inside = resident[first + margin:last - margin]
    assert inside and not any(inside)


def _avro_bytes(rows: list[dict]) -> bytes:
    import fastavro

    schema = {"type": "record", "name": "row", "fields": [
        {"name": "id", "type": "long"}, {"name": "text", "type": "string"}]}
    out = io.BytesIO()
    fastavro.writer(out, schema, rows)
    return out.getvalue()


def _tfrecord_bytes(rows: list[dict]) -> bytes:
    from recordforge.schemas.example import encode_example
    from recordforge.transforms.tfrecord.framing import frame_records

    return frame_records([encode_example({"id": [row["id"]], "text": [row["text"].encode()]})
                          for row in rows])


# Each whole-file format: (file name, its bytes of `rows`, its reader).
_WHOLE_FILE_FORMATS = {
    "avro": ("table.avro", _avro_bytes, "avro"),
    "json": ("table.json", lambda rows: json.dumps(rows).encode(), "json_array"),
    "tfrecord": ("table.tfrecord", _tfrecord_bytes, "tfrecords"),
}


@linux_only
@pytest.mark.parametrize("kind", sorted(_WHOLE_FILE_FORMATS))
def test_a_file_read_whole_leaves_no_page_cached(tmp_path, kind):
    import importlib

    name, make, module = _WHOLE_FILE_FORMATS[kind]
    rows = [{"id": i, "text": "x" * 300} for i in range(30_000)]  # ~9 MB
    path = _cached_file(tmp_path, name, make(rows))
    reader = importlib.import_module(f"recordforge.transforms.readers.{module}")
    read = list(getattr(reader, f"iter_{module}")(path))
    assert [row.values["id"] for row in read] in ([row["id"] for row in rows],
                                                   [[row["id"]] for row in rows])
    assert not any(_residency(path))
    # Stopped early, a reader leaves the file as it found it.
    _cached_file(tmp_path, name, make(rows))
    early = getattr(reader, f"iter_{module}")(path)
    next(early)
    early.close()
    assert all(_residency(path))


@linux_only
def test_a_reader_stopped_early_drops_nothing(tmp_path):
    path = _table(tmp_path)
    reader = csv_reader.iter_csv(path)
    next(reader)
    reader.close()
    assert all(_residency(path))


def test_write_behind_writes_every_byte_in_order(tmp_path):
    chunks = [os.urandom(n) for n in (1, _PAGE, 3 * _PAGE + 5, 10_000, 0, 70_001)]
    path = tmp_path / "shard.bin"
    with open(path, "wb") as fileobj:
        writer = page_cache.WriteBehind(fileobj, window=2 * _PAGE)
        for chunk in chunks:
            writer.write(chunk)
        writer.finish(durable=False)
    assert path.read_bytes() == b"".join(chunks)


def test_write_behind_writes_to_files_without_a_descriptor():
    buffer = io.BytesIO()
    writer = page_cache.WriteBehind(buffer, window=4)
    for _ in range(10):
        writer.write(b"abc")
    writer.finish()
    assert buffer.getvalue() == b"abc" * 10


def test_a_durable_finish_syncs_the_file_before_it_is_closed(tmp_path, monkeypatch):
    synced = []
    real_sync = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (synced.append(os.fstat(fd).st_size),
                                                     real_sync(fd)))
    with open(tmp_path / "shard.bin", "wb") as fileobj:
        writer = page_cache.WriteBehind(fileobj)
        writer.write(b"x" * 1000)  # still in Python's buffer: finish must flush it first
        writer.finish()
        assert synced == [1000]
        page_cache.WriteBehind(fileobj).finish(durable=False)
    assert synced == [1000]


@linux_only
def test_a_durable_finish_leaves_no_page_of_the_file_cached(tmp_path):
    path = str(tmp_path / "shard.bin")
    with open(path, "wb") as fileobj:
        writer = page_cache.WriteBehind(fileobj, window=16 * _PAGE)
        for _ in range(64):
            writer.write(os.urandom(5 * _PAGE))
        writer.finish()
        assert not any(_residency(path))
    with open(path, "rb") as fileobj:
        assert len(fileobj.read()) == 64 * 5 * _PAGE


@linux_only
def test_verification_reads_a_shard_once_and_leaves_none_of_it_cached(tmp_path):
    from recordforge.pipelines.publish import file_checks
    from recordforge.transforms import tfrecord

    records = [os.urandom(3000 + i) for i in range(4000)]  # ~12 MB: more than one drop
    path = tmp_path / "train-00000-of-00001.tfrecord"
    path.write_bytes(tfrecord.frame_records(records))
    path = _cached_file(tmp_path, path.name, path.read_bytes())
    assert all(_residency(path))
    check = file_checks.check_file(path, "train-00000-of-00001.tfrecord", compression="none",
                              expected_records=len(records))
    assert check.records == len(records) and not check.problems
    assert not any(_residency(path))


def _outcome(read):
    try:
        return read()
    except Exception as exc:  # as read_file_once raises it
        return (type(exc), str(exc))


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(0, 3 * _PAGE), max_size=12),
       calls=st.lists(st.tuples(st.booleans(), st.booleans()), min_size=12, max_size=12),
       budget=st.integers(0, 4 * _PAGE))
def test_the_reading_thread_gives_each_file_read_whichever_are_skipped_or_read_again(
        sizes, calls, budget):
    if _NATIVE_READ_AHEAD is None:
        pytest.skip("the native extension's FileReadAhead is not built here")
    local = fsspec.filesystem("file")
    with tempfile.TemporaryDirectory() as folder:
        paths = []
        for index, size in enumerate(sizes):
            paths.append(os.path.join(folder, f"{index}.bin"))
            with open(paths[-1], "wb") as out:
                out.write(os.urandom(size))
        original = page_cache.READ_AHEAD_BYTES
        page_cache.READ_AHEAD_BYTES = budget
        try:
            for path, read, (call, again) in zip(paths, page_cache.read_files_once(local, paths),
                                                 calls):
                if call:
                    assert _outcome(read) == _outcome(lambda: page_cache.read_file_once(local, path))
                if again:  # its turn passed or taken: read on its own, the same bytes
                    assert _outcome(read) == _outcome(lambda: page_cache.read_file_once(local, path))
        finally:
            page_cache.READ_AHEAD_BYTES = original


@pytest.mark.skipif(not os.path.exists("/proc/self/mem"), reason="a file whose read fails")
def test_a_read_that_fails_raises_as_read_file_once_does(tmp_path, read_ahead):
    # /proc/self/mem is a regular file that opens, and whose read at offset 0 fails (EIO).
    (tmp_path / "after.bin").write_bytes(b"after")
    paths = ["/proc/self/mem", str(tmp_path / "after.bin")]
    local = fsspec.filesystem("file")
    with pytest.raises(OSError) as expected:
        page_cache.read_file_once(local, paths[0])
    reads = page_cache.read_files_once(local, paths)
    with pytest.raises(OSError) as raised:
        next(reads)()
    assert (type(raised.value), str(raised.value)) == (type(expected.value), str(expected.value))
    assert next(reads)() == b"after"


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="threads and descriptors from /proc")
def test_closing_the_reads_early_stops_the_reading_thread_and_leaves_no_file_open(tmp_path):
    if _NATIVE_READ_AHEAD is None:
        pytest.skip("the native extension's FileReadAhead is not built here")
    # More than the thread may hold ahead (READ_AHEAD_BYTES): it waits for
    # room, so it is still there when looked for (with less, it would read
    # every file and end at once).
    size = 1 << 20
    count = 2 * page_cache.READ_AHEAD_BYTES // size + 2
    paths = []
    for index in range(count):
        (tmp_path / f"{index}.bin").write_bytes(b"x" * size)
        paths.append(str(tmp_path / f"{index}.bin"))
    threads = _read_ahead_threads()
    reads = page_cache.read_files_once(fsspec.filesystem("file"), paths)
    assert next(reads)() == b"x" * size
    started = _read_ahead_threads() - threads
    assert len(started) == 1
    reads.close()
    assert not started & _read_ahead_threads()
    assert _open_descriptors(tmp_path) == 0


def test_without_a_thread_to_be_had_the_files_are_read_on_the_callers(tmp_path, monkeypatch):
    def no_thread(paths, budget, window):
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(page_cache, "_native_read_ahead", lambda: no_thread)
    paths = []
    for index in range(3):
        (tmp_path / f"{index}.bin").write_bytes(b"x" * index)
        paths.append(str(tmp_path / f"{index}.bin"))
    reads = page_cache.read_files_once(fsspec.filesystem("file"), paths)
    assert [read() for read in reads] == [b"", b"x", b"xx"]
