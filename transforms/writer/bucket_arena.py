"""The memory a worker thread sorts buckets in: one read buffer, and the bucket last sorted in it.

No Beam. `sorting` reads a bucket's key range of every run into one buffer
(`read_arena`) and sorts it there. The buffer is kept for the thread's next
buckets: a new one per bucket is memory fresh from the kernel every time
(large allocations are mapped and unmapped), whose page faults cost as much
as the read itself. One per thread is safe with runners that process
bundles in several threads.

Shards are cut at rows and buckets at keys, so a shard usually ends inside
a bucket whose other rows the next shard takes. Where a worker is handed
consecutive shards (the DirectRunner hands them in order), each of them
would read and sort that bucket again: about twice per bucket when
shards and buckets are of a size. The bucket last sorted is held
(`hold_bucket`) until the buffer is read into again, under an identity
naming its key range and its runs (paths, record counts and record
bytes: a run file is written once, under a name no other run takes), and
the next shard's writer that asks for the same identity (`held_bucket`)
writes from it. What is held is only ever bytes read from the runs and
their order, never a writer's state, so a retried shard writes the same
bytes.
`release_read_arena` frees both (at the end of a bundle).
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from typing import Any

import numpy as np

__all__ = ["held_bucket", "hold_bucket", "read_arena", "release_read_arena"]

_LOCAL = threading.local()


def read_arena(nbytes: int) -> memoryview:
    """A buffer of at least `nbytes` for one bucket's records; the bucket
    held in it before is let go (its bytes are about to be overwritten).

    A larger one is made only once the old one is freed, so that malloc
    can give back the pages it just had (already faulted in) rather than
    fresh ones, and its bytes are not zeroed (numpy's empty): only the part
    a read filled is ever looked at. (A buffer an eighth larger than
    asked, to grow less often, made whole builds of a 1M-row table from the
    build cache take ~0.3 CPU-s more: 32 MB buckets crossed malloc's mmap
    threshold, `malloc_tuning`, and every buffer was fresh pages.)"""
    _LOCAL.held = None
    arena = getattr(_LOCAL, "buffer", None)
    if arena is None or len(arena) < nbytes:
        _LOCAL.buffer = arena = None  # freed before its successor is made
        arena = np.empty(nbytes, dtype=np.uint8)
        _LOCAL.buffer = arena
    return memoryview(arena)


def hold_bucket(identity: Hashable, bucket: Any) -> None:
    """Keeps `bucket` (what was read into the arena last, and its order)
    for a later `held_bucket(identity)`, until the arena is read into again."""
    _LOCAL.held = (identity, bucket)


def held_bucket(identity: Hashable) -> Any:
    """The bucket held under `identity`, or None."""
    held = getattr(_LOCAL, "held", None)
    return held[1] if held is not None and held[0] == identity else None


def release_read_arena() -> None:
    """Frees this thread's bucket buffer and the bucket held in it (at the
    end of a bundle: they should not add to the memory of whatever the
    worker does next)."""
    _LOCAL.held = None
    _LOCAL.buffer = None
