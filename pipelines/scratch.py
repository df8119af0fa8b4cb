"""A build's own local temporary directory, so a killed build leaves nothing in /tmp for good.

Beam makes a ``beam-pipeline-temp*`` directory for every pipeline and the
shard writers sort into local temporary files; a build killed with SIGKILL
(or a machine that lost power) never removes them. `private_tempdir` gives
the build process and its worker processes (through ``TMPDIR``) one
directory of their own, ``<tmp>/recordforge-build-<pid>-<start>-<random>``,
removed when the build ends; and before making it, removes such directories
whose process is gone (the pid and the kernel's start time of that pid are
in the name, so a reused pid is told apart), which a build killed on this
machine left behind.

One thing in it may outlive the build: the root directory (``beam-temp*``)
of a portable job server that Beam's PrismRunner starts in the build's
process and keeps for the process's life, stopping it from an exit hook
that first deletes that directory. Deleting it earlier made that hook fail
before it stopped the server, which then ran on after the process. Such a
directory is left for the hook; the rest of the build's directory goes at
the end of the build, and what is left at the exit of the process
(`atexit`, registered before Beam's hook, so it runs after it).
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import tempfile
from contextlib import contextmanager
from typing import Iterator

from .publish.owners import process_alive, process_start

__all__ = ["PREFIX", "clean_dead_tempdirs", "private_tempdir"]

PREFIX = "recordforge-build-"
_NAME = re.compile(rf"^{re.escape(PREFIX)}(?P<pid>\d+)-(?P<start>\d+|x)-")


def clean_dead_tempdirs(base: str) -> list[str]:
    """Removes the directories under `base` that builds now dead made;
    returns their names."""
    removed = []
    try:
        names = os.listdir(base)
    except OSError:
        return removed
    for name in names:
        match = _NAME.match(name)
        if not match:
            continue
        start = None if match["start"] == "x" else match["start"]
        if process_alive(int(match["pid"]), start):
            continue
        shutil.rmtree(os.path.join(base, name), ignore_errors=True)
        removed.append(name)
    return removed


@contextmanager
def private_tempdir() -> Iterator[str]:
    """Runs the block with `tempfile` and ``TMPDIR`` pointing at a new
    directory of this build (see the module docstring); removes it after."""
    base = tempfile.gettempdir()
    clean_dead_tempdirs(base)
    pid = os.getpid()
    path = tempfile.mkdtemp(prefix=f"{PREFIX}{pid}-{process_start(pid) or 'x'}-", dir=base)
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    previous_dir, previous_env = tempfile.tempdir, os.environ.get("TMPDIR")
    tempfile.tempdir = path
    os.environ["TMPDIR"] = path
    try:
        yield path
    finally:
        tempfile.tempdir = previous_dir
        if previous_env is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = previous_env
        _remove_but_job_servers(path)


# What Beam's SubprocessJobServer names the root directory of a job server.
_JOB_SERVER_ROOT = "beam-temp"


def _remove_but_job_servers(path: str) -> None:
    """Removes `path` with everything in it, but for the root directories
    of job servers still running (see the module docstring)."""
    try:
        names = os.listdir(path)
    except OSError:
        return
    kept = False
    for name in names:
        if name.startswith(_JOB_SERVER_ROOT):
            kept = True
            continue
        target = os.path.join(path, name)
        if os.path.isdir(target) and not os.path.islink(target):
            shutil.rmtree(target, ignore_errors=True)
        else:
            try:
                os.remove(target)
            except OSError:
                pass
    if not kept:
        shutil.rmtree(path, ignore_errors=True)
