"""The commit lock: one build at a time publishes a version.

Commits of one version take a lock file ``<output>/.staging/<version>.commit.lock``
naming the holder's build id. It is stale when that build's owner file is
stale (`owners.owner_is_stale`), so a crashed commit does not block the
version forever. Locally the lock is created complete and atomically with
link(2); on object stores with ``xb`` mode where the filesystem honours it,
else check-then-put, confirmed by reading the token back after `LOCK_SETTLE`
seconds.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from typing import Mapping

from ...transforms.layout import (LOCK_BROKEN_SUFFIX, LOCK_SUFFIX, LOCK_TMP_SUFFIX,
                                  OWNER_SUFFIX, STAGING_DIR)
from .output import Output, load_json
from .owners import owner_is_stale, process_start

__all__ = ["LOCK_SETTLE", "LOCK_WAIT", "CommitLock"]

LOCK_WAIT = 120.0
# Object stores without conditional writes: how long two racing lock writers
# get to overwrite each other before each reads back who won.
LOCK_SETTLE = 1.0


class CommitLock:
    """Mutual exclusion for the commit of one version (see the module
    docstring). `holder` describes the build holding it after a failed
    attempt."""

    def __init__(self, out: Output, version: str, *, build_id: str, stale_after: float):
        self._out = out
        self._path = out.path(STAGING_DIR, f"{version}{LOCK_SUFFIX}")
        # Temporary names carry the build id, so the stale-staging cleanup
        # finds them if this build is killed mid-way.
        self._tmp = out.path(STAGING_DIR, f"{version}.{build_id}{LOCK_TMP_SUFFIX}")
        self._broken = out.path(STAGING_DIR, f"{version}.{build_id}{LOCK_BROKEN_SUFFIX}")
        owner_path = out.path(STAGING_DIR, f"{version}.{build_id}{OWNER_SUFFIX}")
        self._stale_after = stale_after
        self._record = {"build_id": build_id, "host": socket.gethostname(), "pid": os.getpid(),
                        "pid_start": process_start(os.getpid()), "heartbeat": time.time(),
                        "token": uuid.uuid4().hex, "owner": owner_path}
        self.holder: dict | None = None

    def _holder_is_stale(self, holder: Mapping | None) -> bool:
        if not isinstance(holder, Mapping):
            return True
        owner_path = holder.get("owner")
        owner = load_json(self._out.read_bytes(owner_path)) if owner_path else holder
        return owner_is_stale(owner, self._stale_after)

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
                time.sleep(LOCK_SETTLE if "memory" not in self._out.protocols() else 0)
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
            # Not `write_atomic`: the lock must appear only if it is free,
            # which a rename (it replaces) cannot test and link(2) can.
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
