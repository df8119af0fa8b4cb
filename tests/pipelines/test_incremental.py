"""Incremental and resumed builds: the build cache never changes what is published.

Every build that reuses pieces is compared with a build of the same inputs
from scratch (``cache.enabled: false``): shards, dead-letter files and the
examples counted must be the same bytes.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import recordforge
from recordforge.transforms.cache import steps as cache_steps
from recordforge.transforms.cache.names import parse_piece_name

IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]


def _rows(seed: int, count: int) -> str:
    rng = random.Random(seed)
    lines = ["id,price,label,note"]
    for row in range(count):
        ident = seed * 100_000 + row
        price = "n/a" if rng.random() < 0.03 else f"{rng.uniform(0, 500):.2f}"  # dead letters
        lines.append(f"{ident},{price},{rng.choice('abc')},{'x' * rng.randint(0, 30)}")
    return "\n".join(lines) + "\n"


def _config(source: Path, destination: Path, version: str, **overrides) -> dict:
    config = {
        "name": "incremental",
        "version": version,
        "source": {"type": "csv", "path": str(source)},
        "features": {"id": {"type": "int64"}, "price": {"type": "float", "min": 0},
                     "label": {"type": "int64", "vocabulary": ["a", "b", "c"]},
                     "note": {"type": "string"}},
        "splits": {"train": 0.8, "test": 0.2},
        "key": "id",
        "output": {"path": str(destination), "shard_size": "1MB"},
        "dead_letter": {"max_error_rate": 0.5},
    }
    for key, value in overrides.items():
        config[key] = {**config.get(key, {}), **value}
    return config


def _published(result) -> dict:
    """What must not depend on the cache: every shard's and dead-letter
    file's bytes, the statistics, and the counts."""
    root = Path(result.path)
    files = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and (path.suffix == ".tfrecord" or "dead_letter" in path.parts):
            files[str(path.relative_to(root))] = path.read_bytes()
    statistics = json.loads((root / "stats.json").read_text())
    statistics.pop("version")  # the version's own name
    return {"files": files, "statistics": statistics, "splits": dict(result.splits),
            "dead_letter_rows": result.dead_letter_rows,
            "num_input_rows": result.manifest["num_input_rows"]}


def _from_scratch(source: Path, output: Path, version: str) -> dict:
    config = _config(source, output, version, cache={"enabled": False})
    return _published(recordforge.build(config, beam_args=IN_MEMORY))


def _pieces(cache: Path) -> list[str]:
    return sorted(name for name in os.listdir(cache) if parse_piece_name(name)) \
        if cache.exists() else []


def _rewrite_keeping_size_and_mtime(path: Path) -> bool:
    """Swaps the letters a and b in the rows of `path` (not its header: same
    size, same columns), then puts its old modification time back; whether
    the bytes changed."""
    before, stat = path.read_bytes(), os.stat(path)
    header, rows = before.split(b"\n", 1)
    path.write_bytes(header + b"\n" + rows.translate(bytes.maketrans(b"ab", b"ba")))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    return path.read_bytes() != before


operations = st.lists(st.tuples(st.sampled_from(["add", "change", "delete", "touch", "sneak"]),
                                st.integers(0, 5), st.integers(1, 400)),
                      min_size=1, max_size=4)


@pytest.mark.slow
@settings(max_examples=4, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(steps=st.lists(operations, min_size=2, max_size=2), seed=st.integers(0, 1000))
def test_incremental_builds_equal_builds_from_scratch(tmp_path_factory, steps, seed):
    tmp = tmp_path_factory.mktemp("incremental")
    source, output = tmp / "in", tmp / "out"
    source.mkdir()
    for index in range(4):
        (source / f"part-{index}.csv").write_text(_rows(seed + index, 150 + 40 * index))
    version = 0
    built: dict[str, bytes] = {}  # each file's bytes when the last build read it
    for step in [[]] + steps:
        for operation, index, size in step:
            path = source / f"part-{index}.csv"
            if operation == "delete" and len(list(source.iterdir())) > 1:
                path.unlink(missing_ok=True)
            elif operation == "touch" and path.exists():
                # The same bytes under a new time: still the cached file.
                os.utime(path, ns=(time.time_ns(), time.time_ns() + 1000))
            elif operation == "sneak" and path.exists():
                # Other bytes of the same size under the old time (rsync -t).
                _rewrite_keeping_size_and_mtime(path)
            elif operation in ("add", "change"):
                path.write_text(_rows(seed * 7 + size, size))
        # A file is the cached one when it holds the bytes the last build read.
        now = {path.name: path.read_bytes() for path in source.iterdir()}
        unchanged = {name for name, data in now.items() if built.get(name) == data}
        built = now
        version += 1
        result = recordforge.build(_config(source, output, f"v{version}"), beam_args=IN_MEMORY)
        expected = _from_scratch(source, tmp / f"scratch{version}", f"v{version}")
        assert _published(result) == expected
        cache = result.manifest["cache"]
        assert cache["rows_reused"] + cache["rows_converted"] == expected["num_input_rows"]
        # Exactly the unchanged files are reused (none on the first build)...
        assert cache["files_reused"] == len(unchanged)
        assert cache["files_converted"] == len(list(source.iterdir())) - cache["files_reused"]
        # ...and the cache keeps exactly what this build used.
        assert len(_pieces(output / ".cache")) == cache["units_reused"] + cache["units_converted"]


@settings(max_examples=3, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(fates=st.lists(st.sampled_from(["same", "same_kept_mtime", "sneaked", "changed"]),
                      min_size=3, max_size=6), seed=st.integers(0, 1000))
def test_rewritten_files_are_reused_exactly_when_their_bytes_are_the_same(
        tmp_path_factory, fates, seed):
    # Every file is written again: with the same bytes (a re-export), the
    # same bytes and mtime kept (cp -p), other bytes of the same size under
    # the old mtime (rsync -t), or other bytes.
    tmp = tmp_path_factory.mktemp("rewrites")
    source, output = tmp / "in", tmp / "out"
    source.mkdir()
    paths = [source / f"part-{index}.csv" for index in range(len(fates))]
    for index, path in enumerate(paths):
        path.write_text(_rows(seed + index, 60))
    recordforge.build(_config(source, output, "v1"), beam_args=IN_MEMORY)
    reused = 0
    for index, (path, fate) in enumerate(zip(paths, fates)):
        data, stat = path.read_bytes(), os.stat(path)
        if fate == "sneaked":
            reused += not _rewrite_keeping_size_and_mtime(path)
            continue
        path.write_bytes(data if fate != "changed" else _rows(seed + 500 + index, 61).encode())
        if fate == "same_kept_mtime":
            os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        reused += fate != "changed"
    result = recordforge.build(_config(source, output, "v2"), beam_args=IN_MEMORY)
    assert result.manifest["cache"]["files_reused"] == reused
    assert result.manifest["cache"]["files_converted"] == len(paths) - reused
    assert _published(result) == _from_scratch(source, tmp / "scratch", "v2")


def test_an_unchanged_rebuild_reuses_everything_and_config_changes_invalidate(tmp_path):
    source = tmp_path / "in"
    source.mkdir()
    for index in range(3):
        (source / f"part-{index}.csv").write_text(_rows(index, 200))
    first = recordforge.build(_config(source, tmp_path / "out", "v1"), beam_args=IN_MEMORY)
    assert first.manifest["cache"]["files_converted"] == 3
    # Output options do not change what a row becomes: everything is reused.
    second = recordforge.build(_config(source, tmp_path / "out", "v2",
                                       output={"compression": "gzip"}), beam_args=IN_MEMORY)
    assert second.manifest["cache"]["files_reused"] == 3
    assert second.manifest["cache"]["rows_converted"] == 0
    assert second.num_examples == first.num_examples
    # A feature's rule does: nothing is reused, and the old pieces are pruned.
    third = recordforge.build(_config(source, tmp_path / "out", "v3",
                                      features={"price": {"type": "float", "min": 10}}),
                              beam_args=IN_MEMORY)
    assert third.manifest["cache"]["files_reused"] == 0
    assert third.dead_letter_rows > first.dead_letter_rows
    assert len(_pieces(tmp_path / "out" / ".cache")) == third.manifest["cache"]["units_converted"]
    report = (Path(third.path) / "report.html").read_text()
    assert "Build cache" in report


def test_key_ordered_gzip_from_the_cache_gives_the_bytes_of_a_build_without_it(tmp_path):
    """Key-ordered gzip shards are sorted into cells from the runs the
    cache kept (which the writer must not delete), as from its own."""
    source = tmp_path / "in"
    source.mkdir()
    for index in range(3):
        (source / f"part-{index}.csv").write_text(_rows(index, 300))
    output = {"compression": "gzip", "shuffle": False}

    def shards(result) -> dict:
        return {path.name: path.read_bytes() for path in Path(result.path).glob("*.tfrecord.gz")}

    scratch = recordforge.build(_config(source, tmp_path / "scratch", "v1", output=output,
                                        cache={"enabled": False}), beam_args=IN_MEMORY)
    first = recordforge.build(_config(source, tmp_path / "out", "v1", output=output),
                              beam_args=IN_MEMORY)
    again = recordforge.build(_config(source, tmp_path / "out", "v2", output=output),
                              beam_args=IN_MEMORY)
    assert again.manifest["cache"]["files_reused"] == 3
    assert shards(scratch) and shards(first) == shards(scratch) == shards(again)
    third = recordforge.build(_config(source, tmp_path / "out", "v3", output=output),
                              beam_args=IN_MEMORY)  # the kept runs are still whole
    assert third.manifest["cache"]["files_reused"] == 3 and shards(third) == shards(scratch)


def _built_with_cache(tmp_path: Path, files: int, rows: int) -> tuple[Path, Path]:
    """(source, cache) after a first build of `files` CSV files of `rows` rows."""
    source = tmp_path / "in"
    source.mkdir()
    for index in range(files):
        (source / f"part-{index}.csv").write_text(_rows(index, rows))
    recordforge.build(_config(source, tmp_path / "out", "v1"), beam_args=IN_MEMORY)
    return source, tmp_path / "out" / ".cache"


def _flip_bit(path: Path, at: float, bit: int) -> None:
    data = bytearray(path.read_bytes())
    data[int(len(data) * at)] ^= bit
    path.write_bytes(bytes(data))


def test_a_damaged_piece_is_read_again_never_published(tmp_path):
    source, cache = _built_with_cache(tmp_path, files=3, rows=300)
    _flip_bit(cache / _pieces(cache)[1], 0.5, 0x40)  # in an Example: only the digest can tell
    second = recordforge.build(_config(source, tmp_path / "out", "v2"), beam_args=IN_MEMORY)
    assert second.manifest["cache"]["units_damaged"] == 1
    assert second.manifest["cache"]["units_converted"] == 1
    assert _published(second) == _from_scratch(source, tmp_path / "scratch", "v2")
    third = recordforge.build(_config(source, tmp_path / "out", "v3"), beam_args=IN_MEMORY)
    assert third.manifest["cache"]["units_damaged"] == 0  # written again, whole
    assert third.manifest["cache"]["files_reused"] == 3


@pytest.mark.parametrize("ahead", [1, 2, 32])
def test_pieces_checked_ahead_give_every_unit_once(tmp_path, monkeypatch, ahead):
    """Reused pieces are checked by a thread, up to `ahead` of them before
    their outputs are given, while new files are converted: a damaged
    run among them is read again, and nothing is lost or given twice."""
    monkeypatch.setattr(cache_steps, "_CHECKS_AHEAD", ahead)
    source, cache = _built_with_cache(tmp_path, files=6, rows=150)
    _flip_bit(sorted(cache.glob("*.run"))[3], 1 / 3, 0x01)  # only the run's CRC32C can tell
    (source / "part-6.csv").write_text(_rows(6, 150))  # a new file, converted
    second = recordforge.build(_config(source, tmp_path / "out", "v2"), beam_args=IN_MEMORY)
    assert second.manifest["cache"]["units_damaged"] == 1
    assert second.manifest["cache"]["units_converted"] == 2
    assert second.manifest["cache"]["files_reused"] == 5
    assert _published(second) == _from_scratch(source, tmp_path / "scratch", "v2")


def test_pieces_of_removed_inputs_are_kept_for_the_configured_days(tmp_path):
    source = tmp_path / "in"
    source.mkdir()
    for index in range(3):
        (source / f"part-{index}.csv").write_text(_rows(index, 100))
    keep = {"keep_unused_days": 1}
    recordforge.build(_config(source, tmp_path / "out", "v1", cache=keep), beam_args=IN_MEMORY)
    (source / "part-2.csv").unlink()
    recordforge.build(_config(source, tmp_path / "out", "v2", cache=keep), beam_args=IN_MEMORY)
    assert len(_pieces(tmp_path / "out" / ".cache")) == 3  # the removed file's piece is kept
    recordforge.build(_config(source, tmp_path / "out", "v3"), beam_args=IN_MEMORY)
    assert len(_pieces(tmp_path / "out" / ".cache")) == 2  # keep_unused_days: 0


def test_no_piece_is_pruned_while_another_build_of_the_output_runs(tmp_path, capsys):
    """Another build of the same output may be reading pieces this one did
    not use (other inputs, another config): pruning waits for a build that
    finds no other running."""
    from recordforge.pipelines import publish
    source = tmp_path / "in"
    source.mkdir()
    for index in range(3):
        (source / f"part-{index}.csv").write_text(_rows(index, 100))
    recordforge.build(_config(source, tmp_path / "out", "v1"), beam_args=IN_MEMORY)
    (source / "part-2.csv").unlink()
    running = publish.begin_build(str(tmp_path / "out"), "v-other")  # alive: its heartbeat runs
    try:
        recordforge.build(_config(source, tmp_path / "out", "v2"), beam_args=IN_MEMORY)
        assert len(_pieces(tmp_path / "out" / ".cache")) == 3
        assert "1 other build(s) of this output are running" in capsys.readouterr().err
    finally:
        running.abort()
    recordforge.build(_config(source, tmp_path / "out", "v3"), beam_args=IN_MEMORY)
    assert len(_pieces(tmp_path / "out" / ".cache")) == 2


def test_a_separate_cache_path_and_a_multi_process_build(tmp_path):
    source = tmp_path / "in"
    source.mkdir()
    for index in range(4):
        (source / f"part-{index}.csv").write_text(_rows(index, 250))
    cache = {"path": str(tmp_path / "elsewhere")}
    two = ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]
    first = recordforge.build(_config(source, tmp_path / "out", "v1", cache=cache), beam_args=two)
    assert len(_pieces(tmp_path / "elsewhere")) == 4
    assert not (tmp_path / "out" / ".cache").exists()
    second = recordforge.build(_config(source, tmp_path / "out", "v2", cache=cache),
                               beam_args=IN_MEMORY)
    assert second.manifest["cache"]["files_reused"] == 4
    assert _published(first)["files"] == _published(second)["files"] == \
        _from_scratch(source, tmp_path / "scratch", "v1")["files"]


def test_the_listings_dead_letters_and_counts_come_through_the_cached_read(tmp_path):
    """A link leading to nothing is the listing's dead letter and count,
    which travel with the files through the cached read's plan and convert
    steps (no Flatten): converting and reusing, the build publishes what a
    build without the cache does, the link among its dead letters."""
    source = tmp_path / "in"
    source.mkdir()
    for index in range(2):
        (source / f"part-{index}.csv").write_text(_rows(index, 150))
    (source / "gone.csv").symlink_to(tmp_path / "missing.csv")
    # An unread table file loses an unknown number of rows: only a budget
    # of every row lets the build publish.
    budget = {"max_error_rate": 1.0}
    scratch = _published(recordforge.build(
        _config(source, tmp_path / "scratch", "v1", cache={"enabled": False},
                dead_letter=budget), beam_args=IN_MEMORY))
    for version in ("v1", "v2"):  # converted, then reused
        result = recordforge.build(_config(source, tmp_path / "out", version,
                                           dead_letter=budget), beam_args=IN_MEMORY)
        assert _published(result) == scratch
    assert result.manifest["cache"]["files_reused"] == 2
    dead = b"".join(data for name, data in scratch["files"].items() if "dead_letter" in name)
    assert b"gone.csv" in dead


_RESUME_SCRIPT = """
import json, sys
import recordforge
config = json.loads(sys.argv[1])
recordforge.build(config, beam_args=sys.argv[2:])
"""


@pytest.mark.slow
@pytest.mark.parametrize("kill_after", [1, 3, 6])
def test_a_killed_build_resumes_from_its_pieces(tmp_path, kill_after):
    """kill -9 once `kill_after` of 8 files' pieces exist; the next build
    reuses them and publishes what an uninterrupted build would."""
    source = tmp_path / "in"
    source.mkdir()
    for index in range(8):
        (source / f"part-{index}.csv").write_text(_rows(50 + index, 12_000))
    output = tmp_path / "out"
    config = _config(source, output, "v1")
    process = subprocess.Popen(
        [sys.executable, "-c", _RESUME_SCRIPT, json.dumps(config),
         "--direct_running_mode=multi_processing", "--direct_num_workers=2"],
        start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cache = output / ".cache"
    deadline = time.monotonic() + 120
    while len(_pieces(cache)) < kill_after and process.poll() is None:
        assert time.monotonic() < deadline, "the build wrote no pieces"
        time.sleep(0.01)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    left = _pieces(cache)
    assert not (output / "v1").exists(), "the build finished before it was killed"
    assert kill_after <= len(left) < 8
    resumed = recordforge.build(config, beam_args=IN_MEMORY)
    assert resumed.manifest["cache"]["units_reused"] == len(left), (
        resumed.manifest["cache"], left, sorted(os.listdir(cache)))
    assert resumed.manifest["cache"]["units_converted"] == 8 - len(left)
    assert _published(resumed) == _from_scratch(source, tmp_path / "scratch", "v1")


def test_a_cache_on_an_object_store_gives_rows_as_examples(tmp_path):
    """A cache that is not on the local disk (here fsspec's in-memory
    filesystem, which the in-process runner shares): reused rows are read
    back from the runs as ExampleBatches, and the shards are the same."""
    import fsspec

    source = tmp_path / "in"
    source.mkdir()
    for index in range(3):
        (source / f"part-{index}.csv").write_text(_rows(index, 300))
    url = f"memory://rf-cache-{tmp_path.name}"
    cache = {"path": url}
    first = recordforge.build(_config(source, tmp_path / "out", "v1", cache=cache),
                              beam_args=IN_MEMORY)
    (source / "part-1.csv").write_text(_rows(77, 120))
    second = recordforge.build(_config(source, tmp_path / "out", "v2", cache=cache),
                               beam_args=IN_MEMORY)
    assert first.manifest["cache"]["files_converted"] == 3
    assert second.manifest["cache"]["files_reused"] == 2
    assert _published(second) == _from_scratch(source, tmp_path / "scratch", "v2")
    names = [path.rsplit("/", 1)[-1] for path in fsspec.filesystem("memory").ls(url, detail=False)]
    assert len([name for name in names if parse_piece_name(name)]) == 3


def test_a_unit_that_met_an_io_error_is_read_again_next_build(tmp_path, monkeypatch):
    """An I/O error may be gone by the next build: the unit's read_error
    dead letter is not cached, the next build reads the file again."""
    from recordforge.transforms import unit_conversion
    from recordforge.transforms.readers.common import read_error

    source = tmp_path / "in"
    source.mkdir()
    for index in range(3):
        (source / f"part-{index}.csv").write_text(_rows(index, 200))
    read_range = unit_conversion.read_range

    def flaky(fs, unit, *args, **kwargs):
        if unit.source.endswith("part-1.csv"):
            return iter([read_error(unit.source, None, OSError("connection reset"), rows=200)])
        return read_range(fs, unit, *args, **kwargs)

    monkeypatch.setattr(unit_conversion, "read_range", flaky)
    first = recordforge.build(_config(source, tmp_path / "out", "v1"), beam_args=IN_MEMORY)
    assert first.manifest["dead_letter"]["by_reason"]["read_error"] == 200
    monkeypatch.setattr(unit_conversion, "read_range", read_range)
    second = recordforge.build(_config(source, tmp_path / "out", "v2"), beam_args=IN_MEMORY)
    assert second.manifest["cache"]["files_reused"] == 2
    assert second.manifest["cache"]["files_converted"] == 1
    assert "read_error" not in second.manifest["dead_letter"]["by_reason"]
    assert _published(second) == _from_scratch(source, tmp_path / "scratch", "v2")
