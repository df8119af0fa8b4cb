"""A build a pipeline publishes (`WriteDataset`) owns its staging directory
by a lease, not a heartbeat: alive until the lease ends, or, bound to a
local runner's process, until that process is gone."""

import json
import os
import subprocess
import sys
import time

from recordforge.pipelines.publish import begin_build, begin_pipeline_build
from recordforge.pipelines.publish.owners import owner_is_stale, pipeline_owner_record


def test_a_lease_is_alive_until_it_ends():
    record = pipeline_owner_record("b", "2026-01-01T00:00:00Z", lease=60,
                                   bound_to_process=False)
    assert record["pid"] is None and record["owner"] == "pipeline"
    # Far older than a heartbeat build may be: the lease decides.
    assert not owner_is_stale(record, stale_after=0)
    assert owner_is_stale({**record, "lease_until": time.time() - 1}, stale_after=10**6)
    assert owner_is_stale({**record, "lease_until": "soon"}, stale_after=10**6)


def test_a_lease_bound_to_a_process_ends_with_it():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        record = pipeline_owner_record("b", "2026-01-01T00:00:00Z", lease=3600,
                                       bound_to_process=True)
        record = {**record, "pid": child.pid,
                  "pid_start": open(f"/proc/{child.pid}/stat").read().rsplit(")", 1)[1]
                  .split()[19]}
        assert not owner_is_stale(record, stale_after=0)
    finally:
        child.kill()
        child.wait()
    assert owner_is_stale(record, stale_after=10**6)


def test_the_next_build_keeps_a_live_pipeline_build_and_cleans_a_dead_one(tmp_path):
    out = str(tmp_path / "out")
    live = begin_pipeline_build(out, "1.0.0", lease=3600, bound_to_process=False)
    dead = begin_pipeline_build(out, "1.0.0", lease=3600, bound_to_process=False)
    owner = f"{dead.directory}.owner.json"
    record = json.load(open(owner))
    with open(owner, "w") as handle:
        json.dump({**record, "lease_until": time.time() - 1}, handle)
    staging = begin_build(out, "1.0.0")  # cleans up dead builds of the version
    try:
        assert os.path.isdir(live.directory)
        assert not os.path.exists(dead.directory) and not os.path.exists(owner)
    finally:
        staging.abort()
        live.abort()
    assert os.listdir(tmp_path / "out" / ".staging") == []
