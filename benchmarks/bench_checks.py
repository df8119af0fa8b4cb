"""Throughput of the row checks: RowEncoder.encode and RowsToExamples.

The row: two int64 columns, a float, a 20-120 character string and a label
with a vocabulary, as CSV gives them (all text) and as JSONL gives them
(typed values). Prints rows/s for
  1. RowEncoder.convert and .encode (the row path) as plain functions (one
     core), and RowEncoder.encode_columns (the column path) on batches of
     1,000 and 10,000 rows (a Parquet record batch, a 1 MB CSV block);
  2. RowsToExamples on the DirectRunner with one worker, net of a baseline
     pipeline that generates and counts the same batches without converting.
Targets: >= 150,000 rows/s for (1) encode, >= 120,000 rows/s for (2).
Figures are CPU time of this process (the in-memory DirectRunner runs in it).

    python benchmarks/bench_checks.py [--rows 300000] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import random
import time

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from recordforge.schemas.feature_config import parse_features
from recordforge.schemas.row_encoder import RowEncoder
from recordforge.transforms.readers.rows import SourceRow
from recordforge.transforms.to_examples import RowsToExamples

FEATURES = {
    "id": {"type": "int64"},
    "count": {"type": "int64", "min": 0},
    "score": {"type": "float"},
    "text": {"type": "string", "max_bytes": 1000},
    "label": {"type": "int64", "vocabulary": ["bird", "cat", "dog", "fish", "horse"]},
}
LABELS = FEATURES["label"]["vocabulary"]
BATCH_SIZE = 1000
WORDS = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota")


def make_row(i: int, typed: bool) -> dict:
    rng = random.Random(i)
    text = ""
    target = rng.randint(20, 120)
    while len(text) < target:
        text += rng.choice(WORDS) + " "
    text = text[:target]
    count = rng.randrange(10_000)
    score = round(rng.uniform(-100, 100), 4)
    if typed:
        return {"id": i, "count": count, "score": score, "text": text,
                "label": LABELS[i % len(LABELS)]}
    return {"id": str(i), "count": str(count), "score": repr(score), "text": text,
            "label": LABELS[i % len(LABELS)]}


# CPU time of this process rather than wall time: the figures are per core,
# and on a shared machine wall time mostly measures the neighbours.
_clock = time.process_time


def rows_per_second(function, rows, repeats=3) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = _clock()
        for row in rows:
            function(row)
        best = min(best, _clock() - start)
    return len(rows) / best


def bench_plain(num_rows: int, profile: bool) -> None:
    encoder = RowEncoder(parse_features(FEATURES))
    for typed in (False, True):
        rows = [make_row(i, typed) for i in range(num_rows)]
        kind = "JSONL-typed" if typed else "CSV-text"
        convert = rows_per_second(encoder.convert, rows)
        encode = rows_per_second(encoder.encode, rows)
        print(f"plain {kind:11s}  convert {convert:10,.0f} rows/s   "
              f"encode {encode:10,.0f} rows/s   ({1e6 / encode:.2f} us/row)")
        for batch_size in (1_000, 10_000):
            batches = [{name: [row[name] for row in rows[start:start + batch_size]]
                        for name in FEATURES}
                       for start in range(0, len(rows), batch_size)]
            columns = rows_per_second(
                lambda batch: encoder.encode_columns(batch.__getitem__,
                                                     len(batch["id"])), batches) * batch_size
            print(f"      {kind:11s}  encode_columns, {batch_size:6,} rows a batch "
                  f"{columns:10,.0f} rows/s   ({1e6 / columns:.2f} us/row, "
                  f"{columns / encode:.1f}x encode)")
    if profile:
        rows = [make_row(i, False) for i in range(num_rows)]
        profiler = cProfile.Profile()
        profiler.enable()
        for row in rows:
            encoder.encode(row)
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(8)


class _MakeBatch(beam.DoFn):
    """Batch index -> RowBatch of CSV-like rows. A pool of batches is built once
    per worker, so the baseline (generating and counting) stays small next to
    the conversion being measured."""

    _POOL = 10

    def setup(self):
        self._batches = [[SourceRow("bench.csv", i + 2, make_row(i, False))
                          for i in range(start, start + BATCH_SIZE)]
                         for start in range(0, self._POOL * BATCH_SIZE, BATCH_SIZE)]

    def process(self, index):
        yield self._batches[index % self._POOL]


def _run_pipeline(num_rows: int, convert: bool) -> float:
    options = PipelineOptions(["--direct_num_workers=1", "--direct_running_mode=in_memory"])
    specs = parse_features(FEATURES)
    start = _clock()
    with beam.Pipeline(options=options) as pipeline:
        batches = (pipeline | beam.Create(range(num_rows // BATCH_SIZE))
                   | "Make" >> beam.ParDo(_MakeBatch()))
        if convert:
            batches = (batches | RowsToExamples(specs, {}, key_column="id")).examples
        _ = batches | beam.Map(len) | beam.CombineGlobally(sum)
    return _clock() - start


def bench_beam(num_rows: int) -> None:
    baseline = min(_run_pipeline(num_rows, convert=False) for _ in range(2))
    total = min(_run_pipeline(num_rows, convert=True) for _ in range(2))
    print(f"beam  DirectRunner 1 worker: pipeline {num_rows / total:10,.0f} rows/s; "
          f"RowsToExamples net {num_rows / (total - baseline):10,.0f} "
          f"rows/s (CPU s: baseline {baseline:.2f}, with conversion {total:.2f})")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--profile", action="store_true", help="cProfile the plain encode")
    parser.add_argument("--skip-beam", action="store_true")
    args = parser.parse_args(argv)
    bench_plain(args.rows, args.profile)
    if not args.skip_beam:
        bench_beam(args.rows)


if __name__ == "__main__":
    main()
