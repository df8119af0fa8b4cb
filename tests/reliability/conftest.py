"""Shared fixtures of the reliability suite: a fault-injecting filesystem and
a function that runs a real `recordforge build` in this process.

`FaultyFileSystem` (protocol ``faulty://``) is the local disk seen through
fsspec with faults on demand: a byte budget for writes after which every
write fails with ENOSPC (a full disk), a chosen call of an operation that
raises (``cp_file``, ``mv``, ``pipe_file`` ...), and paths whose opening is
refused with EACCES. Tests run as root, where ``chmod 000`` does not stop
reads, so permission errors are simulated here. Because it is not a
`LocalFileSystem`, recordforge treats it like an object store (commit by
copy, manifest last), which is also the harder commit to make safe. It is
registered in this process only, so builds through it use Beam's in-memory
mode.
"""

from __future__ import annotations

import errno
import io
import os
import sys
from pathlib import Path

import fsspec
import pytest
from fsspec.implementations.local import LocalFileSystem
from fsspec.spec import AbstractFileSystem


class _Faults:
    """What `FaultyFileSystem` does wrong; one per test (see the fixture)."""

    def __init__(self):
        self.write_budget: int | None = None   # bytes writable before ENOSPC
        self.written = 0
        self.fail_call: dict[str, int] = {}     # operation -> the call number that raises
        self.calls: dict[str, int] = {}
        self.denied: set[str] = set()           # path suffixes that cannot be opened

    def count(self, operation: str, path: str) -> None:
        self.calls[operation] = self.calls.get(operation, 0) + 1
        if self.fail_call.get(operation) == self.calls[operation]:
            raise OSError(errno.EIO, f"injected I/O error in {operation}", path)

    def charge(self, size: int, path: str) -> None:
        if self.write_budget is not None and self.written + size > self.write_budget:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        self.written += size


class _BudgetedWriter(io.RawIOBase):
    """A local file opened for writing that charges every write to the budget."""

    def __init__(self, handle, faults: _Faults, path: str):
        self._handle = handle
        self._faults = faults
        self._path = path

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        size = len(memoryview(data))
        self._faults.charge(size, self._path)
        return self._handle.write(data)

    def flush(self) -> None:
        if not self.closed:
            self._handle.flush()

    def close(self) -> None:
        if not self.closed:
            super().close()
            self._handle.close()


class FaultyFileSystem(AbstractFileSystem):
    protocol = "faulty"
    root_marker = "/"
    faults = _Faults()

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        # Object stores have no directories to create first; neither does this.
        self._local = LocalFileSystem(auto_mkdir=True)

    @classmethod
    def _strip_protocol(cls, path):
        path = path[len("faulty://"):] if path.startswith("faulty://") else path
        return "/" + path.lstrip("/") if path else "/"

    def unstrip_protocol(self, name: str) -> str:
        return "faulty://" + name

    def _open(self, path, mode="rb", **kwargs):
        if any(path.endswith(suffix) for suffix in self.faults.denied):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
        self.faults.count("open", path)
        handle = self._local._open(path, mode, **kwargs)
        if "r" in mode:
            return handle
        return io.BufferedWriter(_BudgetedWriter(handle, self.faults, path))

    def cp_file(self, path1, path2, **kwargs):
        self.faults.count("cp_file", path2)
        self.faults.charge(self._local.size(path1), path2)
        self._local.cp_file(path1, path2, **kwargs)

    def mv(self, path1, path2, recursive=False, maxdepth=None, **kwargs):
        self.faults.count("mv", path2)
        self._local.mv(self._strip_protocol(path1), self._strip_protocol(path2),
                       recursive=recursive, maxdepth=maxdepth)

    def pipe_file(self, path, value, mode="overwrite", **kwargs):
        self.faults.count("pipe_file", path)
        super().pipe_file(path, value, **kwargs)

    def rm_file(self, path):
        self.faults.count("rm_file", path)
        self._local.rm_file(path)

    def rm(self, path, recursive=False, maxdepth=None):
        self.faults.count("rm", path)
        self._local.rm(self._strip_protocol(path), recursive=recursive, maxdepth=maxdepth)

    def rmdir(self, path):
        self._local.rmdir(path)

    def mkdir(self, path, create_parents=True, **kwargs):
        self._local.mkdir(path, create_parents=create_parents, **kwargs)

    def makedirs(self, path, exist_ok=False):
        self._local.makedirs(path, exist_ok=exist_ok)

    def ls(self, path, detail=True, **kwargs):
        return self._local.ls(path, detail=detail, **kwargs)

    def info(self, path, **kwargs):
        return self._local.info(path, **kwargs)

    def created(self, path):
        return self._local.created(path)

    def modified(self, path):
        return self._local.modified(path)


fsspec.register_implementation("faulty", FaultyFileSystem, clobber=True)


@pytest.fixture
def faults():
    """The fault plan of `FaultyFileSystem` for this test (reset after it)."""
    FaultyFileSystem.faults = _Faults()
    yield FaultyFileSystem.faults
    FaultyFileSystem.faults = _Faults()


IN_PROCESS = ["--", "--direct_running_mode=in_memory", "--direct_num_workers=1"]


@pytest.fixture
def run_build(capsys):
    """Runs ``recordforge build CONFIG [flags]`` in this process (Beam in-memory
    mode). Returns (exit status, stdout, stderr)."""
    from recordforge.pipelines import cli

    def run(config: Path, *flags: str, beam_args=IN_PROCESS):
        capsys.readouterr()
        status = cli.main(["build", str(config), *flags, *beam_args])
        captured = capsys.readouterr()
        return status, captured.out, captured.err

    return run


@pytest.fixture
def cli_command():
    """The `recordforge` console script next to this interpreter."""
    script = Path(sys.executable).with_name("recordforge")
    if not script.exists():
        pytest.skip("recordforge console script not installed")
    return str(script)
