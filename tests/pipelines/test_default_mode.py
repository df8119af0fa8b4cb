"""The local running mode `recordforge build` picks when the user sets none,
and the input size it is based on."""

import os

import pytest

from recordforge.pipelines import runners

SMALL = runners.LOCAL_PARALLEL_MIN_BYTES - 1
BIG = runners.LOCAL_PARALLEL_MIN_BYTES


def _never():
    raise AssertionError("the input size must not be computed here")


def test_small_input_runs_in_one_process():
    assert runners.default_beam_args([], input_bytes=lambda: SMALL) == [
        "--direct_running_mode=in_memory", "--direct_num_workers=1"]


@pytest.mark.parametrize("size, workers", [
    (BIG, 2), (2 * BIG, 4), (BIG * 5 // 2, 5), (100 * BIG, 16), (None, 16)])
def test_big_or_unknown_input_runs_a_worker_process_per_core_and_half_threshold(
        monkeypatch, size, workers):
    """One worker per core, none for less than half the threshold of input
    (two workers were measured to pay from the threshold); an input of
    unknown size gets every core."""
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    assert runners.default_beam_args([], input_bytes=lambda: size) == [
        "--direct_running_mode=multi_processing", f"--direct_num_workers={workers}"]


@pytest.mark.parametrize("cores", [None, 1])
def test_one_core_runs_one_worker_process(monkeypatch, cores):
    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    assert runners.default_beam_args([], input_bytes=lambda: 10 * BIG)[-1] == \
        "--direct_num_workers=1"


@pytest.mark.parametrize("kind, threshold", [
    ("csv", 256 << 20), ("jsonl", 256 << 20), ("parquet", 128 << 20),
    *[(kind, runners.LOCAL_PARALLEL_MIN_BYTES)
      for kind in ("images", "json", "avro", "tfrecord")]])
def test_where_two_workers_start_to_pay_depends_on_the_kind_of_source(kind, threshold):
    """A byte of Parquet is more work than a byte of CSV, and both more
    than a byte of JPEG: each kind runs in parallel from its own size."""
    assert runners.local_parallel_min_bytes(kind) == threshold
    below = runners.default_beam_args([], input_bytes=lambda: threshold - 1,
                                      parallel_from=threshold)
    from_there = runners.default_beam_args([], input_bytes=lambda: threshold,
                                           parallel_from=threshold)
    assert below == ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
    assert from_there[0] == "--direct_running_mode=multi_processing"


@pytest.mark.parametrize("args, expected", [
    (["--direct_running_mode=multi_processing"],
     ["--direct_running_mode=multi_processing", f"--direct_num_workers={os.cpu_count() or 1}"]),
    (["--direct_num_workers=3"], ["--direct_num_workers=3",
                                  "--direct_running_mode=multi_processing"]),
    (["--runner=DataflowRunner"], ["--runner=DataflowRunner"]),
])
def test_user_choices_and_other_runners_are_kept_without_sizing_the_input(args, expected):
    assert runners.default_beam_args(args, input_bytes=_never) == expected


class _Chosen(Exception):
    """Stops a build once its running mode is chosen."""


@pytest.mark.parametrize("kind", ["csv", "images"])
def test_the_running_mode_is_chosen_from_the_sizes_of_the_files_the_build_reads(
        tmp_path, monkeypatch, kind):
    """From the inputs' fingerprints (no listing of its own): the files the
    build reads, not a hidden file or another extension beside them."""
    from recordforge.pipelines import build

    root = tmp_path / "in"
    if kind == "csv":
        (root / "sub").mkdir(parents=True)
        read = {root / "a.csv": b"id\n" + b"1\n" * 60, root / "sub" / "b.csv": b"id\n7\n"}
        others = {root / "_SUCCESS": b"x" * 1000, root / "notes.txt": b"x" * 999}
        features = {"id": {"type": "int64"}}
    else:
        (root / "cat").mkdir(parents=True)
        read = {root / "cat" / "1.jpg": b"x" * 30, root / "cat" / "2.JPG": b"x" * 20}
        others = {root / "cat" / "notes.txt": b"x" * 999, root / ".hidden.jpg": b"x" * 500}
        features = {"image": {"type": "bytes"}}
    for path, data in {**read, **others}.items():
        path.write_bytes(data)
    sizes, thresholds = [], []
    choose = runners.default_beam_args

    def spying(beam_args, input_bytes=None, parallel_from=runners.LOCAL_PARALLEL_MIN_BYTES):
        sizes.append(input_bytes())
        thresholds.append(parallel_from)
        choose(beam_args, input_bytes=lambda: sizes[-1], parallel_from=parallel_from)
        raise _Chosen

    monkeypatch.setattr(build, "default_beam_args", spying)
    raw = {"name": "t", "version": "1", "source": {"type": kind, "path": str(root)},
           "features": features, "output": {"path": str(tmp_path / "out")}}
    with pytest.raises(_Chosen):
        build.build(raw)
    assert sizes == [sum(len(data) for data in read.values())]
    assert thresholds == [runners.local_parallel_min_bytes(kind)]


def test_build_options_make_each_view_once_and_answer_as_beams_views_do():
    """`BuildOptions` reuses a view; what it reads and writes is what
    `PipelineOptions` would, and a copy (Beam's `Pipeline` deep-copies its
    options) or a pickle shares nothing with the original."""
    import copy
    import pickle

    from apache_beam.options import pipeline_options as beam_options

    direct, standard = beam_options.DirectOptions, beam_options.StandardOptions
    args = ["--direct_running_mode=in_memory", "--direct_num_workers=1", "--experiments=x"]
    options = runners.BuildOptions(args)
    assert options.view_as(direct) is options.view_as(direct)
    assert options.get_all_options() == beam_options.PipelineOptions(args).get_all_options()
    assert options.view_as(direct).direct_num_workers == 1
    assert options.view_as(beam_options.TypeOptions).pipeline_type_check is True

    options.view_as(standard).runner = "X"  # through a view: every view sees it
    assert options.view_as(standard).runner == "X"
    assert options.get_all_options()["runner"] == "X"
    assert "_views" not in options.get_all_options()

    copied = copy.deepcopy(options)
    assert type(copied) is runners.BuildOptions and "_views" not in vars(copied)
    copied.view_as(standard).runner = "Y"
    assert (copied.view_as(standard).runner, options.view_as(standard).runner) == ("Y", "X")
    unpickled = pickle.loads(pickle.dumps(options))
    assert "_views" not in vars(unpickled)
    assert unpickled.get_all_options() == options.get_all_options()
