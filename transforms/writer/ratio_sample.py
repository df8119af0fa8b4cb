"""How many bytes a shuffled gzip split will take on disk: the ratio sample.

Gzip shards cut at rows are cut on the framed bytes like plain ones; only
their number follows the compressed size, estimated from a sample: the
split's rows whose order key (the 16-byte digest, read big-endian) is
below a bound K, all of them, in (key, framed record) order, cut to the
first RATIO_SAMPLE_LIMIT framed bytes. A set defined by content alone,
so every exchange, bundling and worker count sees the same sample.

Partial samples (a batch's, a bundle's, a bucket's) are cut too, to keep
what crosses small, but each keeps the row that passed the limit
(`ratio_sample_of`): the rows of their union below it are then exactly
the whole's, and the whole's cut ends at that row. A partial cut before
that row would let rows after it in, and the sample, its estimate and at
times the shard count would follow how the rows were grouped. Only the
estimate drops that row (`within_limit`).

K (`tuning.RATIO_SAMPLE_BOUND`) is one constant, not sized to the input:
`WriteDataset` cannot know its input's size, and must give `build`'s
bytes. A bound that followed the input sampled 4 MB of a small build but
1/256 of the same rows through `WriteDataset`, so the two estimates, and
at times the shard counts and every byte, differed.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from ..splits import HASH_SIZE

__all__ = ["RATIO_SAMPLE_LIMIT", "bound_key", "estimated_written_bytes", "ratio_sample_of",
           "ratio_sample_rows", "rows_below", "within_limit"]

# The most framed bytes kept in a sample (a bound on the planning step's
# memory, and on what one bundle sends).
RATIO_SAMPLE_LIMIT = 16 << 20
_TWO_128 = 1 << 128


def bound_key(bound: int) -> bytes | None:
    """K as a 16-byte key (digests below it are the keys below these bytes);
    None when K is 2**128 (every digest)."""
    return None if bound >= _TWO_128 else bound.to_bytes(HASH_SIZE, "big")


def rows_below(digests: bytes, bound: int) -> np.ndarray:
    """Positions of the rows whose digest (concatenated HASH_SIZE-byte
    keys) is below `bound`, read big-endian."""
    count = len(digests) // HASH_SIZE
    key = bound_key(bound)
    if key is None:
        return np.arange(count)
    # Fixed-width bytes compare in numpy as their zero-padded bytes do.
    keys = np.frombuffer(digests, dtype=f"S{HASH_SIZE}")
    return np.flatnonzero(keys < np.bytes_(key))


def ratio_sample_rows(digests: bytes, data, sizes: np.ndarray, bound: int
                      ) -> list[tuple[bytes, bytes]]:
    """``(digest, framed record)`` of the rows of a batch or run slice whose
    digest is below `bound` (`rows_below`): digests, the rows' concatenated
    HASH_SIZE-byte keys; data, their framed records back to back; sizes,
    the records' framed sizes."""
    sampled = rows_below(digests, bound).tolist()
    if not sampled:
        return []
    ends = np.cumsum(sizes).tolist()
    view = memoryview(data)
    return [(digests[row * HASH_SIZE:(row + 1) * HASH_SIZE],
             bytes(view[ends[row] - int(sizes[row]):ends[row]])) for row in sampled]


def ratio_sample_of(rows: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The sample from any superset of its rows that holds every row of
    the sample (a bundle's, a bucket's, several such merged): ``(key,
    framed record)`` sorted, up to and with the first row at which the
    framed bytes pass RATIO_SAMPLE_LIMIT. Cutting partial samples so
    changes nothing (module docstring); `within_limit` gives the rows an
    estimate takes."""
    ordered = sorted(rows)
    running = 0
    for end, row in enumerate(ordered, 1):
        running += len(row[1])
        if running > RATIO_SAMPLE_LIMIT:
            return ordered[:end]
    return ordered


def within_limit(sample: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The rows of a `ratio_sample_of` sample within RATIO_SAMPLE_LIMIT
    framed bytes: all but the row that passed it, if it holds one."""
    if sum(len(record) for _, record in sample) > RATIO_SAMPLE_LIMIT:
        return sample[:-1]
    return sample


def estimated_written_bytes(total_bytes: int, sample_written: int, sample_bytes: int) -> int:
    """A split's bytes on disk estimated from its sample's: total *
    sample_written // sample_bytes, at least 1 when total > 0; total when
    the sample is empty (ratio 1)."""
    if total_bytes <= 0:
        return 0
    if sample_bytes <= 0:
        return total_bytes
    return max(1, total_bytes * sample_written // sample_bytes)

