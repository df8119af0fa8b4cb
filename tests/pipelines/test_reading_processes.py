"""Tests for recordforge.pipelines.publish.reading_processes: readers never
outlive the build that started them."""

import os
import subprocess
import sys
import textwrap
import time

from recordforge.pipelines.publish.reading_processes import PARENT_CHECK_SECONDS, reading_pool

_KILLED_PARENT = textwrap.dedent("""
    import os, signal
    from recordforge.pipelines.publish.reading_processes import reading_pool

    if __name__ == "__main__":
        pool = reading_pool(2)
        print(pool.submit(os.getpid).result(), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # no shutdown, as when a build is killed
    """)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (ended, not yet reaped by its new parent) counts as gone.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_readers_end_when_the_process_that_started_them_is_killed(tmp_path):
    script = tmp_path / "killed.py"
    script.write_text(_KILLED_PARENT)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120)
    reader = int(done.stdout.split()[0])
    deadline = time.monotonic() + 10 * PARENT_CHECK_SECONDS + 10
    while _alive(reader) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(reader)


def test_readers_work_and_stay_while_their_parent_lives():
    with reading_pool(1) as pool:
        first = pool.submit(os.getpid).result()
        time.sleep(2 * PARENT_CHECK_SECONDS)
        assert pool.submit(os.getpid).result() == first != os.getpid()
