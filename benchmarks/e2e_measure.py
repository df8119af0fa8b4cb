"""Measuring one command of the end-to-end benchmark, and what it wrote.

`measure(cmd)` runs a command as a child process and gives its wall time, the
CPU seconds of the whole process tree (``wait4`` rusage: the child plus every
descendant it reaped, e.g. Beam's multi_processing workers) and the peak RSS of
the whole tree, sampled every 50 ms in a thread with psutil (the sum over the
child and all its live descendants at each sample).

`output_files` / `shard_stats` describe the TFRecord files a build wrote;
`example_digests` reads them back with recordforge's independent reader and
gives the sorted sha256 of every Example (in protobuf's deterministic form), so
outputs of different tools can be compared as multisets of Examples.
"""

from __future__ import annotations

import compileall
import dataclasses
import hashlib
import os
import re
import subprocess
import sys
import threading
import time

import psutil

__all__ = ["Measurement", "child_env", "compile_recordforge", "example_digests", "measure",
           "output_files", "shard_stats"]


def child_env() -> dict:
    """The environment of every measured command: this process's, without
    PYTHONDONTWRITEBYTECODE. Where that is set (some shells and containers
    set it) Python neither writes nor keeps bytecode for a source checkout,
    so every `recordforge build` compiled recordforge's ~170 modules again:
    0.15-0.27 s of CPU per run (RESULTS.md) that an installed package never
    pays (pip compiles its modules as it installs them; site-packages,
    Beam's included, keeps its own caches either way)."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def compile_recordforge(env: dict) -> None:
    """Writes the bytecode of the recordforge that commands run with `env`
    import (an editable install, a checkout on PYTHONPATH), so that no
    measured run compiles it: the first run of each system would otherwise.
    A checkout is its own package directory, so a virtual environment inside
    it (``.venv``) and other hidden or site-packages directories are left
    out: they are not recordforge, and their packages keep their own caches."""
    root = subprocess.run([sys.executable, "-c", "import os, recordforge; "
                           "print(os.path.dirname(recordforge.__file__))"],
                          env=env, check=True, capture_output=True,
                          text=True).stdout.strip()
    not_ours = re.compile(re.escape(root) + r"[/\\](?:.*[/\\])?(?:\.|site-packages)")
    compileall.compile_dir(root, quiet=1, rx=not_ours)


@dataclasses.dataclass
class Measurement:
    """wall_s: seconds; cpu_s: user+system seconds of the tree; peak_rss: bytes;
    returncode; stderr_tail: the last lines the command printed on stderr."""

    wall_s: float
    cpu_s: float
    peak_rss: int
    returncode: int
    stderr_tail: str


def _tree_rss(process: psutil.Process) -> int:
    total = 0
    try:
        members = [process] + process.children(recursive=True)
    except psutil.Error:
        return 0
    for member in members:
        try:
            total += member.memory_info().rss
        except psutil.Error:
            pass  # exited between listing and reading
    return total


def measure(cmd: list[str], *, env: dict | None = None, interval: float = 0.05) -> Measurement:
    """Runs `cmd`, returns its `Measurement`; stdout is discarded."""
    started = time.perf_counter()
    child = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0
    done = threading.Event()
    stderr_chunks: list[bytes] = []

    def sample():
        nonlocal peak
        process = psutil.Process(child.pid)
        while not done.is_set():
            peak = max(peak, _tree_rss(process))
            done.wait(interval)

    def drain():
        # A full stderr pipe would block the child: read it as it comes.
        for line in child.stderr:
            stderr_chunks.append(line)
            del stderr_chunks[:-40]

    sampler = threading.Thread(target=sample, daemon=True)
    reader = threading.Thread(target=drain, daemon=True)
    sampler.start()
    reader.start()
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - started
    done.set()
    sampler.join()
    reader.join()
    child.returncode = os.waitstatus_to_exitcode(status)
    return Measurement(wall_s=wall, cpu_s=usage.ru_utime + usage.ru_stime, peak_rss=peak,
                       returncode=child.returncode,
                       stderr_tail=b"".join(stderr_chunks).decode("utf-8", "replace")[-3000:])


def output_files(directory: str) -> list[str]:
    """The TFRecord files below `directory`, sorted (manifests, record
    index files and the like left out)."""
    from recordforge.transforms.layout import INDEX_SUFFIX

    found = []
    for parent, dirnames, files in os.walk(directory):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "_")))
        found.extend(os.path.join(parent, name) for name in files
                     if ".tfrecord" in name and not name.endswith(INDEX_SUFFIX)
                     and not name.startswith((".", "_")))
    return sorted(found)


def shard_stats(files: list[str]) -> dict:
    """count, total bytes, and the spread of file sizes: (max - min) / mean."""
    sizes = [os.path.getsize(path) for path in files]
    if not sizes:
        return {"shards": 0, "bytes": 0, "spread": 0.0}
    mean = sum(sizes) / len(sizes)
    return {"shards": len(sizes), "bytes": sum(sizes),
            "spread": (max(sizes) - min(sizes)) / mean if mean else 0.0}


def example_digests(files: list[str]) -> list[str]:
    """Sorted sha256 hex digests of every Example in `files` (any
    compression), each serialized again in protobuf's deterministic form
    (features in name order): equal Examples give equal digests whichever
    order their writer put the features in (TensorFlow keeps the order they
    were added in)."""
    from recordforge.schemas.example import parse_example
    from recordforge.transforms.tfrecord import read_records

    digests = []
    for path in files:
        digests.extend(
            hashlib.sha256(parse_example(record).SerializeToString(deterministic=True)).hexdigest()
            for record in read_records(path))
    digests.sort()
    return digests
