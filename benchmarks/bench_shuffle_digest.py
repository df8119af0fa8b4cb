"""The shuffle exchange's row digests: what they cost Pack and a bucket's sort, per row.

A table's rows (a CSV of id, count, score, text, label: the benchmark
tables' shape) are encoded as Examples and cut into batches; each round
runs, with and without the row digests (which first alternates), Pack
(`shuffle_steps.PackFn`) over every batch and then every bucket's sort
(`shuffle_rows.CutBucketFn`). Without: Pack's digests replaced by None
(as for units of chunks), the sort's writer given the rows as they are
(`shuffle_packets._Digesting` passing them through) and the plans'
digests 0. CPU seconds of this process (`time.process_time`), medians.

Usage:
  python benchmarks/bench_shuffle_digest.py /path/to/table.csv --rounds 5
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import statistics
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
def _without_digests():
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


def _pack(batches, tuning) -> tuple[float, list]:
    pack = shuffle_steps.PackFn("bench", (("train", 1.0),), True, tuning,
                                hash_buckets=tuning.hash_buckets)
    pack.setup()
    started = time.process_time()
    outputs = [output for batch in batches for output in pack.process(batch)]
    return time.process_time() - started, outputs


def _sort(outputs, tuning) -> float:
    """CPU seconds of every bucket's sort (`CutBucketFn`)."""
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
    step = shuffle_rows.CutBucketFn(tuning)
    step.setup()
    started = time.process_time()
    for key, packets in buckets.items():
        for _ in step.process((key, [plans[key], *packets])):
            pass
    return time.process_time() - started


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("table")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch-rows", type=int, default=4096)
    args = parser.parse_args(argv)
    tuning = ShardTuning()
    batches = _batches(args.table, args.batch_rows)
    rows = sum(len(batch) for batch in batches)
    figures: dict[str, list[float]] = {"pack": [], "pack_bare": [], "sort": [], "sort_bare": []}
    for round_number in range(args.rounds):
        # which goes first alternates: neither gets the warmer caches
        for bare in (False, True) if round_number % 2 else (True, False):
            suffix = "_bare" if bare else ""
            with _without_digests() if bare else contextlib.nullcontext():
                seconds, outputs = _pack(batches, tuning)
                figures[f"pack{suffix}"].append(seconds)
                figures[f"sort{suffix}"].append(_sort(outputs, tuning))
    ns = {name: statistics.median(values) * 1e9 / rows for name, values in figures.items()}
    print(f"{rows} rows, {len(batches)} batches of {args.batch_rows}, "
          f"{tuning.hash_buckets} buckets, {args.rounds} rounds (medians, CPU ns per row)")
    for step in ("pack", "sort"):
        mine, bare = ns[step], ns[f"{step}_bare"]
        print(f"{step}: with digests {mine:.0f}, without {bare:.0f}: {mine - bare:+.0f} "
              f"({(mine - bare) / bare:+.1%})")
    both, bare = ns["pack"] + ns["sort"], ns["pack_bare"] + ns["sort_bare"]
    print(f"pack + sort: {both - bare:+.0f} ns per row ({(both - bare) / bare:+.1%})")


if __name__ == "__main__":
    main()
