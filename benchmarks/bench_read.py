"""What a build spends reading one CSV table before converting it: the input's content hash, the range plan and the read.

    python benchmarks/bench_read.py PATH [--repeat 5] [--cold] [--baseline PYTHONPATH]

Times, on the CSV file at PATH (read only), the three passes a build makes
over its bytes besides converting them, best of `--repeat`, CPU seconds of
this process (user + system) and wall seconds:

- ``hash``: `input_fingerprint` (the ``xxh3_128`` content token, taken
  before the build, by the cache step, and after the build);
- ``plan``: `plan_table_ranges` at the build's default range size (the
  quote-aware scan for split points);
- ``plan+hash``: both, as the cache step makes them (`plan_fingerprinted`,
  one read, where the code has it; else the two passes);
- ``read``: `iter_csv` over every planned range with ``columns=True``,
  as the cache step reads them (the native run check included where the
  extension is present).

Each pass starts with the file in the page cache (read through once
first), as the first three passes of a build find it, or with `--cold`
out of it (`posix_fadvise` DONTNEED of this file only), as the check
after a build finds it: the reader drops what it read.

`--baseline` runs the same passes with another checkout first on
PYTHONPATH, in a child process, alternating with this one round by
round, and prints both and their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from child_process import best_of_rounds, print_passes, run_in_child

# The passes, in the order a build makes them.
PASSES = ("hash", "plan", "plan+hash", "read")


def _warm(path: str, cold: bool) -> None:
    """Puts the file in the page cache (or, `cold`, out of it)."""
    with open(path, "rb", buffering=0) as fileobj:
        if cold:
            os.posix_fadvise(fileobj.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            return
        while fileobj.read(8 << 20):
            pass


def _passes(path: str):
    """name -> a function making that pass over the file."""
    import fsspec

    from recordforge.transforms.readers import csv, tables
    from recordforge.transforms.readers.inputs import input_fingerprint
    from recordforge.transforms.readers.tables import plan_table_ranges

    fs = fsspec.filesystem("file")
    units = plan_table_ranges(fs, path, "csv")  # planned here: `read` times the read alone

    def read():
        rows = 0
        for unit in units:
            for item in csv.iter_csv(path, start=unit.start, end=unit.end,
                                     start_line=unit.start_line, fs=fs, columns=True):
                rows += len(item) if hasattr(item, "column_names") else 1
        return rows

    def plan():
        return [unit[2:] for unit in plan_table_ranges(fs, path, "csv")]

    def plan_and_hash():
        fused = getattr(tables, "plan_fingerprinted", None)  # absent from older code
        if fused is None:
            return plan(), input_fingerprint(fs, path)["content"]
        units, version = fused(fs, path, "csv")
        if units is None:  # one read would not serve both (a file of one range): planned apart
            units = plan_table_ranges(fs, path, "csv")
        return [unit[2:] for unit in units], version["content"]

    return {"hash": lambda: input_fingerprint(fs, path)["content"], "plan": plan,
            "plan+hash": plan_and_hash, "read": read}


def measure(path: str, cold: bool) -> dict:
    """One round: {pass: [cpu seconds, wall seconds, what it returned]}."""
    results = {}
    for name, run in _passes(path).items():
        _warm(path, cold)
        cpu, wall = time.process_time(), time.perf_counter()
        value = run()
        results[name] = [time.process_time() - cpu, time.perf_counter() - wall, value]
    return results


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--cold", action="store_true")
    parser.add_argument("--baseline", help="a PYTHONPATH whose recordforge is the code to "
                        "compare with, run alternately")
    parser.add_argument("--round", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.round:
        print(json.dumps(measure(args.path, args.cold)))
        return
    sides = {"this": None} if args.baseline is None else {"baseline": args.baseline,
                                                           "this": None}
    arguments = [args.path, "--round"] + (["--cold"] if args.cold else [])
    best = best_of_rounds(args.repeat, sides,
                          lambda pythonpath: run_in_child(__file__, arguments, pythonpath))
    size = os.path.getsize(args.path)
    print(f"{args.path}: {size / 1e6:.1f} MB, {'cold' if args.cold else 'warm'} page cache, "
          f"best of {args.repeat}, load average {os.getloadavg()[0]:.2f}")
    print_passes(best, PASSES,
                 lambda figures: f"cpu {figures[0]:.3f} s wall {figures[1]:.3f} s")


if __name__ == "__main__":
    main()
