"""What duplicate detection costs a build: the same build with it on and off, in alternating runs.

    python benchmarks/bench_duplicates.py [--rows 200000] [--images 3000] [--scenes 2000]
        [--pairs 3]

Generates the end-to-end benchmark's table (CSV) and image set
(`e2e_workloads.make_table`, `make_images`: 200 renders, each repeated) and
distinct natural-looking scenes (`image_scenes.write_scenes`: every image
different, so nothing about the repeated set flatters the hash or the
search) into a scratch directory, then
builds each with ``validation.duplicates`` on and off, one worker in one
process, alternating the two (and which goes first) so that a slow spell
of a shared machine falls on both. Both builds run with the build cache
off (``cache.enabled=false``): duplicate detection reads every input
anyway, and a first build with the cache on also writes its pieces, which
would hide the cost measured here. Prints every run's wall and CPU time
(`bench_statistics.compare_builds`) and the ratios of the medians.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_statistics import compare_builds  # noqa: E402
from e2e_workloads import LABELS, Workload, make_images, make_table  # noqa: E402
from image_scenes import write_scenes  # noqa: E402

OFF = ("cache.enabled=false",)


def make_scenes(directory: Path, count: int) -> Workload:
    """The distinct scenes as an image workload (one shard)."""
    total = write_scenes(directory, count, LABELS)
    rows = sum(1 for _ in directory.rglob("*.jpg"))
    return Workload("scenes", "images", "images", str(directory), rows, total,
                    max(1 << 20, total * 2), 1)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--images", type=int, default=3000)
    parser.add_argument("--scenes", type=int, default=2000,
                        help="scenes rendered (about 3 in 4 are not photo crops and are kept)")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--scratch", type=Path, default=None)
    parser.add_argument("--on", default="true",
                        help="the validation.duplicates value of the builds with it on "
                             "(YAML), e.g. '{near_threshold: null}' for exact duplicates only")
    args = parser.parse_args(argv)
    on_sets = OFF + (f"validation.duplicates={args.on}",)
    scratch = Path(args.scratch or tempfile.mkdtemp(prefix="rf-dupes-bench-"))
    workloads = [make_table(scratch / "table", args.rows)[0]] if args.rows else []
    if args.images:
        workloads.append(make_images(scratch / "images", args.images))
    if args.scenes:
        workloads.append(make_scenes(scratch / "scenes", args.scenes))
    try:
        compare_builds(workloads, scratch, args.pairs, on_sets, OFF, "duplicates")
    finally:
        if args.scratch is None:
            shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
