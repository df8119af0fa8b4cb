"""Tests for recordforge.pipelines.publish.reading_processes: readers never
outlive the build that started them."""

import os
import subprocess
import sys
import textwrap
import time

import pytest

from recordforge.pipelines.publish.reading_processes import PARENT_CHECK_SECONDS, reading_pool
from recordforge.schemas.example import encode_example
from recordforge.schemas.native import kernels
from recordforge.transforms import tfrecord

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


# A build run by the console script: its readers, spawned, import the
# script as `__mp_main__` (so its imports, the command line's module), then
# what the submitted function's module needs. The rest is imported under
# the main guard, as in the parent only.
_READ_BACK_BY_A_READER = textwrap.dedent("""
    import sys
    from recordforge.pipelines.cli import main

    if __name__ == "__main__":
        from recordforge.pipelines.publish.file_checks import read_back
        from recordforge.pipelines.publish.reading_processes import reading_pool

        path, compression = sys.argv[1:]
        with reading_pool(1) as pool:
            read = pool.submit(read_back, path, "train-00000-of-00001.tfrecord",
                               compression=compression).result()
            modules = pool.submit(eval, "sorted(__import__('sys').modules)").result()
        print(read.check.records, len(read.check.problems))
        print(" ".join(modules))
    """)

# What reading a shard back needs none of (each costs a reader tens of ms to
# import, in every process, for every build).
_NOT_FOR_READING_BACK = {"apache_beam", "numpy", "fsspec", "yaml", "pyarrow", "pandas",
                         "google", "datasketches"}


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_a_reader_imports_only_what_reading_a_shard_back_needs(tmp_path, compression):
    data = tfrecord.frame_records([encode_example({"id": row}) for row in range(50)])
    path = tmp_path / "train-00000-of-00001.tfrecord"
    path.write_bytes(tfrecord.gzip_compress(data) if compression == "gzip" else data)
    script = tmp_path / "reader.py"
    script.write_text(_READ_BACK_BY_A_READER)
    done = subprocess.run([sys.executable, str(script), str(path), compression],
                          capture_output=True, text=True, timeout=120, check=True)
    counted, modules = done.stdout.splitlines()
    assert counted == "50 0"
    imported = {name.split(".")[0] for name in modules.split()}
    # The pure-Python walk checks CRCs with numpy: only the native one needs none.
    unwanted = _NOT_FOR_READING_BACK - ({"numpy"} if kernels() is None else set())
    assert sorted(imported & unwanted) == []
    assert "recordforge.pipelines.publish.commit" not in modules.split()
