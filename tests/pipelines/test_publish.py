"""Tests for recordforge.pipelines.publish: staging, budget, manifest, commit.

Builds are staged by hand (shards written with tfrecord + encode_example,
plus a _pipeline_result.json), so these tests do not run a Beam pipeline.
"""

import datetime as dt
import gzip
import hashlib
import json
import os
import pickle
import re
import socket
import subprocess
import sys
import threading
import time
import uuid

import fsspec
import pytest
from tfrecord import example_pb2

from recordforge.pipelines import publish
from recordforge.pipelines.publish import commit, owners, verify
from recordforge.pipelines.publish import lock as lock_lib
from recordforge.transforms import layout
from recordforge.transforms.layout import shard_file_name
from recordforge.schemas.errors import ConfigError
from recordforge.schemas.example import encode_example
from recordforge.transforms import tfrecord

FEATURES = {"id": {"type": "int64", "shape": []},
            "label": {"type": "int64", "shape": []},
            "text": {"type": "bytes", "shape": [], "text": True}}
VOCABULARIES = {"label": ["cat", "dog", "eel"]}
SPLITS = {"train": [6, 5], "test": [4]}


def write_staged_build(url, *, splits=SPLITS, compression="gzip", salt="", dead_rows=1,
                       extra_input_rows=0):
    """Writes what the pipeline would into staging `url`; returns the shards."""
    shards = []
    row = 0
    for split, counts in splits.items():
        for index, count in enumerate(counts):
            records = [encode_example({"id": row + i, "label": (row + i) % 3,
                                       "text": f"{salt}row {row + i}"}) for i in range(count)]
            row += count
            data = tfrecord.frame_records(records)
            if compression == "gzip":
                data = tfrecord.gzip_compress(data)
            file = shard_file_name(split, index, len(counts), compression)
            with fsspec.open(f"{url}/{file}", "wb") as handle:
                handle.write(data)
            shards.append({"split": split, "file": file, "num_examples": count,
                           "num_bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    dead = [{"source": "in.csv", "row": 100 + i, "key": None, "stage": "check",
             "reason": "out_of_range", "feature": "id", "message": f"value {i} is above max",
             "input": {"id": i}} for i in range(dead_rows)]
    files = []
    if dead:
        with fsspec.open(f"{url}/dead_letter/part-00000.jsonl", "wb") as handle:
            handle.write("".join(json.dumps(d) + "\n" for d in dead).encode())
        files = ["dead_letter/part-00000.jsonl"]
    result = {"shards": shards,
              "dead_letter": {"num_rows": dead_rows,
                              "by_reason": {"out_of_range": dead_rows} if dead_rows else {},
                              "files": files,
                              "samples": {"out_of_range": dead[0]} if dead else {}},
              "num_input_rows": row + dead_rows + extra_input_rows}
    with fsspec.open(f"{url}/_tmp/spill-0", "wb") as handle:
        handle.write(b"scratch")
    with fsspec.open(f"{url}/{layout.RESULT_FILE}", "wb") as handle:
        handle.write(json.dumps(result).encode())
    return shards


def finalize(staging, **overrides):
    kwargs = dict(name="pets", compression="gzip", features=FEATURES, vocabularies=VOCABULARIES,
                  config={"name": "pets"}, split_names=list(SPLITS), max_error_rate=0.1)
    kwargs.update(overrides)
    return publish.finalize(staging, **kwargs)


def build(root, version="1.0.0", *, overwrite=False, salt="", **overrides):
    staging = publish.begin_build(root, version, overwrite=overwrite)
    write_staged_build(staging.url, salt=salt,
                       compression=overrides.get("compression", "gzip"))
    return finalize(staging, **overrides)


def local_files(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


@pytest.fixture
def memory_root():
    root = f"memory://publish-{uuid.uuid4().hex}/out"
    yield root
    fs, path = fsspec.core.url_to_fs(root)
    if fs.exists(path.rsplit("/", 1)[0]):
        fs.rm(path.rsplit("/", 1)[0], recursive=True)


# --- versions and URLs ------------------------------------------------------------

def test_resolve_version_placeholders():
    now = dt.datetime(2026, 11, 22, 3, 4, 5, tzinfo=dt.timezone.utc)
    assert publish.resolve_version("1.0.0", now) == "1.0.0"
    assert publish.resolve_version("nightly-{date}", now) == "nightly-20261122"
    assert publish.resolve_version("{datetime}", now) == "20261122T030405"
    local = now.astimezone(dt.timezone(dt.timedelta(hours=-5)))
    assert publish.resolve_version("{date}", local) == "20261122"


@pytest.mark.parametrize("template, problem", [
    ("v{time}", "unknown placeholder"), ("v{date", "unbalanced"), ("a/b", "separator"),
    ("1..2", "'..'"), ("my version", "whitespace"), (".hidden", "starts with '.'"),
    ("", "empty"), ("LATEST", "pointer"), ("v*", "letters, digits"),
])
def test_resolve_version_rejects(template, problem):
    with pytest.raises(ConfigError) as caught:
        publish.resolve_version(template)
    assert caught.value.key == "version" and problem in str(caught.value)


# --- publishing --------------------------------------------------------------------

def test_publish_local_layout_manifest_and_checksums(tmp_path):
    root = tmp_path / "out"
    result = build(str(root), config={"output": {"path": "s3://KEY:SECRET@bucket/out"}})
    assert result.version == "1.0.0" and result.num_examples == 15
    assert local_files(root) == [
        "1.0.0/SHA256SUMS", "1.0.0/dead_letter/part-00000.jsonl", "1.0.0/manifest.json",
        "1.0.0/test-00000-of-00001.tfrecord.gz", "1.0.0/train-00000-of-00002.tfrecord.gz",
        "1.0.0/train-00001-of-00002.tfrecord.gz", "LATEST"]
    assert (root / "LATEST").read_text() == "1.0.0\n"
    assert list((root / ".staging").iterdir()) == []  # no staging dir, owner file or lock
    manifest = json.loads((root / "1.0.0" / "manifest.json").read_text())
    assert manifest["name"] == "pets" and manifest["compression"] == "GZIP"
    assert manifest["num_input_rows"] == 16
    assert manifest["dead_letter"] == {"num_rows": 1, "by_reason": {"out_of_range": 1},
                                       "files": ["dead_letter/part-00000.jsonl"]}
    assert manifest["splits"]["train"]["num_examples"] == 11
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", manifest["created"])
    assert "SECRET" not in (root / "1.0.0" / "manifest.json").read_text()
    # SHA256SUMS covers shards and dead letters; coreutils agrees.
    sums = (root / "1.0.0" / "SHA256SUMS").read_text().splitlines()
    assert len(sums) == 4
    run = subprocess.run(["sha256sum", "-c", "--strict", "SHA256SUMS"], cwd=root / "1.0.0",
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    # Shards read back with Python's gzip and the tfrecord package's own proto.
    shard = manifest["splits"]["test"]["shards"][0]
    data = gzip.decompress((root / "1.0.0" / shard["file"]).read_bytes())
    length = int.from_bytes(data[:8], "little")
    example = example_pb2.Example.FromString(data[12:12 + length])
    assert example.features.feature["text"].bytes_list.value == [b"row 11"]


def test_publish_memory_filesystem_copies_manifest_last(memory_root, monkeypatch):
    copied = []
    fs, root = fsspec.core.url_to_fs(memory_root)
    original_copy = type(fs).copy

    def spy(self, path1, path2, *args, **kwargs):
        copied.append(path2.rsplit("/", 1)[-1])
        # While files are copied, the version must not look published.
        assert not self.exists(f"{root}/1.0.0/manifest.json")
        return original_copy(self, path1, path2, *args, **kwargs)

    monkeypatch.setattr(type(fs), "copy", spy)
    result = build(memory_root)
    assert copied[-1] == "manifest.json" and len(copied) == 6
    assert result.url == f"{memory_root}/1.0.0"
    files = sorted(p[len(root) + 1:] for p in fs.find(root))
    assert files == ["1.0.0/SHA256SUMS", "1.0.0/dead_letter/part-00000.jsonl", "1.0.0/manifest.json",
                     "1.0.0/test-00000-of-00001.tfrecord.gz",
                     "1.0.0/train-00000-of-00002.tfrecord.gz",
                     "1.0.0/train-00001-of-00002.tfrecord.gz", "LATEST"]
    assert fs.cat_file(f"{root}/LATEST") == b"1.0.0\n"
    assert publish.read_latest(memory_root) == "1.0.0"
    assert verify.verify_dataset(memory_root, deep=True).ok


def test_uncompressed_build_and_report_hook_files_are_checksummed(tmp_path):
    root = tmp_path / "out"
    seen = {}

    def report_hook(staging_url, manifest, label_counts):
        seen["manifest"] = manifest
        with open(os.path.join(staging_url, "report.html"), "w") as handle:
            handle.write(f"<p>{manifest['name']}</p>")

    build(str(root), compression="none", report_hook=report_hook)
    assert seen["manifest"]["compression"] == "NONE"
    assert "1.0.0/report.html" in local_files(root)
    assert "  report.html" in (root / "1.0.0" / "SHA256SUMS").read_text()
    run = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=root / "1.0.0",
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout
    assert verify.main([str(root)]) == 0


def test_version_exists_and_overwrite(tmp_path):
    root = str(tmp_path / "out")
    build(root)
    with pytest.raises(publish.VersionExistsError, match="--overwrite"):
        publish.begin_build(root, "1.0.0")
    build(root, overwrite=True, salt="new ")
    assert verify.verify_dataset(root).ok
    data = gzip.decompress((tmp_path / "out" / "1.0.0" / "test-00000-of-00001.tfrecord.gz")
                           .read_bytes())
    assert b"new row" in data
    assert list((tmp_path / "out" / ".staging").iterdir()) == []


def test_version_exists_memory(memory_root):
    build(memory_root)
    with pytest.raises(publish.VersionExistsError):
        publish.begin_build(memory_root, "1.0.0")
    build(memory_root, overwrite=True, salt="new ")
    assert verify.verify_dataset(memory_root).ok


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "rename-aside"])
def test_overwrite_keeps_old_version_readable_until_new_is_complete(tmp_path, monkeypatch,
                                                                     exchange):
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc/self/fd to pin a directory")
    root = tmp_path / "out"
    build(str(root))
    old_manifest = (root / "1.0.0" / "manifest.json").read_bytes()
    if not exchange:
        monkeypatch.setattr(commit, "_exchange", lambda a, b: False)
    states = []
    stop = threading.Event()
    saw_old = threading.Event()

    def reader():
        # A reader polling the version during the whole overwrite must find
        # the old or the new version complete, never a mix. It pins the
        # directory it opened (as a reader holding it open would), so a
        # version swapped out and deleted under it is told from damage.
        # (Rename-aside has a window of two renames where it is absent.)
        path = root / "1.0.0"
        while not stop.is_set():
            try:
                fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
            except FileNotFoundError:
                states.append("absent")
                continue
            try:
                pinned = f"/proc/self/fd/{fd}"
                data = open(f"{pinned}/manifest.json", "rb").read()
                report = verify.verify_dataset(pinned, workers=1)
                try:
                    current = os.stat(path).st_ino == os.fstat(fd).st_ino
                except FileNotFoundError:
                    current = False
            finally:
                os.close(fd)
            if report.ok:
                states.append("old" if data == old_manifest else "new")
                if data == old_manifest:
                    saw_old.set()
            elif current:
                states.append(f"damaged {report.problems}")

    def report_hook(staging_url, manifest, label_counts):
        # The new build is complete in staging; the old one is still live,
        # and the commit waits until the reader has read it whole once (on a
        # loaded machine a fixed pause was not always long enough).
        assert (root / "1.0.0" / "manifest.json").read_bytes() == old_manifest
        assert saw_old.wait(30)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        staging = publish.begin_build(str(root), "1.0.0", overwrite=True)
        write_staged_build(staging.url, salt="new ")
        finalize(staging, report_hook=report_hook)
        time.sleep(0.05)
    finally:
        stop.set()
        thread.join()
    assert not [s for s in states if s.startswith("damaged")]
    assert "old" in states and states[-1] == "new"
    # Once the new version is seen, the old one never comes back.
    assert "old" not in states[states.index("new"):]
    if exchange:
        assert "absent" not in states
    assert (root / "1.0.0" / "manifest.json").read_bytes() != old_manifest


def test_interrupted_rename_aside_commit_is_rolled_back(tmp_path, monkeypatch):
    root = tmp_path / "out"
    build(str(root))
    old_manifest = (root / "1.0.0" / "manifest.json").read_bytes()
    monkeypatch.setattr(commit, "_exchange", lambda a, b: False)
    real_rename = os.rename
    calls = []

    def dying_rename(src, dst):
        calls.append((src, dst))
        # The old version is aside; die before the new one moves in, and
        # again while the commit puts the old one back.
        if len(calls) in (2, 3):
            raise KeyboardInterrupt("killed")
        return real_rename(src, dst)

    monkeypatch.setattr(commit.os, "rename", dying_rename)
    staging = publish.begin_build(str(root), "1.0.0", overwrite=True)
    write_staged_build(staging.url, salt="new ")
    with pytest.raises(KeyboardInterrupt):
        finalize(staging)
    monkeypatch.setattr(commit.os, "rename", real_rename)
    assert not (root / "1.0.0").exists()
    # The next build of the version puts the old one back before anything else.
    with pytest.raises(publish.VersionExistsError):
        publish.begin_build(str(root), "1.0.0")
    assert (root / "1.0.0" / "manifest.json").read_bytes() == old_manifest
    assert verify.verify_dataset(str(root)).ok
    assert [p.name for p in (root / ".staging").iterdir()] == []


# --- failing builds ------------------------------------------------------------------

def test_error_budget_passes_at_the_limit_and_fails_above(tmp_path):
    root = tmp_path / "out"
    staging = publish.begin_build(str(root), "1.0.0")
    write_staged_build(staging.url, dead_rows=2)  # 2 of 17 rows: 11.8%
    with pytest.raises(publish.BuildFailed) as caught:
        finalize(staging, max_error_rate=0.1)
    message = str(caught.value)
    assert "2 of 17 input rows (11.76%) failed" in message
    assert "out_of_range: 2 rows, e.g. in.csv row 100 feature 'id': value 0 is above max" in message
    kept = root / ".failed" / f"1.0.0.{staging.build_id}" / "dead_letter"
    assert str(kept) in message and caught.value.kept_at == f"{kept}/"
    assert len((kept / "part-00000.jsonl").read_text().splitlines()) == 2
    assert caught.value.reasons[0][:2] == ("out_of_range", 2)
    assert not (root / "1.0.0").exists() and not (root / "LATEST").exists()
    assert list((root / ".staging").iterdir()) == []

    staging = publish.begin_build(str(root), "1.0.0")
    write_staged_build(staging.url, dead_rows=2)
    assert finalize(staging, max_error_rate=2 / 17).version == "1.0.0"


def test_max_errors_count(tmp_path):
    staging = publish.begin_build(str(tmp_path), "v1")
    write_staged_build(staging.url, dead_rows=2)
    with pytest.raises(publish.BuildFailed, match="max_errors=1"):
        finalize(staging, max_error_rate=None, max_errors=1)


def test_accounting_invariant_failure(tmp_path):
    staging = publish.begin_build(str(tmp_path), "v1")
    write_staged_build(staging.url, extra_input_rows=3)
    with pytest.raises(publish.BuildFailed, match=r"row accounting failed: 19 input rows but 15 "
                       r"examples in shards \+ 1 dead letters \(3 rows lost\)"):
        finalize(staging)
    staging = publish.begin_build(str(tmp_path), "v1")
    write_staged_build(staging.url, extra_input_rows=-2)
    with pytest.raises(publish.BuildFailed, match="2 rows duplicated"):
        finalize(staging)
    assert not (tmp_path / "v1").exists()


def test_empty_split_fails(tmp_path):
    staging = publish.begin_build(str(tmp_path), "v1")
    write_staged_build(staging.url, splits={"train": [3]}, dead_rows=0)
    with pytest.raises(publish.BuildFailed, match="'test' ended up with no examples"):
        finalize(staging, split_names=["train", "test"])


def test_missing_result_unexpected_file_and_bad_shard_fail(tmp_path):
    staging = publish.begin_build(str(tmp_path), "v1")
    with pytest.raises(publish.BuildFailed, match="_pipeline_result.json is missing"):
        finalize(staging)

    staging = publish.begin_build(str(tmp_path), "v1")
    write_staged_build(staging.url)
    with open(f"{staging.url}/train-00005-of-00009.tfrecord.gz", "wb") as handle:
        handle.write(b"left over")
    with pytest.raises(publish.BuildFailed, match="unexpected files .*train-00005-of-00009"):
        finalize(staging)

    # A shard damaged after the pipeline measured it: verification stops it.
    staging = publish.begin_build(str(tmp_path), "v1")
    shards = write_staged_build(staging.url, compression="none")
    path = f"{staging.url}/{shards[0]['file']}"
    with open(path, "r+b") as handle:
        handle.seek(30)
        byte = handle.read(1)
        handle.seek(30)
        handle.write(bytes([byte[0] ^ 1]))
    with pytest.raises(publish.BuildFailed, match="failed verification") as caught:
        finalize(staging, compression="none")
    assert caught.value.problems[0].file == shards[0]["file"]
    assert not (tmp_path / "v1").exists()
    assert [p.name for p in (tmp_path / ".staging").iterdir()] == []


def test_abort_and_context_manager_remove_staging(tmp_path, memory_root):
    for root in (str(tmp_path), memory_root):
        fs, path = fsspec.core.url_to_fs(root)
        with pytest.raises(RuntimeError):
            with publish.begin_build(root, "v1") as staging:
                write_staged_build(staging.url)
                raise RuntimeError("pipeline failed")
        assert not fs.exists(f"{path}/.staging/v1.{staging.build_id}")
        assert fs.find(f"{path}/.staging") == []
    with pytest.raises(TypeError, match="staging.url"):
        pickle.dumps(staging)


# --- staging ownership ----------------------------------------------------------------

def _fake_staging(root, version, *, host, pid, heartbeat_age, pid_start=None):
    build_id = f"20260101T000000Z-{uuid.uuid4().hex[:12]}"
    base = root / ".staging" / f"{version}.{build_id}"
    (base / "_tmp").mkdir(parents=True)
    (base / "train-00000-of-00001.tfrecord").write_bytes(b"partial")
    base.with_name(base.name + ".owner.json").write_text(json.dumps(
        {"build_id": build_id, "host": host, "pid": pid, "pid_start": pid_start,
         "started": "2026-01-01T00:00:00Z", "heartbeat": time.time() - heartbeat_age}))
    return base


def test_stale_staging_is_cleaned_and_live_staging_left_alone(tmp_path):
    root = tmp_path / "out"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead_pid = int(dead.stdout)
    crashed_here = _fake_staging(root, "1.0", host=socket.gethostname(), pid=dead_pid,
                                 heartbeat_age=1)
    silent_elsewhere = _fake_staging(root, "1.0", host="other-host", pid=1,
                                     heartbeat_age=owners.STALE_AFTER + 60)
    running_elsewhere = _fake_staging(root, "1.0", host="other-host", pid=1, heartbeat_age=5)
    # Any build cleans dead builds of every version (a nightly "{date}"
    # version is never built twice), and leaves live ones alone.
    other_version = _fake_staging(root, "1.0.1", host=socket.gethostname(), pid=dead_pid,
                                  heartbeat_age=1)
    other_version_silent = _fake_staging(root, "2026-01-01.x", host="other-host", pid=1,
                                         heartbeat_age=owners.STALE_AFTER + 60)
    other_version_running = _fake_staging(root, "0.1", host="other-host", pid=1,
                                          heartbeat_age=5)
    live = publish.begin_build(str(root), "1.0")
    staging = publish.begin_build(str(root), "1.0")  # sees `live`: same process, fresh
    try:
        names = {p.name for p in (root / ".staging").iterdir()}
        assert crashed_here.name not in names and crashed_here.name + ".owner.json" not in names
        assert silent_elsewhere.name not in names
        assert running_elsewhere.name in names and running_elsewhere.name + ".owner.json" in names
        assert other_version.name not in names
        assert other_version.name + ".owner.json" not in names
        assert other_version_silent.name not in names
        assert other_version_running.name in names
        assert os.path.isdir(live.url) and os.path.isdir(staging.url)
    finally:
        live.abort()
        staging.abort()


def test_a_build_writing_its_first_owner_file_is_not_taken_for_dead(tmp_path):
    """A build that has only the temporary file of its first owner record
    is being born (two builds started at once saw this), unless it started
    longer ago than a heartbeat may be missed."""
    staging_dir = tmp_path / ".staging"
    staging_dir.mkdir()
    fresh_id = owners.new_build_id()
    being_born = staging_dir / f"v1.{fresh_id}.owner.json.{uuid.uuid4().hex}.tmp"
    being_born.write_text("{}")
    crashed = staging_dir / f"v1.20260101T000000Z-{uuid.uuid4().hex[:12]}.owner.json." \
                            f"{uuid.uuid4().hex}.tmp"
    crashed.write_text("{}")
    publish.begin_build(str(tmp_path), "v1").abort()
    assert being_born.exists()
    assert not crashed.exists()


def test_reused_pid_with_old_start_time_is_stale(tmp_path):
    # Our own pid, but recorded with a different process start time: the
    # process that owned the staging is gone and the pid was reused.
    base = _fake_staging(tmp_path, "v1", host=socket.gethostname(), pid=os.getpid(),
                         heartbeat_age=1, pid_start="1")
    if owners.process_start(os.getpid()) is None:
        pytest.skip("no /proc: pid reuse cannot be told")
    publish.begin_build(str(tmp_path), "v1").abort()
    assert not base.exists()


def test_heartbeat_refreshes_owner_file(tmp_path):
    staging = publish.begin_build(str(tmp_path), "v1", heartbeat_interval=0.05)
    owner = tmp_path / ".staging" / f"v1.{staging.build_id}.owner.json"
    first = json.loads(owner.read_text())
    assert first["pid"] == os.getpid() and first["host"] == socket.gethostname()
    deadline = time.time() + 5
    while json.loads(owner.read_text())["heartbeat"] == first["heartbeat"]:
        assert time.time() < deadline, "heartbeat never refreshed"
        time.sleep(0.02)
    staging.abort()
    assert not owner.exists()


# --- concurrent builds ---------------------------------------------------------------

@pytest.mark.parametrize("kind", ["local", "memory"])
def test_concurrent_finalize_publishes_exactly_one(tmp_path, memory_root, kind):
    root = str(tmp_path / "out") if kind == "local" else memory_root
    stagings = [publish.begin_build(root, "1.0.0") for _ in range(2)]
    for staging, salt in zip(stagings, ("first ", "second ")):
        write_staged_build(staging.url, salt=salt)
    barrier = threading.Barrier(2)
    outcomes = {}

    def run(index):
        def hook(staging_url, manifest, label_counts):
            barrier.wait()  # both builds are complete in staging before either commits
        try:
            outcomes[index] = finalize(stagings[index], report_hook=hook)
        except publish.BuildFailed as error:
            outcomes[index] = error

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    results = [o for o in outcomes.values() if isinstance(o, publish.PublishResult)]
    errors = [o for o in outcomes.values() if isinstance(o, publish.ConcurrentBuildError)]
    assert len(results) == 1 and len(errors) == 1, outcomes
    assert "published nothing" in str(errors[0])
    winner = results[0]
    fs, path = fsspec.core.url_to_fs(root)
    published = json.loads(fs.cat_file(f"{path}/1.0.0/manifest.json"))
    assert published["splits"] == winner.manifest["splits"]
    assert verify.verify_dataset(root, deep=True).ok  # all files are the winner's
    assert fs.find(f"{path}/.staging") == []


def test_concurrent_build_loses_if_version_published_meanwhile(tmp_path):
    root = str(tmp_path)
    slow = publish.begin_build(root, "v1")
    write_staged_build(slow.url, salt="slow ")
    build(root, "v1")
    with pytest.raises(publish.ConcurrentBuildError, match="published .* by another build"):
        finalize(slow)
    assert verify.verify_dataset(root).ok


def test_stale_commit_lock_is_broken(tmp_path):
    root = tmp_path / "out"
    (root / ".staging").mkdir(parents=True)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    (root / ".staging" / "v1.commit.lock").write_text(json.dumps(
        {"build_id": "x", "host": socket.gethostname(), "pid": int(dead.stdout),
         "heartbeat": time.time(), "owner": str(root / ".staging" / "v1.x.owner.json")}))
    build(str(root), "v1")
    assert not (root / ".staging" / "v1.commit.lock").exists()


def test_live_commit_lock_blocks_until_timeout(tmp_path, monkeypatch):
    root = tmp_path / "out"
    holder = publish.begin_build(str(root), "v1")
    lock = lock_lib.CommitLock(holder.out, "v1", build_id=holder.build_id,
                                  stale_after=owners.STALE_AFTER)
    assert lock.try_acquire()
    monkeypatch.setattr(lock_lib, "LOCK_WAIT", 0.3)
    staging = publish.begin_build(str(root), "v1")
    write_staged_build(staging.url)
    with pytest.raises(publish.ConcurrentBuildError, match="is publishing it"):
        finalize(staging)
    lock.release()
    holder.abort()
    assert not (root / "v1").exists()
