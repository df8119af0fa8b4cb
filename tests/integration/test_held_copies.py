"""An --overwrite on an object store cut short at any request leaves the store recoverable.

In-process and fast (fsspec's memory:// store, which has no rename, like
S3): a version is published and LATEST names it (or another version, or
nothing); an overwrite commit of it is "killed" at its n-th filesystem call
(every later call of that build fails too, as nothing runs after SIGKILL);
the dead build's staging record is then left as it was or removed, as a
recovery that trusted it did. The next build's start (`begin_build`) must
leave only published versions at the root, under their own names, with the
version there whole (its old or its new content, whether LATEST named it or
not) and LATEST naming what it named before, or the version itself; a
second overwrite then publishes. A commit that fails one request instead
(EIO) leaves that state already, before any other build runs: it puts the
held version back itself.
`test_kill_object_store.py` does the same with real kill -9 on an S3 server.
"""

from __future__ import annotations

import errno
import json
import time
import uuid

import fsspec
from hypothesis import given, settings, strategies as st

from recordforge.pipelines.publish.commit import commit, write_latest
from recordforge.pipelines.publish.output import Output
from recordforge.pipelines.publish.staging import begin_build, begin_pipeline_build
from recordforge.transforms.layout import (LATEST_FILE, LOCK_SUFFIX, MANIFEST_FILE,
                                           OWNER_SUFFIX, STAGING_DIR)

# Versions up to 200 characters: held names cut a long version at 160, so
# the version a held copy stands for is read from its manifest.
VERSIONS = st.one_of(st.sampled_from(["1.0.0", "2026-11-28", "a.b_c+d=e-f"]),
                     st.text("abc019.", min_size=150, max_size=199).map(lambda s: "v" + s)
                     .filter(lambda s: ".." not in s))
CONTENTS = st.dictionaries(st.sampled_from(["train-00000-of-00002.tfrecord",
                                            "train-00001-of-00002.tfrecord",
                                            "test-00000-of-00001.tfrecord",
                                            "dead_letter/part-0.jsonl", "report.html"]),
                           st.binary(min_size=0, max_size=40), min_size=1)
LATEST_STATES = st.sampled_from(["names_it", "names_other", "absent"])


class Killed(BaseException):
    """What a SIGKILL is to the build being simulated: nothing after it runs."""


class FaultyFilesystem:
    """An fsspec filesystem whose `at`-th call fails: with `Killed` and every
    call after it too, as a build killed there makes no more requests, or
    (`transient`) with one EIO, as a store that failed one request."""

    def __init__(self, fs, at: int, transient: bool):
        self._fs, self._left, self._transient = fs, at, transient

    def __getattr__(self, name):
        value = getattr(self._fs, name)
        if not callable(value):
            return value

        def call(*args, **kwargs):
            self._left -= 1
            if self._left == -1 and self._transient:
                raise OSError(errno.EIO, "injected", name)
            if self._left < 0 and not self._transient:
                raise Killed(name)
            return value(*args, **kwargs)
        return call


def _publish(fs, root: str, version: str, files: dict[str, bytes], tag: str) -> None:
    """Writes a published version as a commit leaves it (manifest last)."""
    for name, data in files.items():
        fs.pipe_file(f"{root}/{version}/{name}", data)
    fs.pipe_file(f"{root}/{version}/{MANIFEST_FILE}",
                 json.dumps({"version": version, "tag": tag}).encode())


def _stage(staging, files: dict[str, bytes], tag: str) -> None:
    fs = staging.out.fs
    for name, data in files.items():
        fs.pipe_file(f"{staging.directory}/{name}", data)
    fs.pipe_file(f"{staging.directory}/{MANIFEST_FILE}",
                 json.dumps({"version": staging.version, "tag": tag}).encode())


def _content(fs, root: str, version: str) -> tuple[str, dict[str, bytes]]:
    """(the manifest's tag, the data files) of a published version."""
    base = f"{root}/{version}/"
    manifest = json.loads(fs.cat_file(base + MANIFEST_FILE))
    return manifest["tag"], {path[len(base):]: fs.cat_file(path) for path in fs.find(base)
                             if not path.endswith(MANIFEST_FILE)}


def _die(out: Output, staging) -> None:
    """What is left of a killed build's process: its owner record says its
    lease ran out, and its commit lock (if the kill left one) has expired."""
    fs = out.fs
    owner = staging.directory + OWNER_SUFFIX
    fs.pipe_file(owner, json.dumps({"build_id": staging.build_id, "host": "gone",
                                    "pid": None, "lease_until": time.time() - 1}).encode())
    lock = out.path(STAGING_DIR, f"{staging.version}{LOCK_SUFFIX}")
    if fs.exists(lock):
        record = json.loads(fs.cat_file(lock))
        record.update(host="gone", lease_until=time.time() - 1)
        fs.pipe_file(lock, json.dumps(record).encode())


def _assert_only_published_versions(fs, root: str, version: str, latest_before: str | None,
                                    expected: dict[str, tuple[str, dict[str, bytes]]]) -> None:
    names = sorted(path.rstrip("/").rsplit("/", 1)[-1] for path in fs.ls(root, detail=False))
    for name in names:
        if name in (LATEST_FILE, STAGING_DIR):
            continue
        assert fs.exists(f"{root}/{name}/{MANIFEST_FILE}"), (name, names)
        manifest = json.loads(fs.cat_file(f"{root}/{name}/{MANIFEST_FILE}"))
        assert manifest["version"] == name, f"{name} holds version {manifest['version']!r}"
    # The version is held whichever version LATEST names: never lost.
    assert version in names, names
    assert _content(fs, root, version) in expected.values()
    latest = fs.cat_file(f"{root}/{LATEST_FILE}").decode().strip() \
        if fs.exists(f"{root}/{LATEST_FILE}") else None
    assert latest in (latest_before, version), (latest, latest_before)


@settings(max_examples=100, deadline=None)
@given(version=VERSIONS, old=CONTENTS, new=CONTENTS, latest_state=LATEST_STATES,
       kill_at=st.integers(min_value=0, max_value=80), killed=st.booleans(),
       forget_record=st.booleans())
def test_overwrite_killed_or_failing_at_any_request_leaves_only_published_versions(
        version, old, new, latest_state, kill_at, killed, forget_record):
    fs = fsspec.filesystem("memory")
    root = f"/held-{uuid.uuid4().hex}"
    try:
        _overwrite_cut_short_then_two_builds(fs, root, version, old, new, latest_state,
                                             kill_at, killed, forget_record)
    finally:  # the memory store is one for the process: listing it grows with it
        fs.rm(root, recursive=True)


def _overwrite_cut_short_then_two_builds(fs, root, version, old, new, latest_state, kill_at,
                                         killed, forget_record):
    url = f"memory://{root}"
    _publish(fs, root, version, old, "old")
    _publish(fs, root, "0.9", {"x.tfrecord": b"x"}, "other")
    latest_before = {"names_it": version, "names_other": "0.9", "absent": None}[latest_state]
    if latest_before:
        fs.pipe_file(f"{root}/{LATEST_FILE}", f"{latest_before}\n".encode())
    expected = {"old": ("old", old), "new": ("new", new)}

    staging = begin_pipeline_build(url, version, overwrite=True)
    _stage(staging, new, "new")
    out = staging.out
    out.fs = FaultyFilesystem(fs, kill_at, transient=not killed)
    try:
        commit(out, staging)
        write_latest(out, staging)
        staging.close()
    except Killed:
        pass
    except Exception:  # the build fails, and says so; what it left must be whole already
        out.fs = fs
        staging.abort()
        _assert_only_published_versions(fs, root, version, latest_before, expected)
    out.fs = fs
    _die(out, staging)
    if forget_record:  # what a recovery that trusted the record left
        for path in fs.find(f"{root}/{STAGING_DIR}"):
            if staging.build_id in path:
                fs.rm(path)

    # The next build (of this version) starts, and gives up before committing.
    begin_build(url, version, overwrite=True).abort()
    _assert_only_published_versions(fs, root, version, latest_before, expected)

    # A second overwrite then publishes, and leaves nothing else either.
    again = begin_build(url, version, overwrite=True)
    _stage(again, new, "new")
    commit(again.out, again)
    write_latest(again.out, again)
    again.close()
    _assert_only_published_versions(fs, root, version, version, {"new": ("new", new)})
    assert fs.find(f"{root}/{STAGING_DIR}") == []
