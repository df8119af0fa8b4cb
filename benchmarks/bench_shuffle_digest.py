"""The shuffle exchange's row digests: what they cost Pack and a bucket's sort, per row.

A table's rows (a CSV of id, count, score, text, label: the benchmark
tables' shape) are encoded as Examples and cut into batches. Pack
(`shuffle_steps.PackFn`) takes every batch twice, with the row digests
and without, and every bucket is sorted (`shuffle_rows.CutBucketFn`)
twice, with them and without; which goes first alternates from one batch
or bucket to the next, so that a shared machine's drift falls on both
alike. Without: Pack's digests replaced by None (as for units of
chunks), the sort's writer given the rows as they are
(`shuffle_packets._Digesting` passing them through) and the plans'
digests 0. CPU seconds of this process (`time.process_time`), added up
over the rounds; the figures are per row. Python's cyclic collector is
off while timing (run between rounds): Pack's outputs, held for the
sorts, would make its passes fall on either side at random.

Usage:
  python benchmarks/bench_shuffle_digest.py /path/to/table.csv --rounds 5
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import gc
import time

from recordforge.schemas.example import encode_example
from recordforge.transforms.writer import ShardTuning, shuffle_packets, shuffle_rows, shuffle_steps


def _batches(path: str, batch_rows: int) -> list[list[tuple[None, bytes]]]:
    with open(path, newline="") as fileobj:
        examples = [encode_example({"id": int(row["id"]), "count": int(row["count"]),
                                    "score": float(row["score"]), "text": row["text"],
                                    "label": row["label"]})
                    for row in csv.DictReader(fileobj)]
    return [[(None, example) for example in examples[start:start + batch_rows]]
            for start in range(0, len(examples), batch_rows)]


@contextlib.contextmanager
def _digests(on: bool):
    if on:
        yield
        return
    pack_digests = shuffle_steps.row_digests
    write_framed = shuffle_packets._Digesting.write_framed
    shuffle_steps.row_digests = lambda data, sizes: None
    shuffle_packets._Digesting.write_framed = (
        lambda self, data, sizes: self._writer.write_framed(data, sizes))
    try:
        yield
    finally:
        shuffle_steps.row_digests = pack_digests
        shuffle_packets._Digesting.write_framed = write_framed


def _timed(step, item, on: bool, seconds: dict) -> list:
    with _digests(on):
        started = time.process_time()
        outputs = list(step.process(item))
        seconds[on] += time.process_time() - started
    return outputs


def _plans(outputs) -> tuple[dict, dict]:
    """Each bucket's plan and packets, from Pack's outputs."""
    combine = shuffle_rows.BucketSizesFn()
    accumulator = combine.create_accumulator()
    buckets: dict = {}
    for tag, value in outputs:
        if tag == "sizes":
            accumulator = combine.add_input(accumulator, value[1])
        else:
            key, packet = value
            buckets.setdefault(key, []).append(packet)
    plans = {key: value for key, value in shuffle_rows.plan_row_cuts(
        ("train", combine.extract_output(accumulator)), shard_size=64 << 20)
        if value[0] == "plan"}
    return plans, buckets


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("table")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch-rows", type=int, default=4096)
    args = parser.parse_args(argv)
    tuning = ShardTuning()
    batches = _batches(args.table, args.batch_rows)
    rows = sum(len(batch) for batch in batches)
    pack = shuffle_steps.PackFn("bench", (("train", 1.0),), True, tuning,
                                hash_buckets=tuning.hash_buckets)
    pack.setup()
    sort = shuffle_rows.CutBucketFn(tuning)
    sort.setup()
    packing, sorting = {True: 0.0, False: 0.0}, {True: 0.0, False: 0.0}
    turn = 0
    gc.disable()
    for _ in range(args.rounds):
        gc.collect()
        packed: dict[bool, list] = {True: [], False: []}
        for batch in batches:
            turn += 1
            for on in (True, False) if turn % 2 else (False, True):
                packed[on] += _timed(pack, batch, on, packing)
        plans, buckets = {}, {}
        for on in (True, False):
            plans[on], buckets[on] = _plans(packed[on])
        for key in buckets[True]:
            turn += 1
            for on in (True, False) if turn % 2 else (False, True):
                _timed(sort, (key, [plans[on][key], *buckets[on][key]]), on, sorting)
    gc.enable()
    per_row = 1e9 / (rows * args.rounds)
    print(f"{rows} rows, {len(batches)} batches of {args.batch_rows}, "
          f"{tuning.hash_buckets} buckets, {args.rounds} rounds (CPU ns per row)")
    for name, seconds in (("pack", packing), ("sort", sorting)):
        mine, bare = seconds[True] * per_row, seconds[False] * per_row
        print(f"{name}: with digests {mine:.0f}, without {bare:.0f}: {mine - bare:+.0f} "
              f"({(mine - bare) / bare:+.1%})")
    both = (packing[True] + sorting[True]) * per_row
    bare = (packing[False] + sorting[False]) * per_row
    print(f"pack + sort: {both - bare:+.0f} ns per row ({(both - bare) / bare:+.1%})")


if __name__ == "__main__":
    main()
