"""A failure at any step once the commit began says what is on disk (issue 41.6).

A version is published and LATEST names it, another version, or nothing;
an --overwrite of it (a real `begin_build` + `finalize`) meets one failing
call (EIO) at its k-th filesystem call from the moment the commit starts
(the commit, the owner file's removal, the LATEST update): every k on a
local disk (renames, fsyncs, unlinks, the directory exchange) and on
memory:// (an object store's requests), generated k on S3 (moto server).
The outcome is then read back independently and must be what the build
said:

* it returned: the new version is at its name and LATEST names it;
* `LatestNotUpdated` (exit 3): the new version is there, LATEST names what
  the message says, and the documented retry (`finish_latest`, what running
  the same build again does) moves LATEST to it;
* another `PublishedWithErrors` (exit 3): the message ends with what was
  read back, LATEST as it says;
* `BuildFailed` (exit 1): "nothing was published", the previous version
  whole at its name, LATEST as before and as the message says.

(`recordforge build` reports an OSError from `finalize` as "nothing was
published", exit 1: judged as such.) Afterwards the root holds only published versions
under their own names, and the next overwrite publishes.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import uuid

import fsspec
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from recordforge.pipelines import publish
from recordforge.pipelines.publish import commit as commit_module, finalizing, lock
from recordforge.pipelines.publish.errors import (BuildFailed, LatestNotUpdated,
                                                  PublishedWithErrors)
from recordforge.schemas.example import encode_example
from recordforge.transforms import tfrecord
from recordforge.transforms.layout import LATEST_FILE, MANIFEST_FILE, STAGING_DIR, shard_file_name

VERSION = "v1"
FEATURES = {"id": {"type": "int64", "shape": []}}
LATEST_STATES = ["names_it", "names_other", "absent"]


class _Fault:
    """Fails the `at`-th counted call (EIO) once counting is on."""

    def __init__(self, at: int):
        self.at, self.calls, self.on, self.fired = at, 0, False, False

    def tick(self, what: str) -> None:
        if not self.on:
            return
        self.calls += 1
        if self.calls == self.at:
            self.fired = True
            raise OSError(errno.EIO, f"injected at call {self.at}", what)


class _FaultyFs:
    """An fsspec filesystem whose calls are counted by `fault`."""

    def __init__(self, fs, fault: _Fault):
        self._fs, self._fault = fs, fault

    def __getattr__(self, name):
        value = getattr(self._fs, name)
        if not callable(value):
            return value

        def call(*args, **kwargs):
            self._fault.tick(name)
            return value(*args, **kwargs)
        return call


_LOCAL_CALLS = ("rename", "replace", "unlink", "fsync", "rmdir")


def _faulty_local(monkeypatch, fault: _Fault) -> None:
    for name in _LOCAL_CALLS:
        original = getattr(os, name)

        def call(*args, _original=original, _name=name, **kwargs):
            fault.tick(_name)
            return _original(*args, **kwargs)
        monkeypatch.setattr(os, name, call)
    exchange = commit_module._exchange
    monkeypatch.setattr(commit_module, "_exchange",
                        lambda a, b: (fault.tick("renameat2"), exchange(a, b))[1])


def _shards(seed: int) -> list[bytes]:
    return [tfrecord.frame_records([encode_example({"id": seed * 1000 + i + 10 * s})
                                    for i in range(2)]) for s in range(2)]


def _build(url: str, version: str, shards: list[bytes], overwrite: bool, fault=None):
    """A build of `version` whose shards are `shards`, staged then finalized
    (verification off: the read-back is this test's)."""
    staging = publish.begin_build(url, version, overwrite)
    entries = []
    for index, data in enumerate(shards):
        file = shard_file_name("train", index, len(shards), "none")
        with fsspec.open(f"{staging.url}/{file}", "wb") as handle:
            handle.write(data)
        entries.append({"split": "train", "file": file, "num_examples": 2,
                        "num_bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    with fsspec.open(staging.result_url, "wb") as handle:
        handle.write(json.dumps({"shards": entries, "num_input_rows": 2 * len(shards),
                                 "dead_letter": {"num_rows": 0, "by_reason": {}, "files": [],
                                                 "samples": {}}}).encode())
    if fault is not None and not staging.out.local:
        staging.out.fs = _FaultyFs(staging.out.fs, fault)
    return publish.finalize(staging, name="t", compression="none", features=FEATURES,
                            vocabularies={}, config={}, split_names=["train"],
                            max_error_rate=0.0, verify=False)


def _read(url: str, name: str) -> bytes | None:
    try:
        with fsspec.open(f"{url}/{name}", "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def _shard_digests(url: str, version: str) -> list[str] | None:
    """The sha256s of the shards the version's manifest lists, after checking
    each shard's bytes against them (None: not published)."""
    data = _read(url, f"{version}/{MANIFEST_FILE}")
    if data is None:
        return None
    shards = json.loads(data)["splits"]["train"]["shards"]
    for shard in shards:
        body = _read(url, f"{version}/{shard['file']}")
        assert body is not None and hashlib.sha256(body).hexdigest() == shard["sha256"]
    return [shard["sha256"] for shard in shards]


def _latest(url: str) -> str | None:
    data = _read(url, LATEST_FILE)
    return data.decode().strip() if data is not None else None


def _said_latest(message: str, latest: str | None) -> bool:
    return (f"{LATEST_FILE} names {latest!r}" in message or
            f"still names {latest!r}" in message or
            (latest is None and f"{LATEST_FILE} does not exist" in message))


def _only_published_versions(url: str) -> None:
    fs, root = fsspec.core.url_to_fs(url)
    for entry in fs.ls(root, detail=False):
        name = entry.rstrip("/").rsplit("/", 1)[-1]
        if name in (LATEST_FILE, STAGING_DIR):
            continue
        manifest = _read(url, f"{name}/{MANIFEST_FILE}")
        assert manifest is not None, f"{name} is not a published version"
        assert json.loads(manifest)["version"] == name


def _overwrite_failing_at(url: str, latest_state: str, at: int, monkeypatch) -> bool:
    """The scenario of the module docstring; returns whether the fault fired."""
    old, new = _shards(1), _shards(2)
    _build(url, "other", _shards(9), overwrite=False)
    _build(url, VERSION, old, overwrite=False)
    latest_before = {"names_it": VERSION, "names_other": "other", "absent": None}[latest_state]
    fs, root = fsspec.core.url_to_fs(url)
    if latest_before is None:
        fs.rm(f"{root}/{LATEST_FILE}")
    else:
        fs.pipe_file(f"{root}/{LATEST_FILE}", f"{latest_before}\n".encode())
    old_digests = [hashlib.sha256(d).hexdigest() for d in old]
    new_digests = [hashlib.sha256(d).hexdigest() for d in new]

    fault = _Fault(at)
    with monkeypatch.context() as patch:
        patch.setattr(lock, "LOCK_LEASE", 2.0)  # a lock whose release failed is free soon
        if fs.protocol == "file" or "file" in fs.protocol:
            _faulty_local(patch, fault)
        commit = finalizing.commit

        def counted_commit(*args):
            fault.on = True  # from the commit's start to the end of finalize
            return commit(*args)
        patch.setattr(finalizing, "commit", counted_commit)
        try:
            _build(url, VERSION, new, overwrite=True, fault=fault)
            outcome, message = "published", ""
        except LatestNotUpdated as error:
            outcome, message = "latest", str(error)
        except PublishedWithErrors as error:
            outcome, message = ("errors-new" if error.published else "errors-old"), str(error)
        except BuildFailed as error:
            outcome, message = "failed", str(error)
        except OSError as error:  # what `recordforge build` reports of one (exit 1)
            outcome, message = "failed", f"publishing failed; nothing was published: {error}"
        finally:
            fault.on = False

    there, latest = _shard_digests(url, VERSION), _latest(url)
    if outcome == "published":
        assert there == new_digests and latest == VERSION
    elif outcome == "latest":
        assert there == new_digests and latest != VERSION and _said_latest(message, latest)
        assert publish.finish_latest(url, VERSION) is not None  # the documented retry
        assert _latest(url) == VERSION
    elif outcome.startswith("errors"):
        assert "read back:" in message and _said_latest(message, latest), message
        if outcome == "errors-new":
            assert there == new_digests, message
    else:
        assert "nothing was published" in message and "read back:" in message, message
        assert _said_latest(message, latest), message
        assert there == old_digests, message  # the previous version, whole
        assert latest == latest_before, message
    if not outcome.startswith("errors"):
        _only_published_versions(url)
    publish.begin_build(url, VERSION, overwrite=True).abort()  # the next build recovers
    _only_published_versions(url)
    _build(url, VERSION, new, overwrite=True)
    assert _shard_digests(url, VERSION) == new_digests and _latest(url) == VERSION
    return fault.fired


def _sweep(make_url, latest_state, monkeypatch) -> int:
    """Every call from the commit's start, in turn, until one past the last."""
    at = 1
    while _overwrite_failing_at(make_url(), latest_state, at, monkeypatch):
        at += 1
    return at - 1


@pytest.mark.parametrize("latest_state", LATEST_STATES)
def test_a_local_overwrite_failing_at_every_call_says_what_is_on_disk(tmp_path, monkeypatch,
                                                                     latest_state):
    calls = _sweep(lambda: str(tmp_path / uuid.uuid4().hex), latest_state, monkeypatch)
    assert calls >= 5  # the exchange, syncs, LATEST's write: the sweep saw them


@pytest.mark.parametrize("latest_state", LATEST_STATES)
def test_an_object_store_overwrite_failing_at_every_request_says_what_is_on_disk(
        monkeypatch, latest_state):
    memory = fsspec.filesystem("memory")
    roots = []

    def make_url():
        roots.append(f"/read-back-{uuid.uuid4().hex}")
        return f"memory://{roots[-1]}"
    try:
        calls = _sweep(make_url, latest_state, monkeypatch)
    finally:
        for root in roots:  # the memory store is one for the process
            memory.rm(root, recursive=True)
    assert calls >= 20


@pytest.mark.slow
@settings(max_examples=8, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(latest_state=st.sampled_from(LATEST_STATES), at=st.integers(1, 60))
def test_an_s3_overwrite_failing_at_a_request_says_what_is_on_disk(moto, monkeypatch,
                                                                   latest_state, at):
    moto.filesystem()  # the endpoint variables, for this process too
    bucket = f"rf-read-back-{uuid.uuid4().hex[:12]}"
    moto.create_bucket(bucket)
    fsspec.get_filesystem_class("s3").clear_instance_cache()
    _overwrite_failing_at(f"s3://{bucket}/out", latest_state, at, monkeypatch)
