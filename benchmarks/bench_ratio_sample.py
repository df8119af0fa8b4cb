"""How well a gzip split's ratio sample estimates its compressed size, by
the share of rows it samples.

    python benchmarks/bench_ratio_sample.py            # about a minute

A shuffled gzip split's shard count is ceil(estimated bytes on disk /
shard_size), the estimate being total framed bytes × the ratio of its
ratio sample compressed as a shard is (`tuning.RATIO_SAMPLE_BOUND`,
`bucket_output.gzip_written_size`). This takes rows of words and hex
(gzip shrinks them about 2x), frames them, and for splits of several sizes
compares the whole split compressed in digest order (what its shards
hold, give or take a member per shard) with the estimate from the rows
whose digest is below 2^128 / 256, / 64 and / 16, over 30 dataset names
(each salts the digests, so each draws another sample). Prints the mean,
spread and largest error of each: a positive error means more shards
than the rows need.
"""

from __future__ import annotations

import random
import statistics

from recordforge.transforms import tfrecord
from recordforge.transforms.writer.bucket_output import gzip_written_size
from recordforge.transforms.splits import SplitAssigner
from recordforge.transforms.writer.ratio_sample import estimated_written_bytes

SIZES = (2_000, 10_000, 50_000)
SHARES = (256, 64, 16)
NAMES = 30
LEVEL = tfrecord.DEFAULT_GZIP_LEVEL


def _rows(count: int) -> list[bytes]:
    rng = random.Random(11)
    words = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta"]
    return [(" ".join(rng.choice(words) for _ in range(rng.randint(5, 60))) + " "
             + rng.randbytes(rng.randint(1, 100)).hex()).encode() for _ in range(count)]


def _errors(framed: list[bytes], share: int) -> list[float]:
    total = sum(map(len, framed))
    errors = []
    for name in range(NAMES):
        digests, _ = SplitAssigner(f"dataset-{name}", [("train", 1.0)]).hash_rows(framed)
        ordered = sorted(zip(digests, framed))
        actual = gzip_written_size(ordered, LEVEL)
        bound = (1 << 128) // share
        sample = [row for row in ordered if int.from_bytes(row[0], "big") < bound]
        estimate = estimated_written_bytes(total, gzip_written_size(sample, LEVEL),
                                           sum(len(record) for _, record in sample))
        errors.append(estimate / actual - 1)
    return errors


def main() -> None:
    print("| split | sampled | mean error | spread (sd) | largest |")
    print("|---|---|---:|---:|---:|")
    for count in SIZES:
        framed = [tfrecord.frame_records([row]) for row in _rows(count)]
        megabytes = sum(map(len, framed)) / 1e6
        for share in SHARES:
            errors = _errors(framed, share)
            print(f"| {count:,} rows, {megabytes:.1f} MB | 1/{share} | {statistics.mean(errors):+.2%}"
                  f" | {statistics.pstdev(errors):.2%} | {max(errors, key=abs):+.2%} |")


if __name__ == "__main__":
    main()
