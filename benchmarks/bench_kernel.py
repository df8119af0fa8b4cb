"""The CSV table kernel alone: `convert_checked_run` over a table's checked runs.

    python benchmarks/bench_kernel.py PATH [--rounds 5] [--mb 0] [--baseline PYTHONPATH]

Reads the CSV table at PATH (the end-to-end benchmark's five-column table,
`e2e_workloads.TABLE_FEATURES`, keyed by ``id``) as the reader cuts it
(`iter_csv`: `CsvRunBatch` runs, each checked by `check_csv_run`), compiles
the build's plan (`NativeRows`, with a digest salt, as a build has), and
times the kernel's call alone, `convert_checked_run(checked, plan)`, over
every run: CPU seconds of this process, best of three passes per round.
The answer compared between rounds and sides is a sha256 over every
call's framed Examples, offsets, keys, digests and packed checked columns.

`--baseline` runs the same in a child process with another checkout first
on PYTHONPATH, alternating round by round (baseline first), and prints
each round's figures, the best of each side and their ratio.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pathlib
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from e2e_workloads import LABELS, TABLE_FEATURES  # noqa: E402


def _kernel_inputs(path: str, limit: int):
    """(kernel, plan, checked runs, rows) for the table at `path`."""
    from recordforge.schemas.feature_config import parse_features
    from recordforge.transforms.native_rows import NativeRows
    from recordforge.transforms.readers.csv import iter_csv

    specs = parse_features({name: {**body, "from": name} for name, body in TABLE_FEATURES.items()},
                           nested=False)
    rows = NativeRows(specs, {"label": list(LABELS)}, "id", "id", salt=b"bench_table")
    if rows._native is None:
        sys.exit("the native extension is not loaded")
    runs, size = [], 0
    for item in iter_csv(path, columns=True):
        if isinstance(item, dict) or item.checked is None:
            continue
        runs.append(item)
        size += len(item.run)
        if limit and size >= limit:
            break
    plan = rows._plan(runs[0].column_names())
    if plan is None:
        sys.exit("the kernel does not cover the table's schema")
    return rows._native, plan[0], [run.checked for run in runs], sum(map(len, runs))


def _update(digest, answer) -> None:
    """Adds one call's answer to `digest`."""
    framed, offsets, keys, columns, digests, declined = answer
    for part in (framed, offsets, digests or b"", str(declined).encode()):
        digest.update(part)
    for key in keys:
        digest.update(key or b"-")
    for column in columns:
        digest.update(repr(column).encode() if isinstance(column, (list, tuple)) else column)


def measure(path: str, passes: int, limit: int) -> list:
    """[best CPU seconds of the calls, rows, answer sha256] over `passes`.
    Each call's answer is dropped before the next call (as a build drops
    a batch's), so the table's answers are never held at once."""
    native, plan, runs, rows = _kernel_inputs(path, limit)
    best, digest = None, hashlib.sha256()
    for number in range(passes):
        spent = 0.0
        for run in runs:
            cpu = time.process_time()
            answer = native.convert_checked_run(run, plan)
            spent += time.process_time() - cpu
            if number == 0:
                _update(digest, answer)
            del answer
        best = spent if best is None else min(best, spent)
    return [best, rows, digest.hexdigest()]


def _child(path: str, mb: int, pythonpath: str | None) -> list:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    command = [sys.executable, __file__, path, "--mb", str(mb), "--round"]
    return json.loads(subprocess.run(command, env=env, check=True, capture_output=True,
                                     text=True).stdout)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--mb", type=int, default=0, help="MB of the table to convert (0: all)")
    parser.add_argument("--baseline", help="a PYTHONPATH whose recordforge is the code to "
                        "compare with, run alternately")
    parser.add_argument("--round", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.round:
        print(json.dumps(measure(args.path, 3, args.mb << 20)))
        return
    sides = {"this": None} if args.baseline is None else {"baseline": args.baseline,
                                                           "this": None}
    best: dict[str, list] = {}
    for number in range(args.rounds):
        figures = []
        for side, pythonpath in sides.items():
            cpu, rows, answer = _child(args.path, args.mb, pythonpath)
            figures.append(f"{side} {cpu:.3f} s")
            seen = best.setdefault(side, [cpu, rows, answer])
            seen[0] = min(seen[0], cpu)
            if seen[1:] != [rows, answer]:
                sys.exit(f"{side}: its answer differs from an earlier round's")
        print(f"round {number + 1}: " + ", ".join(figures), flush=True)
    print(f"{args.path}: {best['this'][1]} rows, best of {args.rounds} rounds of 3 passes, "
          f"load average {os.getloadavg()[0]:.2f}")
    for side, (cpu, rows, _) in best.items():
        print(f"{side:8s} cpu {cpu:.3f} s ({cpu / rows * 1e9:.0f} ns/row)")
    if args.baseline is not None:
        if best["this"][2] != best["baseline"][2]:
            sys.exit("this code's answer differs from the baseline's")
        print(f"cpu ratio {best['baseline'][0] / best['this'][0]:.3f}x")


if __name__ == "__main__":
    main()
