"""A text partial's way from the convert step to the merge: its making, the build cache's JSON text, the merge.

    python benchmarks/bench_text_partials.py [--rows 10000] [--batches 20] [--repeat 9]

Makes batches of the end-to-end benchmark's free text (`e2e_workloads`:
20-120 characters of words, each batch with one value twice, as the
benchmark table's batches hold one repeat: its top values keep a count,
so its partial waits for the canonical merge) as the `TextColumn` the
native kernels give, and times, best of `--repeat`, per partial (one per
batch: `StatisticsAccumulator` flushed after each, as an image source's
batch gives it): `StatisticsAccumulator.add` of each batch (the text kernel), the partial's
JSON text as the build cache writes it, and `MergingStatistics` of all
partials to the stats.json entry (the merge order, the digest, the union).
Run it with another checkout first on PYTHONPATH to compare, alternating
(a checkout without `partial_json_text` gets the cache's text as it wrote
it then).

    python benchmarks/bench_text_partials.py --kernels BASE.so NEW.so

times the text kernel alone (`text_column_partial` of each batch) in two
builds of the extension loaded side by side, alternating batch by batch,
in thread CPU time: the ratio holds to about half a percent on a loaded
machine, where separate processes differ by several.
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from e2e_workloads import _text  # noqa: E402

from recordforge.schemas.stats import MergingStatistics, StatisticsPlan  # noqa: E402
from recordforge.schemas.stats.batches import StatisticsAccumulator  # noqa: E402
from recordforge.schemas.stats.distinct import THETA_LG_K  # noqa: E402
from recordforge.schemas.stats.frequent import FREQUENT_CAPACITY, MAX_VALUE_BYTES  # noqa: E402
from recordforge.schemas.text_column import TextColumn  # noqa: E402
from recordforge.transforms import merge_statistics  # noqa: E402
from recordforge.transforms.cache import pieces  # noqa: E402

PLAN = StatisticsPlan((("text", "string", "bytes", False, None),))
json_text = getattr(merge_statistics, "partial_json_text", None) or (
    lambda value: pieces._json_text(merge_statistics.partial_to_json(value)))


def make_batches(rows: int, batches: int, seed: int = 7) -> list[TextColumn]:
    rng = random.Random(seed)
    out = []
    for _ in range(batches):
        texts = [_text(rng) for _ in range(rows)]
        texts[1] = texts[0]
        out.append(TextColumn.of(texts))
    return out


def run(batches: list[TextColumn]) -> tuple[float, float, float]:
    """CPU seconds to make the partials, their cache text, and their merge."""
    split_of = np.zeros(len(batches[0]), dtype=np.int64)
    started = time.process_time()
    accumulator = StatisticsAccumulator(PLAN, ["train"])
    partials = []
    for batch in batches:
        accumulator.add(lambda name, batch=batch: ("scalars", batch), split_of)
        partials += accumulator.flush()
    made = time.process_time()
    for partial in partials:
        json_text(partial)
    cached = time.process_time()
    merging = MergingStatistics()
    for _, stats in partials:
        merging.add(stats)
    merging.result().to_json()
    return made - started, cached - made, time.process_time() - cached


def extension(path: str):
    """The extension built at `path`, loaded as a module of its own."""
    spec = importlib.util.spec_from_file_location("recordforge._native", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def kernel_times(batches: list[TextColumn], paths: list[str], repeat: int) -> list[float]:
    """ns a value of `text_column_partial` in each build at `paths`, taking
    turns batch by batch (who goes first alternating), their results held
    equal."""
    builds = [extension(path) for path in paths]
    spent = [0] * len(builds)
    for round_ in range(repeat):
        for batch in batches:
            results = []
            for at in (range(len(builds)) if round_ % 2 else reversed(range(len(builds)))):
                started = time.thread_time_ns()
                results.append(builds[at].text_column_partial(batch.data, batch.offsets, FREQUENT_CAPACITY,
                                                              MAX_VALUE_BYTES, THETA_LG_K))
                spent[at] += time.thread_time_ns() - started
            if any(result != results[0] for result in results):
                raise SystemExit("the builds' partials differ")
    values = repeat * sum(len(batch) for batch in batches)
    return [nanoseconds / values for nanoseconds in spent]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000, help="rows a batch")
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--kernels", nargs=2, metavar=("BASE", "NEW"),
                        help="two builds of the extension (.so) whose text kernels to compare")
    args = parser.parse_args()
    batches = make_batches(args.rows, args.batches)
    if args.kernels:
        base, new = kernel_times(batches, args.kernels, args.repeat)
        print(f"ns a value of the text kernel: base {base:.1f}, new {new:.1f}, new/base {new / base:.3f} "
              f"({args.repeat} rounds, alternating)")
        return
    best = [min(times) for times in zip(*(run(batches) for _ in range(args.repeat)))]
    made, cached, merged = (seconds / args.batches * 1e6 for seconds in best)
    print(f"µs a partial of {args.rows} rows: made {made:.0f}, cache text {cached:.0f}, "
          f"merged {merged:.0f}, together {made + cached + merged:.0f} (best of {args.repeat})")


if __name__ == "__main__":
    main()
