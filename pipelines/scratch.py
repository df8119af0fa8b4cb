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
"""

from __future__ import annotations

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
        shutil.rmtree(path, ignore_errors=True)
