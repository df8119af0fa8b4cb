"""Where a build writes before it is published, and who owns it.

Staging directories live at ``<output>/.staging/<version>.<build_id>/``
beside an owner file ``<version>.<build_id>.owner.json`` (host, pid, heartbeat
time) that a thread refreshes every `HEARTBEAT_INTERVAL` seconds.
`open_staging` (called by `publish.begin_build`) deletes the staging
directories of the same version whose owner is gone (same host and process
dead) or silent for `STALE_AFTER` seconds; a running build is never touched.
It also rolls back a local commit interrupted between its two renames (the
old version left at ``.staging/<version>.<build_id>.old``).

`Staging` is a context manager that aborts on an exception. Pass
`staging.url` (a plain string) to the pipeline, never the `Staging` object: it
owns a heartbeat thread. The pipeline writes into it::

    shards <split>-<i:05d>-of-<n:05d>.tfrecord[.gz]
    dead_letter/*.jsonl                   (DEAD_LETTER_DIR)
    _tmp/...                              (TMP_DIR; deleted before publishing)
    _pipeline_result.json                 (RESULT_FILE, last)

Commits of one version take a lock file
(``<output>/.staging/<version>.commit.lock``, `CommitLock`). Locally the lock
is created atomically (``link``); on object stores it is created with ``xb``
mode where the filesystem honours it, then read back after a short settling
delay.

`Output` wraps an output root (local path or fsspec URL): small whole-file
writes (temporary name + rename + fsync locally, one put on object stores),
listings and removal. Credentials in URLs never appear in messages
(`redact_url`).
"""

from __future__ import annotations

import datetime as _dt
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
from typing import Any, Callable, Mapping

import fsspec
from fsspec.implementations.local import LocalFileSystem

from . import manifest as manifest_lib
from ..transforms.urls import redact_url

__all__ = [
    "ASIDE_SUFFIX",
    "DEAD_LETTER_DIR",
    "HEARTBEAT_INTERVAL",
    "LATEST_TMP_SUFFIX",
    "RESULT_FILE",
    "STAGING_DIR",
    "STALE_AFTER",
    "TMP_DIR",
    "CommitLock",
    "Output",
    "Staging",
    "fsync_dir",
    "held_copy_name",
    "load_json",
    "open_staging",
    "published_identity",
]

STAGING_DIR = ".staging"
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

# Names a build creates in .staging beside its directory, all starting with
# <version>.<build_id>: the commit's aside copy of an old version and the
# temporary name of LATEST are made by `publish`, the rest here.
ASIDE_SUFFIX = ".old"
LATEST_TMP_SUFFIX = ".latest.tmp"
_OWNER_SUFFIX = ".owner.json"
_LOCK_SUFFIX = ".commit.lock"
_LOCK_TMP_SUFFIX = ".lock.tmp"
_LOCK_BROKEN_SUFFIX = ".lock.broken"
_BUILD_SUFFIXES = (_OWNER_SUFFIX, ASIDE_SUFFIX, _LOCK_TMP_SUFFIX, _LOCK_BROKEN_SUFFIX,
                   LATEST_TMP_SUFFIX)
_BUILD_ID = r"\d{8}T\d{6}Z-[0-9a-f]{12}"
_BUILD_STAMP = "%Y%m%dT%H%M%SZ"  # a build id's leading UTC start time


# --- the output location -------------------------------------------------------

class Output:
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
            fsync_dir(os.path.dirname(path))
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


def held_copy_name(version: str, build_id: str) -> str:
    """The top-level name under which an object-store overwrite keeps the
    version it replaces readable (``<version>.<build_id>``, a valid version
    name: LATEST names it while the version's files are replaced)."""
    return f"{version[:160].rstrip('.')}.{build_id}"


def fsync_dir(path: str) -> None:
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


def published_identity(out: Output, version: str) -> str | None:
    """sha256 of the published manifest.json of `version`, or None if the
    version is not published. Commit compares it with the value seen at
    the start of the build to detect a concurrent publisher."""
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


def _being_born(version: str, build_id: str, names: set[str], owner: Any,
                stale_after: float) -> bool:
    """Whether `build_id`, with only `names` in .staging, is a build writing
    its first owner file: it has nothing but that file's temporary copy (the
    owner file comes first), and it started (its id begins with its UTC
    start time) less than `stale_after` ago."""
    temporary = f"{version}.{build_id}{_OWNER_SUFFIX}."
    if owner is not None or not all(name.startswith(temporary) for name in names):
        return False
    started = _dt.datetime.strptime(build_id.split("-", 1)[0], _BUILD_STAMP)
    return time.time() - started.replace(tzinfo=_dt.timezone.utc).timestamp() < stale_after


def load_json(data: bytes | None) -> Any:
    if data is None:
        return None
    try:
        return json.loads(data)
    except ValueError:
        return None


class _Heartbeat:
    """Rewrites the owner file every `interval` seconds until stopped."""

    def __init__(self, out: Output, path: str, record: dict, interval: float):
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

    out: the `Output` it belongs to; directory: `url` as a path of
    ``out.fs``. identity: `published_identity` of the version when the build
    began (a commit checks it is unchanged). stale_after: the owner-file
    staleness limit this build uses (for the commit lock).
    """

    def __init__(self, *, out: Output, version: str, build_id: str,
                 identity: str | None, stale_after: float, heartbeat: _Heartbeat):
        self.out = out
        self.version = version
        self.build_id = build_id
        self.identity = identity
        self.stale_after = stale_after
        self._heartbeat = heartbeat
        self.directory = out.path(STAGING_DIR, f"{version}.{build_id}")
        self._owner = self.directory + _OWNER_SUFFIX
        self._closed = False
        self.url = out.url_of(self.directory)
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
        self.out.remove(self.directory, recursive=True)
        self.close()

    def close(self) -> None:
        """Stops the heartbeat and deletes the owner file, leaving the staging
        directory (once committed, gone from .staging) alone. Idempotent."""
        # The owner file goes last: a staging directory without one is dead.
        self._heartbeat.stop()
        self.out.remove(self._owner)
        self._closed = True


def _new_build_id() -> str:
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime(_BUILD_STAMP)
    return f"{stamp}-{uuid.uuid4().hex[:12]}"


def open_staging(output_path: str, version: str, *, stale_after: float,
                 heartbeat_interval: float,
                 admit: Callable[[Output, str | None], None]) -> Staging:
    """Creates the staging of a build of `version` under `output_path` (local
    path or fsspec URL), whose name has already been checked. Returns the
    `Staging` the pipeline writes into.

    Before creating it: rolls back a commit of this version interrupted
    between its two renames, and deletes everything in ``.staging`` that
    belongs to dead builds of this version (see `_owner_is_stale`). Then
    calls ``admit(out, identity)`` (identity: `published_identity` of the
    version), which raises to refuse the build; the owner file is then
    removed and nothing is left behind.
    """
    out = Output(output_path)
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
        identity = published_identity(out, version)
        admit(out, identity)
        out.fs.makedirs(staging_dir, exist_ok=True)
        out.fs.makedirs(f"{staging_dir}/{TMP_DIR}", exist_ok=True)
    except BaseException:
        heartbeat.stop()
        out.remove(owner_path)
        raise
    return Staging(out=out, version=version, build_id=build_id, identity=identity,
                   stale_after=stale_after, heartbeat=heartbeat)


def _staging_entries(out: Output, version: str) -> dict[str, set[str]]:
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


def _recover(out: Output, version: str, stale_after: float, build_id: str) -> None:
    """Cleans up after dead builds of `version` (and, see
    `_recover_other_versions`, of every other version).

    A commit interrupted between renaming the old version aside and renaming
    the new one in leaves ``<version>`` without a manifest and the old
    version at ``.staging/<version>.<id>.old``: it is renamed back. Then
    everything of dead builds in .staging is deleted, owner files last (but
    for a build still writing its first owner file, see `_being_born`). Runs
    under the commit lock when it has to move a version, so it never races a
    live commit.
    """
    _remove_held_copies(out, version, stale_after, build_id)
    _recover_other_versions(out, version, stale_after, build_id)
    entries = _staging_entries(out, version)
    entries.pop(build_id, None)  # our own
    if not entries:
        return
    owners = {build_id: load_json(out.read_bytes(
        out.path(STAGING_DIR, f"{version}.{build_id}{_OWNER_SUFFIX}"))) for build_id in entries}
    dead = {other for other in entries if _owner_is_stale(owners[other], stale_after)
            and not _being_born(version, other, entries[other], owners[other], stale_after)}
    # Only the local rename-aside commit makes aside copies.
    asides = [other for other in sorted(dead)
              if out.local and f"{version}.{other}{ASIDE_SUFFIX}" in entries[other]]
    if asides:
        lock = CommitLock(out, version, build_id=build_id, stale_after=stale_after)
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


def _recover_other_versions(out: Output, version: str, stale_after: float,
                            build_id: str) -> None:
    """Deletes what dead builds of versions other than `version` left in
    .staging (a nightly ``{date}`` version is never built again, so its
    next build would never clean it). On object stores, a dead build that
    still holds its version's commit lock was killed while copying: the
    files it copied under an unpublished version name (no manifest) go too,
    and then the lock. A local build's aside copy of an old version is left
    for the next build of that version, which restores it."""
    suffixes = "|".join(re.escape(suffix) for suffix in _BUILD_SUFFIXES)
    pattern = re.compile(rf"^(?P<version>[A-Za-z0-9._+=-]+?)\.(?P<id>{_BUILD_ID})"
                         rf"(?:|{suffixes})(?:\.[0-9a-f]{{32}}\.tmp)?$")
    builds: dict[tuple[str, str], set[str]] = {}
    for name in out.names(out.path(STAGING_DIR)):
        match = pattern.match(name)
        if match and match["version"] != version:
            builds.setdefault((match["version"], match["id"]), set()).add(name)
    for (other, other_id), names in sorted(builds.items()):
        owner = f"{other}.{other_id}{_OWNER_SUFFIX}"
        record = load_json(out.read_bytes(out.path(STAGING_DIR, owner)))
        if (not _owner_is_stale(record, stale_after)
                or _being_born(other, other_id, names, record, stale_after)
                or f"{other}.{other_id}{ASIDE_SUFFIX}" in names):
            continue
        lock_path = out.path(STAGING_DIR, f"{other}{_LOCK_SUFFIX}")
        holder = load_json(out.read_bytes(lock_path))
        if isinstance(holder, Mapping) and holder.get("build_id") == other_id:
            lock = CommitLock(out, other, build_id=build_id, stale_after=stale_after)
            if not lock.try_acquire():  # taken over by a live build meanwhile
                continue
            try:
                if not out.local and published_identity(out, other) is None:
                    out.remove(out.path(other), recursive=True)
            finally:
                lock.release()
        for name in sorted(names - {owner}):
            out.remove(out.path(STAGING_DIR, name), recursive=True)
        out.remove(out.path(STAGING_DIR, owner))


def _remove_held_copies(out: Output, version: str, stale_after: float, build_id: str) -> None:
    """Deletes the held copies (`held_copy_name`) of `version` that dead
    builds left at the top level, except the one LATEST names: a build
    killed in an object-store overwrite leaves LATEST naming its held copy,
    a complete version, until the next commit moves LATEST on."""
    if out.local:
        return
    pattern = re.compile(rf"^{re.escape(held_copy_name(version, ''))}(?P<id>{_BUILD_ID})$")
    latest = (out.read_bytes(out.path(manifest_lib.LATEST_FILE)) or b"").decode(
        "utf-8", "replace").strip()
    for name in out.names(out.root):
        match = pattern.match(name)
        if match is None or name == latest or match["id"] == build_id:
            continue
        owner = load_json(out.read_bytes(
            out.path(STAGING_DIR, f"{version}.{match['id']}{_OWNER_SUFFIX}")))
        if _owner_is_stale(owner, stale_after):
            out.remove(out.path(name, manifest_lib.MANIFEST_FILE))  # unpublished first
            out.remove(out.path(name), recursive=True)


def _restore_aside(out: Output, version: str, build_id: str) -> None:
    aside = out.path(STAGING_DIR, f"{version}.{build_id}{ASIDE_SUFFIX}")
    final = out.path(version)
    if published_identity(out, version) is not None:
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
    fsync_dir(out.root)




# --- the commit lock -----------------------------------------------------------

class CommitLock:
    """Mutual exclusion for the commit of one version.

    The lock file names the holder's build id; it is stale when that build's
    owner file is stale (so a crashed commit does not block the version
    forever). Local: created complete and atomically with link(2). Object
    stores: ``xb`` mode where honoured, else check-then-put, confirmed by
    reading the token back after `LOCK_SETTLE` seconds.
    """

    def __init__(self, out: Output, version: str, *, build_id: str, stale_after: float):
        self._out = out
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
        owner = load_json(self._out.read_bytes(owner_path)) if owner_path else holder
        return _owner_is_stale(owner, self._stale_after)

    def try_acquire(self) -> bool:
        """Takes the lock if it is free or stale; False if a live build holds it."""
        data = json.dumps(self._record).encode()
        for _ in range(3):
            try:
                self._create(data)
            except FileExistsError:
                raw = self._out.read_bytes(self._path)
                self.holder = load_json(raw)
                if raw is None:
                    continue  # released meanwhile
                if not self._holder_is_stale(self.holder):
                    return False
                self._break(raw)
                continue
            if not self._out.local:
                time.sleep(LOCK_SETTLE if "memory" not in _protocols(self._out) else 0)
                if self._out.read_bytes(self._path) != data:
                    self.holder = load_json(self._out.read_bytes(self._path))
                    return False
            return True
        return False

    def acquire(self, wait: float | None = None) -> bool:
        """Waits up to `wait` seconds (default LOCK_WAIT) for the lock. False
        if a live build still holds it then (`holder` describes that build)."""
        deadline = time.monotonic() + (LOCK_WAIT if wait is None else wait)
        while not self.try_acquire():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.2)
        return True

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


def _protocols(out: Output) -> tuple[str, ...]:
    protocol = out.fs.protocol
    return (protocol,) if isinstance(protocol, str) else tuple(protocol)

