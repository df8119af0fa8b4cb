"""How many rows each DataLoader worker has handed out, from the number of batches the loader gave.

A loader over an iterable dataset with n workers gives its batches in
rounds, worker 0's first batch, worker 1's first, ..., then the second
of each, a worker dropping out of the rounds once its rows run out (torch's
in-order DataLoader; each worker batches its own rows, its last batch
short unless ``drop_last``). So after c batches each worker's count is
known without asking the worker processes, which is what a checkpoint
taken in the training loop needs. Plain code: no torch.
"""

from __future__ import annotations

from typing import Sequence

__all__ = ["rows_given"]


def rows_given(lengths: Sequence[int], batches: int, batch_size: int | None,
               drop_last: bool) -> list[int]:
    """Rows each worker has handed out once the loader gave `batches`
    batches, the workers' passes holding `lengths` rows (`batch_size`
    None: no batching, one row a batch)."""
    size = batch_size or 1
    full = [length // size if drop_last else -(-length // size) for length in lengths]
    given = [0] * len(lengths)
    left = batches
    while left > 0 and any(g < f for g, f in zip(given, full)):
        for worker, worker_full in enumerate(full):
            if left and given[worker] < worker_full:
                given[worker] += 1
                left -= 1
    return [min(count * size, length) for count, length in zip(given, lengths)]
