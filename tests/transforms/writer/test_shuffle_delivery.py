"""The shuffle exchange's bucket sort takes only the rows its plan counted:
a packet the runner lost, or delivered twice, on its way to its bucket
fails the bucket, whichever way the rows are sorted and written, even
when another packet's copy makes up the lost bytes."""

from __future__ import annotations

import hashlib
import random

import numpy as np
import pytest
from recordforge.transforms import tfrecord
from recordforge.transforms.writer import (
    ShardTuning,
    run_format,
    shuffle_cells,
    shuffle_packets,
    shuffle_rows,
)

SPILLING = ShardTuning(memory_bytes=2_000, fan_in=2, index_every=500)  # sorted through local runs
IN_MEMORY = ShardTuning()
WIDTHS = [16, run_format.KEY_VARIABLE, run_format.KEY_IS_EXAMPLE]


def _packet(examples, width):
    keys = [hashlib.blake2b(example, digest_size=16).digest() for example in examples]
    key_field = {16: b"".join(keys), run_format.KEY_VARIABLE: tuple(keys)}.get(width)
    sizes = np.array([len(example) + 16 for example in examples], dtype="<u4")
    return width, key_field, tfrecord.frame_records(examples), sizes.tobytes()


def _packets(width):
    """Packets A (two rows) and B (one row) of equal framed bytes, and C."""
    rng = random.Random(width)
    a = _packet([rng.randbytes(30), rng.randbytes(54)], width)
    b = _packet([rng.randbytes(84 + 16)], width)
    c = _packet([rng.randbytes(rng.randint(5, 90)) for _ in range(40)], width)
    assert len(a[2]) == len(b[2])
    return a, b, c


def _plan(packets, start=1_000):
    """The plan of a bucket holding `packets`: (first byte, bytes, total, shards, rows)."""
    size = sum(len(packet[2]) for packet in packets)
    rows = sum(len(packet[3]) // 4 for packet in packets)
    return start, size, start + size + 5_000, 3, rows


def _sort(plan, delivered, tuning, writer_kind):
    """Sorts the delivered packets of a bucket whose plan is `plan` as the
    exchange's two bucket steps do (`CutBucketFn`, `SortCellsFn`)."""
    item = (("train", 7), [("rows", packet) for packet in delivered] + [("plan", plan)])
    if writer_kind == "rows":
        step = shuffle_rows.CutBucketFn(tuning)
    else:
        step = shuffle_cells.SortCellsFn(cell_bytes=300, gzip_level=1, tuning=tuning)
    step.setup()
    return list(step.process(item))


@pytest.mark.parametrize("tuning", [IN_MEMORY, SPILLING], ids=["in memory", "local runs"])
@pytest.mark.parametrize("writer_kind", ["rows", "cells"])
@pytest.mark.parametrize("width", WIDTHS)
def test_a_lost_packet_fails_the_bucket_even_when_another_copy_makes_up_its_bytes(
        width, writer_kind, tuning):
    a, b, c = _packets(width)
    plan = _plan([a, b, c])
    assert _sort(plan, [c, b, a], tuning, writer_kind)  # all delivered: sorted and sent on
    lost = "rows were lost or duplicated crossing the runner's shuffle"
    with pytest.raises(run_format.RunFileError, match=f"delivered 41 rows .*{lost}"):
        _sort(plan, [c, b], tuning, writer_kind)  # A lost
    # A lost and B delivered twice: the bytes add up, the rows do not.
    with pytest.raises(run_format.RunFileError, match="delivered 42 rows .*plan counted 43 rows"):
        _sort(plan, [c, b, b], tuning, writer_kind)
    with pytest.raises(run_format.RunFileError, match=lost):
        _sort(plan, [c, b, a, c], tuning, writer_kind)  # C delivered twice


def test_the_sort_itself_still_answers_for_its_bytes(monkeypatch):
    """Rows the runner delivered whole but the sort dropped fail too."""
    a, b, c = _packets(16)
    plan = _plan([a, b, c])

    def dropping(packets, writer, **options):
        packets = list(packets)
        original(packets[:-1], writer, **options)

    original = shuffle_packets.sort_bucket_packets
    monkeypatch.setattr(shuffle_packets, "sort_bucket_packets", dropping)
    with pytest.raises(run_format.RunFileError, match="sorted .* bytes, the plan counted"):
        _sort(plan, [a, b, c], IN_MEMORY, "rows")


def test_the_plan_counts_each_buckets_rows():
    rows = np.array([3, 0, 5], dtype=np.int64)
    nbytes = np.array([300, 0, 250], dtype=np.int64)
    plans = [value for key, (tag, value) in shuffle_rows.plan_row_cuts(
        ("train", (rows, nbytes, 100, ())), shard_size=200) if tag == "plan"]
    assert plans == [(0, 300, 550, 3, 3), (300, 250, 550, 3, 5)]

