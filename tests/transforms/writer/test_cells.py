"""The cells and seams of key-ordered gzip (`writer.cells`, `bucket_output`)."""

from __future__ import annotations

import gzip
import io

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from recordforge.transforms import tfrecord
from recordforge.transforms.writer import (
    bucket_output,
    cells,
)


def _cells_of(rows: list[bytes], cuts: list[int], cell_bytes: int) -> list[bytes]:
    """The split's chunks, in key order, when its sorted `rows` (examples)
    are cut into buckets at row positions `cuts`: each bucket's interior
    cells written by its own CellWriter, each seam joined from its
    buckets' pieces and compressed, the units ordered as the plan orders
    them."""
    framed = [tfrecord.frame_records([row]) for row in rows]
    total = sum(map(len, framed))
    edges = sorted({0, len(rows), *cuts})
    units: dict[int, list[bytes]] = {}
    seams: dict[int, list[tuple]] = {}
    start = 0
    for bucket, (first, last) in enumerate(zip(edges[:-1], edges[1:])):
        size = sum(len(record) for record in framed[first:last])
        if not size:
            continue  # no rows: not in the plan
        out = io.BytesIO()
        writer = bucket_output.CellWriter(out, start=start, size=size, total=total,
                                           cell_bytes=cell_bytes, gzip_level=1)
        for record in framed[first:last]:
            writer.write_framed(record, np.array([len(record)]))
        chunks = writer.close()
        assert writer.offset == start + size
        data = out.getvalue()
        units[cells.interior_unit(bucket)] = [
            data[chunk.offset:chunk.offset + chunk.length] for chunk in chunks]
        for cell, (piece, count) in writer.seams.items():
            seams.setdefault(cell, []).append((bucket, start, start + size, total, count, piece))
        start += size
    for cell, pieces in seams.items():
        # Delivered in any order, one of them twice (a retried step).
        seam = bucket_output.join_seam("train", cell, cell_bytes,
                                        pieces[::-1] + pieces[:1], 1)
        if seam is not None:
            unit, data, _ = seam
            assert unit not in units
            units[unit] = [data]
    return [chunk for unit in sorted(units) for chunk in units[unit]]


@settings(max_examples=80, deadline=None)
@given(sizes=st.lists(st.integers(0, 300), min_size=1, max_size=60),
       cut_at=st.lists(st.integers(0, 60), max_size=12),
       cell_bytes=st.sampled_from([1, 40, 200, 1000, 1 << 20]))
def test_a_splits_cells_do_not_depend_on_its_buckets(sizes, cut_at, cell_bytes):
    """Cut into any buckets (empty ones, one per row, one in all), the
    chunks are those of the split written as one bucket: each the rows
    whose midpoint is in one cell, one gzip member."""
    rows = [bytes([index % 251]) * size for index, size in enumerate(sizes)]
    whole = _cells_of(rows, [], cell_bytes)
    assert _cells_of(rows, [cut % (len(rows) + 1) for cut in cut_at], cell_bytes) == whole
    framed = [tfrecord.frame_records([row]) for row in rows]
    starts = np.cumsum([len(record) for record in framed]) - [len(record) for record in framed]
    row_cells = cells.cells_of_rows(starts, np.array([len(record) for record in framed]),
                                    cell_bytes).tolist()
    expected = [b"".join(record for record, cell in zip(framed, row_cells) if cell == wanted)
                for wanted in sorted(set(row_cells))]
    assert [gzip.decompress(chunk) for chunk in whole] == expected


def test_a_seam_missing_a_bucket_is_refused():
    # Buckets 0-2 cover bytes 0-120, 120-150, 150-400 of a split of 400;
    # cell 1 (bytes 100-200) holds the boundaries 120 and 150.
    pieces = [(0, 0, 120, 400), (1, 120, 150, 400), (2, 150, 400, 400)]
    assert cells.check_seam("train", 1, 100, pieces) == 4  # the last bucket's seam unit
    for missing in range(3):
        with pytest.raises(ValueError, match="cell 1"):
            cells.check_seam("train", 1, 100, pieces[:missing] + pieces[missing + 1:])

