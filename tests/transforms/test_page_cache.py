"""Input read once is dropped from the page cache behind the read."""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import sys

import fsspec
import pytest

from recordforge.transforms import page_cache, table_readers

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


@linux_only
def test_read_file_once_leaves_no_page_of_the_file_cached(tmp_path):
    path = _cached_file(tmp_path, "image.bin", os.urandom(64 * _PAGE))
    assert all(_residency(path))
    local, local_path = fsspec.core.url_to_fs(path)
    page_cache.read_file_once(local, local_path)
    assert not any(_residency(path))


def _table(tmp_path) -> str:
    lines = [b"id,text"] + [b"%d,%s" % (i, b"x" * 200) for i in range(120_000)]
    return _cached_file(tmp_path, "table.csv", b"\n".join(lines) + b"\n")  # ~25 MB


@linux_only
def test_a_csv_range_reader_drops_its_range_and_keeps_the_others(tmp_path):
    path = _table(tmp_path)
    start, end = table_readers.csv_split_points(path, 8 << 20)[1:3]
    rows = list(table_readers.iter_csv(path, start=start, end=end))
    assert len(rows) > 35_000 and not any(isinstance(row, dict) for row in rows)
    resident = _residency(path)
    # The kernel drops whole cached folios (up to 2 MB with large folios)
    # inside the range; every page of the other ranges stays cached.
    margin = (2 << 20) // _PAGE
    first, last = start // _PAGE, end // _PAGE
    assert all(resident[:first]) and all(resident[last + 1:])
    inside = resident[first + margin:last - margin]
    assert inside and not any(inside)


@linux_only
def test_a_reader_stopped_early_drops_nothing(tmp_path):
    path = _table(tmp_path)
    reader = table_readers.iter_csv(path)
    next(reader)
    reader.close()
    assert all(_residency(path))
