"""The native row path against pure Python: the same table builds, alternating, in one run.

    python benchmarks/bench_native.py                      # 3.8M rows (~400 MB CSV) and 200k rows
    python benchmarks/bench_native.py --rows 200000 --repeat 3
    python benchmarks/bench_native.py --baseline /path/to/old/checkout   # and the old code's native path
    python benchmarks/bench_native.py --parquet            # and the same rows from Parquet
    python benchmarks/bench_native.py --jsonl              # and the same rows from JSONL

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
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import pathlib
import shutil
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from e2e_measure import measure  # noqa: E402
from e2e_workloads import config_yaml, make_table  # noqa: E402

BUILD = ("import sys; from recordforge.pipelines import build; "
         "sys.exit(build.run(sys.argv[1:]))")


def _shards(output: pathlib.Path) -> dict[str, str]:
    """sha256 of every shard, dead-letter file and stats.json written."""
    files = [path for path in sorted(output.rglob("*")) if path.is_file() and (
        ".tfrecord" in path.name or path.suffix == ".jsonl" or path.name == "stats.json")]
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in files}


def _build(config: pathlib.Path, output: pathlib.Path, pure: bool,
           pythonpath: str | None = None):
    shutil.rmtree(output, ignore_errors=True)
    env = {**os.environ, "RECORDFORGE_PURE_PYTHON": "1" if pure else "0"}
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    result = measure([sys.executable, "-c", BUILD, str(config), "--output", str(output), "--",
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


def run_table(scratch: pathlib.Path, rows: int, repeat: int, baseline: str | None,
              parquet: bool = False, jsonl: bool = False) -> None:
    csv_workload, parquet_workload = make_table(scratch / f"table{rows}", rows)
    output = scratch / "out"
    configs = {}
    workloads = [csv_workload] + [parquet_workload] * parquet
    if jsonl:
        workloads.append(write_jsonl(parquet_workload, scratch / f"table{rows}" / "table.jsonl"))
        print(f"(JSONL: {workloads[-1].input_bytes / 1e6:,.1f} MB)")
    for workload in workloads:
        configs[workload.source_type] = scratch / f"table{rows}-{workload.source_type}.yaml"
        configs[workload.source_type].write_text(config_yaml(workload, str(output), "none"))
    # Every path's figure is MB of the CSV per CPU second: the Parquet
    # builds read the same rows.
    megabytes = csv_workload.input_bytes / 1e6
    print(f"\n{rows:,} rows, {megabytes:,.1f} MB of CSV"
          + (f" ({parquet_workload.input_bytes / 1e6:,.1f} MB of Parquet)" if parquet else ""))
    print(f"{'path':<16} {'wall s':>7} {'cpu s':>7} {'MB/cpu-s':>9} {'rows/s':>9} {'peak MB':>8}")
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
    for _ in range(repeat):
        for name, source_type, pure, pythonpath in paths:
            result, shards = _build(configs[source_type], output, pure, pythonpath)
            # Each source's builds must write the same files.
            if reference.setdefault(source_type, shards) != shards:
                raise SystemExit("the paths (or two runs) wrote different files")
            print(f"{name:<16} {result.wall_s:>7.2f} "
                  f"{result.cpu_s:>7.2f} {megabytes / result.cpu_s:>9.1f} "
                  f"{rows / result.wall_s:>9,.0f} {result.peak_rss / 1e6:>8.0f}")
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
    args = parser.parse_args(argv)
    scratch = args.scratch or pathlib.Path(tempfile.mkdtemp(prefix="bench_native_"))
    try:
        for rows in args.rows:
            run_table(scratch, rows, args.repeat, args.baseline, args.parquet, args.jsonl)
    finally:
        if args.scratch is None:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
