"""The worker process of a local multi_processing build: Beam's SDK worker, with Beam imported lean.

Beam's FnApiRunner starts each multi_processing worker as ``python -m
apache_beam.runners.worker.sdk_worker_main``, which imports all of Beam
with the cyclic garbage collector running: ~1.0-1.2 s of CPU per worker
before its first bundle, each time a build starts its workers. The
console script's own process imports Beam lean (`beam_import`: without
pandas and the object stores' clients, which nothing in a build's steps
uses) with the collector paused and the heap frozen after
(`cli._imports_frozen`): ~0.55 s. A local build's workers are started
here instead (`local_engine`), which does the same and then runs Beam's
worker unchanged (`sdk_worker_main.main`). Whatever a step needs that was
left out is imported when it is first used, as in the console script.

Started with `WAIT_FLAG` (`waiting_workers`), a worker does its imports
and then waits for what Beam gives a new worker's environment, one line of
JSON on stdin, before it runs; it ends at once if stdin ends first.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import sys

__all__ = ["QUIET_FLAG", "WAIT_FLAG", "main"]


# Given by `local_engine` when the build quiets Beam (`progress.hide_beam_noise`).
QUIET_FLAG = "--quiet"
# Given by `waiting_workers` to a worker started before its run.
WAIT_FLAG = "--wait"
# The most a waiting worker reads of its stdin for the line it waits for
# (Beam's few environment variables, the pipeline options the largest).
MAX_WAIT_LINE = 64 << 20


def main() -> None:
    if QUIET_FLAG in sys.argv[1:]:
        # Before Beam is imported: its import logs a warning (the apitools
        # notice), and its worker an INFO line, before the worker reads the
        # build's quiet log level from the pipeline options.
        from .progress import hide_beam_noise
        hide_beam_noise(verbose=False)
    gc.disable()  # three full collections otherwise, over a heap that only grows
    try:
        from .beam_import import import_beam_lean
        import_beam_lean()
        from .beam_signatures import memoize_method_signatures
        memoize_method_signatures()  # the bundle processors inspect every DoFn
        from .beam_sampler import sample_promptly
        sample_promptly()  # a bundle's end waits for the sampler's thread
        from apache_beam.runners.worker import sdk_worker_main
    finally:
        # What the imports made lives as long as the worker: out of every
        # later collection's walk.
        gc.freeze()
        gc.enable()
    if WAIT_FLAG in sys.argv[1:]:
        given = _wait_for_run()
        if given is None:  # not taken: nothing to run
            return
        os.environ.update(given)
    sdk_worker_main.main(sys.argv)


def _wait_for_run() -> dict[str, str] | None:
    """The environment variables the run gives on stdin, None once stdin
    ends first. A Ctrl-C meanwhile ends the process silently, by the
    signal, not with a traceback. A line longer than MAX_WAIT_LINE is
    refused (ValueError), never read whole."""
    interrupted = signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        given = sys.stdin.buffer.readline(MAX_WAIT_LINE + 1)
    finally:
        signal.signal(signal.SIGINT, interrupted)
    if len(given) > MAX_WAIT_LINE:
        raise ValueError(f"the line a waiting worker read is over {MAX_WAIT_LINE} bytes")
    return json.loads(given) if given else None


if __name__ == "__main__":
    main()
