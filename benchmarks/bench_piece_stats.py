"""What a cache piece's statistics cost per batch: the text partials of small (JSONL) batches.

    python benchmarks/bench_piece_stats.py [--rows 1000] [--batches 1000] [--repeat 5]

Makes the text partials a unit of the end-to-end benchmark's table gives
(`bench_stats_batch.make_batches`: 20-120 characters of text per row,
mostly distinct; three splits as the bench config's 80/10/10), one per
split, feature and batch of `--rows` rows as `StatisticsAccumulator` gives
them flushed after each batch (a piece now gets one per split and feature
for its whole unit: this is many units' worth), and times what
`PieceWriter` does with them: `add` of each (its JSON form)
and the summary's JSON at `commit` (no runs), best of `--repeat`, CPU s,
with the cyclic collector tuned as the convert step tunes it.
Run it with another checkout first on PYTHONPATH to compare, alternating.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import fsspec
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_stats_batch import PLAN, make_batches  # noqa: E402

from recordforge.schemas.stats.batches import StatisticsAccumulator  # noqa: E402
from recordforge.transforms.cache.pieces import PieceWriter  # noqa: E402
from recordforge.transforms.gc_tuning import relax_young_collections  # noqa: E402
from recordforge.transforms.splits import SplitAssigner  # noqa: E402
from recordforge.transforms.writer import ShardTuning  # noqa: E402

SPLITS = (("train", 0.8), ("validation", 0.1), ("test", 0.1))
NAME = "a" * 40 + ".00000-of-00001.piece"


def partials(rows: int, batches: int) -> list:
    """Every batch's own partials, one per split and feature."""
    accumulator = StatisticsAccumulator(PLAN, [name for name, _ in SPLITS])
    rng = np.random.default_rng(7)
    out = []
    for batch in make_batches(rows, batches):
        split_of = rng.choice(len(SPLITS), size=rows, p=[weight for _, weight in SPLITS])
        accumulator.add(lambda name, batch=batch: ("scalars", batch[name]), split_of)
        out.extend(accumulator.flush())
    return out


def run(values: list, directory: str) -> float:
    """CPU seconds of one piece's `add` of every partial and its `commit`."""
    tuning = ShardTuning()
    writer = PieceWriter(fsspec.filesystem("file"), directory, NAME,
                         SplitAssigner("bench", SPLITS), shuffle=True,
                         sample_every=tuning.sample_every(), prefix_len=tuning.prefix_len,
                         index_every=tuning.index_every)
    started = time.process_time()
    for value in values:
        writer.add("statistics", value)
    writer.commit()
    return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1000, help="rows a batch")
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    relax_young_collections()  # as the convert step's setup does
    values = partials(args.rows, args.batches)
    with tempfile.TemporaryDirectory() as directory:
        best = min(run(values, directory) for _ in range(args.repeat))
    rows = args.rows * args.batches
    print(f"{len(values)} partials of {rows:,} rows: best {best:.3f} CPU s "
          f"({best / rows * 1e6:.2f} µs a row)")


if __name__ == "__main__":
    main()
