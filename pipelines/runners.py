"""Which engine runs a build: recordforge's local defaults and the pinned local engine.

Everything after ``--`` on the command line reaches Beam unchanged; where a
user chose no runner options, a local build gets these defaults.
"""

from __future__ import annotations

import os
from typing import Callable, Sequence

import apache_beam as beam
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions

__all__ = ["LOCAL_PARALLEL_MIN_BYTES", "BuildOptions", "default_beam_args", "is_local",
           "local_parallel_min_bytes", "local_runner", "one_local_worker", "planned_local_workers"]


# Below this much input a local build runs in one process (in_memory, one
# worker): starting multi_processing workers (each imports Beam and unpickles
# the pipeline) costs ~0.5 s of wall and ~1 CPU-s, and every worker holds
# its own memory. Where a second worker pays depends on the work per byte,
# so on the kind of source. Measured on the 2-core benchmark machine
# (benchmarks/RESULTS.md, "The local default's threshold, by source kind",
# 2026-11-30; wall of two workers against one): CSV 151 MB 0.92x, 250 MB
# 1.08x, 383 MB 1.14x, 1 GB 1.37x; Parquet 43 MB 0.82x, 72 MB 0.97x,
# 182 MB 1.28x; JSONL 258 MB 1.07x, 303 MB 1.12x, 455 MB 1.18x; JPEG
# images (header checks) 138 MB 0.71x, 412 MB 0.92x, 1.24 GB 1.00x.
# Images keep 1 GiB: a build that decodes or re-encodes every pixel does
# several times the work a byte and should pay sooner (not measured). JSON,
# Avro and TFRecord keep it too: their files are read a whole file per unit
# of work, so a second worker helps only where there are several (every
# kind had 1 GiB before: 1 GB of large records 1.01x-1.30x, 2026-11-22).
LOCAL_PARALLEL_MIN_BYTES = 1 << 30
_LOCAL_PARALLEL_MIN_BYTES_BY_KIND = {"csv": 256 << 20, "jsonl": 256 << 20, "parquet": 128 << 20}


def local_parallel_min_bytes(source_kind: str) -> int:
    """The input size from which a local build of this kind of source
    (``source.type``) runs in multi_processing mode by default."""
    return _LOCAL_PARALLEL_MIN_BYTES_BY_KIND.get(source_kind, LOCAL_PARALLEL_MIN_BYTES)


def default_beam_args(beam_args: Sequence[str],
                      input_bytes: Callable[[], int | None] | None = None,
                      parallel_from: int = LOCAL_PARALLEL_MIN_BYTES) -> list[str]:
    """Beam options with recordforge's local defaults filled in where the user
    set nothing: the DirectRunner, in_memory with one worker when
    `input_bytes()` (the size of the input, called only then) is below
    `parallel_from` (`local_parallel_min_bytes` of the source's kind), else
    multi_processing with one worker per core, at most one per half of
    `parallel_from` of input (the per-row work is CPU-bound, so
    processes, not threads, are what scale)."""
    args = list(beam_args)
    if is_local(PipelineOptions(args).view_as(StandardOptions).runner):
        chosen = _chooses_local_mode(args)
        size = None
        if not chosen and input_bytes is not None:
            size = input_bytes()
            if size is not None and size < parallel_from:
                return args + ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
        if not any(a.startswith("--direct_running_mode") for a in args):
            args.append("--direct_running_mode=multi_processing")
        if not any(a.startswith("--direct_num_workers") for a in args):
            args.append(f"--direct_num_workers={_local_workers(size, parallel_from)}")
    return args


def _chooses_local_mode(beam_args: Sequence[str]) -> bool:
    """Whether `beam_args` set the local running mode or its workers
    (then the input's size decides neither)."""
    return any(a.startswith(("--direct_running_mode", "--direct_num_workers")) for a in beam_args)


def _local_workers(size: int | None, parallel_from: int) -> int:
    """One worker per core; for an input of known size, no more than one
    per half of `parallel_from` of it (two at least): two workers were
    measured to pay from `parallel_from` on, half of it each, and a worker
    given less costs its start (~1 CPU-s) and memory for little work."""
    cores = os.cpu_count() or 1
    if size is None:
        return cores
    return min(cores, max(2, size // max(1, parallel_from // 2)))


class BuildOptions(PipelineOptions):
    """A build's Beam options: `PipelineOptions` whose view of each options
    class (`view_as(TypeOptions)`, ...) is made once and then reused.

    Beam asks the pipeline's options for a view about twice per applied
    transform (type checks, result types) and makes each by building an
    argparse parser for the class and parsing the flags again: ~300 views
    on a small build, ~0.12 s of CPU, about half of building its graph. A
    view keeps no values of its own (every view reads and writes the
    options' one `_all_options`, and the flags do not change), so a view
    made once answers as a new one would. Copies and pickles (Beam's
    `Pipeline` deep-copies its options) start without the made views."""

    def view_as(self, cls):
        views = self.__dict__.setdefault("_views", {})  # not `self._views =`: that sets an option
        view = views.get(cls)
        if view is None:
            view = views[cls] = super().view_as(cls)
        return view

    def __getstate__(self):
        state = dict(super().__getstate__())
        state.pop("_views", None)
        return state


def is_local(runner: str | None) -> bool:
    return runner in (None, "DirectRunner", "direct")


def planned_local_workers(beam_args: Sequence[str], input_bytes: int | None,
                          parallel_from: int = LOCAL_PARALLEL_MIN_BYTES) -> int:
    """The multi_processing workers a local build of `beam_args` will
    start (`default_beam_args`, given `input_bytes` of input), known before
    its inputs are read; 0 for none, or where that waits on an input size
    not known yet (None)."""
    if not _chooses_local_mode(beam_args) and input_bytes is None:
        return 0
    args = default_beam_args(beam_args, input_bytes=lambda: input_bytes,
                             parallel_from=parallel_from)
    options = PipelineOptions(args)
    if (not is_local(options.view_as(StandardOptions).runner)
            or options.view_as(DirectOptions).direct_running_mode != "multi_processing"):
        return 0
    return options.view_as(DirectOptions).direct_num_workers or 0


def one_local_worker(options: PipelineOptions) -> bool:
    """Whether a pipeline with `options` runs on the local engine with one
    worker (``--direct_num_workers=1``, Beam's default; a small build's
    default, `default_beam_args`): then there is nothing to spread work
    over, and a Reshuffle that would spread it costs ~40 ms of CPU (four
    ParDos and a runner stage) for nothing."""
    return (is_local(options.view_as(StandardOptions).runner)
            and options.view_as(DirectOptions).direct_num_workers == 1)


def local_runner(options: PipelineOptions) -> beam.runners.PipelineRunner:
    """The engine of a local build: Beam's FnApiRunner, set up as the
    DirectRunner sets it up for a batch pipeline.

    Beam 2.77's DirectRunner first tries to download and start the Prism
    runner and falls back to the FnApiRunner only when that fails, so the
    engine a build ran on would depend on the network. Pinning it keeps every
    local build on the engine recordforge is tested on. Its multi_processing
    workers start lean (`local_engine`: ~0.5 s less CPU each)."""
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle

    from .local_engine import LocalFnApiRunner

    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    return LocalFnApiRunner(provision_info=fn_runner.ExtendedProvisionInfo(
        beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)))
