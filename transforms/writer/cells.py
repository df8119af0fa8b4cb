"""Which cell a row is compressed in: the chunks of key-ordered gzip output.

A key-ordered gzip split is written as chunks, each one gzip member, and
its shards are cut between chunks once their compressed sizes are known.
Chunk j holds the rows whose framed bytes' midpoint lies in cell j,
[j * cell_bytes, (j + 1) * cell_bytes) of the split's framed bytes in key
order: a function of the rows alone, never of how they were bucketed.
A bucket compresses the cells that lie within it. A cell holding a
bucket boundary (a seam) may hold rows of several buckets: each sends
its rows of that cell, uncompressed, to one place where they are joined
in bucket order and compressed, giving the bytes one bucket would have.

The chunks of a split are then grouped in units, in key order: the cells
within bucket b are unit 2b + 1 (`interior_unit`), a seam is unit 2b of
the last bucket sharing it (`check_seam`), so units sort as their cells.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["cells_of_rows", "check_seam", "interior_unit", "seam_cells"]


def cells_of_rows(starts: np.ndarray, sizes: np.ndarray, cell_bytes: int) -> np.ndarray:
    """The cell of each row, from its global start and framed size (int64
    arrays): the one holding its bytes' midpoint, floor((2s + n) / (2 *
    cell_bytes))."""
    return (2 * starts + sizes) // (2 * cell_bytes)


def seam_cells(start: int, size: int, total: int, cell_bytes: int) -> tuple[int, ...]:
    """The cells a bucket of `size` framed bytes from `start` in a split of
    `total` bytes may share with its neighbours: those holding its first
    byte (unless it starts the split) and its end (unless it ends it).

    A row of the bucket before it has its midpoint before `start`, a row
    of this bucket after it, so only the cell of `start` can hold both;
    likewise at the end."""
    cells = []
    if start > 0:
        cells.append(start // cell_bytes)
    end = start + size
    if end < total and end // cell_bytes not in cells:
        cells.append(end // cell_bytes)
    return tuple(cells)


def interior_unit(bucket: int) -> int:
    """The unit of the cells that lie within bucket `bucket`."""
    return 2 * bucket + 1


def check_seam(split: str, cell: int, cell_bytes: int,
               pieces: Sequence[tuple[int, int, int, int]]) -> int:
    """Checks that a seam got a piece from every bucket that may hold its
    rows, and gives its unit. `pieces`: ``(bucket, bucket start, bucket
    end, split total)`` of each bucket that sent one, any order, once each.

    The buckets sending to a seam are consecutive ranges of the split's
    bytes, the first holding the cell's first byte and the last reaching
    past the cell (or ending the split), so a missing one shows as a gap."""
    if not pieces:
        raise ValueError(f"split {split!r}, cell {cell}: a seam without pieces")
    ordered = sorted(pieces)
    where = f"split {split!r}, cell {cell}"
    for (bucket, _, end, _), (following, start, _, _) in zip(ordered, ordered[1:]):
        if end != start:
            raise ValueError(f"{where}: bucket {bucket} ends at byte {end}, the next piece "
                             f"(bucket {following}) starts at {start}")
    last, _, end, total = ordered[-1]
    if ordered[0][1] > cell * cell_bytes or end < min((cell + 1) * cell_bytes, total):
        raise ValueError(f"{where}: the pieces cover bytes {ordered[0][1]}-{end}, not the "
                         f"whole cell")
    return 2 * last
