"""`recordforge.build` stopped by an exception at any point cleans up after itself.

A scheduler that calls the library stops a build by raising inside it:
Airflow's ``execution_timeout`` raises ``AirflowTaskTimeout`` (a
BaseException, not an Exception) from its SIGALRM handler wherever the main
thread is; a notebook's Ctrl-C raises KeyboardInterrupt; a task's own code
may call ``sys.exit``. Whatever escapes, and wherever: nothing is published
(before the commit), the staging directory and owner file are gone (no dead
build is left for the next one to clean), the build cache is kept, and the
next build resumes from it and publishes the bytes of an uninterrupted
build. The exceptions are raised at the boundaries of the build's phases
(through the module attributes the build calls), and inside the pipeline
while it reads its inputs; and from a real SIGALRM handler while Beam's
worker processes convert, which must not outlive the build.
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import recordforge
from recordforge.pipelines import build as build_module
from recordforge.pipelines.publish import finalizing, report, staging
from recordforge.pipelines.publish.output import Output
from recordforge.transforms import unit_conversion
from recordforge.transforms.cache.names import parse_piece_name

IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
FILES = 3

# (module, attribute, whether the version is published when the exception
# is raised before / after the call): the phases of a build in the order it
# runs them.
PHASES = [
    (build_module, "_open_cache", False, False),
    (staging, "recover", False, False),
    (staging, "published_identity", False, False),
    (build_module, "build_pipeline", False, False),
    (unit_conversion, "read_range", False, False),  # in the running pipeline, once per input file
    (build_module, "_close_runner_client", False, False),
    (build_module, "_check_inputs_unchanged", False, False),
    (finalizing, "read_pipeline_result", False, False),
    (finalizing, "check_error_budget", False, False),
    (report, "write_staged_report", False, False),
    (finalizing, "write_sha256sums", False, False),
    (finalizing, "_verify_staged", False, False),
    (finalizing, "commit", False, True),
    (finalizing, "write_latest", True, True),
    (build_module, "_prune_cache", True, True),
]


class TaskTimeout(BaseException):
    """As Airflow's AirflowTaskTimeout: a BaseException raised by a signal handler."""


class StepFailed(Exception):
    pass


EXCEPTIONS = [KeyboardInterrupt, SystemExit, TaskTimeout, StepFailed, OSError, MemoryError,
              GeneratorExit]
# The exceptions above, and classes of a scheduler's or a user's own made from them.
exception_types = st.sampled_from(EXCEPTIONS) | st.builds(
    lambda base, name: type(f"{name}{base.__name__}", (base,), {}),
    st.sampled_from(EXCEPTIONS), st.from_regex(r"[A-Z][a-z]{0,8}", fullmatch=True))


def _write_inputs(source: Path, seed: int) -> None:
    rng = random.Random(seed)
    source.mkdir(parents=True, exist_ok=True)
    for index in range(FILES):
        lines = ["id,price,label"] + [
            f"{index * 1000 + row},{rng.uniform(0, 100):.2f},{rng.choice('abc')}"
            for row in range(rng.randint(20, 60))]
        (source / f"part-{index}.csv").write_text("\n".join(lines) + "\n")


def _config(source: Path, output: Path) -> dict:
    return {
        "name": "interrupted",
        "version": "v1",
        "source": {"type": "csv", "path": str(source)},
        "features": {"id": {"type": "int64"}, "price": {"type": "float"},
                     "label": {"type": "int64", "vocabulary": ["a", "b", "c"]}},
        "splits": {"train": 0.8, "test": 0.2},
        "key": "id",
        "output": {"path": str(output), "shard_size": "1MB"},
    }


def _shards(version_dir: Path) -> dict[str, str]:
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(version_dir.glob("*.tfrecord*"))}


def _raising(original, error: BaseException, before: bool, on_call: int):
    calls = []

    def wrapper(*args, **kwargs):
        calls.append(None)
        if before and len(calls) == on_call:
            raise error
        result = original(*args, **kwargs)
        if not before and len(calls) == on_call:
            raise error
        return result
    return wrapper


def _caused_by(raised: BaseException, error: BaseException) -> bool:
    while raised is not None:
        if raised is error:
            return True
        raised = raised.__cause__ or raised.__context__
    return False


_SCRATCH: dict[int, dict[str, str]] = {}


def _uninterrupted(root: Path, source: Path, seed: int) -> dict[str, str]:
    """The shards of an uninterrupted build of seed's inputs, without the cache."""
    if seed not in _SCRATCH:
        recordforge.build({**_config(source, root / "scratch"), "cache": {"enabled": False}},
                          beam_args=IN_MEMORY)
        _SCRATCH[seed] = _shards(root / "scratch" / "v1")
    return _SCRATCH[seed]


@pytest.mark.slow
@pytest.mark.parametrize("phase", PHASES, ids=[name for _, name, _, _ in PHASES])
@settings(max_examples=1, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(kind=exception_types, before=st.booleans(), on_call=st.integers(1, FILES),
       seed=st.integers(0, 3))
def test_an_exception_anywhere_leaves_no_staging_and_the_next_build_resumes(
        tmp_path_factory, monkeypatch, phase, kind, before, on_call, seed):
    root = tmp_path_factory.mktemp("interrupted")
    source, output = root / "in", root / "out"
    _write_inputs(source, seed)
    module, name, published_before, published_after = phase
    on_call = on_call if name == "read_range" else 1
    error = kind(f"injected {'before' if before else 'after'} {name}")
    with monkeypatch.context() as patch:
        patch.setattr(module, name, _raising(getattr(module, name), error, before, on_call))
        with pytest.raises(BaseException) as raised:
            recordforge.build(_config(source, output), beam_args=IN_MEMORY)
    # Anything but an Exception escapes as what it is (a timeout stays a
    # timeout; Beam re-raises one from a step as its type with the step's
    # name); an Exception may be reported as the build's failure it caused.
    assert type(raised.value) is kind or (isinstance(error, Exception)
                                          and _caused_by(raised.value, error)), raised.value
    staged = sorted(p.name for p in (output / ".staging").iterdir()) \
        if (output / ".staging").exists() else []
    assert staged == [], f"left behind after {kind.__name__} at {name}: {staged}"
    published = published_before if before else published_after
    assert (output / "v1" / "manifest.json").exists() == published
    if published:
        # Run again, the build finds it published (and moves LATEST to it if
        # the exception came first) without building.
        if (output / "LATEST").exists():
            with pytest.raises(recordforge.VersionExistsError):
                recordforge.build(_config(source, output), beam_args=IN_MEMORY)
        else:
            assert recordforge.build(_config(source, output), beam_args=IN_MEMORY).version == "v1"
    else:
        assert not (output / "LATEST").exists()
        resumed = recordforge.build(_config(source, output), beam_args=IN_MEMORY)
        cache = resumed.manifest["cache"]
        assert cache["files_reused"] + cache["files_converted"] == FILES, cache
    assert (output / "LATEST").read_text().strip() == "v1"
    assert _shards(output / "v1") == _uninterrupted(root, source, seed)

def test_a_timeout_after_the_pipeline_keeps_the_cache_and_the_next_build_reuses_all(
        tmp_path, monkeypatch):
    """A timeout once the pipeline has written the cache (while the build
    checks what it staged): the retry converts nothing again."""
    source, output = tmp_path / "in", tmp_path / "out"
    _write_inputs(source, 7)
    error = TaskTimeout("Timeout, PID: 1")
    monkeypatch.setattr(finalizing, "read_pipeline_result",
                        _raising(finalizing.read_pipeline_result, error, True, 1))
    with pytest.raises(TaskTimeout):
        recordforge.build(_config(source, output), beam_args=IN_MEMORY)
    assert list((output / ".staging").iterdir()) == []
    assert not (output / "v1").exists()
    monkeypatch.undo()
    resumed = recordforge.build(_config(source, output), beam_args=IN_MEMORY)
    assert resumed.manifest["cache"]["files_reused"] == FILES, resumed.manifest["cache"]
    assert resumed.manifest["cache"]["files_converted"] == 0


def _children() -> list[int]:
    """The live processes whose parent is this one (Linux /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == os.getpid() and fields[0] != b"Z":
            found.append(int(entry))
    return found


@pytest.mark.slow
def test_a_timeout_from_a_signal_handler_stops_the_worker_processes_too(tmp_path):
    """As Airflow's execution_timeout does: a SIGALRM handler raises in the
    main thread while Beam's worker processes convert (once the first
    cache piece exists). Nothing is published, no worker outlives the
    build, nothing is staged, and the next build reuses what was cached."""
    source, output = tmp_path / "in", tmp_path / "out"
    source.mkdir()
    rng = random.Random(3)
    for index in range(4):
        (source / f"part-{index}.csv").write_text("id,price,label\n" + "".join(
            f"{index * 10**6 + row},{rng.uniform(0, 100):.2f},{rng.choice('abc')}\n"
            for row in range(60_000)))
    cache = output / ".cache"
    running = threading.Event()
    # Servers other tests started (object stores, a Dask cluster) are this
    # process's children too: only processes the build started count.
    earlier = set(_children())

    def alarm_once_converting() -> None:
        while not running.is_set():
            if cache.is_dir() and any(parse_piece_name(name) for name in os.listdir(cache)):
                os.kill(os.getpid(), signal.SIGALRM)
                return
            time.sleep(0.005)

    def on_alarm(signum, frame):
        raise TaskTimeout("Timeout")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    watcher = threading.Thread(target=alarm_once_converting, daemon=True)
    watcher.start()
    try:
        with pytest.raises(TaskTimeout):
            recordforge.build(_config(source, output),
                              beam_args=["--direct_running_mode=multi_processing",
                                         "--direct_num_workers=2"])
    finally:
        running.set()
        signal.signal(signal.SIGALRM, previous)
    assert set(_children()) - earlier == set()
    assert list((output / ".staging").iterdir()) == []
    assert not (output / "v1").exists() and not (output / "LATEST").exists()
    resumed = recordforge.build(_config(source, output), beam_args=IN_MEMORY)
    assert resumed.manifest["cache"]["files_reused"] >= 1, resumed.manifest["cache"]


@pytest.mark.parametrize("module, name", [(build_module, "build_pipeline"),
                                          (finalizing, "_verify_staged")])
def test_a_staging_that_cannot_be_deleted_does_not_hide_what_stopped_the_build(
        tmp_path, monkeypatch, capsys, module, name):
    """The disk fails while the build cleans up after a timeout: the timeout
    is what escapes (not the OSError), stderr names what was left, the owner
    file is gone, and the next build removes the staging directory."""
    source, output = tmp_path / "in", tmp_path / "out"
    _write_inputs(source, 5)
    remove = Output.remove

    def failing_remove(self, path, recursive=False):
        if recursive and Path(path).parent.name == ".staging":  # the staging directory
            raise OSError(5, "Input/output error", path)
        return remove(self, path, recursive)

    monkeypatch.setattr(Output, "remove", failing_remove)
    monkeypatch.setattr(module, name, _raising(getattr(module, name), TaskTimeout("Timeout"),
                                               True, 1))
    with pytest.raises(TaskTimeout):
        recordforge.build(_config(source, output), beam_args=IN_MEMORY)
    left = sorted(path.name for path in (output / ".staging").iterdir())
    assert len(left) == 1 and not left[0].endswith(".owner.json"), left
    assert f"could not delete {output / '.staging' / left[0]}" in capsys.readouterr().err
    monkeypatch.undo()
    assert recordforge.build(_config(source, output), beam_args=IN_MEMORY).version == "v1"
    assert list((output / ".staging").iterdir()) == []
