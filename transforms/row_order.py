"""The order of rows: by ``(order key, example)``, and gathering by an order.

No Beam. Every sorted thing the shard writer makes orders its rows this way
(a spill run, `run_files.write_sorted_run`; a bucket, `bucket_sort`; a
bucket of the shuffle exchange): numpy sorts fixed-width keys, and only rows
whose keys tie compare their examples.
"""

from __future__ import annotations

import operator
from typing import Iterator, Sequence

import numpy as np

__all__ = ["sorted_order", "sorted_positions", "take"]


def take(items: Sequence, order: list[int]) -> list:
    """items[i] for i in order, gathered in C."""
    if len(order) == 1:
        return [items[order[0]]]
    return list(operator.itemgetter(*order)(items)) if order else []


def _tie_groups(ordered_keys: np.ndarray) -> Iterator[tuple[int, int]]:
    """[start, end) of each run of equal adjacent keys (two or more)."""
    ties = np.flatnonzero(ordered_keys[1:] == ordered_keys[:-1])
    start = previous = None
    for position in ties.tolist():
        if previous is not None and position == previous + 1:
            previous = position
            continue
        if start is not None:
            yield start, previous + 2
        start = previous = position
    if start is not None:
        yield start, previous + 2


def sorted_order(keys, example_at) -> list[int]:
    """The row order by ``(key, example)``.

    keys: a numpy array of fixed-width bytes (sorted by numpy; rows with
    equal keys are then ordered by `example_at(row)`, which only duplicate
    keys pay for), or a list of bytes (sorted by Python).
    """
    if isinstance(keys, np.ndarray):
        return sorted_positions(keys, example_at).tolist()
    return sorted(range(len(keys)), key=lambda row: (keys[row], example_at(row)))


def sorted_positions(keys: np.ndarray, example_at) -> np.ndarray:
    """`sorted_order` of fixed-width keys as a numpy array of positions
    (int64), for callers that index numpy arrays with it."""
    order = np.argsort(keys, kind="stable").astype(np.int64, copy=False)
    for start, end in _tie_groups(keys[order]):
        order[start:end] = sorted(order[start:end].tolist(), key=example_at)
    return order
