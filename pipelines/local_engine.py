"""The engine of a local build: Beam's FnApiRunner, its worker processes started lean.

With ``--direct_running_mode=multi_processing`` the FnApiRunner gives the
pipeline an environment whose workers it starts with a shell command,
``<python> -m apache_beam.runners.worker.sdk_worker_main``.
`LocalFnApiRunner` swaps that command for one that starts `sdk_worker`
(Beam's same worker, Beam imported lean) with the same interpreter; a
pipeline on any other environment runs as the FnApiRunner runs it.
A build that quiets Beam (a worker log level above CRITICAL,
`progress.QUIET_BEAM_ARGS`) starts them quiet from their first line.

At the end of a run Beam closes its workers one after another, each close
waiting for that worker to end (its control stream, then its process:
tens of milliseconds a worker here, so a build's close grew with its
workers). The
engine tells every started worker that it is done first, so that all of
them end together, and then lets Beam close them as before
(`close_workers_together`).

A build that knows before it reads its inputs that it will run workers
starts them then (`start_workers_ahead`), and Beam's start of a worker takes
one of those (`waiting_workers`).
"""

from __future__ import annotations

import logging
import sys

from apache_beam.options.pipeline_options import PipelineOptions, WorkerOptions
from apache_beam.portability import python_urns
from apache_beam.runners.portability.fn_api_runner import fn_runner, worker_handlers

from . import waiting_workers
from .sdk_worker import QUIET_FLAG

__all__ = ["LocalFnApiRunner", "close_workers_together", "lean_worker_command",
           "start_workers_ahead", "start_workers_lean", "workers_quiet"]

# The command as Beam 2.77's FnApiRunner.run_pipeline writes it (bytes in
# the environment's payload).
_BEAM_WORKER_COMMAND = f"{sys.executable} -m apache_beam.runners.worker.sdk_worker_main"


def lean_worker_command(quiet: bool = False) -> str:
    command = f"{sys.executable} -m {__package__}.sdk_worker"
    return f"{command} {QUIET_FLAG}" if quiet else command


def start_workers_lean(pipeline_proto, quiet: bool = False) -> int:
    """Rewrites, in `pipeline_proto`, each environment that starts Beam's
    own worker to start `sdk_worker` instead (`quiet`: with Beam's logging
    quieted before it is imported); returns how many it rewrote."""
    rewritten = 0
    for environment in pipeline_proto.components.environments.values():
        if _starts_beams_worker(environment):
            environment.payload = lean_worker_command(quiet).encode("utf-8")
            rewritten += 1
    return rewritten


def start_workers_ahead(beam_args, count: int) -> None:
    """Starts `count` multi_processing workers of a local build of
    `beam_args` (`runners.planned_local_workers`) to wait for its run
    (`waiting_workers`), quiet where its options quiet Beam."""
    quiet = workers_quiet(PipelineOptions(list(beam_args)))
    waiting_workers.start(lean_worker_command(quiet), count)


def _starts_beams_worker(environment) -> bool:
    return (environment.urn == python_urns.SUBPROCESS_SDK
            and environment.payload == _BEAM_WORKER_COMMAND.encode("utf-8"))


def workers_quiet(options) -> bool:
    """Whether `options` set the workers' log level above CRITICAL, which
    silences them once they read it (as `progress.QUIET_BEAM_ARGS` does)."""
    level = str(options.view_as(WorkerOptions).default_sdk_harness_log_level or "")
    return level.isdecimal() and int(level) > logging.CRITICAL


def _tell_done(handler) -> None:
    """Queues the end of `handler`'s control stream, as Beam's own close
    of its connection does first (`ControlConnection.close`, whose second
    marker then stays unread), if its worker started one. A handler
    without a gRPC control connection is left to Beam."""
    connection = getattr(handler, "control_conn", None)
    if not isinstance(connection, worker_handlers.ControlConnection):
        return
    servicer = worker_handlers.BeamFnControlServicer
    with worker_handlers.ControlConnection._lock:  # as `close` reads the state
        if getattr(connection, "_state", None) == servicer.STARTED_STATE:
            connection.push(servicer._DONE_MARKER)


class TogetherClosingManager(worker_handlers.WorkerHandlerManager):
    """Beam's WorkerHandlerManager, which ends every worker before it
    closes the first (`close_workers_together`)."""

    def close_all(self):
        for handlers in self._cached_handlers.values():
            for handler in set(handlers):
                _tell_done(handler)
        super().close_all()


def close_workers_together() -> None:
    """Makes the FnApiRunners of this process end their workers together
    (`TogetherClosingManager`; the runner makes its manager through the
    module's name); once per process."""
    if not issubclass(fn_runner.WorkerHandlerManager, TogetherClosingManager):
        fn_runner.WorkerHandlerManager = TogetherClosingManager


class LocalFnApiRunner(fn_runner.FnApiRunner):
    """The FnApiRunner, its multi_processing workers started by `sdk_worker`
    and ended together."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        close_workers_together()
        waiting_workers.install()

    def run_via_runner_api(self, pipeline_proto, options):
        # The options are read only for a pipeline that starts workers.
        environments = pipeline_proto.components.environments.values()
        if any(map(_starts_beams_worker, environments)):
            start_workers_lean(pipeline_proto, quiet=workers_quiet(options))
        try:
            return super().run_via_runner_api(pipeline_proto, options)
        finally:
            waiting_workers.discard()  # those the run did not take
