"""Bytes read once or written for good leave the page cache behind the reader or writer.

A build reads each input byte once and then writes about twice as many
(spill runs, shards). Keeping input pages cached helps nothing and pushes
other pages out; dropping them as soon as they are read hands their memory
to the build's own writes. That matters most on virtual machines whose host
takes free guest memory back: writing into memory the guest freed a moment
ago is several times cheaper than into memory it must first get back from
the host (here, reading 1 GB and writing 1 GB took 0.4 s of kernel time with
the read bytes dropped, 2.9 s without). Hadoop's datanodes do the same
(``dfs.datanode.drop.cache.behind.reads``).

Shards are the other side: written once, read back once by verification,
then left for a later training job. `WriteBehind` hands each few MB of a
shard to the disk as soon as they are written and drops them from the
cache once they are on disk, so a shard's pages are reused for its next
bytes instead of growing the cache by its whole size, and `finish` makes
the file durable (fdatasync) before it is renamed to its final name, so a
published dataset survives a crash of the machine, not only of the build.
PostgreSQL bounds its dirty data the same way (``backend_flush_after``).
On the development VM writing 1 GB and reading it back took 0.9-1.1 s
this way against 2.6-4.6 s through the cache.

It is advice only, and only for local files: the bytes stay on disk, so a
retried read is correct, just not served from memory.

Many small files read one after another (an image build's images) are
advised the other way first: `read_files_once` asks the kernel to read the
next few MB of files ahead (``POSIX_FADV_WILLNEED``) before it reads the
first of them, so their reads reach the disk together instead of one
request, one wait and one wake-up per file. On the development VM that
took reading 3,000 images of ~45 KB from the disk from 83-92 to 45-50 us
of CPU per image, and the wall time about by half (windows of 8 to 64
files measured alike). Where the native extension runs, a thread of its
own does that window's opening, advice and reads, so the reading runs on
another core than the checking.
"""

from __future__ import annotations

import collections
import io
import os
import stat
from typing import TYPE_CHECKING, BinaryIO, Callable, Iterator, Sequence

if TYPE_CHECKING:  # the processes that read shards back use `drop_behind` without fsspec
    import fsspec

__all__ = ["READ_AHEAD_BYTES", "READ_AHEAD_FILES", "WriteBehind", "drop_behind",
           "read_file_once", "read_files_once", "write_durably"]

# How far `read_files_once` advises files ahead of the one it reads: at most
# this many files (each holds a descriptor until it is read) and about this
# many bytes of them (what the page cache holds of files not yet read).
READ_AHEAD_FILES = 16
READ_AHEAD_BYTES = 8 << 20


def drop_behind(fileobj: BinaryIO, offset: int, length: int) -> None:
    """Advises the kernel that bytes ``[offset, offset + length)`` of the file
    under `fileobj` (length 0: to its end) will not be read again. Does
    nothing for objects without a file descriptor (object stores) or where
    the advice is not supported."""
    try:
        fd = fileobj.fileno()
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return
    _drop(fd, offset, length)


def _drop(fd: int, offset: int, length: int) -> None:
    _advise(fd, offset, length, "POSIX_FADV_DONTNEED")


def _advise(fd: int, offset: int, length: int, advice: str) -> None:
    """posix_fadvise's `advice` (its name in `os`), where there is one."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is None:
        return
    try:
        advise(fd, offset, length, getattr(os, advice))
    except (OSError, ValueError):
        pass


def read_file_once(fs: fsspec.AbstractFileSystem, path: str) -> bytes:
    """The whole file at `path` (a path of `fs`), dropped from the page cache
    when it is local. Raises what `fs.cat_file` raises for a missing or
    unreadable file."""
    from fsspec.implementations.local import LocalFileSystem  # loaded with `fs`'s fsspec

    if not isinstance(fs, LocalFileSystem):
        return fs.cat_file(path)
    # The descriptor itself, not a file object: an image build reads every
    # image here, and a file object takes twice the system calls (its size,
    # its position, a last read to find the end) and more Python around them.
    return _read_and_drop(path, os.open(path, os.O_RDONLY | os.O_CLOEXEC))


def _read_and_drop(path: str, fd: int, size: int | None = None) -> bytes:
    """The whole file open at `fd` (`path`: its name for errors), dropped
    from the page cache; closes `fd`. size: the file's size when it was
    opened, if known (None: asked here); only a guess of how much to read
    in one call, so a file that changed size since is still read whole."""
    try:
        if size is None:
            size = os.fstat(fd).st_size
        data = os.read(fd, size + 1)
        if len(data) != size:  # the file changed size, or a short read
            data = b"".join(_to_the_end(fd, data))
    except OSError as exc:  # with the path, as `open` gives it (reading a directory)
        raise OSError(exc.errno, exc.strerror, path) from None
    else:
        _drop(fd, 0, 0)
    finally:
        os.close(fd)
    return data


def _to_the_end(fd: int, first: bytes):
    yield first
    while chunk := os.read(fd, 1 << 20):
        yield chunk


def read_files_once(fs: fsspec.AbstractFileSystem, paths: Sequence[str]
                    ) -> Iterator[Callable[[], bytes]]:
    """For each of `paths` in turn, a function that reads that file as
    `read_file_once` does (its bytes, or what `read_file_once` raises).

    Local files are read ahead. Where the native extension runs, a thread
    of its own reads them in order, whole, up to `READ_AHEAD_BYTES` ahead
    of the caller (`_read_on_a_thread`). Otherwise they are opened and
    advised to the kernel a window at a time (`READ_AHEAD_FILES`,
    `READ_AHEAD_BYTES`) before the first of the window is read, and read
    when their function is called; descriptors of files not read are
    closed when the caller moves on or closes the iterator. Either way a
    file that cannot be opened ahead, or is not a regular file, is left to
    its own read, which opens it and raises as `read_file_once` does."""
    from fsspec.implementations.local import LocalFileSystem  # loaded with `fs`'s fsspec

    if not isinstance(fs, LocalFileSystem):
        for path in paths:
            yield lambda path=path: read_file_once(fs, path)
        return
    ahead = _start_reading_thread(paths)
    if ahead is not None:
        yield from _read_on_a_thread(fs, paths, ahead)
        return
    # (descriptor opened and advised, the file's size then) or None per
    # path of the window not yet handed out; `held`: that of the path
    # handed out last, until its read takes it.
    window: collections.deque[tuple[int, int] | None] = collections.deque()
    held: list[tuple[int, int]] = []
    after_window = 0
    try:
        for path in paths:
            if not window:
                after_window = _open_ahead(paths, after_window, window)
            opened = window.popleft()
            held = [] if opened is None else [opened]

            def read(path=path, held=held) -> bytes:
                if not held:
                    return read_file_once(fs, path)
                # The size from opening it ahead: no second fstat per image
                return _read_and_drop(path, *held.pop())

            yield read
            while held:  # not read
                os.close(held.pop()[0])
    finally:
        for opened in (*held, *window):
            if opened is not None:
                os.close(opened[0])


def _native_read_ahead():
    """The extension's `FileReadAhead`, or None where it does not run."""
    from ..schemas.native import kernels

    native = kernels()
    return None if native is None else native.FileReadAhead


def _start_reading_thread(paths: Sequence[str]):
    """The extension's `FileReadAhead` reading `paths`, or None where the
    extension does not run or no thread can be started (the window then
    reads them on the caller's thread)."""
    reader_thread = _native_read_ahead()
    if reader_thread is None:
        return None
    try:
        return reader_thread(list(paths), READ_AHEAD_BYTES, READ_AHEAD_FILES)
    except OSError:  # no thread to be had (the process's limit)
        return None


def _read_on_a_thread(fs: fsspec.AbstractFileSystem, paths: Sequence[str], ahead
                      ) -> Iterator[Callable[[], bytes]]:
    """`read_files_once` of local `paths` by `ahead` (the extension's
    `FileReadAhead` reading them). Its thread does each file's system
    calls and copies without Python's lock, so an image build reads its
    next images on another core while it checks one (a Python thread would
    wait for the lock between each call). It gives a file's bytes, read to
    the end and dropped from the cache as `_read_and_drop` reads, its
    read's errno, or None for a file it left (not opened, not regular, or
    its turn passed)."""
    try:
        for index, path in enumerate(paths):
            def read(path=path, index=index) -> bytes:
                got = ahead.take(index)
                if got is None:
                    return read_file_once(fs, path)
                if isinstance(got, int):  # as `_read_and_drop` raises it
                    raise OSError(got, os.strerror(got), path)
                return got

            yield read
    finally:
        ahead.close()


def _open_ahead(paths: Sequence[str], first: int, window: collections.deque) -> int:
    """Opens ``paths[first:]`` up to the read-ahead limits into `window`
    (``(descriptor, size)``, advised, or None per path) and returns the
    next path's index."""
    held_bytes = 0
    index = first
    while index < len(paths) and len(window) < READ_AHEAD_FILES and (
            index == first or held_bytes < READ_AHEAD_BYTES):
        fd = None
        try:
            # Non-blocking: a named pipe is not waited for here (it is
            # left to its own read).
            fd = os.open(paths[index], os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
            status = os.fstat(fd)
            if stat.S_ISREG(status.st_mode):
                os.set_blocking(fd, True)
                _advise(fd, 0, 0, "POSIX_FADV_WILLNEED")
                held_bytes += status.st_size
            else:
                os.close(fd)
                fd = None
        except OSError:
            if fd is not None:
                os.close(fd)
            fd = None
        window.append(None if fd is None else (fd, status.st_size))
        index += 1
    return index


class WriteBehind:
    """A writable file that keeps at most about two `window`s of itself in
    the page cache: written bytes are handed to the disk a window at a
    time, and a window is dropped from the cache once the disk has it.

    Wraps `fileobj` (any object with ``write`` and ``flush``); for a local
    file (one with a ``fileno``) `finish` also flushes it to stable storage.
    Objects without a file descriptor (object stores) are written as they
    are.
    """

    def __init__(self, fileobj: BinaryIO, window: int = 8 << 20):
        self._file = fileobj
        self._window = window
        try:
            self._fd = fileobj.fileno()
        except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
            self._fd = None
        self._advised = self._fd is not None and hasattr(os, "posix_fadvise")
        self._written = 0  # bytes written so far
        self._handed = 0  # bytes [0, _handed) were handed to the disk
        self._dropped = 0  # bytes [0, _dropped) were dropped from the cache

    @property
    def file(self) -> BinaryIO:
        """The file written to."""
        return self._file

    @property
    def window(self) -> int:
        """The advice's window in bytes; 0 where the file takes no advice."""
        return self._window if self._advised else 0

    def wrote(self, length: int) -> None:
        """Counts `length` bytes written straight to the file's descriptor
        by a writer that gave them this advice itself, a `window` at a time
        (the run kernel: `writer.run_kernel`); `finish` advises them again,
        dropping windows the disk had not finished when they were advised."""
        self._written += length

    def write(self, data) -> None:
        self._file.write(data)
        self._written += len(data)
        if self._advised and self._written - self._handed >= self._window:
            self._hand_to_disk()

    def _hand_to_disk(self) -> None:
        self._file.flush()  # Python's buffer to the kernel
        # DONTNEED starts writeback of dirty pages and drops clean ones: the
        # new window goes to the disk, the one before it (on disk by now,
        # unless the disk is slower than the writer) leaves the cache. Pages
        # still being written stay cached, as they would without advice.
        self._advise(self._handed, self._written - self._handed)
        self._advise(self._dropped, self._handed - self._dropped)
        self._dropped, self._handed = self._handed, self._written

    def _advise(self, offset: int, length: int) -> None:
        try:
            os.posix_fadvise(self._fd, offset, length, os.POSIX_FADV_DONTNEED)
        except OSError:  # a filesystem that takes no advice: write as usual
            self._advised = False

    def finish(self, durable: bool = True) -> None:
        """Hands the rest of the file to the disk; call it before closing
        (the file object stays open). durable: also waits until the disk has
        every byte (fdatasync; raises OSError when it cannot take them) and
        drops the whole file from the cache. Temporary files, read back soon
        and then deleted, need not wait."""
        if self._advised:
            self._hand_to_disk()
        else:
            self._file.flush()
        if durable and self._fd is not None:
            getattr(os, "fdatasync", os.fsync)(self._fd)
            if self._advised:
                self._advise(0, 0)


def write_durably(fileobj: BinaryIO, data: bytes) -> None:
    """Writes `data` to `fileobj` and, for a local file, waits until the disk
    has it (see `WriteBehind.finish`); for small files renamed into a
    version, like its shards."""
    on_disk = WriteBehind(fileobj)
    on_disk.write(data)
    on_disk.finish()
