"""The native row path against pure Python: the same table builds, alternating, in one run.

    python benchmarks/bench_native.py                      # 3.8M rows (~400 MB CSV) and 200k rows
    python benchmarks/bench_native.py --rows 200000 --repeat 3
    python benchmarks/bench_native.py --baseline /path/to/old/checkout   # and the old code's native path
    python benchmarks/bench_native.py --parquet            # and the same rows from Parquet
    python benchmarks/bench_native.py --jsonl              # and the same rows from JSONL
    python benchmarks/bench_native.py --rows 3800000 --table numbers --steady --repeat 4

Generates the end-to-end benchmark's five-column table (`e2e_workloads.make_table`:
id, count, score, 20-120 characters of text, a label of 10) and builds it
with `recordforge build -- --direct_running_mode=in_memory --direct_num_workers=1`,
once with the extension and once with ``RECORDFORGE_PURE_PYTHON=1``, in
rounds (native, python, native, python ...), so that a slow spell of the
shared machine falls on both. Per build: wall time, CPU seconds of the
process tree (`e2e_measure.measure`, verification included), MB of CSV per
CPU second, peak RSS; and the sha256 of every shard, dead-letter file and
stats.json, which must be equal on both paths (the run fails otherwise).
With ``--baseline DIR`` (a directory holding another checkout as
``DIR/recordforge``, with its extension built), each round also builds with
that code's native path, first, and its files must be the same too.
With ``--parquet`` each round also builds the same rows from the table's
Parquet file (`make_table` writes both), native and pure Python; their
figure is MB of the CSV per CPU second too, so the two sources compare.
``--jsonl`` does the same with the rows written as JSONL (`write_jsonl`:
one object per line, as ``json.dumps`` writes it), and with ``--baseline``
the other code's JSONL build too.
``--table numbers`` builds the table issue 37 describes instead
(`e2e_workloads.make_numbers_table`: id, an int in ±10^9, a double, 20-120
random letters, a label 0-9; 417 MB of CSV at 3.8M rows).
``--steady`` also builds, in every round and on every path, a 50-row
table from the same generator and schema (the fixed cost of a build:
start-up, the graph and runner, publishing) and prints the steady-state
rate beside the whole build's: MB per CPU second of what the large build
costs beyond that small one. Verification is in both. The small build
reads its shards back in its own process; the large one starts reader
processes for that, whose start-up is counted as the large build's own
work, so the rate errs low.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import pathlib
import shutil
import statistics
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from e2e_measure import child_env, compile_recordforge, measure  # noqa: E402
from e2e_workloads import config_yaml, make_numbers_table, make_table  # noqa: E402

# The tables `--table` chooses: their generators (CSV and Parquet workloads).
TABLES = {"table": make_table, "numbers": make_numbers_table}
# Rows of the small build that gives a path's fixed cost (`--steady`).
STEADY_BASE_ROWS = 50

# `recordforge build` as the console script runs it (its process tuning
# included: the heap kept out of the collector's passes, one BLAS thread),
# importing recordforge from the PYTHONPATH a path gives.
BUILD = ("-m", "recordforge.pipelines.cli", "build")


def _shards(output: pathlib.Path) -> dict[str, str]:
    """sha256 of every shard, dead-letter file and stats.json written."""
    files = [path for path in sorted(output.rglob("*")) if path.is_file() and (
        ".tfrecord" in path.name or path.suffix == ".jsonl" or path.name == "stats.json")]
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in files}


def _env(pythonpath: str | None) -> dict:
    """The builds' environment (with bytecode caches, as an installed
    package has them: `e2e_measure.child_env`), importing recordforge from
    `pythonpath` when given."""
    env = child_env()
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    return env


def _build(config: pathlib.Path, output: pathlib.Path, pure: bool,
           pythonpath: str | None = None):
    shutil.rmtree(output, ignore_errors=True)
    env = _env(pythonpath)
    env["RECORDFORGE_PURE_PYTHON"] = "1" if pure else "0"
    result = measure([sys.executable, *BUILD, str(config), "--output", str(output), "--",
                      "--direct_running_mode=in_memory", "--direct_num_workers=1"], env=env)
    if result.returncode != 0:
        raise SystemExit(f"build failed:\n{result.stderr_tail}")
    return result, _shards(output)


def write_jsonl(parquet_workload, path: pathlib.Path):
    """The table's rows as JSONL (from its Parquet file, a row group at a
    time), and its workload."""
    import pyarrow.parquet as pq

    with open(path, "w", encoding="utf-8") as out:
        for batch in pq.ParquetFile(parquet_workload.path).iter_batches():
            out.writelines(json.dumps(row) + "\n" for row in batch.to_pylist())
    return dataclasses.replace(parquet_workload, name="table-jsonl", source_type="jsonl",
                               path=str(path), input_bytes=path.stat().st_size)


def _configs(scratch: pathlib.Path, name: str, rows: int, output: pathlib.Path,
             parquet: bool, jsonl: bool, table: str = "table"):
    """The table's workloads written under `scratch`/`name` and a config per
    source type; returns both, each by source type (the CSV's always)."""
    csv_workload, parquet_workload = TABLES[table](scratch / name, rows)
    workloads = {"csv": csv_workload}
    if parquet:
        workloads["parquet"] = parquet_workload
    if jsonl:
        workloads["jsonl"] = write_jsonl(parquet_workload, scratch / name / "table.jsonl")
    configs = {}
    for source_type, workload in workloads.items():
        configs[source_type] = scratch / f"{name}-{source_type}.yaml"
        configs[source_type].write_text(config_yaml(workload, str(output), "none"))
    return workloads, configs


def run_table(scratch: pathlib.Path, rows: int, repeat: int, baseline: str | None,
              parquet: bool = False, jsonl: bool = False, table: str = "table",
              steady: bool = False) -> None:
    output = scratch / "out"
    workloads, configs = _configs(scratch, f"{table}{rows}", rows, output, parquet, jsonl, table)
    if jsonl:
        print(f"(JSONL: {workloads['jsonl'].input_bytes / 1e6:,.1f} MB)")
    # A small table of the same kind, for each path's fixed cost.
    small = (_configs(scratch, f"{table}{STEADY_BASE_ROWS}", STEADY_BASE_ROWS, output, parquet,
                      jsonl, table)[1] if steady else {})
    # Every path's figure is MB of the CSV per CPU second: the Parquet
    # builds read the same rows.
    megabytes = workloads["csv"].input_bytes / 1e6
    print(f"\n{rows:,} rows, {megabytes:,.1f} MB of CSV"
          + (f" ({workloads['parquet'].input_bytes / 1e6:,.1f} MB of Parquet)" if parquet else ""))
    print(f"{'path':<16} {'wall s':>7} {'cpu s':>7} {'MB/cpu-s':>9} {'rows/s':>9} {'peak MB':>8}"
          + (f" {'fixed cpu s':>11} {'steady MB/cpu-s':>15}" if steady else ""))
    # (name, source type, pure Python, PYTHONPATH)
    paths = [("native", "csv", False, None), ("python", "csv", True, None)]
    if parquet:
        paths[1:1] = [("parquet native", "parquet", False, None),
                      ("parquet python", "parquet", True, None)]
    if jsonl:
        paths[1:1] = [("jsonl native", "jsonl", False, None),
                      ("jsonl python", "jsonl", True, None)]
    if baseline is not None:
        paths.insert(0, ("baseline", "csv", False, baseline))
        if parquet:
            paths.insert(1, ("parquet baseline", "parquet", False, baseline))
        if jsonl:
            paths.insert(1, ("jsonl baseline", "jsonl", False, baseline))
    reference: dict[str, dict] = {}
    steady_rates: dict[str, list[float]] = {}
    for _ in range(repeat):
        for name, source_type, pure, pythonpath in paths:
            fixed = (_build(small[source_type], output, pure, pythonpath)[0].cpu_s
                     if steady else None)
            result, shards = _build(configs[source_type], output, pure, pythonpath)
            # Each source's builds must write the same files.
            if reference.setdefault(source_type, shards) != shards:
                raise SystemExit("the paths (or two runs) wrote different files")
            line = (f"{name:<16} {result.wall_s:>7.2f} "
                    f"{result.cpu_s:>7.2f} {megabytes / result.cpu_s:>9.1f} "
                    f"{rows / result.wall_s:>9,.0f} {result.peak_rss / 1e6:>8.0f}")
            if fixed is not None:
                beyond = result.cpu_s - fixed
                # (a table too small to cost more than the small one has no rate)
                rate = megabytes / beyond if beyond > 0 else None
                if rate is not None:
                    steady_rates.setdefault(name, []).append(rate)
                line += f" {fixed:>11.2f} " + (f"{rate:>15.1f}" if rate is not None else f"{'-':>15}")
            print(line)
    for name, rates in steady_rates.items():
        print(f"{name}: steady state {statistics.median(rates):.1f} MB/cpu-s "
              f"(median of {len(rates)})")
    for source_type, files in reference.items():
        print(f"every {source_type} build wrote the same {len(files)} shards, dead-letter "
              "files and stats.json (sha256)")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="*", default=[3_800_000, 200_000])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--scratch", type=pathlib.Path)
    parser.add_argument("--baseline", help="a PYTHONPATH whose recordforge is the code to "
                        "compare with (its native path)")
    parser.add_argument("--parquet", action="store_true",
                        help="also build the same rows from Parquet, native and pure Python")
    parser.add_argument("--jsonl", action="store_true",
                        help="also build the same rows from JSONL, native and pure Python")
    parser.add_argument("--table", choices=sorted(TABLES), default="table",
                        help="table: the end-to-end benchmark's; numbers: issue 37's")
    parser.add_argument("--steady", action="store_true",
                        help="also the steady-state rate: beyond a 50-row build's CPU")
    args = parser.parse_args(argv)
    for pythonpath in dict.fromkeys((None, args.baseline)):
        compile_recordforge(_env(pythonpath))
    scratch = args.scratch or pathlib.Path(tempfile.mkdtemp(prefix="bench_native_"))
    try:
        for rows in args.rows:
            run_table(scratch, rows, args.repeat, args.baseline, args.parquet, args.jsonl,
                      args.table, args.steady)
    finally:
        if args.scratch is None:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
