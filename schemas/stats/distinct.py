"""Distinct counts: DataSketches theta sketches in their canonical form, and array-wide updates of them."""

from __future__ import annotations

import collections
import logging
from typing import Iterable

import datasketches
import numpy as np

from ..native import kernels
from .histogram import unordered_keys
from .sums import EXACT_INT

__all__ = ["THETA_LG_K", "add_numbers", "add_texts", "compact_theta", "distinct_estimate",
           "text_sketch", "theta_candidates", "theta_hashes", "theta_union"]

_LOG = logging.getLogger(__name__)

# Theta sketch: exact below 4096 distinct values, ~1.6% relative error above.
THETA_LG_K = 12


def compact_theta(sketch):
    """A theta sketch in its canonical form: the union of itself alone, which
    keeps the 2**THETA_LG_K smallest hashes, so the same values give the same
    sketch whatever order and batches they came in. A compact sketch is one
    already (only unions and deserialization make them here)."""
    if isinstance(sketch, datasketches.compact_theta_sketch):
        return sketch
    union = datasketches.theta_union(THETA_LG_K)
    union.update(sketch)
    return union.get_result()


def theta_union(a, b):
    """The union of two theta sketches, compact (canonical)."""
    union = datasketches.theta_union(THETA_LG_K)
    union.update(a)
    union.update(b)
    return union.get_result()


def theta_candidates(finite: np.ndarray, keys: np.ndarray, low, high) -> np.ndarray:
    """The values of a numeric feature for its theta sketch (int64 values,
    which the sketch hashes as int64, or float64, hashed as doubles), each
    distinct value once where the batch's distinct sorted `ordered_keys`
    give it exactly: floats, and ints up to 2**53 in magnitude (which
    doubles hold exactly). Other ints come as they are: a repeat costs a
    hash, never a different sketch."""
    if finite.dtype != np.int64:
        return unordered_keys(keys)
    if max(abs(low), abs(high)) <= EXACT_INT:
        return unordered_keys(keys).astype(np.int64)
    return finite


# MurmurHash3_x64_128, which DataSketches hashes every theta update with
# (its default seed), for one 8-byte word: an int64, or a double's bits.
_MURMUR_C1 = np.uint64(0x87C37B91114253D5)
_MURMUR_C2 = np.uint64(0x4CF5AD432745937F)
_FMIX_1 = np.uint64(0xFF51AFD7ED558CCD)
_FMIX_2 = np.uint64(0xC4CEB9FE1A85EC53)
_THETA_SEED = np.uint64(9001)  # DataSketches' DEFAULT_SEED, which the sketches here use
_THETA_CHUNK = 2048  # values filtered against one reading of the sketch's theta


def _fmix64(k: np.ndarray) -> np.ndarray:
    k = (k ^ (k >> np.uint64(33))) * _FMIX_1
    k = (k ^ (k >> np.uint64(33))) * _FMIX_2
    return k ^ (k >> np.uint64(33))


def theta_hashes(values: np.ndarray) -> np.ndarray:
    """The 63-bit hashes a theta sketch compares with its theta64 for each of
    `values` (int64, or finite float64 without -0.0), as DataSketches
    computes them: MurmurHash3_x64_128 of the value's 8 little-endian bytes,
    the first half shifted right by one. No library offers it over an array;
    `tests/schemas/test_stats_distinct.py` holds it to the sketches' own result."""
    words = np.ascontiguousarray(values).view(np.uint64)
    with np.errstate(over="ignore"):
        k1 = words * _MURMUR_C1
        k1 = ((k1 << np.uint64(31)) | (k1 >> np.uint64(33))) * _MURMUR_C2
        h1 = (_THETA_SEED ^ k1) ^ np.uint64(8)
        h2 = _THETA_SEED ^ np.uint64(8)
        h1 = h1 + h2
        h2 = h2 + h1
        h1 = _fmix64(h1) + _fmix64(h2)
    return h1 >> np.uint64(1)


def distinct_estimate(theta) -> int | None:
    """The sketch's estimate of the distinct values, rounded; None without one."""
    if theta is None:
        return None
    return int(round(compact_theta(theta).get_estimate()))



def add_texts(theta, items: Iterable):
    """`theta` (None, or a sketch) with `items` added, one call per item
    (DataSketches updates one value at a time); returns the sketch."""
    sketch = _to_update(theta)
    collections.deque(map(sketch.update, items), 0)
    return _updated(theta, sketch)


def text_sketch(texts: list):
    """The compact theta sketch of `texts` (a list of str) from the native
    kernel (`recordforge._native.text_theta`): the same sketch as
    ``compact_theta(add_texts(None, texts))``, made from the texts' hashes
    in one call rather than one sketch update per text. None where the
    kernel does not run or declines (an item that is not a str, or has no
    UTF-8 form): then `add_texts`."""
    native = kernels()
    if native is None:
        return None
    try:
        packed = native.text_theta(texts, THETA_LG_K)
    except Exception:  # a bug must cost speed, never the statistics
        _LOG.warning("native text sketch failed; taking the DataSketches path", exc_info=True)
        return None
    return None if packed is None else datasketches.compact_theta_sketch.deserialize(packed)


def add_numbers(theta, values: np.ndarray, hashes: np.ndarray | None = None):
    """`theta` with int64 or float64 `values` added, as `add_texts` would,
    but only those that can change it: a value whose hash is not below the
    sketch's theta is not kept. The hashes are DataSketches' own
    (`theta_hashes`, or `hashes` when given: the native kernel's), computed
    for the whole array at once, so past its first few thousand distinct
    values a sketch takes a small share of one call per value, and ends the
    same (tested)."""
    sketch = _to_update(theta)
    if hashes is None:
        hashes = theta_hashes(values)
    for start in range(0, len(values), _THETA_CHUNK):
        part = slice(start, start + _THETA_CHUNK)
        kept = values[part][hashes[part] < np.uint64(sketch.theta64)]
        collections.deque(map(sketch.update, kept.tolist()), 0)
    return _updated(theta, sketch)


def _to_update(theta):
    """The sketch being updated; a new one when the sketch is compact
    (merged, or read back), which `_updated` then unites with it."""
    if isinstance(theta, datasketches.update_theta_sketch):
        return theta
    return datasketches.update_theta_sketch(THETA_LG_K)


def _updated(theta, sketch):
    if theta is None or sketch is theta:
        return sketch
    return theta_union(theta, sketch)
