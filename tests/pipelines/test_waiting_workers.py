"""Workers started before a local multi_processing run are the ones it runs on (`pipelines.waiting_workers`)."""

from __future__ import annotations

import os

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from recordforge.pipelines import waiting_workers
from recordforge.pipelines.build import build
from recordforge.pipelines.local_engine import lean_worker_command
from recordforge.pipelines.runners import (default_beam_args, local_parallel_min_bytes,
                                           local_runner, planned_local_workers)

MULTI = ["--direct_running_mode=multi_processing"]


@pytest.fixture(autouse=True)
def no_worker_left():
    yield
    waiting_workers.discard()


@pytest.fixture
def started_workers(monkeypatch) -> list:
    """The workers `waiting_workers.start` starts from now on."""
    started = []
    start = waiting_workers.start
    monkeypatch.setattr(waiting_workers, "start",
                        lambda command, count: started.extend(start(command, count)) or started)
    return started


def waiting_count_is_zero() -> bool:
    return waiting_workers.waiting_count() == 0


def _worker_pids(tmp_path) -> set[int]:
    return {int(path.stem) for path in tmp_path.glob("*.pid")}


def _note_worker(element, out_dir):
    with open(os.path.join(out_dir, f"{os.getpid()}.pid"), "w"):
        pass
    return element


def _run_on_workers(out_dir, workers: int) -> None:
    options = PipelineOptions([*MULTI, f"--direct_num_workers={workers}"])
    with beam.Pipeline(runner=local_runner(options), options=options) as pipeline:
        _ = (pipeline | beam.Create(range(40)) | beam.Reshuffle()
             | beam.Map(_note_worker, out_dir=str(out_dir)))


def test_a_run_runs_on_the_workers_started_for_it(tmp_path):
    started = waiting_workers.start(lean_worker_command(), 2)
    _run_on_workers(tmp_path, 2)
    assert _worker_pids(tmp_path) and _worker_pids(tmp_path) <= {p.pid for p in started}
    assert waiting_workers.waiting_count() == 0
    # Beam waited for them to end, as for workers it started itself.
    assert [process.poll() for process in started] == [0, 0]


def test_a_worker_started_with_another_environment_is_not_taken(tmp_path, monkeypatch):
    started = waiting_workers.start(lean_worker_command(), 1)
    monkeypatch.setenv("RECORDFORGE_TEST_SETTING", "changed since")
    _run_on_workers(tmp_path, 1)
    assert _worker_pids(tmp_path) and not _worker_pids(tmp_path) & {p.pid for p in started}
    assert started[0].poll() is not None and waiting_count_is_zero()


def test_workers_no_run_takes_end(tmp_path):
    started = waiting_workers.start(lean_worker_command(), 2)
    assert waiting_workers.waiting_count() == 2
    waiting_workers.discard()
    assert waiting_count_is_zero() and all(process.poll() is not None for process in started)


def test_a_waiting_worker_reads_no_more_than_a_bounded_line(monkeypatch):
    import io
    import sys

    from recordforge.pipelines import sdk_worker

    monkeypatch.setattr(sdk_worker, "MAX_WAIT_LINE", 10)
    endless = io.BufferedReader(io.BytesIO(b"x" * (1 << 20)))
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(endless))
    with pytest.raises(ValueError, match="over 10 bytes"):
        sdk_worker._wait_for_run()
    assert endless.tell() <= 11 + io.DEFAULT_BUFFER_SIZE  # not read to its end
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(io.BytesIO(b'{"A": "1"}\n'))))
    monkeypatch.setattr(sdk_worker, "MAX_WAIT_LINE", 11)
    assert sdk_worker._wait_for_run() == {"A": "1"}


def test_a_waiting_worker_ends_by_itself_when_its_stdin_ends():
    (process,) = waiting_workers.start(lean_worker_command(quiet=True), 1)
    process.stdin.close()  # as when the process that started it is gone
    assert process.wait(timeout=60) == 0


@pytest.mark.parametrize("args, size", [
    ([], None), ([], 1), ([], 10 << 30), (MULTI, None), ([*MULTI, "--direct_num_workers=3"], 1),
    (["--direct_running_mode=in_memory"], 10 << 30), (["--direct_num_workers=4"], None),
    (["--runner=DataflowRunner", *MULTI], 10 << 30)])
def test_the_planned_workers_are_the_ones_the_build_s_options_will_start(args, size):
    parallel_from = local_parallel_min_bytes("csv")
    planned = planned_local_workers(args, size, parallel_from)
    if not any(a.startswith("--direct") for a in args) and size is None:
        assert planned == 0  # the size decides, and is not known yet
        return
    options = PipelineOptions(default_beam_args(args, input_bytes=lambda: size,
                                                parallel_from=parallel_from)).get_all_options()
    local = options["runner"] in (None, "DirectRunner")
    expected = (options["direct_num_workers"]
                if local and options["direct_running_mode"] == "multi_processing" else 0)
    assert planned == expected


def test_a_build_runs_on_the_workers_it_started_before_reading_its_input(
        small_table, monkeypatch, started_workers):
    started = started_workers
    root = small_table(300)
    monkeypatch.chdir(root)
    build(str(root / "c.yaml"), beam_args=[*MULTI, "--direct_num_workers=2"])
    assert len(started) == 2 and [process.poll() for process in started] == [0, 0]
    assert waiting_count_is_zero()


def test_a_build_that_stops_before_its_run_leaves_no_worker_waiting(
        small_table, monkeypatch, started_workers):
    from recordforge.pipelines.publish import VersionExistsError

    started = started_workers
    root = small_table(30)
    monkeypatch.chdir(root)
    build(str(root / "c.yaml"))  # one local worker: none started ahead
    assert started == []
    with pytest.raises(VersionExistsError):
        build(str(root / "c.yaml"), beam_args=[*MULTI, "--direct_num_workers=2"])
    assert len(started) == 2 and all(process.poll() is not None for process in started)
    assert waiting_count_is_zero()
