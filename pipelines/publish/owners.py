"""Who owns a build: build ids, owner records, heartbeats, and when a build is dead.

Every build writes an owner file ``.staging/<version>.<build_id>.owner.json``
(host, pid and the kernel's start time of that pid, heartbeat time) before
anything else and deletes it last; a `Heartbeat` thread rewrites it every
`HEARTBEAT_INTERVAL` seconds. A build is dead when its owner file is
missing or unreadable, its process is gone (same host only), or its
heartbeat is older than `STALE_AFTER` seconds (`owner_is_stale`); a build
still writing its first owner file is not (`being_born`), but a temporary
owner file that holds the record of a dead process, or that nobody has
written for `BIRTH_GRACE` seconds, is a dead writer's leftover (a build
killed while writing it): it never keeps a build counted as running.

A build run by a pipeline (`WriteDataset`) has no driver process that lives
as long as it does: its workers may run anywhere, and the process that
built the pipeline may have exited. Its owner record holds a lease instead
of a heartbeat (`pipeline_owner_record`): it is dead when the lease has
run out, or, when the pipeline runs inside the process that built it (a
local runner), when that process is gone.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import socket
import sys
import threading
import time
import uuid
from typing import Any, Mapping

from ...transforms.layout import OWNER_SUFFIX, STAGING_DIR
from .output import Output, load_json

__all__ = [
    "BIRTH_GRACE",
    "BUILD_ID",
    "HEARTBEAT_INTERVAL",
    "STALE_AFTER",
    "Heartbeat",
    "NoHeartbeat",
    "being_born",
    "new_build_id",
    "owner_is_stale",
    "owner_record",
    "pipeline_owner_record",
    "process_alive",
    "process_start",
    "read_owner",
]

HEARTBEAT_INTERVAL = 30.0
# Generous: a build stalled this long (e.g. a laptop asleep) is treated as
# dead. A heavily loaded machine still runs the heartbeat thread every few
# milliseconds, so false positives need a really frozen process.
STALE_AFTER = 15 * 60.0

# Writing an owner record (a few hundred bytes) takes milliseconds; a
# temporary owner file untouched this long was left by a writer that died.
BIRTH_GRACE = 60.0
# An owner record is a few hundred bytes; a larger file is not one.
_OWNER_LIMIT = 64 * 1024

BUILD_ID = r"\d{8}T\d{6}Z-[0-9a-f]{12}"  # the pattern of `new_build_id`
_BUILD_STAMP = "%Y%m%dT%H%M%SZ"  # a build id's leading UTC start time


def new_build_id() -> str:
    """``<UTC start time>-<12 hex digits>``, unique per build."""
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime(_BUILD_STAMP)
    return f"{stamp}-{uuid.uuid4().hex[:12]}"


def process_start(pid: int) -> str | None:
    """The kernel's start time of `pid` (Linux), to tell a reused pid from the
    original process; None where /proc is not available."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[19].decode() if len(fields) > 19 else None


def process_alive(pid: int, start: str | None) -> bool:
    """Whether process `pid` of this machine is running and is the one that
    started at `start` (`process_start`; None: any)."""
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
    current = process_start(pid)
    return start is None or current is None or current == start


def owner_record(build_id: str, started: str) -> dict:
    """The owner file's content for this process."""
    return {"build_id": build_id, "host": socket.gethostname(), "pid": os.getpid(),
            "pid_start": process_start(os.getpid()), "started": started,
            "heartbeat": time.time()}


def pipeline_owner_record(build_id: str, started: str, *, lease: float,
                          bound_to_process: bool) -> dict:
    """The owner record of a build run by a pipeline: alive until `lease`
    seconds from now; with `bound_to_process` (a local runner, whose
    workers die with this process) also only while this process lives."""
    now = time.time()
    pid = os.getpid() if bound_to_process else None
    return {"build_id": build_id, "host": socket.gethostname(), "pid": pid,
            "pid_start": process_start(pid) if pid is not None else None,
            "started": started, "heartbeat": now, "lease_until": now + lease,
            "owner": "pipeline"}


def owner_is_stale(owner: Mapping | None, stale_after: float) -> bool:
    """A build is dead when its owner record is missing or unreadable, its
    process is gone (same host only: pids mean nothing elsewhere), or its
    heartbeat is older than `stale_after` seconds; a pipeline's build
    (a record with ``lease_until``) when its lease has run out or the
    process it is bound to is gone."""
    if not isinstance(owner, Mapping):
        return True
    if "lease_until" in owner:
        try:
            lease_until = float(owner["lease_until"])
            pid = None if owner.get("pid") is None else int(owner["pid"])
        except (TypeError, ValueError):
            return True
        if (pid is not None and owner.get("host") == socket.gethostname()
                and not process_alive(pid, owner.get("pid_start"))):
            return True
        return time.time() > lease_until
    try:
        heartbeat = float(owner["heartbeat"])
        pid = int(owner["pid"])
    except (KeyError, TypeError, ValueError):
        return True
    if owner.get("host") == socket.gethostname() and not process_alive(pid, owner.get("pid_start")):
        return True
    return time.time() - heartbeat > stale_after


def read_owner(out: Output, path: str) -> Any:
    """The owner record (or whatever JSON) in file `path`; None when it is
    missing, unreadable, not a regular file or larger than any record (it
    is never opened then: a FIFO would block the build)."""
    try:
        info = out.fs.info(path)
    except (OSError, ValueError):
        return None
    if info.get("type") != "file" or (info.get("size") or 0) > _OWNER_LIMIT:
        return None
    try:
        return load_json(out.read_bytes(path))
    except OSError:
        return None


def being_born(out: Output, version: str, build_id: str, names: set[str], owner: Any,
               stale_after: float) -> bool:
    """Whether `build_id`, with only `names` in .staging, is a build writing
    its first owner file: it has nothing but that file's temporary copies
    (the owner file comes first), it started (its id begins with its UTC
    start time) less than `stale_after` ago, no copy holds the record of a
    process that is gone (`owner_is_stale`), and one was written less than
    `BIRTH_GRACE` seconds ago."""
    temporary = f"{version}.{build_id}{OWNER_SUFFIX}."
    if owner is not None or not names or not all(name.startswith(temporary) for name in names):
        return False
    started = _dt.datetime.strptime(build_id.split("-", 1)[0], _BUILD_STAMP)
    if time.time() - started.replace(tzinfo=_dt.timezone.utc).timestamp() >= stale_after:
        return False
    paths = [out.path(STAGING_DIR, name) for name in sorted(names)]
    records = [read_owner(out, path) for path in paths]
    if any(_complete(record) and owner_is_stale(record, stale_after) for record in records):
        return False
    written = [_written(out, path) for path in paths]
    if any(when is None for when in written):  # a store without times: the id's stamp decides
        return True
    return time.time() - max(written) < BIRTH_GRACE


def _complete(record: Any) -> bool:
    """Whether `record` is a whole owner record (a half-written one is not)."""
    return isinstance(record, Mapping) and "build_id" in record and "heartbeat" in record


def _written(out: Output, path: str) -> float | None:
    """When file `path` was last written (seconds since the epoch); None if
    the filesystem does not say."""
    try:
        mtime = out.fs.info(path).get("mtime")
    except (OSError, ValueError):
        return None
    return float(mtime) if isinstance(mtime, (int, float)) else None


class NoHeartbeat:
    """The heartbeat of a build whose owner record holds a lease: nothing
    to rewrite."""

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


class Heartbeat:
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
