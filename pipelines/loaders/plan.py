"""Which records a (rank, worker) reads in an epoch, and in what order: equal shares, deterministic shuffles.

A split's N records are numbered in shard order. Each rank gets the same
count P: ``N // world_size`` with ``remainder="drop"`` (the tail of the
epoch's order is left out), ``ceil(N / world_size)`` with ``"pad"`` (the
order is extended by repeating it from its start, as torch's
`DistributedSampler` pads). Rank r takes positions ``[r*P, (r+1)*P)`` of
the epoch's order; a DataLoader worker w of n takes the w-th of n
contiguous slices of its rank's positions.

The epoch's order:

* ``"sequential"`` (no shuffle): shard order, records in order.
* ``"global"`` (shuffle with index files): a seeded permutation of all N
  (`permutation.Permutation`, constant memory), records read by index.
* ``"buffer"`` (shuffle without index files: gzip, older versions): the
  shards in a seeded order, records streamed, then mixed by each worker in
  a shuffle buffer of `buffer_size` records.

Every seed is (seed, epoch[, rank, worker]): the same call gives the same
order on any host. Plain code: no torch, no Grain.
"""

from __future__ import annotations

import random
from typing import Iterable, Iterator, NamedTuple, Sequence

import numpy as np

from .permutation import Permutation

__all__ = ["BLOCK", "REMAINDERS", "SHUFFLES", "Slice", "buffer_shuffle", "per_rank",
           "shard_order", "global_positions", "segments", "worker_slice"]

REMAINDERS = ("drop", "pad")
SHUFFLES = ("sequential", "global", "buffer")
BLOCK = 4096  # positions mapped to records at a time


def per_rank(total: int, world_size: int, remainder: str) -> int:
    """Records each rank reads in an epoch (module docstring)."""
    if remainder not in REMAINDERS:
        raise ValueError(f"remainder must be one of {REMAINDERS}, got {remainder!r}")
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    if remainder == "pad" and total:
        return -(-total // world_size)
    return total // world_size


class Slice(NamedTuple):
    """Positions ``[start, stop)`` of the epoch's order a worker reads."""

    start: int
    stop: int


def worker_slice(total: int, world_size: int, rank: int, remainder: str, worker: int,
                 num_workers: int) -> Slice:
    """The positions (rank, worker) reads (module docstring)."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in 0..{world_size - 1}, got {rank}")
    share = per_rank(total, world_size, remainder)
    first = rank * share
    return Slice(first + worker * share // num_workers,
                 first + (worker + 1) * share // num_workers)


def shard_order(count: int, seed: int, epoch: int, shuffle: bool) -> list[int]:
    """The shards in the epoch's order: manifest order, or seeded."""
    order = list(range(count))
    if shuffle:
        random.Random(f"{seed}/{epoch}/shards").shuffle(order)
    return order


def segments(positions: Slice, counts: Sequence[int],
             order: Sequence[int]) -> Iterator[tuple[int, int, int]]:
    """``(shard, start, stop)`` record runs covering `positions` of the
    shards concatenated in `order` (wrapping to the start past the end)."""
    total = sum(counts)
    position = positions.start
    while position < positions.stop and total:
        at, first = position % total, 0
        for shard in order:
            if at < first + counts[shard]:
                take = min(first + counts[shard] - at, positions.stop - position)
                yield shard, at - first, at - first + take
                position += take
                break
            first += counts[shard]


def global_positions(positions: Slice, counts: Sequence[int], seed: int,
                     epoch: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``(shards, records)`` arrays, a block at a time, for `positions` of
    the seeded permutation of all records (wrapping past the end)."""
    total = sum(counts)
    if not total:
        return
    permutation = Permutation(total, seed, epoch)
    starts = np.cumsum([0, *counts])
    for block in range(positions.start, positions.stop, BLOCK):
        index = permutation(np.arange(block, min(block + BLOCK, positions.stop)) % total)
        shards = np.searchsorted(starts, index, side="right") - 1
        yield shards, index - starts[shards]


def buffer_shuffle(items: Iterable, size: int, seed: str) -> Iterator:
    """`items` mixed through a buffer of `size`: each item out is a random
    one of the buffer, replaced by the next item in."""
    rng = random.Random(seed)
    buffer: list = []
    for item in items:
        if len(buffer) < size:
            buffer.append(item)
            continue
        slot = rng.randrange(size)
        yield buffer[slot]
        buffer[slot] = item
    rng.shuffle(buffer)
    yield from buffer
