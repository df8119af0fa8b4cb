"""Leftovers of a build's first owner file never count as a running build (issue 41.4).

A build whose owner-file write fails (EIO, ENOSPC or EXDEV on its rename,
injected by strace into a real `recordforge build`) removes the temporary
file and says nothing was published; the next build prunes its cache. A
temporary owner file left by a writer that died (SIGKILL: generated here,
with a whole record of a gone process, half a record, or nothing, at ages
from just past the grace period to days) is not a live build for the
cache's pruning check, and the next build removes it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recordforge.pipelines import publish
from recordforge.pipelines.publish import owners
from recordforge.pipelines.publish.output import Output

CONFIG = textwrap.dedent("""\
    name: owner-leftovers
    version: "{version}"
    source: {{type: csv, path: {csv}}}
    features:
      id: {{type: int64}}
    key: id
    output: {{path: "{output}", compression: none}}
    """)


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def _leftover(staging: Path, content: str, age: float) -> Path:
    """A temporary owner file of a build that started now, last written `age` seconds ago."""
    build_id = owners.new_build_id()
    record = owners.owner_record(build_id, "now")
    record.update(pid=_dead_pid(), pid_start=None)
    data = {"record": json.dumps(record), "half": json.dumps(record)[:40], "empty": ""}[content]
    path = staging / f"1.0.0.{build_id}.owner.json.{uuid.uuid4().hex}.tmp"
    path.write_text(data)
    then = time.time() - age
    os.utime(path, (then, then))
    return path


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(contents=st.lists(st.sampled_from(["record", "half", "empty"]), min_size=1, max_size=3),
       age=st.floats(min_value=owners.BIRTH_GRACE + 1, max_value=3 * 86400.0))
def test_a_dead_writers_owner_leftovers_are_not_a_live_build(tmp_path_factory, contents, age):
    root = tmp_path_factory.mktemp("out")
    staging = root / ".staging"
    staging.mkdir()
    leftovers = [_leftover(staging, content, age) for content in contents]
    assert publish.live_builds(Output(str(root)), owners.STALE_AFTER) == []
    publish.begin_build(str(root), "1.0.0").abort()
    assert not any(path.exists() for path in leftovers)
    assert list(staging.iterdir()) == []


def test_a_build_writing_its_owner_file_right_now_is_still_alive(tmp_path):
    """The grace period: half a record written a moment ago is a build being born."""
    staging = tmp_path / ".staging"
    staging.mkdir()
    path = _leftover(staging, "half", 0.0)
    assert len(publish.live_builds(Output(str(tmp_path)), owners.STALE_AFTER)) == 1
    publish.begin_build(str(tmp_path), "1.0.0").abort()
    assert path.exists()


@pytest.mark.skipif(shutil.which("strace") is None or not sys.platform.startswith("linux"),
                    reason="needs Linux and strace")
@pytest.mark.parametrize("error", ["EIO", "ENOSPC", "EXDEV"])
def test_a_failed_owner_file_write_leaves_nothing_and_the_next_build_prunes(tmp_path,
                                                                            cli_command, error):
    csv = tmp_path / "rows.csv"
    csv.write_text("id\n" + "".join(f"{i}\n" for i in range(30)))
    output = tmp_path / "out"

    def build(version: str, strace: list[str] = ()) -> subprocess.CompletedProcess:
        config = tmp_path / f"{version}.yaml"
        config.write_text(CONFIG.format(version=version, csv=csv, output=output))
        command = [cli_command, "build", str(config), "--", "--direct_running_mode=in_memory"]
        if strace:
            command = ["strace", "-f", "-qq", "-o", "/dev/null", *strace, *command]
        return subprocess.run(command, capture_output=True, text=True, timeout=300,
                              env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})

    assert build("1.0.0").returncode == 0
    # The owner file is the first file a build renames into place.
    calls = "rename,renameat,renameat2"
    failed = build("2.0.0", ["-e", f"trace={calls}", "-e", f"inject={calls}:error={error}:when=1"])
    assert failed.returncode == 1, failed.stderr[-3000:]
    assert "nothing was published" in failed.stderr, failed.stderr[-3000:]
    assert "Traceback" not in failed.stderr
    assert list((output / ".staging").iterdir()) == []
    again = build("2.0.0")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "left as it is" not in again.stderr, again.stderr[-3000:]
    assert list((output / ".staging").iterdir()) == []
