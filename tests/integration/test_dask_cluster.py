"""A real Dask cluster without shared disk: a `dask scheduler` and two
`dask worker --nthreads 1` processes, each in its own working and temporary
directory, build a table read from and written to s3:// (a moto server)
through `recordforge runner-args dask` with DASK_SCHEDULER set.

The published shards equal the DirectRunner's, and the workers write
nothing outside the output URL and their own directories: every file they
create, open for writing, rename or delete is traced (strace) and checked.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import fsspec
import pytest

pytestmark = pytest.mark.slow

ROWS = 20_000
# System calls that create or change files (strace's %file class is larger).
_WRITES = re.compile(r'^\d+\s+(open|openat|creat|mkdir|mkdirat|rename|renameat2?|unlink|'
                     r'unlinkat|rmdir|link|linkat|symlink|symlinkat|truncate|chmod|'
                     r'fchmodat)\((?P<args>.*)\)\s+=\s+(?P<result>-?\d+)')
_PATH = re.compile(r'"((?:[^"\\]|\\.)*)"')


def _written_paths(trace: pathlib.Path) -> set[str]:
    """Paths a traced process tree created, wrote, renamed or removed
    (successful calls only; opens without O_WRONLY/O_RDWR/O_CREAT are reads)."""
    found = set()
    for line in trace.read_text(errors="replace").splitlines():
        match = _WRITES.match(line)
        if not match or match["result"].startswith("-"):
            continue
        args = match["args"]
        if match[1] in ("open", "openat") and not re.search(r"O_WRONLY|O_RDWR|O_CREAT", args):
            continue
        found.update(os.path.normpath(p) for p in _PATH.findall(args) if p.startswith("/"))
    return found


@pytest.fixture
def cluster(tmp_path, moto, support):
    """(scheduler address, {worker dir: strace log}); every process stopped after."""
    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("strace is not installed (`apt-get install strace`; .ci/run installs it)")
    dask = [sys.executable, "-m", "distributed.cli.dask_scheduler"]
    port = support.free_port()
    processes = []
    scheduler_dir = tmp_path / "scheduler"
    scheduler_dir.mkdir()
    log = scheduler_dir / "scheduler.log"
    env = support.base_env(**moto.env, PYTHONDONTWRITEBYTECODE="1")
    with open(log, "wb") as handle:
        processes.append(subprocess.Popen(
            [*dask, "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
            cwd=scheduler_dir, env={**env, "TMPDIR": str(scheduler_dir)}, stdout=handle,
            stderr=subprocess.STDOUT))
    address = f"tcp://127.0.0.1:{port}"
    workers = {}
    try:
        support.wait_for_port(port, processes[0], log)
        for i in range(2):
            home = tmp_path / f"worker{i}"
            (home / "tmp").mkdir(parents=True)
            trace = home / "strace.log"
            with open(home / "worker.log", "wb") as handle:
                processes.append(subprocess.Popen(
                    [strace, "-f", "-qq", "-o", str(trace), "-e",
                     "trace=open,openat,creat,mkdir,mkdirat,rename,renameat,renameat2,"
                     "unlink,unlinkat,rmdir,link,linkat,symlink,symlinkat,truncate,chmod,"
                     "fchmodat",
                     sys.executable, "-m", "distributed.cli.dask_worker", address,
                     "--nthreads", "1", "--nworkers", "1", "--no-dashboard",
                     "--local-directory", str(home / "tmp"), "--name", f"worker{i}"],
                    cwd=home, env={**env, "TMPDIR": str(home / "tmp")}, stdout=handle,
                    stderr=subprocess.STDOUT, start_new_session=True))
            workers[home] = trace
        from distributed import Client
        with Client(address, timeout=60) as client:
            client.wait_for_workers(2, timeout=120)
        yield address, workers
    finally:
        for process in processes[1:]:
            support.stop_group(process)
        support.stop(processes[0])


def test_a_dask_cluster_without_shared_disk_builds_the_local_bytes_on_s3(
        cluster, moto, support, tmp_path):
    address, workers = cluster
    moto.create_bucket("dask")
    fs = moto.filesystem()
    # The input lives on S3 too: the workers share nothing but the store.
    config = support.write_table(tmp_path, ROWS, output="s3://dask/unused",
                                 compression="gzip")
    fs.put_file(str(tmp_path / "trips.csv"), "dask/input/trips.csv")
    text = config.read_text().replace(str(tmp_path / "trips.csv"), "s3://dask/input/trips.csv")
    config.write_text(text)
    env = support.base_env(**moto.env)

    # The reference: recordforge's local default (DirectRunner), same input.
    local = tmp_path / "local"
    support.run_recordforge("build", config, "--output", local, env=env)
    reference = support.digests(fsspec.filesystem("file"), str(local / "1.0.0"))

    driver = tmp_path / "driver"
    driver.mkdir()
    env = {**env, "DASK_SCHEDULER": address}
    profile = support.run_recordforge("runner-args", "dask", env=env).stdout.split()
    assert f"--dask_client_address={address}" in profile
    support.run_recordforge("build", config, "--output", "s3://dask/out", "--", *profile,
                            env=env, cwd=driver)
    support.run_recordforge("verify", "s3://dask/out", "--deep", env=env)
    fs = moto.filesystem()
    assert fs.cat_file("dask/out/LATEST").decode().strip() == "1.0.0"
    assert support.digests(fs, "dask/out/1.0.0") == reference

    # Both workers ran tasks of the build.
    from distributed import Client
    with Client(address, timeout=60) as client:
        executed = client.run(lambda dask_worker: dask_worker.state.executed_count)
    assert len(executed) == 2 and all(count > 0 for count in executed.values()), executed

    # The workers wrote only inside their own directories.
    for home, trace in workers.items():
        written = _written_paths(trace)
        outside = sorted(p for p in written
                         if not p.startswith((str(home) + "/", "/dev/", "/proc/")))
        assert outside == [], f"{home.name} wrote outside its directories: {outside[:20]}"
    assert list(driver.iterdir()) == []  # the driver's working directory stays empty


def test_a_dask_cluster_finds_and_removes_the_direct_runners_duplicates(
        cluster, moto, support, tmp_path):
    """validation.duplicates with removal (its removals a side input, whose
    producers the Dask runner runs again): the DirectRunner's bytes."""
    address, _ = cluster
    moto.create_bucket("dups")
    rows = [f"{i},t{i % 700},{i % 3}" for i in range(3000)]
    (tmp_path / "t.csv").write_text("id,text,n\n" + "\n".join(rows + rows[:20]) + "\n")
    config = tmp_path / "dups.json"
    config.write_text(json.dumps({
        "name": "dups", "version": "1.0.0",
        "source": {"type": "csv", "path": str(tmp_path / "t.csv")},
        "features": {"id": {"type": "int64"}, "text": {"type": "string"},
                     "n": {"type": "int64"}},
        "splits": {"train": 0.6, "validation": 0.2, "test": 0.2}, "key": "id",
        "output": {"path": "s3://dups/unused", "shard_size": "1MB"},
        "dead_letter": {"max_error_rate": 1.0},
        "validation": {"duplicates": {"features": ["text", "n"], "dedupe": "within_split"}}}))
    env = support.base_env(**moto.env)
    local = tmp_path / "local"
    support.run_recordforge("build", config, "--output", local, env=env)
    env = {**env, "DASK_SCHEDULER": address}
    profile = support.run_recordforge("runner-args", "dask", env=env).stdout.split()
    support.run_recordforge("build", config, "--output", "s3://dups/out", "--", *profile,
                            env=env)
    fs = moto.filesystem()
    expected = (local / "1.0.0" / "duplicates.json").read_bytes()
    assert fs.cat_file("dups/out/1.0.0/duplicates.json") == expected
    assert json.loads(expected)["removed"] > 0
    assert support.digests(fs, "dups/out/1.0.0") == support.digests(
        fsspec.filesystem("file"), str(local / "1.0.0"))
