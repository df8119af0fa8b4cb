"""Processes that read a build's files back, and that end with the process that started them.

Checking every record's CRCs is Python work per record, which threads cannot
spread over cores, so verification reads large local builds in processes
(`verify`, `early_checks`). A `concurrent.futures` worker waits on its task
queue for as long as any process holds the queue's other end, which every
worker does: when the build is killed (SIGKILL from a scheduler's timeout,
the OOM killer), its idle readers would stay, each holding its memory, until
the machine restarts. `reading_pool` gives each worker a thread that ends it
once the process that started it is gone, and malloc settings that keep the
blocks it reads from costing fresh pages (`transforms.malloc_tuning`).
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import threading
import time

from ...transforms.malloc_tuning import keep_freed_memory

__all__ = ["PARENT_CHECK_SECONDS", "reading_pool"]

# How often a reader looks whether the process that started it is alive.
PARENT_CHECK_SECONDS = 1.0


def reading_pool(workers: int) -> concurrent.futures.ProcessPoolExecutor:
    """A process pool of `workers` readers that end with this process."""
    # spawn, not fork: the caller runs threads (the pipeline, a heartbeat).
    return concurrent.futures.ProcessPoolExecutor(
        workers, mp_context=multiprocessing.get_context("spawn"),
        initializer=_start_reader, initargs=(os.getpid(),))


def _start_reader(parent: int) -> None:
    keep_freed_memory()
    _end_with_parent(parent)


def _end_with_parent(parent: int) -> None:
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_CHECK_SECONDS)
        os._exit(1)  # the parent is gone: nobody will collect a result

    threading.Thread(target=watch, name="end-with-parent", daemon=True).start()
