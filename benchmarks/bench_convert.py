"""The convert call and the row digests on real CSV runs: best of N, per row.

    python benchmarks/bench_convert.py --rows 200000 --repeat 7
    python benchmarks/bench_convert.py --table /tmp/dir/table.csv

Reads the end-to-end benchmark's five-column table (`e2e_workloads.make_table`,
keyed by ``id``, labels counted over one split as in a build) as the CSV
reader cuts it (`CsvRunBatch` runs), then times, on every run, the steps
of `to_examples.BatchConversion` that turn a run into a `HashedExamples`:
``read``: `iter_csv` cutting the table into runs (with the native check
of each run where the extension loads); ``convert``: `BatchConverter.convert_observed_batch`; ``digests``: the
rows' digests and split indices (`BatchConversion._count`); ``both``: the
two together, which is what a build pays whichever of them hashes;
``read+convert``: reading and converting, which a build pays for each run
(the work the reader and the convert call could share); ``kernel``:
the native convert call alone (`NativeRows.convert`, which the convert
step wraps), on the CSV runs and, with ``--parquet``, on the same rows'
Parquet record batches (``kernel-parquet``), where the extension loads. The
statistics are left out (their own benchmark: bench_statistics.py). Only
methods every version of these classes has are called, so the script
times an older checkout the same way (``PYTHONPATH=/old/checkout``).
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from e2e_workloads import LABELS, TABLE_FEATURES, make_table  # noqa: E402


def _batches(table: str) -> list:
    from recordforge.transforms.readers.csv import iter_csv
    return [item for item in iter_csv(table, columns=True) if not isinstance(item, dict)]


def _conversion():
    from recordforge.schemas.feature_config import parse_features
    from recordforge.transforms.to_examples import BatchConversion, LabelCounting
    specs = parse_features({name: {**body, "from": name} for name, body in TABLE_FEATURES.items()},
                           nested=False)
    counting = LabelCounting("label", tuple(LABELS), "bench_table", (("train", 1.0),))
    conversion = BatchConversion(specs, {}, "id", counting)
    conversion.setup()
    return conversion


def _parquet_batches(parquet: str) -> list:
    from recordforge.transforms.readers.parquet import iter_parquet
    return [item for item in iter_parquet(parquet, columns=True) if not isinstance(item, dict)]


def _kernel(converter):
    """The converter's native convert call, or None without the extension
    (or in a checkout from before it)."""
    native = getattr(converter, "_native", None)
    return native if getattr(native, "_native", None) is not None else None


def _best(job, batches, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.process_time()
        for batch in batches:
            job(batch)
        best = min(best, time.process_time() - started)
    return best


def _best_read(table: str, repeat: int, each=None) -> float:
    """The best CPU time of reading `table` into runs (and `each` of every run)."""
    from recordforge.transforms.readers.csv import iter_csv
    best = float("inf")
    for _ in range(repeat):
        started = time.process_time()
        for item in iter_csv(table, columns=True):
            if each is not None and not isinstance(item, dict):
                each(item)
        best = min(best, time.process_time() - started)
    return best


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--table", help="an existing table.csv (else one is generated)")
    parser.add_argument("--parquet", action="store_true",
                        help="also time the kernel on the table's Parquet batches")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        workloads = None if args.table else make_table(pathlib.Path(scratch), args.rows)
        table = args.table or workloads[0].path
        batches = _batches(table)
        parquet = (_parquet_batches(workloads[1].path if workloads
                                    else str(pathlib.Path(table).with_suffix(".parquet")))
                   if args.parquet else [])
        conversion = _conversion()
        converter = conversion._converter
        rows = sum(map(len, batches))

        def convert(batch):
            return converter.convert_observed_batch(batch, "label", tuple(LABELS))

        timings = {"read": _best_read(table, args.repeat),
                   "read+convert": _best_read(table, args.repeat, convert)}
    converted = [convert(batch) for batch in batches]
    timings |= {
        "convert": _best(convert, batches, args.repeat),
        "digests": _best(lambda done: conversion._count(done[0], done[1]), converted,
                         args.repeat),
        "both": _best(lambda batch: conversion._count(*convert(batch)[:2]), batches,
                      args.repeat),
    }
    kernel = _kernel(converter)
    if kernel is not None:
        timings["kernel"] = _best(kernel.convert, batches, args.repeat)
        if parquet:
            timings["kernel-parquet"] = _best(kernel.convert, parquet, args.repeat)
    import recordforge
    print(f"{recordforge.__file__}: {rows} rows in {len(batches)} runs, best of {args.repeat}")
    for name, seconds in timings.items():
        print(f"  {name:14} {seconds:7.3f} s  {seconds / rows * 1e9:6.0f} ns/row")


if __name__ == "__main__":
    main()
