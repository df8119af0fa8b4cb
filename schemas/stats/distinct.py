"""Distinct counts: DataSketches theta sketches in their canonical form, and array-wide updates of them."""

from __future__ import annotations

import base64
import collections
import logging
import struct
from typing import Iterable

import datasketches
import numpy as np

from ..native import kernels
from .histogram import unordered_keys
from .sums import EXACT_INT

__all__ = ["THETA_LG_K", "HashedTheta", "SerializedTheta", "add_numbers", "add_texts", "compact_theta",
           "distinct_estimate", "serialized_theta", "text_sketch", "theta_bound", "theta_candidates",
           "theta_hashes", "theta_most", "theta_union", "united"]

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
    if isinstance(sketch, HashedTheta):
        return sketch.compact()
    if isinstance(sketch, SerializedTheta):
        return datasketches.compact_theta_sketch.deserialize(sketch.data)
    union = datasketches.theta_union(THETA_LG_K)
    union.update(sketch)
    return union.get_result()


def theta_union(a, b):
    """The union of two theta sketches, compact (canonical)."""
    union = datasketches.theta_union(THETA_LG_K)
    union.update(compact_theta(a) if isinstance(a, (HashedTheta, SerializedTheta)) else a)
    union.update(compact_theta(b) if isinstance(b, (HashedTheta, SerializedTheta)) else b)
    return union.get_result()


class SerializedTheta:
    """A compact theta sketch in its canonical form held as its serialized
    bytes (`data`): a text partial's sketch from the native kernel to the
    merge, which reads only its bytes (the merge order, the digest, the
    build cache's JSON, pickling, `HashedTheta.unite`). Held so, the
    kernel's bytes are never deserialized to be serialized again three
    times, and their base64 is made once. `compact_theta` gives the
    DataSketches sketch."""

    __slots__ = ("data", "_base64")

    def __init__(self, data: bytes):
        self.data = data
        self._base64: str | None = None

    def base64(self) -> str:
        """`data` in base64, as the JSON state holds it (made once: the bytes never change)."""
        if self._base64 is None:
            self._base64 = base64.b64encode(self.data).decode("ascii")
        return self._base64


def serialized_theta(sketch) -> SerializedTheta:
    """`sketch` (any theta sketch here) in its canonical compact form, as
    its serialized bytes."""
    if isinstance(sketch, SerializedTheta):
        return sketch
    return SerializedTheta(compact_theta(sketch).serialize())


def united(held, sketch) -> "HashedTheta":
    """`theta_union(held, sketch)` as a `HashedTheta` (its `compact` is
    that union's sketch): `held` itself with `sketch` added where it is
    one (so a merge that holds it owns it), else a new one of both. A merge
    of many partials unites their sketches this way without a DataSketches
    union per partial (each one builds a hash table of both sketches'
    entries and compacts it again)."""
    if not isinstance(held, HashedTheta):
        held = HashedTheta().unite(held)
    return held.unite(sketch)


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


def theta_bound(theta) -> int:
    """The hash at and above which `add_numbers` would keep nothing for
    `theta` (None, or a sketch): a `HashedTheta`'s theta, else the largest
    (a new or compact sketch takes every hash, then unites), so a kernel
    can screen a batch's hashes before they come back."""
    return theta.theta if isinstance(theta, HashedTheta) else _THETA_MAX


def theta_most(theta) -> int:
    """How many of a batch's smallest distinct hashes `add_numbers` can
    use for `theta` (None, or a sketch): one more than its nominal entries
    (a `HashedTheta`'s, else the 2**THETA_LG_K a new one holds). The sketch
    ends as the nominal smallest distinct hashes of all its values and theta
    the next one, so a hash with that many smaller ones in its own batch
    is never either; a kernel can leave such hashes out."""
    return (1 << (theta.lg_k if isinstance(theta, HashedTheta) else THETA_LG_K)) + 1


def add_numbers(theta, values: np.ndarray, hashes: np.ndarray | None = None):
    """`theta` with int64 or float64 `values` added, as `add_texts` would:
    their hashes (DataSketches' own, `theta_hashes`, or `hashes` when given:
    the native kernel's, ascending and distinct, at most `theta_most` and
    only those under `theta_bound`) go into a `HashedTheta`, computed and
    screened for the whole array at once rather than one sketch update per
    value; the sketch ends the same (tests/schemas/test_stats_distinct.py)."""
    held = theta if isinstance(theta, HashedTheta) else HashedTheta()
    if hashes is None:
        held.add(theta_hashes(values))
    else:
        held.add_screened(hashes)
    return held if theta is None or held is theta else theta_union(theta, held)


_THETA_MAX = (1 << 63) - 1  # theta while a sketch is exact (DataSketches' MAX_THETA)
# Serialized compact sketch (serial version 3, family 3): preamble longs,
# version, family, two unused bytes, flags, the seed's 16-bit hash.
_COMPACT_HEADER = struct.Struct("<BBBxxBH")
_READ_ONLY, _EMPTY, _COMPACT, _ORDERED = 1 << 1, 1 << 2, 1 << 3, 1 << 4
_SEED_HASH = 0x93CC  # of DEFAULT_SEED, as every sketch here carries it


class HashedTheta:
    """A theta sketch being updated, held as the 63-bit hashes it keeps:
    what DataSketches' update sketch does, but screening a whole array of
    hashes with numpy. Hashes below theta are kept; past twice the nominal
    2**lg_k distinct ones, the kept hashes are cut to the 2**lg_k smallest
    and theta becomes the next one, as the sketch's rebuild does. `compact`
    gives the canonical compact sketch (the 2**lg_k smallest distinct
    hashes of every value added, theta the next one, or exact), the very
    sketch that an update sketch given each value would compact to; no
    library builds one from hashes. Memory: at most about 2 * 2**lg_k
    hashes and a batch's."""

    __slots__ = ("lg_k", "theta", "_parts", "_size", "_ordered")

    def __init__(self, lg_k: int = THETA_LG_K):
        self.lg_k, self.theta = lg_k, _THETA_MAX
        self._parts: list[np.ndarray] = []
        self._size = 0
        self._ordered = True  # (every part ascending: the held hashes and the kernel's)

    def add(self, hashes: np.ndarray, ordered: bool = False) -> None:
        """Adds values by their `theta_hashes` (a hash of 0 is never kept,
        as DataSketches keeps none); `ordered`: the hashes ascend."""
        kept = hashes[(hashes < np.uint64(self.theta)) & (hashes != 0)]
        self._take(kept, ordered)

    def add_screened(self, hashes: np.ndarray) -> None:
        """`add` of hashes already screened by this sketch's theta (none at
        or above it, no 0), ascending and distinct, as the native kernel
        gives them (`theta_bound`): not screened again."""
        self._take(hashes, True)

    def _take(self, kept: np.ndarray, ordered: bool) -> None:
        if len(kept):
            self._parts.append(kept)
            self._size += len(kept)
            self._ordered = self._ordered and ordered
            if self._size > 2 << self.lg_k:
                self._held()

    def unite(self, sketch) -> "HashedTheta":
        """Adds a sketch's (a `HashedTheta`, or DataSketches') hashes and theta as a
        DataSketches theta union takes them: theta the smaller of the two,
        the hashes below it kept; returns self. A union ends as the
        2**lg_k smallest distinct hashes below the least theta of its
        sketches (theta the next one, or that least theta): what `compact`
        gives of these."""
        if isinstance(sketch, HashedTheta):
            theta, hashes = sketch.theta, sketch._held()
        else:
            theta, hashes = _compact_parts(serialized_theta(sketch).data)
        if theta < self.theta:
            # (the hashes held at or above the new theta are dropped, as the union's are)
            self.theta = theta
            self._parts = [part[part < np.uint64(theta)] for part in self._parts]
            self._size = sum(map(len, self._parts))
        self.add(hashes, ordered=True)
        return self

    def _held(self) -> np.ndarray:
        """The distinct kept hashes, ascending, at most 2**lg_k of them
        (theta lowered to the next one where there were more)."""
        # (parts that each ascend merge in numpy's stable sort, a run
        # merge, many times faster than its default sort of them)
        held = np.sort(np.concatenate(self._parts), kind="stable" if self._ordered else None) \
            if self._parts else np.zeros(0, dtype=np.uint64)
        # (sorted, then repeats dropped: several times faster than np.unique's hashing)
        held = held[np.concatenate(([True], held[1:] != held[:-1]))] if len(held) else held
        nominal = 1 << self.lg_k
        if len(held) > nominal:
            self.theta = int(held[nominal])
            held = held[:nominal]
        self._parts, self._size, self._ordered = [held], len(held), True
        return held

    def compact(self):
        """The canonical compact sketch of every value added."""
        held = self._held()
        if self.theta != _THETA_MAX:
            preamble, tail = 3, struct.pack("<IxxxxQ", len(held), self.theta)
        elif len(held) > 1:
            preamble, tail = 2, struct.pack("<Ixxxx", len(held))
        else:
            preamble, tail = 1, b""
        flags = _READ_ONLY | _COMPACT | _ORDERED | (0 if len(held) else _EMPTY)
        header = _COMPACT_HEADER.pack(preamble, 3, 3, flags, _SEED_HASH)
        return datasketches.compact_theta_sketch.deserialize(
            header + tail + held.astype("<u8").tobytes())


def _compact_parts(data: bytes) -> tuple[int, np.ndarray]:
    """(theta, hashes ascending) of a serialized compact sketch (the
    layout `HashedTheta.compact` writes, which DataSketches' `serialize`
    of a compact sketch gives; its hashes are ordered: every sketch
    here is canonical)."""
    preamble, version, family, flags, _ = _COMPACT_HEADER.unpack_from(data)
    if version != 3 or family != 3 or not flags & _ORDERED:
        raise ValueError("not an ordered compact theta sketch of serial version 3")
    if preamble == 1:
        count = 0 if flags & _EMPTY else 1
    else:
        (count,) = struct.unpack_from("<I", data, 8)
    theta = struct.unpack_from("<Q", data, 16)[0] if preamble >= 3 else _THETA_MAX
    return theta, np.frombuffer(data, dtype="<u8", count=count, offset=8 * preamble)


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
