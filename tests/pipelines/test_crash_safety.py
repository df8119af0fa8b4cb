"""Crash safety: builds killed with SIGKILL at random moments.

After every kill: no ``<version>/manifest.json`` for an incomplete version
(a present manifest always verifies), ``LATEST`` unmoved unless the version
it names is complete, and a version that was complete before an overwrite
is complete again once the next build has started (a crash between the two
renames of the rename-aside commit is rolled back). After all trials the
next build completes, cleans every leftover of the killed ones and writes
shards byte-identical to a clean build.

Two drivers: a small script calling publish directly with widened commit
windows (so kills land inside the commit), and the real ``recordforge
build`` CLI on a tiny CSV dataset. RECORDFORGE_CRASH_TRIALS raises the
number of trials per driver for a longer run (default 10).
"""

import gzip
import importlib.util
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from recordforge.pipelines import publish
from recordforge.pipelines.publish import owners, verify
from recordforge.transforms.layout import OWNER_SUFFIX

TRIALS = int(os.environ.get("RECORDFORGE_CRASH_TRIALS", "10"))
VERSION = "1.0.0"
BASE_VERSION = "0.9.0"
STAGED_MANIFEST = f".staging/{VERSION}.*/manifest.json"
COMMIT_LOCK = f".staging/{VERSION}.commit.lock"

DRIVER = textwrap.dedent('''
    """A build that writes shards slowly and commits with widened windows."""
    import hashlib, json, os, random, shutil, sys, time
    import fsspec
    from recordforge.pipelines import publish
    from recordforge.pipelines.publish import commit
    from recordforge.transforms.layout import shard_file_name
    from recordforge.schemas.example import encode_example
    from recordforge.transforms import tfrecord

    root, version, mode, seed = sys.argv[1:5]
    rng = random.Random(int(seed))

    def pause():
        time.sleep(rng.uniform(0, 0.02))

    def widened(function):
        def wrapper(*args, **kwargs):
            pause()
            result = function(*args, **kwargs)
            pause()
            return result
        return wrapper

    if mode == "aside":
        commit._exchange = lambda a, b: False
    else:
        commit._exchange = widened(commit._exchange)
    os.rename = widened(os.rename)
    os.replace = widened(os.replace)
    os.link = widened(os.link)
    shutil.rmtree = widened(shutil.rmtree)

    staging = publish.begin_build(root, version, overwrite=True)
    shards, row = [], 0
    for split, count in (("train", 2), ("test", 1)):
        for index in range(count):
            records = [encode_example({"id": row + i, "text": f"row {row + i}"})
                       for i in range(40)]
            row += 40
            data = tfrecord.gzip_compress(tfrecord.frame_records(records))
            file = shard_file_name(split, index, count, "gzip")
            with fsspec.open(f"{staging.url}/{file}", "wb") as handle:
                for start in range(0, len(data), 64):
                    handle.write(data[start:start + 64])
                    handle.flush()
                    pause()
            shards.append({"split": split, "file": file, "num_examples": 40,
                           "num_bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    with fsspec.open(staging.result_url, "w") as handle:
        json.dump({"shards": shards, "num_input_rows": row,
                   "dead_letter": {"num_rows": 0, "by_reason": {}, "files": [],
                                   "samples": {}}}, handle)
    publish.finalize(staging, name="crash", compression="gzip",
                     features={"id": {"type": "int64", "shape": []},
                               "text": {"type": "bytes", "shape": []}},
                     vocabularies={}, config={}, split_names=["train", "test"])
''')

CSV_CONFIG = textwrap.dedent('''
    name: crash
    version: "{version}"
    source:
      type: csv
      path: {csv}
    features:
      id: {{type: int64}}
      name: {{type: string}}
      score: {{type: float}}
    splits: {{train: 0.8, test: 0.2}}
    key: id
    output:
      path: {output}
      compression: gzip
      shard_size: 1MB
    dead_letter:
      max_error_rate: 0.01
''')


class Driver:
    """How to start one build of VERSION into `root` (a subprocess command)."""

    def __init__(self, tmp_path: Path, kind: str):
        self.kind = kind
        self.tmp_path = tmp_path
        if kind == "script":
            self.script = tmp_path / "driver.py"
            self.script.write_text(DRIVER)
        else:
            self.csv = tmp_path / "rows.csv"
            rng = random.Random(7)
            self.csv.write_text("id,name,score\n" + "".join(
                f"{i},name{i},{rng.random():.4f}\n" for i in range(300)))

    def command(self, root: Path, seed: int, mode: str = "exchange") -> list[str]:
        if self.kind == "script":
            return [sys.executable, str(self.script), str(root), VERSION, mode, str(seed)]
        config = self.tmp_path / f"config-{root.name}.yaml"
        config.write_text(CSV_CONFIG.format(version=VERSION, csv=self.csv, output=root))
        cli = Path(sys.executable).with_name("recordforge")
        return [str(cli), "build", str(config), "--overwrite", "--",
                "--direct_running_mode=in_memory"]

    def run(self, root: Path, seed: int = 0) -> subprocess.CompletedProcess:
        return subprocess.run(self.command(root, seed), capture_output=True, text=True,
                              timeout=120)


def _cli_available() -> bool:
    # Cheap: collection must not pay for importing Beam.
    return (Path(sys.executable).with_name("recordforge").exists()
            and importlib.util.find_spec("recordforge.pipelines.build") is not None)


def _shard_bytes(version_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(version_dir.iterdir())
            if ".tfrecord" in p.name}


def _assert_same_shards(found: dict[str, bytes], reference: dict[str, bytes]) -> None:
    """The shards equal the clean build's; when one does not, the message
    says whether its records differ or only their gzip compression."""
    assert sorted(found) == sorted(reference)
    for name, data in found.items():
        if data == reference[name]:
            continue
        if name.endswith(".gz"):
            same = gzip.decompress(data) == gzip.decompress(reference[name])
            kind = "the same records, compressed into other bytes" if same else "other records"
        else:
            kind = "other records"
        pytest.fail(f"{name}: {len(data)} bytes against the clean build's "
                    f"{len(reference[name])}: {kind}")


def _publish_base(root: Path) -> None:
    """A different, complete version that LATEST points at before the trials."""
    staging = publish.begin_build(str(root), BASE_VERSION)
    from recordforge.transforms.layout import shard_file_name
    from recordforge.schemas.example import encode_example
    from recordforge.transforms import tfrecord
    import hashlib

    shards = []
    for split in ("train", "test"):
        data = tfrecord.frame_records([encode_example({"id": 1, "text": split})])
        file = shard_file_name(split, 0, 1, "none")
        (Path(staging.url) / file).write_bytes(data)
        shards.append({"split": split, "file": file, "num_examples": 1, "num_bytes": len(data),
                       "sha256": hashlib.sha256(data).hexdigest()})
    (Path(staging.result_url)).write_text(json.dumps({
        "shards": shards, "num_input_rows": 2,
        "dead_letter": {"num_rows": 0, "by_reason": {}, "files": [], "samples": {}}}))
    publish.finalize(staging, name="base", compression="none",
                     features={"id": {"type": "int64", "shape": []},
                               "text": {"type": "bytes", "shape": []}},
                     vocabularies={}, config={}, split_names=["train", "test"])


def _kill_at(command: list[str], delay: float, *, root: Path, trigger: str | None) -> bool:
    """Starts `command` in its own process group and SIGKILLs the group
    `delay` seconds after it starts or, with `trigger` (a glob under
    `root`), `delay` seconds after a matching file appears. Returns True if
    the process was killed before it exited."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    started = time.monotonic()
    deadline = started + delay
    try:
        while process.poll() is None:
            now = time.monotonic()
            if trigger is not None:
                if list(root.glob(trigger)):
                    time.sleep(delay)
                    break
                if now - started > 60:
                    break
            elif now >= deadline:
                break
            time.sleep(0.002)
        killed = process.poll() is None
        if killed:
            os.killpg(process.pid, signal.SIGKILL)
        return killed
    finally:
        process.wait(timeout=30)


def _check_invariants(root: Path, latest_before: str, was_complete: bool, trial: str) -> str:
    """Asserts what a reader may trust after a kill; returns LATEST."""
    version_dir = root / VERSION
    if (version_dir / "manifest.json").exists():
        report = verify.verify_dataset(str(version_dir))
        assert report.ok, f"{trial}: a manifest for an incomplete version: {report.problems}"
    for entry in root.iterdir():
        if entry.is_dir() and not entry.name.startswith("."):
            assert (entry / "manifest.json").exists(), f"{trial}: {entry.name} has no manifest"
    latest = (root / "LATEST").read_text().strip()
    assert latest in (latest_before, VERSION), f"{trial}: LATEST is {latest!r}"
    if latest != latest_before:
        assert verify.verify_dataset(str(root)).ok, f"{trial}: LATEST moved to a damaged version"
    if was_complete and not version_dir.exists():
        # Killed between the two renames of a rename-aside commit: the next
        # build's start rolls it back, so the version is complete again.
        publish.begin_build(str(root), VERSION, overwrite=True).abort()
        assert verify.verify_dataset(str(version_dir)).ok, f"{trial}: overwrite lost {VERSION}"
    return latest


def _run_trials(tmp_path: Path, kind: str) -> None:
    driver = Driver(tmp_path, kind)
    reference_root = tmp_path / "reference"
    started = time.monotonic()
    clean = driver.run(reference_root)
    full_run = time.monotonic() - started
    assert clean.returncode == 0, clean.stderr[-3000:]
    reference = _shard_bytes(reference_root / VERSION)
    assert reference

    root = tmp_path / "trials"
    _publish_base(root)
    latest = BASE_VERSION
    rng = random.Random(20261122 + TRIALS)
    killed_count = 0
    # Trials cycle through: a kill at a random time of the whole run; a kill
    # shortly after the staged manifest appears (verification, commit); and,
    # with the rename-aside commit, a kill shortly after the commit lock is
    # taken (inside the two renames).
    plans = [("exchange", None), ("exchange", STAGED_MANIFEST), ("aside", None),
             ("aside", COMMIT_LOCK)]
    for trial in range(TRIALS):
        was_complete = (root / VERSION / "manifest.json").exists()
        mode, trigger = plans[trial % len(plans)]
        delay = rng.uniform(0.05, full_run * 1.1) if trigger is None else rng.uniform(0, 0.06)
        killed = _kill_at(driver.command(root, seed=trial, mode=mode), delay, root=root,
                          trigger=trigger)
        killed_count += killed
        latest = _check_invariants(root, latest, was_complete,
                                   f"{kind} trial {trial} ({mode}, killed={killed})")
    assert killed_count >= TRIALS // 2, "too few trials were killed mid-build"

    # A trial killed while writing its first owner file leaves only that
    # file's temporary, which recovery rightly keeps for BIRTH_GRACE seconds
    # (its build may still be starting); one such leftover is planted, and
    # all are aged past the grace, so the final build's recovery must treat
    # them as the dead builds' they are.
    _plant_unborn_owner_temporary(root)
    _age_unborn_owner_temporaries(root)
    final = driver.run(root, seed=TRIALS)
    assert final.returncode == 0, final.stderr[-3000:]
    assert verify.verify_dataset(str(root), deep=True).ok
    assert (root / "LATEST").read_text() == f"{VERSION}\n"
    _assert_same_shards(_shard_bytes(root / VERSION), reference)
    assert (root / BASE_VERSION / "manifest.json").exists()
    # Everything the killed builds left in .staging was theirs and is gone.
    assert sorted(p.name for p in (root / ".staging").iterdir()) == []


def _plant_unborn_owner_temporary(root: Path) -> None:
    """Leaves in .staging what a build killed halfway through writing its
    first owner file leaves: a part of that file's temporary copy."""
    build_id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-0123456789ab"
    temporary = root / ".staging" / f"{VERSION}.{build_id}{OWNER_SUFFIX}.{'5f3a' * 8}.tmp"
    temporary.write_text('{"build_id": "' + build_id)


def _age_unborn_owner_temporaries(root: Path) -> None:
    """Moves the modification time of every owner-file temporary in
    .staging back past `owners.BIRTH_GRACE`."""
    past = time.time() - owners.BIRTH_GRACE - 5
    for entry in (root / ".staging").glob(f"*{OWNER_SUFFIX}.*"):
        os.utime(entry, (past, past))


def test_killed_publish_driver_never_publishes_incomplete_versions(tmp_path):
    _run_trials(tmp_path, "script")


@pytest.mark.skipif(not _cli_available(), reason="recordforge build CLI not installed")
def test_killed_cli_builds_never_publish_incomplete_versions(tmp_path):
    _run_trials(tmp_path, "cli")
