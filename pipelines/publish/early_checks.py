"""Reading a local build's shards back while the pipeline still writes the others.

Publishing reads every staged shard of a local build back before it commits
(`verify`). Done after the pipeline, that is seconds of one machine's time
at the end of every build, while a build with one worker leaves a core idle
all along. `EarlyShardChecks` watches the staging directory as the pipeline
runs and reads each shard back (`file_checks.read_back`, in a process: a
record's CRCs are Python work) as soon as it appears under its final name,
which a shard gets only once it is written and synced
(`transforms.shard_files`). Verification then judges what was read against
the manifest (`file_checks.check_read_back`) instead of reading the shard
again, provided the file is still the one that was read; a shard a retried
writer put in place since is read again. Nothing is decided here: a shard
read early passes or fails exactly as if it were read at the end.

Every reader started costs a Python start-up (about 0.07 CPU-s, what
reading some 60 MB of shards back costs), and one reader reads a shard in a
fraction of the time its writer took. So the shards that appeared since the
last look wait until no reading is under way, then go to one reader
together; only a backlog of `TASK_BYTES` or more (a faster writer, or many
writers; or the shards left at the end) is handed out at once, in tasks of
`TASK_BYTES`, which start another reader where none is free.

Whether a build is large enough to read back by processes is known for sure
only from its shards: a build's input may be small for its shards (182 MB
of Parquet, whose columns are compressed, make 650 MB of shards). Such a
build's checks (`start_bytes`) read nothing until the shards seen make
that many bytes; a build whose shards never do is left to verification,
which reads it in threads, no process started.
"""

from __future__ import annotations

import concurrent.futures
import os
import threading

from ...transforms.layout import parse_shard_file_name
from .file_checks import ReadBack, file_identity, read_back
from .reading_processes import reading_pool

__all__ = ["EarlyShardChecks", "TASK_BYTES"]

# The shards handed to a reader at once, at least, but for the last: reading
# them takes a few times a reader's start-up, so that a second reader is
# started only for work that makes up for it.
TASK_BYTES = 128 << 20


class EarlyShardChecks:
    """Reads back the shards that appear in a local `directory`, `workers`
    at a time, every `interval` seconds, from `start` until `results`, once
    the shards seen hold `start_bytes` (0: from the first).
    compression: the shards' ("gzip" or "none")."""

    def __init__(self, directory: str, compression: str, *, workers: int = 1,
                 interval: float = 0.5, start_bytes: int = 0):
        self._directory = directory
        self._compression = compression
        self._workers = workers
        self._interval = interval
        self._start_bytes = start_bytes
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        # name -> (identity, a task reading it: its result maps names to readings)
        self._futures: dict[str, tuple[tuple, concurrent.futures.Future]] = {}
        self._waiting: dict[str, tuple[str, tuple]] = {}  # name -> (path, identity)
        self._reading: set[concurrent.futures.Future] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "EarlyShardChecks":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._watch, name="early-shard-checks",
                                        daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.wait(self._interval):
            self._look()
            if not self._large_enough():
                continue
            self._reading = {future for future in self._reading if not future.done()}
            if not self._reading or self._waiting_bytes() >= TASK_BYTES:
                self._submit(self._tasks())

    def _large_enough(self) -> bool:
        """Whether the shards seen make a build worth reading back by
        processes (nothing is handed out before, so all seen still wait)."""
        if self._waiting_bytes() >= self._start_bytes:
            self._start_bytes = 0
        return self._start_bytes == 0

    def _waiting_bytes(self) -> int:
        return sum(identity[2] for _, identity in self._waiting.values())

    def _look(self) -> None:
        """Notes the shards that appeared, or changed since they were
        handed out, as waiting."""
        try:
            entries = list(os.scandir(self._directory))
        except OSError:  # not there yet, or removed by an aborted build
            return
        for entry in entries:
            if parse_shard_file_name(entry.name) is None:
                continue
            known = self._futures.get(entry.name)
            if known is not None and known[0][1] == entry.inode():
                # Still the file handed out (the listing gives its inode; a
                # writer puts a new file in place): no stat per shard and
                # look, which would grow with the shards times the looks.
                # A change in place is found by verification, which
                # compares the whole identity (`file_checks.check_read_back`).
                self._waiting.pop(entry.name, None)
                continue
            identity = file_identity(entry.path)
            if identity is None:  # gone since the listing
                continue
            if known is not None and known[0] == identity:
                self._waiting.pop(entry.name, None)
            else:
                self._waiting[entry.name] = (entry.path, identity)

    def _submit(self, tasks: list[list[str]]) -> None:
        """Hands each of `tasks` (names of waiting shards) to a reader."""
        for names in tasks:
            if not names:
                continue
            if self._pool is None:  # started by the first task: a small build starts none
                self._pool = reading_pool(self._workers)
            shards = [(self._waiting[name][0], name) for name in names]
            try:
                future = self._pool.submit(_read_backs, shards, self._compression)
            except RuntimeError:  # the pool is shutting down
                return
            for name in names:
                self._futures[name] = (self._waiting.pop(name)[1], future)
            self._reading.add(future)

    def _tasks(self) -> list[list[str]]:
        """The waiting shards in tasks of `TASK_BYTES` or more (the last
        may hold less)."""
        tasks: list[list[str]] = [[]]
        size = 0
        for name, (_, identity) in self._waiting.items():
            if size >= TASK_BYTES:
                tasks.append([])
                size = 0
            tasks[-1].append(name)
            size += identity[2]
        return tasks

    def results(self) -> dict[str, ReadBack]:
        """Stops watching, reads back the shards not seen yet, waits and
        returns file name -> what reading it found (files that changed while
        they were read are left out: verification reads them)."""
        self._stop_watching()
        self._look()
        if not self._large_enough():  # verification reads them, in threads
            self.close()
            return {}
        if self._waiting_bytes() < TASK_BYTES:  # for the readers there are, once free
            concurrent.futures.wait(self._reading)
        self._submit(self._tasks())
        found = {}
        for name, (_, future) in self._futures.items():
            try:
                read = future.result()[name]
            except Exception:  # a lost process: verification reads the file itself
                continue
            if read is not None:
                found[name] = read
        self.close()
        return found

    def _stop_watching(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def close(self) -> None:
        """Stops watching and reading (what is being read is abandoned)."""
        self._stop_watching()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


def _read_backs(shards: list[tuple[str, str]], compression: str) -> dict[str, ReadBack | None]:
    """`file_checks.read_back` of each ``(path, file name)`` of `shards`, in
    a reader: file name -> what it gives."""
    return {name: read_back(path, name, compression=compression) for path, name in shards}
