"""Column-at-a-time checks and encoding: `RowEncoder`'s fast path for batches.

The row path (`compile_entry`) makes one Python call per value. Here a
batch's column is checked with C-level loops over the whole column (int(),
float(), str.encode, min/max, set inclusion) and its map entries are built
with numpy, a few calls per column instead of one per value. A column that
cannot take this path whole (a value of another type, out of range, missing,
a list ...) is encoded value by value with the row path's own function, and
a value that fails there marks its row: the caller sends that row down the
row path, which reports the error exactly as for a single row.

Every entry made here equals the row path's entry byte for byte: the fixed
parts (everything before the value's own bytes) are cut from entries the
row path's encoder made, never rebuilt, and tests compare both paths.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from .fast_paths import FastBounds, fast_bounds
from .features import FeatureSpec

__all__ = ["CheckedNumbers", "ColumnEncoder", "HeadedEntries", "bytes_by_length", "rows_as_bytes"]

# Entry heads remembered per value size (bytes and text features).
_MAX_HEADS = 4096
# uint64 thresholds where a varint grows by a byte: 2**7, 2**14, ... 2**63.
_VARINT_STEPS = tuple(np.uint64(1 << (7 * k)) for k in range(1, 10))


class CheckedNumbers(list):
    """A numeric column's checked values: the list of Python numbers, with
    the numpy array (int64 or float64) its check made of them, which the
    statistics take rather than converting the list once more."""

    __slots__ = ("array",)

    def __init__(self, values: list, array: np.ndarray):
        super().__init__(values)
        self.array = array


class HeadedEntries(tuple):
    """A bytes column's map entries as two lists, ``(heads, values)``:
    entry i is ``heads[i] + values[i]``. The caller joins them straight
    into the Example, so a large value (an image) is copied once there
    rather than first into its own entry."""

    __slots__ = ()

    def __new__(cls, heads: list, values: list):
        return super().__new__(cls, (heads, values))


class ColumnEncoder:
    """Encodes one feature's column of raw values.

    row_entry: the row path's function raw value -> map entry (raising
    RowError); scalar_entry: one checked value -> map entry. Calling the
    instance with a column (list of raw values, one per row) returns
    ``(entries, values)``: entries[i] is row i's map entry, or None where
    the row path must take the row; values are the checked values (one per
    row) when the whole column took the column path, else None. A bytes
    column that took the column path gives its entries as `HeadedEntries`.
    """

    def __init__(self, spec: FeatureSpec, vocabulary: Sequence[str] | None,
                 row_entry: Callable[[Any], bytes], scalar_entry: Callable[[Any], bytes]):
        self._row_entry = row_entry
        self._scalar_entry = scalar_entry
        self._sized_heads: dict[int, bytes] = {}
        self._column = self._column_rule(spec, vocabulary)

    def _column_rule(self, spec: FeatureSpec, vocabulary):
        """raws -> (entries, values), or None when the column cannot take
        the column path whole; None when the feature has no column path."""
        if spec.shape or spec.null_values is not None or spec.type == "timestamp":
            return None
        if spec.vocabulary is not None:
            return self._labels(vocabulary)
        bounds = fast_bounds(spec)
        if spec.stored_kind == "int64":
            return self._ints(bounds)
        if spec.stored_kind == "float":
            return self._floats(bounds)
        return self._texts(bounds) if spec.is_text else self._bytes(bounds)

    def __call__(self, raws: list) -> tuple[list, list | None]:
        if self._column is not None:
            done = self._column(raws)
            if done is None:
                items = _only_items(raws)
                if items is not None:
                    done = self._column(items)
            if done is not None:
                return done
        return self._value_by_value(raws), None

    def _value_by_value(self, raws: list) -> list:
        entries = []
        append = entries.append
        row_entry = self._row_entry
        for raw in raws:
            try:
                append(row_entry(raw))
            except Exception:  # the row path reports it (a RowError or a bug)
                append(None)
        return entries

    # --- one rule per kind of feature -----------------------------------

    def _labels(self, vocabulary: Sequence[str]):
        entry_of = {label: self._scalar_entry(i) for i, label in enumerate(vocabulary)}
        id_of = {label: i for i, label in enumerate(vocabulary)}

        def labels(raws):
            if set(map(type, raws)) != {str}:
                return None
            entries = list(map(entry_of.get, raws))
            if None in entries:
                return None
            return entries, list(map(id_of.__getitem__, raws))
        return labels

    def _ints(self, bounds: FastBounds):
        lo, hi, _, allowed = bounds
        # The head of an entry depends only on its varint's length (1-10).
        heads = {}
        for length in range(1, 11):
            sample = -1 if length == 10 else 1 << (7 * (length - 1))
            entry = self._scalar_entry(sample)
            heads[length] = np.frombuffer(entry[:len(entry) - length], dtype=np.uint8)

        def ints(raws):
            values = _parsed(raws, int)
            if values is None or min(values) < lo or max(values) > hi:
                return None
            if allowed is not None and not allowed.issuperset(values):
                return None
            array = np.array(values, dtype=np.int64)
            return _varint_entries(array, heads), CheckedNumbers(values, array)
        return ints

    def _floats(self, bounds: FastBounds):
        lo, hi, _, allowed = bounds
        entry = self._scalar_entry(0.0)
        head = np.frombuffer(entry[:-4], dtype=np.uint8)

        def floats(raws):
            values = _parsed(raws, float)
            if values is None:
                return None
            array = np.array(values, dtype=np.float64)
            if not ((array >= lo) & (array <= hi)).all():  # NaN fails both
                return None
            if allowed is not None and not allowed.issuperset(values):
                return None
            # The same C cast to float32 as struct.pack("<f") in the row path.
            body = array.astype("<f4").view(np.uint8).reshape(-1, 4)
            return _fixed_width_entries(head, body), CheckedNumbers(values, array)
        return floats

    def _texts(self, bounds: FastBounds):
        def texts(raws):
            kinds = set(map(type, raws))
            if kinds == {str}:
                # The row path sends "" to the complete rules (a missing value).
                if not all(raws):
                    return None
                try:
                    values = list(map(str.encode, raws))
                except UnicodeEncodeError:
                    return None
            elif kinds == {bytes}:
                # Bytes are stored as they are when they are UTF-8
                # (`values._to_text_bytes`; b"" too: only text can be a
                # missing value). Checked joined by an ASCII byte, which no
                # multi-byte sequence holds: each value's check stays its own.
                try:
                    b"\n".join(raws).decode("utf-8")
                except UnicodeDecodeError:
                    return None
                values = raws
            else:
                return None
            return self._sized_entries(values, bounds)
        return texts

    def _bytes(self, bounds: FastBounds):
        def data(raws):
            if set(map(type, raws)) != {bytes}:
                return None
            return self._sized_entries(raws, bounds, headed=True)
        return data

    def _sized_entries(self, values: list, bounds: FastBounds, headed: bool = False):
        sizes = list(map(len, values))
        if max(sizes) > bounds.limit:
            return None
        if bounds.allowed is not None and not bounds.allowed.issuperset(values):
            return None
        heads = self._sized_heads
        missing = set(sizes).difference(heads)
        if missing:
            if len(heads) + len(missing) > _MAX_HEADS:
                heads.clear()
            for size in missing:
                entry = self._scalar_entry(bytes(size))
                heads[size] = entry[:len(entry) - size]
        if headed:
            return HeadedEntries(list(map(heads.__getitem__, sizes)), values), values
        return list(map(bytes.__add__, map(heads.__getitem__, sizes), values)), values


def _only_items(raws: list) -> list | None:
    """Each raw value's one item, when every raw value is a list (or tuple)
    of one item that is not a missing value (None, blank text); else None.
    The row path converts such a value as it converts its item
    (`checks._compile_rules`: a list is never a missing value, and a scalar
    feature takes a list's only item); a TFRecord source gives every value
    so, as an Example's features are lists."""
    if not raws or type(raws[0]) not in (list, tuple):
        return None
    items = []
    for raw in raws:
        if type(raw) not in (list, tuple) or len(raw) != 1:
            return None
        item = raw[0]
        if item is None or (type(item) is str and not item.strip()):
            return None
        items.append(item)
    return items


def _parsed(raws: list, number: type) -> list | None:
    """The column as `number`s when every raw value is text that int() or
    float() reads (ASCII, no "_": the rules reject what else they accept)
    or already a `number`; else None."""
    kinds = set(map(type, raws))
    if kinds == {str}:
        text = "".join(raws)
        if "_" in text or not text.isascii():
            return None
        try:
            return list(map(number, raws))
        except ValueError:
            return None
    return raws if kinds == {number} else None


def _varint_entries(values: np.ndarray, heads: dict[int, np.ndarray]) -> list[bytes]:
    """int64 values -> map entries: head (by varint length) + varint."""
    unsigned = values.view(np.uint64)  # negatives: 10-byte two's complement
    lengths = np.ones(len(values), dtype=np.int64)
    for step in _VARINT_STEPS:
        lengths += unsigned >= step
    groups = np.empty((len(values), 10), dtype=np.uint8)
    for k in range(10):
        groups[:, k] = (unsigned >> np.uint64(7 * k)) & np.uint64(0x7F)
        groups[:, k] |= np.where(lengths > k + 1, 0x80, 0).astype(np.uint8)
    return bytes_by_length(
        lengths, lambda length, rows: _fixed_width_entries(heads[length], groups[rows, :length]))


def _fixed_width_entries(head: np.ndarray, body: np.ndarray) -> list[bytes]:
    """One bytes object per row of `body` (uint8, rows x width), each
    prefixed with `head`."""
    out = np.empty((body.shape[0], len(head) + body.shape[1]), dtype=np.uint8)
    out[:, :len(head)] = head
    out[:, len(head):] = body
    return rows_as_bytes(out)


def rows_as_bytes(rows: np.ndarray) -> list[bytes]:
    """One bytes object per row of a 2-D uint8 array (at least one column)."""
    # A void item converts to bytes whole (an "S" item would lose trailing NULs).
    return np.ascontiguousarray(rows).view(f"V{rows.shape[1]}").ravel().tolist()


def bytes_by_length(lengths: np.ndarray,
                    make: Callable[[int, Any], list[bytes]]) -> list[bytes]:
    """One bytes object per row, made group by group: make(length, rows)
    gives the bytes of the rows (an index array, or a slice of all of
    them) whose entry in `lengths` is `length`."""
    present = np.unique(lengths).tolist()
    if len(present) == 1:
        return make(present[0], slice(None))
    out = np.empty(len(lengths), dtype=object)
    for length in present:
        rows = np.flatnonzero(lengths == length)
        out[rows] = make(length, rows)
    return out.tolist()
