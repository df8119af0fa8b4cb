"""Real faults inside the commit, and real signals to a build.

Errors come from the kernel's point of view of the build process: strace
injects them into the real `recordforge build` (``-P PATH`` limits them to
system calls on one path): EIO from fsync of the output directory, a
filesystem without ``renameat2(RENAME_EXCHANGE)`` (EINVAL) whose renames then
fail (EXDEV). Signals are real SIGTERM / SIGINT to a build with worker
processes. After each: the exit status says what happened, a version that
was published before is complete where readers look for it, LATEST names a
complete version, ``.staging`` holds nothing of the failed build, and the
next build publishes.
"""

from __future__ import annotations

import errno
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recordforge.pipelines.publish import verify
from recordforge.pipelines.publish.lock import CommitLock
from recordforge.pipelines.publish.output import Output

BASE, VERSION = "0.9.0", "1.0.0"

CONFIG = textwrap.dedent("""\
    name: commit-faults
    version: "{version}"
    source: {{type: csv, path: {csv}}}
    features:
      id: {{type: int64}}
      name: {{type: string}}
    splits: {{train: 0.8, test: 0.2}}
    key: id
    output: {{path: "{output}", compression: none, shard_size: 1MB}}
    """)

pytestmark = pytest.mark.skipif(shutil.which("strace") is None or not sys.platform.startswith(
    "linux"), reason="needs Linux and strace")


def _config(tmp_path: Path, rows: int, output: Path, version: str = VERSION) -> Path:
    csv = tmp_path / f"rows-{rows}.csv"
    if not csv.exists():
        rng = random.Random(rows)
        csv.write_text("id,name\n" + "".join(
            f"{i},{''.join(rng.choice('abcdefghij') for _ in range(30))}\n"
            for i in range(rows)))
    path = tmp_path / f"config-{version}-{rows}.yaml"
    path.write_text(CONFIG.format(version=version, csv=csv, output=output))
    return path


def _cli() -> str:
    script = Path(sys.executable).with_name("recordforge")
    if not script.exists():
        pytest.skip("recordforge console script not installed")
    return str(script)


def _build(config: Path, *flags: str, strace: list[str] | None = None,
           beam_args=("--direct_running_mode=in_memory",)) -> subprocess.CompletedProcess:
    command = [_cli(), "build", str(config), *flags, "--", *beam_args]
    if strace:
        output = [] if "-o" in strace else ["-o", "/dev/null"]
        command = ["strace", "-f", "-qq", *output, *strace, *command]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def _verdict(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("recordforge build: ")]
    assert lines, stderr[-3000:]
    return lines[-1]


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """An output root with BASE and VERSION published (LATEST: VERSION),
    kept as a template each test copies."""
    tmp_path = tmp_path_factory.mktemp("published")
    root = tmp_path / "out"
    for version in (BASE, VERSION):
        done = _build(_config(tmp_path, 300, root, version))
        assert done.returncode == 0, done.stderr[-3000:]
    return root


def _copy(published: Path, tmp_path: Path) -> Path:
    root = tmp_path / "out"
    shutil.copytree(published, root, symlinks=True)
    return root


def _assert_unchanged(root: Path, manifest_before: bytes, latest: str = VERSION) -> None:
    assert (root / VERSION / "manifest.json").read_bytes() == manifest_before
    assert verify.verify_dataset(str(root / VERSION)).ok
    assert (root / "LATEST").read_text() == f"{latest}\n"
    assert verify.verify_dataset(str(root)).ok
    assert sorted(p.name for p in (root / ".staging").iterdir()) == []


# --- EIO from fsync of the output directory ---------------------------------------

@pytest.mark.slow
def test_eio_syncing_the_output_directory_after_the_commit_rename_fails_the_build(
        tmp_path, published):
    """The rename that publishes the version is undone when the output
    directory cannot be synced; for a new version and for an overwrite."""
    root = _copy(published, tmp_path)
    inject = ["-P", str(root), "-e", "trace=fsync,fdatasync",
              "-e", "inject=fsync,fdatasync:error=EIO"]
    before = (root / VERSION / "manifest.json").read_bytes()
    overwrite = _build(_config(tmp_path, 200, root), "--overwrite", strace=inject)
    assert overwrite.returncode == 1, overwrite.stderr[-3000:]
    message = _verdict(overwrite.stderr)
    assert "Input/output error" in message and "nothing was published" in message, message
    _assert_unchanged(root, before)

    new = _build(_config(tmp_path, 200, root, version="2.0.0"), strace=inject)
    assert new.returncode == 1, new.stderr[-3000:]
    assert "nothing was published" in _verdict(new.stderr)
    assert not (root / "2.0.0").exists()
    _assert_unchanged(root, before)

    done = _build(_config(tmp_path, 200, root, version="2.0.0"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert (root / "LATEST").read_text() == "2.0.0\n"


# --- overwrite without RENAME_EXCHANGE ---------------------------------------------

NO_EXCHANGE = ["-e", "trace=rename,renameat,renameat2", "-e", "inject=renameat2:error=EINVAL"]


def _commit_renames(tmp_path: Path, root: Path, config: Path) -> dict[str, int]:
    """Which rename(2) call of an overwrite without RENAME_EXCHANGE moves the
    old version aside and which moves the new one in (1-based, in the order
    the build makes them; in-memory mode makes them in the same order every
    time; strace counts per thread), from a traced build of a copy of `root`."""
    probe_root = tmp_path / "probe"
    shutil.copytree(root, probe_root, symlinks=True)
    probe_config = tmp_path / "probe.yaml"
    probe_config.write_text(config.read_text().replace(str(root), str(probe_root)))
    trace = tmp_path / "renames.trace"
    done = _build(probe_config, "--overwrite", strace=["-o", str(trace), *NO_EXCHANGE])
    assert done.returncode == 0, done.stderr[-3000:]
    renames = [line for line in trace.read_text().splitlines() if " rename(" in line]
    final = f'"{probe_root / VERSION}"'
    aside = next(line for line in renames if f"rename({final}, " in line)
    # strace counts calls per thread: count the committing thread's.
    thread = aside.split()[0]
    mine = [line for line in renames if line.split()[0] == thread]
    found = {}
    for index, line in enumerate(mine, 1):
        if f"rename({final}, " in line:
            found["aside"] = index
        elif line.split(", ")[-1].startswith(final):
            found["in"] = index
    assert set(found) == {"aside", "in"}, renames
    return found


@pytest.mark.slow
def test_overwrite_without_exchange_whose_rename_fails_keeps_the_old_version(
        tmp_path, published):
    """No RENAME_EXCHANGE (EINVAL, as on filesystems without it); then the
    rename moving the old version aside, or the one moving the new version
    in, fails (EXDEV): the old version is where readers look, LATEST still
    names it, the build says nothing was published, and the same
    filesystem without the failure publishes."""
    root = _copy(published, tmp_path)
    before = (root / VERSION / "manifest.json").read_bytes()
    config = _config(tmp_path, 200, root)
    calls = _commit_renames(tmp_path, root, config)
    for step in ("aside", "in"):
        inject = [*NO_EXCHANGE, "-e", f"inject=rename:error=EXDEV:when={calls[step]}"]
        failed = _build(config, "--overwrite", strace=["-o", "/dev/null", *inject])
        assert failed.returncode == 1, (step, failed.stderr[-3000:])
        message = _verdict(failed.stderr)
        assert "Invalid cross-device link" in message, (step, message)
        assert "nothing was published" in message, (step, message)
        _assert_unchanged(root, before)

    done = _build(config, "--overwrite", strace=["-o", "/dev/null", *NO_EXCHANGE])
    assert done.returncode == 0, done.stderr[-3000:]
    assert (root / VERSION / "manifest.json").read_bytes() != before
    assert verify.verify_dataset(str(root), deep=True).ok
    assert sorted(p.name for p in (root / ".staging").iterdir()) == []


# --- signals ----------------------------------------------------------------------

def _group_gone(pgid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


@pytest.mark.slow
@pytest.mark.parametrize("signum, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_while_workers_write_shards_stops_everything(tmp_path, published, signum,
                                                             status):
    """SIGTERM to the driver (a scheduler stopping the job) or SIGINT to the
    whole process group (Ctrl-C) once shards are being written, with worker
    processes: the exit status is 128 + signal, the message says nothing was
    published, no process of the build is left, and .staging is empty."""
    root = _copy(published, tmp_path)
    before = (root / VERSION / "manifest.json").read_bytes()
    config = _config(tmp_path, 60000, root)
    process = subprocess.Popen(
        [_cli(), "build", str(config), "--overwrite", "--",
         "--direct_running_mode=multi_processing", "--direct_num_workers=2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        # Wait until the workers have started writing into the staging directory.
        while time.monotonic() < deadline and process.poll() is None:
            staged = [p for p in (root / ".staging").glob(f"{VERSION}.*") if p.is_dir()]
            if any(any(s.iterdir()) for s in staged if (s / "_tmp").exists()) and any(
                    len(list((s / "_tmp").rglob("*"))) > 2 for s in staged):
                break
            time.sleep(0.05)
        assert process.poll() is None, process.communicate()[1][-3000:]
        if signum == signal.SIGINT:
            os.killpg(process.pid, signum)
        else:
            os.kill(process.pid, signum)
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == status, stderr[-3000:]
    assert _verdict(stderr) == "recordforge build: interrupted; nothing was published"
    if signum == signal.SIGTERM:
        # SIGINT from a terminal reaches the worker processes too, and a
        # worker's Python may print its own KeyboardInterrupt before the build
        # stops it; SIGTERM goes to the build alone, which prints nothing else.
        assert "Traceback" not in stderr, stderr[-3000:]
    assert _group_gone(process.pid), "worker processes outlived the build"
    _assert_unchanged(root, before)


# --- the commit lock ----------------------------------------------------------------

def test_a_lock_whose_lease_ran_out_is_taken_and_a_live_one_is_reported(tmp_path):
    """A commit lock left by a build on another host (its process cannot be
    checked) blocks the version only until its lease runs out; a waiting
    build says who holds it."""
    out = Output(str(tmp_path))
    (tmp_path / ".staging").mkdir()
    messages: list[str] = []
    holder = CommitLock(out, VERSION, build_id="20260101T000000Z-aaaaaaaaaaaa",
                        stale_after=900, lease=0.6)
    assert holder.try_acquire()
    # The holder's renewals keep it: a waiter gives up and names it.
    waiter = CommitLock(out, VERSION, build_id="20260101T000000Z-bbbbbbbbbbbb",
                        stale_after=900, report=messages.append)
    assert not waiter.acquire(wait=1.0)
    assert len(messages) == 1 and "20260101T000000Z-aaaaaaaaaaaa" in messages[0]
    assert "lease until" in messages[0] and "pid" in messages[0]
    # The holder "dies" on another host: renewals stop, its process is unknown.
    holder._stop.set()
    holder._renewer.join()
    lock_file = tmp_path / ".staging" / f"{VERSION}.commit.lock"
    record = lock_file.read_text().replace(f'"host": "{os.uname().nodename}"',
                                           '"host": "gone-pod"')
    lock_file.write_text(record)
    started = time.monotonic()
    assert waiter.acquire(wait=5.0)
    assert time.monotonic() - started < 2.0  # the lease (0.6 s), not 15 minutes
    with pytest.raises(Exception, match="lost the commit lock"):
        holder.check_held()
    waiter.check_held()
    waiter.release()
    assert not lock_file.exists()


# --- what a killed build leaves behind ---------------------------------------------

@pytest.mark.slow
def test_the_next_build_of_any_version_cleans_what_a_killed_build_left(tmp_path, published):
    """A nightly build (a new version every night) killed with SIGKILL
    mid-pipeline leaves its staging directory, owner file and local
    temporary directory (Beam's beam-pipeline-temp* inside it); the next
    build, of another version, removes all of them."""
    root = _copy(published, tmp_path)
    local_tmp = tmp_path / "tmp"
    local_tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(local_tmp)}
    config = _config(tmp_path, 60000, root, version="2026-11-24")
    process = subprocess.Popen([_cli(), "build", str(config), "--",
                                "--direct_running_mode=in_memory"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                               start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and process.poll() is None:
            if list((root / ".staging").glob("2026-11-24.*/_tmp/*")):
                break
            time.sleep(0.05)
        assert process.poll() is None
        os.killpg(process.pid, signal.SIGKILL)
    finally:
        process.wait()
    left = sorted(p.name for p in (root / ".staging").iterdir())
    assert any(name.startswith("2026-11-24.") for name in left), left
    scratch = list(local_tmp.iterdir())
    assert [p.name.startswith("recordforge-build-") for p in scratch] == [True], scratch
    assert list(scratch[0].glob("beam-pipeline-temp*")), list(scratch[0].iterdir())

    done = subprocess.run([_cli(), "build", str(_config(tmp_path, 200, root,
                                                       version="2026-11-25")),
                           "--", "--direct_running_mode=in_memory"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(p.name for p in (root / ".staging").iterdir()) == []
    assert list(local_tmp.iterdir()) == []
    assert (root / "LATEST").read_text() == "2026-11-25\n"


def test_a_failing_step_prints_one_verdict_and_no_traceback_without_verbose(
        tmp_path, monkeypatch, capsys):
    from recordforge.pipelines import cli
    from recordforge.transforms.readers import csv as csv_reader

    def failing(*args, **kwargs):
        raise OSError(5, "injected read failure")

    monkeypatch.setattr(csv_reader, "iter_csv", failing)
    config = _config(tmp_path, 50, tmp_path / "out")
    status = cli.main(["build", str(config), "--", "--direct_running_mode=in_memory",
                       "--direct_num_workers=1"])
    err = capsys.readouterr().err
    assert status == 1, err
    assert "Traceback" not in err, err
    assert _verdict(err).startswith("recordforge build: the pipeline failed; nothing was "
                                    "published: ") and "injected read failure" in err


@pytest.mark.parametrize("error, raised", [("EIO", True), ("EINVAL", False), ("EOPNOTSUPP", False)])
def test_a_failed_directory_sync_is_an_error_unless_the_filesystem_cannot_sync_directories(
        tmp_path, error, raised):
    """`files.sync_directory` (every small write's last step, and the
    commit's) raises what fsync of the directory returns, except the errors
    of filesystems that cannot sync a directory at all."""
    script = ("import sys\nfrom recordforge.transforms.files import sync_directory\n"
              "try:\n    sync_directory(sys.argv[1])\nexcept OSError as e:\n"
              "    print('raised', e.errno)\nelse:\n    print('ok')\n")
    done = subprocess.run(["strace", "-f", "-qq", "-o", "/dev/null", "-P", str(tmp_path),
                           "-e", "trace=fsync", "-e", f"inject=fsync:error={error}",
                           sys.executable, "-c", script, str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[0] == ("raised" if raised else "ok"), done.stdout


_SYNC_SCRIPT = ("import sys\nfrom recordforge.transforms.files import sync_directory\n"
                "try:\n    sync_directory(sys.argv[1])\nexcept OSError as e:\n"
                "    print('raised', e.errno)\nelse:\n    print('ok')\n")


@settings(max_examples=10, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(error=st.sampled_from(["EIO", "EACCES", "EMFILE", "ENFILE", "ENOMEM", "EPERM"]))
def test_a_directory_that_cannot_be_opened_to_sync_is_an_error(tmp_path, error):
    """Opening the directory is part of syncing it (issue 41.7): an open
    that fails is the sync failing, never a sync skipped in silence."""
    done = subprocess.run(["strace", "-f", "-qq", "-o", "/dev/null", "-P", str(tmp_path),
                           "-e", "trace=openat,open", "-e", f"inject=openat,open:error={error}",
                           sys.executable, "-c", _SYNC_SCRIPT, str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["raised", str(getattr(errno, error))], done.stdout


def test_a_directory_that_does_not_exist_needs_no_sync(tmp_path):
    done = subprocess.run([sys.executable, "-c", _SYNC_SCRIPT, str(tmp_path / "absent")],
                          capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["ok"], done.stdout + done.stderr


@pytest.mark.parametrize("error", ["EIO", "EACCES"])
def test_an_output_directory_that_cannot_be_opened_to_sync_after_the_commit_fails_the_build(
        tmp_path, error):
    """openat of the output directory fails after the commit's rename: the
    commit is undone and the build says nothing was published; the same
    build then publishes."""
    root = tmp_path / "out"
    root.mkdir()
    config = _config(tmp_path, 100, root)
    failed = _build(config, strace=["-P", str(root), "-e", "trace=openat,open",
                                    "-e", f"inject=openat,open:error={error}"])
    assert failed.returncode == 1, failed.stderr[-3000:]
    assert "nothing was published" in _verdict(failed.stderr)
    assert not (root / VERSION).exists() and not (root / "LATEST").exists()
    assert list((root / ".staging").iterdir()) == []
    done = _build(config)
    assert done.returncode == 0, done.stderr[-3000:]
    assert verify.verify_dataset(str(root / VERSION)).ok


# --- after publishing: the status says what is on disk ---------------------------------

def _build_with_stderr_file(config: Path, stderr: Path, strace: list[str]) -> int:
    """A build whose stderr is the file `stderr`, so strace can fail its writes (-P)."""
    command = ["strace", "-f", "-qq", "-o", "/dev/null", "-P", str(stderr), *strace,
               _cli(), "build", str(config), "--", "--direct_running_mode=in_memory"]
    with open(stderr, "w") as handle:
        return subprocess.run(command, stdout=subprocess.DEVNULL, stderr=handle,
                              timeout=300).returncode


@settings(max_examples=5, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(error=st.sampled_from(["EIO", "ENOSPC", "EPIPE"]), when=st.sampled_from(["1", "2", "1+"]))
def test_stderr_failing_after_the_version_is_published_does_not_fail_the_build(
        tmp_path, error, when):
    """Issue 41.6: the progress line (write 1), the summary (write 2) or every
    write to stderr fails; the version is published, so the build exits 0."""
    root = tmp_path / f"out-{error}-{when.replace('+', 'all')}"
    status = _build_with_stderr_file(
        _config(tmp_path, 100, root), tmp_path / "stderr.txt",
        ["-e", "trace=write", "-e", f"inject=write:error={error}:when={when}"])
    assert status == 0, (tmp_path / "stderr.txt").read_text()[-3000:]
    assert (root / "LATEST").read_text() == f"{VERSION}\n"
    assert verify.verify_dataset(str(root / VERSION)).ok


@pytest.mark.parametrize("first", [True, False])
def test_eio_syncing_latest_reports_what_latest_names_and_the_retry_finishes(tmp_path, first):
    """Issue 41.6: fsync of the output directory fails after LATEST's rename
    (the second sync of the root: the commit's is the first). LATEST is put
    back, the build exits 3 naming what LATEST names (read back), and running
    it again exits 0 with LATEST naming the version; then "already published"."""
    root = tmp_path / "out"
    if not first:
        assert _build(_config(tmp_path, 100, root, version=BASE)).returncode == 0
    config = _config(tmp_path, 100, root)
    failed = _build(config, strace=["-P", str(root), "-e", "trace=fsync",
                                    "-e", "inject=fsync:error=EIO:when=2"])
    assert failed.returncode == 3, failed.stderr[-3000:]
    verdict = _verdict(failed.stderr)
    named = None if first else BASE
    assert f"still names {named!r}" in verdict, verdict
    assert (root / "LATEST").exists() != first
    if not first:
        assert (root / "LATEST").read_text() == f"{BASE}\n"
    assert verify.verify_dataset(str(root / VERSION)).ok
    retry = _build(config)
    assert retry.returncode == 0, retry.stderr[-3000:]
    assert (root / "LATEST").read_text() == f"{VERSION}\n"
    again = _build(config)
    assert again.returncode == 2 and "already published" in again.stderr
    assert list((root / ".staging").iterdir()) == []
