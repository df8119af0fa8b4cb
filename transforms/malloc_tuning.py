"""glibc's malloc, tuned to keep freed memory for the next buffer.

A build allocates and frees buffers of a few hundred KB to a few MB all the
time: blocks read from files, numpy arrays of a bucket's sizes and keys,
gathered rows. glibc gives an allocation above its mmap threshold (128 KB at
first, moved up as such blocks are freed) a fresh mapping, and hands the
free memory at the top of its heap back to the kernel once it passes the
trim threshold (moved along, at twice the mmap threshold). Either way the
next buffer is memory fresh from the kernel, and each of its pages costs a
fault, and zeroing, on first touch. An incremental build of a 1 GB table
took about 800,000 such faults and 14.5 s; with the thresholds fixed at
MMAP_THRESHOLD and TRIM_THRESHOLD, about 210,000 and 13.5 s. The price is
at most TRIM_THRESHOLD of freed memory kept per process, whatever the
dataset size.

The setting is process-wide. It is made in the setup of the DoFns that
read, convert, sort and write rows, so the process that runs them gets it
on any runner, and in the processes that read shards back. Off glibc it
does nothing, and a process whose environment sets malloc's thresholds
keeps them.
"""

from __future__ import annotations

import ctypes
import os
import threading

__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "keep_freed_memory"]

MMAP_THRESHOLD = 32 << 20  # glibc's own upper bound for the moving threshold
TRIM_THRESHOLD = 128 << 20

# mallopt's parameter numbers (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# Environment settings of the same thresholds, which win over ours.
_ENVIRONMENT = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")
_TUNABLES = ("glibc.malloc.mmap_threshold", "glibc.malloc.trim_threshold")

_lock = threading.Lock()
_tuned: bool | None = None  # None: not tried in this process yet


def keep_freed_memory() -> bool:
    """Fixes this process's malloc thresholds at MMAP_THRESHOLD and
    TRIM_THRESHOLD (once); returns whether they are set."""
    global _tuned
    with _lock:
        if _tuned is None:
            _tuned = _set_thresholds()
        return _tuned


def _set_thresholds() -> bool:
    try:
        if not (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc"):
            return False
    except (AttributeError, ValueError, OSError):  # no confstr, or no such name: not glibc
        return False
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    if any(name in os.environ for name in _ENVIRONMENT) or any(
            name in tunables for name in _TUNABLES):
        return False
    mallopt = ctypes.CDLL(None).mallopt
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
                and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
