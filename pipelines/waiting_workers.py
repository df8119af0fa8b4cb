"""Worker processes started before a local multi_processing run asks for them, handed to Beam when it does.

A multi_processing build's workers each spend ~0.4 CPU-s importing Beam
(`sdk_worker`) before their first bundle, and Beam starts them only once
the pipeline runs: after the inputs were hashed and cut into byte ranges,
which for a large table is half a second of reading the disk with a core
idle. A build that knows it will want workers starts them first (`start`):
each imports Beam and then waits on its stdin. When Beam's handler starts a
worker with the same command (`local_job_service.SubprocessSdkWorker`,
through `AdoptingSubprocess`), it is given a waiting one instead: what Beam
adds to a new worker's environment (its control and logging addresses, the
pipeline options, its id) is written to the worker's stdin, and Beam waits
on that process, and kills it if it must, as on its own.

A waiting worker whose environment would differ in anything else from a new
one's is not used. One that no run took is killed (`discard`: it holds
nothing yet), and one whose parent is gone ends by itself (its stdin ends).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import threading

from .sdk_worker import WAIT_FLAG

__all__ = ["AdoptingSubprocess", "adopt", "discard", "install", "start", "waiting_count"]

# What Beam 2.77's SubprocessSdkWorker.run adds to a new worker's environment.
BEAM_VARIABLES = ("CONTROL_API_SERVICE_DESCRIPTOR", "LOGGING_API_SERVICE_DESCRIPTOR",
                  "PIPELINE_OPTIONS", "WORKER_ID")

_lock = threading.Lock()
# command -> the workers of that command waiting, each with the environment
# it was started with
_waiting: dict[str, list[tuple[subprocess.Popen, dict[str, str]]]] = {}


def start(command: str, count: int) -> list[subprocess.Popen]:
    """Starts `count` workers of `command` (Beam's worker command line, as
    `local_engine.lean_worker_command` writes it) to wait for a run;
    returns them."""
    argv = [*shlex.split(command), WAIT_FLAG]
    started = []
    with _lock:
        for _ in range(count):
            environment = dict(os.environ)
            process = subprocess.Popen(argv, stdin=subprocess.PIPE, env=environment)
            _waiting.setdefault(command, []).append((process, environment))
            started.append(process)
    return started


def waiting_count() -> int:
    """How many started workers wait to be taken."""
    with _lock:
        return sum(len(workers) for workers in _waiting.values())


def adopt(command: str, environment: dict[str, str]) -> subprocess.Popen | None:
    """A waiting worker of `command` given `environment` (the one Beam
    would start a new worker with), or None where none can take it."""
    ours = _without_beams(environment)
    with _lock:
        workers = _waiting.get(command, [])
        while workers:
            process, started_with = workers.pop(0)
            if process.poll() is not None:  # it ended (killed, out of memory)
                continue
            if _without_beams(started_with) != ours:
                _end(process)
                continue
            given = {name: environment[name] for name in BEAM_VARIABLES if name in environment}
            try:
                process.stdin.write(json.dumps(given).encode("utf-8") + b"\n")
                process.stdin.close()
            except OSError:  # it ended since
                _end(process)
                continue
            return process
    return None


def discard() -> None:
    """Ends every worker still waiting."""
    with _lock:
        workers = [process for waiting in _waiting.values() for process, _ in waiting]
        _waiting.clear()
    for process in workers:
        _end(process)


def _without_beams(environment: dict[str, str]) -> dict[str, str]:
    return {name: value for name, value in environment.items() if name not in BEAM_VARIABLES}


def _end(process: subprocess.Popen) -> None:
    process.kill()
    process.wait()
    if process.stdin is not None:
        try:
            process.stdin.close()
        except OSError:
            pass


class AdoptingSubprocess:
    """`subprocess` as Beam's `local_job_service` uses it: a ``Popen`` of
    a worker's command line gives a waiting worker of that command where
    there is one (`adopt`); anything else is the module's own."""

    def __getattr__(self, name: str):
        return getattr(subprocess, name)

    @staticmethod
    def Popen(args, *rest, **kwargs):  # noqa: N802 - subprocess's name
        if isinstance(args, str) and kwargs.get("shell") and not rest:
            adopted = adopt(args, dict(kwargs.get("env") or os.environ))
            if adopted is not None:
                return adopted
        return subprocess.Popen(args, *rest, **kwargs)


def install() -> None:
    """Makes Beam's local worker starts take waiting workers (once per process)."""
    from apache_beam.runners.portability import local_job_service

    if not isinstance(local_job_service.subprocess, AdoptingSubprocess):
        local_job_service.subprocess = AdoptingSubprocess()
