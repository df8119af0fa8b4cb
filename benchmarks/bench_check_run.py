"""The native CSV run check alone: `check_csv_run` over a table's plain runs.

    python benchmarks/bench_check_run.py PATH [--repeat 7] [--mb 128] [--baseline PYTHONPATH]

Cuts the first `--mb` MB of the CSV file at PATH (read only; its header
line skipped; held in memory twice, so kept to a part of a large table) into runs
of whole lines of about the reader's block size (`readers/ranges.py`
`BLOCK`), as `_iter_csv_batches` hands them to `_plain_csv_rows`, holds
them in memory, and times `check_csv_run(run, width)` over all of them,
best of `--repeat`, CPU seconds of this process. The answer compared
between rounds and sides is the rows found and the runs refused.

`--baseline` runs the same in a child process with another checkout first
on PYTHONPATH, alternating round by round, and prints both and the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time


def _runs(path: str, limit: int) -> tuple[list[bytes], int]:
    """The file's runs of whole lines after the header, and its width."""
    from recordforge.transforms.readers.ranges import BLOCK

    with open(path, "rb") as fileobj:
        header = fileobj.readline()
        data = fileobj.read(limit)
        data = data[:data.rfind(b"\n") + 1]  # whole lines only
    runs, start = [], 0
    while start < len(data):
        cut = data.find(b"\n", start + BLOCK)
        end = len(data) if cut < 0 else cut + 1
        runs.append(data[start:end])
        start = end
    return runs, header.count(b",") + 1


def measure(path: str, repeat: int, limit: int) -> list:
    """[best CPU seconds, rows found, runs refused] over `repeat` passes."""
    from recordforge.schemas.native import kernels

    native = kernels()
    if native is None:
        sys.exit("the native extension is not loaded")
    runs, width = _runs(path, limit)
    best, answer = None, None
    for _ in range(repeat):
        cpu = time.process_time()
        checked = [native.check_csv_run(run, width) for run in runs]
        spent = time.process_time() - cpu
        best = spent if best is None else min(best, spent)
        answer = [sum(len(run) for run in checked if run is not None),
                  sum(run is None for run in checked)]
        del checked
    return [best, *answer]


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
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--mb", type=int, default=128, help="MB of the file to check")
    parser.add_argument("--baseline", help="a PYTHONPATH whose recordforge is the code to "
                        "compare with, run alternately")
    parser.add_argument("--round", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.round:
        # One round is three passes (the best kept): the runs are cut once per round.
        print(json.dumps(measure(args.path, 3, args.mb << 20)))
        return
    sides = {"this": None} if args.baseline is None else {"baseline": args.baseline,
                                                           "this": None}
    best: dict[str, list] = {}
    for _ in range(args.repeat):
        for side, pythonpath in sides.items():
            cpu, *answer = _child(args.path, args.mb, pythonpath)
            seen = best.setdefault(side, [cpu, answer])
            seen[0] = min(seen[0], cpu)
            if seen[1] != answer:
                sys.exit(f"{side}: {answer!r} differs from an earlier round's {seen[1]!r}")
    size = min(os.path.getsize(args.path), args.mb << 20)
    print(f"{args.path}: first {size / 1e6:.1f} MB, best of {args.repeat} rounds of 3, "
          f"load average {os.getloadavg()[0]:.2f}")
    for side in sides:
        cpu, (rows, refused) = best[side]
        print(f"{side:8s} cpu {cpu:.3f} s ({size / 1e6 / cpu:.0f} MB/s), {rows} rows, "
              f"{refused} runs refused")
    if args.baseline is not None:
        if best["this"][1] != best["baseline"][1]:
            sys.exit("this code's answer differs from the baseline's")
        print(f"cpu ratio {best['baseline'][0] / best['this'][0]:.2f}x")


if __name__ == "__main__":
    main()
