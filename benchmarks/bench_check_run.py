"""The native CSV run check alone (`check_csv_run`), or the table kernel alone, over a table's plain runs.

    python benchmarks/bench_check_run.py PATH [--repeat 7] [--mb 128] [--baseline PYTHONPATH]
    python benchmarks/bench_check_run.py PATH --convert [...]

Cuts the first `--mb` MB of the CSV file at PATH (read only; its header
line skipped; held in memory twice, so kept to a part of a large table) into runs
of whole lines of about the reader's block size (`readers/ranges.py`
`BLOCK`), as `_iter_csv_batches` hands them to `_plain_csv_rows`, holds
them in memory, and times `check_csv_run(run, width)` over all of them,
best of `--repeat`, CPU seconds of this process. The answer compared
between rounds and sides is the rows found and the runs refused.

`--convert` times the table kernel's call instead,
`convert_checked_run(checked, plan)` on every run the check took, with
the plan a build compiles for the end-to-end benchmark's five-column
table (`e2e_workloads.TABLE_FEATURES`, keyed by ``id``, with a digest
salt), which PATH must hold; its answer is also a sha256 of every call's
framed Examples, offsets, keys, checked columns and digests. Each call's
answer is dropped before the next, as a build drops a batch's.

`--baseline` runs the same in a child process with another checkout first
on PYTHONPATH, alternating round by round, and prints both and the ratio.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from child_process import run_in_child
from e2e_workloads import LABELS, TABLE_FEATURES


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


def measure(path: str, repeat: int, limit: int, convert: bool = False) -> list:
    """[best CPU seconds, rows found, runs refused (and with `convert` the
    answers' sha256)] over `repeat` passes."""
    from recordforge.schemas.native import kernels

    native = kernels()
    if native is None:
        sys.exit("the native extension is not loaded")
    runs, width = _runs(path, limit)
    if convert:
        return _measure_convert(native, path, runs, width, repeat)
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


def _measure_convert(native, path: str, runs: list[bytes], width: int, repeat: int) -> list:
    from recordforge.schemas.feature_config import parse_features
    from recordforge.transforms.native_rows import NativeRows

    with open(path, "rb") as fileobj:
        names = tuple(fileobj.readline().decode("utf-8").rstrip("\r\n").split(","))
    specs = parse_features({name: {**body, "from": name} for name, body in TABLE_FEATURES.items()},
                           nested=False)
    rows = NativeRows(specs, {"label": list(LABELS)}, "id", "id", salt=b"bench_table")
    plan = rows._plan(names)
    if plan is None:
        sys.exit("the kernel does not cover the table's schema")
    checked = [native.check_csv_run(run, width) for run in runs]
    taken = [run for run in checked if run is not None]
    best, digest = None, hashlib.sha256()
    for number in range(repeat):
        spent = 0.0
        for run in taken:
            cpu = time.process_time()
            answer = native.convert_checked_run(run, plan[0])
            spent += time.process_time() - cpu
            if number == 0:
                _add_answer(digest, answer)
            del answer
        best = spent if best is None else min(best, spent)
    return [best, sum(map(len, taken)), len(checked) - len(taken), digest.hexdigest()]


def _add_answer(digest, answer) -> None:
    framed, offsets, keys, columns, digests, declined = answer
    for part in (framed, offsets, digests or b"", str(declined).encode()):
        digest.update(part)
    for key in keys:
        digest.update(key or b"-")
    for column in columns:
        digest.update(repr(column).encode() if isinstance(column, (list, tuple)) else column)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--mb", type=int, default=128, help="MB of the file to check")
    parser.add_argument("--baseline", help="a PYTHONPATH whose recordforge is the code to "
                        "compare with, run alternately")
    parser.add_argument("--convert", action="store_true",
                        help="time the table kernel's convert_checked_run instead of the check")
    parser.add_argument("--round", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.round:
        # One round is three passes (the best kept): the runs are cut once per round.
        print(json.dumps(measure(args.path, 3, args.mb << 20, args.convert)))
        return
    sides = {"this": None} if args.baseline is None else {"baseline": args.baseline,
                                                           "this": None}
    best: dict[str, list] = {}
    rounds: dict[str, list[float]] = {}
    arguments = [args.path, "--mb", str(args.mb), "--round"] + ["--convert"] * args.convert
    for _ in range(args.repeat):
        for side, pythonpath in sides.items():
            cpu, *answer = run_in_child(__file__, arguments, pythonpath)
            rounds.setdefault(side, []).append(cpu)
            seen = best.setdefault(side, [cpu, answer])
            seen[0] = min(seen[0], cpu)
            if seen[1] != answer:
                sys.exit(f"{side}: {answer!r} differs from an earlier round's {seen[1]!r}")
    size = min(os.path.getsize(args.path), args.mb << 20)
    print(f"{args.path}: first {size / 1e6:.1f} MB, best of {args.repeat} rounds of 3, "
          f"load average {os.getloadavg()[0]:.2f}")
    for side in sides:
        cpu, (rows, refused, *_) = best[side]
        print(f"{side:8s} cpu {cpu:.3f} s ({size / 1e6 / cpu:.0f} MB/s, {cpu / rows * 1e9:.0f} ns/row), "
              f"{rows} rows, {refused} runs refused; rounds "
              + " ".join(f"{seconds:.3f}" for seconds in rounds[side]))
    if args.baseline is not None:
        if best["this"][1] != best["baseline"][1]:
            sys.exit("this code's answer differs from the baseline's")
        print(f"cpu ratio {best['baseline'][0] / best['this'][0]:.2f}x")


if __name__ == "__main__":
    main()
