"""Recovery when a build starts: dead builds of every version are cleaned, live ones never.

Property-based: any mix of builds of any versions in ``.staging`` (dead on
this host, dead elsewhere by their heartbeat, without an owner file, alive
here, alive elsewhere), each with the files a build makes there, and commit
locks whose lease ran out or not. After `recovery.recover` for a build of
yet another version, exactly the dead builds' files and the expired locks
are gone.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from hypothesis import given, settings, strategies as st

from recordforge.pipelines.publish import owners
from recordforge.pipelines.publish.lock import LOCK_LEASE
from recordforge.pipelines.publish.output import Output
from recordforge.pipelines.publish.recovery import recover
from recordforge.transforms.layout import (LATEST_TMP_SUFFIX, LOCK_SUFFIX, OWNER_SUFFIX,
                                           STAGING_DIR)

_DEAD_PID = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                               capture_output=True, text=True, check=True).stdout)

VERSIONS = st.sampled_from(["1.0", "1.0.1", "2026-11-25", "20261125T030000", "a.b_c+d=e-f"])
STATES = st.sampled_from(["dead_here", "stale_elsewhere", "no_owner", "alive_here",
                          "alive_elsewhere"])
LOCKS = st.sampled_from(["none", "expired_elsewhere", "dead_here", "held_elsewhere"])


def _owner(build_id: str, state: str) -> dict | None:
    here, now = socket.gethostname(), time.time()
    if state == "no_owner":
        return None
    host = here if state.endswith("_here") else "other-host"
    pid = _DEAD_PID if state == "dead_here" else (os.getpid() if host == here else 1)
    age = owners.STALE_AFTER + 60 if state == "stale_elsewhere" else 1
    return {"build_id": build_id, "host": host, "pid": pid, "pid_start": None,
            "started": "2026-01-01T00:00:00Z", "heartbeat": now - age}


def _lock(state: str) -> dict:
    here, now = socket.gethostname(), time.time()
    host = here if state == "dead_here" else "other-host"
    pid = _DEAD_PID if state == "dead_here" else 1
    lease_until = now - 1 if state == "expired_elsewhere" else now + LOCK_LEASE
    return {"build_id": "x", "host": host, "pid": pid, "pid_start": None,
            "token": uuid.uuid4().hex, "lease_until": lease_until}


@settings(max_examples=60, deadline=None)
@given(builds=st.lists(st.tuples(VERSIONS, STATES, st.booleans()), max_size=8),
       locks=st.dictionaries(VERSIONS, LOCKS, max_size=3))
def test_any_build_cleans_dead_builds_of_every_version_and_nothing_else(builds, locks):
    with tempfile.TemporaryDirectory() as root:
        staging = Path(root) / STAGING_DIR
        staging.mkdir()
        expected_kept: set[str] = set()
        for version, state, extra in builds:
            # Started long ago: a build without an owner file is not being born.
            build_id = f"20260101T000000Z-{uuid.uuid4().hex[:12]}"
            base = f"{version}.{build_id}"
            names = [base]
            (staging / base / "_tmp").mkdir(parents=True)
            (staging / base / "train-00000-of-00001.tfrecord").write_bytes(b"partial")
            if extra:  # a killed writer's temporary files
                names.append(base + LATEST_TMP_SUFFIX)
                (staging / names[-1]).write_text("x\n")
                names.append(f"{base}{OWNER_SUFFIX}.{uuid.uuid4().hex}.tmp")
                (staging / names[-1]).write_text("{")
            owner = _owner(build_id, state)
            if owner is not None:
                names.append(base + OWNER_SUFFIX)
                (staging / names[-1]).write_text(json.dumps(owner))
            if state.startswith("alive"):
                expected_kept.update(names)
        for version, state in locks.items():
            if state != "none":
                name = version + LOCK_SUFFIX
                (staging / name).write_text(json.dumps(_lock(state)))
                if state == "held_elsewhere":
                    expected_kept.add(name)

        recover(Output(root), "9.9", owners.STALE_AFTER, owners.new_build_id())

        assert set(os.listdir(staging)) == expected_kept
