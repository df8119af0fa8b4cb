"""Exact sums: sums and sums of squares of int64 and float64 values as exact integers.

A sum is an integer scaled by 2**SHIFT (floats through their binary
mantissa and exponent), so the mean and standard deviation computed from it
are the same bits whatever the batches and the order they are added in.
"""

from __future__ import annotations

import numpy as np

__all__ = ["EXACT_INT", "SHIFT", "exact_float_sums", "exact_int_sums", "exact_sum"]

# Exact sums are integers scaled by 2**SHIFT: a double's 53-bit integer
# mantissa times 2**(exponent - 53), exponent >= -1073 (subnormals).
SHIFT = 1126
_MANTISSA_BITS = 53
_HALF = 26
EXACT_INT = 1 << 53  # ints up to this convert to float64 exactly
_CHUNK = 1 << 24  # bincount sums of 27-bit parts stay exact below 2**26 values
# Integers below 2**_SPLIT_BITS have their sums of squares taken in int64
# (`_integer_sums`): chunks of at least 2**14 values.
_SPLIT_BITS = 48


def exact_sum(values: np.ndarray) -> int:
    """The exact sum of finite float64 values, as an integer scaled by 2**SHIFT.

    Each value is mantissa * 2**exponent with a 53-bit integer mantissa; the
    mantissas are split in two 26/27-bit halves and summed per exponent by
    bincount, whose float64 sums of such halves are exact below 2**26
    values. The result does not depend on the order of the values."""
    total = 0
    for start in range(0, len(values), _CHUNK):
        part = values[start:start + _CHUNK]
        mantissa, exponent = np.frexp(part)
        whole = (mantissa * float(1 << _MANTISSA_BITS)).astype(np.int64)
        high = whole >> _HALF  # floor: whole == high * 2**26 + low
        low = whole & ((1 << _HALF) - 1)
        lowest = int(exponent.min()) if len(exponent) else 0
        offsets = exponent - lowest
        highs = np.bincount(offsets, weights=high)
        lows = np.bincount(offsets, weights=low)
        used = np.flatnonzero((highs != 0) | (lows != 0))
        for offset, h, lo in zip(used.tolist(), highs[used].tolist(), lows[used].tolist()):
            shift = lowest + offset - _MANTISSA_BITS + SHIFT
            total += ((int(h) << _HALF) + int(lo)) << shift
    return total


def exact_int_sums(values: np.ndarray, as_list: list | None, low: int, high: int
                    ) -> tuple[int, int]:
    """(sum, sum of squares) of int64 values between low and high, exactly,
    scaled by 2**SHIFT."""
    bits = max(abs(low), abs(high)).bit_length()
    if bits <= _SPLIT_BITS:
        total, squares = _integer_sums(values, bits)
        return total << SHIFT, squares << SHIFT
    items = as_list if as_list is not None else values.tolist()
    return sum(items) << SHIFT, sum(x * x for x in items) << SHIFT


def exact_float_sums(floats: np.ndarray) -> tuple[int, int]:
    """(sum, sum of squares) of finite float64 values, each the exact
    `exact_sum` of the values and of their float64 squares.

    Values of at most 26 significant bits (float32 values are such) whose
    magnitudes span at most _SPLIT_BITS bits are integers times one power
    of two, whose squares are exact doubles: their sums are two int64 sums
    (`_integer_sums`), several times cheaper than `exact_sum`'s sums per
    exponent, and the same integers. Others take `exact_sum`."""
    scaled = _scaled_integers(floats)
    if scaled is not None:
        integers, lowest, bits = scaled
        if 2 * lowest + SHIFT >= 0:
            total, squares = _integer_sums(integers, bits)
            return total << (lowest + SHIFT), squares << (2 * lowest + SHIFT)
    return exact_sum(floats), exact_sum(floats * floats)


def _scaled_integers(floats: np.ndarray) -> tuple[np.ndarray, int, int] | None:
    """(integers, lowest, bits) with floats == integers * 2**lowest exactly
    and |integers| < 2**bits <= 2**_SPLIT_BITS, when each value has at most
    26 significant bits (its square is then an exact double); else None."""
    mantissa, exponent = np.frexp(floats)  # floats == mantissa * 2**exponent, |mantissa| < 1
    whole = (mantissa * float(1 << _MANTISSA_BITS)).astype(np.int64)  # 53-bit integers
    if (whole & ((1 << (_MANTISSA_BITS - 26)) - 1)).any():
        return None
    nonzero = whole != 0
    if not nonzero.all():
        whole, exponent = whole[nonzero], exponent[nonzero]
        if not len(whole):
            return np.zeros(len(floats), dtype=np.int64), 0, 0
    # The value of each one's lowest set bit: 2**(exponent - 53 + trailing zeros).
    trailing = np.frexp((whole & -whole).astype(np.float64))[1] - 1
    lowest = int((exponent + trailing).min()) - _MANTISSA_BITS
    bits = int(exponent.max()) - lowest
    if bits > _SPLIT_BITS:
        return None
    return np.ldexp(floats, -lowest).astype(np.int64), lowest, bits


def _integer_sums(integers: np.ndarray, bits: int) -> tuple[int, int]:
    """(sum, sum of squares) of int64 values below 2**bits in magnitude
    (bits <= _SPLIT_BITS), exactly. Each value is split in a high and a low
    half of ``half`` bits, so that the square's three parts (high², high *
    low, low²) stay below 2**(2 * half) and int64 sums of chunks of
    2**(62 - 2 * half) values cannot overflow."""
    half = (bits + 1) // 2
    chunk = 1 << (62 - 2 * half)
    total = squares = 0
    for start in range(0, len(integers), chunk):
        part = integers[start:start + chunk]
        high = part >> half  # floor: part == high * 2**half + low
        low = part & ((1 << half) - 1)
        total += int(part.sum())
        squares += ((int((high * high).sum()) << (2 * half))
                    + (int((high * low).sum()) << (half + 1)) + int((low * low).sum()))
    return total, squares

