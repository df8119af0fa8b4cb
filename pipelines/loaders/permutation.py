"""A seeded permutation of ``range(n)`` computed position by position: a global shuffle in constant memory.

A four-round Feistel network on the smallest even number of bits that
holds ``n - 1``, with cycle walking (a value at or above ``n`` is
encrypted again until it falls inside): a bijection of ``range(n)``, so
every record comes exactly once, computed for a block of positions at a
time with numpy, so no array of ``n`` indices is ever held. The key mixes
the seed and the epoch with splitmix64 (each epoch a new order, the same
order for the same seed and epoch on every host).
"""

from __future__ import annotations

import numpy as np

__all__ = ["Permutation"]

_ROUNDS = 4
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix(values: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, element-wise on uint64 (wrapping)."""
    with np.errstate(over="ignore"):
        values = (values ^ (values >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        values = (values ^ (values >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return values ^ (values >> np.uint64(31))


class Permutation:
    """A bijection of ``range(n)`` fixed by (seed, epoch)."""

    def __init__(self, n: int, seed: int, epoch: int):
        if n < 0:
            raise ValueError(f"a permutation of {n} items")
        self.n = n
        half = max(1, (max(n - 1, 1).bit_length() + 1) // 2)
        self._half = np.uint64(half)
        self._mask = np.uint64((1 << half) - 1)
        with np.errstate(over="ignore"):
            base = _mix(np.array([seed & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64) + _GOLDEN)
            base = _mix(base ^ np.uint64(epoch & 0xFFFFFFFFFFFFFFFF))
            self._keys = [_mix(base + np.uint64(r + 1) * _GOLDEN) for r in range(_ROUNDS)]

    def _encrypt(self, values: np.ndarray) -> np.ndarray:
        left, right = values >> self._half, values & self._mask
        with np.errstate(over="ignore"):
            for key in self._keys:
                left, right = right, left ^ (_mix(right ^ key) & self._mask)
        return (left << self._half) | right

    def __call__(self, positions: np.ndarray) -> np.ndarray:
        """The permuted values of `positions` (each in ``range(n)``)."""
        values = np.asarray(positions, dtype=np.uint64).copy()
        outside = np.ones(values.shape, dtype=bool)
        while outside.any():
            values[outside] = self._encrypt(values[outside])
            outside = values >= np.uint64(self.n)
        return values.astype(np.int64)
