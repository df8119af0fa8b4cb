"""Faults while building: a full disk, a filesystem error inside the commit,
a worker process that dies. After each: the build exits 1 saying nothing was
published, no ``<version>/manifest.json`` exists, ``LATEST`` still names the
previous version, nothing of the failed build is left in ``.staging``, and the
next build succeeds with shards byte-identical to a clean build.

SIGKILL at any moment is proven by tests/pipelines/test_crash_safety.py
(10 kills per driver, RECORDFORGE_CRASH_TRIALS for more).

Disk full is simulated with `FaultyFileSystem` (conftest: a write budget,
then ENOSPC on every write) and, where this machine lets the tests mount
one, with a real 1 MiB tmpfs.
"""

from __future__ import annotations

import os
import random
import subprocess
import textwrap
import uuid
from pathlib import Path

import fsspec
import pytest

from recordforge.pipelines.publish import commit
from recordforge.pipelines.publish import verify

BASE, VERSION = "0.9.0", "1.0.0"

CONFIG = textwrap.dedent("""\
    name: faults
    version: "{version}"
    source: {{type: csv, path: {csv}}}
    features:
      id: {{type: int64}}
      name: {{type: string}}
      score: {{type: float}}
    splits: {{train: 0.8, test: 0.2}}
    key: id
    output: {{path: "{output}", compression: gzip, shard_size: 1MB}}
    dead_letter: {{max_error_rate: 0.01}}
    cache: {{enabled: {cache}}}
    """)


def write_rows(path: Path, count: int, seed: int = 1) -> Path:
    rng = random.Random(seed)
    with open(path, "w") as handle:
        handle.write("id,name,score\n")
        for i in range(count):
            # Random text compresses poorly, so shards are a realistic size.
            name = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(40))
            handle.write(f"{i},{name},{rng.random():.6f}\n")
    return path


def config_for(tmp_path: Path, csv: Path, output: str, version: str = VERSION,
               cache: bool = False) -> Path:
    """The build's config. Without the build cache by default: a fault must
    meet the build's own writes, not find every row already cached by the
    base version's build."""
    path = tmp_path / f"config-{version}-{uuid.uuid4().hex[:8]}.yaml"
    path.write_text(CONFIG.format(version=version, csv=csv, output=output,
                                  cache=str(cache).lower()))
    return path


def shard_bytes(version_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(version_dir.iterdir())
            if ".tfrecord" in p.name}


def assert_nothing_published(root: Path, err: str) -> None:
    assert "nothing was published" in err, err
    assert not (root / VERSION / "manifest.json").exists()
    assert (root / "LATEST").read_text() == f"{BASE}\n"
    assert verify.verify_dataset(str(root)).ok  # LATEST still names a whole version
    leftovers = [p.name for p in (root / ".staging").iterdir()]
    assert leftovers == [], leftovers


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    return write_rows(tmp_path_factory.mktemp("rows") / "rows.csv", 4000)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, rows):
    """A clean build through `FaultyFileSystem`: its shard bytes, the bytes it
    wrote and how often it called each filesystem operation."""
    from recordforge.pipelines import cli

    tmp_path = tmp_path_factory.mktemp("reference")
    faulty = fsspec.get_filesystem_class("faulty")  # registered by conftest
    faults = faulty.faults = type(faulty.faults)()
    root = tmp_path / "out"
    status = cli.main(["build", str(config_for(tmp_path, rows, f"faulty://{root}")),
                       "--", "--direct_running_mode=in_memory", "--direct_num_workers=1"])
    assert status == 0
    return shard_bytes(root / VERSION), faults.written, dict(faults.calls)


def publish_base(tmp_path, rows, run_build, root: Path) -> None:
    status, _, err = run_build(config_for(tmp_path, rows, str(root), version=BASE))
    assert status == 0, err


def test_disk_full_at_any_point_publishes_nothing(tmp_path, rows, run_build, faults,
                                                  reference):
    shards, total, _ = reference
    root = tmp_path / "out"
    publish_base(tmp_path, rows, run_build, root)
    config = config_for(tmp_path, rows, f"faulty://{root}")
    # While spilling, sorting, writing shards, and inside the commit's copies.
    for fraction in (0.1, 0.6, 0.97):
        faults.written, faults.write_budget = 0, int(total * fraction)
        status, _, err = run_build(config)
        assert status == 1, (fraction, err)
        assert "No space left on device" in err, err
        assert_nothing_published(root, err)
    faults.write_budget = None
    status, _, err = run_build(config)
    assert status == 0, err
    assert (root / "LATEST").read_text() == f"{VERSION}\n"
    assert shard_bytes(root / VERSION) == shards
    assert verify.verify_dataset(str(root), deep=True).ok


def test_filesystem_error_inside_the_commit_publishes_nothing(tmp_path, rows, run_build,
                                                             faults, reference):
    shards, _, calls = reference
    root = tmp_path / "out"
    publish_base(tmp_path, rows, run_build, root)
    config = config_for(tmp_path, rows, f"faulty://{root}")
    # The copy commit copies every file, manifest.json last: fail the first
    # copy and the manifest's own copy.
    for call in (1, calls["cp_file"]):
        faults.calls.clear()
        faults.fail_call = {"cp_file": call}
        status, _, err = run_build(config)
        assert status == 1, (call, err)
        assert "injected I/O error in cp_file" in err, err
        assert_nothing_published(root, err)
    faults.fail_call = {}
    status, _, err = run_build(config)
    assert status == 0, err
    assert shard_bytes(root / VERSION) == shards


def test_rename_failing_inside_a_local_commit_publishes_nothing(tmp_path, rows, run_build,
                                                               monkeypatch):
    root = tmp_path / "out"
    publish_base(tmp_path, rows, run_build, root)
    final = str(root / VERSION)
    real_rename = os.rename

    def failing_rename(source, target, *args, **kwargs):
        if str(target) == final:
            raise OSError(5, "injected I/O error in rename", str(target))
        return real_rename(source, target, *args, **kwargs)

    monkeypatch.setattr(commit.os, "rename", failing_rename)
    status, _, err = run_build(config_for(tmp_path, rows, str(root)))
    assert status == 1, err
    assert "injected I/O error in rename" in err
    assert_nothing_published(root, err)
    monkeypatch.setattr(commit.os, "rename", real_rename)
    status, _, err = run_build(config_for(tmp_path, rows, str(root)))
    assert status == 0, err
    assert verify.verify_dataset(str(root), deep=True).ok


def test_latest_that_cannot_be_written_is_reported_and_a_retry_finishes_it(
        tmp_path, rows, run_build, faults, reference):
    _, _, calls = reference
    root = tmp_path / "out"
    status, _, err = run_build(config_for(tmp_path, rows, f"faulty://{root}", version=BASE))
    assert status == 0, err
    # pipe_file writes the owner file, SHA256SUMS, manifest.json, then LATEST:
    # fail the last call a clean build makes.
    faults.fail_call = {"pipe_file": calls["pipe_file"]}
    faults.calls.clear()
    config = config_for(tmp_path, rows, f"faulty://{root}")
    status, _, err = run_build(config)
    # Not 1: that would say nothing was published.
    assert status == 3, err
    assert "is published at" in err and "LATEST could not be updated" in err, err
    assert f"still names '{BASE}'" in err and "nothing was published" not in err, err
    assert (root / "LATEST").read_text() == f"{BASE}\n"
    assert verify.verify_dataset(str(root / VERSION), deep=True).ok
    # Running the same build again finishes the pointer update (no
    # "already published"), and only then.
    faults.fail_call = {}
    status, _, err = run_build(config)
    assert status == 0, err
    assert "LATEST now names it" in err, err
    assert (root / "LATEST").read_text() == f"{VERSION}\n"
    status, _, err = run_build(config)
    assert status == 2 and "already published" in err, err


# --- processes -------------------------------------------------------------------------

CRASHING_WORKER = textwrap.dedent("""\
    # Loaded by every Python process of the build through PYTHONPATH: the
    # first process (the CLI) records its pid; any other (a Beam worker) dies
    # as soon as it reads a CSV file.
    import os
    os.environ.setdefault("RELIABILITY_MAIN_PID", str(os.getpid()))
    if os.environ["RELIABILITY_MAIN_PID"] != str(os.getpid()):
        from recordforge.transforms.readers import csv as csv_reader

        def die(*args, **kwargs):
            os._exit(9)

        csv_reader.iter_csv = die
    """)


def our_message(stderr: str) -> str:
    """recordforge's own one-line verdict among Beam's log output."""
    lines = [line for line in stderr.splitlines() if line.startswith("recordforge build: ")]
    assert len(lines) == 1, stderr[-3000:]
    return lines[0]


def cli_build(cli_command: str, config: Path, *, env: dict | None = None,
              beam_args=("--direct_num_workers=2",)) -> subprocess.CompletedProcess:
    return subprocess.run([cli_command, "build", str(config), "--", *beam_args],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


@pytest.mark.slow
def test_worker_crash_in_multi_processing_mode_fails_cleanly(tmp_path, rows, cli_command,
                                                             run_build):
    root = tmp_path / "out"
    publish_base(tmp_path, rows, run_build, root)
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(CRASHING_WORKER)
    config = config_for(tmp_path, rows, str(root))
    crashed = cli_build(cli_command, config, env={"PYTHONPATH": str(site)})
    assert crashed.returncode == 1, crashed.stderr[-2000:]
    message = our_message(crashed.stderr)
    assert message.startswith("recordforge build: the pipeline failed; nothing was published")
    assert_nothing_published(root, message)

    clean_root = tmp_path / "clean"
    status, _, err = run_build(config_for(tmp_path, rows, str(clean_root)))
    assert status == 0, err
    status, _, err = run_build(config)
    assert status == 0, err
    assert shard_bytes(root / VERSION) == shard_bytes(clean_root / VERSION)
    assert (root / "LATEST").read_text() == f"{VERSION}\n"


def _mount_tmpfs(path: Path, size: str) -> bool:
    if os.geteuid() != 0:
        return False
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                            capture_output=True)
    return result.returncode == 0


@pytest.mark.slow
def test_real_full_disk_with_worker_processes(tmp_path, cli_command, run_build):
    """A real ENOSPC from the kernel, in multi_processing mode: the output
    lives on a 512 KiB tmpfs, the build needs ~1.5 MB."""
    mount = tmp_path / "small"
    mount.mkdir()
    if not _mount_tmpfs(mount, "512k"):
        pytest.skip("cannot mount a tmpfs here (needs root and CAP_SYS_ADMIN)")
    try:
        rows = write_rows(tmp_path / "rows.csv", 12000)
        root = mount / "out"
        publish_base(tmp_path, write_rows(tmp_path / "few.csv", 50), run_build, root)
        config = config_for(tmp_path, rows, str(root), cache=True)
        full = cli_build(cli_command, config)
        assert full.returncode == 1, full.stderr[-2000:]
        message = our_message(full.stderr)
        # The first step to write: the build cache's (its pieces) or the shard writer's.
        assert "No space left on device" in message, message
        assert "ReadAndConvert" in message or "WriteShards" in message, message
        assert_nothing_published(root, message)
        subprocess.run(["mount", "-o", "remount,size=64m", str(mount)], check=True)
        status, _, err = run_build(config)
        assert status == 0, err
        assert verify.verify_dataset(str(root), deep=True).ok
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
