"""What the statistics cost per row in the convert step: `StatisticsAccumulator` on the table's batches.

    python benchmarks/bench_stats_batch.py [--rows 10000] [--batches 20] [--repeat 7]
        [--splits 1|3] [--text-column]

Makes batches of the end-to-end benchmark's five-column table
(`e2e_workloads`: shuffled ids, counts, float scores, 20-120 characters
of text, a label of 10) in the form the native convert kernel hands them
to the statistics (int64 and float64 arrays, vocabulary ids, a list of
str), and times `StatisticsAccumulator.add` of each batch and the
`flush` of the run, as the build cache's convert step does (with glibc's
malloc tuned as the convert step tunes it), best of `--repeat`. Prints
microseconds per row overall (the five columns) and per feature, and for
a bytes feature of the same texts (whose histogram is of value lengths);
run it with another checkout first on PYTHONPATH to compare, alternating.
`--splits 3` spreads the rows over three splits (80/10/10, as
bench_piece_stats.py), so that each batch is split per feature first;
`--text-column` gives the text as the `TextColumn` the native kernels make.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from e2e_workloads import LABELS, _text  # noqa: E402

from recordforge.schemas.stats import StatisticsPlan  # noqa: E402
from recordforge.schemas.stats.batches import StatisticsAccumulator  # noqa: E402
from recordforge.schemas.text_column import TextColumn  # noqa: E402
from recordforge.transforms.malloc_tuning import keep_freed_memory  # noqa: E402

PLAN = StatisticsPlan((("id", "numeric", "int64", False, None),
                       ("count", "numeric", "int64", False, None),
                       ("score", "numeric", "float", False, None),
                       ("text", "string", "bytes", False, None),
                       ("label", "vocabulary", "int64", False, LABELS)))
# Not a column of the table: its texts as a bytes feature, timed alone.
BYTES = ("blob", "bytes", "bytes", False, None)
SPLITS = {1: (("train", 1.0),), 3: (("train", 0.8), ("validation", 0.1), ("test", 0.1))}


def make_batches(rows: int, batches: int, seed: int = 7) -> list[dict]:
    rng = random.Random(seed)
    ids = list(range(rows * batches))
    rng.shuffle(ids)
    out = []
    for start in range(0, rows * batches, rows):
        out.append({
            "id": np.array(ids[start:start + rows], dtype=np.int64),
            "count": np.array([rng.randint(-1000, 100_000) for _ in range(rows)], dtype=np.int64),
            "score": np.array([round(rng.uniform(-100.0, 100.0), 4) for _ in range(rows)]),
            "text": [_text(rng) for _ in range(rows)],
            "label": np.array([rng.randrange(len(LABELS)) for _ in range(rows)], dtype=np.int64),
        })
        out[-1]["blob"] = [text.encode("utf-8") for text in out[-1]["text"]]
    return out


def run(batches: list[dict], only: str | None = None, splits: int = 1) -> float:
    """Seconds to add every batch and flush, one accumulator."""
    plan = PLAN if only is None else StatisticsPlan(
        tuple(feature for feature in PLAN.features + (BYTES,) if feature[0] == only))
    accumulator = StatisticsAccumulator(plan, [name for name, _ in SPLITS[splits]])
    split_of = np.random.default_rng(7).choice(
        splits, size=len(batches[0]["id"]), p=[weight for _, weight in SPLITS[splits]])
    started = time.process_time()
    for batch in batches:
        accumulator.add(lambda name, batch=batch: ("scalars", batch[name]), split_of)
    accumulator.flush()
    return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000, help="rows a batch")
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--splits", type=int, choices=sorted(SPLITS), default=1)
    parser.add_argument("--text-column", action="store_true",
                        help="the text as a TextColumn (as the native kernels give it)")
    args = parser.parse_args()
    keep_freed_memory()  # as the convert step does (transforms/to_examples.py)
    batches = make_batches(args.rows, args.batches)
    if args.text_column:
        for batch in batches:
            batch["text"] = TextColumn.of(batch["text"])
    total = args.rows * args.batches
    for only in (None, "id", "count", "score", "text", "label", "blob"):
        best = min(run(batches, only, args.splits) for _ in range(args.repeat))
        print(f"{only or 'all':<6} {best / total * 1e6:7.3f} µs/row (best of {args.repeat})")


if __name__ == "__main__":
    main()
