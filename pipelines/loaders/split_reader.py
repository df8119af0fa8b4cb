"""One split of a published version read as decoded rows: a rank's equal share, a worker's slice, a resumable position.

The framework-free core under `recordforge.torch` and `recordforge.grain`
(no torch, no Grain). `SplitReader.rows(worker, num_workers)` yields the
rows one DataLoader worker (or the single process) reads in the current
epoch (`plan`: which positions, in which order); records are read by
`records` (streamed in shard order, or by index for the global shuffle)
and decoded by `decode.ExampleDecoder`, then by the user's `decode`.

Resuming: a reader counts the rows it hands out per worker; `state_dict()`
is that count with everything that fixes the order (seed, epoch, rank,
world size, shuffle, worker count). `load_state_dict(state)` makes the
next pass over that epoch skip, in each worker, the rows already handed
out: the rest, each exactly once. Skipping is positional (nothing re-read)
except in the ``"buffer"`` shuffle, which reads the skipped rows again to
rebuild its buffer and drops them undecoded.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

from . import plan
from .decode import ExampleDecoder
from .records import CHECKS, DEFAULT_CHECK, random_access, stream_records
from .version import open_version

__all__ = ["DEFAULT_BUFFER", "SplitReader"]

DEFAULT_BUFFER = 10_000  # records a "buffer" shuffle holds per worker
_ORDER_KEYS = ("seed", "shuffle", "rank", "world_size", "remainder", "num_workers", "split")


class SplitReader:
    """A split read by one rank (module docstring). Picklable: DataLoader
    workers and Grain processes each read through their own copy."""

    def __init__(self, path: str, split: str = "train", *, rank: int = 0, world_size: int = 1,
                 shuffle: bool = False, seed: int = 0, remainder: str = "drop",
                 decode: Callable[[dict], Any] | None = None,
                 buffer_size: int = DEFAULT_BUFFER, check: str = DEFAULT_CHECK):
        self.version = open_version(path)
        self.split, self.shards = split, self.version.shards(split)
        self.counts = [shard.num_examples for shard in self.shards]
        self.total = sum(self.counts)
        self.rank, self.world_size, self.remainder = rank, world_size, remainder
        self.seed, self.buffer_size, self.user_decode = seed, buffer_size, decode
        if check not in CHECKS:
            raise ValueError(f"check must be one of {CHECKS}, got {check!r}")
        self.check = check
        # ArrayRecord shards index their records in their own footers
        indexed = self.version.file_format == "array_record" or all(
            shard.index is not None for shard in self.shards)
        self.shuffle = "sequential" if not shuffle else "global" if indexed else "buffer"
        plan.worker_slice(self.total, world_size, rank, remainder, 0, 1)  # checks the arguments
        self.decoder = ExampleDecoder(self.version.features)
        self.access = random_access(self.version, self.shards)
        self.epoch = 0
        self._resume: dict | None = None
        self._consumed: dict[int, int] = {}
        self._workers = 1

    def __len__(self) -> int:
        """Rows this rank reads in an epoch (the same on every rank)."""
        return plan.per_rank(self.total, self.world_size, self.remainder)

    def set_epoch(self, epoch: int) -> None:
        """Starts epoch `epoch`: its own order when shuffled."""
        if epoch != self.epoch:
            self._resume = None
        self.epoch = epoch

    def _order(self, num_workers: int) -> dict:
        return {"seed": self.seed, "shuffle": self.shuffle, "rank": self.rank,
                "world_size": self.world_size, "remainder": self.remainder,
                "num_workers": num_workers, "split": self.split}

    def state_dict(self) -> dict:
        """How far this reader's own passes have got (module docstring)."""
        return self.position(self._workers,
                             [self._consumed.get(w, 0) for w in range(self._workers)])

    def load_state_dict(self, state: dict) -> None:
        """Resume `state`'s epoch after the rows it counts; ValueError when
        it was saved with another order (seed, rank, workers...)."""
        workers = state.get("num_workers")
        if not isinstance(workers, int) or workers < 1:
            raise ValueError(f"not a saved reader state: num_workers is {workers!r}")
        expected = self._order(workers)
        differ = [key for key in _ORDER_KEYS if state.get(key) != expected[key]]
        if differ:
            raise ValueError("the saved state was made with other settings: saved "
                             f"{ {key: state.get(key) for key in differ} }, now "
                             f"{ {key: expected[key] for key in differ} }")
        lengths = [piece.stop - piece.start for piece in self._slices(workers)]
        consumed = state.get("consumed")
        if not (isinstance(state.get("epoch"), int) and isinstance(consumed, list)
                and len(consumed) == workers
                and all(isinstance(n, int) and 0 <= n <= length
                        for n, length in zip(consumed, lengths))):
            raise ValueError(f"not a saved reader state: epoch {state.get('epoch')!r}, "
                             f"consumed {consumed!r} (each worker's slice holds {lengths})")
        self.epoch, self._resume = state["epoch"], state

    def pending(self, num_workers: int) -> list[tuple[int, int]]:
        """(rows skipped by a resume, rows in its slice) of each worker's
        next pass over this epoch."""
        skips = (self._resume["consumed"] if self._resume is not None
                 and self._resume["num_workers"] == num_workers else [0] * num_workers)
        return [(skip, piece.stop - piece.start)
                for skip, piece in zip(skips, self._slices(num_workers))]

    def _slices(self, num_workers: int) -> list[plan.Slice]:
        return [plan.worker_slice(self.total, self.world_size, self.rank, self.remainder,
                                  worker, num_workers) for worker in range(num_workers)]

    def position(self, num_workers: int, consumed: list[int]) -> dict:
        """A `state_dict` for a pass by `num_workers` workers that have
        handed out `consumed` rows each (counted from the pass's start)."""
        return {"epoch": self.epoch, **self._order(num_workers), "consumed": list(consumed)}

    def rows(self, worker: int = 0, num_workers: int = 1) -> Iterator[Any]:
        """The rows worker `worker` of `num_workers` reads this epoch."""
        skip = 0
        if self._resume is not None:
            if self._resume["num_workers"] != num_workers:
                raise ValueError(f"the saved state was made with {self._resume['num_workers']} "
                                 "DataLoader workers; resume with as many, not "
                                 f"{num_workers}")
            skip = self._resume["consumed"][worker]
        self._workers = num_workers
        self._consumed[worker] = skip
        positions = self._slices(num_workers)[worker]
        for record, where, index in self._records(positions, skip, worker):
            row = self.decoder.decode(record, where, index)
            self._consumed[worker] += 1
            yield row if self.user_decode is None else self.user_decode(row)

    def _records(self, positions: plan.Slice, skip: int,
                 worker: int) -> Iterator[tuple[bytes, str, int]]:
        if self.shuffle == "global":
            yield from self._indexed(plan.Slice(positions.start + skip, positions.stop))
            return
        if self.shuffle == "sequential":
            yield from self._streamed(plan.Slice(positions.start + skip, positions.stop), False)
            return
        kept = ((bytes(record), where, index)  # the buffer holds records past their views
                for record, where, index in self._streamed(positions, True))
        mixed = plan.buffer_shuffle(kept, self.buffer_size,
                                    f"{self.seed}/{self.epoch}/{self.rank}/{worker}")
        for count, item in enumerate(mixed):
            if count >= skip:
                yield item

    def _streamed(self, positions: plan.Slice, shuffled: bool):
        order = plan.shard_order(len(self.shards), self.seed, self.epoch, shuffled)
        for shard, start, stop in plan.segments(positions, self.counts, order):
            display = self.shards[shard].held.display
            records = stream_records(self.access, shard, start, stop, self.check)
            for index, record in enumerate(records, start):
                yield record, display, index

    def _indexed(self, positions: plan.Slice):
        for shards, records in plan.global_positions(positions, self.counts, self.seed,
                                                     self.epoch):
            for shard, record in zip(shards.tolist(), records.tolist()):
                yield (self.access.read(shard, record), self.shards[shard].held.display, record)
