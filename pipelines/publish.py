"""Publishing a build: staging, error budget, manifest, verification, commit.

A build never writes at a final name. The driver calls::

    staging = publish.begin_build(output_path, version, overwrite=False)
    try:
        run the pipeline, writing into staging.url:
            shards <split>-<i:05d>-of-<n:05d>.tfrecord[.gz]
            dead_letter/*.jsonl
            _tmp/...                      (scratch; deleted before publishing)
            _pipeline_result.json         (last; see RESULT_FILE)
    except BaseException:
        staging.abort()
        raise
    result = publish.finalize(staging, name=..., compression="gzip"|"none",
                              features={...}, vocabularies={...}, config={...},
                              split_names=[...], max_error_rate=0.01,
                              max_errors=None, runner="DirectRunner",
                              verify=True, report_hook=None)

`Staging` is also a context manager that aborts on an exception. Pass
`staging.url` (a plain string) to the pipeline, never the `Staging` object: it
owns a heartbeat thread.

`_pipeline_result.json` holds::

    {"shards": [{"split", "file", "num_examples", "num_bytes", "sha256"}, ...],
     "dead_letter": {"num_rows", "by_reason": {reason: n}, "files": [...],
                     "samples": {reason: dead-letter record}},
     "num_input_rows": int}

(`files` relative to the staging directory, e.g. ``dead_letter/part-00000.jsonl``.)

`finalize` checks, in order: the row accounting invariant
(``num_input_rows == Σ num_examples + dead_letter.num_rows``; a failure is a
bug that lost or duplicated rows), the error budget (`max_error_rate` of the
input rows, and `max_errors` rows if given), shard naming, and that no split
is empty. Any failure raises `BuildFailed`; the dead-letter files are then
moved to ``<output>/.failed/<version>.<build_id>/dead_letter/`` and the
message names the top reasons with a sample row each. Otherwise it deletes
``_tmp``, calls ``report_hook(staging.url, manifest)`` (which may add files
such as ``report.html``), writes ``SHA256SUMS`` (every file of the version
but ``manifest.json`` and itself), writes ``manifest.json`` into the staging
directory, runs `verify.verify_dataset` on it (unless ``verify=False``) and
commits:

* local filesystems: the staging directory is renamed to ``<output>/<version>``
  in one step, so the version appears complete or not at all. When
  overwriting, the two directories are swapped atomically
  (``renameat2(RENAME_EXCHANGE)`` on Linux) and the old one deleted; where
  that call is missing the old version is renamed aside first, and a crash
  between the two renames is rolled back by the next build.
* object stores (memory://, gs://, s3://, anything without atomic rename):
  an existing ``manifest.json`` is deleted first (a version being replaced is
  unpublished rather than mixed), files the new version does not have are
  removed, every file is copied, sizes are checked, and ``manifest.json`` is
  copied last.

Then ``LATEST`` is replaced (temporary name + rename locally, one put on
object stores) by the published version's name (``update_latest=False``
leaves it alone, e.g. for a backfill of an old version).

Concurrency: commits of one version take a lock file
(``<output>/.staging/<version>.commit.lock``) and publish only if the
version's published ``manifest.json`` is still the one seen by `begin_build`;
the second of two concurrent builds fails with `ConcurrentBuildError`.
Locally the lock is created atomically (``link``); on object stores it is
created with ``xb`` mode where the filesystem honours it, then read back after
a short settling delay.

Staging directories live at ``<output>/.staging/<version>.<build_id>/``
beside an owner file ``<version>.<build_id>.owner.json`` (host, pid, heartbeat
time) that a thread refreshes every `HEARTBEAT_INTERVAL` seconds.
`begin_build` deletes the staging directories of the same version whose owner
is gone (same host and process dead) or silent for `STALE_AFTER` seconds; a
running build is never touched.

Errors: `VersionExistsError` (version already published; the CLI exits 2 and
suggests --overwrite), `BuildFailed` (exit 1; `ConcurrentBuildError` is one),
`PublishError` itself when the version was published but ``LATEST`` could not
be replaced (exit 1), `OSError` from the filesystem before the commit
(nothing published; exit 1),
`schemas.errors.ConfigError` for an invalid version template (exit 2).
Credentials in URLs never appear in messages (`redact_url`).
"""

from __future__ import annotations

import ctypes
import datetime as _dt
import errno
import hashlib
import json
import os
import re
import shutil
import socket
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import fsspec
from fsspec.implementations.local import LocalFileSystem

from recordforge.pipelines import manifest as manifest_lib
from recordforge.schemas.errors import ConfigError
from recordforge.transforms.urls import redact_url

__all__ = [
    "DEAD_LETTER_DIR",
    "FAILED_DIR",
    "HEARTBEAT_INTERVAL",
    "LATEST_FILE",
    "RESULT_FILE",
    "STAGING_DIR",
    "STALE_AFTER",
    "TMP_DIR",
    "BuildFailed",
    "ConcurrentBuildError",
    "PublishError",
    "PublishResult",
    "Staging",
    "VersionExistsError",
    "begin_build",
    "check_version_name",
    "finalize",
    "read_latest",
    "resolve_version",
]

STAGING_DIR = ".staging"
FAILED_DIR = ".failed"
LATEST_FILE = manifest_lib.LATEST_FILE
RESULT_FILE = "_pipeline_result.json"
TMP_DIR = "_tmp"
DEAD_LETTER_DIR = "dead_letter"

HEARTBEAT_INTERVAL = 30.0
# Generous: a build stalled this long (e.g. a laptop asleep) is treated as
# dead. A heavily loaded machine still runs the heartbeat thread every few
# milliseconds, so false positives need a really frozen process.
STALE_AFTER = 15 * 60.0
LOCK_WAIT = 120.0
# Object stores without conditional writes: how long two racing lock writers
# get to overwrite each other before each reads back who won.
LOCK_SETTLE = 1.0

_OWNER_SUFFIX = ".owner.json"
_ASIDE_SUFFIX = ".old"
_LOCK_SUFFIX = ".commit.lock"
_LOCK_TMP_SUFFIX = ".lock.tmp"
_LOCK_BROKEN_SUFFIX = ".lock.broken"
_LATEST_TMP_SUFFIX = ".latest.tmp"
_BUILD_SUFFIXES = (_OWNER_SUFFIX, _ASIDE_SUFFIX, _LOCK_TMP_SUFFIX, _LOCK_BROKEN_SUFFIX,
                   _LATEST_TMP_SUFFIX)
_BUILD_ID = r"\d{8}T\d{6}Z-[0-9a-f]{12}"
_VERSION_CHARS = re.compile(r"^[A-Za-z0-9._+=-]+$")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_TOP_REASONS = 5
_MAX_SAMPLE_CHARS = 240


# --- errors -------------------------------------------------------------------

class PublishError(Exception):
    """Base of the errors that stop a build from publishing."""


class VersionExistsError(PublishError):
    """The version is already published and overwrite was not requested."""


class BuildFailed(PublishError):
    """The build is not published: error budget exceeded, rows lost, an empty
    split, damaged output, ...

    reasons: the top dead-letter reasons as (reason, count, sample record or
    None). kept_at: where the dead-letter files of the failed build were
    moved (a redacted URL), or None. problems: verification problems, if any.
    """

    def __init__(self, message: str, *, reasons=(), kept_at: str | None = None,
                 problems=()):
        super().__init__(message)
        self.reasons = list(reasons)
        self.kept_at = kept_at
        self.problems = list(problems)

    def with_kept_at(self, kept_at: str) -> "BuildFailed":
        """The same failure, its message extended by where dead letters went."""
        return type(self)(f"{self}\ndead-letter files of this build were kept in {kept_at}",
                          reasons=self.reasons, kept_at=kept_at, problems=self.problems)


class ConcurrentBuildError(BuildFailed):
    """Another build published (or is publishing) the same version."""


# --- names and URLs -----------------------------------------------------------

def _redact_values(value: Any) -> Any:
    """Redacts every string inside a config tree (output paths may carry
    credentials; the manifest must not)."""
    if isinstance(value, str):
        return redact_url(value)
    if isinstance(value, Mapping):
        return {key: _redact_values(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_redact_values(item) for item in value]
    return value


def resolve_version(template: str, now: _dt.datetime | None = None) -> str:
    """Expands ``{date}`` (UTC YYYYMMDD) and ``{datetime}`` (UTC
    YYYYMMDDTHHMMSS) in a version template and checks the resulting name.
    Raises `ConfigError` (key ``version``) for other placeholders or a name
    that cannot be a directory name."""
    if not isinstance(template, str):
        raise ConfigError("version", f"must be a string, got {type(template).__name__}")
    now = (now or _dt.datetime.now(_dt.timezone.utc)).astimezone(_dt.timezone.utc)
    values = {"date": now.strftime("%Y%m%d"), "datetime": now.strftime("%Y%m%dT%H%M%S")}

    def substitute(match: re.Match) -> str:
        name = match.group(1)
        if name not in values:
            raise ConfigError("version", f"unknown placeholder {{{name}}} in {template!r}; "
                              "only {date} and {datetime} are allowed")
        return values[name]

    resolved = _PLACEHOLDER.sub(substitute, template)
    if "{" in resolved or "}" in resolved:
        raise ConfigError("version", f"unbalanced brace in {template!r}")
    check_version_name(resolved)
    return resolved


def check_version_name(version: str) -> None:
    """Raises `ConfigError` unless `version` is a safe directory name."""
    problem = None
    if not version:
        problem = "is empty"
    elif "/" in version or "\\" in version:
        problem = "contains a path separator"
    elif ".." in version:
        problem = "contains '..'"
    elif any(ch.isspace() for ch in version):
        problem = "contains whitespace"
    elif version.startswith("."):
        problem = "starts with '.' (names starting with '.' are reserved for staging)"
    elif version == LATEST_FILE:
        problem = f"is {LATEST_FILE!r}, the name of the pointer file"
    elif len(version) > 200:
        problem = "is longer than 200 characters"
    elif not _VERSION_CHARS.match(version):
        problem = "may only use letters, digits and . _ + = -"
    if problem:
        raise ConfigError("version", f"{version!r} {problem}")


# --- the output location -------------------------------------------------------

class _Output:
    """An output root: the fsspec filesystem, the root path in its terms, the
    URL the user gave (for building child URLs) and its redacted form."""

    def __init__(self, url: str):
        self.fs, self.root = fsspec.core.url_to_fs(url)
        self.root = self.root.rstrip("/") or "/"
        self.url = url.rstrip("/") or url
        self.display = redact_url(self.url)
        # Only a local filesystem gives us rename(2) of a whole directory.
        self.local = isinstance(self.fs, LocalFileSystem)

    def path(self, *parts: str) -> str:
        return "/".join([self.root.rstrip("/")] + list(parts)) if self.root != "/" else \
            "/" + "/".join(parts)

    def url_of(self, path: str) -> str:
        """The URL (local: the plain path) of a path inside this output."""
        if self.local:
            return path
        relative = path[len(self.root):].lstrip("/")
        return f"{self.url}/{relative}" if relative else self.url

    def display_of(self, path: str) -> str:
        return redact_url(self.url_of(path))

    # Small file helpers. Local writes go through a temporary name + rename
    # so a reader (or a crash) never sees half a file.
    def read_bytes(self, path: str) -> bytes | None:
        try:
            return self.fs.cat_file(path)
        except FileNotFoundError:
            return None

    def write_atomic(self, path: str, data: bytes, tmp: str | None = None) -> None:
        """Writes `path` whole: locally through `tmp` (default: a unique
        name beside it) and a rename; on object stores with one put."""
        if self.local:
            tmp = tmp or f"{path}.{uuid.uuid4().hex}.tmp"
            with open(tmp, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
            _fsync_dir(os.path.dirname(path))
        else:
            self.fs.pipe_file(path, data)

    def remove(self, path: str, recursive: bool = False) -> None:
        try:
            if self.local and recursive and os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            elif self.local:
                os.unlink(path)
            elif self.fs.exists(path):
                self.fs.rm(path, recursive=recursive)
        except FileNotFoundError:
            pass

    def names(self, path: str) -> list[str]:
        """Base names of the entries directly under `path` ([] if absent)."""
        try:
            return sorted(entry.rstrip("/").rsplit("/", 1)[-1]
                          for entry in self.fs.ls(path, detail=False))
        except FileNotFoundError:
            return []

    def files(self, path: str) -> dict[str, int]:
        """relative path -> size of every file under `path`, recursively."""
        try:
            found = self.fs.find(path, detail=True)
        except FileNotFoundError:
            return {}
        prefix = path.rstrip("/") + "/"
        return {name[len(prefix):]: info.get("size") or 0 for name, info in found.items()
                if info.get("type") != "directory" and name.startswith(prefix)}


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def read_latest(output_path: str) -> str | None:
    """The version named by ``<output>/LATEST``, or None if there is none."""
    out = _Output(output_path)
    data = out.read_bytes(out.path(LATEST_FILE))
    if data is None:
        return None
    return data.decode("utf-8").strip() or None


def _published_identity(out: _Output, version: str) -> str | None:
    """sha256 of the published manifest.json of `version`, or None if the
    version is not published. Commit compares it with the value seen at
    begin_build to detect a concurrent publisher."""
    data = out.read_bytes(out.path(version, manifest_lib.MANIFEST_FILE))
    return hashlib.sha256(data).hexdigest() if data is not None else None


# --- owners, heartbeats and liveness -------------------------------------------

def _process_start(pid: int) -> str | None:
    """The kernel's start time of `pid` (Linux), to tell a reused pid from the
    original process; None where /proc is not available."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[19].decode() if len(fields) > 19 else None


def _process_alive(pid: int, start: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            if handle.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                return False  # killed, not yet reaped: it will never finish
    except (OSError, IndexError):
        pass
    current = _process_start(pid)
    return start is None or current is None or current == start


def _owner_record(build_id: str, started: str) -> dict:
    return {"build_id": build_id, "host": socket.gethostname(), "pid": os.getpid(),
            "pid_start": _process_start(os.getpid()), "started": started,
            "heartbeat": time.time()}


def _owner_is_stale(owner: Mapping | None, stale_after: float) -> bool:
    """A build is dead when its owner record is missing or unreadable, its
    process is gone (same host only: pids mean nothing elsewhere), or its
    heartbeat is older than `stale_after` seconds."""
    if not isinstance(owner, Mapping):
        return True
    try:
        heartbeat = float(owner["heartbeat"])
        pid = int(owner["pid"])
    except (KeyError, TypeError, ValueError):
        return True
    if owner.get("host") == socket.gethostname() and not _process_alive(pid, owner.get("pid_start")):
        return True
    return time.time() - heartbeat > stale_after


def _load_json(data: bytes | None) -> Any:
    if data is None:
        return None
    try:
        return json.loads(data)
    except ValueError:
        return None


class _Heartbeat:
    """Rewrites the owner file every `interval` seconds until stopped."""

    def __init__(self, out: _Output, path: str, record: dict, interval: float):
        self._out = out
        self._path = path
        self._record = dict(record)
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="recordforge-heartbeat",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._record["heartbeat"] = time.time()
            try:
                self._out.write_atomic(self._path, json.dumps(self._record).encode())
            except Exception as error:  # noqa: BLE001 - a missed beat is not fatal
                print(f"recordforge: heartbeat write failed ({type(error).__name__}: {error})",
                      file=sys.stderr)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()


# --- staging ------------------------------------------------------------------

class Staging:
    """A build in progress: where the pipeline writes, and who owns it.

    url: the staging directory (local path or fsspec URL) the pipeline writes
    into; `path` is the same string. tmp_url / result_url / dead_letter_url:
    its scratch directory, result file and dead-letter directory.
    display_url: `url` with credentials redacted, for messages.
    """

    def __init__(self, *, out: _Output, version: str, build_id: str, overwrite: bool,
                 identity: str | None, stale_after: float, heartbeat: _Heartbeat):
        self._out = out
        self.version = version
        self.build_id = build_id
        self.overwrite = overwrite
        self._identity = identity
        self._stale_after = stale_after
        self._heartbeat = heartbeat
        self._dir = out.path(STAGING_DIR, f"{version}.{build_id}")
        self._owner = self._dir + _OWNER_SUFFIX
        self._closed = False
        self.url = out.url_of(self._dir)
        self.display_url = redact_url(self.url)
        self.output_url = out.display
        self.tmp_url = f"{self.url}/{TMP_DIR}"
        self.result_url = f"{self.url}/{RESULT_FILE}"
        self.dead_letter_url = f"{self.url}/{DEAD_LETTER_DIR}"

    @property
    def path(self) -> str:
        return self.url

    def __reduce__(self):
        raise TypeError("Staging owns a heartbeat thread and is not picklable; "
                        "pass staging.url to the pipeline")

    def __repr__(self) -> str:
        return f"Staging(version={self.version!r}, url={self.display_url!r})"

    def __enter__(self) -> "Staging":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()

    def abort(self) -> None:
        """Stops the heartbeat and deletes the staging directory and owner
        file. Idempotent; nothing published is touched."""
        if self._closed:
            return
        self._heartbeat.stop()
        self._out.remove(self._dir, recursive=True)
        self._close()

    def _close(self) -> None:
        # The owner file goes last: a staging directory without one is dead.
        self._heartbeat.stop()
        self._out.remove(self._owner)
        self._closed = True


def _new_build_id() -> str:
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{uuid.uuid4().hex[:12]}"


def begin_build(output_path: str, version: str, overwrite: bool = False, *,
                stale_after: float = STALE_AFTER,
                heartbeat_interval: float = HEARTBEAT_INTERVAL) -> Staging:
    """Starts a build of `version` under `output_path` (local path or fsspec
    URL). Returns the `Staging` the pipeline writes into.

    Before creating it: rolls back a commit of this version interrupted
    between its two renames, and deletes everything in ``.staging`` that
    belongs to dead builds of this version (see `_owner_is_stale`). Raises
    `VersionExistsError` if ``<output>/<version>/manifest.json`` exists and
    not `overwrite`.
    """
    check_version_name(version)
    out = _Output(output_path)
    build_id = _new_build_id()
    staging_dir = out.path(STAGING_DIR, f"{version}.{build_id}")
    owner_path = staging_dir + _OWNER_SUFFIX
    record = _owner_record(build_id, manifest_lib.utc_timestamp())
    # The owner file comes first and goes last: every name this build
    # creates in .staging (directory, lock and temporary files) starts with
    # <version>.<build_id>, so a build killed at any point leaves nothing
    # that a later build cannot attribute and clean.
    out.fs.makedirs(out.path(STAGING_DIR), exist_ok=True)
    out.write_atomic(owner_path, json.dumps(record).encode())
    heartbeat = _Heartbeat(out, owner_path, record, heartbeat_interval)
    heartbeat.start()
    try:
        _recover(out, version, stale_after, build_id)
        identity = _published_identity(out, version)
        if identity is not None and not overwrite:
            raise VersionExistsError(
                f"version {version!r} is already published at {out.display}/{version}; "
                "use --overwrite to replace it")
        out.fs.makedirs(staging_dir, exist_ok=True)
        out.fs.makedirs(f"{staging_dir}/{TMP_DIR}", exist_ok=True)
    except BaseException:
        heartbeat.stop()
        out.remove(owner_path)
        raise
    return Staging(out=out, version=version, build_id=build_id, overwrite=overwrite,
                   identity=identity, stale_after=stale_after, heartbeat=heartbeat)


def _staging_entries(out: _Output, version: str) -> dict[str, set[str]]:
    """build_id -> names in .staging that belong to that build of `version`:
    its directory, owner file, aside copy, and temporary files a killed
    heartbeat may have left."""
    suffixes = "|".join(re.escape(suffix) for suffix in _BUILD_SUFFIXES)
    pattern = re.compile(rf"^{re.escape(version)}\.(?P<id>{_BUILD_ID})(?:|{suffixes})"
                         r"(?:\.[0-9a-f]{32}\.tmp)?$")
    entries: dict[str, set[str]] = {}
    for name in out.names(out.path(STAGING_DIR)):
        match = pattern.match(name)
        if match:
            entries.setdefault(match["id"], set()).add(name)
    return entries


def _recover(out: _Output, version: str, stale_after: float, build_id: str) -> None:
    """Cleans up after dead builds of `version`.

    A commit interrupted between renaming the old version aside and renaming
    the new one in leaves ``<version>`` without a manifest and the old
    version at ``.staging/<version>.<id>.old``: it is renamed back. Then
    everything of dead builds in .staging is deleted, owner files last. Runs
    under the commit lock when it has to move a version, so it never races a
    live commit.
    """
    entries = _staging_entries(out, version)
    entries.pop(build_id, None)  # our own
    if not entries:
        return
    owners = {build_id: _load_json(out.read_bytes(
        out.path(STAGING_DIR, f"{version}.{build_id}{_OWNER_SUFFIX}"))) for build_id in entries}
    dead = {other for other in entries if _owner_is_stale(owners[other], stale_after)}
    # Only the local rename-aside commit makes aside copies.
    asides = [other for other in sorted(dead)
              if out.local and f"{version}.{other}{_ASIDE_SUFFIX}" in entries[other]]
    if asides:
        lock = _CommitLock(out, version, build_id=build_id, stale_after=stale_after)
        if lock.try_acquire():
            try:
                for other in asides:
                    _restore_aside(out, version, other)
            finally:
                lock.release()
        else:
            dead -= set(asides)  # a live commit holds the lock: leave its files alone
    for other in sorted(dead):
        owner = f"{version}.{other}{_OWNER_SUFFIX}"
        for name in sorted(entries[other] - {owner}):
            out.remove(out.path(STAGING_DIR, name), recursive=True)
        out.remove(out.path(STAGING_DIR, owner))


def _restore_aside(out: _Output, version: str, build_id: str) -> None:
    aside = out.path(STAGING_DIR, f"{version}.{build_id}{_ASIDE_SUFFIX}")
    final = out.path(version)
    if _published_identity(out, version) is not None:
        return  # the new version made it in; the aside copy is just garbage
    if out.read_bytes(f"{aside}/{manifest_lib.MANIFEST_FILE}") is None:
        return
    if os.path.lexists(final):
        # Whatever sits at the final name has no manifest: it is not a
        # published version, so it may go.
        trash = out.path(STAGING_DIR, f"{version}.{build_id}")
        out.remove(trash, recursive=True)
        os.rename(final, trash)
    os.rename(aside, final)
    _fsync_dir(out.root)


# --- the commit lock -----------------------------------------------------------

class _CommitLock:
    """Mutual exclusion for the commit of one version.

    The lock file names the holder's build id; it is stale when that build's
    owner file is stale (so a crashed commit does not block the version
    forever). Local: created complete and atomically with link(2). Object
    stores: ``xb`` mode where honoured, else check-then-put, confirmed by
    reading the token back after `LOCK_SETTLE` seconds.
    """

    def __init__(self, out: _Output, version: str, *, build_id: str, stale_after: float):
        self._out = out
        self._version = version
        self._path = out.path(STAGING_DIR, f"{version}{_LOCK_SUFFIX}")
        # Temporary names carry the build id, so the stale-staging cleanup
        # finds them if this build is killed mid-way.
        self._tmp = out.path(STAGING_DIR, f"{version}.{build_id}{_LOCK_TMP_SUFFIX}")
        self._broken = out.path(STAGING_DIR, f"{version}.{build_id}{_LOCK_BROKEN_SUFFIX}")
        owner_path = out.path(STAGING_DIR, f"{version}.{build_id}{_OWNER_SUFFIX}")
        self._stale_after = stale_after
        self._record = {"build_id": build_id, "host": socket.gethostname(), "pid": os.getpid(),
                        "pid_start": _process_start(os.getpid()), "heartbeat": time.time(),
                        "token": uuid.uuid4().hex, "owner": owner_path}
        self.holder: dict | None = None

    def _holder_is_stale(self, holder: Mapping | None) -> bool:
        if not isinstance(holder, Mapping):
            return True
        owner_path = holder.get("owner")
        owner = _load_json(self._out.read_bytes(owner_path)) if owner_path else holder
        return _owner_is_stale(owner, self._stale_after)

    def try_acquire(self) -> bool:
        """Takes the lock if it is free or stale; False if a live build holds it."""
        data = json.dumps(self._record).encode()
        for _ in range(3):
            try:
                self._create(data)
            except FileExistsError:
                raw = self._out.read_bytes(self._path)
                self.holder = _load_json(raw)
                if raw is None:
                    continue  # released meanwhile
                if not self._holder_is_stale(self.holder):
                    return False
                self._break(raw)
                continue
            if not self._out.local:
                time.sleep(LOCK_SETTLE if "memory" not in _protocols(self._out) else 0)
                if self._out.read_bytes(self._path) != data:
                    self.holder = _load_json(self._out.read_bytes(self._path))
                    return False
            return True
        return False

    def acquire(self, wait: float | None = None) -> None:
        """Waits up to `wait` seconds (default LOCK_WAIT) for the lock."""
        deadline = time.monotonic() + (LOCK_WAIT if wait is None else wait)
        while not self.try_acquire():
            if time.monotonic() >= deadline:
                holder = self.holder or {}
                raise ConcurrentBuildError(
                    f"another build of version {self._version!r} (build {holder.get('build_id')}, "
                    f"host {holder.get('host')}, pid {holder.get('pid')}) is publishing it; "
                    "this build published nothing")
            time.sleep(0.2)

    def _create(self, data: bytes) -> None:
        if self._out.local:
            with open(self._tmp, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            try:
                os.link(self._tmp, self._path)  # fails with EEXIST: atomic test-and-set
            finally:
                os.unlink(self._tmp)
            return
        try:
            with self._out.fs.open(self._path, "xb") as handle:
                handle.write(data)
        except (NotImplementedError, ValueError):
            if self._out.fs.exists(self._path):
                raise FileExistsError(self._path) from None
            self._out.fs.pipe_file(self._path, data)

    def _break(self, raw: bytes) -> None:
        if self._out.local:
            broken = self._broken
            try:
                os.rename(self._path, broken)
            except FileNotFoundError:
                return
            with open(broken, "rb") as handle:
                if handle.read() != raw:
                    # A live build took the lock between our read and rename:
                    # give it back.
                    try:
                        os.link(broken, self._path)
                    except FileExistsError:
                        pass
            os.unlink(broken)
        else:
            self._out.remove(self._path)

    def release(self) -> None:
        if self._out.read_bytes(self._path) == json.dumps(self._record).encode():
            self._out.remove(self._path)


def _protocols(out: _Output) -> tuple[str, ...]:
    protocol = out.fs.protocol
    return (protocol,) if isinstance(protocol, str) else tuple(protocol)


# --- finalize -------------------------------------------------------------------

@dataclass
class PublishResult:
    """What was published: the version, its redacted location and manifest."""

    version: str
    url: str
    manifest: dict
    verified: bool
    latest_updated: bool
    num_examples: int = field(init=False)

    def __post_init__(self):
        self.num_examples = sum(split["num_examples"] for split in self.manifest["splits"].values())


def finalize(staging: Staging, *, name: str, compression: str, features: Mapping[str, Any],
             vocabularies: Mapping[str, Sequence[str]], config: Mapping[str, Any],
             split_names: Sequence[str], max_error_rate: float | None = 0.01,
             max_errors: int | None = None, runner: str = "DirectRunner", verify: bool = True,
             report_hook: Callable[[str, dict], None] | None = None,
             update_latest: bool = True, verify_workers: int | None = None) -> PublishResult:
    """Checks the staged build and publishes it (see the module docstring).

    Returns a `PublishResult`. Raises `BuildFailed` (nothing published; the
    staging directory is deleted, dead letters moved under ``.failed/``),
    `ConcurrentBuildError` or `VersionExistsError`. Either way the staging
    directory and its owner file are gone afterwards.
    """
    out = staging._out
    try:
        result = _read_pipeline_result(out, staging)
        _check_accounting(result)
        _check_error_budget(result, max_error_rate, max_errors)
        dead_files = _dead_letter_files(out, staging, result)
        try:
            manifest = manifest_lib.build_manifest(
                name=name, version=staging.version, created=manifest_lib.utc_timestamp(),
                compression=compression, features=features, vocabularies=vocabularies,
                split_names=split_names, shards=result["shards"],
                num_input_rows=result["num_input_rows"],
                dead_letter={**result["dead_letter"], "files": dead_files},
                config=_redact_values(config), runner=runner)
        except manifest_lib.ManifestError as error:
            raise BuildFailed(f"the pipeline's shards are inconsistent: {error}") from None
        _check_nonempty_splits(manifest)
        _check_still_publishable(out, staging)
        out.remove(out.path(STAGING_DIR, f"{staging.version}.{staging.build_id}", TMP_DIR),
                   recursive=True)
        out.remove(f"{staging._dir}/{RESULT_FILE}")
        _check_staged_files(out, staging, manifest)
        if report_hook is not None:
            try:
                report_hook(staging.url, manifest)
            except Exception as error:
                raise BuildFailed(f"writing the build report failed ({type(error).__name__}: "
                                  f"{error}); nothing was published") from error
        _write_sha256sums(out, staging, manifest)
        out.write_atomic(f"{staging._dir}/{manifest_lib.MANIFEST_FILE}",
                         manifest_lib.dumps_manifest(manifest))
        if verify:
            _verify_staged(staging, verify_workers)
        _commit(out, staging)
    except ConcurrentBuildError:
        staging.abort()
        raise
    except BuildFailed as failure:
        kept_at = _keep_dead_letters(out, staging)
        staging.abort()
        if kept_at:
            raise failure.with_kept_at(kept_at) from None
        raise
    except BaseException:
        staging.abort()
        raise
    staging._close()
    latest_updated = False
    if update_latest:
        try:
            out.write_atomic(out.path(LATEST_FILE), f"{staging.version}\n".encode(),
                             tmp=f"{staging._dir}{_LATEST_TMP_SUFFIX}")
        except OSError as error:
            # The version is complete and published; only the pointer is stale.
            raise PublishError(
                f"version {staging.version!r} is published at "
                f"{out.display_of(out.path(staging.version))}, but {LATEST_FILE} could not be "
                f"updated ({type(error).__name__}: {redact_url(str(error))}); it still names "
                "the previous version") from error
        latest_updated = True
    return PublishResult(version=staging.version, url=out.display_of(out.path(staging.version)),
                         manifest=manifest, verified=verify, latest_updated=latest_updated)


def _read_pipeline_result(out: _Output, staging: Staging) -> dict:
    data = out.read_bytes(f"{staging._dir}/{RESULT_FILE}")
    if data is None:
        raise BuildFailed(f"{staging.display_url}/{RESULT_FILE} is missing: the pipeline did "
                          "not finish")
    result = _load_json(data)
    problem = _result_problem(result)
    if problem:
        raise BuildFailed(f"{staging.display_url}/{RESULT_FILE} is malformed: {problem}")
    return result


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _result_problem(result: Any) -> str | None:
    if not isinstance(result, dict):
        return "not a JSON object"
    if not _is_count(result.get("num_input_rows")):
        return "num_input_rows must be a non-negative integer"
    shards = result.get("shards")
    if not isinstance(shards, list):
        return "shards must be a list"
    for position, shard in enumerate(shards):
        if not isinstance(shard, dict) or not all(key in shard for key in (
                "split", "file", "num_examples", "num_bytes", "sha256")):
            return f"shards[{position}] needs split, file, num_examples, num_bytes, sha256"
        if not (_is_count(shard["num_examples"]) and _is_count(shard["num_bytes"])):
            return f"shards[{position}]: counts must be non-negative integers"
    dead = result.get("dead_letter")
    if not isinstance(dead, dict) or not _is_count(dead.get("num_rows")):
        return "dead_letter.num_rows must be a non-negative integer"
    if not isinstance(dead.get("by_reason", {}), dict):
        return "dead_letter.by_reason must be an object"
    if not isinstance(dead.get("files", []), list):
        return "dead_letter.files must be a list"
    if not isinstance(dead.get("samples", {}), dict):
        return "dead_letter.samples must be an object"
    return None


def _check_accounting(result: dict) -> None:
    examples = sum(shard["num_examples"] for shard in result["shards"])
    dead = result["dead_letter"]["num_rows"]
    rows = result["num_input_rows"]
    if rows != examples + dead:
        difference = rows - examples - dead
        what = f"{difference} rows lost" if difference > 0 else f"{-difference} rows duplicated"
        raise BuildFailed(
            f"row accounting failed: {rows} input rows but {examples} examples in shards + "
            f"{dead} dead letters ({what}). This is a bug in recordforge or a runner that "
            "ran a step twice; nothing was published")
    by_reason = result["dead_letter"].get("by_reason", {})
    if by_reason and sum(by_reason.values()) != dead:
        raise BuildFailed(f"row accounting failed: dead_letter.by_reason sums to "
                          f"{sum(by_reason.values())} but dead_letter.num_rows is {dead}")


def _format_sample(record: Any) -> str:
    if not isinstance(record, Mapping):
        return ""
    where = str(record.get("source") or "?")
    if record.get("row") is not None:
        where += f" row {record['row']}"
    if record.get("key") is not None:
        where += f" key {json.dumps(record['key'], ensure_ascii=False)}"
    message = str(record.get("message", ""))
    if record.get("feature") and repr(record["feature"]) not in message:
        where += f" feature {record['feature']!r}"
    text = f"{where}: {message}"
    return redact_url(text if len(text) <= _MAX_SAMPLE_CHARS else text[:_MAX_SAMPLE_CHARS] + "…")


def _top_reasons(dead: Mapping) -> list[tuple[str, int, Any]]:
    samples = dead.get("samples") or {}
    ranked = sorted(dead.get("by_reason", {}).items(), key=lambda item: (-item[1], item[0]))
    return [(reason, count, samples.get(reason)) for reason, count in ranked[:_TOP_REASONS]]


def _check_error_budget(result: dict, max_error_rate: float | None,
                        max_errors: int | None) -> None:
    rows = result["num_input_rows"]
    dead = result["dead_letter"]
    failed = dead["num_rows"]
    limits = []
    if max_error_rate is not None and failed > max_error_rate * rows:
        limits.append(f"max_error_rate={max_error_rate:g} ({int(max_error_rate * rows)} rows)")
    if max_errors is not None and failed > max_errors:
        limits.append(f"max_errors={max_errors}")
    if not limits:
        return
    rate = failed / rows if rows else 1.0
    reasons = _top_reasons(dead)
    lines = [f"build failed: {failed} of {rows} input rows ({rate:.2%}) failed, above the "
             f"error budget {' and '.join(limits)}; nothing was published", "top reasons:"]
    for reason, count, sample in reasons:
        line = f"  {reason}: {count} rows"
        example = _format_sample(sample)
        lines.append(f"{line}, e.g. {example}" if example else line)
    raise BuildFailed("\n".join(lines), reasons=reasons)


def _check_nonempty_splits(manifest: dict) -> None:
    empty = [split for split, summary in manifest["splits"].items()
             if summary["num_examples"] == 0]
    if empty:
        raise BuildFailed(f"split(s) {', '.join(map(repr, empty))} ended up with no examples; "
                          "nothing was published (too few rows, or the split fractions are "
                          "too small for this dataset)")


def _check_still_publishable(out: _Output, staging: Staging) -> None:
    """Fails early (before verifying) when another build published this
    version since begin_build; the commit checks again under the lock."""
    if _published_identity(out, staging.version) != staging._identity:
        raise ConcurrentBuildError(
            f"version {staging.version!r} was published at {out.display}/{staging.version} by "
            "another build while this one ran; this build published nothing")


def _dead_letter_files(out: _Output, staging: Staging, result: dict) -> list[str]:
    """The dead-letter files present in staging (relative paths). Every
    file the pipeline reported must exist."""
    present = sorted(f"{DEAD_LETTER_DIR}/{name}" for name in
                     out.files(f"{staging._dir}/{DEAD_LETTER_DIR}"))
    prefixes = (staging.url.rstrip("/") + "/", staging._dir.rstrip("/") + "/")
    for file in result["dead_letter"].get("files", []):
        relative = next((file[len(p):] for p in prefixes if file.startswith(p)), file)
        if relative not in present:
            raise BuildFailed(f"dead-letter file {redact_url(file)} reported by the pipeline is "
                              f"missing from {staging.display_url}")
    return present


def _check_staged_files(out: _Output, staging: Staging, manifest: dict) -> None:
    """Every shard exists with its recorded size; nothing unexplained is
    left beside them (it would be published)."""
    files = out.files(staging._dir)
    expected = set(manifest["dead_letter"]["files"])
    for split, summary in manifest["splits"].items():
        for shard in summary["shards"]:
            expected.add(shard["file"])
            size = files.get(shard["file"])
            if size is None:
                raise BuildFailed(f"shard {shard['file']} of split {split!r} is missing from "
                                  f"{staging.display_url}")
            if size != shard["num_bytes"]:
                raise BuildFailed(f"shard {shard['file']} is {size} bytes but the pipeline "
                                  f"reported {shard['num_bytes']}")
    unexpected = sorted(set(files) - expected)
    if unexpected:
        raise BuildFailed(f"unexpected files in {staging.display_url}: {', '.join(unexpected[:10])}")


def _sha256_of(out: _Output, path: str) -> str:
    digest = hashlib.sha256()
    with out.fs.open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _write_sha256sums(out: _Output, staging: Staging, manifest: dict) -> None:
    """Shards by their manifest digests (verify re-reads them anyway); any
    other file (dead letters, report) hashed here."""
    shard_sums = {shard["file"]: shard["sha256"] for summary in manifest["splits"].values()
                  for shard in summary["shards"]}
    entries = []
    for file in out.files(staging._dir):
        if file in (manifest_lib.MANIFEST_FILE, manifest_lib.SHA256SUMS_FILE):
            continue
        digest = shard_sums.get(file) or _sha256_of(out, f"{staging._dir}/{file}")
        entries.append((file, digest))
    out.write_atomic(f"{staging._dir}/{manifest_lib.SHA256SUMS_FILE}",
                     manifest_lib.format_sha256sums(entries))


def _verify_staged(staging: Staging, workers: int | None) -> None:
    from recordforge.pipelines import verify as verify_lib  # verify imports manifest only

    report = verify_lib.verify_dataset(staging.url, workers=workers)
    if not report.ok:
        lines = [f"the staged build failed verification ({len(report.problems)} problems); "
                 "nothing was published:"] + [f"  {problem}" for problem in report.problems[:20]]
        raise BuildFailed("\n".join(lines), problems=report.problems)


def _keep_dead_letters(out: _Output, staging: Staging) -> str | None:
    """Moves a failed build's dead letters (and pipeline result) to
    ``<output>/.failed/<version>.<build_id>/`` so they outlive the staging
    directory. Returns the redacted URL of the kept dead_letter directory."""
    source = f"{staging._dir}/{DEAD_LETTER_DIR}"
    files = out.files(source)
    if not files:
        return None
    target = out.path(FAILED_DIR, f"{staging.version}.{staging.build_id}")
    out.fs.makedirs(target, exist_ok=True)
    if out.local:
        os.rename(source, f"{target}/{DEAD_LETTER_DIR}")
    else:
        for file in files:
            out.fs.copy(f"{source}/{file}", f"{target}/{DEAD_LETTER_DIR}/{file}")
    result = out.read_bytes(f"{staging._dir}/{RESULT_FILE}")
    if result is not None:
        out.write_atomic(f"{target}/{RESULT_FILE}", result)
    return out.display_of(f"{target}/{DEAD_LETTER_DIR}") + "/"


# --- commit --------------------------------------------------------------------

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _exchange(a: str, b: str) -> bool:
    """Atomically swaps two paths (Linux renameat2 RENAME_EXCHANGE). False
    where the call or the filesystem does not support it."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                          ctypes.c_uint]
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), a, None, b)


def _commit(out: _Output, staging: Staging) -> None:
    lock = _CommitLock(out, staging.version, build_id=staging.build_id,
                       stale_after=staging._stale_after)
    lock.acquire()
    try:
        # Under the lock: the version must still be in the state this build
        # started from, or a concurrent build has published it.
        _check_still_publishable(out, staging)
        if out.local:
            _commit_by_rename(out, staging)
        else:
            _commit_by_copy(out, staging)
    finally:
        lock.release()


def _commit_by_rename(out: _Output, staging: Staging) -> None:
    final = out.path(staging.version)
    staged = staging._dir
    if not os.path.lexists(final):
        os.rename(staged, final)
    elif _exchange(staged, final):
        # The old version now sits at the staging name; a crash before the
        # delete leaves it to the stale-staging cleanup.
        shutil.rmtree(staged)
    else:
        aside = staged + _ASIDE_SUFFIX
        os.rename(final, aside)
        # Crash window: <version> is absent until the next line; the next
        # begin_build of this version renames the aside copy back.
        os.rename(staged, final)
        shutil.rmtree(aside)
    _fsync_dir(out.root)


def _commit_by_copy(out: _Output, staging: Staging) -> None:
    final = out.path(staging.version)
    staged_files = out.files(staging._dir)
    manifest_name = manifest_lib.MANIFEST_FILE
    # Unpublish first: while files are replaced, readers must not trust the
    # old manifest's checksums against new bytes.
    out.remove(f"{final}/{manifest_name}")
    for file in sorted(set(out.files(final)) - set(staged_files)):
        out.remove(f"{final}/{file}")
    for file in sorted(staged_files):
        if file != manifest_name:
            out.fs.copy(f"{staging._dir}/{file}", f"{final}/{file}")
    copied = out.files(final)
    for file, size in staged_files.items():
        if file != manifest_name and copied.get(file) != size:
            raise BuildFailed(f"copying {file} to {out.display}/{staging.version} gave "
                              f"{copied.get(file)} bytes instead of {size}; nothing was published")
    out.fs.copy(f"{staging._dir}/{manifest_name}", f"{final}/{manifest_name}")
    out.remove(staging._dir, recursive=True)
