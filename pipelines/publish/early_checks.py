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
"""

from __future__ import annotations

import concurrent.futures
import os
import threading

from ...transforms.layout import parse_shard_file_name
from .file_checks import ReadBack, file_identity, read_back
from .reading_processes import reading_pool

__all__ = ["EarlyShardChecks"]


class EarlyShardChecks:
    """Reads back the shards that appear in a local `directory`, `workers`
    at a time, every `interval` seconds, from `start` until `results`.
    compression: the shards' ("gzip" or "none")."""

    def __init__(self, directory: str, compression: str, *, workers: int = 1,
                 interval: float = 0.5):
        self._directory = directory
        self._compression = compression
        self._workers = workers
        self._interval = interval
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        self._futures: dict[str, tuple[tuple, concurrent.futures.Future]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "EarlyShardChecks":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        self._pool = reading_pool(self._workers)
        self._thread = threading.Thread(target=self._watch, name="early-shard-checks",
                                        daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.wait(self._interval):
            self._submit_new()

    def _submit_new(self) -> None:
        try:
            entries = list(os.scandir(self._directory))
        except OSError:  # not there yet, or removed by an aborted build
            return
        for entry in entries:
            if parse_shard_file_name(entry.name) is None:
                continue
            identity = file_identity(entry.path)
            if identity is None:  # gone since the listing
                continue
            known = self._futures.get(entry.name)
            if known is not None and known[0] == identity:
                continue
            try:
                future = self._pool.submit(read_back, entry.path, entry.name,
                                           compression=self._compression)
            except RuntimeError:  # the pool is shutting down
                return
            self._futures[entry.name] = (identity, future)

    def results(self) -> dict[str, ReadBack]:
        """Stops watching, reads back the shards not seen yet, waits and
        returns file name -> what reading it found (files that changed while
        they were read are left out: verification reads them)."""
        self._stop_watching()
        self._submit_new()
        found = {}
        for name, (_, future) in self._futures.items():
            try:
                read = future.result()
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
