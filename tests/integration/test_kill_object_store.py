"""kill -9 at any moment of a build or an --overwrite on S3 (s3fs + moto
server): a reader of LATEST always finds a complete version, the previous
one or the new one (manifest present, `verify` passes, its shards are one
of the two builds' bytes), and the next build cleans up and publishes.

Moments are counted in requests: an uninterrupted run of the same build is
recorded first, then each trial kills the build's process group as soon
as the server has received its k-th request, for k drawn at random over the
whole build and, more densely, over its commit (where the version and LATEST
change). A reader thread polls LATEST and the manifest it names throughout,
so a window that exists only while a commit runs is caught too. The last
test kills an overwrite's commit at every one of its requests in turn.
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time

import fsspec
import pytest

from recordforge.transforms.layout import RESULT_FILE

pytestmark = pytest.mark.slow

REPO = pathlib.Path(__file__).resolve().parents[2]
FLOWERS = REPO / "configs" / "examples" / "flowers.yaml"
# The second content: the same rows in key order rather than shuffled, so the
# old and the new version differ in every shard.
OTHER = ["--set", "output.shuffle=false"]
SEED = int(os.environ.get("RECORDFORGE_KILL_SEED", "20261125"))


def _fresh_s3():
    """An s3fs instance with no cached listings (each check sees the store now)."""
    fsspec.get_filesystem_class("s3").clear_instance_cache()
    return fsspec.filesystem("s3")


class LatestReader(threading.Thread):
    """Reads LATEST and then the manifest it names, over and over, as a
    reader of the dataset would; keeps every fault it saw."""

    def __init__(self, root: str, agent: str):
        super().__init__(daemon=True)
        self.root = root
        self.agent = agent
        self.faults: list[str] = []
        self.reads = 0
        self._halt = threading.Event()

    def run(self) -> None:
        import s3fs
        fs = s3fs.S3FileSystem(skip_instance_cache=True, use_listings_cache=False,
                               config_kwargs={"user_agent_extra": self.agent})
        while not self._halt.wait(0.03):
            try:
                latest = fs.cat_file(f"{self.root}/LATEST").decode().strip()
                manifest = json.loads(fs.cat_file(f"{self.root}/{latest}/manifest.json"))
            except FileNotFoundError as error:
                manifest, missing = None, error
            try:
                again = fs.cat_file(f"{self.root}/LATEST").decode().strip()
            except FileNotFoundError:
                continue
            if again != latest:
                continue  # LATEST moved while reading: read the new one next time
            self.reads += 1
            if manifest is None:
                self.faults.append(f"LATEST names {latest!r}, which has no manifest.json "
                                   f"({missing})")
            elif not (latest == manifest.get("version")
                      or latest.startswith(f"{manifest.get('version')}.")):
                self.faults.append(f"LATEST names {latest!r}, whose manifest is of version "
                                   f"{manifest.get('version')!r}")

    def stop(self) -> None:
        self._halt.set()
        self.join()


def _start(support, env, *args) -> subprocess.Popen:
    return subprocess.Popen([*support.RECORDFORGE, "build", str(FLOWERS), *args],
                            cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)


def _kill_after(server, process: subprocess.Popen, mark: int, k: int) -> bool:
    """SIGKILLs the build's process group once the server has received `k`
    requests after `mark`. False if the build finished first."""
    while server.mark() - mark < k:
        if process.poll() is not None:
            return False
        time.sleep(0.002)
    if isinstance(process, _Child):
        process.kill()
    else:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    return True


def _published(support, root: str) -> tuple[str, dict[str, str]]:
    """(LATEST's version, digests of its data files) after checking it the
    way a reader does: LATEST names a version with a manifest, and
    verification of the output root passes."""
    from recordforge.pipelines.publish import verify

    fs = _fresh_s3()
    latest = fs.cat_file(f"{root}/LATEST").decode().strip()
    assert fs.exists(f"{root}/{latest}/manifest.json"), \
        f"LATEST names {latest!r}, which has no manifest.json"
    report = verify.verify_dataset(f"s3://{root}")
    assert report.ok, "\n".join(map(str, report.problems))
    return latest, support.digests(fs, f"{root}/{latest}")


def _commit_window(requests: list[tuple[str, str]], root: str) -> tuple[int, int]:
    """(first, last) request index of the commit in an uninterrupted run:
    from the lock's creation to LATEST's put."""
    lock = _lock_put(requests)
    latest = max(i for i, (kind, url) in enumerate(requests)
                 if kind == "PutObject" and url.split("?")[0].endswith(f"{root}/LATEST"))
    return lock, latest


@pytest.fixture(scope="module")
def contents(tmp_path_factory, support):
    """Digests of the two contents, built locally."""
    out = tmp_path_factory.mktemp("contents")
    found = []
    for extra in ([], OTHER):
        target = out / f"c{len(found)}"
        support.run_recordforge("build", FLOWERS, "--output", target, *extra,
                                env=support.base_env())
        found.append(support.digests(fsspec.filesystem("file"), str(target / "1.0.0")))
    assert found[0] != found[1]
    return found


@pytest.mark.parametrize("mode", ["overwrite", "new_version"])
def test_kill_9_never_leaves_latest_without_a_complete_version(mode, moto, contents, support,
                                                                capsys):
    bucket = f"kill-{mode.replace('_', '-')}"
    moto.create_bucket(bucket)
    root = f"{bucket}/flowers"
    output = f"s3://{root}"
    env = support.base_env(**moto.env)
    rng = random.Random(f"{SEED}-{mode}")

    support.run_recordforge("build", FLOWERS, "--output", output, env=env)
    assert _published(support, root)[1] == contents[0]

    def args(trial: int) -> list[str]:
        if mode == "overwrite":  # alternate contents, one version
            return ["--output", output, "--overwrite", *(OTHER if trial % 2 == 0 else [])]
        # a new version each time, LATEST moving on
        return ["--output", output, "--set", f"version=1.0.{trial + 1}", *OTHER]

    reader = LatestReader(root, support.READER_AGENT)
    reader.start()
    try:
        # The uninterrupted run gives the request count and the commit's place.
        mark = moto.mark()
        reference = _start(support, env, *args(0))
        assert reference.wait(timeout=300) == 0, reference.stderr.read().decode()[-3000:]
        requests = moto.requests_since(mark)
        first, last = _commit_window(requests, root)
        # Overwrites: more moments, most in the commit, where the published
        # version and LATEST change; new versions only move LATEST at the end.
        spread, commit = (1, 5) if mode == "overwrite" else (1, 2)
        moments = sorted({rng.randint(1, len(requests)) for _ in range(spread)}
                         | {rng.randint(first + 1, last + 1) for _ in range(commit)})
        outcomes = []
        for trial, k in enumerate(moments, start=1):
            mark = moto.mark()
            process = _start(support, env, *args(trial))
            killed = _kill_after(moto, process, mark, k)
            latest, got = _published(support, root)
            assert got in contents, f"k={k}: LATEST ({latest}) holds neither build's bytes"
            outcomes.append((k, killed, latest, contents.index(got)))
        # The next build after all the kills cleans up and publishes.
        support.run_recordforge("build", FLOWERS, *args(len(moments) + 1), env=env)
        latest, got = _published(support, root)
    finally:
        reader.stop()
    with capsys.disabled():
        print(f"\nkill -9 {mode}: {len(requests)} requests per build, commit at "
              f"{first + 1}-{last + 1}; (k, killed, LATEST, content) = {outcomes}; "
              f"the reader read LATEST {reader.reads} times, {len(reader.faults)} faults")
    assert reader.faults == [], reader.faults[:5]
    assert reader.reads > 0
    # Nothing is left in staging: the last build removed what the killed ones left.
    fs = _fresh_s3()
    leftovers = [p for p in fs.find(f"{root}/.staging")]
    assert leftovers == [], leftovers
    # Every version directory left is a complete version: what killed
    # commits had copied under an unpublished name is gone too.
    for entry in fs.ls(root, detail=False):
        name = entry.rsplit("/", 1)[-1]
        if name not in ("LATEST", ".staging"):
            assert fs.exists(f"{entry}/manifest.json"), f"{name} has no manifest.json"
    last_args = args(len(moments) + 1)
    assert got == contents[1 if OTHER[1] in last_args else 0]
    if mode == "new_version":
        assert latest == f"1.0.{len(moments) + 2}"


# The sweep kills, at each request of an overwrite commit in turn, a process
# that publishes a small staged build (`_PUBLISHER`: begin_build, which
# recovers what the last kill left, then finalize) rather than a whole build:
# the commit's requests are the same kinds. Each such process is forked from
# one that has imported recordforge and s3fs already, so a point costs the
# commit's requests, not an interpreter's start. RECORDFORGE_SWEEP_LIMIT caps
# the points for a quick local run (every point when unset, as CI runs it).
SWEEP_LIMIT = int(os.environ.get("RECORDFORGE_SWEEP_LIMIT", "0")) or None

_PUBLISHER = textwrap.dedent("""\
    import hashlib, json, os, sys, traceback
    import fsspec, s3fs
    from recordforge.pipelines import publish
    from recordforge.schemas.example import encode_example
    from recordforge.transforms import tfrecord
    from recordforge.transforms.layout import shard_file_name

    def publish_one(url, version, seed):
        staging = publish.begin_build(url, version, overwrite=True)
        data = tfrecord.frame_records([encode_example({"id": seed * 100 + i})
                                       for i in range(5)])
        file = shard_file_name("train", 0, 1, "none")
        with fsspec.open(f"{staging.url}/{file}", "wb") as handle:
            handle.write(data)
        entry = {"split": "train", "file": file, "num_examples": 5, "num_bytes": len(data),
                 "sha256": hashlib.sha256(data).hexdigest()}
        with fsspec.open(staging.result_url, "wb") as handle:
            handle.write(json.dumps({"shards": [entry], "num_input_rows": 5, "dead_letter": {
                "num_rows": 0, "by_reason": {}, "files": [], "samples": {}}}).encode())
        publish.finalize(staging, name="sweep", compression="none",
                         features={"id": {"type": "int64", "shape": []}}, vocabularies={},
                         config={}, split_names=["train"], max_error_rate=0.0, verify=False)

    # One line per publish: "<url> <version> <seed>"; answers the child's
    # pid, then its exit status once it has ended (killed or not).
    for line in sys.stdin:
        url, version, seed = line.split()
        pid = os.fork()
        if pid == 0:
            try:
                publish_one(url, version, int(seed))
            except BaseException:
                traceback.print_exc()
                os._exit(1)
            os._exit(0)
        print(pid, flush=True)
        print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
    """)


class _Publisher:
    """The forking process of `_PUBLISHER`, started once for the sweep."""

    def __init__(self, env):
        self.process = subprocess.Popen([sys.executable, "-c", _PUBLISHER], cwd=REPO, env=env,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True)

    def start(self, output: str, seed: int) -> int:
        """Starts a publish of version 1.0.0; returns its process id."""
        self.process.stdin.write(f"{output} 1.0.0 {seed}\n")
        self.process.stdin.flush()
        return int(self.process.stdout.readline())

    def status(self) -> int:
        """The exit status of the publish last started, once it has ended."""
        return int(self.process.stdout.readline())

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


class _Child:
    """A forked publish as `_kill_in_commit` sees a build: poll, and kill."""

    def __init__(self, publisher: _Publisher, pid: int):
        self._publisher, self.pid, self.returncode = publisher, pid, None

    def poll(self):
        try:
            os.kill(self.pid, 0)
            with open(f"/proc/{self.pid}/stat") as stat:
                if stat.read().split(") ")[-1].startswith("Z"):  # ended, not yet reaped
                    raise ProcessLookupError
        except (ProcessLookupError, FileNotFoundError):
            self.returncode = self._publisher.status()
        return self.returncode

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        self.returncode = self._publisher.status()


def _put(requests: list[tuple[str, str]], tail: str, after: int = 0) -> int | None:
    """Index of the first put of an object whose key ends with `tail`
    among `requests[after:]`, if there."""
    return next((i for i, (kind, url) in enumerate(requests) if i >= after
                 and kind == "PutObject" and url.split("?")[0].endswith(tail)), None)


def _lock_put(requests: list[tuple[str, str]]) -> int | None:
    """Index of the commit lock's creation for the commit among `requests`,
    if there: the first after the pipeline's result file (recovery at the
    start of a build takes commit locks too)."""
    result = _put(requests, RESULT_FILE)
    return None if result is None else _put(requests, ".commit.lock", result)


def _kill_in_commit(server, process: subprocess.Popen, mark: int, j: int) -> bool:
    """SIGKILLs the build's process group once its commit (from the commit
    lock's creation) has made `j` requests: counted from the commit, not the
    build's start, since recovering what an earlier kill left adds requests
    before it. False if the build finished first."""
    start = None
    while start is None:
        if process.poll() is not None:
            return False
        start = _lock_put(server.requests_since(mark))
        time.sleep(0.005)
    return _kill_after(server, process, mark, start + j)


def _only_published_versions(root: str) -> str:
    """Checks the output root as the store holds it: every entry but LATEST
    and .staging is a version published under its own name (a manifest
    whose version is the entry's name), and LATEST names one of them.
    Returns what LATEST names."""
    fs = _fresh_s3()
    versions = []
    for entry in fs.ls(root, detail=False):
        name = entry.rsplit("/", 1)[-1]
        if name in ("LATEST", ".staging"):
            continue
        assert fs.exists(f"{entry}/manifest.json"), f"{name} has no manifest.json"
        manifest = json.loads(fs.cat_file(f"{entry}/manifest.json"))
        assert manifest.get("version") == name, \
            f"{name} holds version {manifest.get('version')!r}, not under its own name"
        versions.append(name)
    latest = fs.cat_file(f"{root}/LATEST").decode().strip()
    assert latest in versions, f"LATEST names {latest!r}, not one of {versions}"
    return latest


def test_overwrite_killed_at_every_commit_request_then_two_builds(moto, contents, support,
                                                                  capsys):
    """kill -9 at each request of an --overwrite commit in turn, every one
    (each next process starts by recovering what the last one left), then
    two builds: only published versions remain, under their own names,
    LATEST naming the version, and nothing is left in .staging."""
    moto.create_bucket("kill-sweep")
    root = "kill-sweep/flowers"
    output = f"s3://{root}"
    env = support.base_env(**moto.env)
    support.run_recordforge("build", FLOWERS, "--output", output, env=env)

    publisher = _Publisher(env)
    try:
        for seed in (1, 0):  # the reference replaces a version like those the trials replace
            mark = moto.mark()
            publisher.start(output, seed)
            assert publisher.status() == 0
        requests = moto.requests_since(mark)
        first, last = _commit_window(requests, root)
        points = list(range(1, last - first + 2))  # the commit's requests, from the lock's
        if SWEEP_LIMIT and len(points) > SWEEP_LIMIT:
            points = sorted(random.Random(f"{SEED}-sweep").sample(points, SWEEP_LIMIT))
        killed, started = [], time.monotonic()
        for trial, k in enumerate(points, start=1):
            mark = moto.mark()
            child = _Child(publisher, publisher.start(output, seed=trial % 2))
            if _kill_in_commit(moto, child, mark, k):
                killed.append(k)
            else:
                assert child.returncode == 0, f"the publish meant to be killed at {k} failed"
    finally:
        publisher.close()
    per_point = (time.monotonic() - started) / len(points)
    for extra in ([], OTHER):  # two whole builds of the same version
        support.run_recordforge("build", FLOWERS, "--output", output, "--overwrite", *extra,
                                env=env)
    with capsys.disabled():
        print(f"\nkill -9 sweep: commit at requests {first + 1}-{last + 1} of "
              f"{len(requests)}; killed at commit requests {killed} of {last - first + 1} "
              f"({per_point:.1f} s a point)")
    assert len(killed) >= len(points) - 2, (killed, points)  # the last may finish first
    assert _only_published_versions(root) == "1.0.0"
    assert _fresh_s3().find(f"{root}/.staging") == []
    assert _published(support, root)[1] == contents[1]
