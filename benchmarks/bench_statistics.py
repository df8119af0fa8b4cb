"""What statistics cost a build: the same build with and without them, in alternating runs.

    python benchmarks/bench_statistics.py [--rows 1000000] [--images 1000] [--pairs 3]

Generates the end-to-end benchmark's table (CSV) and image set
(`e2e_workloads.make_table`, `make_images`) into a scratch directory, then
builds each with statistics on (the default) and off
(``--set validation.statistics=false``), one worker in one process,
alternating the two so that a slow spell of a shared machine falls on both.
Prints every run's wall time and CPU time (user + system of the build's
process, from `wait4`'s rusage: less disturbed than wall time by other work
on a shared machine) and the ratios of the medians.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
from e2e_workloads import config_yaml, make_images, make_table  # noqa: E402


def build_once(config: Path, output: Path, sets: Sequence[str] = ()) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one build with `sets` (``--set`` values)."""
    shutil.rmtree(output, ignore_errors=True)
    command = [sys.executable, "-m", "recordforge.pipelines.cli", "build", str(config),
               "--output", str(output)]
    for value in sets:
        command += ["--set", value]
    command += ["--", "--direct_running_mode=in_memory", "--direct_num_workers=1"]
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{' '.join(command)} failed")
    return wall, usage.ru_utime + usage.ru_stime


def compare_builds(workloads, scratch: Path, pairs: int, on_sets: Sequence[str],
                   off_sets: Sequence[str], feature: str) -> None:
    """Builds each workload `pairs` times with `on_sets` and with `off_sets`,
    alternating the two (and which goes first) so that a slow spell of a
    shared machine falls on both; prints every run's wall and CPU seconds
    and the ratio of the medians, naming the compared `feature`."""
    for workload in workloads:
        config = scratch / f"{workload.name}.yaml"
        config.write_text(config_yaml(workload, str(scratch / "out"), "none"))
        times = {True: [], False: []}
        for pair in range(pairs):
            for on in ((True, False) if pair % 2 == 0 else (False, True)):
                times[on].append(build_once(config, scratch / "out", on_sets if on else off_sets))
        for index, what in ((0, "wall"), (1, "CPU")):
            on = [run[index] for run in times[True]]
            off = [run[index] for run in times[False]]
            print(f"{workload.name} ({workload.rows:,} rows) {what} s: {feature} on "
                  f"{', '.join(f'{t:.2f}' for t in on)}; off "
                  f"{', '.join(f'{t:.2f}' for t in off)}; median ratio "
                  f"{statistics.median(on) / statistics.median(off):.3f}", flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--scratch", type=Path, default=None)
    args = parser.parse_args(argv)
    scratch = Path(args.scratch or tempfile.mkdtemp(prefix="rf-stats-bench-"))
    workloads = [make_table(scratch / "table", args.rows)[0]]
    if args.images:
        workloads.append(make_images(scratch / "images", args.images))
    try:
        compare_builds(workloads, scratch, args.pairs, (), ("validation.statistics=false",),
                       "statistics")
    finally:
        if args.scratch is None:
            shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
