"""The commit lock: one build at a time publishes a version.

Commits of one version take a lock file ``<output>/.staging/<version>.commit.lock``
naming the holder (build id, host, pid, a random token). The lock is a
lease: it holds ``lease_until``, `LOCK_LEASE` seconds ahead, and a thread of
the holder renews it every third of that while it holds the lock. It is
free for the taking when the lease has run out (a holder killed on another
host, a container gone: at most `LOCK_LEASE` seconds), or at once when the
holder's process is gone on this host. A build that finds the lock held
says who holds it and until when, and waits (`LOCK_WAIT`). Before its
rename the holder checks that the lease is still its own (`check_held`).

Locally the lock is created complete and atomically with link(2); on object
stores with ``xb`` mode where the filesystem honours it, else check-then-put,
confirmed by reading the token back after `LOCK_SETTLE` seconds. A lock
without ``lease_until`` (written by an older recordforge) is stale when its
holder's owner file is (`owners.owner_is_stale`).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import socket
import sys
import threading
import time
import uuid
from typing import Callable, Mapping

from ...transforms.layout import (LOCK_BROKEN_SUFFIX, LOCK_SUFFIX, LOCK_TMP_SUFFIX,
                                  OWNER_SUFFIX, STAGING_DIR)
from .output import Output, load_json
from .errors import ConcurrentBuildError
from .owners import process_alive, owner_is_stale, process_start

__all__ = ["LOCK_LEASE", "LOCK_SETTLE", "LOCK_WAIT", "CommitLock", "lock_is_stale"]

LOCK_WAIT = 120.0
# How long a lock outlives its last renewal. Short, so a holder that died
# where nobody can see its process blocks the version for seconds, not the
# owner file's 15 minutes; a commit renews it every third of this.
LOCK_LEASE = 30.0
# Object stores without conditional writes: how long two racing lock writers
# get to overwrite each other before each reads back who won.
LOCK_SETTLE = 1.0


def lock_is_stale(holder: Mapping | None, read_owner: Callable[[str], Mapping | None],
                  stale_after: float) -> bool:
    """Whether a lock record may be broken: unreadable, its lease run out,
    or its holder's process gone on this host. `read_owner(path)` reads an
    owner file (for locks without a lease)."""
    if not isinstance(holder, Mapping):
        return True
    if "lease_until" not in holder:
        owner_path = holder.get("owner")
        owner = read_owner(owner_path) if isinstance(owner_path, str) else holder
        return owner_is_stale(owner, stale_after)
    try:
        lease_until = float(holder["lease_until"])
        pid = int(holder["pid"])
    except (KeyError, TypeError, ValueError):
        return True
    if holder.get("host") == socket.gethostname() and not process_alive(
            pid, holder.get("pid_start")):
        return True
    return time.time() > lease_until


def _utc(seconds: float) -> str:
    return _dt.datetime.fromtimestamp(seconds, _dt.timezone.utc).strftime("%H:%M:%SZ")


class CommitLock:
    """Mutual exclusion for the commit of one version (see the module
    docstring). `holder` describes the build holding it after a failed
    attempt."""

    def __init__(self, out: Output, version: str, *, build_id: str, stale_after: float,
                 lease: float | None = None, report: Callable[[str], None] | None = None):
        self._out = out
        self._version = version
        self._lease = LOCK_LEASE if lease is None else lease
        self._report = report if report is not None else _print
        self._path = out.path(STAGING_DIR, f"{version}{LOCK_SUFFIX}")
        # Temporary names carry the build id, so the stale-staging cleanup
        # finds them if this build is killed mid-way.
        self._tmp = out.path(STAGING_DIR, f"{version}.{build_id}{LOCK_TMP_SUFFIX}")
        self._broken = out.path(STAGING_DIR, f"{version}.{build_id}{LOCK_BROKEN_SUFFIX}")
        owner_path = out.path(STAGING_DIR, f"{version}.{build_id}{OWNER_SUFFIX}")
        self._stale_after = stale_after
        self._record = {"build_id": build_id, "host": socket.gethostname(), "pid": os.getpid(),
                        "pid_start": process_start(os.getpid()), "heartbeat": time.time(),
                        "token": uuid.uuid4().hex, "owner": owner_path,
                        "acquired": time.time(), "lease_until": 0.0}
        self.holder: dict | None = None
        self._data = b""
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self._lost: str | None = None

    def _holder_is_stale(self, holder: Mapping | None) -> bool:
        return lock_is_stale(holder, lambda path: load_json(self._out.read_bytes(path)),
                             self._stale_after)

    def describe_holder(self) -> str:
        """Who holds the lock, as the last attempt found it."""
        holder = self.holder if isinstance(self.holder, Mapping) else {}
        text = (f"build {holder.get('build_id')} on host {holder.get('host')}, "
                f"pid {holder.get('pid')}")
        try:
            text += f", lease until {_utc(float(holder['lease_until']))}"
        except (KeyError, TypeError, ValueError, OverflowError, OSError):
            pass
        return text

    def try_acquire(self) -> bool:
        """Takes the lock if it is free or stale; False if a live build holds it."""
        now = time.time()
        self._record.update(acquired=now, lease_until=now + self._lease)
        data = self._data = json.dumps(self._record).encode()
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
                time.sleep(LOCK_SETTLE if "memory" not in self._out.protocols() else 0)
                if self._out.read_bytes(self._path) != data:
                    self.holder = load_json(self._out.read_bytes(self._path))
                    return False
            self._start_renewing()
            return True
        return False

    def acquire(self, wait: float | None = None) -> bool:
        """Waits up to `wait` seconds (default LOCK_WAIT) for the lock,
        reporting once who holds it. False if a live build still holds it
        then (`holder`, `describe_holder` say which)."""
        deadline = time.monotonic() + (LOCK_WAIT if wait is None else wait)
        reported = None
        while not self.try_acquire():
            if time.monotonic() >= deadline:
                return False
            token = self.holder.get("token") if isinstance(self.holder, Mapping) else None
            if token != reported:
                reported = token
                self._report(f"waiting for the commit lock of version {self._version!r}: held "
                             f"by {self.describe_holder()}")
            time.sleep(0.2)
        return True

    # --- the lease -------------------------------------------------------------------

    def _start_renewing(self) -> None:
        self._stop.clear()
        self._lost = None
        self._renewer = threading.Thread(target=self._renew_loop, name="recordforge-lock",
                                         daemon=True)
        self._renewer.start()

    def _renew_loop(self) -> None:
        while not self._stop.wait(self._lease / 3):
            try:
                self.renew()
            except Exception as error:  # noqa: BLE001 - a missed renewal is retried
                self._report(f"renewing the commit lock failed ({type(error).__name__}: "
                             f"{error})")
            if self._lost:
                return

    def renew(self) -> None:
        """Moves the lease `LOCK_LEASE` seconds ahead, if the lock is still
        this build's (else records that it was lost)."""
        current = self._out.read_bytes(self._path)
        if current != self._data:
            self._lost = "another build holds it now" if current else "it was removed"
            return
        self._record["lease_until"] = time.time() + self._lease
        data = json.dumps(self._record).encode()
        if self._out.local:
            with open(self._tmp, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(self._tmp, self._path)
        else:
            self._out.fs.pipe_file(self._path, data)
        self._data = data

    def check_held(self) -> None:
        """Raises `ConcurrentBuildError` unless this build still holds the
        lock with time left on its lease (checked before the commit's
        rename: a holder frozen past its lease may have lost the lock)."""
        if self._lost is None and time.time() + 1.0 >= self._record["lease_until"]:
            self.renew()
        if self._lost is None and self._out.read_bytes(self._path) != self._data:
            self._lost = "another build holds it now"
        if self._lost is not None:
            raise ConcurrentBuildError(
                f"this build lost the commit lock of version {self._version!r} "
                f"({self._lost}); it published nothing")

    def _create(self, data: bytes) -> None:
        if self._out.local:
            # Not `write_atomic`: the lock must appear only if it is free,
            # which a rename (it replaces) cannot test and link(2) can.
            try:
                with open(self._tmp, "wb") as handle:
                    handle.write(data)
                    handle.flush()
                    os.fsync(handle.fileno())
                os.link(self._tmp, self._path)  # fails with EEXIST: atomic test-and-set
            finally:
                # Also when the write fails (a full disk): nothing else knows its name.
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self._tmp)
            return
        try:
            with self._out.fs.open(self._path, "xb") as handle:
                handle.write(data)
        except (NotImplementedError, ValueError):
            if self._out.fs.exists(self._path):
                raise FileExistsError(self._path) from None
            self._out.fs.pipe_file(self._path, data)

    def break_if_stale(self) -> bool:
        """Removes the lock if its holder is dead or its lease ran out (never
        takes it). Returns whether it did."""
        raw = self._out.read_bytes(self._path)
        if raw is None or not self._holder_is_stale(load_json(raw)):
            return False
        self._break(raw)
        return True

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
        self._stop.set()
        if self._renewer is not None and self._renewer is not threading.current_thread():
            self._renewer.join()
        self._renewer = None
        if self._data and self._out.read_bytes(self._path) == self._data:
            self._out.remove(self._path)


def _print(message: str) -> None:
    print(f"recordforge: {message}", file=sys.stderr)
