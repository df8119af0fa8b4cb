"""The shuffle exchange's bucket sort takes only the rows its plan counted:
a packet the runner lost, or delivered twice, on its way to its bucket
fails the bucket, whichever way the rows are sorted and written, even
when another packet's copy makes up the lost rows and bytes."""

from __future__ import annotations

import collections
import hashlib
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from recordforge.transforms import tfrecord
from recordforge.transforms.tfrecord.framing import masked_crc32c
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
    """The plan of a bucket holding `packets`, as Pack and PlanCuts count
    it: (first byte, bytes, total, shards, rows, digest)."""
    rows = nbytes = digest = 0
    for packet in packets:
        sizes = np.frombuffer(packet[3], dtype="<u4")
        _, counts, sizes_sum, digests, _ = shuffle_packets.bucket_sizes(
            np.zeros(len(sizes)), sizes, shuffle_packets.row_digests(packet[2], sizes))
        rows += int(np.frombuffer(counts, dtype="<i8")[0])
        nbytes += int(np.frombuffer(sizes_sum, dtype="<i8")[0])
        digest = (digest + int(np.frombuffer(digests, dtype="<u8")[0])) % 2**64
    return start, nbytes, start + nbytes + 5_000, 3, rows, digest


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


@pytest.mark.parametrize("tuning", [IN_MEMORY, SPILLING], ids=["in memory", "local runs"])
@pytest.mark.parametrize("writer_kind", ["rows", "cells"])
@pytest.mark.parametrize("width", WIDTHS)
def test_a_lost_packet_fails_the_bucket_even_when_another_makes_up_its_rows_and_bytes(
        width, writer_kind, tuning):
    """Packet D lost and E, of rows of the same sizes, delivered twice: the
    rows and bytes add up, the bucket's digest does not."""
    a, b, c = _packets(width)
    rng = random.Random(width + 1)
    d = _packet([rng.randbytes(30), rng.randbytes(54)], width)
    e = _packet([rng.randbytes(54), rng.randbytes(30)], width)
    plan = _plan([a, d, e, c])
    assert _sort(plan, [e, c, a, d], tuning, writer_kind)  # all delivered, in any order
    with pytest.raises(run_format.RunFileError,
                       match=r"delivered 46 rows \(\d+ bytes, digest [0-9a-f]{16}\) .*"
                             r"plan counted 46 rows .*lost or duplicated"):
        _sort(plan, [c, e, a, e], tuning, writer_kind)
    # A bucket that holds the same row twice (the input did) is whole.
    twice = _packet([b"the same row"] * 2, width)
    assert _sort(_plan([twice, c]), [c, twice], tuning, writer_kind)


_ROWS = st.lists(st.sampled_from([b"ab", b"ba", b"xyz", b"zyx", b"ab" * 30]), min_size=1,
                 max_size=3)


@settings(max_examples=150, deadline=None)
@given(st.lists(_ROWS, min_size=1, max_size=5), st.data())
def test_a_bucket_fails_exactly_when_the_rows_delivered_are_not_the_rows_sent(sent, data):
    """Packets lost, delivered twice or in another's place (rows of few
    sizes and contents, so that equal rows and bytes are common): the
    bucket is sorted when the delivered rows are the sent ones as a
    multiset, and fails otherwise."""
    packets = [_packet(rows, 16) for rows in sent]
    delivered = data.draw(st.lists(st.integers(0, len(packets) - 1), min_size=1,
                                   max_size=len(packets) + 2))
    same = (collections.Counter(row for rows in sent for row in rows)
            == collections.Counter(row for index in delivered for row in sent[index]))
    plan = _plan(packets)
    if same:
        assert _sort(plan, [packets[index] for index in delivered], IN_MEMORY, "rows")
    else:
        with pytest.raises(run_format.RunFileError, match="lost or duplicated"):
            _sort(plan, [packets[index] for index in delivered], IN_MEMORY, "rows")


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=20))
def test_row_digests_mix_each_records_data_crc_and_size(examples):
    """`row_digests` against a per-row Python reference: splitmix64's
    finalizer on (masked data CRC32C << 32 | framed size)."""
    framed = tfrecord.frame_records(examples)
    sizes = np.array([len(example) + 16 for example in examples], dtype="<u4")
    mask = 2**64 - 1

    def reference(example):
        value = masked_crc32c(example) << 32 | (len(example) + 16)
        value ^= value >> 30
        value = value * 0xBF58476D1CE4E5B9 & mask
        value ^= value >> 27
        value = value * 0x94D049BB133111EB & mask
        return value ^ value >> 31

    assert shuffle_packets.row_digests(framed, sizes).tolist() == [
        reference(example) for example in examples]


def test_row_digests_refuse_sizes_that_are_not_the_packets():
    framed = tfrecord.frame_records([b"abc", b"de"])
    with pytest.raises(run_format.RunFileError, match="not its sizes"):
        shuffle_packets.row_digests(framed, np.array([19, 19]))
    with pytest.raises(run_format.RunFileError, match="not its sizes"):
        shuffle_packets.row_digests(framed, np.array([37, 0]))


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
    digests = np.array([2**64 - 1, 0, 7], dtype=np.uint64)
    plans = [value for key, (tag, value) in shuffle_rows.plan_row_cuts(
        ("train", (rows, nbytes, digests, 100, ())), shard_size=200) if tag == "plan"]
    assert plans == [(0, 300, 550, 3, 3, 2**64 - 1), (300, 250, 550, 3, 5, 7)]

