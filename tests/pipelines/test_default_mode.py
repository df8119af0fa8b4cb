"""The local running mode `recordforge build` picks when the user sets none,
and the input size it is based on."""

import os

import pytest

from recordforge.pipelines import runners
from recordforge.transforms.readers.listing import source_bytes

SMALL = runners.LOCAL_PARALLEL_MIN_BYTES - 1
BIG = runners.LOCAL_PARALLEL_MIN_BYTES


def _never():
    raise AssertionError("the input size must not be computed here")


def test_small_input_runs_in_one_process():
    assert runners.default_beam_args([], input_bytes=lambda: SMALL) == [
        "--direct_running_mode=in_memory", "--direct_num_workers=1"]


@pytest.mark.parametrize("size", [BIG, None])
def test_big_or_unknown_input_runs_one_worker_process_per_core(size):
    assert runners.default_beam_args([], input_bytes=lambda: size) == [
        "--direct_running_mode=multi_processing", f"--direct_num_workers={os.cpu_count() or 1}"]


@pytest.mark.parametrize("args, expected", [
    (["--direct_running_mode=multi_processing"],
     ["--direct_running_mode=multi_processing", f"--direct_num_workers={os.cpu_count() or 1}"]),
    (["--direct_num_workers=3"], ["--direct_num_workers=3",
                                  "--direct_running_mode=multi_processing"]),
    (["--runner=DataflowRunner"], ["--runner=DataflowRunner"]),
])
def test_user_choices_and_other_runners_are_kept_without_sizing_the_input(args, expected):
    assert runners.default_beam_args(args, input_bytes=_never) == expected


def test_source_bytes_counts_the_files_a_source_reads(tmp_path):
    tables = tmp_path / "tables"
    tables.mkdir()
    (tables / "a.csv").write_bytes(b"x" * 100)
    (tables / "b.csv").write_bytes(b"x" * 50)
    (tables / "_SUCCESS").write_bytes(b"x" * 1000)  # hidden from listing, as when reading
    assert source_bytes(str(tables), "csv") == 150

    images = tmp_path / "images" / "cat"
    images.mkdir(parents=True)
    (images / "1.jpg").write_bytes(b"x" * 30)
    (images / "2.JPG").write_bytes(b"x" * 20)
    (images / "notes.txt").write_bytes(b"x" * 999)
    assert source_bytes(str(tmp_path / "images"), "images", [".jpg"]) == 50


def test_source_bytes_stops_counting_past_the_limit(tmp_path):
    for i in range(5):
        (tmp_path / f"{i}.csv").write_bytes(b"x" * 100)
    assert source_bytes(str(tmp_path), "csv", limit=150) == 200
