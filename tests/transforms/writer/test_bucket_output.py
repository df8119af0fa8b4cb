"""`bucket_output.ShardRowsWriter`: a shard's rows of a bucket given in blocks."""

from __future__ import annotations

import io

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from recordforge.transforms.writer.bucket_output import ShardRowsWriter
from recordforge.transforms.writer.shard_cuts import row_shard_thresholds


@given(st.lists(st.integers(17, 400), min_size=1, max_size=60), st.integers(1, 8),
       st.lists(st.integers(1, 20), min_size=1, max_size=60), st.integers(0, 1000),
       st.data())
@settings(max_examples=300, deadline=None)
def test_each_shard_writes_exactly_the_rows_whose_midpoint_it_holds(
        sizes, count, cuts, before, data):
    """Whatever the blocks a bucket's rows come in (and where the bucket
    starts in the split), shard i writes the rows whose doubled midpoint
    2s + n lies in [t_i, t_(i+1)) of `row_shard_thresholds`, in order, and
    counts them; every row lands in exactly one shard."""
    total = before + sum(sizes) + data.draw(st.integers(0, 1000))
    thresholds = row_shard_thresholds(total, count)
    rows = [bytes([index % 251]) * size for index, size in enumerate(sizes)]
    starts = before + np.cumsum([0] + sizes[:-1])
    bounds = [0, *thresholds.tolist(), float("inf")]
    written = b""
    for shard in range(count):
        expected = [row for row, start, size in zip(rows, starts, sizes)
                    if bounds[shard] <= 2 * start + size < bounds[shard + 1]]
        out = io.BytesIO()
        writer = ShardRowsWriter(out, before, thresholds, shard)
        at = 0
        for cut in cuts:
            block = rows[at:at + cut]
            if block:
                writer.write_framed(b"".join(block), np.array([len(row) for row in block]))
            at += cut
        if at < len(rows):
            block = rows[at:]
            writer.write_framed(b"".join(block), np.array([len(row) for row in block]))
        assert out.getvalue() == b"".join(expected)
        assert (writer.rows, writer.written) == (len(expected), len(out.getvalue()))
        written += out.getvalue()
    assert written == b"".join(rows)
