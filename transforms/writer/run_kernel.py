"""A run file written by the native kernel: the bytes `run_format.RunWriter` writes, in one call.

No Beam. Writing a run in Python takes a framing gather, a size array, a
key gather and an index entry search per block of rows; the kernels
(`native/src/run.rs`) sort a split's fixed-width keys (`fixed_key_order`,
the order `row_order.sorted_positions` gives) and write the whole file of
rows in a given order (`write_run`: records, sizes, keys, key sizes, index
and footer), a block at a time so that memory stays one block above the
rows held. Each function here returns None where the Python writer must
write the run (no kernel, a row that is not bytes, a record too large for
the format's uint32 sizes): `run_format.RunWriter` stays the reference.
`sorted_rows` sorts key-ordered rows (keys of any width, or the examples
themselves) as `write_sorted_run`'s Python `sorted` does.
"""

from __future__ import annotations

from typing import BinaryIO, Sequence

import numpy as np

from ...schemas.native import kernels

__all__ = ["fixed_key_rows", "sorted_rows", "write_ordered"]

_ROWS = np.dtype("<i8")


def _packed(rows) -> np.ndarray:
    """Row numbers as the kernels take them: int64 bytes, one buffer."""
    return np.ascontiguousarray(rows, dtype=_ROWS).view(np.uint8)


def fixed_key_rows(fileobj: BinaryIO, keys: np.ndarray, examples: Sequence[bytes],
                   rows: np.ndarray | None, *, prefix_len: int, index_every: int,
                   block: int) -> int | None:
    """Writes the rows `rows` of `examples` (all when None) sorted by
    ``(key, example)`` as a run file of fixed-width keys: `keys` one numpy
    item per row of `examples` ("V" items, every byte kept); returns the
    number of rows, or None with nothing written where Python writes it."""
    native = kernels()
    if native is None or not isinstance(examples, list) or keys.dtype.itemsize == 0:
        return None
    blob = np.ascontiguousarray(keys).view(np.uint8)
    selected = np.arange(len(examples)) if rows is None else rows
    order = native.fixed_key_order(blob, keys.dtype.itemsize, examples, _packed(selected))
    if order is None:
        return None
    return native.write_run(fileobj, examples, order, blob, keys.dtype.itemsize, prefix_len,
                            index_every, block)


def write_ordered(fileobj: BinaryIO, keys, examples: Sequence[bytes], order, *,
                  key_width: int, prefix_len: int, index_every: int, block: int) -> int | None:
    """Writes ``examples[i] for i in order`` (keys alike) as a run file, as
    `RunWriter` does; keys: None (KEY_IS_EXAMPLE), a list of bytes
    (KEY_VARIABLE) or the fixed-width keys back to back (bytes). Returns
    the number of rows, or None with nothing written where Python writes it."""
    native = kernels()
    if native is None or not isinstance(examples, list):
        return None
    if key_width < 0 and not isinstance(keys, list):
        return None
    return native.write_run(fileobj, examples, _packed(order), keys, key_width, prefix_len,
                            index_every, block)


def sorted_rows(keys: list | None, examples: Sequence[bytes]) -> np.ndarray | None:
    """The positions of rows ordered by ``(key, example)`` (keys None: by
    example), as `run_format.write_sorted_run` sorts them, as int64; None
    where Python sorts them (no kernel, an item that is not bytes)."""
    native = kernels()
    if native is None or not isinstance(examples, list) or not isinstance(keys, (list, type(None))):
        return None
    order = native.sorted_rows(keys, examples)
    return None if order is None else np.frombuffer(order, dtype=_ROWS)
