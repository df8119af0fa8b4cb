"""A local build's engine starts its multi_processing workers lean (`pipelines.local_engine`)."""

from __future__ import annotations

import json
import os
import sys

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.portability import python_urns
from apache_beam.runners.worker import statesampler
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import environments

from recordforge.pipelines.beam_sampler import SAMPLING_PERIOD_MS
from recordforge.pipelines.local_engine import (lean_worker_command, start_workers_lean,
                                                workers_quiet)
from recordforge.pipelines.runners import local_runner
from recordforge.transforms.writer import default_exchange

BEAM_WORKER = f"{sys.executable} -m apache_beam.runners.worker.sdk_worker_main"


def _proto(environment):
    pipeline = beam.Pipeline(options=PipelineOptions())
    _ = pipeline | beam.Create([1]) | beam.Map(abs)
    return pipeline.to_runner_api(default_environment=environment)


def _payloads(proto) -> list[bytes]:
    return [environment.payload for environment in proto.components.environments.values()
            if environment.urn == python_urns.SUBPROCESS_SDK]


def test_the_command_of_beams_own_worker_is_rewritten_and_no_other():
    proto = _proto(environments.SubprocessSDKEnvironment.from_command_string(BEAM_WORKER))
    assert start_workers_lean(proto) == 1
    assert _payloads(proto) == [lean_worker_command().encode()]

    own = environments.SubprocessSDKEnvironment.from_command_string(f"{BEAM_WORKER} --mine")
    proto = _proto(own)
    assert start_workers_lean(proto) == 0
    assert _payloads(proto) == [f"{BEAM_WORKER} --mine".encode()]
    assert start_workers_lean(_proto(environments.EmbeddedPythonEnvironment.default())) == 0


def _record_worker(element, out_dir):
    with open(os.path.join(out_dir, f"{os.getpid()}.json"), "w") as file:
        sampler = statesampler.get_current_tracker()
        json.dump({"main": sys.modules["__main__"].__spec__.name,
                   "pandas": "pandas" in sys.modules, "boto3": "boto3" in sys.modules,
                   "sampler": [type(sampler).__name__, sampler.sampling_period_ms]}, file)
    return element


def test_a_multi_processing_worker_runs_the_lean_worker_imports_no_pandas_and_samples_promptly(tmp_path):
    options = PipelineOptions(["--direct_running_mode=multi_processing",
                               "--direct_num_workers=1"])
    runner = local_runner(options)
    assert default_exchange(runner) == "files"  # a local engine: the file exchange
    with beam.Pipeline(runner=runner, options=options) as pipeline:
        _ = (pipeline | beam.Create([1, 2])
             | beam.Map(_record_worker, out_dir=str(tmp_path)))
    seen = [json.loads(path.read_text()) for path in tmp_path.glob("*.json")]
    assert seen and all(worker == {"main": "recordforge.pipelines.sdk_worker",
                                   "pandas": False, "boto3": False,
                                   "sampler": ["PromptStateSampler", SAMPLING_PERIOD_MS]}
                        for worker in seen)
    assert all(str(path.stem) != str(os.getpid()) for path in tmp_path.glob("*.json"))


def test_workers_are_quiet_exactly_when_the_build_quiets_beams_worker_logs():
    from recordforge.pipelines.progress import QUIET_BEAM_ARGS

    assert workers_quiet(PipelineOptions(list(QUIET_BEAM_ARGS)))
    for args in ([], ["--default_sdk_harness_log_level=INFO"],
                 ["--default_sdk_harness_log_level=50"]):
        assert not workers_quiet(PipelineOptions(args))
    proto = _proto(environments.SubprocessSDKEnvironment.from_command_string(BEAM_WORKER))
    assert start_workers_lean(proto, quiet=True) == 1
    assert _payloads(proto) == [lean_worker_command(quiet=True).encode()]
    assert lean_worker_command(quiet=True).endswith(" --quiet")


def test_a_quiet_build_s_workers_print_nothing_of_beams(tmp_path, capfd):
    from recordforge.pipelines.progress import QUIET_BEAM_ARGS

    options = PipelineOptions(["--direct_running_mode=multi_processing",
                               "--direct_num_workers=1", *QUIET_BEAM_ARGS])
    with beam.Pipeline(runner=local_runner(options), options=options) as pipeline:
        _ = (pipeline | beam.Create([1, 2])
             | beam.Map(_record_worker, out_dir=str(tmp_path)))
    assert list(tmp_path.glob("*.json"))  # a worker process ran the step
    err = capfd.readouterr().err
    # Beam's import warns about apitools and its worker logs its start, both
    # before the worker reads the quiet log level from the options.
    assert "apache_beam" not in err and "apitools" not in err, err


def test_every_worker_is_told_it_is_done_before_the_first_is_closed(monkeypatch):
    """A multi_processing run's workers are all told to end before Beam's
    close of the first one waits for it; the run's result is Beam's."""
    from apache_beam.runners.portability.fn_api_runner import fn_runner, worker_handlers

    from recordforge.pipelines.local_engine import TogetherClosingManager

    servicer = worker_handlers.BeamFnControlServicer
    events = []
    push, close = worker_handlers.ControlConnection.push, worker_handlers.ControlConnection.close

    def recorded_push(connection, request):
        if request is servicer._DONE_MARKER:
            events.append(("done", id(connection)))
        return push(connection, request)

    def recorded_close(connection):
        events.append(("close", id(connection)))
        return close(connection)

    monkeypatch.setattr(worker_handlers.ControlConnection, "push", recorded_push)
    monkeypatch.setattr(worker_handlers.ControlConnection, "close", recorded_close)
    options = PipelineOptions(["--direct_running_mode=multi_processing",
                               "--direct_num_workers=3"])
    with beam.Pipeline(runner=local_runner(options), options=options) as pipeline:
        squares = pipeline | beam.Create(range(30)) | beam.Reshuffle() | beam.Map(lambda n: n * n)
        assert_that(squares, equal_to([n * n for n in range(30)]))
    assert issubclass(fn_runner.WorkerHandlerManager, TogetherClosingManager)
    closed = [connection for kind, connection in events if kind == "close"]
    first_close = events.index(("close", closed[0]))
    told = {connection for kind, connection in events[:first_close] if kind == "done"}
    assert len(set(closed)) == 3 and told == set(closed)
